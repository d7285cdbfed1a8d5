/* ldaytona.c — rlm.core.daytona: the wire side of the Daytona REST API (control plane and the
 * in-sandbox toolbox), on the shared curl layer (http.h) and the event loop.
 *
 *   client{api_key= | jwt_token= & organization_id=, source=, hint=} -> client
 *       holds the credentials in C, so no Lua table (and no trajectory) ever carries them;
 *       hint says what to check when they are refused (where they came from is Lua's policy)
 *   client:request{method=, base=, path= "/x" | {segment, ...}, query= {k = v},
 *                  json= value | parts= {{name=, data=, filename=, content_type=}, ...},
 *                  accept=, raw=, timeout=, deadline=, retries=, idempotent=,
 *                  retry_conflict=} -> op
 *   op:id()        op id, ready when the call has finished (after any retries)
 *   op:done()      true once finished
 *   op:result()    value, {status=, attempts=} | nil, err
 *                  value: the decoded JSON, true for an empty body, the body string with raw
 *                  or for a text/plain answer,
 *                  or for a multipart response a list of {name=, filename=, content_type=,
 *                  data=} where an "error" part with a JSON body also gets error = err
 *   op:cancel()    stops it; also __gc and __close
 *   error{kind=, status=, code=, message=, retryable=} -> err   (for Lua's own errors)
 *   is_error(v) -> boolean
 *
 * err is the host's one error shape (fail.h), {kind, status (nil for transport failures),
 * message, retry_after}, with Daytona's code, retryable and attempts; tostring(err) is the
 * message. Path segments and query values are percent-escaped here; a query value that is
 * a list repeats its key (the states filter), one that is a map is sent as JSON (labels).
 * Retries follow the request engine's one policy (request.h): idempotent=true marks a POST
 * as safe to repeat, retry_conflict=true also retries 409 (a sandbox still changing state);
 * all within the deadline (seconds, the whole call) with each attempt capped by timeout. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>

#include "daytona_wire.h"
#include "fail.h"
#include "field.h"
#include "host.h"
#include "json.h"
#include "request.h"

/* A sandbox's file comes back whole (the toolbox has no ranges), so Daytona's answers may be
 * far bigger than a model's; still no server's answer grows rlm without end. */
#define DAYTONA_MAX_ANSWER ((size_t)1 << 30)
#define CLIENT "rlm.daytona.client"
/* The official SDK release whose wire format rlm speaks (tests/sdk pins the same one). The
 * daemon shapes some answers by it: without it, command logs come as plain text rather than
 * JSON with stdout and stderr apart (apps/daemon/pkg/session/common.go, SkipServerDemux). */
#define SDK_VERSION "0.218.0"
#define SDK_VERSION_HEADER "X-Daytona-SDK-Version: " SDK_VERSION
#define OP "rlm.daytona.op"

#define BACKOFF_BASE_MS 250.0
#define BACKOFF_CAP_MS 8000.0

struct client {
    char *auth;     /* "Authorization: Bearer <token>" */
    char *org;      /* "X-Daytona-Organization-ID: <id>" in JWT mode */
    char *source;   /* "X-Daytona-Source: <label>" */
    char *secret;   /* the token, scrubbed from every message */
    char *hint;     /* what to check when the credentials are refused (names are Lua's policy) */
};

struct op {
    loop *lp;
    lua_Integer id;
    struct request *req;
    struct curl_slist *headers;
    struct buf url, body, scratch;
    char *method;
    char *what;                 /* "METHOD url-without-query", for messages */
    char *secret;
    char *hint;                 /* what to check when the credentials are refused */
    int has_body, raw;
};

/* ---------- credentials ---------- */

static struct client *check_client(lua_State *L, int arg)
{
    struct client *c = luaL_checkudata(L, arg, CLIENT);
    if (c->auth == NULL)
        luaL_error(L, "the Daytona client is closed");
    return c;
}

static void client_release(struct client *c)
{
    host_free_secret(c->auth);
    host_free_secret(c->secret);
    free(c->org);
    free(c->source);
    free(c->hint);
    c->auth = c->org = c->source = c->secret = c->hint = NULL;
}

