/* check_http.c — lhttp.c's C call layer against the loopback echo stand-in. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
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
    ck_assert_str_eq(http_failure_kind(c->result), "connect");
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

Suite *make_http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("calls");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, a_call_runs_on_the_loop_and_exposes_headers);
    tcase_add_test(tc, post_bodies_are_sent_exactly);
    tcase_add_test(tc, refused_connections_are_reported_as_connect_failures);
    tcase_add_test(tc, freeing_a_running_call_cancels_it);
    suite_add_tcase(s, tc);
    return s;
}
