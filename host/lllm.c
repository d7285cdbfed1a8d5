/* lllm.c — rlm.core.llm: the wire side of model calls (OpenAI chat completions and Anthropic
 * messages), on the shared curl layer (http.h) and the event loop. Which provider, URL and key
 * a model string means is policy, decided in lua/rlm/llm.lua.
 *
 *   start{wire = "openai"|"anthropic", url=, key=, model=, messages=, system=, temperature=,
 *         max_tokens=, max_tokens_field=, stop=, stream=, extra=, headers=, timeout=, retries=,
 *         backoff=, name=} -> call
 *   call:id()           op id, ready when the call has finished and whenever new stream events
 *                       arrive
 *   call:done()         true once finished (after any retries)
 *   call:take_deltas()  the text streamed since the last take ("" when none)
 *   call:result()       {text, finish_reason, model, usage = {input_tokens, output_tokens},
 *                        attempts} | nil, message, {kind, status, attempts}
 *   call:cancel()       stops it; also __gc and __close
 *
 * timeout is the deadline of the whole call in seconds, retries included; every attempt gets
 * what is left. Retry n waits backoff * 2^(n-1) seconds (default 0.5, capped at 16), scaled by
 * a random factor in [1/2, 1]. Retried: 408, 429 (after Retry-After / retry-after-ms when sent), 5xx, and
 * connection failures or cut responses, as long as no streamed text has reached the caller
 * (going again would repeat it). Not retried: other 4xx, and a 2xx whose JSON is malformed (a
 * server that sends broken JSON with 200 is most often the wrong base URL, and an identical
 * request would pay for the same answer again). The key never appears in a message: it is
 * only put into the auth header, and every message is scrubbed of it (host_push_redacted).
 *
 * Curl callbacks only split the stream into SSE events (sse.h) and queue them; JSON is decoded
 * with the host codec (json.h) when Lua asks, in take_deltas() and result(). */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>

#include "host.h"
#include "http.h"
#include "json.h"
#include "retry.h"
#include "sse.h"

#define CALL "rlm.llm.call"

#define ANTHROPIC_VERSION "anthropic-version: 2023-06-01"
#define BACKOFF_CAP_MS 16000.0
#define CONNECT_TIMEOUT_MS 10000.0

enum wire { WIRE_OPENAI, WIRE_ANTHROPIC };

struct call {
    loop *lp;
    lua_Integer id;
    enum wire wire;
    struct http_call *http;
    lua_Integer timer;
    struct curl_slist *headers;
    struct buf body;                /* the request JSON */
    char *url, *name, *secret;
    int stream, finished, attempts, max_attempts;
    int waits_past_deadline;        /* gave up because Retry-After reached past the deadline */
    double started_ms, deadline_ms, retry_after, backoff_ms;
    /* The current attempt's stream: */
    int sniffed, sse_mode, notified, delivered, terminal;
    struct sse sse;
    struct buf events;              /* queued events: size_t len, event, NUL, size_t len, data */
    /* What the response said so far: */
    struct buf text;
    char model[160], finish[40];
    lua_Integer input_tokens, output_tokens;
    char failure[600];              /* a final error found while decoding */
    const char *failure_kind;
};

static struct call *check_call(lua_State *L, int arg)
{
    return luaL_checkudata(L, arg, CALL);
}

/* ---------- the stream, in curl's callbacks (no Lua here) ---------- */

static int queue_event(void *ud, const char *event, const char *data, size_t len)
{
    struct call *k = ud;
    size_t elen = strlen(event);
    if (buf_add(&k->events, &elen, sizeof elen) || buf_add(&k->events, event, elen + 1) ||
        buf_add(&k->events, &len, sizeof len) || buf_add(&k->events, data, len + 1))
        return -1;
    if ((k->wire == WIRE_OPENAI && len == 6 && memcmp(data, "[DONE]", 6) == 0) ||
        (k->wire == WIRE_ANTHROPIC && strcmp(event, "message_stop") == 0))
        k->terminal = 1;
    if (!k->notified) {
        k->notified = 1;
        loop_ready(k->lp, k->id);
    }
    return 0;
}