static int client_gc(lua_State *L)
{
    client_release(luaL_checkudata(L, 1, CLIENT));
    return 0;
}

static int client_tostring(lua_State *L)
{
    struct client *c = luaL_checkudata(L, 1, CLIENT);
    lua_pushfstring(L, "Daytona client (%s)", c->org ? "JWT" : "API key");
    return 1;
}

/* A header value must not carry a line break, or it would inject headers. */
static const char *field_token(lua_State *L, int opts, const char *field)
{
    lua_getfield(L, opts, field);
    const char *s = lua_tostring(L, -1);
    lua_pop(L, 1);    /* the options table keeps the string alive */
    if (s && (*s == '\0' || strpbrk(s, "\r\n")))
        luaL_error(L, "Daytona option '%s' is empty or contains a line break", field);
    return s;
}

static char *dup_or_raise(lua_State *L, const char *fmt, const char *v)
{
    size_t n = strlen(fmt) + strlen(v) + 1;
    char *s = malloc(n);
    if (s == NULL)
        luaL_error(L, "out of memory");
    snprintf(s, n, fmt, v);
    return s;
}

static int l_client(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    struct client *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    luaL_setmetatable(L, CLIENT);
    const char *key = field_token(L, 1, "api_key");
    const char *jwt = field_token(L, 1, "jwt_token");
    const char *org = field_token(L, 1, "organization_id");
    const char *source = field_token(L, 1, "source");
    const char *hint = field_token(L, 1, "hint");
    if (key == NULL && jwt == NULL)
        return luaL_error(L, "a Daytona client needs api_key, or jwt_token with organization_id");
    if (key == NULL && org == NULL)
        return luaL_error(L, "a Daytona client with jwt_token needs organization_id");
    const char *token = key ? key : jwt;
    c->hint = dup_or_raise(L, "%s", hint ? hint : "check the credentials");
    c->secret = dup_or_raise(L, "%s", token);
    c->auth = dup_or_raise(L, "Authorization: Bearer %s", token);
    if (key == NULL)
        c->org = dup_or_raise(L, "X-Daytona-Organization-ID: %s", org);
    c->source = dup_or_raise(L, "X-Daytona-Source: %s", source ? source : "rlm");
    return 1;
}

/* ---------- error objects ---------- */

/* The shared error (fail.h) with Daytona's own code and retryable, and the attempts; the
 * message is at the top of the stack and is consumed. [-1, +1] */
static void push_error(lua_State *L, const char *kind, long status, const char *code,
                       int retryable, int attempts, double retry_after)
{
    fail_push(L, kind, status, retry_after);
    lua_pushstring(L, code);
    lua_setfield(L, -2, "code");
    lua_pushboolean(L, retryable);
    lua_setfield(L, -2, "retryable");
    if (attempts > 0) {
        lua_pushinteger(L, attempts);
        lua_setfield(L, -2, "attempts");
    }
}

/* error{kind=, status=, code=, message=, retryable=}: the same shape for Lua's own errors. */
static int l_error(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    fail_set_metatable(L, 1);
    return 1;
}

static int l_is_error(lua_State *L)
{
    lua_pushboolean(L, fail_is(L, 1));
    return 1;
}

/* ---------- ops (the request engine, request.h, decides on retries) ---------- */

static struct op *check_op(lua_State *L, int arg)
{
    return luaL_checkudata(L, arg, OP);
}

static void op_done_cb(void *ud, struct request *r)
{
    struct op *o = ud;
    loop_ready(o->lp, o->id);
}

static void op_release(struct op *o)
{
    request_free(o->req);
    o->req = NULL;
    curl_slist_free_all(o->headers);
    o->headers = NULL;
    buf_free(&o->url);
    buf_free(&o->body);
    buf_free(&o->scratch);
    free(o->what);
    o->what = NULL;
    free(o->method);
    o->method = NULL;
    free(o->hint);
    o->hint = NULL;
    host_free_secret(o->secret);
    o->secret = NULL;
}

