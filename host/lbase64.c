/* lbase64.c — rlm.core.base64: base64 for files that travel in JSON (MCP uploads and downloads,
 * the Daytona toolbox). In Lua it cost seconds a megabyte.
 *   encode(bytes) -> text
 *   decode(text) -> bytes | nil, "content is not valid base64"   (whitespace is skipped) */
#include <lauxlib.h>

#include "base64.h"

static int l_encode(lua_State *L)
{
    size_t n;
    const char *in = luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    size_t len = base64_encoded_len(n);
    char *out = luaL_buffinitsize(L, &b, len);
    base64_encode((const unsigned char *)in, n, out);
    luaL_pushresultsize(&b, len);
    return 1;
}

static int l_decode(lua_State *L)
{
    size_t n;
    const char *in = luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    unsigned char *out = (unsigned char *)luaL_buffinitsize(L, &b, n / 4 * 3 + 3);
    long got = base64_decode(in, n, out);
    if (got < 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "content is not valid base64");
        return 2;
    }
    luaL_pushresultsize(&b, (size_t)got);
    return 1;
}

static const luaL_Reg base64_funcs[] = {{"encode", l_encode}, {"decode", l_decode}, {NULL, NULL}};

int luaopen_rlm_core_base64(lua_State *L)
{
    luaL_newlib(L, base64_funcs);
    return 1;
}
