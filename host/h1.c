/* h1.c — plain HTTP/1.1 on the event loop; see h1.h for what it serves and why.
 *
 * Framing follows RFC 9112 section 6.3: no body for HEAD, 1xx, 204 and 304; chunked when it is
 * the last transfer coding; otherwise Content-Length (every copy the same number), else the
 * body runs to the close. Interim 1xx answers are skipped as curl skips them. A connection goes
 * back to the pool only after a complete answer that did not ask to close and left no stray
 * byte behind. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "h1.h"

#define USER_AGENT "rlm/0.1"
#define MAX_HEAD (100 * 1024)          /* curl's CURL_MAX_HTTP_HEADER */
#define MAX_LINE 4096                  /* a chunk-size or trailer line */
#define MAX_IDLE 256                   /* idle connections kept per loop */
#define MAX_IDLE_MS 118000.0           /* curl's CURLOPT_MAXAGE_CONN default */
#define CONNECT_TIMEOUT_MS 300000.0    /* curl's default when none is given */

struct h1_conn {
    int fd;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    double idle_since;
    struct h1_pool *pool;
    struct h1_conn *next;
};

struct h1_pool {
    loop *lp;
    struct h1_conn *idle;              /* most recently used first */
    size_t nidle;
};

enum phase {
    CONNECTING, SENDING,               /* the head of the answer may come while sending */
    HEAD,                              /* request sent, reading the answer's head */
    BODY_LENGTH, BODY_TO_CLOSE,
    CHUNK_SIZE, CHUNK_DATA, CHUNK_DATA_END, TRAILERS,
    ANSWERED                           /* the whole answer is in */
};

struct h1_exchange {
    struct http_call *call;
    loop *lp;
    struct h1_pool *pool;
    struct h1_target to;
    int fd;
    short events;                      /* what fd is watched for */
    enum phase phase;
    int reused;                        /* the connection came from the pool */
    int head_only;                     /* a HEAD request: the answer has no body */
    int keep_alive;
    int sending;                       /* request bytes remain; sent while the answer comes */
    int status_seen;                   /* the current answer's status line was read */
    int finished;                      /* outcome is decided; complete() hands it on */
    int stopped;                       /* h1_stop: no outcome will be handed on */
    CURLcode outcome;
    struct buf out;                    /* the request head */
    const char *body;
    size_t body_len, sent;             /* sent counts head and body */
    struct buf head;                   /* the answer's head as it arrives */
    struct buf line;                   /* a chunk-size or trailer line as it arrives */
    uint64_t left;                     /* bytes of the body or of the chunk still to come */
    size_t received;                   /* answer bytes of any kind */
    double started, deadline, connect_deadline, connect_ms;
    lua_Integer timer;
    char *url;
};

static char scratch[64 * 1024];        /* every read lands here first: the loop is one thread */

/* ---- which requests are served ---- */

/* Proxies curl would use for an http:// URL, or RLM_HTTP_CLIENT=curl: then curl takes them all.
 * Read once; the environment of a running rlm does not change. */
static int curl_wanted(void)
{
    static int wanted = -1;
    if (wanted < 0) {
        static const char *const vars[] = {"http_proxy", "all_proxy", "ALL_PROXY"};
        const char *choice = getenv("RLM_HTTP_CLIENT");
        wanted = choice != NULL && strcmp(choice, "curl") == 0;
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
            const char *v = getenv(vars[i]);
            wanted |= v != NULL && v[0] != '\0';
        }
    }
    return wanted;
}

static int parse_port(const char *p, const char *end, unsigned *port)
{
    unsigned v = 0;
    if (p == end || end - p > 5)
        return 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (unsigned)(*p - '0');
    }
    *port = v;
    return v >= 1 && v <= 65535;
}

/* The host part of an authority: a dotted IPv4 literal or a bracketed IPv6 one (no zone). */
static int parse_host(const char *p, const char *end, struct h1_target *t, const char **after)
{
    char lit[INET6_ADDRSTRLEN];
    if (*p == '[') {
        const char *close = memchr(p, ']', (size_t)(end - p));
        size_t n = close ? (size_t)(close - p - 1) : 0;
        if (close == NULL || n == 0 || n >= sizeof lit)
            return 0;
        memcpy(lit, p + 1, n);
        lit[n] = '\0';
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&t->addr;
        a->sin6_family = AF_INET6;
        t->addrlen = sizeof *a;
        *after = close + 1;
        return inet_pton(AF_INET6, lit, &a->sin6_addr) == 1;
    }
    const char *colon = memchr(p, ':', (size_t)(end - p));
    const char *hend = colon ? colon : end;
    size_t n = (size_t)(hend - p);
    if (n == 0 || n >= INET_ADDRSTRLEN)
        return 0;
    memcpy(lit, p, n);
    lit[n] = '\0';
    struct sockaddr_in *a = (struct sockaddr_in *)&t->addr;
    a->sin_family = AF_INET;
    t->addrlen = sizeof *a;
    *after = hend;
    return inet_pton(AF_INET, lit, &a->sin_addr) == 1;   /* four dotted numbers, nothing else */
}

