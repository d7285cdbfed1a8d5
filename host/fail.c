/* fail.c — see fail.h. */
#include <errno.h>
#include <string.h>

#include <lauxlib.h>

#include "fail.h"

#define FAIL_META "rlm.error"

static int fail_tostring(lua_State *L)
{
    if (lua_getfield(L, 1, "message") != LUA_TSTRING) {
        lua_pop(L, 1);
        lua_pushliteral(L, "error");
    }
    return 1;
}

static int fail_concat(lua_State *L)
{
    luaL_tolstring(L, 1, NULL);
    luaL_tolstring(L, 2, NULL);
    lua_concat(L, 2);
    return 1;
}

static void push_metatable(lua_State *L)
{
    if (luaL_newmetatable(L, FAIL_META)) {
        lua_pushcfunction(L, fail_tostring);
        lua_setfield(L, -2, "__tostring");
        lua_pushcfunction(L, fail_concat);
        lua_setfield(L, -2, "__concat");
    }
}

void fail_set_metatable(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    push_metatable(L);
    lua_setmetatable(L, idx);
}

int fail_is(lua_State *L, int idx)
{
    int yes = 0;
    if (lua_getmetatable(L, idx)) {
        push_metatable(L);
        yes = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
    }
    return yes;
}

void fail_push(lua_State *L, const char *kind, long status, double retry_after)
{
    lua_createtable(L, 0, 4);                // [msg, err]
    lua_insert(L, -2);                       // [err, msg]
    lua_setfield(L, -2, "message");
    lua_pushstring(L, kind);
    lua_setfield(L, -2, "kind");
    if (status > 0) {
        lua_pushinteger(L, status);
        lua_setfield(L, -2, "status");
    }
    if (retry_after >= 0) {   /* whole seconds (the common case) as an integer */
        if (retry_after == (double)(lua_Integer)retry_after)
            lua_pushinteger(L, (lua_Integer)retry_after);
        else
            lua_pushnumber(L, retry_after);
        lua_setfield(L, -2, "retry_after");
    }
    fail_set_metatable(L, -1);
}

int fail_return(lua_State *L, const char *kind, long status, double retry_after)
{
    fail_push(L, kind, status, retry_after);
    luaL_pushfail(L);
    lua_insert(L, -2);
    return 2;
}

int fail_errno(lua_State *L, const char *what)
{
    int e = errno;
    luaL_pushfail(L);
    lua_pushfstring(L, "%s: %s", what, strerror(e));
    lua_pushinteger(L, e);
    return 3;
}
