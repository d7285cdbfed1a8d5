/* check_h1.c — the plain-HTTP client (host/h1.c) against a scripted server that answers as a
 * hostile or broken one would: split anywhere, cut short, framed twice, closed under a pooled
 * connection, answering before the upload ends. Where curl has an answer of its own, the same
 * server is asked through curl too (a "localhost" URL, which h1 leaves to curl) and both must
 * agree. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lauxlib.h>

#include "check_host.h"
#include "h1.h"
#include "host.h"
#include "http.h"
#include "request.h"

static lua_State *L;
static pid_t server = -1;
static int port;

/* A script answers request nreq on connection conn (both from 0), whose head has been read;
 * it reads the body itself if it wants it. 1 keeps the connection for the next request. */
typedef int (*script_fn)(int fd, int conn, int nreq, const char *head, size_t body_len);

static void say(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w <= 0)
            return;
        s += w, n -= (size_t)w;
    }
}

static void says(int fd, const char *s)
{
    say(fd, s, strlen(s));
}

/* One byte per segment: every split point of the answer is tried. */
static void say_slowly(int fd, const char *s)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (; *s; s++) {
        say(fd, s, 1);
        usleep(300);
    }
}

static size_t drain(int fd, size_t n, unsigned *sum)
{
    char b[65536];
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b, n - got < sizeof b ? n - got : sizeof b);
        if (r <= 0)
            break;
        for (ssize_t i = 0; sum && i < r; i++)
            *sum = *sum * 31 + (unsigned char)b[i];
        got += (size_t)r;
    }
    return got;
}

static size_t read_head(int fd, char *head, size_t size)
{
    size_t n = 0;
    while (n + 1 < size && read(fd, head + n, 1) == 1) {
        head[++n] = '\0';
        if (n >= 4 && memcmp(head + n - 4, "\r\n\r\n", 4) == 0)
            return n;
    }
    return 0;
}

static size_t declared_length(const char *head)
{
    const char *p = strcasestr(head, "\r\ncontent-length:");
    return p ? strtoul(p + 17, NULL, 10) : 0;
}

static void server_main(int lfd, script_fn script)
{
    signal(SIGPIPE, SIG_IGN);
    for (int conn = 0;; conn++) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            _exit(0);
        char head[65536];
        for (int nreq = 0; read_head(fd, head, sizeof head) > 0; nreq++)
            if (!script(fd, conn, nreq, head, declared_length(head)))
                break;
        close(fd);
    }
}

static void serve(script_fn script)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(lfd, 16), 0);
    ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port);
    server = fork();
    if (server == 0)
        server_main(lfd, script);
    close(lfd);
}

static void setup(void)
{
    L = host_newstate();
}

static void teardown(void)
{
    if (server > 0) {
        kill(server, SIGKILL);
        waitpid(server, NULL, 0);
    }
    lua_close(L);
}

static int done_calls;
static void count_done(void *ud, struct http_call *c)
{
    done_calls++;
}

/* A request to the scripted server; by_name sends it through "localhost", which is curl's. */
static struct http_call *ask(const char *method, const char *path, const char *body,
                             size_t body_len, struct curl_slist *headers, int by_name)
{
    static char url[256];
    snprintf(url, sizeof url, "http://%s:%d%s", by_name ? "localhost" : "127.0.0.1", port,
             path);
    struct http_req req = {.method = method, .url = url, .headers = headers, .body = body,
                           .body_len = body_len, .timeout_ms = 5000};
    struct http_call *c = http_start(loop_get(L), &req, NULL, count_done, NULL);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->h1 != NULL, !by_name);
    return c;
}

static void wait_call(struct http_call *c)
{
    for (int i = 0; i < 1000 && c->running; i++)
        run_lua(L, "require('rlm.core.loop').poll(0.05)");
    ck_assert_int_eq(c->running, 0);
}

static struct http_call *ask_and_wait(const char *path)
{
    struct http_call *c = ask(NULL, path, NULL, 0, NULL, 0);
    wait_call(c);
    return c;
}

static int answer_with_counts(int fd, int conn, int nreq, const char *head, size_t body_len)
{
    char body[64], out[160];
    drain(fd, body_len, NULL);
    int n = snprintf(body, sizeof body, "conn=%d req=%d", conn, nreq);
    snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", n, body);
    says(fd, out);
    return 1;
}

