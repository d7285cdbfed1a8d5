/* lsandbox.c — rlm.core.sandbox: the C side of the local sandbox's boundary.
 *   seccomp_filter() -> bytes      the BPF program bwrap installs (--seccomp FD)
 *   read_beneath(root, rel[, offset, length]) -> bytes, size | nil, err, errno
 *                                  the file's bytes from offset (default 0), at most length
 *                                  (default all), and the file's whole size
 *   write_beneath(root, rel, data[, {mkdirs=, uid=, gid=, mode=}]) -> true | nil, err, errno
 *   list_beneath(root, rel) -> {{path=, type=, size=}, ...} | nil, err, errno
 *   usage(root) -> bytes allocated under root | nil, err, errno
 *   chown_tree(root, uid, gid[, recursive]) -> true | nil, err, errno   links not followed
 *   private_mounts() -> true | nil, err, errno   this process in a mount namespace of its own
 *   mount_tmpfs(path, bytes, inodes) -> true | nil, err, errno   (after private_mounts)
 *   unmount(path) -> true | nil, err, errno   that mount and those beneath, lazily
 *   space(path) -> used, size | nil, err, errno   of the file system at path, in blocks' bytes
 *
 * The host reads and writes inside a sandbox's folders while code in the sandbox may swap any
 * directory for a symbolic link at any moment. Checking a path and then using it by name loses
 * that race, so every operation here resolves `rel` component by component from a descriptor of
 * `root` (trusted), refusing symbolic links, '..' and mount crossings on the way (openat2's
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS; O_NOFOLLOW at each step where openat2 is missing), and
 * then works only through the descriptors it got. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <lauxlib.h>

#include "buf.h"
#include "mounts.h"
#include "seccomp.h"

/* Deeper trees are not listed or measured further: each level holds a descriptor open. */
#define MAX_DEPTH 128

static int fail(lua_State *L, const char *what, int e)
{
    luaL_pushfail(L);
    if (e == ELOOP)
        lua_pushfstring(L, "%s: refusing to follow a symbolic link on the way", what);
    else
        lua_pushfstring(L, "%s: %s", what, strerror(e));
    lua_pushinteger(L, e);
    return 3;
}

/* ---------- seccomp ---------- */

/* The program is built from the rules in host/seccomp.c when rlm is built (build/seccomp_gen),
 * not at run time in every process that starts a sandbox. */
static int l_seccomp_filter(lua_State *L)
{
    lua_pushlstring(L, (const char *)seccomp_bpf, seccomp_bpf_len);
    return 1;
}

/* ---------- resolution beneath a root ---------- */

/* Walks rel from dirfd one component at a time, never following a symbolic link; the last
 * component is opened with flags. Used where openat2 is missing (Linux before 5.6). */
