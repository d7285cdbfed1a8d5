/* lsys.c — rlm.core.sys: what Lua lacks for running sandboxes and tools (processes are
 * rlm.core.proc's, host/lproc.c).
 *   now() time() cpu_time() getpid() getuid() getenv(n) setenv(n, v|nil) environ() isatty(fd) which(cmd)
 *   read_file(p) write_file(p, data[, mode]) (atomic) mkdir_p(p) list_dir(p) stat(p)
 *   remove(p[, recursive]) mkdtemp(prefix) realpath(p) chmod(p, mode)
 *   hash(s) -> 16 hex digits (64-bit FNV-1a: cache keys, manifests; not for security)
 *   lock(p[, create]) -> lock | nil, msg, errno: an exclusive flock on file p (made, mode 0600,
 *                        when create), held until lock:release(), __close or __gc, or until the
 *                        process ends in any way; errno EWOULDBLOCK: a live process holds it
 *   pidfd(pid) -> h | nil, msg: follows a process that is not our child; h:ended([timeout])
 *                        says whether it has ended, waiting (blocking) up to timeout seconds
 * Failures caused by the environment return nil, message; misuse raises. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include "adopt.h"
#include "fail.h"
#include "fdio.h"
#include "fnv.h"
#include "host.h"
#include "loop.h"
#include "tree.h"

extern char **environ;

static int l_now(lua_State *L)
{
    lua_pushnumber(L, loop_now_ms() / 1e3);
    return 1;
}

static int l_time(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    return 1;
}

/* CPU seconds this process has used, all threads: what a benchmark charges to the host, apart
 * from the model servers and sandboxes it waits on. */
static int l_cpu_time(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    return 1;
}

static int l_getpid(lua_State *L)
{
    lua_pushinteger(L, getpid());
    return 1;
}

static int l_getuid(lua_State *L)
{
    lua_pushinteger(L, getuid());
    return 1;
}

static int l_getenv(lua_State *L)
{
    lua_pushstring(L, getenv(luaL_checkstring(L, 1)));
    return 1;
}

static int l_setenv(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    int r = lua_isnoneornil(L, 2) ? unsetenv(name) : setenv(name, luaL_checkstring(L, 2), 1);
    if (r != 0)
        return fail_errno(L, name);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_environ(lua_State *L)
{
    lua_newtable(L);
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (eq == NULL)
            continue;
        lua_pushlstring(L, *e, (size_t)(eq - *e));
        lua_pushstring(L, eq + 1);
        lua_rawset(L, -3);
    }
    return 1;
}

static int l_isatty(lua_State *L)
{
    lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
    return 1;
}

static int l_which(lua_State *L)
{
    const char *cmd = luaL_checkstring(L, 1);
    if (strchr(cmd, '/')) {
        lua_pushstring(L, access(cmd, X_OK) == 0 ? cmd : NULL);
        return 1;
    }
    const char *path = getenv("PATH");
    if (path == NULL)
        path = "/usr/local/bin:/usr/bin:/bin";
    char full[PATH_MAX];
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        if (len && snprintf(full, sizeof full, "%.*s/%s", (int)len, path, cmd) < (int)sizeof full &&
            access(full, X_OK) == 0) {
            lua_pushstring(L, full);
            return 1;
        }
        path += len + (colon != NULL);
    }
    lua_pushnil(L);
    return 1;
}

/* read() that retries on EINTR. */
static ssize_t read_retry(int fd, char *p, size_t n)
{
    ssize_t r;
    do
        r = read(fd, p, n);
    while (r < 0 && errno == EINTR);
    return r;
}

/* Reads fd to its end onto b, which holds what was read so far; 0, or -1 with errno. */
static int read_rest(int fd, luaL_Buffer *b)
{
    for (;;) {
        size_t room = 1 << 16;
        char *p = luaL_prepbuffsize(b, room);
        ssize_t n = read_retry(fd, p, room);
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        luaL_addsize(b, (size_t)n);
    }
}

/* Pushes the whole of fd as a string; 0, or -1 with errno. A regular file is read at its size
 * into one buffer that becomes the string (adopt.h): a 100 MB context file costs the host
 * 100 MB, not a growing buffer's copies. What has no size (a pipe, /proc), or a file that grew
 * while it was read, is read on in 64 KiB blocks. */