/* "http://" literal [":" port] [target]; the target plain printable ASCII without a fragment,
 * which curl would have to rewrite or refuse. */
static int parse_url(const char *url, struct h1_target *t)
{
    if (strncasecmp(url, "http://", 7) != 0)
        return 0;
    const char *auth = url + 7;
    const char *path = auth + strcspn(auth, "/?#");
    if (*path == '#' || memchr(auth, '@', (size_t)(path - auth)))
        return 0;
    for (const char *p = path; *p; p++) {
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f || *p == '#')
            return 0;
        /* a "." or ".." segment, which curl removes (RFC 3986 5.2.4) */
        if (*p == '/' && p[1] == '.' && (p[2] == '/' || p[2] == '?' || p[2] == '\0' ||
                                         (p[2] == '.' && (p[3] == '/' || p[3] == '?' || p[3] == '\0'))))
            return 0;
    }
    const char *after;
    memset(&t->addr, 0, sizeof t->addr);
    if (!parse_host(auth, path, t, &after))
        return 0;
    unsigned port = 80;
    if (after < path && (*after != ':' || !parse_port(after + 1, path, &port)))
        return 0;
    if (t->addr.ss_family == AF_INET)
        ((struct sockaddr_in *)&t->addr)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)&t->addr)->sin6_port = htons((uint16_t)port);
    size_t hostlen = (size_t)(after - auth);
    if (hostlen + 7 > sizeof t->host)
        return 0;
    memcpy(t->host, auth, hostlen);
    if (port != 80)
        snprintf(t->host + hostlen, sizeof t->host - hostlen, ":%u", port);
    else
        t->host[hostlen] = '\0';
    t->path = path;
    t->path_len = strlen(path);
    return 1;
}

/* RFC 9110's tchar: the bytes of a method or a header name. */
static const unsigned char tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

static int is_token(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!tchar[(unsigned char)s[i]])
            return 0;
    return n > 0;
}

/* Whether the header name line[0..n) is the literal name (any case). */
#define NAMED(line, n, name) ((n) == sizeof name - 1 && strncasecmp(line, name, n) == 0)

/* curl's ISSPACE: what counts as blank in a header value. */
static int blank(const char *v)
{
    return v[strspn(v, " \t\n\v\f\r")] == '\0';
}

/* How curl sends a header line (lib/http.c, Curl_add_custom_headers): with a colon, "Name: value"
 * as it is, unless the value is blank (then not at all: it drops a default header of that
 * name); without one, "Name;" alone is sent as "Name:" (empty), any other line not at all.
 * The name: where the colon (or the final semicolon) is; 0 for a line h1 does not serve. */
static size_t header_name(const char *line)
{
    const char *colon = strchr(line, ':');
    if (colon)
        return (size_t)(colon - line);
    size_t n = strlen(line);
    return n > 1 && line[n - 1] == ';' ? n - 1 : 0;
}

/* Header lines h1 sends as curl would. Lines that set the framing, the connection or the
 * encoding of the answer, an Expect with a value, and lines curl would not send or would
 * rewrite leave the request to curl. */
static int headers_served(const struct curl_slist *h, size_t body_len)
{
    int expect = 0;
    for (; h; h = h->next) {
        const char *d = h->data;
        size_t n = header_name(d);
        if (!is_token(d, n) || NAMED(d, n, "host") || NAMED(d, n, "content-length") ||
            NAMED(d, n, "transfer-encoding") || NAMED(d, n, "connection") ||
            NAMED(d, n, "upgrade") || NAMED(d, n, "te") || NAMED(d, n, "trailer") ||
            NAMED(d, n, "keep-alive") || NAMED(d, n, "proxy-connection") ||
            NAMED(d, n, "accept-encoding") ||   /* curl decodes what it asks for; h1 asks none */
            (NAMED(d, n, "expect") && !blank(d + n + 1)))
            return 0;
        expect |= NAMED(d, n, "expect");
    }
    /* curl sends "Expect: 100-continue" with a body over 1 MB and waits for the 100 */
    return expect || body_len <= 1024 * 1024;
}

int h1_serves(const struct http_req *req, struct h1_target *t)
{
    if (req->method && !is_token(req->method, strlen(req->method)))
        return 0;
    return !curl_wanted() && parse_url(req->url, t) &&
           headers_served(req->headers, req->body ? req->body_len : 0);
}

/* ---- the request ---- */

