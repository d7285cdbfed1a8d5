/* check_loop.c — lloop.c: timers, op ids, descriptor watches. */
#include <poll.h>
#include <unistd.h>

#include <lauxlib.h>

#include "check_host.h"
#include "host.h"
#include "loop.h"

static lua_State *L;

static void setup(void)
{
    L = host_newstate();
}

static void teardown(void)
{
    lua_close(L);
}

/* Timers fire earliest first, also when both are already due at one poll (as on a machine too
 * busy to poll in between: the wait below makes it so every time). */
START_TEST(timers_fire_in_order_and_cancel)
{
    run_lua(L, "local loop = require 'rlm.core.loop'\n"
               "local t0 = loop.now()\n"
               "local late = loop.timer(0.05)\n"
               "local early = loop.timer(0.01)\n"
               "local dropped = loop.timer(0.02)\n"
               "loop.cancel(dropped)\n"
               "while loop.now() - t0 < 0.06 do end\n"
               "local seen = {}\n"
               "while #seen < 2 do\n"
               "  for _, id in ipairs(loop.poll(1)) do seen[#seen+1] = id end\n"
               "end\n"
               "assert(seen[1] == early and seen[2] == late, 'order')\n"
               "local dt = loop.now() - t0\n"
               "assert(dt >= 0.05 and dt < 30, dt)\n"
               "assert(#loop.poll(0.03) == 0, 'cancelled timer fired')");
}
END_TEST

START_TEST(ready_ids_come_back_from_poll)
{
    run_lua(L, "local loop = require 'rlm.core.loop'\n"
               "local a, b = loop.new_id(), loop.new_id()\n"
               "assert(a ~= b)\n"
               "loop.ready(b)\n"
               "local got = loop.poll(0)\n"
               "assert(#got == 1 and got[1] == b)");
}
END_TEST

static int fired;
static void on_readable(void *ud, int fd, short revents)
{
    char c;
    fired += (int)read(fd, &c, 1);
    loop_ready(ud, 99);
}

START_TEST(watched_descriptors_wake_the_poll)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    loop *lp = loop_get(L);
    ck_assert_int_eq(loop_watch(lp, p[0], POLLIN, on_readable, lp), 0);
    ck_assert_int_eq(write(p[1], "x", 1), 1);
    fired = 0;
    run_lua(L, "local got = require('rlm.core.loop').poll(2)\n"
               "assert(#got == 1 and got[1] == 99, 'no wake-up')");
    ck_assert_int_eq(fired, 1);
    loop_unwatch(lp, p[0]);
    close(p[0]);
    close(p[1]);
}
END_TEST

/* A poll that finds ops ready already still takes what the descriptors have, without waiting:
 * tasks that keep becoming ready (a timer due now, a task handing over to another) must not
 * hold back a socket that is ready (a request to send, an answer to read). */
START_TEST(ready_ops_do_not_hold_back_ready_descriptors)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    loop *lp = loop_get(L);
    ck_assert_int_eq(loop_watch(lp, p[0], POLLIN, on_readable, lp), 0);
    ck_assert_int_eq(write(p[1], "x", 1), 1);
    fired = 0;
    run_lua(L, "local loop = require 'rlm.core.loop'\n"
               "local op = loop.new_id()\n"
               "loop.ready(op)\n"
               "local got = loop.poll(2)\n"
               "assert(#got == 2 and got[1] == op and got[2] == 99, 'the descriptor waited')");
    ck_assert_int_eq(fired, 1);
    loop_unwatch(lp, p[0]);
    close(p[0]);
    close(p[1]);
}
END_TEST

Suite *make_loop_suite(void)
{
    Suite *s = suite_create("loop");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, timers_fire_in_order_and_cancel);
    tcase_add_test(tc, ready_ids_come_back_from_poll);
    tcase_add_test(tc, watched_descriptors_wake_the_poll);
    tcase_add_test(tc, ready_ops_do_not_hold_back_ready_descriptors);
    suite_add_tcase(s, tc);
    return s;
}