static int push_file(lua_State *L, int fd)
{
    struct stat st;
    size_t size = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? (size_t)st.st_size : 0;
    char *data = adopt_alloc(size + 1);        /* one byte more tells a grown file */
    if (data == NULL) {
        errno = ENOMEM;
        return -1;
    }
    size_t got = 0;
    while (got < size + 1) {
        ssize_t n = read_retry(fd, data + got, size + 1 - got);
        if (n < 0) {
            adopt_free(data);
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    if (got <= size) {
        adopt_push(L, data, got);
        return 0;
    }
    luaL_Buffer b;
    luaL_buffinitsize(L, &b, 2 * got);
    luaL_addlstring(&b, data, got);
    adopt_free(data);
    if (read_rest(fd, &b) != 0) {
        int e = errno;
        lua_pop(L, 1);                          /* the buffer's box */
        errno = e;
        return -1;
    }
    luaL_pushresult(&b);
    return 0;
}

static int l_read_file(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail_errno(L, path);
    int r = push_file(L, fd);
    int e = errno;
    close(fd);
    if (r != 0) {
        errno = e;
        return fail_errno(L, path);
    }
    return 1;
}

/* Writes to a temporary file beside the target, syncs it, then renames it into place, so a
 * reader sees the old content or the new, never half of it. */
static int l_write_file(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    size_t len;
    const char *data = luaL_checklstring(L, 2, &len);
    mode_t mode = (mode_t)luaL_optinteger(L, 3, 0644);
    const char *tmp = lua_pushfstring(L, "%s.tmp.XXXXXX", path);
    char *tmpl = strdup(tmp);
    if (tmpl == NULL)
        return luaL_error(L, "out of memory");
    int fd = mkostemp(tmpl, O_CLOEXEC);
    if (fd < 0) {
        free(tmpl);
        return fail_errno(L, path);
    }
    int ok = write_all(fd, data, len) == 0 && fchmod(fd, mode) == 0 && fsync(fd) == 0;
    int e = errno;
    ok = (close(fd) == 0) && ok;
    if (ok && rename(tmpl, path) != 0) {
        e = errno;
        ok = 0;
    }
    if (!ok)
        unlink(tmpl);
    free(tmpl);
    if (!ok) {
        errno = e;
        return fail_errno(L, path);
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int mkdir_p(char *path, mode_t mode)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int r = mkdir(path, mode);
        *p = '/';
        if (r != 0 && errno != EEXIST)
            return -1;
    }
    return (mkdir(path, mode) != 0 && errno != EEXIST) ? -1 : 0;
}

static int l_mkdir_p(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    mode_t mode = (mode_t)luaL_optinteger(L, 2, 0755);
    char *copy = strdup(path);
    if (copy == NULL)
        return luaL_error(L, "out of memory");
    int r = mkdir_p(copy, mode);
    free(copy);
    if (r != 0)
        return fail_errno(L, path);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_list_dir(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    DIR *d = opendir(path);
    if (d == NULL)
        return fail_errno(L, path);
    lua_newtable(L);
    lua_Integer i = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        lua_pushstring(L, ent->d_name);
        lua_rawseti(L, -2, ++i);
    }
    closedir(d);
    return 1;
}

static const char *file_type(mode_t m)
{
    return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "link" : "other";
}

static int l_stat(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    struct stat st;
    if (lstat(path, &st) != 0)
        return fail_errno(L, path);
    lua_createtable(L, 0, 5);
    lua_pushstring(L, file_type(st.st_mode));
    lua_setfield(L, -2, "type");
    lua_pushinteger(L, (lua_Integer)st.st_size);
    lua_setfield(L, -2, "size");
    lua_pushnumber(L, (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9);
    lua_setfield(L, -2, "mtime");
    lua_pushinteger(L, st.st_mode & 07777);
    lua_setfield(L, -2, "mode");
    lua_pushinteger(L, st.st_uid);
    lua_setfield(L, -2, "uid");
    return 1;
}

static int l_remove(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    int r = lua_toboolean(L, 2) ? tree_remove_at(AT_FDCWD, path) : remove(path);
    if (r != 0)
        return fail_errno(L, path);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_mkdtemp(lua_State *L)
{
    const char *prefix = luaL_optstring(L, 1, "rlm");
    const char *base = getenv("TMPDIR");
    char path[PATH_MAX];
    int from_env = base && *base;
    snprintf(path, sizeof path, "%s/%s.XXXXXX", from_env ? base : "/tmp", prefix);
    if (mkdtemp(path) == NULL) {
        if (!from_env)
            return fail_errno(L, path);
        /* the folder the environment names is what the user has to fix: say so */
        int e = errno;
        const char *what = lua_pushfstring(L, "TMPDIR is %s, where no folder can be made", base);
        errno = e;
        return fail_errno(L, what);
    }
    lua_pushstring(L, path);
    return 1;
}

/* A lock held as long as the process holds it: flock(2) on an open file, which the kernel
 * lets go when the process ends however it ends (SIGKILL too). So a lock that can be taken
 * belongs to nobody alive. */
#define LOCK "rlm.sys.lock"

/* Closes the descriptor a userdata of class holds (a lock, a pidfd); closing twice is no misuse. */
static int close_held_fd(lua_State *L, const char *class)
{
    int *fd = luaL_checkudata(L, 1, class);
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
    return 0;
}

static int lock_release(lua_State *L)
{
    return close_held_fd(L, LOCK);
}

static int l_lock(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    int create = lua_toboolean(L, 2);
    int *slot = lua_newuserdatauv(L, sizeof *slot, 0);
    *slot = -1;
    luaL_setmetatable(L, LOCK);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
    if (fd < 0)
        return fail_errno(L, path);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return fail_errno(L, path);
    }
    *slot = fd;
    return 1;
}

/* A process that is not rlm's child, followed by its pidfd (the pid can then not be taken by
 * another): its end can be waited for without reaping it. Used for a sandbox's innermost
 * processes, whose end means none of the code is left. */
#define PIDFD "rlm.sys.pidfd"

static int pidfd_close(lua_State *L)
{
    return close_held_fd(L, PIDFD);
}

static int l_pidfd(lua_State *L)
{
    lua_Integer pid = luaL_checkinteger(L, 1);
    luaL_argcheck(L, pid > 0 && pid <= INT32_MAX, 1, "not a pid");
    int *slot = lua_newuserdatauv(L, sizeof *slot, 0);
    *slot = -1;
    luaL_setmetatable(L, PIDFD);
    long fd = syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (fd < 0)
        return fail_errno(L, "pidfd_open");
    *slot = (int)fd;              /* pidfd_open sets close-on-exec itself */
    return 1;
}

/* h:ended([timeout]) -> whether the process has ended, waiting up to timeout seconds (blocking:
 * for teardown paths that must not yield). */
static int pidfd_ended(lua_State *L)
{
    int *fd = luaL_checkudata(L, 1, PIDFD);
    double timeout = luaL_optnumber(L, 2, 0);
    if (*fd < 0)
        return luaL_error(L, "pidfd: closed");
    double until = loop_now_ms() + timeout * 1e3;
    int r;
    do {
        struct pollfd pfd = {*fd, POLLIN, 0};
        double left = until - loop_now_ms();
        r = poll(&pfd, 1, left > 0 ? (int)(left + 0.999) : 0);
    } while (r < 0 && errno == EINTR);
    lua_pushboolean(L, r > 0);
    return 1;
}

static int l_chmod(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    if (chmod(path, (mode_t)luaL_checkinteger(L, 2)) != 0)
        return fail_errno(L, path);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_realpath(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    char out[PATH_MAX];
    if (realpath(path, out) == NULL)
        return fail_errno(L, path);
    lua_pushstring(L, out);
    return 1;
}

static int l_hash(lua_State *L)
{
    size_t len;
    const char *p = luaL_checklstring(L, 1, &len);
    host_push_hash(L, fnv1a64(p, len));
    return 1;
}

static const luaL_Reg sys_funcs[] = {
    {"now", l_now},           {"time", l_time},       {"getpid", l_getpid},
    {"getuid", l_getuid},     {"cpu_time", l_cpu_time},
    {"getenv", l_getenv},     {"setenv", l_setenv},   {"environ", l_environ},
    {"isatty", l_isatty},     {"which", l_which},     {"read_file", l_read_file},
    {"write_file", l_write_file}, {"mkdir_p", l_mkdir_p}, {"list_dir", l_list_dir},
    {"stat", l_stat},         {"remove", l_remove},   {"mkdtemp", l_mkdtemp},
    {"realpath", l_realpath}, {"chmod", l_chmod},     {"hash", l_hash},
    {"lock", l_lock},         {"pidfd", l_pidfd},     {NULL, NULL}};

static const luaL_Reg lock_methods[] = {{"release", lock_release}, {NULL, NULL}};

static const luaL_Reg lock_metamethods[] = {
    {"__gc", lock_release}, {"__close", lock_release}, {"__index", NULL}, {NULL, NULL}};

static const luaL_Reg pidfd_methods[] = {{"ended", pidfd_ended}, {"close", pidfd_close},
                                         {NULL, NULL}};

static const luaL_Reg pidfd_metamethods[] = {
    {"__gc", pidfd_close}, {"__close", pidfd_close}, {"__index", NULL}, {NULL, NULL}};

int luaopen_rlm_core_sys(lua_State *L)
{
    loop_get(L);
    host_newclass(L, LOCK, lock_metamethods, lock_methods);
    host_newclass(L, PIDFD, pidfd_metamethods, pidfd_methods);
    luaL_newlib(L, sys_funcs);
    return 1;
}