START_TEST(a_second_request_rides_the_first_connection)
{
    serve(answer_with_counts);
    struct http_call *c = ask_and_wait("/a");
    ck_assert_str_eq(c->body.data, "conn=0 req=0");
    ck_assert_int_eq(c->new_connections, 1);
    http_free(c);
    c = ask_and_wait("/b");
    ck_assert_str_eq(c->body.data, "conn=0 req=1");
    ck_assert_int_eq(c->new_connections, 0);
    http_free(c);
}
END_TEST

static int echo_head(int fd, int conn, int nreq, const char *head, size_t body_len)
{
    char out[256];
    drain(fd, body_len, NULL);
    snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", strlen(head));
    says(fd, out);
    says(fd, head);
    return 1;
}

START_TEST(the_request_head_is_the_one_curl_sends)
{
    serve(echo_head);
    struct curl_slist *h = NULL;
    http_add_header(L, &h, "Expect:");                /* dropped, as curl drops it */
    http_add_header(L, &h, "X-Empty;");              /* sent with no value */
    http_add_header(L, &h, "Authorization: Bearer k");
    http_add_header(L, &h, "Accept:");               /* curl's default Accept goes */
    struct http_call *c = ask("POST", "/p?q=1", "abc", 3, h, 0);
    wait_call(c);
    char want[512];
    snprintf(want, sizeof want,
             "POST /p?q=1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: rlm/0.1\r\n"
             "X-Empty:\r\nAuthorization: Bearer k\r\nContent-Length: 3\r\n"
             "Content-Type: application/x-www-form-urlencoded\r\n\r\n", port);
    ck_assert_str_eq(c->body.data, want);
    http_free(c);
    c = ask("DELETE", "", NULL, 0, NULL, 0);   /* no body: no length; a bare host asks for / */
    wait_call(c);
    snprintf(want, sizeof want, "DELETE / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: rlm/0.1"
                                "\r\nAccept: */*\r\n\r\n", port);
    ck_assert_str_eq(c->body.data, want);
    ck_assert_str_eq(http_url(c) + strlen(http_url(c)) - 1, "/");
    http_free(c);
    curl_slist_free_all(h);
}
END_TEST

/* Answers curl and h1 must read alike; each is written once at a time and once a byte at a
 * time, then the connection closes. */
static const char *const agreed[] = {
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 2\r\n\r\n"
    "4;name=value\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: t\r\n\r\n",
    "HTTP/1.0 200 OK\r\nX-A: 3\r\n\r\nall of it, to the close",
    "HTTP/1.1 200 OK\r\nX-A: 4\r\n\r\nno length, to the close",
    "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-A: 5\r\n\r\nok",
    "HTTP/1.1 204 No Content\r\nX-A: 6\r\n\r\n",
    "HTTP/1.1 200 OK\nContent-Length: 3\nX-A: 7\n\nbare",   /* LF-only lines */
    "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    "",
};
#define NAGREED (int)(sizeof agreed / sizeof agreed[0])
static int slowly;

static int answer_agreed(int fd, int conn, int nreq, const char *head, size_t body_len)
{
    const char *a = agreed[conn / 2];   /* each answer twice: for h1, then for curl */
    if (slowly)
        say_slowly(fd, a);
    else
        says(fd, a);
    return 0;
}

struct outcome {
    const char *kind;
    long status;
    char body[128], xa[16];
};

static struct outcome outcome_of(int by_name)
{
    struct http_call *c = ask(NULL, "/", NULL, 0, NULL, by_name);
    wait_call(c);
    struct outcome o = {c->result == CURLE_OK ? "ok" : http_failure_kind(c->result), 0, "", ""};
    if (c->result == CURLE_OK) {
        o.status = c->status;
        http_header(c, "x-a", o.xa, sizeof o.xa);
    }
    snprintf(o.body, sizeof o.body, "%s", c->body.data ? c->body.data : "");
    http_free(c);
    return o;
}

static void agree_on_every_answer(void)
{
    serve(answer_agreed);
    for (int i = 0; i < NAGREED; i++) {
        struct outcome ours = outcome_of(0), curls = outcome_of(1);
        ck_assert_msg(strcmp(ours.kind, curls.kind) == 0, "answer %d: %s, curl %s", i,
                      ours.kind, curls.kind);
        ck_assert_msg(ours.status == curls.status, "answer %d: %ld, curl %ld", i, ours.status,
                      curls.status);
        ck_assert_msg(ours.kind[0] != 'o' || strcmp(ours.body, curls.body) == 0,
                      "answer %d: '%s', curl '%s'", i, ours.body, curls.body);
        ck_assert_msg(strcmp(ours.xa, curls.xa) == 0, "answer %d: x-a %s, curl %s", i,
                      ours.xa, curls.xa);
    }
}

