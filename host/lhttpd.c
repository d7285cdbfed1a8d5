/* lhttpd.c — rlm.core.httpd: an HTTP server (libmicrohttpd) on the host's one event loop.
 *   listen{host=, port=, max_body=, max_connections=, per_client=, admit=} -> server | nil, msg
 *     admit = {hosts = {names}, any_host = bool, origins = {origins}, token = str,
 *              open_paths = {paths}}: who may send a request at all, checked from the
 *     headers before any body is read (a refused request costs no memory): Host among hosts
 *     (unless any_host), Origin absent or among origins or http(s)://<one of hosts>, and
 *     "Authorization: Bearer <token>" (or "X-Rlm-Token: <token>", for clients behind a proxy
 *     that reads Authorization itself) when a token is set, except on a GET of one of the
 *     open_paths (a health check). A Content-Length over max_body is refused the same way.
 *     max_connections (default 1024) caps the connections open at once: a connection accepted
 *     past it has its requests answered 503 with Retry-After and is closed, so a client backs
 *     off instead of meeting a reset, and the connections already open go on. per_client caps
 *     the connections one address may hold (default 0: no cap, as behind a proxy or a
 *     deployment's preview URL every client shares one address).
 *   server:port()   the bound port        server:id()   op id, ready when requests wait
 *   server:next()   -> request | nil      server:close()  (also __gc and __close)
 *   request:method() :path() :header(name) -> value | nil   :body()
 *   request:respond(status, headers, body)       a whole response
 *   request:stream(status, headers)              starts a response of unknown length;
 *   request:send(data)  request:finish()         then its pieces and its end
 *   request:id()        op id, ready when the exchange ends (sent, or the client left)
 *   request:gone()      true once the exchange has ended
 *
 * MHD runs without threads of its own: its epoll descriptor is watched by the loop and a loop
 * timer covers its timeouts; both call MHD_run. MHD's callbacks only queue: a finished request
 * is suspended until Lua answers, and a stream is suspended while it has nothing to send. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <lauxlib.h>
#include "netlib.h"

#include "buf.h"
#include "host.h"
#include "loop.h"

#define SERVER "rlm.httpd.server"
#define REQUEST "rlm.httpd.request"
#define DEFAULT_MAX_BODY (64u << 20)
#define DEFAULT_MAX_CONNECTIONS 1024
/* Connections MHD takes past max_connections, only to answer them 503; beyond these it resets. */
#define REFUSAL_ROOM 64u
#define RETRY_AFTER "1"

enum req_state { READING, WAITING, ANSWERED };

struct server;

/* One exchange. Owned jointly by MHD (until the completion callback) and Lua (the queue, then
 * the request userdata); freed when both have let go. */
struct hreq {
    struct server *srv;
    struct MHD_Connection *conn;   /* NULL once MHD is done with the exchange */
    struct hreq *next_queued, *prev, *next;   /* the wait queue; every live exchange */
    lua_Integer id;
    char *method, *path;
    struct buf body;
    enum req_state state;
    int suspended, queued, too_large, streaming, finished, refused, hung_up;
    int watched_fd;                /* the socket watched for a hang-up while suspended; -1 */
    int mhd_ref, lua_ref;
    struct MHD_Response *response; /* set by Lua, queued by the access handler */
    unsigned status;
    struct buf out;                /* stream bytes not yet taken by MHD */
};

/* A list of strings as one block: each NUL-terminated, an empty string at the end. */
struct names {
    char *block;
};

struct admission {
    struct names hosts, origins;
    struct names open_paths;       /* GET needs no token here (a health check) */
    int enabled, any_host;         /* enabled: listen was given an admit table */
    char *token;                   /* NULL: no token needed */
};

struct server {
    struct admission admit;
    loop *lp;
    struct MHD_Daemon *daemon;
    int epoll_fd;
    lua_Integer id, timer;
    struct hreq *head, *tail;      /* finished requests Lua has not taken yet */
    struct hreq *live;             /* every exchange MHD still holds */
    size_t max_body;
    unsigned max_connections;
};

