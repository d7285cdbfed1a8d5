/* check_httpd.c — lhttpd.c: the libmicrohttpd server on the host's loop, driven from Lua as the
 * bindings are, with the C call layer (http.h) as its client on the same loop and thread. */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "check_host.h"
#include "host.h"
#include "http.h"

static lua_State *L;
static char base[64];

/* A server on a free port, kept in the global srv; base is its URL. */
static void setup(void)
{
    L = host_newstate();
    run_lua(L, "loop = require 'rlm.core.loop'\n"
               "srv = assert(require('rlm.core.httpd').listen{port = 0, max_body = 1000})\n"
               "port = srv:port()");
    lua_getglobal(L, "port");
    int port = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    ck_assert_int_gt(port, 0);
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
}

static void teardown(void)
{
    lua_close(L);
}

static struct http_call *start(const char *method, const char *path, const char *body,
                               size_t len, struct curl_slist *headers, http_chunk_fn on_chunk,
                               void *ud)
{
    char url[128];
    snprintf(url, sizeof url, "%s%s", base, path);
    struct http_req req = {.method = method, .url = url, .headers = headers, .body = body,
                           .body_len = len, .timeout_ms = 5000};
    struct http_call *c = http_start(loop_get(L), &req, on_chunk, NULL, ud);
    ck_assert_ptr_nonnull(c);
    return c;
}

/* Polls until the server has a request for Lua, and keeps it in the global req. */
static void take_request(void)
{
    run_lua(L, "local deadline = loop.now() + 3\n"
               "req = nil\n"
               "while not req and loop.now() < deadline do loop.poll(0.02); req = srv:next() end\n"
               "assert(req, 'no request reached Lua')");
}

static void wait_call(struct http_call *c)
{
    for (int i = 0; i < 150 && c->running; i++)
        run_lua(L, "loop.poll(0.02)");
    ck_assert_int_eq(c->running, 0);
    ck_assert_msg(c->result == CURLE_OK, "%s", http_failure_message(c));
}

START_TEST(a_request_and_its_response_cross_intact)
{
    static const char body[] = "bin\0ary";
    struct curl_slist *h = curl_slist_append(NULL, "X-Probe: one two");
    struct http_call *c = start("PUT", "/a/b%20c?q=1", body, sizeof body - 1, h, NULL, NULL);
    take_request();
    run_lua(L, "assert(req:method() == 'PUT', req:method())\n"
               "assert(req:path() == '/a/b c', req:path())\n"
               "assert(req:header('x-probe') == 'one two')\n"
               "assert(req:header('X-PROBE') == 'one two')\n"
               "assert(req:header('x-missing') == nil)\n"
               "assert(req:body() == 'bin\\0ary', #req:body())\n"
               "assert(not req:gone())\n"
               "assert(req:respond(201, {['X-Answer'] = '42'}, 'made\\0it') == true)");
    wait_call(c);
    ck_assert_int_eq(c->status, 201);
    char value[16];
    ck_assert_int_eq(http_header(c, "x-answer", value, sizeof value), 0);
    ck_assert_str_eq(value, "42");
    ck_assert_uint_eq(c->body.len, 7);
    ck_assert_int_eq(memcmp(c->body.data, "made\0it", 7), 0);
    /* The exchange's id turns ready and gone() true once the response has gone out. */
    run_lua(L, "local deadline = loop.now() + 2\n"
               "while not req:gone() and loop.now() < deadline do loop.poll(0.02) end\n"
               "assert(req:gone(), 'the exchange never ended')\n"
               "local ok, err = pcall(req.respond, req, 200, {}, 'again')\n"
               "assert(not ok and err:find('already been answered'), err)");
    http_free(c);
    curl_slist_free_all(h);
}
END_TEST

static void collect(void *ud, struct http_call *c, const char *data, size_t len)
{
    struct buf *b = ud;
    (void)c;
    ck_assert_int_eq(buf_add(b, data, len), 0);
}