START_TEST(every_answer_reads_as_curl_reads_it)
{
    slowly = 0;
    agree_on_every_answer();
}
END_TEST

START_TEST(every_answer_reads_as_curl_reads_it_split_at_every_byte)
{
    slowly = 1;
    agree_on_every_answer();
}
END_TEST

/* Answers curl may read more leniently but that must never be taken as a good answer here:
 * two framings, a size that overflows, a chunk longer than it says, an unasked upgrade, a head
 * cut short (curl calls that a 200 with no body). */
static const char *const hostile[] = {
    "HTTP/1.1 200 OK\r\nContent-Le",
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello!",
    "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nhello",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\nx\r\n0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabcd\r\n0\r\n\r\n",
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
    "HTTP/2 200\r\n\r\n",
    "ICY 200 OK\r\n\r\n",
    "HTTP/1.1 2x0 OK\r\n\r\n",
};
#define NHOSTILE (int)(sizeof hostile / sizeof hostile[0])

static int answer_hostile(int fd, int conn, int nreq, const char *head, size_t body_len)
{
    if (conn < NHOSTILE)
        says(fd, hostile[conn]);
    else   /* the head that never ends */
        for (int i = 0; i < 4000; i++)
            says(fd, i ? "X-Filler: 0123456789012345678901234567890123456789\r\n"
                       : "HTTP/1.1 200 OK\r\n");
    return 0;
}

START_TEST(hostile_answers_are_failures_not_answers)
{
    serve(answer_hostile);
    for (int i = 0; i <= NHOSTILE; i++) {
        struct http_call *c = ask_and_wait("/");
        ck_assert_msg(c->result != CURLE_OK, "answer %d was taken: status %ld body '%s'", i,
                      c->status, c->body.data ? c->body.data : "");
        ck_assert_str_eq(http_failure_kind(c->result), "transfer");
        ck_assert_msg(http_failure_message(c)[0] != '\0', "answer %d has no message", i);
        http_free(c);
    }
}
END_TEST

/* The first request's connection is closed by the server when the second comes on it. */
static int drop_the_second_request(int fd, int conn, int nreq, const char *head, size_t len)
{
    if (conn == 0 && nreq == 1)
        return 0;
    return answer_with_counts(fd, conn, nreq, head, len);
}

START_TEST(a_pooled_connection_closed_under_a_request_is_replaced_once)
{
    serve(drop_the_second_request);
    struct http_call *c = ask_and_wait("/a");
    http_free(c);
    c = ask("POST", "/b", "x", 1, NULL, 0);
    wait_call(c);
    ck_assert_int_eq(c->result, CURLE_OK);
    ck_assert_str_eq(c->body.data, "conn=1 req=0");
    ck_assert_int_eq(c->new_connections, 1);
    http_free(c);
}
END_TEST

static int close_when_idle(int fd, int conn, int nreq, const char *head, size_t len)
{
    answer_with_counts(fd, conn, nreq, head, len);
    usleep(50000);
    return 0;
}

START_TEST(a_connection_the_server_closed_while_idle_is_never_used)
{
    serve(close_when_idle);
    struct http_call *c = ask_and_wait("/a");
    http_free(c);
    run_lua(L, "require('rlm.core.loop').poll(0.3)");   /* the close arrives meanwhile */
    run_lua(L, "require('rlm.core.loop').poll(0.01)");
    c = ask_and_wait("/b");
    ck_assert_int_eq(c->result, CURLE_OK);
    ck_assert_str_eq(c->body.data, "conn=1 req=0");
    ck_assert_int_eq(c->new_connections, 1);
    http_free(c);
}
END_TEST

static const char *first_answer;

static int answer_first_then_counts(int fd, int conn, int nreq, const char *head, size_t len)
{
    if (conn > 0 || nreq > 0)
        return answer_with_counts(fd, conn, nreq, head, len);
    says(fd, first_answer);
    return 1;
}

/* The first answer, "ok" written so that its connection is unfit for another request: the
 * next request must go on a new one (and read that one's answer). */