static int op_gc(lua_State *L)
{
    op_release(check_op(L, 1));
    return 0;
}

/* ---------- building a request ---------- */

static void oom(lua_State *L, int failed)
{
    if (failed)
        luaL_error(L, "out of memory");
}

/* Appends the value at idx as a query value: strings and numbers as text, tables as JSON. */
static void add_query_value(lua_State *L, struct op *o, int idx)
{
    size_t len;
    const char *s;
    char err[160];
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN:
        s = lua_toboolean(L, idx) ? "true" : "false";
        oom(L, dw_escape(&o->url, s, strlen(s)));
        return;
    case LUA_TTABLE:
        if (!json_encode(L, idx, NULL, err, sizeof err))
            luaL_error(L, "query value: %s", err);
        s = lua_tolstring(L, -1, &len);
        oom(L, dw_escape(&o->url, s, len));
        lua_pop(L, 1);
        return;
    case LUA_TSTRING:
    case LUA_TNUMBER:
        lua_pushvalue(L, idx);
        s = lua_tolstring(L, -1, &len);
        oom(L, dw_escape(&o->url, s, len));
        lua_pop(L, 1);
        return;
    default:
        luaL_error(L, "query values must be strings, numbers, booleans or tables, not %s",
                   luaL_typename(L, idx));
    }
}

/* Query keys go out sorted, so a request's URL is the same on every run. */
static void add_query(lua_State *L, struct op *o, int req)
{
    if (lua_getfield(L, req, "query") == LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    luaL_checktype(L, -1, LUA_TTABLE);
    int q = lua_gettop(L);
    lua_newtable(L);                                     // [query, keys]
    int n = 0;
    for (lua_pushnil(L); lua_next(L, q); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "query keys must be strings");
        lua_pushvalue(L, -2);
        lua_rawseti(L, q + 1, ++n);
    }
    lua_getglobal(L, "table");
    lua_getfield(L, -1, "sort");
    lua_pushvalue(L, q + 1);
    lua_call(L, 1, 0);
    lua_pop(L, 1);
    int first = 1;
    for (int i = 1; i <= n; i++) {
        size_t klen;
        lua_rawgeti(L, q + 1, i);                        // [query, keys, key]
        const char *k = lua_tolstring(L, -1, &klen);
        lua_pushvalue(L, -1);
        lua_gettable(L, q);                              // [query, keys, key, value]
        /* A list goes out as the key repeated (states=a&states=b), which is how the API reads
         * an array parameter; a map (labels) goes out as JSON. */
        lua_Integer items = lua_istable(L, -1) ? (lua_Integer)lua_rawlen(L, -1) : 0;
        for (lua_Integer j = items ? 1 : 0; j <= items; j++) {
            oom(L, buf_add(&o->url, first ? "?" : "&", 1) || dw_escape(&o->url, k, klen) ||
                       buf_add(&o->url, "=", 1));
            first = 0;
            if (items)
                lua_rawgeti(L, -1, j);
            add_query_value(L, o, -1);
            if (items)
                lua_pop(L, 1);
        }
        lua_pop(L, 2);
    }
    lua_pop(L, 2);
}

static void build_url(lua_State *L, struct op *o, int req)
{
    size_t blen;
    lua_getfield(L, req, "base");
    const char *base = lua_tolstring(L, -1, &blen);
    if (base == NULL || blen == 0)
        luaL_error(L, "request needs a 'base' URL");
    while (blen > 0 && base[blen - 1] == '/')
        blen--;
    oom(L, buf_add(&o->url, base, blen));
    lua_pop(L, 1);
    int t = lua_getfield(L, req, "path");
    if (t == LUA_TSTRING) {
        size_t plen;
        const char *p = lua_tolstring(L, -1, &plen);
        if (plen > 0 && p[0] != '/')
            oom(L, buf_add(&o->url, "/", 1));
        oom(L, buf_add(&o->url, p, plen));
    } else if (t == LUA_TTABLE) {
        lua_Integer n = luaL_len(L, -1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, -1, i);
            size_t slen;
            const char *s = lua_tolstring(L, -1, &slen);
            if (s == NULL || slen == 0)
                luaL_error(L, "path segment %d is empty or not a string", (int)i);
            oom(L, buf_add(&o->url, "/", 1) || dw_escape(&o->url, s, slen));
            lua_pop(L, 1);
        }
    } else if (t != LUA_TNIL) {
        luaL_error(L, "request field 'path' must be a string or a list of segments");
    }
    lua_pop(L, 1);
}

