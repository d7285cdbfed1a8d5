/* lhttp.c — HTTP on the event loop: the shared C call layer (http.h) and rlm.core.http:
 *   start{url=, method=, headers=, body=, timeout=, connect_timeout=, stream=} -> transfer
 *   transfer:id()      op id, ready when the transfer ends (and, with stream, on new data)
 *   transfer:done()    true once finished
 *   transfer:take()    body bytes received since the last take (stream mode)
 *   transfer:result()  {status, headers, body, url, seconds, new_connections} | nil, msg, kind
 *   transfer:cancel()  stops it; also __gc and __close
 * Waiting is lua/rlm/http.lua's job, through lua/rlm/async.lua. */
#include <ctype.h>
#include <strings.h>
#include <sys/socket.h>

#include <lauxlib.h>

#include "host.h"

#include "http.h"

#define TRANSFER "rlm.http.transfer"

/* ---------- the C call layer ---------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct http_call *c = ud;
    size_t n = size * nmemb;
    if (c->on_chunk) {
        c->on_chunk(c->ud, c, ptr, n);
        return n;
    }
    return buf_add(&c->body, ptr, n) == 0 ? n : 0;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct http_call *c = ud;
    size_t n = size * nmemb;
    /* A new status line starts a new response (after 100-continue or a redirect). */
    if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0) {
        buf_clear(&c->headers);
        const char *sp = memchr(ptr, ' ', n);
        if (sp)
            c->status = strtol(sp + 1, NULL, 10);
        return n;
    }
    return buf_add(&c->headers, ptr, n) == 0 ? n : 0;
}

static void on_done(void *ud, CURLcode result)
{
    struct http_call *c = ud;
    c->running = 0;
    c->result = result;
    curl_easy_getinfo(c->easy, CURLINFO_NUM_CONNECTS, &c->new_connections);
    curl_easy_getinfo(c->easy, CURLINFO_TOTAL_TIME, &c->seconds);
    if (result == CURLE_OK)
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &c->status);
    if (c->done)
        c->done(c->ud, c);
}

/* curl's own sockets are inheritable; every process rlm starts must get none of them (a
 * sandbox with the host's keep-alive connection to a model server could talk over it). */
static curl_socket_t open_cloexec_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

struct http_call *http_start(loop *lp, const struct http_req *req, http_chunk_fn on_chunk,
                             http_done_fn done, void *ud)
{
    struct http_call *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->easy = curl_easy_init();
    if (c->easy == NULL) {
        free(c);
        return NULL;
    }
    c->lp = lp;
    c->on_chunk = on_chunk;
    c->done = done;
    c->ud = ud;
    CURL *e = c->easy;
    curl_easy_setopt(e, CURLOPT_URL, req->url);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_cloexec_socket);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->error);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(e, CURLOPT_USERAGENT, "rlm/" "0.1");
    if (req->headers)
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, req->headers);
    if (req->timeout_ms > 0)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, req->timeout_ms);
    if (req->connect_timeout_ms > 0)
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, req->connect_timeout_ms);
    const char *method = req->method;
    if (req->body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body);
    }
    if (method && strcasecmp(method, "HEAD") == 0)
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else if (method && strcasecmp(method, "GET") == 0 && req->body == NULL)
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    else if (method && !(strcasecmp(method, "POST") == 0 && req->body))
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    c->running = 1;
    if (loop_add_easy(lp, e, on_done, c) != 0) {
        curl_easy_cleanup(e);
        free(c);
        return NULL;
    }
    return c;
}

void http_free(struct http_call *c)
{
    if (c == NULL)
        return;
    if (c->running)
        loop_remove_easy(c->lp, c->easy);
    curl_easy_cleanup(c->easy);
    buf_free(&c->body);
    buf_free(&c->headers);
    free(c);
}

/* Calls fn for each "Name: value" line of the final response's headers. */
static void each_header(const struct http_call *c,
                        int (*fn)(void *ud, const char *name, size_t nlen, const char *val, size_t vlen),
                        void *ud)
{
    const char *p = c->headers.data, *end = p + c->headers.len;
    while (p && p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = eol ? eol : end;
        const char *colon = memchr(p, ':', (size_t)(line_end - p));
        if (colon && colon > p) {
            const char *v = colon + 1, *ve = line_end;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && isspace((unsigned char)ve[-1]))
                ve--;
            if (fn(ud, p, (size_t)(colon - p), v, (size_t)(ve - v)))
                return;
        }
        p = eol ? eol + 1 : end;
    }
}

struct header_find {
    const char *name;
    char *out;
    size_t size;
    int found;
};