static void on_chunk(void *ud, struct http_call *c, const char *data, size_t len)
{
    struct call *k = ud;
    if (!k->sniffed) {
        /* An error, or a server that ignored stream=true, answers with a plain body. */
        char ctype[128] = "";
        http_header(c, "content-type", ctype, sizeof ctype);
        k->sse_mode = c->status >= 200 && c->status < 300 && strstr(ctype, "event-stream");
        k->sniffed = 1;
    }
    /* Out of memory loses the rest of the stream, which then reads as a cut one. */
    if (k->sse_mode)
        sse_feed(&k->sse, data, len, queue_event, k);
    else
        buf_add(&c->body, data, len);   /* the layer keeps no body when streaming */
}

/* ---------- attempts, retries, timers ---------- */

static void reset_response(struct call *k)
{
    k->sniffed = k->sse_mode = k->delivered = k->terminal = 0;
    sse_free(&k->sse);
    buf_free(&k->events);
    buf_free(&k->text);
    k->model[0] = k->finish[0] = '\0';
    k->input_tokens = k->output_tokens = -1;
}

static void finish(struct call *k)
{
    k->finished = 1;
    loop_ready(k->lp, k->id);
}

static int transient(const struct call *k)
{
    const struct http_call *c = k->http;
    if (c->result != CURLE_OK) {
        if (k->delivered)
            return 0;
        switch (c->result) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_GOT_NOTHING:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_PARTIAL_FILE:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
            return 1;
        default:
            return 0;   /* a timeout already used up the deadline */
        }
    }
    long s = c->status;
    return s == 408 || s == 429 || s >= 500;
}

/* Seconds the server asked us to wait, or -1; OpenAI also says it in milliseconds. */
static double server_wait(const struct http_call *c)
{
    char value[64];
    if (c->result == CURLE_OK && http_header(c, "retry-after-ms", value, sizeof value) == 0) {
        char *end;
        double ms = strtod(value, &end);
        if (end != value && ms >= 0)
            return ms / 1e3;
    }
    return retry_after_header(c);
}

static void start_attempt(struct call *k);

static void timer_fired(void *ud)
{
    struct call *k = ud;
    k->timer = 0;
    start_attempt(k);
}

static void attempt_done(void *ud, struct http_call *c)
{
    struct call *k = ud;
    if (!transient(k) || k->attempts >= k->max_attempts) {
        finish(k);
        return;
    }
    k->retry_after = server_wait(c);
    double wait = retry_delay_ms(k->attempts, k->backoff_ms, BACKOFF_CAP_MS, k->retry_after);
    double now = loop_now_ms();
    if (now + wait >= k->deadline_ms) {
        k->waits_past_deadline = k->retry_after >= 0;
        finish(k);
        return;
    }
    k->timer = loop_timer_add(k->lp, now + wait, timer_fired, k);
    if (k->timer == 0)
        finish(k);
}

static void start_attempt(struct call *k)
{
    http_free(k->http);
    k->http = NULL;
    reset_response(k);
    k->retry_after = -1;
    double left = k->deadline_ms - loop_now_ms();
    if (left < 1)
        left = 1;
    struct http_req req = {
        .method = "POST",
        .url = k->url,
        .headers = k->headers,
        .body = k->body.data,
        .body_len = k->body.len,
        .timeout_ms = (long)left,
        .connect_timeout_ms = (long)(left < CONNECT_TIMEOUT_MS ? left : CONNECT_TIMEOUT_MS),
    };
    k->attempts++;
    k->http = http_start(k->lp, &req, k->stream ? on_chunk : NULL, attempt_done, k);
    if (k->http == NULL) {
        snprintf(k->failure, sizeof k->failure, "cannot start the request (bad URL or out of memory)");
        k->failure_kind = "request";
        finish(k);
    }
}

static void release(struct call *k)
{
    if (k->timer)
        loop_timer_cancel(k->lp, k->timer);
    k->timer = 0;
    http_free(k->http);
    k->http = NULL;
    reset_response(k);
    curl_slist_free_all(k->headers);
    k->headers = NULL;
    buf_free(&k->body);
    host_free_secret(k->secret);
    free(k->url);
    free(k->name);
    k->secret = k->url = k->name = NULL;
}

static int call_gc(lua_State *L)
{
    release(check_call(L, 1));
    return 0;
}

/* ---------- building the request (Lua context; may raise, the userdata's __gc cleans up) --- */

static char *dup_or_raise(lua_State *L, const char *s)
{
    char *d = strdup(s);
    if (d == NULL)
        luaL_error(L, "out of memory");
    return d;
}