static const char *part_field(lua_State *L, int part, const char *field, size_t *len, int need)
{
    lua_getfield(L, part, field);
    const char *s = lua_tolstring(L, -1, len);
    lua_pop(L, 1);   /* the parts table keeps it alive */
    if (s == NULL && need)
        luaL_error(L, "multipart part needs a string '%s'", field);
    if (s == NULL)
        *len = 0;
    return s;
}

/* Encodes parts = {{name=, data=, filename=, content_type=}, ...} into o->body; returns the
 * Content-Type header line. */
static const char *build_multipart(lua_State *L, struct op *o, int parts)
{
    lua_Integer n = luaL_len(L, parts);
    struct dw_part *list = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *list, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, parts, i);
        luaL_checktype(L, -1, LUA_TTABLE);
        int p = lua_gettop(L);
        struct dw_part *d = &list[i - 1];
        d->name = part_field(L, p, "name", &d->name_len, 1);
        d->data = part_field(L, p, "data", &d->len, 1);
        d->filename = part_field(L, p, "filename", &d->filename_len, 0);
        d->content_type = part_field(L, p, "content_type", &d->content_type_len, 0);
        lua_pop(L, 1);
    }
    char boundary[DW_BOUNDARY_SIZE], err[160];
    dw_boundary(boundary);
    if (dw_multipart_encode(&o->body, boundary, list, (size_t)n, err, sizeof err))
        luaL_error(L, "%s", err);
    lua_pop(L, 1);
    return lua_pushfstring(L, "Content-Type: multipart/form-data; boundary=%s", boundary);
}

