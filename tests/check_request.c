/* check_request.c — the request engine (host/request.c) against the loopback echo stand-in,
 * trying to make it repeat what it must not and to leak what it holds: a POST whose answer
 * was cut, or that got no byte back, is not sent twice (the server may have run it); one that
 * carries an Idempotency-Key is;
 * Retry-After is waited; a wait past the deadline is not; cancelling mid-backoff frees all. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_host.h"
#include "host.h"
#include "request.h"

static lua_State *L;
static loop *lp;
static pid_t server;
static char base[64];
static int done_calls;

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
    lp = loop_get(L);
    start_server();
    done_calls = 0;
}

static void teardown(void)
{
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    lua_close(L);
}

static void count_done(void *ud, struct request *r)
{
    done_calls++;
}

/* A request to path with the given method and limits; backoff is short so tests are quick. */
static struct request *start(const char *method, const char *path, struct curl_slist *headers,
                             int max_attempts, double deadline_s)
{
    static char url[160];
    snprintf(url, sizeof url, "%s%s", base, path);
    struct request_spec spec = {
        .http = {.method = method, .url = url, .headers = headers,
                 .body = strcmp(method, "POST") == 0 ? "x" : NULL,
                 .body_len = strcmp(method, "POST") == 0 ? 1 : 0},
        .max_attempts = max_attempts,
        .backoff_base_ms = 10,
        .backoff_cap_ms = 50,
        .deadline_ms = loop_now_ms() + deadline_s * 1e3,
        .done = count_done,
    };
    struct request *r = request_start(lp, &spec);
    ck_assert_ptr_nonnull(r);
    return r;
}

/* Polls the loop until r finishes or limit_s passes. */
static void wait_request(struct request *r, double limit_s)
{
    double until = loop_now_ms() + limit_s * 1e3;
    while (!r->finished && loop_now_ms() < until)
        ck_assert_int_eq(loop_poll(lp, 50), 0);
    ck_assert_msg(r->finished, "the request did not finish within %.1f s", limit_s);
    ck_assert_int_eq(done_calls, 1);
}

/* How many requests the stand-in has served (this one excluded). */
static int served(void)
{
    int before = done_calls;
    done_calls = 0;
    struct request *r = start("GET", "/_stats", NULL, 1, 5);
    wait_request(r, 5);
    ck_assert_int_eq(r->call->status, 200);
    char *at = strstr(r->call->body.data, "\"requests\": ");
    ck_assert_ptr_nonnull(at);
    int n = atoi(at + strlen("\"requests\": ")) - 1;
    request_free(r);
    done_calls = before;
    return n;
}

START_TEST(a_post_whose_answer_was_cut_is_not_sent_again)
{
    struct request *r = start("POST", "/cut?bytes=5", NULL, 4, 10);
    wait_request(r, 10);
    ck_assert_int_eq(r->attempts, 1);
    ck_assert_int_eq(r->call->result, CURLE_PARTIAL_FILE);
    ck_assert(!request_retryable(r));
    request_free(r);
    ck_assert_int_eq(served(), 1);
}
END_TEST

START_TEST(a_post_that_got_no_byte_back_is_not_sent_again)
{
    /* The server read it and hung up: it may have run it (Daytona's daemon runs a command
     * whether or not its client is still there). */
    struct request *r = start("POST", "/hangup", NULL, 3, 10);
    wait_request(r, 10);
    ck_assert_int_eq(r->attempts, 1);
    ck_assert_int_eq(r->call->result, CURLE_GOT_NOTHING);
    ck_assert(!request_retryable(r));
    request_free(r);
    ck_assert_int_eq(served(), 1);
}
END_TEST

START_TEST(a_put_that_got_no_byte_back_is_sent_again)
{
    struct request *r = start("PUT", "/hangup", NULL, 3, 10);
    wait_request(r, 10);
    ck_assert_int_eq(r->attempts, 3);
    request_free(r);
    ck_assert_int_eq(served(), 3);
}
END_TEST

START_TEST(a_cut_post_with_an_idempotency_key_is_sent_again)
{
    struct curl_slist *h = curl_slist_append(NULL, "Idempotency-Key: 7f3a");
    struct request *r = start("POST", "/cut?bytes=5", h, 3, 10);
    wait_request(r, 10);
    ck_assert_int_eq(r->attempts, 3);
    request_free(r);
    curl_slist_free_all(h);
    ck_assert_int_eq(served(), 3);
}
END_TEST

START_TEST(a_cut_get_is_sent_again_but_a_post_5xx_is_not)
{
    struct request *r = start("GET", "/cut?bytes=5", NULL, 2, 10);
    wait_request(r, 10);
    ck_assert_int_eq(r->attempts, 2);
    request_free(r);
    done_calls = 0;
    r = start("POST", "/status/503", NULL, 3, 10);   /* a gateway's 503: did it run? */
    wait_request(r, 10);
    ck_assert_int_eq(r->attempts, 1);
    ck_assert_int_eq(r->call->status, 503);
    request_free(r);
}
END_TEST

START_TEST(a_refused_connection_is_retried_whatever_the_method)
{
    struct request_spec spec = {
        .http = {.method = "POST", .url = "http://127.0.0.1:1/", .body = "x", .body_len = 1},
        .max_attempts = 3, .backoff_base_ms = 10, .backoff_cap_ms = 20,
        .deadline_ms = loop_now_ms() + 5000, .done = count_done,
    };
    struct request *r = request_start(lp, &spec);
    wait_request(r, 5);
    ck_assert_int_eq(r->attempts, 3);
    ck_assert_int_eq(r->call->result, CURLE_COULDNT_CONNECT);
    request_free(r);
}
END_TEST

