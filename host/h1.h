/* h1.h — plain HTTP/1.1 to a numeric address on the event loop: the short path under http.c.
 *
 * A sub-call to a model server over plain http (a stand-in, a local vLLM or ollama, a LiteLLM
 * gateway on the network) spent about half of the host's CPU inside libcurl: its URL parser,
 * its printf for every header line, its connection cache and state machine, about 80,000
 * instructions a request where the exchange itself needs a few thousand. This client does only
 * what such an exchange needs: a connection from a keep-alive pool, the request written with one
 * sendmsg, the answer framed by Content-Length, chunks or the close, and every failure reported
 * with the CURLcode libcurl would have given, so nothing above http.c can tell the two apart.
 *
 * http.c gives it only requests it serves as curl would (h1_serves): an "http://" URL whose host
 * is an IPv4 or bracketed IPv6 literal, no proxy in the environment, no header that changes the
 * framing, and RLM_HTTP_CLIENT not "curl". https, host names and proxies stay with libcurl. */
#ifndef RLM_H1_H
#define RLM_H1_H
#include <sys/socket.h>

#include "http.h"

/* Where a served request goes, read from its URL by h1_serves. */
struct h1_target {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    const char *path;              /* into the URL: the request target, "" for "/" */
    size_t path_len;
    char host[64];                 /* the Host header: the literal, and ":port" unless 80 */
};

/* Whether this client serves req as libcurl would; fills t when it does. */
int h1_serves(const struct http_req *req, struct h1_target *t);

struct h1_exchange;
/* Starts the exchange of call c (which it fills: status, headers, body, result, error,
 * new_connections, seconds; running is cleared and c->done called from the loop when it ends).
 * NULL when out of memory. */
struct h1_exchange *h1_start(loop *lp, const struct http_req *req, const struct h1_target *t,
                             struct http_call *c);
/* Ends a running exchange without calling done; its connection is closed. Safe from on_chunk. */
void h1_stop(struct h1_exchange *x);
void h1_free(struct h1_exchange *x);
/* The URL the exchange asked for, as curl reports it (a bare host gets its "/"). */
const char *h1_url(const struct h1_exchange *x);

/* The idle connections of a loop (kept by loop.c, closed with it). */
struct h1_pool;
void h1_pool_close(struct h1_pool *pool);

#endif
