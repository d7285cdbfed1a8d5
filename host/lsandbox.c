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
 *   open_folder(path) -> folder | nil, err, errno   a folder held by its descriptor:
 *     f:path() -> where it is now, links resolved      f:fd() -> its descriptor (spawn's pass)
 *     f:ancestry() -> {{path=, uid=, mode=}, ...}     it and each folder above it, up to /
 *     f:make(name, mode[, exclusive]) -> folder        made (mode exactly) or, unless exclusive,
 *                                                      opened; never through a link
 *     f:make_temp(prefix, mode) -> folder, name        a new folder prefix.XXXXXX
 *     f:open(name) -> folder    f:stat() -> {uid=, mode=}    f:chmod(mode)
 *     f:chown(uid, gid[, recursive])                   as chown_tree, from the descriptor
 *     f:lock() -> true | nil, err, errno               flock, held until f:close()
 *     f:remove(name) -> true | nil, err, errno         the entry and its tree, links not followed
 *     f:list() -> names, sorted      f:close()
 *     (all but path, fd and close return nil, err, errno when the system refuses)
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
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <lauxlib.h>

#include "buf.h"
#include "mounts.h"
#include "host.h"
#include "seccomp.h"
#include "tree.h"

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

/* Hands the folder fd and everything beneath it (on the same file system, as deep as
 * MAX_DEPTH; only the folder unless recursive) to uid:gid without following links: in-process,
 * where `chown -R` cost a process per sandbox. 0, or the first failure's errno. */
static int give_tree(int fd, uid_t uid, gid_t gid, int recursive)
{
    struct walk w = {.visit = give_entry, .uid = uid, .gid = gid};
    struct stat st;
    if (fstat(fd, &st) != 0)
        return errno;
    w.dev = st.st_dev;
    if (fchown(fd, uid, gid) != 0)
        w.err = errno;
    if (recursive)
        walk_dir(&w, fd, "", 0);
    return w.err;
}

static int l_chown_tree(lua_State *L)
{
    const char *root = luaL_checkstring(L, 1);
    struct walk w = {0};
    int fd = open_walk_root(root, ".", &w);
    if (fd < 0)
        return fail(L, root, errno);
    int e = give_tree(fd, (uid_t)luaL_checkinteger(L, 2), (gid_t)luaL_checkinteger(L, 3),
                      lua_isnone(L, 4) || lua_toboolean(L, 4));
    close(fd);
    if (e)
        return fail(L, root, e);
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

/* ---------- folders held by descriptor ---------- */

/* A folder that is handed to a sandbox (made, handed over, bound, removed) is held by its
 * descriptor from the moment it is opened: a name that is swapped for a link afterwards, by
 * whoever may write a folder above it, changes nothing that is done through the descriptor.
 * Each child is made and opened beneath its parent's descriptor with O_NOFOLLOW. */
#define FOLDER "rlm.sandbox.folder"

static int *check_folder(lua_State *L)
{
    int *fd = luaL_checkudata(L, 1, FOLDER);
    if (*fd < 0)
        luaL_error(L, "the folder is closed");
    return fd;
}

/* Pushes a folder userdata holding fd (which it owns from then on). */
static void push_folder(lua_State *L, int fd)
{
    int *slot = lua_newuserdatauv(L, sizeof *slot, 0);
    *slot = fd;
    luaL_setmetatable(L, FOLDER);
}

static int folder_close(lua_State *L)
{
    int *fd = luaL_checkudata(L, 1, FOLDER);
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
    return 0;
}

/* A name of the folder itself, never a path: no '/', not "", "." or "..". */
static const char *check_name(lua_State *L, int arg)
{
    const char *name = luaL_checkstring(L, arg);
    luaL_argcheck(L, *name && !strchr(name, '/') && strcmp(name, ".") != 0 &&
                     strcmp(name, "..") != 0, arg, "a name within the folder, not a path");
    return name;
}

static int l_open_folder(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    int fd = open_root(path);
    if (fd < 0)
        return fail(L, path, errno);
    push_folder(L, fd);
    return 1;
}

/* The path the kernel has for descriptor fd, pushed; nil when it has none. */
static void push_fd_path(lua_State *L, int fd)
{
    char link[32], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path);
    if (n > 0 && (size_t)n < sizeof path && path[0] == '/')
        lua_pushlstring(L, path, (size_t)n);
    else
        lua_pushnil(L);
}

static int folder_path(lua_State *L)
{
    push_fd_path(L, *check_folder(L));
    return 1;
}

static int folder_fd(lua_State *L)
{
    lua_pushinteger(L, *check_folder(L));
    return 1;
}

static void push_owner(lua_State *L, const struct stat *st)
{
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, st->st_uid);
    lua_setfield(L, -2, "uid");
    lua_pushinteger(L, st->st_mode & 07777);
    lua_setfield(L, -2, "mode");
}