START_TEST(retry_after_is_waited_even_for_a_post)
{
    double t0 = loop_now_ms();
    struct request *r = start("POST", "/status/429", NULL, 2, 10);   /* Retry-After: 1 */
    wait_request(r, 10);
    double took = loop_now_ms() - t0;
    ck_assert_int_eq(r->attempts, 2);
    ck_assert_int_eq(r->call->status, 429);
    ck_assert_double_eq(r->retry_after, 1);
    ck_assert_msg(took >= 1000 && took < 1800, "took %.0f ms", took);
    request_free(r);
}
END_TEST

START_TEST(a_429_handed_back_ends_the_request_at_once_with_its_wait)
{
    static char url[160];
    snprintf(url, sizeof url, "%s/status/429", base);   /* Retry-After: 1 */
    struct request_spec spec = {
        .http = {.method = "POST", .url = url, .body = "x", .body_len = 1},
        .max_attempts = 5, .backoff_base_ms = 10, .backoff_cap_ms = 50,
        .deadline_ms = loop_now_ms() + 10e3, .hand_back_429 = 1, .done = count_done,
    };
    struct request *r = request_start(lp, &spec);
    ck_assert_ptr_nonnull(r);
    wait_request(r, 10);
    ck_assert_int_eq(r->attempts, 1);
    ck_assert_int_eq(r->call->status, 429);
    ck_assert_double_eq(r->retry_after, 1);
    ck_assert_int_eq(served(), 1);
    request_free(r);
}
END_TEST

START_TEST(a_wait_past_the_deadline_ends_the_request_at_once)
{
    double t0 = loop_now_ms();
    struct request *r = start("GET", "/status/429", NULL, 5, 0.5);
    wait_request(r, 5);
    ck_assert_int_eq(r->attempts, 1);
    ck_assert_int_eq(r->wait_past_deadline, 1);
    ck_assert_double_lt(loop_now_ms() - t0, 400);
    request_free(r);
}
END_TEST

START_TEST(the_deadline_bounds_every_attempt)
{
    double t0 = loop_now_ms();
    struct request *r = start("GET", "/delay?ms=3000", NULL, 5, 0.3);
    wait_request(r, 5);
    double took = loop_now_ms() - t0;
    ck_assert_int_eq(r->call->result, CURLE_OPERATION_TIMEDOUT);
    ck_assert_int_eq(r->attempts, 1);
    ck_assert_msg(took >= 250 && took < 1000, "took %.0f ms", took);
    request_free(r);
}
END_TEST

START_TEST(cancelling_mid_backoff_frees_everything_and_calls_nothing)
{
    struct request_spec spec = {
        .http = {.url = NULL},
        .max_attempts = 5, .backoff_base_ms = 5000, .backoff_cap_ms = 5000,
        .deadline_ms = loop_now_ms() + 60000, .done = count_done,
    };
    char url[160];
    snprintf(url, sizeof url, "%s/status/503", base);
    spec.http.url = url;
    struct request *r = request_start(lp, &spec);
    for (int i = 0; i < 100 && r->timer == 0; i++)
        ck_assert_int_eq(loop_poll(lp, 50), 0);
    ck_assert_msg(r->timer != 0, "the first attempt never ended in a backoff");
    ck_assert_int_eq(r->attempts, 1);
    request_free(r);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(loop_poll(lp, 10), 0);
    ck_assert_int_eq(done_calls, 0);
    ck_assert_int_eq(served(), 1);
}
END_TEST

START_TEST(stopping_keeps_the_answer_readable)
{
    struct request *r = start("GET", "/stream?chunks=50&ms=20", NULL, 3, 10);
    while (r->call->status == 0)
        ck_assert_int_eq(loop_poll(lp, 20), 0);
    request_stop(r);
    ck_assert(r->finished);
    ck_assert_int_eq(r->call->status, 200);
    ck_assert_int_eq(r->call->running, 0);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(loop_poll(lp, 10), 0);
    ck_assert_int_eq(done_calls, 0);
    ck_assert_int_eq(r->attempts, 1);
    request_free(r);
}
END_TEST

Suite *make_request_suite(void)
{
    Suite *s = suite_create("request");
    TCase *tc = tcase_create("policy");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, a_post_whose_answer_was_cut_is_not_sent_again);
    tcase_add_test(tc, a_post_that_got_no_byte_back_is_not_sent_again);
    tcase_add_test(tc, a_put_that_got_no_byte_back_is_sent_again);
    tcase_add_test(tc, a_429_handed_back_ends_the_request_at_once_with_its_wait);
    tcase_add_test(tc, a_cut_post_with_an_idempotency_key_is_sent_again);
    tcase_add_test(tc, a_cut_get_is_sent_again_but_a_post_5xx_is_not);
    tcase_add_test(tc, a_refused_connection_is_retried_whatever_the_method);
    tcase_add_test(tc, retry_after_is_waited_even_for_a_post);
    tcase_add_test(tc, a_wait_past_the_deadline_ends_the_request_at_once);
    tcase_add_test(tc, the_deadline_bounds_every_attempt);
    tcase_add_test(tc, cancelling_mid_backoff_frees_everything_and_calls_nothing);
    tcase_add_test(tc, stopping_keeps_the_answer_readable);
    suite_add_tcase(s, tc);
    return s;
}
