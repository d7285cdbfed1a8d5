/* lhttp.c — rlm.core.http, plain HTTP for Lua on the request engine (request.h):
 *   start{url=, method=, headers=, body=, timeout=, connect_timeout=, stream=, retries=,
 *         max_bytes=} -> transfer; timeout (seconds, 0 = none) bounds the whole transfer,
 *       retries included; retries (default 0) follow the engine's one policy (request.h);
 *       max_bytes (default 64 MiB) caps the answer's body, streamed or kept
 *   transfer:id()      op id, ready when the transfer ends (and, with stream, on new data)
 *   transfer:done()    true once finished
 *   transfer:take()    body bytes received since the last take (stream mode)
 *   transfer:result()  {status, headers, body, url, seconds, new_connections} | nil, err
 *                      (fail.h; kind: connect, dns, timeout, tls, too_large, transfer)
 *   transfer:cancel()  stops it; also __gc and __close
 * Waiting is lua/rlm/http.lua's job, through lua/rlm/async.lua. */
#include <ctype.h>
#include <math.h>

#include <lauxlib.h>

#include "fail.h"
#include "field.h"
#include "host.h"
#include "request.h"

#define TRANSFER "rlm.http.transfer"
#define DEFAULT_MAX_BYTES (64.0 * 1024 * 1024)

struct transfer {
    struct request *req;
    struct curl_slist *headers;
    lua_Integer id;
    int stream, notified;
    struct buf chunks;
};

static struct transfer *check_transfer(lua_State *L, int arg)
{
    return luaL_checkudata(L, arg, TRANSFER);
}

static void transfer_chunk(void *ud, struct http_call *c, const char *data, size_t len)
{
    struct transfer *t = ud;
    (void)c;
    buf_add(&t->chunks, data, len);
    request_mark_delivered(t->req);   /* the caller may take these bytes: never repeat them */
    if (!t->notified) {
        t->notified = 1;
        loop_ready(c->lp, t->id);
    }
}

static void transfer_done(void *ud, struct request *r)
{
    struct transfer *t = ud;
    loop_ready(r->lp, t->id);
}

static void transfer_release(struct transfer *t)
{
    request_free(t->req);
    t->req = NULL;
    curl_slist_free_all(t->headers);
    t->headers = NULL;
    buf_free(&t->chunks);
}

static int transfer_gc(lua_State *L)
{
    transfer_release(check_transfer(L, 1));
    return 0;
}

/* headers = {["Name"] = "value", ...} or {"Name: value", ...}; [-0, +0] */
static void read_headers(lua_State *L, int req, struct transfer *t)
{
    if (lua_getfield(L, req, "headers") == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            if (lua_type(L, -2) == LUA_TSTRING) {
                const char *name = lua_tostring(L, -2);
                const char *value = luaL_tolstring(L, -1, NULL);
                http_add_header(L, &t->headers, lua_pushfstring(L, "%s: %s", name, value));
                lua_pop(L, 2);
            } else {
                http_add_header(L, &t->headers, luaL_checkstring(L, -1));
            }
            lua_pop(L, 1);
        }
    } else if (!lua_isnil(L, -1)) {
        luaL_error(L, "request field 'headers' must be a table");
    }
    lua_pop(L, 1);
    /* curl would otherwise wait for "100 Continue" before sending larger bodies. */
    http_add_header(L, &t->headers, "Expect:");
}

static int l_start(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    loop *lp = loop_get(L);
    struct transfer *t = lua_newuserdatauv(L, sizeof *t, 1);
    memset(t, 0, sizeof *t);
    luaL_setmetatable(L, TRANSFER);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);   /* keeps url and body strings alive for curl */
    struct request_spec spec = {.backoff_base_ms = 500, .backoff_cap_ms = 16000, .ud = t};
    struct http_req *req = &spec.http;
    req->url = field_string(L, 1, "url", NULL, NULL);
    if (req->url == NULL)
        return luaL_error(L, "request needs a 'url'");
    req->method = field_string(L, 1, "method", NULL, NULL);
    req->body = field_string(L, 1, "body", NULL, &req->body_len);
    double timeout = field_number(L, 1, "timeout", 120);
    req->connect_timeout_ms = (long)(field_number(L, 1, "connect_timeout", 10) * 1e3);
    double max_bytes = field_number(L, 1, "max_bytes", DEFAULT_MAX_BYTES);
    if (max_bytes < 1 || max_bytes > 1e15)
        return luaL_error(L, "request 'max_bytes' must be a positive byte count");
    req->max_answer = (size_t)max_bytes;
    spec.max_attempts = 1 + (int)field_number(L, 1, "retries", 0);
    lua_getfield(L, 1, "stream");
    t->stream = lua_toboolean(L, -1);
    lua_pop(L, 1);
    read_headers(L, 1, t);
    req->headers = t->headers;
    t->id = loop_new_id(lp);
    spec.deadline_ms = timeout > 0 ? loop_now_ms() + timeout * 1e3 : HUGE_VAL;
    spec.on_chunk = t->stream ? transfer_chunk : NULL;
    spec.done = transfer_done;
    t->req = request_start(lp, &spec);
    if (t->req == NULL || t->req->call == NULL)
        return luaL_error(L, "cannot start a request to %s (bad URL or out of memory)", req->url);
    return 1;
}

