/* lproc.c — rlm.core.proc: processes. The vfork child itself is in spawn.c.
 *   spawn{argv=, env=, cwd=, stdin=, stdout=, stderr=,          -> process (pipes on the loop)
 *         pass=, uid=, gid=, rlimits=, max_line=, max_stderr=}
 *   kill(pid, sig)
 * Failures caused by the environment return nil, message; misuse raises.
 *
 * A spawned process gets descriptors 0-2 and the `pass` ones, nothing else: whatever rlm has
 * open (connections to model servers, descriptors rlm itself inherited) stays out, which
 * matters because the process may be a sandbox.
 *   pass = {[fd] = "bytes"}   fd (>= 3) in the child reads those bytes (a sealed memfd)
 *          {[fd] = {file = path}}  ... or the regular file at path, opened read-only (a failed
 *                                  open fails the spawn; with optional = true the child
 *                                  reads nothing instead)
 *          {[fd] = {fd = n}}       ... or a copy of rlm's own descriptor n (a folder opened
 *                                  without following links, for bwrap's --bind-fd)
 *   uid, gid            the child drops to them (and to no supplementary groups) before exec;
 *                       a uid needs a gid
 *   rlimits = {as=, data=, nproc=, nofile=, fsize=, core=, stack=}   soft and hard, in the child
 *   max_line = N        stdout is read only while no complete line waits (the child blocks
 *                       until Lua takes it), and a line past N bytes stops the reading:
 *                       p:overflowed() is then true. Without it stdout is read unbounded.
 *   max_stderr = N      only the last N bytes of stderr are kept
 *   stderr_rate = N     stderr is read at most N bytes a second: a child that writes more
 *                       blocks (what its pipe holds is taken by p:read("stderr") at once)
 *   pipe_size = N       asks for stdin and stdout pipes of N bytes (fewer wake-ups for big
 *                       transfers; the kernel may give less)
 * p:write(s, ...) holds the strings by reference until written, never copying them; p:expect(n) then
 * p:payload() take n raw bytes of stdout as one string, read in place (adopt.h).
 * p:close() (also __close and __gc) kills the process and its group if it still runs and closes
 * its pipes, without waiting for its end (the killed child is reaped later). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lauxlib.h>

#include "adopt.h"
#include "buf.h"
#include "fail.h"
#include "host.h"
#include "loop.h"
#include "spawn.h"

#define PROCESS "rlm.sys.process"

static const struct {
    const char *name;
    int signo;
} signal_names[] = {{"TERM", SIGTERM}, {"KILL", SIGKILL}, {"INT", SIGINT},  {"HUP", SIGHUP},
                    {"QUIT", SIGQUIT}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}, {NULL, 0}};

static int check_signal(lua_State *L, int arg)
{
    if (lua_isnoneornil(L, arg))
        return SIGTERM;
    if (lua_type(L, arg) == LUA_TNUMBER)
        return (int)luaL_checkinteger(L, arg);
    const char *name = luaL_checkstring(L, arg);
    if (strncmp(name, "SIG", 3) == 0)
        name += 3;
    for (int i = 0; signal_names[i].name; i++)
        if (strcmp(signal_names[i].name, name) == 0)
            return signal_names[i].signo;
    return luaL_argerror(L, arg, "unknown signal (use TERM, KILL, INT, HUP, STOP, CONT or a number)");
}

static int l_kill(lua_State *L)
{
    pid_t pid = (pid_t)luaL_checkinteger(L, 1);
    if (kill(pid, check_signal(L, 2)) != 0)
        return fail_errno(L, "kill");
    lua_pushboolean(L, 1);
    return 1;
}

/* ---------- processes ---------- */

enum { OUT, ERR };

/* A string written to stdin, held by reference (the process's uservalue table, under seq)
 * instead of copied: a 100 MB variable is never duplicated on its way to the child. */
struct piece {
    const char *data;
    size_t len;
    lua_Integer seq;
};

struct process {
    loop *lp;
    pid_t pid;
    int pidfd, in_fd, fds[2];
    struct piece *pieces;        /* stdin's queue: pieces[head..count) wait, from head_off */
    size_t head, count, cap, head_off, pending;
    lua_Integer next_seq, pinned_from;   /* seqs still pinned: [pinned_from, next_seq) */
    char *payload;               /* p:expect(): stdout bytes go here, not to out[OUT] */
    size_t payload_len, payload_got;
    struct buf out[2];
    size_t out_start;            /* stdout bytes before this offset were taken by p:line() */
    size_t out_scanned;          /* ... and before this one hold no newline: never searched twice */
    size_t max_line, max_stderr; /* 0: unbounded */
    int paused, overflowed;      /* stdout not read: a line waits, or one was too long */
    int unwatched;               /* paused, and stdout taken off the loop (see pause_stdout) */
    int eof[2], exited, wstatus;
    lua_Integer id;
    lua_Integer err_timer;       /* stderr rests until it fires (see rest_stderr); 0: reading */
    double err_window;           /* when stderr's current window began (loop_now_ms) */
    size_t err_taken;            /* stderr bytes read in it */
    size_t stderr_rate;          /* bytes a second stderr is read at most; 0: unbounded */
};

static struct process *check_process(lua_State *L, int arg)
{
    return luaL_checkudata(L, arg, PROCESS);
}