struct request_ud {
    struct hreq *r;
};

static void hreq_free(struct hreq *r)
{
    if (r->response)
        MHD_destroy_response(r->response);
    buf_free(&r->body);
    buf_free(&r->out);
    free(r->method);
    free(r->path);
    free(r);
}

static void hreq_release_lua(struct hreq *r)
{
    r->lua_ref = 0;
    if (!r->mhd_ref)
        hreq_free(r);
}

static void pump(struct server *s);

static void on_timer(void *ud)
{
    struct server *s = ud;
    s->timer = 0;
    pump(s);
}

static void on_epoll(void *ud, int fd, short revents)
{
    pump(ud);
}

/* Lets MHD do what it can now, then arms a loop timer for its next deadline. */
static void pump(struct server *s)
{
    if (s->daemon == NULL)
        return;
    MHD_run(s->daemon);
    if (s->timer)
        loop_timer_cancel(s->lp, s->timer);
    s->timer = 0;
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(s->daemon, &ms) == MHD_YES)
        s->timer = loop_timer_add(s->lp, loop_now_ms() + (double)ms, on_timer, s);
}

static void unwatch_socket(struct hreq *r)
{
    if (r->watched_fd >= 0)
        loop_unwatch(r->srv->lp, r->watched_fd);
    r->watched_fd = -1;
}

static void resume(struct hreq *r)
{
    unwatch_socket(r);
    if (r->suspended && r->conn) {
        r->suspended = 0;
        MHD_resume_connection(r->conn);
    }
}

/* A suspended connection is out of MHD's sight: a client that hangs up meanwhile (a dropped
 * connection mid-call) is seen here, and the exchange is ended at once so its op id wakes
 * whoever waits on it (an MCP call that must be cancelled). */
static void on_hangup(void *ud, int fd, short revents)
{
    struct hreq *r = ud;
    (void)revents;
    /* Readable means EOF (the client left) or the client's next pipelined request; only EOF
     * ends the exchange. The next request stays queued in the socket: stop watching. */
    char byte;
    ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) {
        if (n > 0)
            unwatch_socket(r);
        return;
    }
    r->hung_up = 1;
    loop_ready(r->srv->lp, r->id);
    resume(r);                     /* MHD reads the EOF and completes the exchange */
    pump(r->srv);
}

static void suspend(struct hreq *r)
{
    r->suspended = 1;
    MHD_suspend_connection(r->conn);
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info && r->watched_fd < 0 &&
        loop_watch(r->srv->lp, info->connect_fd, POLLIN, on_hangup, r) == 0)
        r->watched_fd = info->connect_fd;
}

static void enqueue(struct server *s, struct hreq *r)
{
    r->lua_ref = 1;
    r->queued = 1;
    if (s->tail)
        s->tail->next_queued = r;
    else
        s->head = r;
    s->tail = r;
    loop_ready(s->lp, s->id);
}

static void dequeue(struct server *s, struct hreq *r)
{
    for (struct hreq **p = &s->head; *p; p = &(*p)->next_queued)
        if (*p == r) {
            *p = r->next_queued;
            if (s->tail == r) {
                s->tail = NULL;
                for (struct hreq *q = s->head; q; q = q->next_queued)
                    s->tail = q;
            }
            r->next_queued = NULL;
            r->queued = 0;
            return;
        }
}

/* A client refused for want of a token is told what to send: people read the body, clients the
 * header (RFC 6750). There is no OAuth to discover: the token is the server's RLM_MCP_TOKEN. */
#define NEEDS_TOKEN "this server needs a bearer token: send the header 'Authorization: Bearer " \
    "<token>', with the RLM_MCP_TOKEN the server was started with (it offers no OAuth sign-in; " \
    "in Claude Code: claude mcp add --transport http NAME URL --header 'Authorization: Bearer " \
    "<token>')\n"
