/* lstdio.c — rlm.core.stdio: reading lines from a descriptor (stdin) on the event loop.
 *   reader(fd) -> reader
 *   reader:id()    op id, ready when new bytes or the end arrive
 *   reader:line()  the next complete line without its newline, or nil
 *   reader:eof()   true once the descriptor has ended and every line was taken
 *   reader:close() stops watching (also __gc and __close); the descriptor stays open
 * The descriptor is left blocking (stdin may be shared with a terminal or a parent): one read()
 * per POLLIN never blocks on a pipe, a socket or a terminal. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "buf.h"
#include "host.h"
#include "loop.h"

#define READER "rlm.stdio.reader"

struct reader {
    loop *lp;
    int fd, watching, ended;
    lua_Integer id;
    struct buf in;
};

static struct reader *check_reader(lua_State *L, int arg)
{
    return luaL_checkudata(L, arg, READER);
}

static void reader_stop(struct reader *r)
{
    if (r->watching) {
        loop_unwatch(r->lp, r->fd);
        r->watching = 0;
    }
}

static void on_input(void *ud, int fd, short revents)
{
    struct reader *r = ud;
    char chunk[65536];
    ssize_t n;
    do
        n = read(fd, chunk, sizeof chunk);
    while (n < 0 && errno == EINTR);
    if (n > 0 && buf_add(&r->in, chunk, (size_t)n) == 0) {
        loop_ready(r->lp, r->id);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    r->ended = 1;            /* end of input, a read error, or out of memory */
    reader_stop(r);
    loop_ready(r->lp, r->id);
}

static int l_reader(lua_State *L)
{
    int fd = (int)luaL_checkinteger(L, 1);
    loop *lp = loop_get(L);
    struct reader *r = lua_newuserdatauv(L, sizeof *r, 0);
    memset(r, 0, sizeof *r);
    r->lp = lp;
    r->fd = fd;
    r->id = loop_new_id(lp);
    luaL_setmetatable(L, READER);
    if (loop_watch(lp, fd, POLLIN, on_input, r) == 0) {
        r->watching = 1;
        return 1;
    }
    if (errno != EPERM)
        return luaL_error(L, "cannot watch descriptor %d: %s", fd, strerror(errno));
    /* A regular file or /dev/null (`rlm mcp < requests.jsonl`), which epoll refuses: reading
     * one never blocks, so it is taken whole now. */
    while (!r->ended)
        on_input(r, fd, POLLIN);
    return 1;
}

static int rd_id(lua_State *L)
{
    lua_pushinteger(L, check_reader(L, 1)->id);
    return 1;
}

static int rd_line(lua_State *L)
{
    struct reader *r = check_reader(L, 1);
    char *nl = r->in.len ? memchr(r->in.data, '\n', r->in.len) : NULL;
    if (nl == NULL) {
        if (!r->ended || r->in.len == 0)
            return 0;
        lua_pushlstring(L, r->in.data, r->in.len);   /* a last line without its newline */
        buf_clear(&r->in);
        return 1;
    }
    size_t n = (size_t)(nl - r->in.data);
    lua_pushlstring(L, r->in.data, n > 0 && nl[-1] == '\r' ? n - 1 : n);
    buf_consume(&r->in, n + 1);
    return 1;
}

static int rd_eof(lua_State *L)
{
    struct reader *r = check_reader(L, 1);
    lua_pushboolean(L, r->ended && r->in.len == 0);
    return 1;
}

static int reader_gc(lua_State *L)
{
    struct reader *r = check_reader(L, 1);
    reader_stop(r);
    buf_free(&r->in);
    return 0;
}

static const luaL_Reg stdio_funcs[] = {{"reader", l_reader}, {NULL, NULL}};

static const luaL_Reg reader_methods[] = {
    {"id", rd_id}, {"line", rd_line}, {"eof", rd_eof}, {"close", reader_gc}, {NULL, NULL}};

static const luaL_Reg reader_metamethods[] = {
    {"__gc", reader_gc}, {"__close", reader_gc}, {"__index", NULL}, {NULL, NULL}};

int luaopen_rlm_core_stdio(lua_State *L)
{
    loop_get(L);
    host_newclass(L, READER, reader_metamethods, reader_methods);
    luaL_newlib(L, stdio_funcs);
    return 1;
}