static void close_fd(struct process *p, int *fd)
{
    if (*fd >= 0) {
        loop_unwatch(p->lp, *fd);
        close(*fd);
        *fd = -1;
    }
}

static void on_output(void *ud, int fd, short revents);

/* Stops reading stdout; the child blocks once the pipe is full. The descriptor stays on the
 * loop until it has something to read while paused (on_output takes it off then): a driver
 * that answers one line per request never sends more meanwhile, and each round trip is spared
 * two epoll_ctl calls. */
static void pause_stdout(struct process *p)
{
    p->paused = 1;
}

/* Watches stdout again if a pause took it off the loop. */
static void rewatch_stdout(struct process *p)
{
    if (p->unwatched && p->fds[OUT] >= 0)
        loop_watch(p->lp, p->fds[OUT], POLLIN, on_output, p);
    p->unwatched = 0;
}

/* The first newline in stdout's untaken bytes, or NULL. The bytes searched in vain are not
 * searched again, so a 100 MB line read in 1 MB pieces costs one pass, not a hundred. */
static char *next_newline(struct process *p)
{
    struct buf *b = &p->out[OUT];
    size_t from = p->out_scanned > p->out_start ? p->out_scanned : p->out_start;
    char *nl = from < b->len ? memchr(b->data + from, '\n', b->len - from) : NULL;
    if (nl == NULL)
        p->out_scanned = b->len;
    return nl;
}

/* Reads stdout again once Lua has taken every complete line (never after an overflow). */
static void resume_stdout(struct process *p)
{
    if (!p->paused || p->overflowed)
        return;
    if (next_newline(p))
        return;
    p->paused = 0;
    rewatch_stdout(p);
}

/* After new stdout bytes: pause when a line is complete or the line is over max_line. */
static void bound_stdout(struct process *p, const char *chunk, size_t n)
{
    if (p->max_line == 0)
        return;
    if (memchr(chunk, '\n', n)) {
        pause_stdout(p);
    } else if (p->out[OUT].len - p->out_start > p->max_line) {
        p->overflowed = 1;
        pause_stdout(p);
    }
}

/* Keeps the last max_stderr bytes of stderr. */
static void bound_stderr(struct process *p)
{
    struct buf *b = &p->out[ERR];
    if (p->max_stderr == 0 || b->len <= p->max_stderr)
        return;
    memmove(b->data, b->data + b->len - p->max_stderr, p->max_stderr);
    b->len = p->max_stderr;
    b->data[b->len] = '\0';
}

/* After a read of stream `which` that gave n <= 0 bytes: 1 to read again (EINTR); otherwise
 * 0, with the stream closed when it ended (EOF, an error) rather than ran dry for now. */
static int read_again(struct process *p, int which, ssize_t n)
{
    if (n < 0 && errno == EINTR)
        return 1;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        p->eof[which] = 1;
        close_fd(p, &p->fds[which]);
    }
    return 0;
}

/* Reads an expected payload straight into its buffer, up to 16 reads a wake-up. */
static void read_payload(struct process *p, int fd)
{
    for (int reads = 0; reads < 16 && p->payload_got < p->payload_len; reads++) {
        ssize_t n = read(fd, p->payload + p->payload_got, p->payload_len - p->payload_got);
        if (n > 0)
            p->payload_got += (size_t)n;
        else if (!read_again(p, OUT, n))
            break;
    }
    loop_ready(p->lp, p->id);
}

/* A process spawned with stderr_rate has at most that many bytes of stderr a second read, a
 * tenth in each STDERR_WINDOW_MS: a child flooding it would otherwise keep rlm reading at a
 * full core for as long as it likes. The child blocks on the full pipe instead, until the
 * window has passed; p:read("stderr") takes what the pipe holds at once. */
#define STDERR_WINDOW_MS 100.0

static void on_stderr_rested(void *ud)
{
    struct process *p = ud;
    p->err_timer = 0;
    if (p->fds[ERR] >= 0)
        loop_watch(p->lp, p->fds[ERR], POLLIN, on_output, p);
}

/* Counts n bytes of stderr; 1 when its window's share is used up and it now rests. */
static int rest_stderr(struct process *p, size_t n)
{
    if (p->stderr_rate == 0 || p->err_timer)
        return 0;
    double now = loop_now_ms();
    if (now - p->err_window >= STDERR_WINDOW_MS) {
        p->err_window = now;
        p->err_taken = 0;
    }
    p->err_taken += n;
    if (p->err_taken < p->stderr_rate * STDERR_WINDOW_MS / 1000)
        return 0;
    p->err_timer = loop_timer_add(p->lp, p->err_window + STDERR_WINDOW_MS, on_stderr_rested, p);
    if (p->err_timer)
        loop_unwatch(p->lp, p->fds[ERR]);
    return p->err_timer != 0;
}

/* Reads what stderr holds now, keeping its tail, up to 16 reads; stops early when it is to
 * rest. */
static void read_stderr(struct process *p, int fd)
{
    char chunk[65536];
    for (int reads = 0; reads < 16 && p->fds[ERR] >= 0; reads++) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n > 0) {
            buf_add(&p->out[ERR], chunk, (size_t)n);
            bound_stderr(p);
            if (rest_stderr(p, (size_t)n))
                break;
        } else if (!read_again(p, ERR, n)) {
            break;
        }
    }
}