#define WRONG_TOKEN "the bearer token sent is not this server's token (its RLM_MCP_TOKEN)\n"
#define AUTHENTICATE "Bearer realm=\"rlm\", error=\"invalid_token\", error_description=\"" \
    "send Authorization: Bearer <token> with the server's RLM_MCP_TOKEN; no OAuth is offered\""

static enum MHD_Result queue_plain(struct MHD_Connection *c, unsigned status, const char *text)
{
    struct MHD_Response *res =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (res == NULL)
        return MHD_NO;
    MHD_add_response_header(res, "Content-Type", "text/plain");
    if (status == 503) {
        MHD_add_response_header(res, "Retry-After", RETRY_AFTER);
        MHD_add_response_header(res, "Connection", "close");
    }
    if (status == 401)
        MHD_add_response_header(res, "WWW-Authenticate", AUTHENTICATE);
    enum MHD_Result ok = MHD_queue_response(c, status, res);
    MHD_destroy_response(res);
    return ok;
}

/* ---- admission: who may send a body at all ---- */

static int names_has(const struct names *n, const char *name, size_t len)
{
    for (const char *p = n->block; p && *p; p += strlen(p) + 1)
        if (strlen(p) == len && strncasecmp(p, name, len) == 0)
            return 1;
    return 0;
}

/* The host part of "name:port" or "[v6]:port", as start and length. */
static size_t host_part(const char *value, const char **start)
{
    *start = value;
    if (value[0] == '[') {
        const char *close = strchr(value, ']');
        return close ? (size_t)(close - value + 1) : strlen(value);
    }
    return strcspn(value, ":");
}

static int host_allowed(const struct admission *a, const char *value)
{
    const char *name;
    size_t len = host_part(value, &name);
    return names_has(&a->hosts, name, len);
}

static int origin_allowed(const struct admission *a, const char *origin)
{
    if (names_has(&a->origins, origin, strlen(origin)))
        return 1;
    const char *rest = strncasecmp(origin, "http://", 7) == 0    ? origin + 7
                       : strncasecmp(origin, "https://", 8) == 0 ? origin + 8
                                                                 : NULL;
    return rest && *rest && strchr(rest, '/') == NULL && host_allowed(a, rest);
}

/* Compares without an early exit, so the time taken does not tell how much matched. */
static int same_secret(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned diff = (unsigned)(la ^ lb);
    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)a[i] ^ (unsigned char)(i < lb ? b[i] : 0);
    return diff == 0;
}

/* Why a request may not go on (the status; *why the text), or 0. */
/* Marks a connection accepted past max_connections (its socket context): only its requests are
 * refused, so idle connections someone holds open cannot turn away the ones already in use. */
static char over_the_cap;

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct server *s = cls;
    if (code != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    const union MHD_DaemonInfo *open = MHD_get_daemon_info(s->daemon,
                                                           MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    if (open && open->num_connections > s->max_connections)
        *socket_context = &over_the_cap;
}

static unsigned refusal(struct server *s, struct MHD_Connection *c, const char *url,
                        const char *method, const char **why)
{
    const struct admission *a = &s->admit;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c,
                                                                 MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci && ci->socket_context == &over_the_cap)
        return *why = "too many connections: retry after a second\n", 503;
    const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (length && strtoull(length, NULL, 10) > s->max_body)
        return *why = "request body too large\n", 413;
    if (!a->enabled)
        return 0;
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (host == NULL)
        return *why = "missing Host header\n", 400;
    if (!a->any_host && !host_allowed(a, host))
        return *why = "forbidden Host\n", 403;
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && !origin_allowed(a, origin))
        return *why = "forbidden Origin\n", 403;
    if (a->token && !(strcmp(method, "GET") == 0 && names_has(&a->open_paths, url, strlen(url)))) {
        /* Daytona's preview proxy tries any bearer token as a Daytona credential first, and
         * a failed one counts against the client (apps/proxy/pkg/proxy/auth.go): clients
         * behind it send the token in a header of ours. */
        const char *own = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Rlm-Token");
        if (own != NULL && !same_secret(own, a->token))
            return *why = "wrong X-Rlm-Token\n", 401;
        if (own != NULL)
            return 0;
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (auth == NULL || strncasecmp(auth, "bearer", 6) != 0 || (auth[6] != ' ' && auth[6] != '\t'))
            return *why = NEEDS_TOKEN, 401;
        auth += 6;
        while (*auth == ' ' || *auth == '\t')
            auth++;
        if (!same_secret(auth, a->token))
            return *why = WRONG_TOKEN, 401;
    }
    return 0;
}

