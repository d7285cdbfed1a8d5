/* check_hostmod.c — lhost.c: rlm.core.host, the binary's version and its embedded files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>

#include "check_host.h"
#include "host.h"

static lua_State *L;
static char dir[32];

static void setup(void)
{
    L = host_newstate();
    run_lua(L, "host = require 'rlm.core.host'");
    dir[0] = '\0';
}

static void teardown(void)
{
    unsetenv("RLM_LUA_PATH");
    if (dir[0]) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
    lua_close(L);
}

START_TEST(the_version_is_the_binary_s)
{
    run_lua(L, "assert(host.version == '" RLM_VERSION "', host.version)");
}
END_TEST

START_TEST(a_resource_is_the_embedded_bytes)
{
    const struct embedded_file *f = host_embedded("lua/rlm/driver.py");
    ck_assert_ptr_nonnull(f);
    run_lua(L, "data = host.resource('lua/rlm/driver.py')");
    lua_getglobal(L, "data");
    size_t len;
    const char *data = lua_tolstring(L, -1, &len);
    ck_assert_ptr_nonnull(data);
    ck_assert_uint_eq(len, f->len);
    ck_assert_int_eq(memcmp(data, f->data, len), 0);
    lua_pop(L, 1);
    run_lua(L, "assert(host.resource('lua/rlm/no-such-file.py') == nil)\n"
               "assert(select('#', host.resource('nope')) == 0)\n"
               "assert(not pcall(host.resource))");
}
END_TEST

START_TEST(resources_lists_a_prefix_sorted)
{
    size_t want = 0;
    for (size_t i = 0; i < embedded_count; i++)
        want += strncmp(embedded_files[i].path, "skills/", 7) == 0;
    ck_assert_uint_gt(want, 0);
    lua_pushinteger(L, (lua_Integer)want);
    lua_setglobal(L, "want");
    run_lua(L, "local list = host.resources('skills/')\n"
               "assert(#list == want, #list .. ' of ' .. want)\n"
               "for i, p in ipairs(list) do\n"
               "  assert(p:sub(1, 7) == 'skills/', p)\n"
               "  assert(i == 1 or list[i - 1] < p, 'not sorted at ' .. p)\n"
               "  assert(host.resource(p), p)\n"
               "end\n"
               "assert(#host.resources('no/such/prefix') == 0)\n"
               "assert(#host.resources() == #host.resources(''))");
    lua_pushinteger(L, (lua_Integer)embedded_count);
    lua_setglobal(L, "all");
    run_lua(L, "assert(#host.resources() == all)");
}
END_TEST

START_TEST(a_digest_is_the_hash_of_the_resource)
{
    /* Made at build time for each embedded file: it must be what sys.hash makes of the bytes
     * resource returns (bytecode for a lua/ module), or a cache keyed on it goes stale. */
    run_lua(L, "local sys = require 'rlm.core.sys'\n"
               "local n = 0\n"
               "for _, p in ipairs(host.resources()) do\n"
               "  assert(host.digest(p) == sys.hash(host.resource(p)), p)\n"
               "  n = n + 1\n"
               "end\n"
               "assert(n > 10, n)\n"
               "assert(host.digest('lua/rlm/driver.py') ~= host.digest('lua/rlm/cli.lua'))\n"
               "assert(select('#', host.digest('lua/rlm/no-such-file.py')) == 0)\n"
               "assert(not pcall(host.digest))");
}
END_TEST

static void write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

START_TEST(rlm_lua_path_overrides_lua_resources_only)
{
    strcpy(dir, "/tmp/rlm-hostmod-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[96];
    snprintf(path, sizeof path, "%s/rlm", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    /* Longer than one Lua buffer, so the reader's loop runs more than once. */
    static char big[20000];
    memset(big, 'z', sizeof big);
    snprintf(path, sizeof path, "%s/rlm/driver.py", dir);
    write_file(path, big, sizeof big);
    snprintf(path, sizeof path, "%s/skills", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/skills/x.md", dir);
    write_file(path, "not a lua/ resource", 19);
    char env[96];
    snprintf(env, sizeof env, "::/nonexistent:%s", dir);   /* empty and missing entries pass */
    setenv("RLM_LUA_PATH", env, 1);
    run_lua(L, "local d = host.resource('lua/rlm/driver.py')\n"
               "assert(#d == 20000 and not d:find('[^z]'), #d)\n"
               "assert(host.digest('lua/rlm/driver.py') == require('rlm.core.sys').hash(d))");
    lua_pushstring(L, dir);
    lua_setglobal(L, "dir");
    run_lua(L, "assert(host.resource('lua/skills/x.md') == 'not a lua/ resource')\n"
               "assert(host.resource('skills/x.md') == nil, 'only lua/ paths are overridden')\n"
               "assert(host.resource(dir .. '/skills/x.md') == nil, 'absolute paths are not read')\n"
               "assert(host.resource('lua/rlm/cli.lua'):find('function'), 'the rest stay embedded')");
}
END_TEST

Suite *make_hostmod_suite(void)
{
    Suite *s = suite_create("hostmod");
    TCase *tc = tcase_create("resources");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, the_version_is_the_binary_s);
    tcase_add_test(tc, a_resource_is_the_embedded_bytes);
    tcase_add_test(tc, resources_lists_a_prefix_sorted);
    tcase_add_test(tc, a_digest_is_the_hash_of_the_resource);
    tcase_add_test(tc, rlm_lua_path_overrides_lua_resources_only);
    suite_add_tcase(s, tc);
    return s;
}
