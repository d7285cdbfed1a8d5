/* check_http.c — lhttp.c's C call layer against the loopback echo stand-in. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include "check_host.h"
#include "host.h"
#include "http.h"

static lua_State *L;
static pid_t server;
static char base[64];

/* Starts tests/standins/echo on a free port and reads its READY line. */
static void start_server(void)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    server = fork();
    if (server == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execl("/usr/bin/python3", "python3", "tests/standins/echo", "--port", "0", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    FILE *f = fdopen(p[0], "r");
    char line[128] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    fclose(f);
    ck_assert_int_eq(sscanf(line, "READY %63s", base), 1);
}

static void setup(void)
{
    L = host_newstate();
    start_server();
}

static void teardown(void)
{
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    lua_close(L);
}

static int done_calls;
static void count_done(void *ud, struct http_call *c)
{
    done_calls++;
}

/* Polls the loop until the call finishes or two seconds pass. */
static void wait_call(struct http_call *c)
{
    for (int i = 0; i < 40 && c->running; i++)
        run_lua(L, "require('rlm.core.loop').poll(0.05)");
    ck_assert_int_eq(c->running, 0);
}

START_TEST(a_call_runs_on_the_loop_and_exposes_headers)
{
    char url[128];
    snprintf(url, sizeof url, "%s/status/429", base);
    struct http_req req = {.url = url, .timeout_ms = 5000};
    done_calls = 0;
    struct http_call *c = http_start(loop_get(L), &req, NULL, count_done, NULL);
    ck_assert_ptr_nonnull(c);
    wait_call(c);
    ck_assert_int_eq(done_calls, 1);
    ck_assert_int_eq(c->result, CURLE_OK);
    ck_assert_int_eq(c->status, 429);
    char value[32];
    ck_assert_int_eq(http_header(c, "retry-after", value, sizeof value), 0);
    ck_assert_str_eq(value, "1");
    ck_assert_int_eq(http_header(c, "RETRY-AFTER", value, sizeof value), 0);
    ck_assert_int_ne(http_header(c, "x-missing", value, sizeof value), 0);
    ck_assert_str_eq(c->body.data, "{\"status\": 429}");
    http_free(c);
}
END_TEST

START_TEST(post_bodies_are_sent_exactly)
{
    char url[128];
    snprintf(url, sizeof url, "%s/echo", base);
    static const char body[] = "x\0y";
    struct http_req req = {.url = url, .method = "PUT", .body = body, .body_len = 3};
    struct http_call *c = http_start(loop_get(L), &req, NULL, NULL, NULL);
    wait_call(c);
    ck_assert_ptr_nonnull(strstr(c->body.data, "\"method\": \"PUT\""));
    ck_assert_ptr_nonnull(strstr(c->body.data, "\"body\": \"x\\u0000y\""));
    http_free(c);
}
END_TEST

START_TEST(refused_connections_are_reported_as_connect_failures)
{
    struct http_req req = {.url = "http://127.0.0.1:1/", .timeout_ms = 2000};
    struct http_call *c = http_start(loop_get(L), &req, NULL, NULL, NULL);
    wait_call(c);
    ck_assert_int_ne(c->result, CURLE_OK);
    ck_assert_str_eq(http_failure_kind(c), "connect");
    ck_assert_ptr_nonnull(strstr(http_failure_message(c), "127.0.0.1"));
    http_free(c);
}
END_TEST

START_TEST(freeing_a_running_call_cancels_it)
{
    char url[128];
    snprintf(url, sizeof url, "%s/delay?ms=3000", base);
    struct http_req req = {.url = url};
    done_calls = 0;
    struct http_call *c = http_start(loop_get(L), &req, NULL, count_done, NULL);
    run_lua(L, "require('rlm.core.loop').poll(0.05)");
    http_free(c);
    run_lua(L, "require('rlm.core.loop').poll(0.05)");
    ck_assert_int_eq(done_calls, 0);
}
END_TEST

/* Every thread started in this program while `watching` is set notes, first thing, whether it
 * runs with every signal blocked: pthread_create is interposed here, ahead of libc's (and
 * ASan's), for the threads libcurl starts inside rlm's calls. */
typedef int pthread_create_fn(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
static atomic_int watching, threads_started, threads_open;
static sigset_t all_blockable;       /* what a thread that blocks everything has blocked */

struct thread_start {
    void *(*fn)(void *);
    void *arg;
};

static void *note_signal_mask(void *arg)
{
    struct thread_start start = *(struct thread_start *)arg;
    free(arg);
    sigset_t blocked;
    pthread_sigmask(SIG_BLOCK, NULL, &blocked);
    for (int sig = 1; sig < NSIG; sig++)
        if (sigismember(&all_blockable, sig) && !sigismember(&blocked, sig)) {
            atomic_fetch_add(&threads_open, 1);
            break;
        }
    atomic_fetch_add(&threads_started, 1);
    return start.fn(start.arg);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    pthread_create_fn *real = (pthread_create_fn *)dlsym(RTLD_NEXT, "pthread_create");
    struct thread_start *start = atomic_load(&watching) ? malloc(sizeof *start) : NULL;
    if (start == NULL)
        return real(thread, attr, fn, arg);
    *start = (struct thread_start){fn, arg};
    return real(thread, attr, note_signal_mask, start);
}

/* curl looks a host name up on a thread of its own (its threaded resolver), started from the
 * Lua thread inside rlm's call into curl, with the Lua thread's signal mask. Were rlm's signals
 * open on it, the kernel would hand it one whenever the Lua thread has one pending or waits in
 * vfork, and rlm's handler would run there beside the Lua thread. The Lua thread itself must
 * have its signals open again once curl's call returns. The name is this machine's own; whether
 * it resolves does not matter, only that curl starts a lookup. */
START_TEST(curls_resolver_threads_start_with_every_signal_blocked)
{
    sigset_t all, before, after;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &before);
    pthread_sigmask(SIG_BLOCK, NULL, &all_blockable);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    const curl_version_info_data *curl = curl_version_info(CURLVERSION_NOW);
    int threaded = (curl->features & CURL_VERSION_ASYNCHDNS) && curl->ares == NULL;
    char host[256] = "", url[512];
    ck_assert_int_eq(gethostname(host, sizeof host - 1), 0);
    const char *port = strrchr(base, ':');
    ck_assert_ptr_nonnull(port);
    snprintf(url, sizeof url, "http://%s%s/status/204", host, port);
    atomic_store(&threads_started, 0);
    atomic_store(&threads_open, 0);
    atomic_store(&watching, 1);
    struct http_req req = {.url = url, .timeout_ms = 10000};
    struct http_call *c = http_start(loop_get(L), &req, NULL, NULL, NULL);
    ck_assert_ptr_nonnull(c);
    /* until the call ends or a lookup has started (the name may be slow to fail: not waited for) */
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        run_lua(L, "require('rlm.core.loop').poll(0.05)");
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (c->running && atomic_load(&threads_started) == 0 && now.tv_sec - start.tv_sec < 15);
    atomic_store(&watching, 0);
    pthread_sigmask(SIG_BLOCK, NULL, &after);
    http_free(c);
    ck_assert_msg(!threaded || atomic_load(&threads_started) >= 1,
                  "curl (threaded resolver) looked up %s without starting a thread", host);
    ck_assert_msg(atomic_load(&threads_open) == 0,
                  "%d of the %d threads curl started do not have every signal blocked",
                  atomic_load(&threads_open), atomic_load(&threads_started));
    for (int sig = 1; sig < NSIG; sig++)
        ck_assert_msg(sigismember(&after, sig) == sigismember(&before, sig),
                      "the Lua thread's mask of signal %d changed across curl's call", sig);
}
END_TEST

Suite *make_http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("calls");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);   /* a python stand-in per test, on a loaded machine */
    tcase_add_test(tc, a_call_runs_on_the_loop_and_exposes_headers);
    tcase_add_test(tc, post_bodies_are_sent_exactly);
    tcase_add_test(tc, refused_connections_are_reported_as_connect_failures);
    tcase_add_test(tc, freeing_a_running_call_cancels_it);
    tcase_add_test(tc, curls_resolver_threads_start_with_every_signal_blocked);
    suite_add_tcase(s, tc);
    return s;
}