static void on_output(void *ud, int fd, short revents)
{
    struct process *p = ud;
    int which = (fd == p->fds[OUT]) ? OUT : ERR;
    if (which == OUT && p->payload && p->payload_got < p->payload_len) {
        read_payload(p, fd);
        return;
    }
    if (which == OUT && p->paused) {
        loop_unwatch(p->lp, fd);
        p->unwatched = 1;
        return;
    }
    if (which == ERR) {
        read_stderr(p, fd);
        /* only its end wakes Lua when just the tail is kept: nothing waits for the bytes */
        if (p->max_stderr == 0 || p->eof[ERR])
            loop_ready(p->lp, p->id);
        return;
    }
    char chunk[65536];
    /* At most 1 MiB a wake-up: a child that writes as fast as we read must not keep us here,
     * and Lua gets to look at what came (and stop the child) between wake-ups. */
    for (int reads = 0; reads < 16; reads++) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n > 0) {
            buf_add(&p->out[which], chunk, (size_t)n);
            bound_stdout(p, chunk, (size_t)n);
            if (p->paused)
                break;
            continue;
        }
        if (!read_again(p, which, n))
            break;
    }
    loop_ready(p->lp, p->id);
}

static void reap(struct process *p, int options)
{
    if (p->exited || p->pid <= 0)
        return;
    int st;
    pid_t r;
    do
        r = waitpid(p->pid, &st, options);
    while (r < 0 && errno == EINTR);
    if (r == p->pid || (r < 0 && errno == ECHILD)) {
        p->exited = 1;
        p->wstatus = r == p->pid ? st : 0;
        close_fd(p, &p->pidfd);
    }
}

static void on_exit_fd(void *ud, int fd, short revents)
{
    struct process *p = ud;
    reap(p, WNOHANG);
    loop_ready(p->lp, p->id);
}

static void flush_input(struct process *p, int announce);

static void on_writable(void *ud, int fd, short revents)
{
    flush_input(ud, 1);
}

/* Takes n written bytes off the front of stdin's queue. */
static void advance_input(struct process *p, size_t n)
{
    p->pending -= n;
    while (n > 0) {
        size_t left = p->pieces[p->head].len - p->head_off;
        if (n < left) {
            p->head_off += n;
            return;
        }
        n -= left;
        p->head++;
        p->head_off = 0;
    }
}

static void drop_input(struct process *p)
{
    p->head = p->count;
    p->head_off = p->pending = 0;
}

/* Writes what the pipe takes now, many pieces a call; the rest waits for POLLOUT. Progress
 * makes the process's op ready for a waiter on stdin to drain (announce), unless p:write
 * wrote its own bytes whole into an empty queue: its caller knows, and a reader waiting on the
 * same op would only wake up for nothing (one more trip through the loop per request). */
static void flush_input(struct process *p, int announce)
{
    while (p->pending > 0 && p->in_fd >= 0) {
        struct iovec iov[16];
        int n = 0;
        for (size_t i = p->head; i < p->count && n < 16; i++, n++) {
            size_t off = i == p->head ? p->head_off : 0;
            iov[n].iov_base = (char *)p->pieces[i].data + off;
            iov[n].iov_len = p->pieces[i].len - off;
        }
        ssize_t w = writev(p->in_fd, iov, n);
        if (w > 0) {
            advance_input(p, (size_t)w);
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            loop_watch(p->lp, p->in_fd, POLLOUT, on_writable, p);
            return;
        } else {                  /* EPIPE: the child closed its stdin or died */
            drop_input(p);
            close_fd(p, &p->in_fd);
            loop_ready(p->lp, p->id);
            return;
        }
    }
    if (p->in_fd >= 0)
        loop_unwatch(p->lp, p->in_fd);
    if (announce)
        loop_ready(p->lp, p->id);
}

/* Unpins the strings written since the last call (it needs L, which loop callbacks lack). */
static void release_written(lua_State *L, struct process *p)
{
    lua_Integer upto = p->head < p->count ? p->pieces[p->head].seq : p->next_seq;
    if (p->pinned_from == upto)
        return;
    lua_getiuservalue(L, 1, 1);
    for (; p->pinned_from < upto; p->pinned_from++) {
        lua_pushnil(L);
        lua_rawseti(L, -2, p->pinned_from);
    }
    lua_pop(L, 1);
    if (p->head > 0 && p->head >= p->count / 2) {   /* reuse the front: the queue stays small */
        memmove(p->pieces, p->pieces + p->head, (p->count - p->head) * sizeof *p->pieces);
        p->count -= p->head;
        p->head = 0;
    }
}

/* Children killed by a release that had not exited by then. A release need not wait for them
 * (the exit runs on another CPU, which first has to wake): each is reaped by the
 * loop when its pidfd says it has ended, or at a later spawn or release, or by init when rlm
 * ends. Killed, they hold nothing but a pid. A free slot has pid 0. */
#define MAX_UNREAPED 64
static struct unreaped {
    pid_t pid;
    int pidfd;
    loop *lp;                     /* the loop that watches pidfd */
} unreaped[MAX_UNREAPED];

/* Reaps u's child if it has ended, and frees the slot. lp is a live loop: unwatching a pidfd
 * that another loop watched is a no-op there (the fd is ours until closed). */
