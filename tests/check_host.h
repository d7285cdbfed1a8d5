/* check_host.h — the Check suites, one per host file, and helpers they share. */
#ifndef CHECK_HOST_H
#define CHECK_HOST_H
#include <check.h>
#include <lua.h>

#define SUITE(name) Suite *make_##name##_suite(void);
#include "suites.h"
#undef SUITE

/* Runs a chunk of Lua in L through host_pcall; fails the test with the error message. */
void run_lua(lua_State *L, const char *code);

#endif