static void the_next_request_takes_a_new_connection(const char *first)
{
    first_answer = first;
    serve(answer_first_then_counts);
    struct http_call *c = ask_and_wait("/a");
    ck_assert_int_eq(c->result, CURLE_OK);
    ck_assert_str_eq(c->body.data, "ok");
    http_free(c);
    c = ask_and_wait("/b");
    ck_assert_int_eq(c->result, CURLE_OK);
    ck_assert_msg(strcmp(c->body.data, "conn=1 req=0") == 0 && c->new_connections == 1,
                  "/b rode the first connection: '%s'", c->body.data);
    http_free(c);
}

START_TEST(bytes_after_an_answer_do_not_answer_the_next_request)
{
    /* bytes after the answer, written with it, must not become the next answer */
    the_next_request_takes_a_new_connection("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                                            "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil");
}
END_TEST

#define BIG (20u << 20)

static int refuse_upload(int fd, int conn, int nreq, const char *head, size_t len)
{
    says(fd, "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\n\r\nbig!");
    sleep(3);   /* the upload is neither read nor cut: the answer alone must end the call */
    return 0;
}

START_TEST(an_answer_before_the_upload_ends_ends_the_call)
{
    serve(refuse_upload);
    char *body = calloc(1, BIG);
    struct curl_slist *h = curl_slist_append(NULL, "Expect:");   /* as every binding sends */
    struct http_call *c = ask("POST", "/up", body, BIG, h, 0);
    wait_call(c);
    curl_slist_free_all(h);
    ck_assert_int_eq(c->result, CURLE_OK);
    ck_assert_int_eq(c->status, 413);
    ck_assert_str_eq(c->body.data, "big!");
    ck_assert_double_lt(c->seconds, 2.5);
    http_free(c);
    free(body);
}
END_TEST

static int sum_and_send_big(int fd, int conn, int nreq, const char *head, size_t len)
{
    unsigned sum = 7;
    char out[128];
    size_t got = drain(fd, len, &sum);
    snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\nX-Got: %zu %u\r\nContent-Length: %u\r\n\r\n",
             got, sum, BIG);
    says(fd, out);
    char *big = malloc(BIG);
    for (unsigned i = 0; i < BIG; i++)
        big[i] = (char)('a' + i % 26);
    say(fd, big, BIG);
    free(big);
    return 1;
}

START_TEST(twenty_megabytes_go_up_and_come_down_exactly)
{
    serve(sum_and_send_big);
    char *body = malloc(BIG);
    unsigned sum = 7;
    for (unsigned i = 0; i < BIG; i++) {
        body[i] = (char)(i * 7);
        sum = sum * 31 + (unsigned char)body[i];
    }
    struct curl_slist *h = curl_slist_append(NULL, "Expect:");
    struct http_call *c = ask("PUT", "/big", body, BIG, h, 0);
    wait_call(c);
    curl_slist_free_all(h);
    ck_assert_int_eq(c->result, CURLE_OK);
    char got[64], want[64];
    snprintf(want, sizeof want, "%u %u", BIG, sum);
    ck_assert_int_eq(http_header(c, "x-got", got, sizeof got), 0);
    ck_assert_str_eq(got, want);
    ck_assert_uint_eq(c->body.len, BIG);
    for (unsigned i = 0; i < BIG; i += 4099)
        ck_assert_int_eq(c->body.data[i], 'a' + i % 26);
    http_free(c);
    free(body);
}
END_TEST

static int never_answer(int fd, int conn, int nreq, const char *head, size_t len)
{
    sleep(5);
    return 0;
}

START_TEST(a_silent_server_times_out)
{
    serve(never_answer);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    struct http_req req = {.url = url, .timeout_ms = 300};
    struct http_call *c = http_start(loop_get(L), &req, NULL, NULL, NULL);
    wait_call(c);
    ck_assert_str_eq(http_failure_kind(c->result), "timeout");
    ck_assert_double_lt(c->seconds, 1.5);
    ck_assert_double_ge(c->seconds, 0.29);
    http_free(c);
}
END_TEST

static int stream_forever(int fd, int conn, int nreq, const char *head, size_t len)
{
    says(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 100; i++) {
        says(fd, "5\r\nabcde\r\n");
        usleep(10000);
    }
    return 0;
}

static int chunks_seen;
static void stop_at_first_chunk(void *ud, struct http_call *c, const char *data, size_t len)
{
    chunks_seen++;
    http_stop(c);
}

