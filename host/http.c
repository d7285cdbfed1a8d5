/* http.c — the one curl layer (see http.h): an exchange on the event loop, its headers, and
 * the words for its failures. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <lauxlib.h>

#include "http.h"

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct http_call *c = ud;
    size_t n = size * nmemb;
    c->received += n;
    if (c->received > c->max_answer) {
        c->too_large = 1;
        return 0;                  /* curl stops the transfer: CURLE_WRITE_ERROR */
    }
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
    if (c->too_large) {
        buf_free(&c->body);
        snprintf(c->error, sizeof c->error, "the answer is larger than %zu bytes",
                 c->max_answer);
    }
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
    c->lp = lp;
    c->max_answer = req->max_answer ? req->max_answer : HTTP_MAX_ANSWER;
    c->on_chunk = on_chunk;
    c->done = done;
    c->ud = ud;
    c->easy = loop_easy(lp);
    if (c->easy == NULL) {
        free(c);
        return NULL;
    }
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
    if (req->fresh_connect)
        curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
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
        loop_easy_done(lp, e);
        free(c);
        return NULL;
    }
    return c;
}

void http_stop(struct http_call *c)
{
    if (c && c->running) {
        loop_remove_easy(c->lp, c->easy);
        c->running = 0;
    }
}

void http_free(struct http_call *c)
{
    if (c == NULL)
        return;
    http_stop(c);
    loop_easy_done(c->lp, c->easy);
    buf_free(&c->body);
    buf_free(&c->headers);
    free(c);
}

void http_each_header(const struct http_call *c, http_header_fn fn, void *ud)
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
    http_each_header(c, find_header, &f);
    return f.found ? 0 : -1;
}

const char *http_url(const struct http_call *c)
{
    char *url = NULL;
    curl_easy_getinfo(c->easy, CURLINFO_EFFECTIVE_URL, &url);
    return url;
}

const char *http_failure_kind(const struct http_call *c)
{
    if (c->too_large)
        return "too_large";
    switch (c->result) {
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