static int folder_stat(lua_State *L)
{
    struct stat st;
    if (fstat(*check_folder(L), &st) != 0)
        return fail(L, "stat", errno);
    push_owner(L, &st);
    return 1;
}

/* The folder and each one above it, walked up through ".." from the descriptor (not by name,
 * so it is the folder actually held), up to the root; paths from the held folder's own. */
static int folder_ancestry(lua_State *L)
{
    int held = *check_folder(L);
    char path[4096];
    push_fd_path(L, held);
    snprintf(path, sizeof path, "%s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "?");
    lua_pop(L, 1);
    lua_newtable(L);
    int cur = fcntl(held, F_DUPFD_CLOEXEC, 0);
    for (lua_Integer n = 1; cur >= 0; n++) {
        struct stat st, up;
        int parent = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int ok = parent >= 0 && fstat(cur, &st) == 0 && fstat(parent, &up) == 0;
        int e = errno;
        close(cur);
        if (!ok) {
            if (parent >= 0)
                close(parent);
            return fail(L, "ancestry", e);
        }
        push_owner(L, &st);
        lua_pushstring(L, path);
        lua_setfield(L, -2, "path");
        lua_rawseti(L, -2, n);
        cur = parent;
        if (up.st_dev == st.st_dev && up.st_ino == st.st_ino) {
            close(cur);                   /* ".." of the root is the root */
            return 1;
        }
        char *slash = strrchr(path, '/');
        if (slash)
            *(slash == path ? slash + 1 : slash) = '\0';
    }
    return fail(L, "ancestry", errno);
}

/* Opens child name of dirfd as a folder, never through a link. */
static int open_child(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && (errno == ENOTDIR || errno == ELOOP) && link_errno(dirfd, name, errno) == ELOOP)
        errno = ELOOP;
    return fd;
}

static int folder_open(lua_State *L)
{
    int dir = *check_folder(L);
    const char *name = check_name(L, 2);
    int fd = open_child(dir, name);
    if (fd < 0)
        return fail(L, name, errno);
    push_folder(L, fd);
    return 1;
}

/* Makes child name of dirfd with exactly mode (no umask) and opens it; 1 when made, 0 when it
 * was there (and exclusive is 0), -1 with errno. */
static int make_child(int dirfd, const char *name, mode_t mode, int exclusive, int *out)
{
    int made = mkdirat(dirfd, name, mode) == 0;
    if (!made && (errno != EEXIST || exclusive))
        return -1;
    *out = open_child(dirfd, name);
    if (*out < 0)
        return -1;
    if (made && fchmod(*out, mode) != 0) {
        int e = errno;
        close(*out);
        errno = e;
        return -1;
    }
    return made;
}

static int folder_make(lua_State *L)
{
    int dir = *check_folder(L);
    const char *name = check_name(L, 2);
    mode_t mode = (mode_t)luaL_checkinteger(L, 3);
    int fd;
    if (make_child(dir, name, mode, lua_toboolean(L, 4), &fd) < 0)
        return fail(L, name, errno);
    push_folder(L, fd);
    return 1;
}

