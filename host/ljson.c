/* ljson.c — rlm.core.json, the Lua face of json.h:
 *   encode(v[, {indent = n, sort_keys = false}]) -> text  raises on values JSON cannot hold;
 *                         object keys in byte order, unless sort_keys is false (table order,
 *                         which differs from one process to the next) 
 *   decode(text) -> value | nil, message                  malformed JSON is an expected branch
 *   null                  the NULL light userdata, the same value as cjson.null
 *   array_mt, object_mt   metatables of decoded arrays and objects
 *   array([t]), object([t]) -> t with that metatable (a new table when t is nil)
 *   is_array(v)           true when v would encode as a JSON array
 *   utf8_count(s) -> n | nil  the characters of valid UTF-8 text, as utf8.len counts them,
 *                         eight ASCII bytes at a time (a 1 GB context); nil when not UTF-8 */
#include <string.h>

#include <lauxlib.h>

#include "json.h"

static void check_opts(lua_State *L, int arg, struct json_encode_opts *o)
{
    memset(o, 0, sizeof *o);
    if (lua_isnoneornil(L, arg))
        return;
    luaL_checktype(L, arg, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, arg)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
        if (strcmp(name, "indent") == 0) {
            lua_Integer n = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : -1;
            if (!lua_isnil(L, -1) && lua_toboolean(L, -1) && (n < 0 || n > 16))
                luaL_argerror(L, arg, "indent must be an integer from 0 to 16");
            o->indent = n > 0 ? (int)n : 0;
        } else if (strcmp(name, "sort_keys") == 0) {
            o->hash_order = !lua_toboolean(L, -1) && !lua_isnil(L, -1);
        } else {
            luaL_argerror(L, arg, lua_pushfstring(L, "unknown option '%s'", name));
        }
        lua_pop(L, 1);
    }
}

static int l_encode(lua_State *L)
{
    char err[256];
    struct json_encode_opts opts;
    luaL_checkany(L, 1);
    check_opts(L, 2, &opts);
    if (!json_encode(L, 1, &opts, err, sizeof err))
        return luaL_error(L, "json.encode: %s", err);
    return 1;
}

static int l_decode(lua_State *L)
{
    char err[256];
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    if (!json_decode(L, s, len, err, sizeof err)) {
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    return 1;
}

/* Sets the metatable pushed by push_mt on argument 1 (or a new table) and returns it. */
static int mark(lua_State *L, void (*push_mt)(lua_State *L))
{
    if (lua_isnoneornil(L, 1)) {
        lua_settop(L, 0);
        lua_newtable(L);
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    push_mt(L);
    lua_setmetatable(L, 1);
    return 1;
}

static int l_array(lua_State *L)
{
    return mark(L, json_push_array_mt);
}

static int l_object(lua_State *L)
{
    return mark(L, json_push_object_mt);
}

static int l_is_array(lua_State *L)
{
    luaL_checkany(L, 1);
    lua_pushboolean(L, json_is_array(L, 1));
    return 1;
}

static int l_utf8_count(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    long long n = json_utf8_count(s, len);
    if (n < 0)
        luaL_pushfail(L);
    else
        lua_pushinteger(L, (lua_Integer)n);
    return 1;
}

static const luaL_Reg json_funcs[] = {
    {"encode", l_encode},
    {"decode", l_decode},
    {"array", l_array},
    {"object", l_object},
    {"is_array", l_is_array},
    {"utf8_count", l_utf8_count},
    {NULL, NULL}};

int luaopen_rlm_core_json(lua_State *L)
{
    luaL_newlib(L, json_funcs);
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    json_push_array_mt(L);
    lua_setfield(L, -2, "array_mt");
    json_push_object_mt(L);
    lua_setfield(L, -2, "object_mt");
    return 1;
}