START_TEST(stopping_from_inside_a_chunk_callback_ends_quietly)
{
    serve(stream_forever);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    struct http_req req = {.url = url, .timeout_ms = 5000};
    done_calls = chunks_seen = 0;
    struct http_call *c = http_start(loop_get(L), &req, stop_at_first_chunk, count_done, NULL);
    wait_call(c);
    for (int i = 0; i < 5; i++)
        run_lua(L, "require('rlm.core.loop').poll(0.02)");
    ck_assert_int_eq(chunks_seen, 1);
    ck_assert_int_eq(done_calls, 0);
    http_free(c);
}
END_TEST

START_TEST(only_what_curl_would_do_the_same_is_served)
{
    struct h1_target t;
    struct http_req req = {.url = "http://127.0.0.1:8080/v1/x?y=1"};
    ck_assert(h1_serves(&req, &t));
    ck_assert_str_eq(t.host, "127.0.0.1:8080");
    ck_assert_str_eq(t.path, "/v1/x?y=1");
    req.url = "http://[::1]:80/";
    ck_assert(h1_serves(&req, &t));
    ck_assert_str_eq(t.host, "[::1]");
    static const char *const not_served[] = {
        "https://127.0.0.1/", "http://localhost:8080/", "http://user:pw@127.0.0.1/",
        "http://127.0.0.1/#frag", "http://127.1/", "http://127.0.0.1:0/",
        "http://127.0.0.1:65536/", "http://127.0.0.1:/", "http://[fe80::1%25eth0]/",
        "http://127.0.0.1/a b", "http://127.0.0.1/\xc3\xa9", "ftp://127.0.0.1/",
    };
    for (size_t i = 0; i < sizeof not_served / sizeof not_served[0]; i++) {
        req.url = not_served[i];
        ck_assert_msg(!h1_serves(&req, &t), "%s was served", not_served[i]);
    }
    req.url = "http://127.0.0.1/";
    static const char *const framing[] = {"Transfer-Encoding: chunked", "Content-Length: 3",
                                          "Host: example.com", "Connection: close",
                                          "Expect: 100-continue", "Bad Name: x"};
    for (size_t i = 0; i < sizeof framing / sizeof framing[0]; i++) {
        struct curl_slist *h = curl_slist_append(NULL, framing[i]);
        req.headers = h;
        ck_assert_msg(!h1_serves(&req, &t), "a request with '%s' was served", framing[i]);
        curl_slist_free_all(h);
    }
    req.headers = NULL;
    req.method = "GET /x HTTP/1.1\r\nX:";
    ck_assert(!h1_serves(&req, &t));
}
END_TEST

START_TEST(a_proxy_in_the_environment_leaves_every_request_to_curl)
{
    setenv("http_proxy", "http://127.0.0.1:3128", 1);   /* read once per process: a fork */
    struct h1_target t;
    struct http_req req = {.url = "http://127.0.0.1:8080/"};
    ck_assert(!h1_serves(&req, &t));
}
END_TEST

START_TEST(rlm_http_client_curl_leaves_every_request_to_curl)
{
    setenv("RLM_HTTP_CLIENT", "curl", 1);
    struct h1_target t;
    struct http_req req = {.url = "http://127.0.0.1:8080/"};
    ck_assert(!h1_serves(&req, &t));
}
END_TEST

/* ---- from an attacker's review: each failed on the first h1, and passes through curl ---- */

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
           u.ru_stime.tv_usec / 1e6;
}

static int cut_in_the_head(int fd, int conn, int nreq, const char *head, size_t len)
{
    drain(fd, len, NULL);
    says(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n");
    return 0;
}

/* The status line came: the server ran the POST, which must not be sent again. */
START_TEST(a_post_cut_in_the_answers_head_is_not_sent_again)
{
    serve(cut_in_the_head);
    for (int by_name = 1; by_name >= 0; by_name--) {
        char url[128];
        snprintf(url, sizeof url, "http://%s:%d/v1/create", by_name ? "localhost" : "127.0.0.1",
                 port);
        struct request_spec spec = {
            .http = {.method = "POST", .url = url, .body = "x", .body_len = 1},
            .max_attempts = 3, .backoff_base_ms = 10, .backoff_cap_ms = 50,
            .deadline_ms = loop_now_ms() + 5000,
        };
        struct request *r = request_start(loop_get(L), &spec);
        for (int i = 0; i < 200 && !r->finished; i++)
            run_lua(L, "require('rlm.core.loop').poll(0.05)");
        ck_assert(r->finished);
        ck_assert_msg(r->attempts == 1, "%s: a POST went %d times (result %d, status %ld)",
                      by_name ? "curl" : "h1", r->attempts, r->call->result, r->call->status);
        request_free(r);
    }
}
END_TEST

static const char gz_hello[] = {   /* printf hello | gzip -n */
    0x1f, (char)0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, (char)0xcb, 0x48,
    (char)0xcd, (char)0xc9, (char)0xc9, 0x07, 0x00, (char)0x86, (char)0xa6, 0x10, 0x36, 0x05,
    0x00, 0x00, 0x00};

static int answer_gzipped_unasked(int fd, int conn, int nreq, const char *head, size_t len)
{
    char out[160];
    drain(fd, len, NULL);
    snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n"
                              "Content-Length: %zu\r\n\r\n", sizeof gz_hello);
    says(fd, out);
    say(fd, gz_hello, sizeof gz_hello);
    return 0;
}