static int add_str(struct buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

/* The head curl would send: its default headers unless a line names them, the caller's lines,
 * and for a body its length and curl's default type for posted fields. */
/* The method curl sends (http.c maps these onto its own requests, which it names itself). */
static const char *method_of(const struct http_req *req)
{
    const char *m = req->method;
    if (m == NULL)
        return req->body ? "POST" : "GET";
    if (strcasecmp(m, "HEAD") == 0)
        return "HEAD";
    if (strcasecmp(m, "GET") == 0 && req->body == NULL)
        return "GET";
    if (strcasecmp(m, "POST") == 0 && req->body)
        return "POST";
    return m;
}

static int build_head(struct buf *b, const struct http_req *req, const struct h1_target *t)
{
    const char *method = method_of(req);
    int agent = 1, accept = 1, type = req->body != NULL, err = 0;
    const struct curl_slist *h;
    for (h = req->headers; h; h = h->next) {
        size_t n = header_name(h->data);
        agent &= !NAMED(h->data, n, "user-agent");
        accept &= !NAMED(h->data, n, "accept");
        type &= !NAMED(h->data, n, "content-type");
    }
    err |= add_str(b, method);
    err |= buf_add(b, " ", 1);
    if (t->path_len == 0 || t->path[0] == '?')
        err |= buf_add(b, "/", 1);
    err |= buf_add(b, t->path, t->path_len);
    err |= add_str(b, " HTTP/1.1\r\nHost: ");
    err |= add_str(b, t->host);
    err |= buf_add(b, "\r\n", 2);
    if (agent)
        err |= add_str(b, "User-Agent: " USER_AGENT "\r\n");
    if (accept)
        err |= add_str(b, "Accept: */*\r\n");
    for (h = req->headers; h; h = h->next) {
        size_t n = header_name(h->data);
        if (h->data[n] == ';') {   /* "Name;": the header with no value */
            err |= buf_add(b, h->data, n);
            err |= buf_add(b, ":\r\n", 3);
        } else if (!blank(h->data + n + 1)) {   /* "Name:" alone is not sent at all */
            err |= add_str(b, h->data);
            err |= buf_add(b, "\r\n", 2);
        }
    }
    if (req->body) {
        char len[48];
        snprintf(len, sizeof len, "Content-Length: %zu\r\n", req->body_len);
        err |= add_str(b, len);
        if (type)
            err |= add_str(b, "Content-Type: application/x-www-form-urlencoded\r\n");
    }
    err |= buf_add(b, "\r\n", 2);
    return err;
}

/* ---- the pool ---- */

static void close_fd(struct h1_exchange *x)
{
    if (x->fd >= 0) {
        loop_unwatch(x->lp, x->fd);
        close(x->fd);
        x->fd = -1;
    }
}

static void unlink_idle(struct h1_pool *pool, struct h1_conn *conn)
{
    for (struct h1_conn **p = &pool->idle; *p; p = &(*p)->next)
        if (*p == conn) {
            *p = conn->next;
            pool->nidle--;
            return;
        }
}

static void drop_idle(struct h1_pool *pool, struct h1_conn *conn)
{
    unlink_idle(pool, conn);
    loop_unwatch(pool->lp, conn->fd);
    close(conn->fd);
    free(conn);
}

/* An idle connection that becomes readable was closed by the server (or sent what nobody
 * asked for): either way it cannot carry another request. */
static void idle_event(void *ud, int fd, short revents)
{
    struct h1_conn *conn = ud;
    drop_idle(conn->pool, conn);
}

static struct h1_pool *pool_of(loop *lp)
{
    struct h1_pool **slot = loop_h1_pool(lp);
    if (*slot == NULL && (*slot = calloc(1, sizeof **slot)) != NULL)
        (*slot)->lp = lp;
    return *slot;
}

/* The freshest idle connection to the address, or -1. */
static int pool_take(struct h1_pool *pool, const struct h1_target *t)
{
    double now = loop_now_ms();
    for (struct h1_conn *c = pool->idle, *next; c; c = next) {
        next = c->next;
        if (now - c->idle_since > MAX_IDLE_MS) {
            drop_idle(pool, c);
            continue;
        }
        if (c->addrlen == t->addrlen && memcmp(&c->addr, &t->addr, t->addrlen) == 0) {
            /* What came while the loop was not looking (a late 408, a stray answer) is not
             * this request's answer: such a connection is dropped, as curl 8 drops it. */
            struct pollfd pending = {.fd = c->fd, .events = POLLIN};
            if (poll(&pending, 1, 0) != 0) {
                drop_idle(pool, c);
                continue;
            }
            int fd = c->fd;
            unlink_idle(pool, c);
            free(c);
            return fd;
        }
    }
    return -1;
}

/* Keeps the exchange's connection for the next request to the same address. */
static void pool_put(struct h1_exchange *x)
{
    struct h1_pool *pool = x->pool;
    struct h1_conn *conn = pool->nidle < MAX_IDLE ? malloc(sizeof *conn) : NULL;
    if (conn == NULL || (x->events != POLLIN ? loop_watch(x->lp, x->fd, POLLIN, idle_event, conn)
                                             : loop_retarget(x->lp, x->fd, idle_event, conn))) {
        free(conn);
        close_fd(x);
        return;
    }
    *conn = (struct h1_conn){x->fd, x->to.addr, x->to.addrlen, loop_now_ms(), pool, pool->idle};
    pool->idle = conn;
    pool->nidle++;
    x->fd = -1;
}

void h1_pool_close(struct h1_pool *pool)
{
    if (pool == NULL)
        return;
    for (struct h1_conn *c = pool->idle, *next; c; c = next) {
        next = c->next;
        close(c->fd);
        free(c);
    }
    free(pool);
}

/* ---- the end of an exchange ----
 *
 * Inner code only decides the outcome (end, fail) and unwinds; the entry points (on_ready,
 * on_timer) then hand it on with complete(), whose done may free the call: so nothing ever
 * touches an exchange after its done, and h1_start, whose caller has no call to hear of it
 * yet, leaves an early outcome to a timer due at once. */

static void on_timer(void *ud);

static void arm_timer(struct h1_exchange *x, double due)
{
    if (x->timer)
        loop_timer_cancel(x->lp, x->timer);
    x->timer = isinf(due) ? 0 : loop_timer_add(x->lp, due, on_timer, x);
}

static int over(const struct h1_exchange *x)
{
    return x->finished || x->stopped;
}

static void end(struct h1_exchange *x, CURLcode result)
{
    x->outcome = result;
    x->finished = 1;
    if (result != CURLE_OK)
        close_fd(x);
}

static void fail(struct h1_exchange *x, CURLcode result, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->call->error, sizeof x->call->error, fmt, ap);
    va_end(ap);
    end(x, result);
}