static void build_body(lua_State *L, struct op *o, int req)
{
    char err[160];
    if (lua_getfield(L, req, "parts") != LUA_TNIL) {       // [parts]
        luaL_checktype(L, -1, LUA_TTABLE);
        http_add_header(L, &o->headers, build_multipart(L, o, lua_gettop(L)));
        lua_pop(L, 2);
        o->has_body = 1;
        return;
    }
    lua_pop(L, 1);
    if (lua_getfield(L, req, "json") != LUA_TNIL) {        // [json]
        if (!json_encode(L, -1, NULL, err, sizeof err))
            luaL_error(L, "request body: %s", err);
        size_t len;                                         // [json, text]
        const char *s = lua_tolstring(L, -1, &len);
        oom(L, buf_add(&o->body, s, len));
        http_add_header(L, &o->headers, "Content-Type: application/json");
        o->has_body = 1;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* A POST without a body still says "Content-Length: 0": strict proxies answer 411 otherwise.
 * The empty "Content-Type:" stops curl from labelling it as a form. */
static void empty_body(lua_State *L, struct op *o, const char *method)
{
    if (o->has_body || !(strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
                         strcmp(method, "PATCH") == 0))
        return;
    o->has_body = 1;
    http_add_header(L, &o->headers, "Content-Type:");
}

static int c_request(lua_State *L)
{
    struct client *c = check_client(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    struct op *o = lua_newuserdatauv(L, sizeof *o, 0);
    memset(o, 0, sizeof *o);
    luaL_setmetatable(L, OP);
    o->lp = loop_get(L);
    o->hint = strdup(c->hint);
    o->secret = strdup(c->secret);
    oom(L, o->secret == NULL || o->hint == NULL);
    const char *method = field_string(L, 2, "method", "GET", NULL);
    if (strpbrk(method, " \r\n") || *method == '\0')
        luaL_error(L, "bad HTTP method");
    build_url(L, o, 2);
    o->method = strdup(method);
    oom(L, o->method == NULL);
    /* The message label leaves the query out: it may be long, and it adds nothing. */
    lua_pushfstring(L, "%s %s", method, o->url.data);
    o->what = strdup(lua_tostring(L, -1));
    oom(L, o->what == NULL);
    lua_pop(L, 1);
    add_query(L, o, 2);
    http_add_header(L, &o->headers, c->auth);
    if (c->org)
        http_add_header(L, &o->headers, c->org);
    http_add_header(L, &o->headers, c->source);
    http_add_header(L, &o->headers, SDK_VERSION_HEADER);
    const char *accept = field_string(L, 2, "accept", "application/json", NULL);
    if (strpbrk(accept, "\r\n"))
        luaL_error(L, "request field 'accept' contains a line break");
    http_add_header(L, &o->headers, lua_pushfstring(L, "Accept: %s", accept));
    lua_pop(L, 1);
    http_add_header(L, &o->headers, "Expect:");
    build_body(L, o, 2);
    empty_body(L, o, method);
    lua_getfield(L, 2, "raw");
    o->raw = lua_toboolean(L, -1);
    lua_getfield(L, 2, "idempotent");
    int idempotent = lua_toboolean(L, -1);
    lua_getfield(L, 2, "retry_conflict");
    int retry_conflict = lua_toboolean(L, -1);
    lua_pop(L, 3);
    /* timeout, deadline and retries have their defaults in lua/rlm/daytona.lua. */
    double timeout = field_number(L, 2, "timeout", FIELD_NEEDED);
    struct request_spec spec = {
        .http = {.method = o->method, .url = o->url.data, .headers = o->headers,
                 .body = o->has_body ? (o->body.data ? o->body.data : "") : NULL,
                 .body_len = o->body.len, .max_answer = DAYTONA_MAX_ANSWER},
        .max_attempts = 1 + (int)field_number(L, 2, "retries", FIELD_NEEDED),
        .backoff_base_ms = BACKOFF_BASE_MS,
        .backoff_cap_ms = BACKOFF_CAP_MS,
        .deadline_ms = loop_now_ms() + field_number(L, 2, "deadline", FIELD_NEEDED) * 1e3,
        .attempt_timeout_ms = timeout > 0 ? (long)(timeout * 1e3) : 1,
        .replayable = idempotent,
        /* The API refuses to delete a sandbox while it is being created or started (409,
         * "state change in progress": apps/api/src/sandbox/services/sandbox.service.ts,
         * destroy); it can go once that ends. */
        .also_retry_status = retry_conflict ? 409 : 0,
        .done = op_done_cb,
        .ud = o,
    };
    o->id = loop_new_id(o->lp);
    o->req = request_start(o->lp, &spec);
    oom(L, o->req == NULL);
    lua_settop(L, 3);
    return 1;
}

/* ---------- results ---------- */

/* "Not Found" -> "NOT_FOUND"; the code Daytona's daemon would use for that status. */
static void push_status_code(lua_State *L, long status)
{
    const char *r = http_reason_phrase(status);
    if (*r == '\0') {
        lua_pushfstring(L, "HTTP_%d", (int)status);
        return;
    }
    char code[32];
    size_t i = 0;
    for (; i < sizeof code - 1 && r[i]; i++)
        code[i] = r[i] == ' ' ? '_' : (char)toupper((unsigned char)r[i]);
    code[i] = '\0';
    lua_pushstring(L, code);
}

/* The message of a Daytona error body (NestJS {message, error}, or the daemon's {message,
 * code}); a message list (validation errors) is joined. Pushes message and code (either may be
 * nil). [-0, +2] */
static void push_body_detail(lua_State *L, const char *body, size_t len)
{
    char err[128];
    int top = lua_gettop(L);
    if (len == 0) {
        lua_pushnil(L);
        lua_pushnil(L);
        return;
    }
    if (!json_decode(L, body, len, err, sizeof err) || lua_type(L, -1) != LUA_TTABLE) {
        lua_settop(L, top);
        /* Not JSON (a proxy's HTML page, say): show its start, on one line. */
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        for (size_t i = 0; i < len && i < 200; i++)
            luaL_addchar(&b, (body[i] == '\n' || body[i] == '\r' || body[i] == '\t') ? ' ' : body[i]);
        if (len > 200)
            luaL_addstring(&b, "...");
        luaL_pushresult(&b);
        lua_pushnil(L);
        return;
    }
    int obj = lua_gettop(L);
    int t = lua_getfield(L, obj, "message");
    if (t != LUA_TSTRING && t != LUA_TTABLE) {
        /* The daemon's bulk upload lists what failed: {"errors": [...], "files": [...]}
         * (apps/daemon/pkg/toolbox/fs/upload_files.go). */
        lua_pop(L, 1);
        t = lua_getfield(L, obj, "errors");
    }
    if (t == LUA_TTABLE) {
        luaL_Buffer b;
        int list = lua_gettop(L);
        luaL_buffinit(L, &b);
        lua_Integer n = luaL_len(L, list);
        for (lua_Integer i = 1; i <= n; i++) {
            if (lua_geti(L, list, i) == LUA_TSTRING) {
                if (i > 1)
                    luaL_addstring(&b, "; ");
                luaL_addvalue(&b);
            } else {
                lua_pop(L, 1);
            }
        }
        luaL_pushresult(&b);
        lua_replace(L, list);
    } else if (t != LUA_TSTRING) {
        lua_pop(L, 1);
        if (lua_getfield(L, obj, "error") != LUA_TSTRING) {
            lua_pop(L, 1);
            lua_pushnil(L);
        }
    }
    if (lua_getfield(L, obj, "code") != LUA_TSTRING) {
        lua_pop(L, 1);
        lua_pushnil(L);
    }
    lua_remove(L, obj);
}

static void push_attempts_note(lua_State *L, const struct op *o)
{
    char note[80];
    request_attempts_note(o->req, note, sizeof note);
    lua_pushstring(L, note);
}

static int fail_http(lua_State *L, struct op *o)
{
    struct http_call *c = o->req->call;
    long s = c->status;
    luaL_pushfail(L);
    push_body_detail(L, c->body.data, c->body.len);   // [nil, detail, code]
    const char *detail = lua_tostring(L, -2);
    const char *phrase = http_reason_phrase(s);
    if (s == 401 || s == 403) {
        lua_pushfstring(L, "Daytona %s: %d %s%s%s%s on %s; %s%s",
                        s == 401 ? "rejected the credentials" : "denied access", (int)s, phrase,
                        detail ? " (" : "", detail ? detail : "", detail ? ")" : "", o->what,
                        o->hint, s == 403 ? " (and its permissions)" : "");
    } else {
        push_attempts_note(L, o);
        const char *note = lua_tostring(L, -1);
        char after[64] = "";
        if (o->req->retry_after >= 0 && request_retryable(o->req))
            snprintf(after, sizeof after, "; the server asked to wait %.0f s",
                     o->req->retry_after);
        lua_pushfstring(L, "Daytona %s failed: %d %s%s%s%s%s", o->what, (int)s, phrase,
                        detail ? ": " : "", detail ? detail : "", after, note);
        lua_remove(L, -2);
    }
    host_push_redacted(L, lua_tostring(L, -1), o->secret);
    lua_remove(L, -2);                                // [nil, detail, code, msg]
    if (lua_isnil(L, -2))
        push_status_code(L, s);
    else
        lua_pushvalue(L, -2);
    const char *code = lua_tostring(L, -1);
    lua_insert(L, -2);                                // [nil, detail, code, code', msg]
    push_error(L, "http", s, code, request_retryable(o->req), o->req->attempts,
               o->req->retry_after);
    lua_replace(L, -4);
    lua_pop(L, 2);                                    // [nil, err]
    return 2;
}

static int fail_transport(lua_State *L, struct op *o)
{
    struct http_call *c = o->req->call;
    const char *kind = http_failure_kind(c);
    luaL_pushfail(L);
    push_attempts_note(L, o);
    if (c->result == CURLE_OPERATION_TIMEDOUT)
        lua_pushfstring(L, "Daytona %s timed out: %s%s", o->what, http_failure_message(c),
                        lua_tostring(L, -1));
    else
        lua_pushfstring(L, "Daytona %s failed (%s): %s%s", o->what, kind,
                        http_failure_message(c), lua_tostring(L, -1));
    host_push_redacted(L, lua_tostring(L, -1), o->secret);
    lua_replace(L, -3);
    lua_pop(L, 1);
    push_error(L, kind, 0, strcmp(kind, "timeout") == 0 ? "TIMEOUT" : "CONNECTION_FAILED",
               request_retryable(o->req), o->req->attempts, -1);
    return 2;
}

static int fail_message(lua_State *L, struct op *o, long status, const char *code,
                        const char *msg)
{
    luaL_pushfail(L);
    host_push_redacted(L, msg, o->secret);
    push_error(L, strcmp(code, "BAD_RESPONSE") == 0 ? "malformed" : "request", status, code, 0,
               o->req->attempts, -1);
    return 2;
}

struct part_walk {
    lua_State *L;
    int list;
    lua_Integer n;
    const char *secret;
};

/* Sets part.error from an "error" part's JSON body {statusCode, code, message}; the part table
 * is at index part. Leaves the part alone if the body is not a JSON object. */
static void add_part_error(lua_State *L, int part, const struct dw_part *p, const char *secret)
{
    char err[64];
    int top = lua_gettop(L);
    if (!json_decode(L, p->data, p->len, err, sizeof err) || !lua_istable(L, -1)) {
        lua_settop(L, top);
        return;
    }
    int obj = lua_gettop(L);
    lua_getfield(L, obj, "statusCode");
    long status = (long)lua_tointeger(L, -1);
    lua_getfield(L, obj, "message");
    const char *message = lua_isstring(L, -1) ? lua_tostring(L, -1) : "download failed";
    if (p->filename)
        lua_pushlstring(L, p->filename, p->filename_len);
    else
        lua_pushliteral(L, "file");
    /* Daemon messages usually name the file already ("file not found: /x"). */
    if (strstr(message, lua_tostring(L, -1)))
        lua_pushstring(L, message);
    else
        lua_pushfstring(L, "%s: %s", lua_tostring(L, -1), message);
    host_push_redacted(L, lua_tostring(L, -1), secret);    // [obj, status, message, file, m, msg]
    if (lua_getfield(L, obj, "code") != LUA_TSTRING) {
        lua_pop(L, 1);
        push_status_code(L, status);
    }
    const char *code = lua_tostring(L, -1);
    lua_insert(L, -2);                                     // [..., code, msg]
    push_error(L, "http", status, code, 0, 0, -1);
    lua_setfield(L, part, "error");
    lua_settop(L, top);
}

static int push_part(void *ud, const struct dw_part *p)
{
    struct part_walk *w = ud;
    lua_State *L = w->L;
    lua_createtable(L, 0, 5);
    if (p->name) {
        lua_pushlstring(L, p->name, p->name_len);
        lua_setfield(L, -2, "name");
    }
    if (p->filename) {
        lua_pushlstring(L, p->filename, p->filename_len);
        lua_setfield(L, -2, "filename");
    }
    if (p->content_type) {
        lua_pushlstring(L, p->content_type, p->content_type_len);
        lua_setfield(L, -2, "content_type");
    }
    lua_pushlstring(L, p->data, p->len);
    lua_setfield(L, -2, "data");
    if (p->name && p->name_len == 5 && memcmp(p->name, "error", 5) == 0)
        add_part_error(L, lua_gettop(L), p, w->secret);
    lua_rawseti(L, w->list, ++w->n);
    return 0;
}

static int push_multipart(lua_State *L, struct op *o, const char *ctype)
{
    struct http_call *c = o->req->call;
    char boundary[128], err[160];
    if (dw_multipart_boundary(ctype, boundary, sizeof boundary))
        return fail_message(L, o, c->status, "BAD_RESPONSE",
                            lua_pushfstring(L, "Daytona %s sent a multipart response without "
                                               "a boundary", o->what));
    lua_newtable(L);
    struct part_walk w = {L, lua_gettop(L), 0, o->secret};
    buf_clear(&o->scratch);
    if (dw_multipart_parse(c->body.data ? c->body.data : "", c->body.len, boundary, &o->scratch,
                           push_part, &w, err, sizeof err))
        return fail_message(L, o, c->status, "BAD_RESPONSE",
                            lua_pushfstring(L, "Daytona %s sent a broken multipart response: %s",
                                            o->what, err));
    return 1;
}

static void push_info(lua_State *L, const struct op *o)
{
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, o->req->call->status);
    lua_setfield(L, -2, "status");
    lua_pushinteger(L, o->req->attempts);
    lua_setfield(L, -2, "attempts");
}

static int push_success(lua_State *L, struct op *o)
{
    struct http_call *c = o->req->call;
    char ctype[256] = "", err[160];
    http_header(c, "content-type", ctype, sizeof ctype);
    if (strncasecmp(ctype, "multipart/", 10) == 0) {
        int n = push_multipart(L, o, ctype);
        if (n != 1)
            return n;
    } else if (o->raw || strncasecmp(ctype, "text/plain", 10) == 0) {
        /* text/plain: the daemon's answer to a client it takes for an older SDK */
        lua_pushlstring(L, c->body.data ? c->body.data : "", c->body.len);
    } else if (c->body.len == 0 || strspn(c->body.data, " \t\r\n") == c->body.len) {
        lua_pushboolean(L, 1);
    } else if (!json_decode(L, c->body.data, c->body.len, err, sizeof err)) {
        return fail_message(L, o, c->status, "BAD_RESPONSE",
                            lua_pushfstring(L, "Daytona %s answered %d with a body that is not "
                                               "valid JSON (%s)", o->what, (int)c->status, err));
    }
    push_info(L, o);
    return 2;
}

static int op_result(lua_State *L)
{
    struct op *o = check_op(L, 1);
    if (o->what == NULL)
        return luaL_error(L, "Daytona request was cancelled");
    if (!o->req->finished)
        return luaL_error(L, "Daytona request is still running; wait for it first");
    if (o->req->call == NULL)
        return fail_message(L, o, 0, "REQUEST_FAILED",
                            lua_pushfstring(L, "Daytona %s: cannot start the request (out of "
                                               "memory?)", o->what));
    if (o->req->call->result != CURLE_OK)
        return fail_transport(L, o);
    if (o->req->call->status >= 400)
        return fail_http(L, o);
    return push_success(L, o);
}

static int op_id(lua_State *L)
{
    lua_pushinteger(L, check_op(L, 1)->id);
    return 1;
}

static int op_done(lua_State *L)
{
    struct op *o = check_op(L, 1);
    lua_pushboolean(L, o->req == NULL || o->req->finished);
    return 1;
}

static int op_cancel(lua_State *L)
{
    op_release(check_op(L, 1));
    return 0;
}

/* ---------- registration ---------- */

static const luaL_Reg daytona_funcs[] = {
    {"client", l_client}, {"error", l_error}, {"is_error", l_is_error}, {NULL, NULL}};

static const luaL_Reg client_methods[] = {{"request", c_request}, {NULL, NULL}};

static const luaL_Reg client_metamethods[] = {{"__gc", client_gc},
                                              {"__close", client_gc},
                                              {"__tostring", client_tostring},
                                              {"__index", NULL},
                                              {NULL, NULL}};

static const luaL_Reg op_methods[] = {{"id", op_id},         {"done", op_done},
                                      {"result", op_result}, {"cancel", op_cancel},
                                      {NULL, NULL}};

static const luaL_Reg op_metamethods[] = {
    {"__gc", op_gc}, {"__close", op_gc}, {"__index", NULL}, {NULL, NULL}};

int luaopen_rlm_core_daytona(lua_State *L)
{
    netlib_curl(L);
    loop_get(L);
    host_newclass(L, CLIENT, client_metamethods, client_methods);
    host_newclass(L, OP, op_metamethods, op_methods);
    luaL_newlib(L, daytona_funcs);
    lua_pushliteral(L, SDK_VERSION);
    lua_setfield(L, -2, "sdk_version");
    return 1;
}
