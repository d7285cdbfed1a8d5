/* mounts.c — rlm's own mount namespace and the tmpfs mounts in it (mounts.h). */
#include "mounts.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "fdio.h"

static int write_proc(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = write_all(fd, text, strlen(text));
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Maps id to itself in the user namespace just made (uid_map or gid_map). */
static int map_self(const char *file, unsigned id)
{
    char map[64];
    snprintf(map, sizeof map, "%u %u 1\n", id, id);
    return write_proc(file, map);
}

int mounts_enter_private(const char **step)
{
    static int entered;
    if (entered)
        return 0;
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (uid == 0) {
        *step = "unshare(CLONE_NEWNS)";
        if (unshare(CLONE_NEWNS) != 0)
            return -1;
    } else {
        *step = "unshare(CLONE_NEWUSER | CLONE_NEWNS)";
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
            return -1;
        /* An unprivileged process may map only its own ids, and its gid only once it has given
         * up setgroups. */
        *step = "writing /proc/self/setgroups, uid_map and gid_map";
        if (write_proc("/proc/self/setgroups", "deny") != 0 ||
            map_self("/proc/self/uid_map", uid) != 0 || map_self("/proc/self/gid_map", gid) != 0)
            return -1;
    }
    /* A slave: the host's mounts still arrive (a volume store mounted later, say), ours never
     * leave. */
    *step = "making / a slave mount";
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0)
        return -1;
    entered = 1;
    return 0;
}

int mounts_tmpfs(const char *path, uint64_t bytes, uint64_t inodes)
{
    char opts[128];
    snprintf(opts, sizeof opts, "size=%llu,nr_inodes=%llu,mode=0711", (unsigned long long)bytes,
             (unsigned long long)inodes);
    return mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, opts);
}

int mounts_detach(const char *path)
{
    return umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW);
}

int mounts_space(const char *path, uint64_t *used, uint64_t *size)
{
    struct statfs st;
    if (statfs(path, &st) != 0)
        return -1;
    *used = (uint64_t)(st.f_blocks - st.f_bfree) * (uint64_t)st.f_bsize;
    *size = (uint64_t)st.f_blocks * (uint64_t)st.f_bsize;
    return 0;
}
