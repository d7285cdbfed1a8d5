/* check_host.c — host.c: state creation, embedded modules, protected calls. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>

#include "check_host.h"
#include "adopt.h"
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

/* A buffer from adopt_alloc becomes the string itself (no second copy); a short one is copied
 * and freed; both read back exactly, and Lua frees the adopted one. */
START_TEST(a_big_buffer_becomes_a_string_in_place)
{
    size_t n = 1 << 20;
    char *data = adopt_alloc(n);
    ck_assert_ptr_nonnull(data);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)(i * 7 + 1);
    adopt_push(L, data, n);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    ck_assert_uint_eq(len, n);
    ck_assert_ptr_eq(s, data);
    for (size_t i = 0; i < n; i += 4093)
        ck_assert_int_eq(s[i], (char)(i * 7 + 1));
    ck_assert_int_eq(s[n], '\0');
    char *small = adopt_alloc(10);
    memcpy(small, "0123456789", 10);
    adopt_push(L, small, 10);
    ck_assert_str_eq(lua_tostring(L, -1), "0123456789");
    lua_setglobal(L, "small");
    lua_setglobal(L, "big");
    run_lua(L, "assert(#big == 1 << 20 and big:byte(1) == 1 and big:byte(2) == 8 and small == '0123456789')\n"
               "big = nil collectgarbage()");
}
END_TEST

/* The paths a fresh state gets with LUA_PATH_5_4 and LUA_CPATH_5_4 set to path and cpath (NULL:
 * unset), checked by the Lua expression check. */
static void check_paths(const char *path, const char *cpath, const char *check)
{
    const char *vars[] = {"LUA_PATH", "LUA_CPATH", "LUA_PATH_5_4", "LUA_CPATH_5_4"};
    char *saved[4];
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(vars[i]);
    }
    if (path)
        setenv("LUA_PATH_5_4", path, 1);
    if (cpath)
        setenv("LUA_CPATH_5_4", cpath, 1);
    lua_State *L2 = host_newstate();
    for (int i = 0; i < 4; i++) {
        if (saved[i])
            setenv(vars[i], saved[i], 1);
        else
            unsetenv(vars[i]);
        free(saved[i]);
    }
    ck_assert_ptr_nonnull(L2);
    run_lua(L2, check);
    lua_close(L2);
}

START_TEST(the_working_directory_is_searched_only_when_asked)
{
    /* lua5.4's defaults, less "./?.lua", "./?/init.lua" and "./?.so" */
    check_paths(NULL, NULL,
                "assert(package.path:find('/usr/share/lua/5.4/?.lua', 1, true), package.path)\n"
                "assert(package.cpath:find('/lua/5.4/?.so', 1, true), package.cpath)\n"
                "assert(not (';' .. package.path):find(';./', 1, true), package.path)\n"
                "assert(not (';' .. package.cpath):find(';./', 1, true), package.cpath)");
    /* ";;" is the default, in place */
    check_paths("/a/?.lua;;/b/?.lua", ";;/c/?.so",
                "assert(package.path:match('^/a/%?%.lua;/usr/.*;/b/%?%.lua$'), package.path)\n"
                "assert(not package.path:find(';./', 1, true), package.path)\n"
                "assert(package.cpath:match('^/usr/.*;/c/%?%.so$'), package.cpath)");
    /* the user's own "./?.lua" is theirs to have */
    check_paths("./?.lua", "./?.so",
                "assert(package.path == './?.lua' and package.cpath == './?.so')");
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

START_TEST(messages_are_redacted_of_real_secrets_only)
{
    host_push_redacted(L, "key sk-abcdefgh, again sk-abcdefgh!", "sk-abcdefgh");
    ck_assert_str_eq(lua_tostring(L, -1), "key [redacted], again [redacted]!");
    /* Too short to be a credential: scrubbing it would garble ordinary words. */
    host_push_redacted(L, "no key: none", "none");
    ck_assert_str_eq(lua_tostring(L, -1), "no key: none");
    host_push_redacted(L, "nothing to hide", NULL);
    ck_assert_str_eq(lua_tostring(L, -1), "nothing to hide");
    lua_pop(L, 3);
    host_free_secret(NULL);
    host_free_secret(strdup("sk-abcdefgh"));
}
END_TEST

static int thing_answer(lua_State *L)
{
    lua_pushinteger(L, 42);
    return 1;
}

static int thing_tostring(lua_State *L)
{
    lua_pushliteral(L, "a thing");
    return 1;
}

START_TEST(classes_get_their_methods_and_metamethods)
{
    static const luaL_Reg meta[] = {{"__tostring", thing_tostring}, {"__index", NULL}, {NULL, NULL}};
    static const luaL_Reg methods[] = {{"answer", thing_answer}, {NULL, NULL}};
    int top = lua_gettop(L);
    host_newclass(L, "check.thing", meta, methods);
    ck_assert_int_eq(lua_gettop(L), top);
    lua_newuserdatauv(L, 1, 0);
    luaL_setmetatable(L, "check.thing");
    lua_setglobal(L, "thing");
    run_lua(L, "assert(thing:answer() == 42)\n"
               "assert(tostring(thing) == 'a thing')\n"
               "assert(getmetatable(thing).__index.answer, 'methods are the __index table')");
}
END_TEST

Suite *make_host_suite(void)
{
    Suite *s = suite_create("host");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, embedded_files_are_indexed_by_path);
    tcase_add_test(tc, modules_load_from_the_binary_with_real_chunk_names);
    tcase_add_test(tc, the_working_directory_is_searched_only_when_asked);
    tcase_add_test(tc, a_big_buffer_becomes_a_string_in_place);
    tcase_add_test(tc, pcall_appends_a_traceback);
    tcase_add_test(tc, lua_path_override_wins_over_embedded);
    tcase_add_test(tc, messages_are_redacted_of_real_secrets_only);
    tcase_add_test(tc, classes_get_their_methods_and_metamethods);
    suite_add_tcase(s, tc);
    return s;
}