static const char *opt_string(lua_State *L, int req, const char *field, int need)
{
    lua_getfield(L, req, field);
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    if ((s == NULL && !lua_isnil(L, -1)) || (s == NULL && need))
        luaL_error(L, "llm request field '%s' must be a string", field);
    lua_pop(L, 1);   /* the request table keeps it alive */
    return s;
}

static double opt_number(lua_State *L, int req, const char *field, double dflt)
{
    lua_getfield(L, req, field);
    int isnum = 1;
    double v = lua_isnil(L, -1) ? dflt : lua_tonumberx(L, -1, &isnum);
    if (!isnum || v < 0)
        luaL_error(L, "llm request field '%s' must be a non-negative number", field);
    lua_pop(L, 1);
    return v;
}

/* Copies req[from] into body[to] when set. [-0, +0] */
static void copy_field(lua_State *L, int req, const char *from, int body, const char *to)
{
    if (lua_getfield(L, req, from) == LUA_TNIL)
        lua_pop(L, 1);
    else
        lua_setfield(L, body, to);
}

/* Pushes a new table with the JSON array (or object) metatable. */
static void new_json(lua_State *L, int array)
{
    lua_newtable(L);
    if (array)
        json_push_array_mt(L);
    else
        json_push_object_mt(L);
    lua_setmetatable(L, -2);
}

/* body[to] = req.stop as a list (a single string becomes a one-item list). */
static void set_stop(lua_State *L, int req, int body, const char *to)
{
    int t = lua_getfield(L, req, "stop");
    if (t == LUA_TSTRING) {
        new_json(L, 1);
        lua_insert(L, -2);
        lua_rawseti(L, -2, 1);
    } else if (t != LUA_TTABLE) {
        if (t != LUA_TNIL)
            luaL_error(L, "llm request field 'stop' must be a string or a list of strings");
        lua_pop(L, 1);
        return;
    }
    lua_setfield(L, body, to);
}

static int is_role(lua_State *L, int msg, const char *role)
{
    if (!lua_istable(L, msg))
        luaL_error(L, "every llm message must be a table {role = ..., content = ...}");
    lua_getfield(L, msg, "role");
    int yes = lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), role) == 0;
    lua_pop(L, 1);
    return yes;
}

/* OpenAI: the system prompt is the first message. */
static void openai_messages(lua_State *L, int req, int msgs, int out)
{
    lua_Integer n = 0;
    if (lua_getfield(L, req, "system") != LUA_TNIL) {
        lua_createtable(L, 0, 2);
        lua_pushliteral(L, "system");
        lua_setfield(L, -2, "role");
        lua_insert(L, -2);
        lua_setfield(L, -2, "content");
        lua_rawseti(L, out, ++n);
    } else {
        lua_pop(L, 1);
    }
    lua_Integer count = luaL_len(L, msgs);
    for (lua_Integer i = 1; i <= count; i++) {
        lua_geti(L, msgs, i);
        lua_rawseti(L, out, ++n);
    }
}

/* Anthropic: system prompts go to the top-level "system" field, joined with blank lines. */
static void anthropic_messages(lua_State *L, int req, int msgs, int out, int body)
{
    luaL_Buffer b;
    int has_system = lua_getfield(L, req, "system") != LUA_TNIL;
    int system_blocks = lua_istable(L, -1);
    int sys_idx = lua_gettop(L);
    lua_Integer n = 0, count = luaL_len(L, msgs);
    luaL_buffinit(L, &b);
    if (has_system && !system_blocks) {
        lua_pushvalue(L, sys_idx);
        luaL_addvalue(&b);
    }
    for (lua_Integer i = 1; i <= count; i++) {
        lua_geti(L, msgs, i);
        if (!is_role(L, lua_gettop(L), "system")) {
            lua_rawseti(L, out, ++n);
            continue;
        }
        lua_getfield(L, -1, "content");
        if (system_blocks || lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "system messages for Anthropic must have string content and cannot "
                          "be mixed with a system given as content blocks");
        lua_remove(L, -2);
        if (has_system) {   /* one value, so the buffer sees a balanced stack */
            lua_pushliteral(L, "\n\n");
            lua_insert(L, -2);
            lua_concat(L, 2);
        }
        luaL_addvalue(&b);
        has_system = 1;
    }
    luaL_pushresult(&b);
    if (system_blocks)
        lua_pushvalue(L, sys_idx);
    if (has_system)
        lua_setfield(L, body, "system");
    else
        lua_pop(L, 1);
    lua_settop(L, sys_idx - 1);
}