START_TEST(a_stream_is_sent_piece_by_piece_until_finished)
{
    struct buf got = {0};
    struct http_call *c = start(NULL, "/s", NULL, 0, NULL, collect, &got);
    take_request();
    run_lua(L, "assert(req:stream(200, {['Content-Type'] = 'text/event-stream'}))\n"
               "assert(req:send('data: 1\\n\\n'))");
    /* The first piece is out before the stream ends. */
    for (int i = 0; i < 100 && got.len == 0; i++)
        run_lua(L, "loop.poll(0.02)");
    ck_assert_str_eq(got.data, "data: 1\n\n");
    ck_assert_int_eq(c->running, 1);
    run_lua(L, "assert(req:send('data: 2\\n\\n'))\n"
               "req:finish()\n"
               "local ok, err = pcall(req.send, req, 'late')\n"
               "assert(not ok and err:find('open stream'), err)");
    wait_call(c);
    ck_assert_int_eq(c->status, 200);
    ck_assert_str_eq(got.data, "data: 1\n\ndata: 2\n\n");
    ck_assert_uint_eq(c->body.len, 0);   /* streamed bytes go to the callback only */
    http_free(c);
    buf_free(&got);
}
END_TEST

START_TEST(a_request_lua_drops_unanswered_gets_500)
{
    struct http_call *c = start(NULL, "/dropped", NULL, 0, NULL, NULL, NULL);
    take_request();
    run_lua(L, "req = nil; collectgarbage(); collectgarbage()");
    wait_call(c);
    ck_assert_int_eq(c->status, 500);
    ck_assert_str_eq(c->body.data, "no response\n");
    http_free(c);
}
END_TEST

START_TEST(a_body_over_the_limit_is_refused_before_lua)
{
    static char big[5000];
    memset(big, 'x', sizeof big);
    struct http_call *c = start("POST", "/big", big, sizeof big, NULL, NULL, NULL);
    wait_call(c);
    ck_assert_int_eq(c->status, 413);
    run_lua(L, "assert(srv:next() == nil, 'the refused request reached Lua')");
    http_free(c);
}
END_TEST

START_TEST(misuse_raises_and_a_closed_server_says_so)
{
    run_lua(L, "local httpd = require 'rlm.core.httpd'\n"
               "local ok, err = pcall(httpd.listen, {port = 70000})\n"
               "assert(not ok and err:find('0..65535'), err)\n"
               "ok, err = pcall(httpd.listen, 'x')\n"
               "assert(not ok and err:find('table expected'), err)\n"
               "srv:close()\n"
               "srv:close()\n"
               "ok, err = pcall(srv.port, srv)\n"
               "assert(not ok and err:find('closed'), err)");
}
END_TEST

START_TEST(closing_with_requests_in_flight_ends_them)
{
    struct http_call *c = start(NULL, "/waiting", NULL, 0, NULL, NULL, NULL);
    take_request();
    run_lua(L, "srv:close()\n"
               "assert(req:gone(), 'the exchange outlived its server')\n"
               "assert(req:respond(200, {}, 'too late') == false)");
    for (int i = 0; i < 150 && c->running; i++)
        run_lua(L, "loop.poll(0.02)");
    ck_assert_int_eq(c->running, 0);
    ck_assert(c->result != CURLE_OK || c->status >= 500);
    http_free(c);
}
END_TEST

Suite *make_httpd_suite(void)
{
    Suite *s = suite_create("httpd");
    TCase *tc = tcase_create("server");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, a_request_and_its_response_cross_intact);
    tcase_add_test(tc, a_stream_is_sent_piece_by_piece_until_finished);
    tcase_add_test(tc, a_request_lua_drops_unanswered_gets_500);
    tcase_add_test(tc, a_body_over_the_limit_is_refused_before_lua);
    tcase_add_test(tc, misuse_raises_and_a_closed_server_says_so);
    tcase_add_test(tc, closing_with_requests_in_flight_ends_them);
    suite_add_tcase(s, tc);
    return s;
}
