/* check_main.c — runs every suite (CK_RUN_SUITE=name to pick one, CK_FORK=no for valgrind). */
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>

#include "check_host.h"
#include "host.h"
#include "netlib.h"

void run_lua(lua_State *L, const char *code)
{
    int status = luaL_loadstring(L, code);
    if (status == LUA_OK)
        status = host_pcall(L, 0, 0);
    ck_assert_msg(status == LUA_OK, "%s", lua_tostring(L, -1));
}

int main(void)
{
    char err[512];
    if (netlib_load_all(err, sizeof err)) {   /* the host calls libcurl through netlib */
        fprintf(stderr, "check_all: %s\n", err);
        return EXIT_FAILURE;
    }
    /* Check's default of 4 s a test measures the machine, not the code: a loaded machine (make
     * stress-test) or ASan runs a test many times slower. A test that needs a bound sets it. */
    setenv("CK_DEFAULT_TIMEOUT", "300", 0);
    SRunner *sr = srunner_create(NULL);
#define SUITE(name) srunner_add_suite(sr, make_##name##_suite());
#include "suites.h"
#undef SUITE
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
