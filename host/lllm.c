/* lllm.c — rlm.core.llm: the wire side of model calls (OpenAI chat completions and Anthropic
 * messages here, OpenAI responses in llm_responses.c), on the shared curl layer (http.h) and
 * the event loop. Which provider, URL and key a model string means is policy, decided in
 * lua/rlm/llm.lua.
 *
 *   start{wire = "openai"|"anthropic"|"responses", url=, key=, model=, messages= (or prompt=, one user
 *         message), system=, temperature=, max_tokens=, max_tokens_field=, stop=, stream=,
 *         extra=, headers=, timeout=, retries=, backoff=, hand_back_429=, name=} -> call
 *         hand_back_429 = 1: a 429 is the call's result at once (err.retry_after says the
 *         server's wait), for a caller that paces its calls itself
 *   call:id()           op id, ready when the call has finished and whenever new stream events
 *                       arrive
 *   call:done()         true once finished (after any retries)
 *   call:take_deltas()  the text streamed since the last take ("" when none)
 *   call:result()       {text, finish_reason ("refusal" with refusal = its text when the
 *                        model declined), model, usage = {input_tokens, output_tokens,
 *                        cache_read_tokens, cache_write_tokens} (input_tokens: all of the
 *                        input, the cached part and the part written to the cache included),
 *                        attempts} | nil, err (fail.h: kind, status, message, retry_after,
 *                        and attempts)
 *   call:cancel()       stops it; also __gc and __close
 *
 * timeout is the deadline of the whole call in seconds, retries included; every attempt gets
 * what is left. Retry n waits backoff * 2^(n-1) seconds (capped at 16), scaled by a random
 * factor in [1/2, 1]; the defaults are lua/rlm/llm.lua's. Retries follow the request engine
 * (request.h), a completion being safe to repeat: 408, 429 (after Retry-After /
 * retry-after-ms when sent), 5xx but 501, and connection failures or cut responses, as long
 * as no streamed text has reached the caller (going again would repeat it). Not retried:
 * other 4xx, and a 2xx whose JSON is malformed (a
 * server that sends broken JSON with 200 is most often the wrong base URL, and an identical
 * request would pay for the same answer again). The key never appears in a message: it is
 * only put into the auth header, and every message is scrubbed of it (host_push_redacted).
 *
 * Curl callbacks only split the stream into SSE events (sse.h) and queue them; JSON is decoded
 * with the host codec (json.h) when Lua asks, in take_deltas() and result(). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>

#include "fail.h"
#include "field.h"
#include "host.h"
#include "json.h"
#include "llm_wire.h"
#include "request.h"
#include "sse.h"

#define CALL "rlm.llm.call"

#define BACKOFF_CAP_MS 16000.0

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
    if (k->wire->ends_stream(event, data, len))
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

/* ---------- attempts (the request engine, request.h, decides on retries) ---------- */

/* Before every attempt: what the last one said is forgotten. */
static void reset_response(void *ud)
{
    struct call *k = ud;
    k->sniffed = k->sse_mode = k->terminal = 0;
    sse_free(&k->sse);
    buf_free(&k->events);
    buf_free(&k->text);
    buf_free(&k->refusal);
    k->model[0] = k->finish[0] = '\0';
    k->input_tokens = k->output_tokens = k->cache_read = k->cache_write = -1;
}

static void request_done(void *ud, struct request *r)
{
    struct call *k = ud;
    loop_ready(k->lp, k->id);
}