static int t_id(lua_State *L)
{
    lua_pushinteger(L, check_transfer(L, 1)->id);
    return 1;
}

static int t_done(lua_State *L)
{
    struct transfer *t = check_transfer(L, 1);
    lua_pushboolean(L, t->req == NULL || t->req->finished);
    return 1;
}

static int t_take(lua_State *L)
{
    struct transfer *t = check_transfer(L, 1);
    lua_pushlstring(L, t->chunks.data ? t->chunks.data : "", t->chunks.len);
    buf_clear(&t->chunks);
    t->notified = 0;
    return 1;
}

static int push_header(void *ud, const char *name, size_t nlen, const char *val, size_t vlen)
{
    lua_State *L = ud;                       // [..., headers]
    char lower[256];
    if (nlen >= sizeof lower)
        return 0;
    for (size_t i = 0; i < nlen; i++)
        lower[i] = (char)tolower((unsigned char)name[i]);
    lua_pushlstring(L, lower, nlen);
    if (lua_rawget(L, -2) == LUA_TSTRING) {  /* repeated header: join as HTTP allows */
        lua_pushliteral(L, ", ");
        lua_pushlstring(L, val, vlen);
        lua_concat(L, 3);
    } else {
        lua_pop(L, 1);
        lua_pushlstring(L, val, vlen);
    }
    lua_pushlstring(L, lower, nlen);
    lua_insert(L, -2);
    lua_rawset(L, -3);
    return 0;
}

static int t_result(lua_State *L)
{
    struct transfer *t = check_transfer(L, 1);
    if (t->req == NULL)
        return luaL_error(L, "transfer was cancelled");
    if (!t->req->finished)
        return luaL_error(L, "transfer is still running; wait for it first");
    struct http_call *c = t->req->call;
    if (c->result != CURLE_OK) {
        lua_pushstring(L, http_failure_message(c));
        return fail_return(L, http_failure_kind(c), 0, -1);
    }
    lua_createtable(L, 0, 6);
    lua_pushinteger(L, c->status);
    lua_setfield(L, -2, "status");
    lua_newtable(L);
    http_each_header(c, push_header, L);
    lua_setfield(L, -2, "headers");
    lua_pushlstring(L, c->body.data ? c->body.data : "", c->body.len);
    lua_setfield(L, -2, "body");
    lua_pushstring(L, http_url(c));
    lua_setfield(L, -2, "url");
    lua_pushnumber(L, c->seconds);
    lua_setfield(L, -2, "seconds");
    lua_pushinteger(L, c->new_connections);
    lua_setfield(L, -2, "new_connections");
    return 1;
}

static int t_cancel(lua_State *L)
{
    transfer_release(check_transfer(L, 1));
    return 0;
}

static const luaL_Reg http_funcs[] = {{"start", l_start}, {NULL, NULL}};

static const luaL_Reg transfer_methods[] = {
    {"id", t_id},         {"done", t_done},     {"take", t_take},
    {"result", t_result}, {"cancel", t_cancel}, {NULL, NULL}};

static const luaL_Reg transfer_metamethods[] = {
    {"__gc", transfer_gc}, {"__close", transfer_gc}, {"__index", NULL}, {NULL, NULL}};

int luaopen_rlm_core_http(lua_State *L)
{
    netlib_curl(L);
    loop_get(L);
    host_newclass(L, TRANSFER, transfer_metamethods, transfer_methods);
    luaL_newlib(L, http_funcs);
    return 1;
}