/* h1 asks for no encoding and decodes none: a compressed answer is a failure, never its
 * compressed bytes taken for the body; asking for one leaves the request to curl. */
START_TEST(compressed_bytes_are_never_taken_for_the_body)
{
    serve(answer_gzipped_unasked);
    struct http_call *c = ask(NULL, "/", NULL, 0, NULL, 0);
    wait_call(c);
    ck_assert_int_eq(c->result, CURLE_BAD_CONTENT_ENCODING);
    ck_assert_str_eq(http_failure_kind(c->result), "transfer");
    http_free(c);
    struct curl_slist *h = curl_slist_append(NULL, "Accept-Encoding: gzip");
    struct h1_target t;
    struct http_req req = {.url = "http://127.0.0.1:1/", .headers = h};
    ck_assert(!h1_serves(&req, &t));
    curl_slist_free_all(h);
}
END_TEST

static int head_then_read_upload(int fd, int conn, int nreq, const char *head, size_t len)
{
    says(fd, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n");
    drain(fd, len, NULL);
    says(fd, "done");
    return 0;
}

START_TEST(a_head_before_the_upload_ends_does_not_stop_the_upload)
{
    serve(head_then_read_upload);
    char *body = calloc(1, BIG);
    struct curl_slist *h = curl_slist_append(NULL, "Expect:");
    for (int by_name = 1; by_name >= 0; by_name--) {
        double cpu = cpu_seconds();
        struct http_call *c = ask("POST", "/up", body, BIG, h, by_name);
        double until = loop_now_ms() + 15000;
        long polls = 0;
        for (; c->running && loop_now_ms() < until; polls++)
            run_lua(L, "require('rlm.core.loop').poll(0.05)");
        ck_assert_msg(!c->running, "%s still running", by_name ? "curl" : "h1");
        cpu = cpu_seconds() - cpu;
        ck_assert_msg(c->result == CURLE_OK, "%s: result %d (%s) after %.1f s, %.1f s of CPU, "
                      "%ld polls", by_name ? "curl" : "h1", c->result, http_failure_message(c),
                      c->seconds, cpu, polls);
        ck_assert_str_eq(c->body.data, "done");
        ck_assert_msg(polls < 20000, "%s spun: %ld polls", by_name ? "curl" : "h1", polls);
        http_free(c);
    }
    curl_slist_free_all(h);
    free(body);
}
END_TEST

static int time_out_the_idle_connection(int fd, int conn, int nreq, const char *head,
                                        size_t len)
{
    answer_with_counts(fd, conn, nreq, head, len);
    if (conn % 2 == 0) {
        usleep(100000);
        says(fd, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        usleep(200000);
        return 0;
    }
    return 1;
}

START_TEST(what_an_idle_connection_said_does_not_answer_the_next_request)
{
    serve(time_out_the_idle_connection);
    struct http_call *c = ask_and_wait("/a");
    ck_assert_int_eq(c->status, 200);
    http_free(c);
    usleep(150000);   /* the host is busy elsewhere (Lua) and does not poll meanwhile */
    c = ask_and_wait("/b");
    ck_assert_msg(c->result == CURLE_OK && c->status == 200,
                  "the second request got status %ld result %d body '%s'", c->status,
                  c->result, c->body.data ? c->body.data : "");
    http_free(c);
}
END_TEST

static int smuggle_later(int fd, int conn, int nreq, const char *head, size_t len)
{
    if (conn > 0 || nreq > 0)
        return answer_with_counts(fd, conn, nreq, head, len);
    says(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    usleep(50000);
    says(fd, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil");
    return 1;
}

START_TEST(bytes_that_came_while_idle_do_not_answer_the_next_request)
{
    serve(smuggle_later);
    struct http_call *c = ask_and_wait("/a");
    ck_assert_str_eq(c->body.data, "ok");
    http_free(c);
    usleep(150000);   /* no loop poll meanwhile */
    c = ask_and_wait("/b");
    ck_assert_msg(strncmp(c->body.data ? c->body.data : "", "conn=", 5) == 0,
                  "/b was answered with '%s'", c->body.data ? c->body.data : "");
    http_free(c);
}
END_TEST

static int echo_head_once(int fd, int conn, int nreq, const char *head, size_t body_len)
{
    echo_head(fd, conn, nreq, head, body_len);
    return 0;
}

/* The head a client sent, its Host value replaced by HOST and curl's Accept-Encoding line (h1
 * asks for no encoding) dropped. */
static void head_of(const char *method, const char *path, const char *body, size_t body_len,
                    struct curl_slist *h, int by_name, char *out, size_t size)
{
    struct http_call *c = ask(method, path, body, body_len, h, by_name);
    wait_call(c);
    ck_assert_int_eq(c->result, CURLE_OK);
    char host[64];
    snprintf(host, sizeof host, "%s:%d", by_name ? "localhost" : "127.0.0.1", port);
    const char *at = strstr(c->body.data, host);
    ck_assert_ptr_nonnull(at);
    snprintf(out, size, "%.*sHOST%s", (int)(at - c->body.data), c->body.data, at + strlen(host));
    char *ae = strstr(out, "Accept-Encoding: ");
    if (ae)
        memmove(ae, strstr(ae, "\r\n") + 2, strlen(strstr(ae, "\r\n") + 2) + 1);
    http_free(c);
}

static void same_head(const char *method, const char *path, const char *body, size_t body_len,
                      const char *line)
{
    struct curl_slist *h = line ? curl_slist_append(NULL, line) : NULL;
    char ours[2048], curls[2048];
    head_of(method, path, body, body_len, h, 0, ours, sizeof ours);
    head_of(method, path, body, body_len, h, 1, curls, sizeof curls);
    ck_assert_msg(strcmp(ours, curls) == 0, "h1 sent\n%s\ncurl sent\n%s", ours, curls);
    curl_slist_free_all(h);
}

START_TEST(every_request_head_is_curls)
{
    serve(echo_head_once);
    same_head(NULL, "/v1/models", NULL, 0, NULL);
    same_head("get", "/", NULL, 0, NULL);
    same_head("post", "/", "x", 1, NULL);
    same_head("post", "/", NULL, 0, NULL);
    same_head("put", "/", "x", 1, NULL);
    same_head(NULL, "/", NULL, 0, "X-Trace;");
    same_head(NULL, "/", NULL, 0, "X-Trace: \t");
    same_head(NULL, "/", NULL, 0, "X-Trace:a");
    same_head(NULL, "?q=1", NULL, 0, NULL);
    same_head("POST", "/", "x", 1, "Content-Type:");
}
END_TEST

/* What h1 would send otherwise than curl goes to curl. */
START_TEST(requests_h1_would_send_otherwise_are_curls)
{
    static const char *const lines[] = {"X-Trace;abc", "X-B;  ", "X;a: b", "Accept-Encoding: br"};
    struct h1_target t;
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        struct curl_slist *h = curl_slist_append(NULL, lines[i]);
        struct http_req req = {.url = "http://127.0.0.1:1/", .headers = h};
        ck_assert_msg(!h1_serves(&req, &t), "'%s' was served", lines[i]);
        curl_slist_free_all(h);
    }
    static const char *const urls[] = {"http://127.0.0.1:1/v1/../admin", "http://127.0.0.1:1/a/./b",
                                       "http://127.0.0.1:1/a/b/..", "http://127.0.0.1:1/.",
                                       "http://127.0.0.1:1/..?x"};
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        struct http_req req = {.url = urls[i]};
        ck_assert_msg(!h1_serves(&req, &t), "%s was served", urls[i]);
    }
    struct http_req big = {.url = "http://127.0.0.1:1/", .method = "POST", .body = "",
                           .body_len = 2 << 20};   /* curl would send Expect: 100-continue */
    ck_assert(!h1_serves(&big, &t));
    struct curl_slist *h = curl_slist_append(NULL, "Expect:");
    big.headers = h;
    ck_assert(h1_serves(&big, &t));
    curl_slist_free_all(h);
}
END_TEST

static int close_the_second_request_late(int fd, int conn, int nreq, const char *head,
                                         size_t len)
{
    if (conn == 0 && nreq == 1) {
        sleep(1);
        return 0;
    }
    return answer_with_counts(fd, conn, nreq, head, len);
}

START_TEST(a_stale_connection_found_late_is_still_replaced)
{
    serve(close_the_second_request_late);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    struct http_req req = {.url = url, .timeout_ms = 5000, .connect_timeout_ms = 500};
    struct http_call *c = http_start(loop_get(L), &req, NULL, NULL, NULL);
    wait_call(c);
    ck_assert_int_eq(c->result, CURLE_OK);
    http_free(c);
    c = http_start(loop_get(L), &req, NULL, NULL, NULL);
    wait_call(c);
    ck_assert_msg(c->result == CURLE_OK, "%d %s", c->result, http_failure_message(c));
    http_free(c);
}
END_TEST

static int answer_with_a_trailer(int fd, int conn, int nreq, const char *head, size_t len)
{
    says(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n"
             "Retry-After: 7\r\n\r\n");
    return 0;
}

START_TEST(trailers_are_read_as_curl_reads_them)
{
    serve(answer_with_a_trailer);
    char v[2][16] = {"", ""};
    for (int by_name = 1; by_name >= 0; by_name--) {
        struct http_call *c = ask(NULL, "/", NULL, 0, NULL, by_name);
        wait_call(c);
        ck_assert_int_eq(c->result, CURLE_OK);
        http_header(c, "retry-after", v[by_name], sizeof v[by_name]);
        http_free(c);
    }
    ck_assert_str_eq(v[0], "7");
    ck_assert_str_eq(v[0], v[1]);
}
END_TEST

START_TEST(an_http10_answer_with_transfer_encoding_closes_the_connection)
{
    the_next_request_takes_a_new_connection(
        "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
        "2\r\nok\r\n0\r\n\r\n");
}
END_TEST

START_TEST(a_close_in_any_connection_line_closes)
{
    the_next_request_takes_a_new_connection("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n"
                                            "Connection: close\r\nContent-Length: 2\r\n\r\nok");
}
END_TEST

Suite *make_h1_suite(void)
{
    Suite *s = suite_create("h1");
    TCase *tc = tcase_create("exchanges");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, a_second_request_rides_the_first_connection);
    tcase_add_test(tc, the_request_head_is_the_one_curl_sends);
    tcase_add_test(tc, every_answer_reads_as_curl_reads_it);
    tcase_add_test(tc, every_answer_reads_as_curl_reads_it_split_at_every_byte);
    tcase_add_test(tc, hostile_answers_are_failures_not_answers);
    tcase_add_test(tc, a_pooled_connection_closed_under_a_request_is_replaced_once);
    tcase_add_test(tc, a_connection_the_server_closed_while_idle_is_never_used);
    tcase_add_test(tc, bytes_after_an_answer_do_not_answer_the_next_request);
    tcase_add_test(tc, an_answer_before_the_upload_ends_ends_the_call);
    tcase_add_test(tc, twenty_megabytes_go_up_and_come_down_exactly);
    tcase_add_test(tc, a_silent_server_times_out);
    tcase_add_test(tc, stopping_from_inside_a_chunk_callback_ends_quietly);
    tcase_add_test(tc, only_what_curl_would_do_the_same_is_served);
    tcase_add_test(tc, a_proxy_in_the_environment_leaves_every_request_to_curl);
    tcase_add_test(tc, rlm_http_client_curl_leaves_every_request_to_curl);
    tcase_add_test(tc, a_post_cut_in_the_answers_head_is_not_sent_again);
    tcase_add_test(tc, compressed_bytes_are_never_taken_for_the_body);
    tcase_add_test(tc, a_head_before_the_upload_ends_does_not_stop_the_upload);
    tcase_add_test(tc, what_an_idle_connection_said_does_not_answer_the_next_request);
    tcase_add_test(tc, bytes_that_came_while_idle_do_not_answer_the_next_request);
    tcase_add_test(tc, every_request_head_is_curls);
    tcase_add_test(tc, requests_h1_would_send_otherwise_are_curls);
    tcase_add_test(tc, a_stale_connection_found_late_is_still_replaced);
    tcase_add_test(tc, trailers_are_read_as_curl_reads_them);
    tcase_add_test(tc, an_http10_answer_with_transfer_encoding_closes_the_connection);
    tcase_add_test(tc, a_close_in_any_connection_line_closes);
    suite_add_tcase(s, tc);
    return s;
}
