/* lhost.c — rlm.core.host: facts about the binary itself.
 *   version                 the rlm version string
 *   resource(path)          an embedded file's bytes ("lua/rlm/driver.py", "skills/x/SKILL.md"),
 *                           or nil; a file under RLM_LUA_PATH overrides a lua/ resource
 *   digest(path)            sys.hash(resource(path)), made when rlm is built for an embedded
 *                           file (a cache key that costs nothing at start), or nil
 *   resources(prefix)       sorted list of embedded paths that start with prefix */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "fnv.h"
#include "host.h"

/* Looks for lua/<rest> as <dir>/<rest> in each RLM_LUA_PATH directory; pushes it if found. */
static int push_override(lua_State *L, const char *path)
{
    const char *dirs = getenv("RLM_LUA_PATH");
    if (dirs == NULL || strncmp(path, "lua/", 4) != 0)
        return 0;
    while (*dirs) {
        const char *colon = strchr(dirs, ':');
        size_t len = colon ? (size_t)(colon - dirs) : strlen(dirs);
        if (len) {
            lua_pushfstring(L, "%s/%s", lua_pushlstring(L, dirs, len), path + 4);
            FILE *f = fopen(lua_tostring(L, -1), "rbe");
            lua_pop(L, 2);
            if (f) {
                luaL_Buffer b;
                luaL_buffinit(L, &b);
                size_t n;
                char *p;
                do {
                    p = luaL_prepbuffer(&b);
                    n = fread(p, 1, LUAL_BUFFERSIZE, f);
                    luaL_addsize(&b, n);
                } while (n > 0);
                fclose(f);
                luaL_pushresult(&b);
                return 1;
            }
        }
        dirs += len + (colon != NULL);
    }
    return 0;
}

static int l_resource(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    if (push_override(L, path))
        return 1;
    const struct embedded_file *f = host_embedded(path);
    if (f == NULL)
        return 0;
    lua_pushlstring(L, (const char *)f->data, f->len);
    return 1;
}

static int l_digest(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    uint64_t h;
    if (push_override(L, path)) {
        size_t len;
        const char *data = lua_tolstring(L, -1, &len);
        h = fnv1a64(data, len);
    } else {
        const struct embedded_file *f = host_embedded(path);
        if (f == NULL)
            return 0;
        h = f->digest;
    }
    host_push_hash(L, h);
    return 1;
}

static int l_resources(lua_State *L)
{
    size_t plen;
    const char *prefix = luaL_optlstring(L, 1, "", &plen);
    lua_newtable(L);
    lua_Integer n = 0;
    for (size_t i = 0; i < embedded_count; i++)
        if (strncmp(embedded_files[i].path, prefix, plen) == 0) {
            lua_pushstring(L, embedded_files[i].path);
            lua_rawseti(L, -2, ++n);
        }
    return 1;
}

static const luaL_Reg host_funcs[] = {
    {"resource", l_resource}, {"digest", l_digest}, {"resources", l_resources}, {NULL, NULL}};

int luaopen_rlm_core_host(lua_State *L)
{
    luaL_newlib(L, host_funcs);
    lua_pushliteral(L, RLM_VERSION);
    lua_setfield(L, -2, "version");
    return 1;
}