static int find_header(void *ud, const char *name, size_t nlen, const char *val, size_t vlen)
{
    struct header_find *f = ud;
    if (strlen(f->name) != nlen || strncasecmp(f->name, name, nlen) != 0)
        return 0;
    size_t n = vlen < f->size - 1 ? vlen : f->size - 1;
    memcpy(f->out, val, n);
    f->out[n] = '\0';
    f->found = 1;
    return 1;
}

int http_header(const struct http_call *c, const char *name, char *out, size_t size)
{
    struct header_find f = {name, out, size, 0};
    if (size == 0)
        return -1;
    each_header(c, find_header, &f);
    return f.found ? 0 : -1;
}

const char *http_failure_kind(CURLcode r)
{
    switch (r) {
    case CURLE_COULDNT_CONNECT:
        return "connect";
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return "dns";
    case CURLE_OPERATION_TIMEDOUT:
        return "timeout";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
        return "tls";
    default:
        return "transfer";
    }
}

void http_add_header(lua_State *L, struct curl_slist **list, const char *line)
{
    if (strpbrk(line, "\r\n"))
        luaL_error(L, "header contains a line break");
    struct curl_slist *n = curl_slist_append(*list, line);
    if (n == NULL)
        luaL_error(L, "out of memory");
    *list = n;
}

const char *http_reason_phrase(long status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 529: return "Overloaded";
    default: return "";
    }
}

const char *http_failure_message(const struct http_call *c)
{
    return c->error[0] ? c->error : curl_easy_strerror(c->result);
}

/* ---------- rlm.core.http ---------- */

struct transfer {
    struct http_call *call;
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
    if (!t->notified) {
        t->notified = 1;
        loop_ready(c->lp, t->id);
    }
}

static void transfer_done(void *ud, struct http_call *c)
{
    struct transfer *t = ud;
    loop_ready(c->lp, t->id);
}

static void transfer_release(struct transfer *t)
{
    http_free(t->call);
    t->call = NULL;
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

static const char *opt_string(lua_State *L, int req, const char *field, size_t *len)
{
    lua_getfield(L, req, field);
    const char *s = lua_isnil(L, -1) ? NULL : lua_tolstring(L, -1, len);
    if (s == NULL && !lua_isnil(L, -1))
        luaL_error(L, "request field '%s' must be a string", field);
    lua_pop(L, 1);  /* the request table keeps the string alive */
    return s;
}

static double opt_number(lua_State *L, int req, const char *field, double dflt)
{
    lua_getfield(L, req, field);
    double v = lua_isnil(L, -1) ? dflt : lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
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
    struct http_req req = {0};
    req.url = opt_string(L, 1, "url", NULL);
    if (req.url == NULL)
        return luaL_error(L, "request needs a 'url'");
    req.method = opt_string(L, 1, "method", NULL);
    req.body = opt_string(L, 1, "body", &req.body_len);
    req.timeout_ms = (long)(opt_number(L, 1, "timeout", 120) * 1e3);
    req.connect_timeout_ms = (long)(opt_number(L, 1, "connect_timeout", 10) * 1e3);
    lua_getfield(L, 1, "stream");
    t->stream = lua_toboolean(L, -1);
    lua_pop(L, 1);
    read_headers(L, 1, t);
    req.headers = t->headers;
    t->id = loop_new_id(lp);
    t->call = http_start(lp, &req, t->stream ? transfer_chunk : NULL, transfer_done, t);
    if (t->call == NULL)
        return luaL_error(L, "cannot start a request to %s (bad URL or out of memory)", req.url);
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
    lua_pushboolean(L, t->call == NULL || !t->call->running);
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
    struct http_call *c = t->call;
    if (c == NULL)
        return luaL_error(L, "transfer was cancelled");
    if (c->running)
        return luaL_error(L, "transfer is still running; wait for it first");
    if (c->result != CURLE_OK) {
        luaL_pushfail(L);
        lua_pushstring(L, http_failure_message(c));
        lua_pushstring(L, http_failure_kind(c->result));
        return 3;
    }
    lua_createtable(L, 0, 6);
    lua_pushinteger(L, c->status);
    lua_setfield(L, -2, "status");
    lua_newtable(L);
    each_header(c, push_header, L);
    lua_setfield(L, -2, "headers");
    lua_pushlstring(L, c->body.data ? c->body.data : "", c->body.len);
    lua_setfield(L, -2, "body");
    char *url = NULL;
    curl_easy_getinfo(c->easy, CURLINFO_EFFECTIVE_URL, &url);
    lua_pushstring(L, url);
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
    loop_get(L);
    host_newclass(L, TRANSFER, transfer_metamethods, transfer_methods);
    luaL_newlib(L, http_funcs);
    return 1;
}