/* A list of strings from field of the table at idx, as one block; raises on a non-string. */
static struct names names_from(lua_State *L, int idx, const char *field)
{
    struct names n = {NULL};
    struct buf b = {0};
    lua_getfield(L, idx, field);
    if (lua_istable(L, -1)) {
        for (lua_Integer i = 1;; i++) {
            if (lua_rawgeti(L, -1, i) == LUA_TNIL) {
                lua_pop(L, 1);
                break;
            }
            size_t len;
            const char *v = lua_tolstring(L, -1, &len);
            if (v == NULL || buf_add(&b, v, len + 1) != 0) {
                buf_free(&b);
                luaL_error(L, "admit.%s must be a list of strings", field);
            }
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    if (buf_add(&b, "", 1) != 0)
        luaL_error(L, "out of memory");
    n.block = b.data;
    return n;
}

static void admission_free(struct admission *a)
{
    free(a->hosts.block);
    free(a->origins.block);
    free(a->open_paths.block);
    free(a->token);
    memset(a, 0, sizeof *a);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls)
{
    struct server *s = cls;
    struct hreq *r = *req_cls;
    if (r == NULL) {
        r = calloc(1, sizeof *r);
        if (r == NULL)
            return MHD_NO;
        r->srv = s;
        r->conn = c;
        r->watched_fd = -1;
        r->mhd_ref = 1;
        r->id = loop_new_id(s->lp);
        r->method = strdup(method);
        r->path = strdup(url);
        r->next = s->live;
        if (s->live)
            s->live->prev = r;
        s->live = r;
        *req_cls = r;
        if (r->method == NULL || r->path == NULL)
            return MHD_NO;
        const char *why;
        unsigned status = refusal(s, c, url, method, &why);
        if (status) {
            r->state = ANSWERED;
            r->refused = 1;
            return queue_plain(c, status, why);
        }
        return MHD_YES;
    }
    if (r->refused) {
        *upload_size = 0;          /* a refused request's body is dropped unread */
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->too_large && r->body.len + *upload_size <= s->max_body &&
            buf_add(&r->body, upload, *upload_size) == 0) {
        } else {
            r->too_large = 1;
            buf_free(&r->body);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->response) {
        enum MHD_Result ok = MHD_queue_response(c, r->status, r->response);
        MHD_destroy_response(r->response);
        r->response = NULL;
        return ok;
    }
    if (r->state != READING)
        return MHD_YES;
    if (r->too_large) {
        r->state = ANSWERED;
        return queue_plain(c, 413, "request body too large\n");
    }
    r->state = WAITING;
    suspend(r);
    enqueue(s, r);
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode why)
{
    struct server *s = cls;
    struct hreq *r = *req_cls;
    if (r == NULL)
        return;
    *req_cls = NULL;
    unwatch_socket(r);
    r->conn = NULL;
    r->suspended = 0;
    r->mhd_ref = 0;
    if (r->prev)
        r->prev->next = r->next;
    else
        s->live = r->next;
    if (r->next)
        r->next->prev = r->prev;
    loop_ready(s->lp, r->id);
    if (r->queued) {             /* Lua never took it and never will */
        dequeue(s, r);
        r->lua_ref = 0;
    }
    if (!r->lua_ref)
        hreq_free(r);
}

/* Stream body: what Lua has sent so far; suspended while there is nothing to send. */
static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    struct hreq *r = cls;
    if (r->out.len > 0) {
        size_t n = r->out.len < max ? r->out.len : max;
        memcpy(out, r->out.data, n);
        buf_consume(&r->out, n);
        return (ssize_t)n;
    }
    if (r->finished || r->conn == NULL)
        return MHD_CONTENT_READER_END_OF_STREAM;
    suspend(r);
    return 0;
}

/* ---------- server ---------- */

static struct server *check_server(lua_State *L, int arg)
{
    struct server *s = luaL_checkudata(L, arg, SERVER);
    if (s->daemon == NULL)
        luaL_error(L, "the server is closed");
    return s;
}

static void server_stop(struct server *s)
{
    if (s->daemon == NULL)
        return;
    loop_unwatch(s->lp, s->epoll_fd);
    if (s->timer)
        loop_timer_cancel(s->lp, s->timer);
    s->timer = 0;
    struct MHD_Daemon *d = s->daemon;
    s->daemon = NULL;
    /* MHD refuses to stop with suspended connections; each one's completion releases it. */
    for (struct hreq *r = s->live; r; r = r->next)
        resume(r);
    MHD_stop_daemon(d);
}

static int server_gc(lua_State *L)
{
    struct server *s = luaL_checkudata(L, 1, SERVER);
    server_stop(s);
    admission_free(&s->admit);
    return 0;
}

/* Resolves host (numeric or a name) to a socket address with the given port. */
static int resolve(const char *host, int port, struct sockaddr_storage *out, socklen_t *len,
                   const char **err)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        *err = gai_strerror(rc);
        return -1;
    }
    memcpy(out, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    if (out->ss_family == AF_INET)
        ((struct sockaddr_in *)out)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)out)->sin6_port = htons((uint16_t)port);
    return 0;
}

