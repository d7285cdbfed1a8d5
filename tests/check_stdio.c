/* check_stdio.c — lstdio.c: the line reader on the loop, fed through a pipe from C. */
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lauxlib.h>

#include "check_host.h"
#include "host.h"

static lua_State *L;
static int fds[2];

/* A reader on the pipe's read end, in the global rd. */
static void setup(void)
{
    L = host_newstate();
    ck_assert_int_eq(pipe(fds), 0);
    lua_pushinteger(L, fds[0]);
    lua_setglobal(L, "fd");
    run_lua(L, "loop = require 'rlm.core.loop'\n"
               "rd = require('rlm.core.stdio').reader(fd)\n"
               "function drain(want)\n"
               "  local lines, deadline = {}, loop.now() + 3\n"
               "  while #lines < want and loop.now() < deadline do\n"
               "    loop.poll(0.02)\n"
               "    for line in rd.line, rd do lines[#lines + 1] = line end\n"
               "  end\n"
               "  return lines\n"
               "end");
}

static void teardown(void)
{
    lua_close(L);
    close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
}

static void put(const char *s)
{
    ck_assert_int_eq(write(fds[1], s, strlen(s)), (ssize_t)strlen(s));
}

/* Closes the writing end: the reader sees the end of its input. */
static void end_input(void)
{
    close(fds[1]);
    fds[1] = -1;
}

START_TEST(lines_come_out_whole_however_the_bytes_arrive)
{
    put("one\r\ntw");
    run_lua(L, "local got = drain(1)\n"
               "assert(#got == 1 and got[1] == 'one', 'CR LF ends a line: ' .. tostring(got[1]))\n"
               "assert(rd:line() == nil, 'half a line is held back')\n"
               "assert(not rd:eof())");
    put("o\n\nthree");
    run_lua(L, "local got = drain(2)\n"
               "assert(got[1] == 'two' and got[2] == '', table.concat(got, '|'))\n"
               "assert(rd:line() == nil)");
    end_input();
    run_lua(L, "local got = drain(1)\n"
               "assert(got[1] == 'three', 'the last line needs no newline')\n"
               "assert(rd:eof())\n"
               "assert(rd:line() == nil)");
}
END_TEST

START_TEST(the_id_is_ready_on_input_and_at_the_end)
{
    run_lua(L, "assert(#loop.poll(0.05) == 0, 'ready with nothing to read')");
    put("x\n");
    run_lua(L, "local ids = loop.poll(1)\n"
               "assert(ids[1] == rd:id(), 'input did not make the reader ready')\n"
               "assert(rd:line() == 'x')");
    end_input();
    run_lua(L, "local ids = loop.poll(1)\n"
               "assert(ids[1] == rd:id(), 'the end did not make the reader ready')\n"
               "assert(rd:eof())");
}
END_TEST

START_TEST(a_line_longer_than_one_read_is_kept_whole)
{
    static char big[200001];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 2] = '\n';
    big[sizeof big - 1] = '\0';
    /* The pipe holds less than this; a child writes it while the loop reads. */
    pid_t pid = fork();
    if (pid == 0) {
        ssize_t n = write(fds[1], big, sizeof big - 1);
        _exit(n == (ssize_t)sizeof big - 1 ? 0 : 1);
    }
    end_input();
    run_lua(L, "local got = drain(1)\n"
               "assert(#got == 1 and #got[1] == 199999 and not got[1]:find('[^y]'), #got)\n"
               "local deadline = loop.now() + 2\n"
               "while not rd:eof() and loop.now() < deadline do loop.poll(0.02) end\n"
               "assert(rd:eof())");
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
END_TEST

START_TEST(closing_stops_watching_but_leaves_the_descriptor_open)
{
    run_lua(L, "rd:close()\nrd:close()");
    put("after\n");
    run_lua(L, "assert(#loop.poll(0.05) == 0, 'a closed reader still woke the loop')");
    char got[8] = "";
    ck_assert_int_eq(read(fds[0], got, sizeof got - 1), 6);
    ck_assert_str_eq(got, "after\n");
    ck_assert_int_ne(fcntl(fds[0], F_GETFD), -1);
}
END_TEST

Suite *make_stdio_suite(void)
{
    Suite *s = suite_create("stdio");
    TCase *tc = tcase_create("reader");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, lines_come_out_whole_however_the_bytes_arrive);
    tcase_add_test(tc, the_id_is_ready_on_input_and_at_the_end);
    tcase_add_test(tc, a_line_longer_than_one_read_is_kept_whole);
    tcase_add_test(tc, closing_stops_watching_but_leaves_the_descriptor_open);
    suite_add_tcase(s, tc);
    return s;
}