/* The connection goes back to the pool or closes, and done is called last. */
static void complete(struct h1_exchange *x)
{
    struct http_call *c = x->call;
    arm_timer(x, HUGE_VAL);
    if (x->outcome == CURLE_OK && x->keep_alive && x->fd >= 0 &&
        x->sent == x->out.len + x->body_len)
        pool_put(x);
    close_fd(x);
    c->result = x->outcome;
    c->seconds = (loop_now_ms() - x->started) / 1e3;
    c->running = 0;
    if (c->done)
        c->done(c->ud, c);
}

static void on_timer(void *ud)
{
    struct h1_exchange *x = ud;
    x->timer = 0;
    double now = loop_now_ms();
    if (x->finished)
        ;
    else if (x->phase == CONNECTING && now >= x->connect_deadline)
        fail(x, CURLE_OPERATION_TIMEDOUT, "Connection timed out after %.0f milliseconds",
             now - x->started);
    else if (now >= x->deadline)
        fail(x, CURLE_OPERATION_TIMEDOUT,
             "Operation timed out after %.0f milliseconds with %zu bytes received",
             now - x->started, x->received);
    else
        arm_timer(x, x->deadline);   /* the connect deadline passed once connected */
    if (x->finished)
        complete(x);
}

/* ---- connecting and sending ---- */

static void on_ready(void *ud, int fd, short revents);
static void open_connection(struct h1_exchange *x);

static int watch(struct h1_exchange *x, short events)
{
    if (x->events == events)
        return 0;
    if (loop_watch(x->lp, x->fd, events, on_ready, x) != 0)
        return -1;
    x->events = events;
    return 0;
}

static const char *address(const struct h1_exchange *x, char *out, size_t size)
{
    const struct sockaddr_storage *a = &x->to.addr;
    char lit[INET6_ADDRSTRLEN] = "?";
    unsigned port;
    if (a->ss_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)a)->sin_addr, lit, sizeof lit);
        port = ntohs(((const struct sockaddr_in *)a)->sin_port);
    } else {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)a)->sin6_addr, lit, sizeof lit);
        port = ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
    }
    snprintf(out, size, "%s port %u", lit, port);
    return out;
}

/* A pooled connection the server had closed meanwhile: the request goes again on a new one,
 * once, as curl does; 1 if so. Only while no byte of an answer has come. */
static int retry_stale(struct h1_exchange *x)
{
    if (!x->reused || x->received > 0)
        return 0;
    close_fd(x);
    x->reused = 0;
    x->sent = 0;
    x->connect_deadline = loop_now_ms() + x->connect_ms;   /* the new connection's own time */
    open_connection(x);
    return 1;
}

/* No more request bytes go out: the connection is watched for the answer alone. */
static void stop_sending(struct h1_exchange *x)
{
    x->sending = 0;
    if (x->phase < HEAD)
        x->phase = HEAD;
    if (watch(x, POLLIN) != 0)
        fail(x, CURLE_OUT_OF_MEMORY, "cannot watch the connection");
}