static int l_listen(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "host");
    const char *host = luaL_optstring(L, -1, "127.0.0.1");
    lua_getfield(L, 1, "port");
    lua_Integer port = luaL_optinteger(L, -1, 0);
    lua_getfield(L, 1, "max_body");
    lua_Integer max_body = luaL_optinteger(L, -1, DEFAULT_MAX_BODY);
    lua_getfield(L, 1, "per_client");
    lua_Integer per_client = luaL_optinteger(L, -1, 0);
    lua_getfield(L, 1, "max_connections");
    lua_Integer max_connections = luaL_optinteger(L, -1, DEFAULT_MAX_CONNECTIONS);
    lua_pop(L, 4);                                  /* host stays on the stack until return */
    if (port < 0 || port > 65535)
        return luaL_error(L, "port must be 0..65535");
    if (max_connections < 1 || max_connections > 65536 || per_client < 0 || per_client > 65536)
        return luaL_error(L, "max_connections must be 1..65536 and per_client 0..65536");
    struct sockaddr_storage addr;
    socklen_t addrlen;
    const char *err = NULL;
    if (resolve(host, (int)port, &addr, &addrlen, &err) != 0) {
        luaL_pushfail(L);
        lua_pushfstring(L, "cannot resolve %s: %s", host, err);
        return 2;
    }
    loop *lp = loop_get(L);
    struct server *s = lua_newuserdatauv(L, sizeof *s, 0);
    memset(s, 0, sizeof *s);
    s->lp = lp;
    s->epoll_fd = -1;
    s->max_body = (size_t)max_body;
    s->max_connections = (unsigned)max_connections;
    luaL_setmetatable(L, SERVER);
    /* Every name the admission allows; with no admit table, any request is let in. */
    lua_getfield(L, 1, "admit");
    if (lua_istable(L, -1)) {
        int admit = lua_gettop(L);
        s->admit.enabled = 1;
        s->admit.hosts = names_from(L, admit, "hosts");
        s->admit.origins = names_from(L, admit, "origins");
        s->admit.open_paths = names_from(L, admit, "open_paths");
        lua_getfield(L, admit, "any_host");
        s->admit.any_host = lua_toboolean(L, -1);
        lua_getfield(L, admit, "token");
        const char *token = lua_tostring(L, -1);
        if (token && (s->admit.token = strdup(token)) == NULL)
            return luaL_error(L, "out of memory");
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 /* an idle connection goes after a minute (a stream's
                                  * keep-alive comments and a suspended answer are not idle) */
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
                                 MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)max_connections + REFUSAL_ROOM,
                                 MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)per_client,
                                 MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                                 MHD_OPTION_END);
    if (s->daemon == NULL) {
        luaL_pushfail(L);
        lua_pushfstring(L, "cannot listen on %s:%d (address in use or not permitted)", host,
                        (int)port);
        return 2;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    s->epoll_fd = info ? info->epoll_fd : -1;
    s->id = loop_new_id(lp);
    if (s->epoll_fd < 0 || loop_watch(lp, s->epoll_fd, POLLIN, on_epoll, s) != 0) {
        server_stop(s);
        return luaL_error(L, "cannot watch the server's descriptor");
    }
    pump(s);
    return 1;
}