static int walk_nofollow(int dirfd, const char *rel, int flags, mode_t mode)
{
    char *copy = strdup(rel);
    if (copy == NULL)
        return -1;
    int cur = dup(dirfd), e = 0;
    if (cur >= 0)
        fcntl(cur, F_SETFD, FD_CLOEXEC);
    char *save = NULL, *part = strtok_r(copy, "/", &save);
    while (cur >= 0 && part) {
        char *next = strtok_r(NULL, "/", &save);
        int fd = next ? openat(cur, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                      : openat(cur, part, flags | O_NOFOLLOW | O_CLOEXEC, mode);
        e = errno;
        close(cur);
        cur = fd;
        part = next;
    }
    free(copy);
    errno = e;
    return cur;
}

/* Opens rel beneath dirfd without following any symbolic link or leaving dirfd's tree. */
static int open_beneath(int dirfd, const char *rel, int flags, mode_t mode)
{
    struct open_how how = {
        .flags = (unsigned long long)(flags | O_NOFOLLOW | O_CLOEXEC),
        .mode = (flags & O_CREAT) ? mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
    if (fd >= 0 || errno != ENOSYS)
        return (int)fd;
    return walk_nofollow(dirfd, rel, flags, mode);
}

/* Checks a relative sandbox path: no NUL, not absolute, no '..' component. */
static const char *check_rel(lua_State *L, int arg)
{
    size_t len;
    const char *rel = luaL_checklstring(L, arg, &len);
    if (strlen(rel) != len)
        return NULL;
    if (rel[0] == '/' || len == 0)
        return NULL;
    for (const char *p = rel; (p = strstr(p, "..")) != NULL; p += 2)
        if ((p == rel || p[-1] == '/') && (p[2] == '\0' || p[2] == '/'))
            return NULL;
    return rel;
}

static int bad_rel(lua_State *L)
{
    luaL_pushfail(L);
    lua_pushliteral(L, "'..' is not allowed (a path beneath the sandbox's folder must stay in it)");
    lua_pushinteger(L, EINVAL);
    return 3;
}

/* The error for a failed open of rel beneath dirfd: a symbolic link where a directory was
 * wanted reads ENOTDIR (O_NOFOLLOW with O_DIRECTORY), and crossing one EXDEV; both say ELOOP. */
static int link_errno(int dirfd, const char *rel, int e)
{
    struct stat st;
    if (e == EXDEV)
        return ELOOP;
    if (e == ENOTDIR && fstatat(dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        return ELOOP;
    return e;
}

static int open_root(const char *root)
{
    return open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* ---------- read ---------- */

/* Reads at most max bytes from fd into out (all of it when max is negative). */
static int read_upto(int fd, struct buf *out, long long max)
{
    char chunk[65536];
    while (max != 0) {
        size_t want = max < 0 || max > (long long)sizeof chunk ? sizeof chunk : (size_t)max;
        ssize_t n = read(fd, chunk, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        if (buf_add(out, chunk, (size_t)n) != 0) {
            errno = ENOMEM;
            return -1;
        }
        if (max > 0)
            max -= n;
    }
    return 0;
}

static int l_read_beneath(lua_State *L)
{
    const char *root = luaL_checkstring(L, 1);
    const char *rel = check_rel(L, 2);
    if (rel == NULL)
        return bad_rel(L);
    lua_Integer offset = luaL_optinteger(L, 3, 0);
    lua_Integer length = luaL_optinteger(L, 4, -1);
    luaL_argcheck(L, offset >= 0, 3, "offset must be 0 or more");
    luaL_argcheck(L, length >= -1, 4, "length must be 0 or more");
    int dir = open_root(root);
    if (dir < 0)
        return fail(L, root, errno);
    /* O_NONBLOCK: a FIFO planted by the code must not hang the host; cleared for the read. */
    int fd = open_beneath(dir, rel, O_RDONLY | O_NONBLOCK, 0);
    int e = errno;
    close(dir);
    if (fd < 0)
        return fail(L, rel, e == EXDEV ? ELOOP : e);
    struct stat st;
    struct buf data = {0};
    int r = fstat(fd, &st);
    if (r == 0 && !S_ISREG(st.st_mode)) {
        errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        r = -1;
    }
    if (r == 0 && offset > 0 && lseek(fd, offset < st.st_size ? offset : st.st_size, SEEK_SET) < 0)
        r = -1;
    if (r == 0)
        r = fcntl(fd, F_SETFL, 0) == 0 && buf_add(&data, NULL, 0) == 0 ? read_upto(fd, &data, length) : -1;
    e = errno;
    close(fd);
    if (r != 0) {
        buf_free(&data);
        return fail(L, rel, e);
    }
    lua_pushlstring(L, data.data, data.len);
    buf_free(&data);
    lua_pushinteger(L, (lua_Integer)st.st_size);
    return 2;
}

/* ---------- write ---------- */

struct write_opts {
    int mkdirs;
    long uid, gid;            /* -1: the writer's own */
    mode_t mode;
};

static void read_write_opts(lua_State *L, int arg, struct write_opts *o)
{
    o->mkdirs = 0;
    o->uid = o->gid = -1;
    o->mode = 0644;
    if (lua_isnoneornil(L, arg))
        return;
    luaL_checktype(L, arg, LUA_TTABLE);
    lua_getfield(L, arg, "mkdirs");
    o->mkdirs = lua_toboolean(L, -1);
    lua_getfield(L, arg, "uid");
    o->uid = luaL_optinteger(L, -1, -1);
    lua_getfield(L, arg, "gid");
    o->gid = luaL_optinteger(L, -1, -1);
    lua_getfield(L, arg, "mode");
    o->mode = (mode_t)luaL_optinteger(L, -1, 0644);
    lua_pop(L, 4);
}

static int give(int fd, const struct write_opts *o)
{
    if (o->uid < 0 && o->gid < 0)
        return 0;
    return fchown(fd, (uid_t)o->uid, (gid_t)o->gid);
}

/* Opens (creating with mkdirs) each directory of `parent` beneath dirfd; the last one's fd. */
static int open_parent(int dirfd, char *parent, const struct write_opts *o)
{
    int cur = dup(dirfd);
    if (cur >= 0)
        fcntl(cur, F_SETFD, FD_CLOEXEC);
    char *save = NULL;
    for (char *part = strtok_r(parent, "/", &save); cur >= 0 && part;
         part = strtok_r(NULL, "/", &save)) {
        if (strcmp(part, ".") == 0)
            continue;
        int fd = open_beneath(cur, part, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0)
            errno = link_errno(cur, part, errno);
        if (fd < 0 && errno == ENOENT && o->mkdirs && mkdirat(cur, part, 0755) == 0) {
            fd = open_beneath(cur, part, O_RDONLY | O_DIRECTORY, 0);
            if (fd >= 0 && give(fd, o) != 0) {
                close(fd);
                fd = -1;
            }
        }
        int e = errno;
        close(cur);
        cur = fd;
        errno = e;
    }
    return cur;
}

/* Writes data to a fresh file in dirfd and renames it to name: readers see old or new. */
static int write_replace(int dirfd, const char *name, const char *data, size_t len,
                         const struct write_opts *o)
{
    char tmp[64];
    unsigned long long nonce = 0;
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 8; tries++) {
        if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
            nonce ^= (unsigned long long)getpid() << 32 | (unsigned long long)tries;
        snprintf(tmp, sizeof tmp, ".rlm-upload-%016llx", nonce);
        fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, o->mode);
        if (fd < 0 && errno != EEXIST)
            return -1;
    }
    if (fd < 0)
        return -1;
    int ok = 1;
    for (size_t done = 0; ok && done < len;) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        done += ok ? (size_t)w : 0;
    }
    ok = ok && fchmod(fd, o->mode) == 0 && give(fd, o) == 0;
    int e = errno;
    ok = close(fd) == 0 && ok;
    if (ok && renameat(dirfd, tmp, dirfd, name) != 0) {
        e = errno;
        ok = 0;
    }
    if (!ok) {
        unlinkat(dirfd, tmp, 0);
        errno = e;
        return -1;
    }
    return 0;
}

static int l_write_beneath(lua_State *L)
{
    const char *root = luaL_checkstring(L, 1);
    const char *rel = check_rel(L, 2);
    size_t len;
    const char *data = luaL_checklstring(L, 3, &len);
    struct write_opts o;
    read_write_opts(L, 4, &o);
    if (rel == NULL)
        return bad_rel(L);
    /* [parent]/[name]: the name is written in the parent's descriptor, never by path. */
    char *parent = strdup(rel);
    if (parent == NULL)
        return luaL_error(L, "out of memory");
    char *slash = strrchr(parent, '/');
    const char *name = slash ? slash + 1 : parent;
    if (slash)
        *slash = '\0';
    int e = EISDIR, r = -1;
    if (*name && strcmp(name, ".") != 0) {
        int dir = open_root(root);
        int pdir = dir < 0 ? -1 : open_parent(dir, slash ? parent : (char[]){"."}, &o);
        e = errno;
        if (dir >= 0)
            close(dir);
        if (pdir >= 0) {
            r = write_replace(pdir, name, data, len, &o);
            e = errno;
            close(pdir);
        }
    }
    free(parent);
    if (r != 0)
        return fail(L, rel, e == EXDEV ? ELOOP : e);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---------- list and usage ---------- */

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in an open directory, sorted; NULL on failure. Frees with free_names. */
static char **sorted_names(int dirfd, size_t *count)
{
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    size_t n = 0, cap = 16;
    char **names = malloc(cap * sizeof *names);
    struct dirent *ent;
    while (names && (ent = readdir(d)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        if (n == cap) {
            char **more = realloc(names, (cap *= 2) * sizeof *names);
            if (more == NULL)
                break;
            names = more;
        }
        if ((names[n] = strdup(ent->d_name)) != NULL)
            n++;
    }
    closedir(d);
    if (names)
        qsort(names, n, sizeof *names, compare_names);
    *count = n;
    return names;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static const char *type_name(mode_t m)
{
    return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "link" : "other";
}

/* A walk over a tree through descriptors only: visit is called for every entry. */
struct walk {
    dev_t dev;
    void (*visit)(struct walk *w, int dirfd, const char *name, const char *path,
                  const struct stat *st);
    lua_State *L;            /* list: the result table is on top of the stack */
    lua_Integer count;
    long long bytes;         /* usage */
    uid_t uid;               /* chown_tree */
    gid_t gid;
    int err;                 /* chown_tree: the first failure's errno */
};

static void walk_dir(struct walk *w, int dirfd, const char *prefix, int depth)
{
    size_t n = 0;
    char **names = depth < MAX_DEPTH ? sorted_names(dirfd, &n) : NULL;
    for (size_t i = 0; names && i < n; i++) {
        struct stat st;
        if (fstatat(dirfd, names[i], &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;                     /* gone meanwhile */
        size_t len = strlen(prefix) + strlen(names[i]) + 2;
        char *path = malloc(len);
        if (path == NULL)
            continue;
        snprintf(path, len, "%s%s%s", prefix, *prefix ? "/" : "", names[i]);
        w->visit(w, dirfd, names[i], path, &st);
        if (S_ISDIR(st.st_mode) && st.st_dev == w->dev) {
            /* Swapped for a link since fstatat: O_NOFOLLOW refuses it, and it is skipped. */
            int sub = openat(dirfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                walk_dir(w, sub, path, depth + 1);
                close(sub);
            }
        }
        free(path);
    }
    if (names)
        free_names(names, n);
}

static void add_entry(struct walk *w, int dirfd, const char *name, const char *path,
                      const struct stat *st)
{
    lua_State *L = w->L;
    lua_createtable(L, 0, 3);
    lua_pushstring(L, path);
    lua_setfield(L, -2, "path");
    lua_pushstring(L, type_name(st->st_mode));
    lua_setfield(L, -2, "type");
    lua_pushinteger(L, (lua_Integer)st->st_size);
    lua_setfield(L, -2, "size");
    lua_rawseti(L, -2, ++w->count);
}

static void add_usage(struct walk *w, int dirfd, const char *name, const char *path,
                      const struct stat *st)
{
    w->bytes += (long long)st->st_blocks * 512;
}

/* The entry itself, never what a link points at (chown -R --no-dereference); never a file
 * with other hard links, whose inode is shared with a place outside the tree (a repository
 * cloned with git's hard links into .git/objects): it stays the host's, readable as it was. */
static void give_entry(struct walk *w, int dirfd, const char *name, const char *path,
                       const struct stat *st)
{
    if (!S_ISDIR(st->st_mode) && st->st_nlink > 1)
        return;
    if (fchownat(dirfd, name, w->uid, w->gid, AT_SYMLINK_NOFOLLOW) != 0 && w->err == 0)
        w->err = errno;
}

/* Opens rel beneath root as a directory for a walk; -1 with errno otherwise. */
static int open_walk_root(const char *root, const char *rel, struct walk *w)
{
    int dir = open_root(root);
    if (dir < 0)
        return -1;
    int fd = strcmp(rel, ".") == 0 ? dup(dir) : open_beneath(dir, rel, O_RDONLY | O_DIRECTORY, 0);
    int e = fd < 0 ? link_errno(dir, rel, errno) : 0;
    close(dir);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0) {
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        w->dev = st.st_dev;
        return fd;
    }
    if (fd >= 0)
        close(fd);
    errno = e;
    return -1;
}

static int l_list_beneath(lua_State *L)
{
    const char *root = luaL_checkstring(L, 1);
    const char *rel = check_rel(L, 2);
    if (rel == NULL)
        return bad_rel(L);
    struct walk w = {.visit = add_entry, .L = L};
    int fd = open_walk_root(root, rel, &w);
    if (fd < 0)
        return fail(L, rel, errno);
    lua_newtable(L);
    walk_dir(&w, fd, strcmp(rel, ".") == 0 ? "" : rel, 0);
    close(fd);
    return 1;
}

static int l_usage(lua_State *L)
{
    const char *root = luaL_checkstring(L, 1);
    struct walk w = {.visit = add_usage};
    int fd = open_walk_root(root, ".", &w);
    if (fd < 0)
        return fail(L, root, errno);
    walk_dir(&w, fd, "", 0);
    close(fd);
    lua_pushinteger(L, (lua_Integer)w.bytes);
    return 1;
}

/* Hands root and everything beneath it (on the same file system, as deep as MAX_DEPTH; only
 * root when the 4th argument is false) to uid:gid without following links: in-process, where
 * `chown -R` cost a process per sandbox. */
static int l_chown_tree(lua_State *L)
{
    const char *root = luaL_checkstring(L, 1);
    struct walk w = {.visit = give_entry, .uid = (uid_t)luaL_checkinteger(L, 2),
                     .gid = (gid_t)luaL_checkinteger(L, 3)};
    int fd = open_walk_root(root, ".", &w);
    if (fd < 0)
        return fail(L, root, errno);
    if (fchown(fd, w.uid, w.gid) != 0)
        w.err = errno;
    if (lua_isnone(L, 4) || lua_toboolean(L, 4))
        walk_dir(&w, fd, "", 0);
    close(fd);
    if (w.err)
        return fail(L, root, w.err);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---------- the workspace's own file system (mounts.h) ---------- */

static int done(lua_State *L, int rc, const char *what)
{
    if (rc != 0)
        return fail(L, what, errno);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_private_mounts(lua_State *L)
{
    const char *step = "";
    int rc = mounts_enter_private(&step);   /* before done(): it names the step that failed */
    return done(L, rc, step);
}

static int l_mount_tmpfs(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    lua_Integer bytes = luaL_checkinteger(L, 2), inodes = luaL_checkinteger(L, 3);
    luaL_argcheck(L, bytes > 0, 2, "the size must be positive");
    luaL_argcheck(L, inodes > 0, 3, "the number of files must be positive");
    return done(L, mounts_tmpfs(path, (uint64_t)bytes, (uint64_t)inodes), path);
}

static int l_unmount(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    return done(L, mounts_detach(path), path);
}

static int l_space(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    uint64_t used, size;
    if (mounts_space(path, &used, &size) != 0)
        return fail(L, path, errno);
    lua_pushinteger(L, (lua_Integer)used);
    lua_pushinteger(L, (lua_Integer)size);
    return 2;
}

static const luaL_Reg sandbox_funcs[] = {
    {"seccomp_filter", l_seccomp_filter}, {"read_beneath", l_read_beneath},
    {"write_beneath", l_write_beneath},   {"list_beneath", l_list_beneath},
    {"usage", l_usage},                   {"chown_tree", l_chown_tree},
    {"private_mounts", l_private_mounts}, {"mount_tmpfs", l_mount_tmpfs},
    {"unmount", l_unmount},               {"space", l_space},
    {NULL, NULL}};

int luaopen_rlm_core_sandbox(lua_State *L)
{
    luaL_newlib(L, sandbox_funcs);
    return 1;
}