/* Writes what is left of the request while the socket takes it. The answer may start before
 * the upload ends (a server that answers first and reads after): the reading phases go on
 * meanwhile, and sending stops only when all is sent or a final status of 300 or more says the
 * rest is not wanted (as curl stops). */
static void send_more(struct h1_exchange *x)
{
    x->sending = 1;
    while (x->sent < x->out.len + x->body_len) {
        struct iovec iov[2];
        int n = 0;
        if (x->sent < x->out.len)
            iov[n++] = (struct iovec){x->out.data + x->sent, x->out.len - x->sent};
        size_t body_sent = x->sent > x->out.len ? x->sent - x->out.len : 0;
        if (body_sent < x->body_len)
            iov[n++] = (struct iovec){(char *)x->body + body_sent, x->body_len - body_sent};
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(x->fd, &msg, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (x->phase < HEAD)
                x->phase = SENDING;
            if (watch(x, POLLIN | POLLOUT) != 0)
                fail(x, CURLE_OUT_OF_MEMORY, "cannot watch the connection");
            return;
        }
        if (w < 0) {
            int e = errno;
            if (!retry_stale(x))
                fail(x, CURLE_SEND_ERROR, "Send failure: %s", strerror(e));
            return;
        }
        x->sent += (size_t)w;
    }
    stop_sending(x);
}

static void connect_failed(struct h1_exchange *x, int e)
{
    char where[80];
    fail(x, CURLE_COULDNT_CONNECT, "Failed to connect to %s: %s",
         address(x, where, sizeof where), strerror(e));
}

/* A new non-blocking connection; close-on-exec, as a sandbox must inherit none of the host's
 * connections to a model server. */
static void open_connection(struct h1_exchange *x)
{
    x->call->new_connections++;
    x->events = 0;
    arm_timer(x, x->connect_deadline < x->deadline ? x->connect_deadline : x->deadline);
    x->fd = socket(x->to.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (x->fd < 0)
        return connect_failed(x, errno);
    int one = 1;   /* curl's default: a request in several writes must not wait for acks */
    setsockopt(x->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(x->fd, (struct sockaddr *)&x->to.addr, x->to.addrlen) == 0)
        return send_more(x);
    if (errno != EINPROGRESS)
        return connect_failed(x, errno);
    x->phase = CONNECTING;
    if (watch(x, POLLOUT) != 0)
        fail(x, CURLE_OUT_OF_MEMORY, "cannot watch the connection");
}

/* ---- reading the answer ---- */

/* The value of header name in the header lines [p, end), trimmed; NULL when absent. A later
 * copy is found by passing the end of the previous value as p. */
static const char *header_value(const char *p, const char *end, const char *name, size_t *len)
{
    size_t nlen = strlen(name);
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol ? eol : end;
        if ((size_t)(le - p) > nlen && p[nlen] == ':' && strncasecmp(p, name, nlen) == 0) {
            const char *v = p + nlen + 1, *ve = le;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *len = (size_t)(ve - v);
            return v;
        }
        p = eol ? eol + 1 : end;
    }
    return NULL;
}

/* The value of the last field line called name, or NULL. */
static const char *last_header_value(const char *p, const char *end, const char *name,
                                     size_t *len)
{
    const char *last = NULL;
    size_t n;
    for (const char *v; (v = header_value(p, end, name, &n)) != NULL; p = v + n)
        last = v, *len = n;
    return last;
}

/* Whether the comma-separated list [v, v + n) holds token. */
static int has_token(const char *v, size_t n, const char *token)
{
    size_t tl = strlen(token);
    for (const char *p = v, *end = v + n; p < end;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        const char *q = p;
        while (q < end && *q != ',')
            q++;
        const char *te = q;
        while (te > p && (te[-1] == ' ' || te[-1] == '\t'))
            te--;
        if ((size_t)(te - p) == tl && strncasecmp(p, token, tl) == 0)
            return 1;
        p = q;
    }
    return 0;
}

/* Whether any field line called name lists token. */
static int field_has_token(const char *p, const char *end, const char *name, const char *token)
{
    size_t n;
    for (const char *v; (v = header_value(p, end, name, &n)) != NULL; p = v + n)
        if (has_token(v, n, token))
            return 1;
    return 0;
}

/* Every Content-Length the same plain number: it; -1 when there is none, -2 when unusable. */
static int64_t content_length(const char *p, const char *end)
{
    int64_t found = -1;
    size_t n;
    for (const char *v; (v = header_value(p, end, "content-length", &n)) != NULL; p = v + n) {
        int64_t len = 0;
        if (n == 0 || n > 18)
            return -2;
        for (size_t i = 0; i < n; i++) {
            if (v[i] < '0' || v[i] > '9')
                return -2;
            len = len * 10 + (v[i] - '0');
        }
        if (found >= 0 && found != len)
            return -2;
        found = len;
    }
    return found;
}