static int s_port(lua_State *L)
{
    struct server *s = check_server(L, 1);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    lua_pushinteger(L, info ? info->port : 0);
    return 1;
}

static int s_id(lua_State *L)
{
    lua_pushinteger(L, check_server(L, 1)->id);
    return 1;
}

static int s_next(lua_State *L)
{
    struct server *s = check_server(L, 1);
    struct hreq *r = s->head;
    if (r == NULL)
        return 0;
    struct request_ud *u = lua_newuserdatauv(L, sizeof *u, 1);
    u->r = NULL;
    luaL_setmetatable(L, REQUEST);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);      /* the server outlives its requests */
    dequeue(s, r);
    u->r = r;
    return 1;
}

static int s_close(lua_State *L)
{
    server_stop(luaL_checkudata(L, 1, SERVER));
    return 0;
}

/* ---------- requests ---------- */

static struct hreq *check_request(lua_State *L, int arg)
{
    struct request_ud *u = luaL_checkudata(L, arg, REQUEST);
    if (u->r == NULL)
        luaL_error(L, "the request has been released");
    return u->r;
}

static int request_gc(lua_State *L)
{
    struct request_ud *u = luaL_checkudata(L, 1, REQUEST);
    struct hreq *r = u->r;
    if (r == NULL)
        return 0;
    u->r = NULL;
    if (r->conn && r->state == WAITING) {
        /* Dropped unanswered: end the exchange rather than leave the client hanging. */
        r->state = ANSWERED;
        if (r->streaming) {
            r->finished = 1;
        } else if (r->response == NULL) {
            static const char msg[] = "no response\n";
            r->response = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg,
                                                          MHD_RESPMEM_PERSISTENT);
            r->status = 500;
        }
        resume(r);
    } else if (r->conn && r->streaming && !r->finished) {
        r->finished = 1;
        resume(r);
    }
    struct server *s = r->srv;
    hreq_release_lua(r);
    pump(s);
    return 0;
}

static int r_method(lua_State *L)
{
    lua_pushstring(L, check_request(L, 1)->method);
    return 1;
}

static int r_path(lua_State *L)
{
    lua_pushstring(L, check_request(L, 1)->path);
    return 1;
}

static int r_header(lua_State *L)
{
    struct hreq *r = check_request(L, 1);
    const char *name = luaL_checkstring(L, 2);
    lua_pushstring(L, r->conn ? MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name) : NULL);
    return 1;
}

static int r_body(lua_State *L)
{
    struct hreq *r = check_request(L, 1);
    lua_pushlstring(L, r->body.data ? r->body.data : "", r->body.len);
    return 1;
}

static int r_id(lua_State *L)
{
    lua_pushinteger(L, check_request(L, 1)->id);
    return 1;
}

static int r_gone(lua_State *L)
{
    struct hreq *r = check_request(L, 1);
    lua_pushboolean(L, r->conn == NULL || r->hung_up);
    return 1;
}