static void release(struct call *k)
{
    request_free(k->req);
    k->req = NULL;
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

/* A string field the call cannot do without. */
static const char *need_string(lua_State *L, int req, const char *field)
{
    const char *s = field_string(L, req, field, NULL, NULL);
    if (s == NULL)
        luaL_error(L, "llm request needs a string '%s'", field);
    return s;
}


void body_add(struct body *b, const char *s, size_t n)
{
    if (buf_add(b->out, s, n) != 0)
        luaL_error(b->L, "out of memory");
}

/* Writes the value at idx as JSON. */
void body_value(struct body *b, int idx)
{
    char err[200];
    if (!json_append(b->L, idx, b->out, err, sizeof err))
        luaL_error(b->L, "llm request: %s", err);
}

/* Starts member key: 0 when req.extra names it instead (the caller then writes nothing). The
 * name is looked up raw, as put_extra walks extra raw. */
int body_key(struct body *b, const char *key)
{
    lua_State *L = b->L;
    lua_pushstring(L, key);
    if (b->extra) {
        lua_pushvalue(L, -1);
        int named = lua_rawget(L, b->extra) != LUA_TNIL;
        lua_pop(L, 1);
        if (named) {
            lua_pop(L, 1);
            return 0;
        }
    }
    if (b->out->len > 1)
        body_add(b, ",", 1);
    size_t n = strlen(key), plain = 0;
    while (plain < n && key[plain] != '"' && key[plain] != '\\' && (unsigned char)key[plain] >= 0x20)
        plain++;
    if (plain == n) {   /* our own names are plain; a provider's max_tokens_field may not be */
        body_add(b, "\"", 1);
        body_add(b, key, n);
        body_add(b, "\"", 1);
    } else {
        body_value(b, -1);
    }
    body_add(b, ":", 1);
    lua_pop(L, 1);
    return 1;
}

/* Pops the value on top of the stack into member key. */
void put_member(struct body *b, const char *key)
{
    if (body_key(b, key))
        body_value(b, -1);
    lua_pop(b->L, 1);
}

/* Copies req[from] into member to when set. [-0, +0] */
static void copy_member(struct body *b, int req, const char *from, const char *to)
{
    if (lua_getfield(b->L, req, from) == LUA_TNIL)
        lua_pop(b->L, 1);
    else
        put_member(b, to);
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

/* Member to = req.stop as a list (a single string becomes a one-item list). */
static void put_stop(struct body *b, int req, const char *to)
{
    lua_State *L = b->L;
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
    put_member(b, to);
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

/* The one user message of a request given as a prompt. */
static void prompt_message(struct body *b, int prompt)
{
    body_add(b, "{\"role\":\"user\",\"content\":", 25);
    body_value(b, prompt);
    body_add(b, "}", 1);
}

/* OpenAI: the system prompt is the first message. Written as it goes: no list is made. */
static void openai_messages(struct body *b, int req, int msgs, int prompt)
{
    lua_State *L = b->L;
    if (!body_key(b, "messages"))
        return;
    body_add(b, "[", 1);
    int first = 1;
    if (lua_getfield(L, req, "system") != LUA_TNIL) {
        body_add(b, "{\"role\":\"system\",\"content\":", 27);
        body_value(b, -1);
        body_add(b, "}", 1);
        first = 0;
    }
    lua_pop(L, 1);
    if (!msgs) {
        if (!first)
            body_add(b, ",", 1);
        prompt_message(b, prompt);
    }
    lua_Integer count = msgs ? luaL_len(L, msgs) : 0;
    for (lua_Integer i = 1; i <= count; i++, first = 0) {
        lua_geti(L, msgs, i);
        if (!first)
            body_add(b, ",", 1);
        body_value(b, -1);
        lua_pop(L, 1);
    }
    body_add(b, "]", 1);
}

/* Anthropic: system prompts go to the top-level "system" field, joined with blank lines. */
static void anthropic_messages(struct body *b, int req, int msgs, int prompt)
{
    lua_State *L = b->L;
    if (!msgs) {   /* one prompt: the system field as given, and one user message */
        int t = lua_getfield(L, req, "system");
        if (t == LUA_TNUMBER)   /* text, as the messages path makes of it */
            lua_tostring(L, -1);
        if (t != LUA_TNIL)
            put_member(b, "system");
        else
            lua_pop(L, 1);
        if (body_key(b, "messages")) {
            body_add(b, "[", 1);
            prompt_message(b, prompt);
            body_add(b, "]", 1);
        }
        return;
    }
    new_json(L, 1);
    int out = lua_gettop(L);
    luaL_Buffer sb;
    int has_system = lua_getfield(L, req, "system") != LUA_TNIL;
    int system_blocks = lua_istable(L, -1);
    int sys_idx = lua_gettop(L);
    lua_Integer n = 0, count = luaL_len(L, msgs);
    luaL_buffinit(L, &sb);
    if (has_system && !system_blocks) {
        lua_pushvalue(L, sys_idx);
        luaL_addvalue(&sb);
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
        luaL_addvalue(&sb);
        has_system = 1;
    }
    luaL_pushresult(&sb);
    if (system_blocks)
        lua_pushvalue(L, sys_idx);
    if (has_system)
        put_member(b, "system");
    else
        lua_pop(L, 1);
    lua_settop(L, out);
    put_member(b, "messages");
    lua_settop(L, out - 1);
}

/* The most bytes an answer to max_tokens can take, streamed or whole: a stream sends an event
 * of JSON per token or so (a gateway adds fields to each), escapes grow text, and logprobs add
 * about a kilobyte a token. Past it a server is sending without end. */
static size_t answer_cap(lua_Integer max_tokens)
{
    if (max_tokens <= 0)
        return (size_t)64 << 20;
    return ((size_t)1 << 20) + (size_t)max_tokens * 2048;
}

/* req.max_tokens, or -1 when unset. */
lua_Integer max_tokens_of(lua_State *L, int req)
{
    lua_Integer max_tokens = -1;
    if (lua_getfield(L, req, "max_tokens") != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
            luaL_error(L, "llm request field 'max_tokens' must be a positive integer");
        max_tokens = lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    return max_tokens;
}

static void openai_build(struct body *b, struct call *k, int req, int msgs, int prompt)
{
    lua_State *L = b->L;
    openai_messages(b, req, msgs, prompt);
    put_stop(b, req, "stop");
    /* OpenAI's newer models take only max_completion_tokens; most servers max_tokens. */
    const char *field = field_string(L, req, "max_tokens_field", "max_tokens", NULL);
    lua_Integer max_tokens = max_tokens_of(L, req);
    if (max_tokens > 0) {
        lua_pushinteger(L, max_tokens);
        put_member(b, field);
    }
    /* without this, streamed answers carry no token counts */
    if (k->stream && body_key(b, "stream_options"))
        body_add(b, "{\"include_usage\":true}", 22);
}

static void anthropic_build(struct body *b, struct call *k, int req, int msgs, int prompt)
{
    lua_State *L = b->L;
    anthropic_messages(b, req, msgs, prompt);
    put_stop(b, req, "stop_sequences");
    lua_Integer max_tokens = max_tokens_of(L, req);
    if (max_tokens < 0)
        luaL_error(L, "Anthropic requests need max_tokens");
    lua_pushinteger(L, max_tokens);
    put_member(b, "max_tokens");
}

/* req.extra's members, last. */
static void put_extra(struct body *b)
{
    lua_State *L = b->L;
    if (!b->extra)
        return;
    for (lua_pushnil(L); lua_next(L, b->extra); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "llm request field 'extra' must map names to values");
        if (b->out->len > 1)
            body_add(b, ",", 1);
        body_value(b, -2);
        body_add(b, ":", 1);
        body_value(b, -1);
    }
}

/* Builds the JSON body of req for k->wire into k->body. */
static void build_body(lua_State *L, struct call *k, int req)
{
    int top = lua_gettop(L);
    int t = lua_getfield(L, req, "extra");
    if (t != LUA_TTABLE && t != LUA_TNIL)
        luaL_error(L, "llm request field 'extra' must be a table");
    struct body b = {L, &k->body, t == LUA_TTABLE ? lua_gettop(L) : 0};
    body_add(&b, "{", 1);
    copy_member(&b, req, "model", "model");
    /* messages, or else one prompt: a batch of prompts makes no message tables */
    int msgs = 0, prompt = 0;
    t = lua_getfield(L, req, "messages");
    if (t == LUA_TNIL && lua_getfield(L, req, "prompt") != LUA_TNIL)
        prompt = lua_gettop(L);
    else if (t != LUA_TTABLE || luaL_len(L, -1) == 0)
        luaL_error(L, "llm request needs a non-empty list 'messages'");
    else
        msgs = lua_gettop(L);
    k->wire->build(&b, k, req, msgs, prompt);
    copy_member(&b, req, "temperature", "temperature");
    if (k->stream && body_key(&b, "stream"))
        body_add(&b, "true", 4);
    put_extra(&b);
    body_add(&b, "}", 1);
    lua_settop(L, top);
}

static void build_headers(lua_State *L, struct call *k, int req, const char *key)
{
    http_add_header(L, &k->headers, "Content-Type: application/json");
    http_add_header(L, &k->headers,
                    k->stream ? "Accept: text/event-stream" : "Accept: application/json");
    http_add_header(L, &k->headers, "Expect:");
    if (k->wire->version_header)
        http_add_header(L, &k->headers, k->wire->version_header);
    if (key && *key) {
        if (strpbrk(key, "\r\n"))
            luaL_error(L, "the API key contains a line break");
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        luaL_addstring(&b, k->wire->auth_prefix);
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

static const struct wire OPENAI, ANTHROPIC;

static const struct wire *wire_named(lua_State *L, const char *name)
{
    static const struct wire *const wires[] = {&OPENAI, &ANTHROPIC, &LLM_RESPONSES};
    for (size_t i = 0; i < sizeof wires / sizeof wires[0]; i++)
        if (strcmp(name, wires[i]->name) == 0)
            return wires[i];
    luaL_error(L, "llm request field 'wire' must be \"openai\", \"anthropic\" or \"responses\"");
    return NULL;
}

/* After SIGINT/SIGTERM no model call goes out, whatever Lua code caught the interrupt: the run
 * is ending, and a request now would only spend the user's money. */
static void refuse_after_interrupt(lua_State *L)
{
    if (host_signal != 0) {
        int signo = host_signal < 0 ? -host_signal : host_signal;
        luaL_error(L, "interrupted (SIG%s): no model call is made after an interrupt",
                   sigabbrev_np(signo));
    }
}

/* Sends the request table at req as call k (zeroed, its lp and id set). Raises
 * on misuse; what it took by then is k's to release. timeout, retries and backoff have their
 * defaults in lua/rlm/llm.lua, the policy. */
static void call_begin(lua_State *L, struct call *k, int req)
{
    reset_response(k);
    k->wire = wire_named(L, need_string(L, req, "wire"));
    k->url = dup_or_raise(L, need_string(L, req, "url"));
    const char *model = need_string(L, req, "model");
    k->name = dup_or_raise(L, field_string(L, req, "name", model, NULL));
    const char *key = field_string(L, req, "key", "", NULL);
    k->secret = dup_or_raise(L, key);
    lua_getfield(L, req, "stream");
    k->stream = lua_toboolean(L, -1);
    lua_pop(L, 1);
    double timeout = field_number(L, req, "timeout", FIELD_NEEDED);
    k->timeout_s = timeout > 0 ? timeout : 0.001;
    struct request_spec spec = {
        .http = {.method = "POST", .url = k->url, .max_answer = answer_cap(max_tokens_of(L, req))},
        .max_attempts = 1 + (int)field_number(L, req, "retries", FIELD_NEEDED),
        .backoff_base_ms = field_number(L, req, "backoff", FIELD_NEEDED) * 1e3,
        .backoff_cap_ms = BACKOFF_CAP_MS,
        .deadline_ms = loop_now_ms() + k->timeout_s * 1e3,
        /* A completion changes nothing on the server: repeating one only costs its tokens. */
        .replayable = 1,
        .hand_back_429 = field_number(L, req, "hand_back_429", 0) != 0,
        .on_attempt = reset_response,
        .done = request_done,
        .ud = k,
    };
    build_body(L, k, req);
    build_headers(L, k, req, key);
    spec.http.headers = k->headers;
    spec.http.body = k->body.data;
    spec.http.body_len = k->body.len;
    spec.on_chunk = k->stream ? on_chunk : NULL;
    refuse_after_interrupt(L);   /* reading the request ran Lua code (a field's __index) */
    k->req = request_start(k->lp, &spec);
    if (k->req == NULL)
        luaL_error(L, "out of memory");
}

static int l_start(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    refuse_after_interrupt(L);
    struct call *k = lua_newuserdatauv(L, sizeof *k, 0);
    memset(k, 0, sizeof *k);
    luaL_setmetatable(L, CALL);
    k->lp = loop_get(L);
    k->id = loop_new_id(k->lp);
    call_begin(L, k, 1);
    return 1;
}

/* ---------- decoding ---------- */

/* The string picked, unescaped into out (reset first); 0 when there is none. */
static int pick_string(const struct json_pick *p, struct buf *out)
{
    buf_clear(out);
    char *to = p->at && *p->at == '"' ? buf_room(out, p->len) : NULL;
    if (to == NULL)
        return 0;
    out->len = json_unescape(p->at, p->len, to);
    out->data[out->len] = '\0';
    return 1;
}

/* The string picked, cut to fit out (and at a NUL, as a C string is); unchanged when none. */
void take_string(const struct json_pick *p, char *out, size_t size)
{
    char small[256];
    if (p->at == NULL || *p->at != '"')
        return;
    if (p->len > sizeof small) {
        struct buf text = {0};
        if (pick_string(p, &text))
            snprintf(out, size, "%s", text.data);
        buf_free(&text);
        return;
    }
    size_t n = json_unescape(p->at, p->len, small);
    snprintf(out, size, "%.*s", (int)n, small);
}

void take_count(const struct json_pick *p, lua_Integer *out)
{
    int64_t n;
    if (p->at && json_integer(p->at, p->len, &n))
        *out = (lua_Integer)n;
}

/* Appends a picked JSON string to out (anything else, null included, adds nothing). */
void add_string(struct buf *out, const struct json_pick *p)
{
    char *to = p->at && *p->at == '"' ? buf_room(out, p->len) : NULL;
    if (to == NULL)
        return;
    out->len += json_unescape(p->at, p->len, to);
    out->data[out->len] = '\0';
}

void add_text(struct call *k, const struct json_pick *p)
{
    add_string(&k->text, p);
}

int is_container(const struct json_pick *p)
{
    return p->at && (*p->at == '[' || *p->at == '{');
}

void fail_with(struct call *k, const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->failure, sizeof k->failure, fmt, ap);
    va_end(ap);
    k->failure_kind = kind;
}

/* The provider's own message among picks that start with ERROR_PICKS (both providers nest
 * it as error.message; some servers send a bare string), and after them, with
 * top_level_message, a bare "message"; into out, or 0 when there is none. */
static int error_message(const struct json_pick *picks, int top_level_message, struct buf *out)
{
    for (int i = 0; i < (top_level_message ? 3 : 2); i++)
        if (pick_string(&picks[i], out))
            return 1;
    return 0;
}

/* A 2xx body or stream event that carries an error instead of an answer. */
int take_provider_error(struct call *k, const struct json_pick *picks)
{
    struct buf msg = {0};
    int found = error_message(picks, 0, &msg);
    if (found)
        fail_with(k, "provider", "the provider reported an error: %s", msg.data);
    buf_free(&msg);
    return found;
}


/* An OpenAI answer: a whole body (whole), or one stream event, whose text is a delta. */
static int openai_read(struct call *k, const char *data, size_t len, char *err, size_t errlen,
                       int whole)
{
    struct json_pick p[] = {ERROR_PICKS,
                            WANT("model"),
                            WANT("choices.1"),
                            WANT(whole ? "choices.1.message.content" : "choices.1.delta.content"),
                            WANT("choices.1.finish_reason"),
                            WANT("usage.prompt_tokens"),
                            WANT("usage.completion_tokens"),
                            WANT("usage.prompt_tokens_details.cached_tokens"),
                            WANT(whole ? "choices.1.message.refusal" : "choices.1.delta.refusal")};
    if (!json_pick(data, len, PICK(p), err, errlen))
        return 0;
    if (take_provider_error(k, p))
        return 1;
    take_string(&p[2], k->model, sizeof k->model);
    take_count(&p[8], &k->cache_read);   /* part of prompt_tokens (OpenAI's usage reference) */
    if (whole && !is_container(&p[3]))
        fail_with(k, "malformed", "the response has no choices");
    add_text(k, &p[4]);
    add_string(&k->refusal, &p[9]);
    take_string(&p[5], k->finish, sizeof k->finish);
    take_count(&p[6], &k->input_tokens);
    take_count(&p[7], &k->output_tokens);
    return 1;
}

static int openai_event(struct call *k, const char *data, size_t len, char *err, size_t errlen)
{
    return openai_read(k, data, len, err, errlen, 0);
}

static int anthropic_event(struct call *k, const char *data, size_t len, char *err,
                           size_t errlen)
{
    struct json_pick p[] = {ERROR_PICKS,
                            WANT("type"),
                            WANT("message.model"),
                            WANT("message.usage.input_tokens"),
                            WANT("message.usage.output_tokens"),
                            WANT("delta.text"),
                            WANT("delta.stop_reason"),
                            WANT("usage.input_tokens"),
                            WANT("usage.output_tokens"),
                            WANT("message.usage.cache_read_input_tokens"),
                            WANT("message.usage.cache_creation_input_tokens"),
                            WANT("usage.cache_read_input_tokens"),
                            WANT("usage.cache_creation_input_tokens")};
    if (!json_pick(data, len, PICK(p), err, errlen))
        return 0;
    char type[40] = "";
    take_string(&p[2], type, sizeof type);
    if (strcmp(type, "error") == 0) {
        if (!take_provider_error(k, p))
            fail_with(k, "provider", "the stream reported an error");
    } else if (strcmp(type, "message_start") == 0) {
        take_string(&p[3], k->model, sizeof k->model);
        take_count(&p[4], &k->input_tokens);
        take_count(&p[5], &k->output_tokens);
        take_count(&p[10], &k->cache_read);
        take_count(&p[11], &k->cache_write);
    } else if (strcmp(type, "content_block_delta") == 0) {
        add_text(k, &p[6]);
    } else if (strcmp(type, "message_delta") == 0) {
        take_string(&p[7], k->finish, sizeof k->finish);
        take_count(&p[8], &k->input_tokens);
        take_count(&p[9], &k->output_tokens);
        take_count(&p[12], &k->cache_read);
        take_count(&p[13], &k->cache_write);
    }
    return 1;
}

/* Decodes the queued events into text, model, finish reason and usage. */
static void drain_events(struct call *k)
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
        if (dlen == 6 && memcmp(data, "[DONE]", 6) == 0)   /* OpenAI's end, not JSON */
            continue;
        if (!k->wire->event(k, data, dlen, err, sizeof err)) {
            fail_with(k, "malformed", "a stream event is not valid JSON (%s): %.120s", err, data);
            break;
        }
    }
    buf_clear(&k->events);
    if (k->failure[0])   /* the answer is unusable: stop the transfer, the call is finished */
        request_stop(k->req);
}

static int call_take_deltas(lua_State *L)
{
    struct call *k = check_call(L, 1);
    size_t before = k->text.len;
    if (k->url)
        drain_events(k);
    k->notified = 0;
    lua_pushlstring(L, k->text.data ? k->text.data + before : "", k->text.len - before);
    if (k->text.len > before)
        request_mark_delivered(k->req);
    return 1;
}

static int openai_whole(struct call *k, const char *data, size_t len, char *err, size_t errlen)
{
    return openai_read(k, data, len, err, errlen, 1);
}

/* The text of an Anthropic content list: its "text" blocks, in order. */
static void anthropic_texts(struct call *k, const struct json_pick *content)
{
    size_t n;
    for (const char *item = json_next_item(content->at, content->len, NULL, &n); item;
         item = json_next_item(content->at, content->len, item + n, &n)) {
        struct json_pick p[] = {WANT("type"), WANT("text")};
        char type[32] = "";
        json_pick(item, n, PICK(p), NULL, 0);
        take_string(&p[0], type, sizeof type);
        if (strcmp(type, "text") == 0)
            add_text(k, &p[1]);
    }
}

static int anthropic_whole(struct call *k, const char *data, size_t len, char *err,
                           size_t errlen)
{
    struct json_pick p[] = {ERROR_PICKS, WANT("model"), WANT("content"), WANT("stop_reason"),
                            WANT("usage.input_tokens"), WANT("usage.output_tokens"),
                            WANT("usage.cache_read_input_tokens"),
                            WANT("usage.cache_creation_input_tokens")};
    if (!json_pick(data, len, PICK(p), err, errlen))
        return 0;
    if (take_provider_error(k, p))
        return 1;
    take_string(&p[2], k->model, sizeof k->model);
    if (!is_container(&p[3]))
        fail_with(k, "malformed", "the response has no content");
    else if (*p[3].at == '[')
        anthropic_texts(k, &p[3]);
    take_string(&p[4], k->finish, sizeof k->finish);
    take_count(&p[5], &k->input_tokens);
    take_count(&p[6], &k->output_tokens);
    take_count(&p[7], &k->cache_read);
    take_count(&p[8], &k->cache_write);
    return 1;
}

/* Parses a whole (not streamed) response body. */
static void parse_body(struct call *k)
{
    const struct http_call *c = k->req->call;
    const char *body = c->body.data ? c->body.data : "";
    char err[160];
    if (!k->wire->whole(k, body, c->body.len, err, sizeof err))
        fail_with(k, "malformed", "the response is not valid JSON (%s): %.120s", err, body);
}

static int openai_ends_stream(const char *event, const char *data, size_t len)
{
    return len == 6 && memcmp(data, "[DONE]", 6) == 0;
}

static int anthropic_ends_stream(const char *event, const char *data, size_t len)
{
    return strcmp(event, "message_stop") == 0;
}

static const char *const same_words[][2] = {{NULL, NULL}};
/* Anthropic's stop reasons in the OpenAI words, so callers test one vocabulary. */
static const char *const anthropic_words[][2] = {
    {"end_turn", "stop"},         {"stop_sequence", "stop"}, {"max_tokens", "length"},
    {"model_context_window_exceeded", "length"},
    {"tool_use", "tool_calls"},   {"pause_turn", "stop"},    {"refusal", "refusal"},
    {NULL, NULL}};

static const struct wire OPENAI = {
    .name = "openai",
    .auth_prefix = "Authorization: Bearer ",
    .build = openai_build,
    .ends_stream = openai_ends_stream,
    .event = openai_event,
    .whole = openai_whole,
    .finish_words = same_words,
};

static const struct wire ANTHROPIC = {
    .name = "anthropic",
    .auth_prefix = "x-api-key: ",
    .version_header = "anthropic-version: 2023-06-01",
    .build = anthropic_build,
    .ends_stream = anthropic_ends_stream,
    .event = anthropic_event,
    .whole = anthropic_whole,
    .finish_words = anthropic_words,
};

/* ---------- results ---------- */

static const char *finish_reason(const struct call *k)
{
    for (const char *const (*w)[2] = k->wire->finish_words; (*w)[0]; w++)
        if (strcmp(k->finish, (*w)[0]) == 0)
            return (*w)[1];
    return k->finish;
}

/* Returns nil, err (fail.h) whose message is "<name>: <msg><attempts note>" with the key
 * scrubbed; err also says the attempts. The message is at the top of the stack. */
static int push_failure(lua_State *L, struct call *k, const char *kind, long status)
{
    char note[96];
    request_attempts_note(k->req, note, sizeof note);
    host_push_redacted(L, lua_pushfstring(L, "%s: %s%s", k->name, lua_tostring(L, -1), note),
                       k->secret);
    fail_push(L, kind, status, status > 0 ? k->req->retry_after : -1);
    lua_pushinteger(L, k->req->attempts);
    lua_setfield(L, -2, "attempts");
    luaL_pushfail(L);
    lua_insert(L, -2);
    return 2;
}

static int fail_status(lua_State *L, struct call *k)
{
    const struct http_call *c = k->req->call;
    long s = c->status;
    char err[64];
    const char *detail = NULL;
    struct buf msg = {0};
    struct json_pick p[] = {ERROR_PICKS, WANT("message")};
    if (c->body.len && json_pick(c->body.data, c->body.len, PICK(p), err, sizeof err) &&
        error_message(p, 1, &msg))
        detail = lua_pushlstring(L, msg.data, msg.len);
    buf_free(&msg);
    if (detail == NULL && c->body.len)   /* not JSON: a proxy's page, say; show its start */
        detail = lua_pushlstring(L, c->body.data, c->body.len < 200 ? c->body.len : 200);
    char after[96] = "";
    if (k->req->wait_past_deadline)
        snprintf(after, sizeof after, "; the server asked to wait %.0f s, past the deadline",
                 k->req->retry_after);
    const char *phrase = http_reason_phrase(s);
    lua_pushfstring(L, "HTTP %d%s%s%s%s%s", (int)s, *phrase ? " " : "", phrase,
                    detail ? ": " : "", detail ? detail : "", after);
    return push_failure(L, k, "http", s);
}

static int fail_transport(lua_State *L, struct call *k)
{
    const struct http_call *c = k->req->call;
    CURLcode r = c->result;
    if (r == CURLE_OPERATION_TIMEDOUT) {
        char within[32];
        snprintf(within, sizeof within, "%.1f", k->timeout_s);
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
    if (c->too_large) {
        lua_pushfstring(L, "%s, more than its max_tokens can need (an endless or broken answer)",
                        http_failure_message(c));
        return push_failure(L, k, "too_large", c->status);
    }
    lua_pushfstring(L, "cannot reach %s (%s): %s", k->url, http_failure_kind(c),
                    http_failure_message(c));
    return push_failure(L, k, http_failure_kind(c), 0);
}

static int push_success(lua_State *L, struct call *k)
{
    lua_createtable(L, 0, 5);
    lua_pushlstring(L, k->text.data ? k->text.data : "", k->text.len);
    lua_setfield(L, -2, "text");
    /* A refusal is one finish reason on every wire: OpenAI's comes as message.refusal. */
    lua_pushstring(L, k->refusal.len ? "refusal" : finish_reason(k));
    lua_setfield(L, -2, "finish_reason");
    if (k->refusal.len) {
        lua_pushlstring(L, k->refusal.data, k->refusal.len);
        lua_setfield(L, -2, "refusal");
    }
    lua_pushstring(L, k->model);
    lua_setfield(L, -2, "model");
    /* Anthropic's input_tokens leaves out what was read from or written to the cache (its
     * usage reference: total input is the sum of the three); OpenAI's prompt_tokens holds it. */
    lua_Integer read = k->cache_read > 0 ? k->cache_read : 0;
    lua_Integer written = k->cache_write > 0 ? k->cache_write : 0;
    lua_Integer input = k->input_tokens > 0 ? k->input_tokens : 0;
    if (k->wire == &ANTHROPIC)
        input += read + written;
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, input);
    lua_setfield(L, -2, "input_tokens");
    lua_pushinteger(L, k->output_tokens > 0 ? k->output_tokens : 0);
    lua_setfield(L, -2, "output_tokens");
    lua_pushinteger(L, read);
    lua_setfield(L, -2, "cache_read_tokens");
    lua_pushinteger(L, written);
    lua_setfield(L, -2, "cache_write_tokens");
    lua_setfield(L, -2, "usage");
    lua_pushinteger(L, k->req->attempts);
    lua_setfield(L, -2, "attempts");
    return 1;
}

/* The finished call's result: pushes res (returns 1) or nil, err (returns 2). */
static int push_result(lua_State *L, struct call *k)
{
    const struct http_call *c = k->req->call;
    if (c == NULL)
        fail_with(k, "request", "cannot start the request (bad URL or out of memory)");
    if (k->failure[0] == '\0') {
        if (c->result != CURLE_OK)
            return fail_transport(L, k);
        if (c->status < 200 || c->status >= 300)
            return fail_status(L, k);
        if (k->sse_mode) {
            drain_events(k);
            if (!k->failure[0] && !k->terminal && !k->finish[0])
                fail_with(k, "cut", "the response stream ended before the answer was complete");
        } else if (k->text.len == 0 && !k->finish[0]) {
            parse_body(k);
        }
    }
    if (k->failure[0]) {
        lua_pushstring(L, k->failure);
        return push_failure(L, k, k->failure_kind, c ? c->status : 0);
    }
    return push_success(L, k);
}

static int call_result(lua_State *L)
{
    struct call *k = check_call(L, 1);
    lua_settop(L, 1);
    if (k->url == NULL)
        return luaL_error(L, "the llm call was cancelled");
    if (!k->req->finished)
        return luaL_error(L, "the llm call is still running; wait for it first");
    return push_result(L, k);
}

static int call_id(lua_State *L)
{
    lua_pushinteger(L, check_call(L, 1)->id);
    return 1;
}

static int call_done(lua_State *L)
{
    struct call *k = check_call(L, 1);
    lua_pushboolean(L, k->req == NULL || k->req->finished);
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
                    k->req == NULL || k->req->finished ? "done" : "running");
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
    netlib_curl(L);
    loop_get(L);
    host_newclass(L, CALL, call_metamethods, call_methods);
    luaL_newlib(L, llm_funcs);
    return 1;
}