static int last_coding_is_chunked(const char *v, size_t n)
{
    const char *last = v;
    for (size_t i = 0; i < n; i++)
        if (v[i] == ',')
            last = v + i + 1;
    return has_token(last, (size_t)(v + n - last), "chunked");
}

static int status_line_ok(const char *p, const char *eol)
{
    return eol - p >= 12 && strncmp(p, "HTTP/1.", 7) == 0 && (p[7] == '0' || p[7] == '1') &&
           p[8] == ' ' && p[9] >= '1' && p[9] <= '5' && p[10] >= '0' && p[10] <= '9' &&
           p[11] >= '0' && p[11] <= '9' && (p[12] == ' ' || p[12] == '\r' || p[12] == '\n');
}

/* Reads the status line and the body's framing from the head [p, end): 1 for an interim
 * answer to skip, 0 for the final one (or when it ended the exchange). */
static int take_head(struct h1_exchange *x, const char *p, const char *end)
{
    struct http_call *c = x->call;
    const char *eol = memchr(p, '\n', (size_t)(end - p));   /* checked by feed_head */
    long status = c->status;   /* read with the status line (feed_head) */
    if (status == 101)
        return fail(x, CURLE_WEIRD_SERVER_REPLY, "The server switched protocols unasked"), 0;
    if (status < 200)
        return 1;
    const char *fields = eol + 1;
    buf_clear(&c->headers);
    if (buf_add(&c->headers, fields, (size_t)(end - fields)) != 0)
        return fail(x, CURLE_OUT_OF_MEMORY, "out of memory"), 0;
    int http10 = p[7] == '0';
    x->keep_alive = http10 ? field_has_token(fields, end, "connection", "keep-alive")
                           : !field_has_token(fields, end, "connection", "close");
    if (x->sending && status >= 300)   /* the rest of the upload is not wanted */
        stop_sending(x);
    size_t n, cl_n;
    const char *coding = header_value(fields, end, "content-encoding", &n);
    if (coding && !(n == 8 && strncasecmp(coding, "identity", 8) == 0))
        return fail(x, CURLE_BAD_CONTENT_ENCODING, "The answer is %.*s-encoded, which was not "
                    "asked for", (int)(n < 40 ? n : 40), coding), 0;
    if (x->head_only || status == 204 || status == 304) {
        x->phase = ANSWERED;
        return 0;
    }
    const char *te = last_header_value(fields, end, "transfer-encoding", &n);
    if (te) {   /* it overrides any Content-Length, and a server that sends both must close */
        int chunked = last_coding_is_chunked(te, n);
        x->keep_alive &= chunked && !http10 && !header_value(fields, end, "content-length", &cl_n);
        x->phase = chunked ? CHUNK_SIZE : BODY_TO_CLOSE;
        return 0;
    }
    int64_t len = content_length(fields, end);
    if (len == -2)
        return fail(x, CURLE_WEIRD_SERVER_REPLY, "The answer's Content-Length is malformed"), 0;
    if (len == -1) {
        x->phase = BODY_TO_CLOSE;
        x->keep_alive = 0;
        return 0;
    }
    x->left = (uint64_t)len;
    x->phase = len == 0 ? ANSWERED : BODY_LENGTH;
    if (c->on_chunk == NULL && len > 0)   /* one allocation for a body up to 1 MB */
        buf_room(&c->body, len < (1 << 20) ? (size_t)len : (size_t)1 << 20);
    return 0;
}

/* Hands body bytes on to the call. */
static void deliver(struct h1_exchange *x, const char *p, size_t n)
{
    struct http_call *c = x->call;
    if (n == 0)
        return;
    if (c->on_chunk)
        c->on_chunk(c->ud, c, p, n);   /* which may stop the exchange */
    else if (buf_add(&c->body, p, n) != 0)
        fail(x, CURLE_WRITE_ERROR, "out of memory for the answer's body");
}

static void feed(struct h1_exchange *x, const char *p, size_t n);