static void reap_slot(struct unreaped *u, loop *lp)
{
    pid_t r;
    do
        r = waitpid(u->pid, NULL, WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return;
    if (u->pidfd >= 0) {
        loop_unwatch(lp, u->pidfd);
        close(u->pidfd);
    }
    u->pid = 0;
}

static void on_unreaped_exit(void *ud, int fd, short revents)
{
    struct unreaped *u = ud;
    reap_slot(u, u->lp);
}

static void reap_unreaped(loop *lp)
{
    for (int i = 0; i < MAX_UNREAPED; i++)
        if (unreaped[i].pid > 0)
            reap_slot(&unreaped[i], lp);
}

static void leave_unreaped(struct process *p)
{
    reap_unreaped(p->lp);
    struct unreaped *u = NULL;
    for (int i = 0; i < MAX_UNREAPED && u == NULL; i++)
        if (unreaped[i].pid == 0)
            u = &unreaped[i];
    if (u == NULL) {
        reap(p, 0);
        return;
    }
    *u = (struct unreaped){p->pid, -1, p->lp};
    if (p->pidfd >= 0 && loop_retarget(p->lp, p->pidfd, on_unreaped_exit, u) == 0) {
        u->pidfd = p->pidfd;      /* the slot's now */
        p->pidfd = -1;
    }
    p->exited = 1;                /* nothing waits for it any more; SIGKILL is its end */
    p->wstatus = SIGKILL;
}

/* Kills the process if it still runs (its end is not waited for) and frees what it held. */
static void process_release(struct process *p)
{
    if (p->pid > 0 && !p->exited) {
        kill(-p->pid, SIGKILL);       /* the whole group: bwrap and what runs inside it */
        kill(p->pid, SIGKILL);
        reap(p, WNOHANG);
        if (!p->exited)
            leave_unreaped(p);
    }
    if (p->err_timer)
        loop_timer_cancel(p->lp, p->err_timer);
    p->err_timer = 0;
    close_fd(p, &p->in_fd);
    close_fd(p, &p->fds[OUT]);
    close_fd(p, &p->fds[ERR]);
    close_fd(p, &p->pidfd);
    drop_input(p);           /* the pinned strings go with the userdata's uservalue */
    free(p->pieces);
    p->pieces = NULL;
    p->head = p->count = p->cap = 0;
    adopt_free(p->payload);
    p->payload = NULL;
    buf_free(&p->out[OUT]);
    buf_free(&p->out[ERR]);
}

static int process_gc(lua_State *L)
{
    process_release(check_process(L, 1));
    return 0;
}

/* How a child's stream is wired: "pipe", "inherit", "null" (and "stdout" for stderr). */
static const char *stream_mode(lua_State *L, int opts, const char *field, const char *dflt)
{
    lua_getfield(L, opts, field);
    const char *m = luaL_optstring(L, -1, dflt);
    lua_pop(L, 1);
    if (lua_type(L, opts) == LUA_TTABLE && strcmp(m, "pipe") && strcmp(m, "inherit") &&
        strcmp(m, "null") && strcmp(m, "stdout"))
        luaL_error(L, "spawn: %s must be \"pipe\", \"inherit\" or \"null\"", field);
    return m;
}

/* Builds a NULL-terminated string vector from a table; [-0, +1] (a userdata owning it). */
static char **string_vector(lua_State *L, int tbl, int is_env)
{
    size_t n = 0;
    if (is_env) {
        lua_pushnil(L);
        while (lua_next(L, tbl)) {
            n++;
            lua_pop(L, 1);
        }
    } else {
        n = (size_t)luaL_len(L, tbl);
    }
    char **v = lua_newuserdatauv(L, (n + 1) * sizeof *v, 1);
    lua_newtable(L);                 /* uservalue: keeps the strings alive */
    size_t i = 0;
    if (is_env) {
        lua_pushnil(L);
        while (lua_next(L, tbl)) {
            if (lua_type(L, -2) != LUA_TSTRING || !lua_isstring(L, -1))
                luaL_error(L, "spawn: env must map names to strings");
            lua_pushfstring(L, "%s=%s", lua_tostring(L, -2), lua_tostring(L, -1));
            v[i] = (char *)lua_tostring(L, -1);
            lua_rawseti(L, -4, (lua_Integer)++i);
            lua_pop(L, 1);
        }
    } else {
        for (i = 0; i < n; i++) {
            lua_rawgeti(L, tbl, (lua_Integer)i + 1);
            if (!lua_isstring(L, -1))
                luaL_error(L, "spawn: argv[%d] must be a string", (int)i + 1);
            v[i] = (char *)lua_tostring(L, -1);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
    }
    v[n] = NULL;
    lua_setiuservalue(L, -2, 1);
    return v;
}

static int open_null(int flags)
{
    return open("/dev/null", flags | O_CLOEXEC);
}

/* The places execvp would try for `file` under the PATH of envp (the env the child is given,
 * not rlm's; without PATH, glibc's default), NULL-terminated, in a userdata pushed on the stack
 * that holds the strings too. A file with a slash is the one place. Made here so the vfork
 * child need not change `environ` for execvp. [-0, +1, m] */
static char **exec_paths(lua_State *L, const char *file, char **envp)
{
    const char *path = "/bin:/usr/bin";
    for (char **e = envp; *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0) {
            path = *e + 5;
            break;
        }
    size_t n = 1, len = strlen(file);
    for (const char *p = path; *p; p++)
        n += *p == ':';
    if (strchr(file, '/') || len == 0) {
        path = "";   /* one place: the file itself (an empty name fails there, as in execvp) */
        n = 1;
    }
    size_t room = (n + 1) * sizeof(char *) + n * (strlen(path) + len + 3);
    char **paths = lua_newuserdatauv(L, room, 0);
    char *out = (char *)(paths + n + 1);
    size_t i = 0;
    const char *dir = path;
    do {
        const char *end = strchrnul(dir, ':');
        paths[i++] = out;
        if (*path) {                       /* an empty entry is the working directory */
            out = mempcpy(out, end > dir ? dir : ".", end > dir ? (size_t)(end - dir) : 1);
            *out++ = '/';
        }
        out = mempcpy(out, file, len);
        *out++ = '\0';
        dir = end + 1;
    } while (*path && dir[-1] == ':');
    paths[i] = NULL;
    return paths;
}

/* Reads opts.pass into cs, opening each descriptor; raises on misuse (after closing what it
 * opened), returns -1 with errno when the system refuses, with what it was doing pushed. */
static int read_pass(lua_State *L, int opts, struct child_setup *cs)
{
    if (lua_getfield(L, opts, "pass") == LUA_TNIL) {
        lua_pop(L, 1);
        return 0;
    }
    int tbl = lua_gettop(L);
    luaL_argcheck(L, lua_istable(L, tbl), 1, "spawn: pass must map descriptor numbers to data");
    lua_pushnil(L);
    while (lua_next(L, tbl)) {
        lua_Integer fd = lua_isinteger(L, -2) ? lua_tointeger(L, -2) : -1;
        const char *why = fd < 3 || fd > 1023 ? "spawn: pass keys must be descriptor numbers 3-1023"
                        : cs->npass == MAX_PASS ? "spawn: pass takes at most 32 descriptors" : NULL;
        int src = -1;
        if (why == NULL && lua_type(L, -1) == LUA_TSTRING) {
            size_t len;
            const char *data = lua_tolstring(L, -1, &len);
            src = sealed_memfd(data, len);
            if (src < 0) {
                int e = errno;
                lua_pushliteral(L, "spawn: cannot prepare the passed descriptors");
                errno = e;
            }
        } else if (why == NULL && lua_type(L, -1) == LUA_TTABLE &&
                   (lua_pushliteral(L, "file"), lua_rawget(L, -2)) == LUA_TSTRING) {
            /* the file itself, read-only: rlm makes no copy of it (raw reads: no metamethod
             * may raise while descriptors are open) */
            const char *path = lua_tostring(L, -1);
            lua_pushliteral(L, "optional");
            int optional = lua_rawget(L, -3) != LUA_TNIL && lua_toboolean(L, -1);
            lua_pop(L, 1);
            src = open_passed_file(path, optional);
            if (src < 0) {
                int e = errno;
                lua_pushfstring(L, "spawn: cannot pass %s", path);
                errno = e;
            }
        } else if (why == NULL && lua_istable(L, -2) &&   /* above it: its file field, nil */
                   (lua_pop(L, 1), lua_pushliteral(L, "fd"), lua_rawget(L, -2)) == LUA_TNUMBER) {
            /* a descriptor rlm holds (a folder opened without following links): its copy */
            lua_Integer own = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : -1;
            src = own < 0 || own > INT_MAX ? (errno = EBADF, -1)
                                           : fcntl((int)own, F_DUPFD_CLOEXEC, 3);
            if (src < 0) {
                int e = errno;
                lua_pushfstring(L, "spawn: cannot pass descriptor %I", own);
                errno = e;
            }
        } else if (why == NULL) {
            why = "spawn: each pass value must be a string, {file = path} or {fd = n}";
        }
        if (why) {
            close_passed(cs);
            return luaL_error(L, "%s", why);
        }
        if (src < 0) {
            int e = errno;
            close_passed(cs);
            errno = e;
            return -1;
        }
        if (lua_istable(L, -2))
            lua_pop(L, 1);            /* the file field, above its table */
        cs->pass_fd[cs->npass] = (int)fd;
        cs->pass_src[cs->npass++] = src;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
}

static const struct {
    const char *name;
    int resource;
} rlimit_names[] = {{"as", RLIMIT_AS},         {"data", RLIMIT_DATA},   {"nproc", RLIMIT_NPROC},
                    {"nofile", RLIMIT_NOFILE}, {"fsize", RLIMIT_FSIZE}, {"core", RLIMIT_CORE},
                    {"stack", RLIMIT_STACK},   {NULL, 0}};

/* Reads opts.rlimits into cs. A limit above the current hard limit is kept at that (only root
 * may raise one); raises on an unknown name or a value that is not a whole number. */
static void read_rlimits(lua_State *L, int opts, struct child_setup *cs)
{
    if (lua_getfield(L, opts, "rlimits") != LUA_TNIL) {
        luaL_argcheck(L, lua_istable(L, -1), 1, "spawn: rlimits must be a table");
        for (int i = 0; rlimit_names[i].name; i++) {
            if (lua_getfield(L, -1, rlimit_names[i].name) != LUA_TNIL) {
                if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
                    luaL_error(L, "spawn: rlimits.%s must be a whole number", rlimit_names[i].name);
                struct rlimit now;
                rlim_t v = (rlim_t)lua_tointeger(L, -1);
                if (getrlimit(rlimit_names[i].resource, &now) == 0 && now.rlim_max < v)
                    v = now.rlim_max;
                cs->limit_res[cs->nlimits] = rlimit_names[i].resource;
                cs->limit_val[cs->nlimits].rlim_cur = cs->limit_val[cs->nlimits].rlim_max = v;
                cs->nlimits++;
            }
            lua_pop(L, 1);
        }
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            int known = 0;
            for (int i = 0; rlimit_names[i].name; i++)
                known |= lua_type(L, -2) == LUA_TSTRING &&
                         strcmp(lua_tostring(L, -2), rlimit_names[i].name) == 0;
            if (!known)
                luaL_error(L, "spawn: unknown rlimit %s (as, data, nproc, nofile, fsize, core, "
                              "stack)", luaL_tolstring(L, -2, NULL));
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
}

/* An optional integer field from 0 to max; dflt when absent. */
static lua_Integer opt_upto(lua_State *L, int opts, const char *field, lua_Integer dflt,
                            lua_Integer max)
{
    lua_getfield(L, opts, field);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return dflt;
    }
    lua_Integer v = lua_tointeger(L, -1);
    if (!lua_isinteger(L, -1) || v < 0 || v > max) {
        if (max == LUA_MAXINTEGER)
            luaL_error(L, "spawn: %s must be a whole number", field);
        luaL_error(L, "spawn: %s must be a whole number from 0 to %I", field, max);
    }
    lua_pop(L, 1);
    return v;
}

/* An optional non-negative integer field; dflt when absent. */
static lua_Integer opt_count(lua_State *L, int opts, const char *field, lua_Integer dflt)
{
    return opt_upto(L, opts, field, dflt, LUA_MAXINTEGER);
}

/* A uid or gid from opts: -1 when absent; one the kernel would read as "unchanged" (-1 as a
 * 32-bit id) or would cut short is misuse, never a child left as root. */
static long opt_id(lua_State *L, int opts, const char *field)
{
    return (long)opt_upto(L, opts, field, -1, (lua_Integer)UINT32_MAX - 1);
}

static int set_nonblock(int fd)
{
    return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int l_spawn(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    reap_unreaped(loop_get(L));
    if (lua_getfield(L, 1, "argv") != LUA_TTABLE || luaL_len(L, -1) < 1)
        return luaL_error(L, "spawn: argv must be a non-empty list of strings");
    char **argv = string_vector(L, lua_absindex(L, -1), 0);     // [.., argv, argvud]
    char **envp = NULL;
    if (lua_getfield(L, 1, "env") == LUA_TTABLE)
        envp = string_vector(L, lua_absindex(L, -1), 1);
    else
        lua_pushnil(L);                                         // [.., argv, argvud, env, envud]
    lua_getfield(L, 1, "cwd");
    const char *cwd = lua_tostring(L, -1);
    const char *in_mode = stream_mode(L, 1, "stdin", "pipe");
    const char *out_mode = stream_mode(L, 1, "stdout", "pipe");
    const char *err_mode = stream_mode(L, 1, "stderr", "pipe");
    struct child_setup cs = {.uid = opt_id(L, 1, "uid"), .gid = opt_id(L, 1, "gid")};
    if (cs.uid >= 0 && cs.gid < 0)
        return luaL_error(L, "spawn: uid needs gid too (the child's groups change with it)");
    if (envp)
        cs.paths = exec_paths(L, argv[0], envp);
    read_rlimits(L, 1, &cs);
    size_t max_line = (size_t)opt_count(L, 1, "max_line", 0);
    size_t max_stderr = (size_t)opt_count(L, 1, "max_stderr", 0);
    size_t stderr_rate = (size_t)opt_count(L, 1, "stderr_rate", 0);
    int pipe_size = (int)opt_count(L, 1, "pipe_size", 0);
    if (read_pass(L, 1, &cs) != 0)
        return fail_errno(L, lua_tostring(L, -1));

    loop *lp = loop_get(L);
    struct process *p = lua_newuserdatauv(L, sizeof *p, 1);
    memset(p, 0, sizeof *p);
    lua_newtable(L);                  /* the strings stdin still needs (struct piece) */
    lua_setiuservalue(L, -2, 1);
    p->lp = lp;
    p->pidfd = p->in_fd = p->fds[OUT] = p->fds[ERR] = -1;
    p->id = loop_new_id(lp);
    p->max_line = max_line;
    p->max_stderr = max_stderr;
    p->stderr_rate = stderr_rate;
    luaL_setmetatable(L, PROCESS);

    /* child ends: [0] stdin, [1] stdout, [2] stderr; -1 inherit, -2 stderr to stdout */
    int child[3] = {-1, -1, -1}, status[2] = {-1, -1}, pipes_ok = 1;
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
    if (strcmp(in_mode, "pipe") == 0) {
        pipes_ok &= pipe2(pin, O_CLOEXEC) == 0;
        child[0] = pin[0];
    } else if (strcmp(in_mode, "null") == 0) {
        child[0] = open_null(O_RDONLY);
    }
    if (strcmp(out_mode, "pipe") == 0) {
        pipes_ok &= pipe2(pout, O_CLOEXEC) == 0;
        child[1] = pout[1];
    } else if (strcmp(out_mode, "null") == 0) {
        child[1] = open_null(O_WRONLY);
    }
    if (strcmp(err_mode, "pipe") == 0) {
        pipes_ok &= pipe2(perr, O_CLOEXEC) == 0;
        child[2] = perr[1];
    } else if (strcmp(err_mode, "null") == 0) {
        child[2] = open_null(O_WRONLY);
    } else if (strcmp(err_mode, "stdout") == 0) {
        child[2] = -2;
    }
    pipes_ok &= pipe2(status, O_CLOEXEC) == 0;
    if (pipe_size > 0)       /* a request, not a promise: the kernel caps it per user */
        for (int i = 0; i < 2; i++)
            if ((i == 0 ? pin[1] : pout[0]) >= 0)
                fcntl(i == 0 ? pin[1] : pout[0], F_SETPIPE_SZ, pipe_size);
    pid_t pid = pipes_ok ? spawn_child(argv, envp, cwd, child, status[1], &cs) : -1;
    int fork_errno = errno;
    close_passed(&cs);
    for (int i = 0; i < 3; i++)
        if (child[i] >= 0)
            close(child[i]);
    if (status[1] >= 0)
        close(status[1]);
    int exec_errno = 0;
    if (pid > 0) {
        ssize_t r;
        do
            r = read(status[0], &exec_errno, sizeof exec_errno);
        while (r < 0 && errno == EINTR);
        if (r != (ssize_t)sizeof exec_errno)
            exec_errno = 0;
    }
    if (status[0] >= 0)
        close(status[0]);
    p->pid = pid;
    p->in_fd = pin[1];
    p->fds[OUT] = pout[0];
    p->fds[ERR] = perr[0];
    if (pid < 0 || exec_errno) {
        if (pid > 0)
            reap(p, 0);
        p->pid = 0;
        process_release(p);
        errno = pid < 0 ? fork_errno : exec_errno;
        return fail_errno(L, lua_pushfstring(L, "cannot run '%s'", argv[0]));
    }
    long pidfd = syscall(SYS_pidfd_open, pid, 0);
    p->pidfd = (int)pidfd;
    if (p->pidfd >= 0)            /* close-on-exec already: pidfd_open sets it */
        loop_watch(lp, p->pidfd, POLLIN, on_exit_fd, p);
    for (int i = OUT; i <= ERR; i++)
        if (p->fds[i] >= 0) {
            set_nonblock(p->fds[i]);
            loop_watch(lp, p->fds[i], POLLIN, on_output, p);
        }
    if (p->in_fd >= 0)
        set_nonblock(p->in_fd);
    return 1;
}

static int p_id(lua_State *L)
{
    lua_pushinteger(L, check_process(L, 1)->id);
    return 1;
}

static int p_pid(lua_State *L)
{
    lua_pushinteger(L, check_process(L, 1)->pid);
    return 1;
}

/* Queues s, held by reference in the uservalue table; -1 when out of memory. */
static int queue_input(lua_State *L, struct process *p, int arg)
{
    size_t len;
    const char *data = lua_tolstring(L, arg, &len);
    if (len == 0)
        return 0;
    if (p->count == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 8;
        struct piece *pieces = realloc(p->pieces, cap * sizeof *pieces);
        if (pieces == NULL)
            return -1;
        p->pieces = pieces;
        p->cap = cap;
    }
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, arg);
    lua_rawseti(L, -2, p->next_seq);
    lua_pop(L, 1);
    p->pieces[p->count++] = (struct piece){data, len, p->next_seq++};
    p->pending += len;
    return 0;
}

/* p:write(s, ...): the strings in order, as few system calls as the pipe allows. */
static int p_write(lua_State *L)
{
    struct process *p = check_process(L, 1);
    int n = lua_gettop(L);
    for (int i = 2; i <= n; i++)
        luaL_checkstring(L, i);
    release_written(L, p);
    if (p->in_fd < 0) {
        luaL_pushfail(L);
        lua_pushliteral(L, "the process's stdin is closed");
        return 2;
    }
    int waited = p->pending > 0;   /* earlier bytes someone may be waiting to see drain */
    for (int i = 2; i <= n; i++)
        if (queue_input(L, p, i) != 0)
            return luaL_error(L, "out of memory");
    flush_input(p, waited);
    lua_pushboolean(L, 1);
    return 1;
}

static int p_pending_input(lua_State *L)
{
    struct process *p = check_process(L, 1);
    release_written(L, p);
    lua_pushinteger(L, (lua_Integer)p->pending);
    return 1;
}

static int p_close_stdin(lua_State *L)
{
    struct process *p = check_process(L, 1);
    drop_input(p);
    release_written(L, p);
    close_fd(p, &p->in_fd);
    return 0;
}

static int stream_arg(lua_State *L, int arg)
{
    static const char *const names[] = {"stdout", "stderr", NULL};
    return luaL_checkoption(L, arg, "stdout", names);
}

static int p_read(lua_State *L)
{
    struct process *p = check_process(L, 1);
    release_written(L, p);
    int which = stream_arg(L, 2);
    if (which == ERR && p->err_timer && p->fds[ERR] >= 0)
        read_stderr(p, p->fds[ERR]);      /* resting: what the pipe holds, its last words */
    struct buf *b = &p->out[which];
    size_t start = which == OUT ? p->out_start : 0;
    lua_pushlstring(L, b->data ? b->data + start : "", b->len - start);
    buf_clear(b);
    if (which == OUT) {
        p->out_start = p->out_scanned = 0;
        resume_stdout(p);
    }
    return 1;
}

/* The next complete line of stdout, without its newline; nil if none is buffered yet. Lines
 * are taken from a moving offset, so reading many from one big read stays linear. */
static int p_line(lua_State *L)
{
    struct process *p = check_process(L, 1);
    release_written(L, p);
    struct buf *b = &p->out[OUT];
    char *nl = next_newline(p);
    if (nl == NULL)
        return 0;
    char *from = b->data + p->out_start;
    size_t n = (size_t)(nl - from);
    lua_pushlstring(L, from, n);
    p->out_start += n + 1;
    p->out_scanned = p->out_start;
    if (p->out_start == b->len || p->out_start > b->len / 2) {
        buf_consume(b, p->out_start);     /* moves nothing (buf.h) */
        p->out_start = p->out_scanned = 0;
    }
    resume_stdout(p);
    return 1;
}

/* The next n bytes of stdout are a payload (raw bytes after a line that announced them):
 * they are read straight into a buffer of their own, which p:payload() hands over as one
 * string without another copy (adopt.h). Bytes already read past the last line are its
 * start. */
static int p_expect(lua_State *L)
{
    struct process *p = check_process(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_argcheck(L, n >= 0, 2, "a payload has a size of 0 or more bytes");
    if (p->payload)
        return luaL_error(L, "a payload is already expected from this process");
    char *data = adopt_alloc((size_t)n);
    if (data == NULL)
        return luaL_error(L, "out of memory for a payload of %I bytes", n);
    struct buf *b = &p->out[OUT];
    size_t have = b->len - p->out_start;
    size_t take = have < (size_t)n ? have : (size_t)n;
    if (take)
        memcpy(data, b->data + p->out_start, take);
    p->out_start += take;
    p->out_scanned = p->out_start;
    if (p->out_start == b->len) {
        buf_consume(b, p->out_start);
        p->out_start = p->out_scanned = 0;
    }
    p->payload = data;
    p->payload_len = (size_t)n;
    p->payload_got = take;
    p->overflowed = 0;       /* what looked like an overlong line was this payload */
    p->paused = 0;
    rewatch_stdout(p);
    return 0;
}

/* The expected payload once all of it has come, else nothing. */
static int p_payload(lua_State *L)
{
    struct process *p = check_process(L, 1);
    if (p->payload == NULL || p->payload_got < p->payload_len)
        return 0;
    char *data = p->payload;
    p->payload = NULL;
    adopt_push(L, data, p->payload_len);
    return 1;
}

static int p_overflowed(lua_State *L)
{
    lua_pushboolean(L, check_process(L, 1)->overflowed);
    return 1;
}

static int p_eof(lua_State *L)
{
    struct process *p = check_process(L, 1);
    lua_pushboolean(L, p->eof[stream_arg(L, 2)] || p->fds[stream_arg(L, 2)] < 0);
    return 1;
}

/* nil while running; "exit", code or "signal", signo once it has ended. */
static int p_status(lua_State *L)
{
    struct process *p = check_process(L, 1);
    if (!p->exited && p->pidfd < 0)
        reap(p, WNOHANG);        /* no pidfd (old kernel): poll */
    if (!p->exited)
        return 0;
    if (WIFSIGNALED(p->wstatus)) {
        lua_pushliteral(L, "signal");
        lua_pushinteger(L, WTERMSIG(p->wstatus));
    } else {
        lua_pushliteral(L, "exit");
        lua_pushinteger(L, WEXITSTATUS(p->wstatus));
    }
    return 2;
}

static int p_kill(lua_State *L)
{
    struct process *p = check_process(L, 1);
    int sig = check_signal(L, 2);
    if (p->pid > 0 && !p->exited) {
        if (kill(-p->pid, sig) != 0)
            kill(p->pid, sig);
    }
    return 0;
}

static int p_close(lua_State *L)
{
    process_release(check_process(L, 1));
    return 0;
}

static const luaL_Reg proc_funcs[] = {
    {"spawn", l_spawn}, {"kill", l_kill}, {NULL, NULL}};

static const luaL_Reg process_methods[] = {
    {"id", p_id},           {"pid", p_pid},     {"write", p_write},
    {"pending_input", p_pending_input},         {"close_stdin", p_close_stdin},
    {"read", p_read},       {"line", p_line},   {"eof", p_eof},
    {"overflowed", p_overflowed},                {"expect", p_expect},
    {"payload", p_payload},
    {"status", p_status},   {"kill", p_kill},   {"close", p_close},
    {NULL, NULL}};

static const luaL_Reg process_metamethods[] = {
    {"__gc", process_gc}, {"__close", process_gc}, {"__index", NULL}, {NULL, NULL}};

int luaopen_rlm_core_proc(lua_State *L)
{
    loop_get(L);
    host_newclass(L, PROCESS, process_metamethods, process_methods);
    luaL_newlib(L, proc_funcs);
    return 1;
}
