/* http.h — the one HTTP layer under rlm.core.http, the LLM binding and the Daytona binding.
 * A call is one HTTP exchange (host/http.c) run on the event loop; callbacks run from loop.poll in plain C
 * (never Lua). Retries, parsing and Lua results are the caller's business. libcurl carries
 * every exchange. */
#ifndef RLM_HTTP_H
#define RLM_HTTP_H
#include "netlib.h"
#include "buf.h"
#include "loop.h"

struct http_req {
    const char *method;            /* NULL: GET, or POST when body is set */
    const char *url;
    struct curl_slist *headers;    /* borrowed; must outlive the call */
    const char *body;              /* borrowed; must outlive the call */
    size_t body_len;
    long timeout_ms;               /* whole exchange; 0 = none */
    long connect_timeout_ms;       /* 0 = curl's default */
    size_t max_answer;             /* bytes of answer body (kept or streamed) before the call
                                    * fails as too_large; 0 = HTTP_MAX_ANSWER */
    int fresh_connect;             /* on a connection of its own (see request.c) */
};

/* No server's answer grows rlm without end: an endless body fails here (bindings may set
 * their own cap). */
#define HTTP_MAX_ANSWER ((size_t)256 << 20)

struct http_call;
/* on_chunk: body bytes as they arrive (the body is then not kept); NULL keeps the body. */
typedef void (*http_chunk_fn)(void *ud, struct http_call *c, const char *data, size_t len);
typedef void (*http_done_fn)(void *ud, struct http_call *c);

struct http_call {
    CURL *easy;                    /* the curl transfer */
    loop *lp;
    long status;                   /* of the final response; 0 before headers */
    struct buf body;
    struct buf headers;            /* raw header lines of the final response */
    CURLcode result;
    char error[CURL_ERROR_SIZE];
    long new_connections;
    double seconds;
    size_t received, max_answer;   /* answer body bytes so far, and the cap */
    int running, too_large;
    http_chunk_fn on_chunk;
    http_done_fn done;
    void *ud;
};

/* Starts a call; NULL when out of memory or curl refuses the options. */
struct http_call *http_start(loop *lp, const struct http_req *req, http_chunk_fn on_chunk,
                             http_done_fn done, void *ud);
/* Stops the call if it is still running; what arrived stays readable. Safe on NULL. */
void http_stop(struct http_call *c);
/* Cancels the call if it is still running, and frees it. Safe on NULL. */
void http_free(struct http_call *c);
/* Copies the value of a response header (case-insensitive) into out; 0 if present. */
int http_header(const struct http_call *c, const char *name, char *out, size_t size);
/* Calls fn for each "Name: value" line of the final response's headers until fn returns
 * nonzero. */
typedef int (*http_header_fn)(void *ud, const char *name, size_t nlen, const char *val,
                              size_t vlen);
void http_each_header(const struct http_call *c, http_header_fn fn, void *ud);
/* The URL the answer came from (curl's effective URL). */
const char *http_url(const struct http_call *c);
/* Short machine-readable kind of a failed call: connect, dns, timeout, tls, too_large (the
 * answer passed max_answer), transfer. */
const char *http_failure_kind(const struct http_call *c);
/* For bindings building a request from Lua: appends a "Name: value" line to *list. Raises on
 * a line break (it would smuggle a header of its own) and when out of memory. */
void http_add_header(lua_State *L, struct curl_slist **list, const char *line);
/* The reason phrase of an HTTP status ("Not Found"), or "" for one without a common phrase. */
const char *http_reason_phrase(long status);
/* A human message for a failed call (curl's own words; never headers or bodies). */
const char *http_failure_message(const struct http_call *c);

#endif