/* Merges req.extra (provider-specific body fields) into the body, last, so it may override. */
static void merge_extra(lua_State *L, int req, int body)
{
    if (lua_getfield(L, req, "extra") == LUA_TTABLE) {
        int extra = lua_gettop(L);
        for (lua_pushnil(L); lua_next(L, extra); lua_pop(L, 1)) {
            lua_pushvalue(L, -2);
            lua_pushvalue(L, -2);
            lua_rawset(L, body);
        }
    } else if (!lua_isnil(L, -1)) {
        luaL_error(L, "llm request field 'extra' must be a table");
    }
    lua_pop(L, 1);
}

/* Builds the JSON body of req for k->wire into k->body. */
static void build_body(lua_State *L, struct call *k, int req)
{
    char err[200];
    new_json(L, 0);
    int body = lua_gettop(L);
    copy_field(L, req, "model", body, "model");
    if (lua_getfield(L, req, "messages") != LUA_TTABLE || luaL_len(L, -1) == 0)
        luaL_error(L, "llm request needs a non-empty list 'messages'");
    int msgs = lua_gettop(L);
    new_json(L, 1);
    int out = lua_gettop(L);
    lua_Integer max_tokens = -1;
    if (lua_getfield(L, req, "max_tokens") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
            luaL_error(L, "llm request field 'max_tokens' must be a positive integer");
        max_tokens = lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    if (k->wire == WIRE_OPENAI) {
        openai_messages(L, req, msgs, out);
        set_stop(L, req, body, "stop");
        /* OpenAI's newer models take only max_completion_tokens; most servers max_tokens. */
        const char *field = opt_string(L, req, "max_tokens_field", 0);
        if (max_tokens > 0) {
            lua_pushinteger(L, max_tokens);
            lua_setfield(L, body, field ? field : "max_tokens");
        }
        if (k->stream) {   /* without this, streamed answers carry no token counts */
            lua_createtable(L, 0, 1);
            lua_pushboolean(L, 1);
            lua_setfield(L, -2, "include_usage");
            lua_setfield(L, body, "stream_options");
        }
    } else {
        anthropic_messages(L, req, msgs, out, body);
        set_stop(L, req, body, "stop_sequences");
        if (max_tokens < 0)
            luaL_error(L, "Anthropic requests need max_tokens");
        lua_pushinteger(L, max_tokens);
        lua_setfield(L, body, "max_tokens");
    }
    lua_setfield(L, body, "messages");
    lua_pop(L, 1);                                     // [body]
    copy_field(L, req, "temperature", body, "temperature");
    if (k->stream) {
        lua_pushboolean(L, 1);
        lua_setfield(L, body, "stream");
    }
    merge_extra(L, req, body);
    if (!json_encode(L, body, NULL, err, sizeof err))
        luaL_error(L, "llm request: %s", err);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    if (buf_add(&k->body, s, len))
        luaL_error(L, "out of memory");
    lua_pop(L, 2);
}

static void build_headers(lua_State *L, struct call *k, int req, const char *key)
{
    http_add_header(L, &k->headers, "Content-Type: application/json");
    http_add_header(L, &k->headers,
                    k->stream ? "Accept: text/event-stream" : "Accept: application/json");
    http_add_header(L, &k->headers, "Expect:");
    if (k->wire == WIRE_ANTHROPIC)
        http_add_header(L, &k->headers, ANTHROPIC_VERSION);
    if (key && *key) {
        if (strpbrk(key, "\r\n"))
            luaL_error(L, "the API key contains a line break");
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        luaL_addstring(&b, k->wire == WIRE_ANTHROPIC ? "x-api-key: " : "Authorization: Bearer ");
        luaL_addstring(&b, key);
        luaL_pushresult(&b);
        http_add_header(L, &k->headers, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    if (lua_getfield(L, req, "headers") == LUA_TTABLE) {
        for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) {
            const char *name = lua_tostring(L, -2), *value = lua_tostring(L, -1);
            if (lua_type(L, -2) != LUA_TSTRING || value == NULL)
                luaL_error(L, "llm request headers must map names to strings");
            if (strpbrk(name, "\r\n:") || strpbrk(value, "\r\n"))
                luaL_error(L, "llm request header '%s' contains a line break or colon", name);
            http_add_header(L, &k->headers, lua_pushfstring(L, "%s: %s", name, value));
            lua_pop(L, 1);
        }
    } else if (!lua_isnil(L, -1)) {
        luaL_error(L, "llm request field 'headers' must be a table");
    }
    lua_pop(L, 1);
}

static int l_start(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    /* After SIGINT/SIGTERM no model call goes out, whatever Lua code caught the interrupt:
     * the run is ending, and a request now would only spend the user's money. */
    if (host_signal != 0) {
        int signo = host_signal < 0 ? -host_signal : host_signal;
        return luaL_error(L, "interrupted (SIG%s): no model call is made after an interrupt",
                          sigabbrev_np(signo));
    }
    struct call *k = lua_newuserdatauv(L, sizeof *k, 0);
    memset(k, 0, sizeof *k);
    luaL_setmetatable(L, CALL);
    k->lp = loop_get(L);
    reset_response(k);
    const char *wire = opt_string(L, 1, "wire", 1);
    if (strcmp(wire, "openai") != 0 && strcmp(wire, "anthropic") != 0)
        return luaL_error(L, "llm request field 'wire' must be \"openai\" or \"anthropic\"");
    k->wire = wire[0] == 'o' ? WIRE_OPENAI : WIRE_ANTHROPIC;
    k->url = dup_or_raise(L, opt_string(L, 1, "url", 1));
    const char *model = opt_string(L, 1, "model", 1);
    const char *name = opt_string(L, 1, "name", 0);
    k->name = dup_or_raise(L, name ? name : model);
    const char *key = opt_string(L, 1, "key", 0);
    k->secret = dup_or_raise(L, key ? key : "");
    lua_getfield(L, 1, "stream");
    k->stream = lua_toboolean(L, -1);
    lua_pop(L, 1);
    double timeout = opt_number(L, 1, "timeout", 120);
    k->max_attempts = 1 + (int)opt_number(L, 1, "retries", 5);
    k->backoff_ms = opt_number(L, 1, "backoff", 0.5) * 1e3;
    build_body(L, k, 1);
    build_headers(L, k, 1, key);
    k->started_ms = loop_now_ms();
    k->deadline_ms = k->started_ms + (timeout > 0 ? timeout : 0.001) * 1e3;
    k->id = loop_new_id(k->lp);
    start_attempt(k);
    return 1;
}

/* ---------- decoding (Lua context) ---------- */

/* Pushes obj.a.b.1.c for the dotted path; nil when a step is missing. Returns the type. */
static int push_path(lua_State *L, int obj, const char *path)
{
    lua_pushvalue(L, obj);
    for (const char *p = path; *p;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (!lua_istable(L, -1)) {
            lua_pop(L, 1);
            lua_pushnil(L);
            return LUA_TNIL;
        }
        if (isdigit((unsigned char)*p))
            lua_rawgeti(L, -1, strtoll(p, NULL, 10));
        else {
            lua_pushlstring(L, p, n);
            lua_rawget(L, -2);
        }
        lua_remove(L, -2);
        p = dot ? dot + 1 : p + n;
    }
    return lua_type(L, -1);
}

static void take_string(lua_State *L, int obj, const char *path, char *out, size_t size)
{
    if (push_path(L, obj, path) == LUA_TSTRING)
        snprintf(out, size, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
}

static void take_count(lua_State *L, int obj, const char *path, lua_Integer *out)
{
    if (push_path(L, obj, path) == LUA_TNUMBER)
        *out = (lua_Integer)lua_tonumber(L, -1);
    lua_pop(L, 1);
}

static int add_text(lua_State *L, struct call *k, int obj, const char *path)
{
    int ok = 0;
    if (push_path(L, obj, path) == LUA_TSTRING) {
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        buf_add(&k->text, s, n);
        ok = 1;
    }
    lua_pop(L, 1);
    return ok;
}

static void fail_with(struct call *k, const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->failure, sizeof k->failure, fmt, ap);
    va_end(ap);
    k->failure_kind = kind;
}

/* Pushes the provider's own message in an error body (both providers nest it as
 * error.message; some servers send a bare string) and returns it, or pushes nil. */
static const char *push_error_message(lua_State *L, int obj, int top_level_message)
{
    static const char *const paths[] = {"error.message", "error", "message"};
    for (int i = 0; i < (top_level_message ? 3 : 2); i++) {
        if (push_path(L, obj, paths[i]) == LUA_TSTRING)
            return lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    lua_pushnil(L);
    return NULL;
}

/* A 2xx body or stream event that carries an error instead of an answer. */
static int take_provider_error(lua_State *L, struct call *k, int obj)
{
    const char *msg = push_error_message(L, obj, 0);
    if (msg)
        fail_with(k, "provider", "the provider reported an error: %s", msg);
    lua_settop(L, obj);
    return msg != NULL;
}

static void openai_event(lua_State *L, struct call *k, int obj)
{
    if (take_provider_error(L, k, obj))
        return;
    take_string(L, obj, "model", k->model, sizeof k->model);
    add_text(L, k, obj, "choices.1.delta.content");
    take_string(L, obj, "choices.1.finish_reason", k->finish, sizeof k->finish);
    take_count(L, obj, "usage.prompt_tokens", &k->input_tokens);
    take_count(L, obj, "usage.completion_tokens", &k->output_tokens);
}

static void anthropic_event(lua_State *L, struct call *k, int obj)
{
    char type[40] = "";
    take_string(L, obj, "type", type, sizeof type);
    if (strcmp(type, "error") == 0) {
        if (!take_provider_error(L, k, obj))
            fail_with(k, "provider", "the stream reported an error");
    } else if (strcmp(type, "message_start") == 0) {
        take_string(L, obj, "message.model", k->model, sizeof k->model);
        take_count(L, obj, "message.usage.input_tokens", &k->input_tokens);
        take_count(L, obj, "message.usage.output_tokens", &k->output_tokens);
    } else if (strcmp(type, "content_block_delta") == 0) {
        add_text(L, k, obj, "delta.text");
    } else if (strcmp(type, "message_delta") == 0) {
        take_string(L, obj, "delta.stop_reason", k->finish, sizeof k->finish);
        take_count(L, obj, "usage.input_tokens", &k->input_tokens);
        take_count(L, obj, "usage.output_tokens", &k->output_tokens);
    }
}

/* Stops the transfer after a failure found while decoding; the call is then finished. */
static void abandon(struct call *k)
{
    if (k->timer)
        loop_timer_cancel(k->lp, k->timer);
    k->timer = 0;
    if (k->http && k->http->running) {
        loop_remove_easy(k->lp, k->http->easy);
        k->http->running = 0;
    }
    k->finished = 1;
}

/* Decodes the queued events into text, model, finish reason and usage. */
static void drain_events(lua_State *L, struct call *k)
{
    const char *p = k->events.data, *end = p + k->events.len;
    char err[160];
    while (p && p < end && !k->failure[0]) {
        size_t elen, dlen;
        memcpy(&elen, p, sizeof elen);
        const char *event = p + sizeof elen;
        memcpy(&dlen, event + elen + 1, sizeof dlen);
        const char *data = event + elen + 1 + sizeof dlen;
        p = data + dlen + 1;
        if (k->wire == WIRE_OPENAI && dlen == 6 && memcmp(data, "[DONE]", 6) == 0)
            continue;
        int top = lua_gettop(L);
        if (!json_decode(L, data, dlen, err, sizeof err)) {
            fail_with(k, "malformed", "a stream event is not valid JSON (%s): %.120s", err, data);
            lua_settop(L, top);
            break;
        }
        if (k->wire == WIRE_OPENAI)
            openai_event(L, k, top + 1);
        else
            anthropic_event(L, k, top + 1);
        lua_settop(L, top);
    }
    buf_clear(&k->events);
    if (k->failure[0])
        abandon(k);
}

static int call_take_deltas(lua_State *L)
{
    struct call *k = check_call(L, 1);
    size_t before = k->text.len;
    if (k->url)
        drain_events(L, k);
    k->notified = 0;
    lua_pushlstring(L, k->text.data ? k->text.data + before : "", k->text.len - before);
    if (k->text.len > before)
        k->delivered = 1;
    return 1;
}

/* Parses a whole (not streamed) response body. */
static void parse_body(lua_State *L, struct call *k)
{
    const struct http_call *c = k->http;
    char err[160];
    int top = lua_gettop(L);
    if (!json_decode(L, c->body.data ? c->body.data : "", c->body.len, err, sizeof err)) {
        fail_with(k, "malformed", "the response is not valid JSON (%s): %.120s", err,
                  c->body.data ? c->body.data : "");
        lua_settop(L, top);
        return;
    }
    int obj = top + 1;
    if (take_provider_error(L, k, obj))
        return;
    take_string(L, obj, "model", k->model, sizeof k->model);
    if (k->wire == WIRE_OPENAI) {
        if (push_path(L, obj, "choices.1") != LUA_TTABLE)
            fail_with(k, "malformed", "the response has no choices");
        lua_pop(L, 1);
        add_text(L, k, obj, "choices.1.message.content");
        take_string(L, obj, "choices.1.finish_reason", k->finish, sizeof k->finish);
        take_count(L, obj, "usage.prompt_tokens", &k->input_tokens);
        take_count(L, obj, "usage.completion_tokens", &k->output_tokens);
    } else {
        if (push_path(L, obj, "content") != LUA_TTABLE)
            fail_with(k, "malformed", "the response has no content");
        lua_Integer n = lua_istable(L, -1) ? luaL_len(L, -1) : 0;
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            char type[32] = "";
            take_string(L, lua_gettop(L), "type", type, sizeof type);
            if (strcmp(type, "text") == 0)
                add_text(L, k, lua_gettop(L), "text");
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        take_string(L, obj, "stop_reason", k->finish, sizeof k->finish);
        take_count(L, obj, "usage.input_tokens", &k->input_tokens);
        take_count(L, obj, "usage.output_tokens", &k->output_tokens);
    }
    lua_settop(L, top);
}

/* ---------- results ---------- */

/* Anthropic's stop reasons in the OpenAI words, so callers test one vocabulary. */
static const char *finish_reason(const struct call *k)
{
    static const char *const map[][2] = {{"end_turn", "stop"},       {"stop_sequence", "stop"},
                                         {"max_tokens", "length"},   {"tool_use", "tool_calls"},
                                         {"pause_turn", "stop"},     {"refusal", "content_filter"}};
    if (k->wire == WIRE_ANTHROPIC)
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            if (strcmp(k->finish, map[i][0]) == 0)
                return map[i][1];
    return k->finish;
}

/* Pushes nil, "<name>: <msg><attempts note>" with the key scrubbed, and {kind, status,
 * attempts}. The message is at the top of the stack and is consumed. */
static int push_failure(lua_State *L, struct call *k, const char *kind, long status)
{
    char note[96] = "";
    if (k->attempts > 1)
        snprintf(note, sizeof note, " (gave up after %d attempts in %.1f s)", k->attempts,
                 (loop_now_ms() - k->started_ms) / 1e3);
    host_push_redacted(L, lua_pushfstring(L, "%s: %s%s", k->name, lua_tostring(L, -1), note),
                       k->secret);
    luaL_pushfail(L);
    lua_insert(L, -2);                          // [..., nil, message]
    lua_createtable(L, 0, 3);
    lua_pushstring(L, kind);
    lua_setfield(L, -2, "kind");
    if (status > 0) {
        lua_pushinteger(L, status);
        lua_setfield(L, -2, "status");
    }
    lua_pushinteger(L, k->attempts);
    lua_setfield(L, -2, "attempts");
    return 3;
}

static int fail_status(lua_State *L, struct call *k)
{
    const struct http_call *c = k->http;
    long s = c->status;
    char err[64];
    const char *detail = NULL;
    if (c->body.len && json_decode(L, c->body.data, c->body.len, err, sizeof err))
        detail = push_error_message(L, lua_gettop(L), 1);
    if (detail == NULL && c->body.len)   /* not JSON: a proxy's page, say; show its start */
        detail = lua_pushlstring(L, c->body.data, c->body.len < 200 ? c->body.len : 200);
    char after[96] = "";
    if (k->waits_past_deadline)
        snprintf(after, sizeof after, "; the server asked to wait %.0f s, past the deadline",
                 k->retry_after);
    const char *phrase = http_reason_phrase(s);
    lua_pushfstring(L, "HTTP %d%s%s%s%s%s", (int)s, *phrase ? " " : "", phrase,
                    detail ? ": " : "", detail ? detail : "", after);
    return push_failure(L, k, "http", s);
}

static int fail_transport(lua_State *L, struct call *k)
{
    const struct http_call *c = k->http;
    CURLcode r = c->result;
    if (r == CURLE_OPERATION_TIMEDOUT) {
        char within[32];
        snprintf(within, sizeof within, "%.1f", (k->deadline_ms - k->started_ms) / 1e3);
        lua_pushfstring(L, "no complete answer within %s s (timeout): %s", within,
                        http_failure_message(c));
        return push_failure(L, k, "timeout", 0);
    }
    if (c->status > 0 && (r == CURLE_PARTIAL_FILE || r == CURLE_RECV_ERROR ||
                          r == CURLE_GOT_NOTHING || r == CURLE_HTTP2_STREAM)) {
        lua_pushfstring(L, "the response was cut off after %d characters of text (%s)",
                        (int)k->text.len, http_failure_message(c));
        return push_failure(L, k, "cut", c->status);
    }
    lua_pushfstring(L, "cannot reach %s (%s): %s", k->url, http_failure_kind(r),
                    http_failure_message(c));
    return push_failure(L, k, http_failure_kind(r), 0);
}

static int push_success(lua_State *L, struct call *k)
{
    lua_createtable(L, 0, 5);
    lua_pushlstring(L, k->text.data ? k->text.data : "", k->text.len);
    lua_setfield(L, -2, "text");
    lua_pushstring(L, finish_reason(k));
    lua_setfield(L, -2, "finish_reason");
    lua_pushstring(L, k->model);
    lua_setfield(L, -2, "model");
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, k->input_tokens > 0 ? k->input_tokens : 0);
    lua_setfield(L, -2, "input_tokens");
    lua_pushinteger(L, k->output_tokens > 0 ? k->output_tokens : 0);
    lua_setfield(L, -2, "output_tokens");
    lua_setfield(L, -2, "usage");
    lua_pushinteger(L, k->attempts);
    lua_setfield(L, -2, "attempts");
    return 1;
}

static int call_result(lua_State *L)
{
    struct call *k = check_call(L, 1);
    lua_settop(L, 1);
    if (k->url == NULL)
        return luaL_error(L, "the llm call was cancelled");
    if (!k->finished)
        return luaL_error(L, "the llm call is still running; wait for it first");
    if (k->failure[0] == '\0' && k->http) {
        const struct http_call *c = k->http;
        if (c->result != CURLE_OK)
            return fail_transport(L, k);
        if (c->status < 200 || c->status >= 300)
            return fail_status(L, k);
        if (k->sse_mode) {
            drain_events(L, k);
            if (!k->failure[0] && !k->terminal && !k->finish[0])
                fail_with(k, "cut", "the response stream ended before the answer was complete");
        } else if (k->text.len == 0 && !k->finish[0]) {
            parse_body(L, k);
        }
    }
    if (k->failure[0]) {
        lua_pushstring(L, k->failure);
        return push_failure(L, k, k->failure_kind, k->http ? k->http->status : 0);
    }
    return push_success(L, k);
}

static int call_id(lua_State *L)
{
    lua_pushinteger(L, check_call(L, 1)->id);
    return 1;
}

static int call_done(lua_State *L)
{
    struct call *k = check_call(L, 1);
    lua_pushboolean(L, k->finished || k->url == NULL);
    return 1;
}

static int call_cancel(lua_State *L)
{
    release(check_call(L, 1));
    return 0;
}

static int call_tostring(lua_State *L)
{
    struct call *k = check_call(L, 1);
    lua_pushfstring(L, "llm call %d (%s, %s)", (int)k->id, k->name ? k->name : "cancelled",
                    k->finished ? "done" : "running");
    return 1;
}

/* ---------- registration ---------- */

static const luaL_Reg llm_funcs[] = {{"start", l_start}, {NULL, NULL}};

static const luaL_Reg call_methods[] = {
    {"id", call_id},         {"done", call_done},     {"take_deltas", call_take_deltas},
    {"result", call_result}, {"cancel", call_cancel}, {NULL, NULL}};

static const luaL_Reg call_metamethods[] = {{"__gc", call_gc},
                                            {"__close", call_gc},
                                            {"__tostring", call_tostring},
                                            {"__index", NULL},
                                            {NULL, NULL}};

int luaopen_rlm_core_llm(lua_State *L)
{
    loop_get(L);
    host_newclass(L, CALL, call_metamethods, call_methods);
    luaL_newlib(L, llm_funcs);
    return 1;
}