/* Adds bytes to the head; once it is whole, reads it and feeds the rest on. */
static void feed_head(struct h1_exchange *x, const char *p, size_t n)
{
    size_t from = x->head.len > 3 ? x->head.len - 3 : 0;
    if (buf_add(&x->head, p, n) != 0)
        return fail(x, CURLE_OUT_OF_MEMORY, "out of memory");
    const char *h = x->head.data, *end = h + x->head.len, *stop = NULL;
    if (!x->status_seen) {   /* as curl, which tells the status from the status line on: the
                              * retry policy counts an answer begun from then */
        const char *eol = memchr(h, '\n', x->head.len);
        if (eol && !status_line_ok(h, eol))
            return fail(x, CURLE_WEIRD_SERVER_REPLY, "Unsupported HTTP version or malformed "
                                                     "status line in the answer");
        if (eol) {
            x->call->status = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');
            x->status_seen = 1;
        }
    }
    for (const char *q = h + from; q < end && (q = memchr(q, '\n', (size_t)(end - q))); q++)
        if ((q + 1 < end && q[1] == '\n') || (q + 2 < end && q[1] == '\r' && q[2] == '\n')) {
            stop = q + (q[1] == '\n' ? 2 : 3);
            break;
        }
    if (stop == NULL) {
        if (x->head.len > MAX_HEAD)
            fail(x, CURLE_WEIRD_SERVER_REPLY, "The answer's head is over %d bytes", MAX_HEAD);
        return;
    }
    int interim = take_head(x, h, stop);
    size_t head_len = (size_t)(stop - h), rest = x->head.len - head_len;
    if (over(x) || !interim)
        return feed(x, h + head_len, rest);   /* the head stays put while the body is fed */
    buf_consume(&x->head, head_len);          /* the final answer follows: read it anew */
    x->status_seen = 0;
    char *again = malloc(rest ? rest : 1);
    if (again == NULL)
        return fail(x, CURLE_OUT_OF_MEMORY, "out of memory");
    memcpy(again, x->head.data, rest);
    buf_clear(&x->head);
    feed(x, again, rest);
    free(again);
}

/* Collects a line (a chunk size, the end of a chunk, a trailer) up to its LF: 1 with it in
 * x->line (len without the line end), 0 when more is needed or the exchange ended. */
static int take_line(struct h1_exchange *x, const char **p, size_t *n, size_t *len)
{
    const char *lf = memchr(*p, '\n', *n);
    size_t take = lf ? (size_t)(lf - *p) + 1 : *n;
    if (x->line.len + take > MAX_LINE)
        return fail(x, CURLE_WEIRD_SERVER_REPLY, "A chunk line of the answer is too long"), 0;
    if (buf_add(&x->line, *p, take) != 0)
        return fail(x, CURLE_OUT_OF_MEMORY, "out of memory"), 0;
    *p += take;
    *n -= take;
    if (lf == NULL)
        return 0;
    *len = x->line.len - 1;
    if (*len > 0 && x->line.data[*len - 1] == '\r')
        --*len;
    return 1;
}

static void chunk_size(struct h1_exchange *x, const char *s, size_t len)
{
    uint64_t v = 0;
    size_t i = 0;
    for (; i < len; i++) {
        int d = s[i] >= '0' && s[i] <= '9' ? s[i] - '0'
              : (s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'f' ? (s[i] | 0x20) - 'a' + 10 : -1;
        if (d < 0)
            break;
        if (v >> 59)
            return fail(x, CURLE_WEIRD_SERVER_REPLY, "A chunk of the answer is too big");
        v = v * 16 + (uint64_t)d;
    }
    if (i == 0 || (i < len && s[i] != ';' && s[i] != ' ' && s[i] != '\t'))
        return fail(x, CURLE_WEIRD_SERVER_REPLY, "A chunk size of the answer is malformed");
    x->left = v;
    x->phase = v == 0 ? TRAILERS : CHUNK_DATA;
}

/* One line of the chunked framing, in x->line. */
static void chunk_line(struct h1_exchange *x, size_t len)
{
    if (x->phase == CHUNK_SIZE)
        chunk_size(x, x->line.data, len);
    else if (x->phase == CHUNK_DATA_END && len != 0)
        fail(x, CURLE_WEIRD_SERVER_REPLY, "A chunk of the answer overran its size");
    else if (x->phase == CHUNK_DATA_END)
        x->phase = CHUNK_SIZE;
    else if (len == 0)   /* the empty line after the trailers */
        x->phase = ANSWERED;
    else if (buf_add(&x->call->headers, x->line.data, len) != 0 ||   /* curl adds them too */
             buf_add(&x->call->headers, "\r\n", 2) != 0)
        fail(x, CURLE_OUT_OF_MEMORY, "out of memory");
    buf_clear(&x->line);
}

/* Takes n answer bytes at p as the phase says. */
static void feed(struct h1_exchange *x, const char *p, size_t n)
{
    while (!over(x)) {
        size_t take, len;
        switch (x->phase) {
        case CONNECTING:
        case SENDING:
        case HEAD:
            return n ? feed_head(x, p, n) : (void)0;
        case BODY_TO_CLOSE:
            return deliver(x, p, n);
        case BODY_LENGTH:
        case CHUNK_DATA:
            if (n == 0)
                return;
            take = n < x->left ? n : (size_t)x->left;
            deliver(x, p, take);
            p += take, n -= take, x->left -= take;
            if (x->left == 0 && !over(x))
                x->phase = x->phase == BODY_LENGTH ? ANSWERED : CHUNK_DATA_END;
            break;
        case CHUNK_SIZE:
        case CHUNK_DATA_END:
        case TRAILERS:
            if (n == 0 || !take_line(x, &p, &n, &len))
                return;
            chunk_line(x, len);
            break;
        case ANSWERED:
            x->keep_alive &= n == 0;   /* a stray byte after the answer: not reusable */
            return end(x, CURLE_OK);
        }
    }
}

/* The connection closed (or broke with error e) in the exchange's current phase. */
static void closed(struct h1_exchange *x, int e)
{
    if (x->phase == BODY_TO_CLOSE) {
        x->keep_alive = 0;
        end(x, CURLE_OK);
    } else if (retry_stale(x)) {
    } else if (e)
        fail(x, CURLE_RECV_ERROR, "Recv failure: %s", strerror(e));
    else if (x->received == 0)
        fail(x, CURLE_GOT_NOTHING, "Empty reply from server");
    else if (x->phase == BODY_LENGTH)
        fail(x, CURLE_PARTIAL_FILE, "transfer closed with %llu bytes remaining to read",
             (unsigned long long)x->left);
    else if (x->phase >= CHUNK_SIZE)
        fail(x, CURLE_PARTIAL_FILE, "transfer closed with outstanding read data remaining");
    else
        fail(x, CURLE_RECV_ERROR, "Connection closed in the middle of the answer's head");
}

/* Reads what the socket holds, up to 1 MB a wake-up so that other work gets its turn. A short
 * read means it is drained, which saves the read that would say EAGAIN. */
static void receive(struct h1_exchange *x)
{
    for (int i = 0; i < 16 && !over(x); i++) {
        ssize_t n = recv(x->fd, scratch, sizeof scratch, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n <= 0)
            return closed(x, n < 0 ? errno : 0);
        x->received += (size_t)n;
        feed(x, scratch, (size_t)n);
        if ((size_t)n < sizeof scratch)
            return;
    }
}

static void on_ready(void *ud, int fd, short revents)
{
    struct h1_exchange *x = ud;
    if (x->phase == CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err)
            connect_failed(x, err);
        else if (revents & (POLLOUT | POLLERR | POLLHUP))
            send_more(x);
    } else {
        if (x->sending && (revents & POLLOUT))
            send_more(x);
        /* revents were the old socket's if send_more replaced a stale one */
        if (!over(x) && x->fd == fd && (revents & (POLLIN | POLLERR | POLLHUP)))
            receive(x);
    }
    if (x->finished)
        complete(x);
}