static int folder_make_temp(lua_State *L)
{
    int dir = *check_folder(L);
    const char *prefix = check_name(L, 2);
    mode_t mode = (mode_t)luaL_checkinteger(L, 3);
    static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char name[256];
    for (int tries = 0; tries < 100; tries++) {
        unsigned char r[6];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
            return fail(L, "getrandom", errno);
        char suffix[7];
        for (int i = 0; i < 6; i++)
            suffix[i] = letters[r[i] % (sizeof letters - 1)];
        suffix[6] = '\0';
        snprintf(name, sizeof name, "%.240s.%s", prefix, suffix);
        int fd;
        if (make_child(dir, name, mode, 1, &fd) >= 0) {
            push_folder(L, fd);
            lua_pushstring(L, name);
            return 2;
        }
        if (errno != EEXIST)
            return fail(L, name, errno);
    }
    return fail(L, prefix, EEXIST);
}

static int folder_chmod(lua_State *L)
{
    if (fchmod(*check_folder(L), (mode_t)luaL_checkinteger(L, 2)) != 0)
        return fail(L, "chmod", errno);
    lua_pushboolean(L, 1);
    return 1;
}

static int folder_chown(lua_State *L)
{
    int e = give_tree(*check_folder(L), (uid_t)luaL_checkinteger(L, 2),
                      (gid_t)luaL_checkinteger(L, 3), lua_isnone(L, 4) || lua_toboolean(L, 4));
    if (e)
        return fail(L, "chown", e);
    lua_pushboolean(L, 1);
    return 1;
}

static int folder_lock(lua_State *L)
{
    if (flock(*check_folder(L), LOCK_EX | LOCK_NB) != 0)
        return fail(L, "lock", errno);
    lua_pushboolean(L, 1);
    return 1;
}

static int folder_remove(lua_State *L)
{
    int dir = *check_folder(L);
    const char *name = check_name(L, 2);
    if (tree_remove_at(dir, name) != 0)
        return fail(L, name, errno);
    lua_pushboolean(L, 1);
    return 1;
}

static int folder_list(lua_State *L)
{
    size_t n = 0;
    char **names = sorted_names(*check_folder(L), &n);
    if (names == NULL)
        return fail(L, "list", errno);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    free_names(names, n);
    return 1;
}

static const luaL_Reg folder_methods[] = {
    {"path", folder_path},   {"fd", folder_fd},       {"ancestry", folder_ancestry},
    {"stat", folder_stat},   {"open", folder_open},   {"make", folder_make},
    {"make_temp", folder_make_temp}, {"chmod", folder_chmod}, {"chown", folder_chown},
    {"lock", folder_lock},   {"remove", folder_remove}, {"list", folder_list},
    {"close", folder_close}, {NULL, NULL}};

static const luaL_Reg folder_metamethods[] = {
    {"__gc", folder_close}, {"__close", folder_close}, {"__index", NULL}, {NULL, NULL}};

static const luaL_Reg sandbox_funcs[] = {
    {"seccomp_filter", l_seccomp_filter}, {"read_beneath", l_read_beneath},
    {"write_beneath", l_write_beneath},   {"list_beneath", l_list_beneath},
    {"usage", l_usage},                   {"chown_tree", l_chown_tree},
    {"private_mounts", l_private_mounts}, {"mount_tmpfs", l_mount_tmpfs},
    {"unmount", l_unmount},               {"space", l_space},
    {"open_folder", l_open_folder},       {NULL, NULL}};

int luaopen_rlm_core_sandbox(lua_State *L)
{
    host_newclass(L, FOLDER, folder_metamethods, folder_methods);
    luaL_newlib(L, sandbox_funcs);
    return 1;
}
