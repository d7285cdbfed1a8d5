/* check_sys.c — lsys.c: files, processes and their pipes on the loop. */
#include <lauxlib.h>

#include "check_host.h"
#include "host.h"

static lua_State *L;

static void setup(void)
{
    L = host_newstate();
}

static void teardown(void)
{
    lua_close(L);
}

START_TEST(atomic_write_replaces_and_leaves_no_temp_files)
{
    run_lua(L, "local sys = require 'rlm.core.sys'\n"
               "local dir = assert(sys.mkdtemp('rlm-check'))\n"
               "assert(sys.write_file(dir .. '/f', 'one'))\n"
               "assert(sys.write_file(dir .. '/f', 'two', 384))\n"
               "assert(sys.read_file(dir .. '/f') == 'two')\n"
               "assert(sys.stat(dir .. '/f').mode == 384)\n"
               "local names = sys.list_dir(dir)\n"
               "assert(#names == 1, #names)\n"
               "assert(sys.remove(dir, true))\n"
               "assert(sys.stat(dir) == nil)");
}
END_TEST

START_TEST(process_output_and_exit_status)
{
    run_lua(L, "local sys = require 'rlm.core.sys'\n"
               "local loop = require 'rlm.core.loop'\n"
               "local p = assert(sys.spawn{argv = {'/bin/sh', '-c', 'read x; echo \"$x!\"; exit 7'}})\n"
               "p:write('hi\\n')\n"
               "local deadline = loop.now() + 5\n"
               "while not p:status() and loop.now() < deadline do loop.poll(0.05) end\n"
               "while not p:eof('stdout') and loop.now() < deadline do loop.poll(0.05) end\n"
               "assert(p:line() == 'hi!')\n"
               "local how, code = p:status()\n"
               "assert(how == 'exit' and code == 7, tostring(how) .. ' ' .. tostring(code))\n"
               "p:close()");
}
END_TEST

START_TEST(misuse_raises_with_a_clear_message)
{
    run_lua(L, "local sys = require 'rlm.core.sys'\n"
               "local ok, err = pcall(sys.spawn, {argv = {}})\n"
               "assert(not ok and err:find('non%-empty list'), err)\n"
               "ok, err = pcall(sys.spawn, {argv = {'true'}, stdout = 'bogus'})\n"
               "assert(not ok and err:find('stdout must be'), err)\n"
               "ok, err = pcall(sys.kill, 1, 'NOPE')\n"
               "assert(not ok and err:find('unknown signal'), err)");
}
END_TEST

Suite *make_sys_suite(void)
{
    Suite *s = suite_create("sys");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, atomic_write_replaces_and_leaves_no_temp_files);
    tcase_add_test(tc, process_output_and_exit_status);
    tcase_add_test(tc, misuse_raises_with_a_clear_message);
    suite_add_tcase(s, tc);
    return s;
}
