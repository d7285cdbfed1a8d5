/* lredact.c — rlm.core.redact: known secrets out of text and out of records.
 *   text(s, secrets)   s with every occurrence of each secret replaced by "[redacted]", the
 *                      secrets (a list of strings) taken in order, each over the text the
 *                      ones before it left
 *   copy(t, secrets)   a copy of table t, nested tables copied too and metatables kept, whose
 *                      string values are redacted as by text (keys are kept as they are)
 *
 * The policy (which values are secrets) is lua/rlm/trace.lua's. A trajectory writes a copy of
 * every record: in Lua the walk cost more than the rest of a sub-call's bookkeeping. */
#include <string.h>

#include <lauxlib.h>

#include "json.h"

#define MARK "[redacted]"
#define MAX_DEPTH JSON_MAX_DEPTH   /* deeper, a record could not be written: it refers to itself */

struct secrets {
    size_t n;
    const char **text;          /* kept alive by the list, which stays on the stack */
    size_t *len;
};

/* Reads the list at idx (strings; an empty one stands for nothing). */
static void read_secrets(lua_State *L, int idx, struct secrets *s)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_Integer n = luaL_len(L, idx);
    s->n = 0;
    s->text = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *s->text, 0);
    s->len = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *s->len, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, idx, i) != LUA_TSTRING)
            luaL_error(L, "redact: secret %d is not a string", (int)i);
        size_t len;
        const char *text = lua_tolstring(L, -1, &len);
        lua_pop(L, 1);          /* the list holds it */
        if (len > 0) {
            s->text[s->n] = text;
            s->len[s->n++] = len;
        }
    }
}

/* Pushes the string at idx with every secret replaced; the string itself when none occurs. */
static void push_redacted(lua_State *L, int idx, const struct secrets *s)
{
    idx = lua_absindex(L, idx);
    lua_pushvalue(L, idx);
    for (size_t i = 0; i < s->n; i++) {
        size_t len;
        const char *text = lua_tolstring(L, -1, &len);
        const char *hit = memmem(text, len, s->text[i], s->len[i]);
        if (hit == NULL)
            continue;
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        const char *p = text, *end = text + len;
        do {
            luaL_addlstring(&b, p, (size_t)(hit - p));
            luaL_addlstring(&b, MARK, sizeof MARK - 1);
            p = hit + s->len[i];
        } while ((hit = memmem(p, (size_t)(end - p), s->text[i], s->len[i])) != NULL);
        luaL_addlstring(&b, p, (size_t)(end - p));
        luaL_pushresult(&b);
        lua_remove(L, -2);      /* the text before this secret */
    }
}

/* Pushes the redacted copy of the table at idx. */
static void push_copy(lua_State *L, int idx, const struct secrets *s, int depth)
{
    if (depth > MAX_DEPTH)
        luaL_error(L, "redact: a record nested more than %d deep (does it contain itself?)",
                   MAX_DEPTH);
    luaL_checkstack(L, 6, "redact: a record nested too deep");
    idx = lua_absindex(L, idx);
    lua_createtable(L, (int)lua_rawlen(L, idx), 0);
    int copy = lua_gettop(L);
    if (lua_getmetatable(L, idx))
        lua_setmetatable(L, copy);
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
        lua_pushvalue(L, -2);   /* key */
        switch (lua_type(L, -2)) {
        case LUA_TSTRING:
            push_redacted(L, -2, s);
            break;
        case LUA_TTABLE:
            push_copy(L, -2, s, depth + 1);
            break;
        default:
            lua_pushvalue(L, -2);
        }
        lua_rawset(L, copy);
    }
}

static int l_text(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TSTRING);
    struct secrets s;
    read_secrets(L, 2, &s);
    push_redacted(L, 1, &s);
    return 1;
}

static int l_copy(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct secrets s;
    read_secrets(L, 2, &s);
    push_copy(L, 1, &s, 0);
    return 1;
}

static const luaL_Reg redact_funcs[] = {{"text", l_text}, {"copy", l_copy}, {NULL, NULL}};

int luaopen_rlm_core_redact(lua_State *L)
{
    luaL_newlib(L, redact_funcs);
    return 1;
}
