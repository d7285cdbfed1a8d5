/* main.c — `rlm`: creates the state and hands argv to the Lua CLI (lua/rlm/cli.lua).
 * Like lua.c, everything that can fail runs inside a protected call; main only reports. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "host.h"
#include "init.h"

/* Calls require("rlm.cli").main(argv) and leaves its exit status on the stack. */
static int pmain(lua_State *L)
{
    int argc = (int)lua_tointeger(L, 1);
    char **argv = (char **)lua_touserdata(L, 2);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "rlm.cli");
    lua_call(L, 1, 1);                              // [cli]
    lua_getfield(L, -1, "main");                    // [cli, main]
    lua_createtable(L, argc, 1);                    // [cli, main, args]
    lua_pushstring(L, argv[0]);
    lua_rawseti(L, -2, 0);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    lua_call(L, 1, 1);                              // [cli, status]
    return 1;
}

/* A descriptor 0, 1 or 2 that the caller left closed is /dev/null: otherwise the first file
 * rlm opens (the event loop's own pipe) would take its number and be read as stdin. */
static void open_standard_fds(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF && open("/dev/null", O_RDWR) != fd)
            _exit(EXIT_FAILURE);
}

int main(int argc, char **argv)
{
    open_standard_fds();
    init_if_pid1();
    lua_State *L = host_newstate();
    if (L == NULL) {
        fprintf(stderr, "rlm: cannot create the Lua state (out of memory?)\n");
        return EXIT_FAILURE;
    }
    host_install_signals(L);
    lua_pushcfunction(L, pmain);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    int status = host_pcall(L, 2, 1);
    int code = EXIT_FAILURE;
    if (status == LUA_OK)
        code = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : EXIT_SUCCESS;
    else
        host_report(L, status);
    lua_close(L);                                   /* runs __gc: children killed, handles freed */
    if (host_signal)
        code = 128 + (host_signal < 0 ? -host_signal : host_signal);
    return code;
}