/* headers = {["Name"] = "value", ...}; a value with CR or LF is refused. */
static void add_headers(lua_State *L, int idx, struct MHD_Response *res)
{
    if (lua_isnoneornil(L, idx))
        return;
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *name = luaL_checkstring(L, -2);
        const char *value = luaL_checkstring(L, -1);
        if (strpbrk(name, "\r\n:") || strpbrk(value, "\r\n")) {
            MHD_destroy_response(res);
            luaL_error(L, "bad header %s", name);
        }
        MHD_add_response_header(res, name, value);
        lua_pop(L, 1);
    }
}

/* Checks the request may still be answered; returns 0 (and pushes false) when the client left. */
static int answerable(lua_State *L, struct hreq *r)
{
    if (r->state == ANSWERED || r->streaming)
        luaL_error(L, "the request has already been answered");
    if (r->conn == NULL) {
        lua_pushboolean(L, 0);
        return 0;
    }
    return 1;
}

static void answer(struct hreq *r, struct MHD_Response *res, unsigned status)
{
    r->response = res;
    r->status = status;
    r->state = ANSWERED;
    resume(r);
    pump(r->srv);
}

static int r_respond(lua_State *L)
{
    struct hreq *r = check_request(L, 1);
    lua_Integer status = luaL_checkinteger(L, 2);
    size_t len;
    const char *body = luaL_optlstring(L, 4, "", &len);
    if (!answerable(L, r))
        return 1;
    struct MHD_Response *res =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (res == NULL)
        return luaL_error(L, "out of memory");
    add_headers(L, 3, res);
    answer(r, res, (unsigned)status);
    lua_pushboolean(L, 1);
    return 1;
}

static int r_stream(lua_State *L)
{
    struct hreq *r = check_request(L, 1);
    lua_Integer status = luaL_checkinteger(L, 2);
    if (!answerable(L, r))
        return 1;
    struct MHD_Response *res =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, r, NULL);
    if (res == NULL)
        return luaL_error(L, "out of memory");
    add_headers(L, 3, res);
    r->streaming = 1;
    answer(r, res, (unsigned)status);
    lua_pushboolean(L, 1);
    return 1;
}

static int r_send(lua_State *L)
{
    struct hreq *r = check_request(L, 1);
    size_t len;
    const char *data = luaL_checklstring(L, 2, &len);
    if (!r->streaming || r->finished)
        return luaL_error(L, "send needs an open stream (call stream first)");
    if (r->conn == NULL) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (buf_add(&r->out, data, len) != 0)
        return luaL_error(L, "out of memory");
    resume(r);
    pump(r->srv);
    lua_pushboolean(L, 1);
    return 1;
}

static int r_finish(lua_State *L)
{
    struct hreq *r = check_request(L, 1);
    if (!r->streaming)
        return luaL_error(L, "finish ends a stream (call stream first)");
    if (!r->finished && r->conn) {
        r->finished = 1;
        resume(r);
        pump(r->srv);
    }
    r->finished = 1;
    return 0;
}

static const luaL_Reg httpd_funcs[] = {{"listen", l_listen}, {NULL, NULL}};

static const luaL_Reg server_methods[] = {
    {"port", s_port}, {"id", s_id}, {"next", s_next}, {"close", s_close}, {NULL, NULL}};

static const luaL_Reg server_metamethods[] = {
    {"__gc", server_gc}, {"__close", server_gc}, {"__index", NULL}, {NULL, NULL}};

static const luaL_Reg request_methods[] = {
    {"method", r_method}, {"path", r_path},     {"header", r_header}, {"body", r_body},
    {"id", r_id},         {"gone", r_gone},     {"respond", r_respond}, {"stream", r_stream},
    {"send", r_send},     {"finish", r_finish}, {NULL, NULL}};

static const luaL_Reg request_metamethods[] = {
    {"__gc", request_gc}, {"__close", request_gc}, {"__index", NULL}, {NULL, NULL}};

int luaopen_rlm_core_httpd(lua_State *L)
{
    netlib_mhd(L);
    loop_get(L);
    host_newclass(L, SERVER, server_metamethods, server_methods);
    host_newclass(L, REQUEST, request_metamethods, request_methods);
    luaL_newlib(L, httpd_funcs);
    return 1;
}
