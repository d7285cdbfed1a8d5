/* tree.c — removing a folder tree without following links (tree.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tree.h"

/* Removing a tree that a sandbox's code could still be changing (its workspace) must never
 * follow a symbolic link: by path, a folder emptied and then swapped for a link to a host
 * folder would have rlm (root, often) delete that host folder's files. So each folder is opened
 * by descriptor with O_NOFOLLOW and its entries removed relative to it (unlinkat): a link swapped
 * in anywhere is removed as a link. A folder deeper than REMOVE_DEPTH is first moved up to the
 * top (renameat), so a tree of any depth costs at most REMOVE_DEPTH open descriptors. */
#define REMOVE_DEPTH 32

static int remove_entries(int top, int dfd, int depth, unsigned *moved);

/* Opens folder name of dfd to empty it, never through a link. A folder of this process's own
 * user that it may not list or change (code that took the permissions off its own folders,
 * as an ordinary user's sandbox may) gets them back first: the owner may always chmod, here
 * through an O_PATH descriptor (/proc/self/fd), which needs no permission on the folder. */
static int open_to_empty(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd >= 0) {
        if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0700) != 0700)
            fchmod(fd, (st.st_mode & 07777) | 0700);
        return fd;
    }
    if (errno != EACCES)
        return -1;
    int path = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (path < 0)
        return -1;
    char proc[32];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", path);
    if (fstat(path, &st) == 0 && st.st_uid == geteuid() &&
        chmod(proc, (st.st_mode & 07777) | 0700) == 0)
        fd = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    else
        errno = EACCES;
    int e = errno;
    close(path);
    errno = e;
    return fd;
}

/* Removes entry name of folder dfd, whatever it is (ENOENT: already gone). */
static int remove_at(int top, int dfd, const char *name, int depth, unsigned *moved)
{
    for (int tries = 0; tries < 3; tries++) {
        if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
            return 0;
        if (errno != EISDIR && errno != EPERM)
            return -1;
        if (depth >= REMOVE_DEPTH) {
            char up[32];
            snprintf(up, sizeof up, ".rlm-deep-%u", (*moved)++);
            return renameat(dfd, name, top, up) == 0 || errno == ENOENT ? 0 : -1;
        }
        int fd = open_to_empty(dfd, name);
        if (fd < 0) {
            if (errno == ENOENT)
                return 0;
            if (errno == ELOOP || errno == ENOTDIR)
                continue;             /* no longer a folder: unlink it as what it is now */
            return -1;
        }
        int r = remove_entries(top, fd, depth + 1, moved);
        close(fd);
        if (r != 0)
            return -1;
        return unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
    }
    return -1;
}

static int remove_entries(int top, int dfd, int depth, unsigned *moved)
{
    int own = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = own >= 0 ? fdopendir(own) : NULL;
    if (d == NULL) {
        if (own >= 0)
            close(own);
        return -1;
    }
    rewinddir(d);                 /* a dup shares the offset: the top is read more than once */
    int r = 0, e = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        if (remove_at(top, dfd, ent->d_name, depth, moved) != 0 && r == 0) {
            r = -1;
            e = errno;
        }
    }
    closedir(d);
    errno = e;
    return r;
}

int tree_remove_at(int dirfd, const char *name)
{
    int fd = open_to_empty(dirfd, name);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        if (errno != ELOOP && errno != ENOTDIR)
            return -1;
        return unlinkat(dirfd, name, 0) == 0 || errno == ENOENT ? 0 : -1;
    }
    /* Folders moved up from the depth come back to the top: passes until it is empty. */
    unsigned moved = 0, before;
    int r;
    do {
        before = moved;
        r = remove_entries(fd, fd, 0, &moved);
    } while (r == 0 && moved != before);
    int e = errno;
    close(fd);
    if (r != 0) {
        errno = e;
        return -1;
    }
    return unlinkat(dirfd, name, AT_REMOVEDIR);
}
