/* check_host.c — host.c: state creation, embedded modules, protected calls. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>

#include "check_host.h"
#include "host.h"

static lua_State *L;

static void setup(void)
{
    L = host_newstate();
    ck_assert_ptr_nonnull(L);
}

static void teardown(void)
{
    lua_close(L);
}

START_TEST(embedded_files_are_indexed_by_path)
{
    const struct embedded_file *f = host_embedded("lua/rlm/cli.lua");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_gt(f->len, 0);
    ck_assert_int_eq(f->data[f->len], '\0');
    ck_assert_ptr_null(host_embedded("lua/rlm/no-such-module.lua"));
}
END_TEST

START_TEST(modules_load_from_the_binary_with_real_chunk_names)
{
    run_lua(L, "local cli = require 'rlm.cli'\n"
               "local info = debug.getinfo(cli.main, 'S')\n"
               "assert(info.source == '@lua/rlm/cli.lua', info.source)");
    run_lua(L, "assert(require('cjson').encode({a=1}) == '{\"a\":1}')");
    run_lua(L, "assert(require('cjson.safe').decode('{') == nil)");
    run_lua(L, "assert(type(require('rlm.core.loop').poll) == 'function')");
}
END_TEST

START_TEST(the_working_directory_is_never_searched)
{
    run_lua(L, "assert(package.path == '' and package.cpath == '')");
}
END_TEST

START_TEST(pcall_appends_a_traceback)
{
    luaL_loadstring(L, "local function inner() error('deep') end inner()");
    int status = host_pcall(L, 0, 0);
    ck_assert_int_eq(status, LUA_ERRRUN);
    const char *msg = lua_tostring(L, -1);
    ck_assert_ptr_nonnull(strstr(msg, "deep"));
    ck_assert_ptr_nonnull(strstr(msg, "stack traceback"));
    ck_assert_ptr_nonnull(strstr(msg, "inner"));
    lua_pop(L, 1);
}
END_TEST

START_TEST(lua_path_override_wins_over_embedded)
{
    char dir[] = "/tmp/rlm-check-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/rlm", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/rlm/cli.lua", dir);
    FILE *f = fopen(path, "w");
    fputs("return {overridden = true}\n", f);
    fclose(f);
    setenv("RLM_LUA_PATH", dir, 1);
    lua_State *L2 = host_newstate();
    unsetenv("RLM_LUA_PATH");
    run_lua(L2, "assert(require('rlm.cli').overridden == true)");
    run_lua(L2, "assert(require('rlm.async').spawn, 'other modules still embedded')");
    lua_close(L2);
    remove(path);
    snprintf(path, sizeof path, "%s/rlm", dir);
    rmdir(path);
    rmdir(dir);
}
END_TEST

Suite *make_host_suite(void)
{
    Suite *s = suite_create("host");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, embedded_files_are_indexed_by_path);
    tcase_add_test(tc, modules_load_from_the_binary_with_real_chunk_names);
    tcase_add_test(tc, the_working_directory_is_never_searched);
    tcase_add_test(tc, pcall_appends_a_traceback);
    tcase_add_test(tc, lua_path_override_wins_over_embedded);
    suite_add_tcase(s, tc);
    return s;
}