/* ---- the exchange ---- */

struct h1_exchange *h1_start(loop *lp, const struct http_req *req, const struct h1_target *t,
                             struct http_call *c)
{
    struct h1_exchange *x = calloc(1, sizeof *x);
    if (x == NULL)
        return NULL;
    *x = (struct h1_exchange){.call = c, .lp = lp, .pool = pool_of(lp), .to = *t, .fd = -1,
                              .head_only = req->method && strcasecmp(req->method, "HEAD") == 0,
                              .body = req->body, .body_len = req->body ? req->body_len : 0,
                              .started = loop_now_ms()};
    size_t url_len = strlen(req->url);
    x->url = malloc(url_len + 2);
    if (x->pool == NULL || x->url == NULL || build_head(&x->out, req, t) != 0) {
        h1_free(x);
        return NULL;
    }
    memcpy(x->url, req->url, url_len + 1);
    if (t->path_len == 0 || t->path[0] == '?') {   /* curl reports a bare host with its "/" */
        size_t at = (size_t)(t->path - req->url);
        memmove(x->url + at + 1, x->url + at, url_len - at + 1);
        x->url[at] = '/';
    }
    x->deadline = req->timeout_ms > 0 ? x->started + (double)req->timeout_ms : HUGE_VAL;
    x->connect_ms = req->connect_timeout_ms > 0 ? (double)req->connect_timeout_ms
                                                : CONNECT_TIMEOUT_MS;
    x->connect_deadline = x->started + x->connect_ms;
    c->running = 1;
    x->fd = pool_take(x->pool, t);
    x->events = POLLIN;   /* as idle connections are watched */
    if (x->fd >= 0 && loop_retarget(lp, x->fd, on_ready, x) == 0) {
        x->reused = 1;
        arm_timer(x, x->deadline);
        send_more(x);
    } else {
        close_fd(x);
        open_connection(x);
    }
    if (x->finished)   /* the caller hears of it from the loop, once it holds the call */
        arm_timer(x, loop_now_ms());
    return x;
}

void h1_stop(struct h1_exchange *x)
{
    if (x == NULL || x->stopped)
        return;
    arm_timer(x, HUGE_VAL);
    close_fd(x);
    x->stopped = 1;
    x->call->running = 0;
}

void h1_free(struct h1_exchange *x)
{
    if (x == NULL)
        return;
    arm_timer(x, HUGE_VAL);
    close_fd(x);
    buf_free(&x->out);
    buf_free(&x->head);
    buf_free(&x->line);
    free(x->url);
    free(x);
}

const char *h1_url(const struct h1_exchange *x)
{
    return x->url;
}
