/* spawn.h — the mechanism under rlm.core.proc's spawn (host/lproc.c): a child started by
 * vfork that only makes system calls (its descriptors, limits and identity) before it execs,
 * and the descriptors handed to it. */
#ifndef RLM_SPAWN_H
#define RLM_SPAWN_H
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#define MAX_PASS 32

/* What the child is set up with beyond its stdio, prepared in the parent before fork so that
 * the child only makes system calls. */
struct child_setup {
    int npass, pass_src[MAX_PASS], pass_fd[MAX_PASS];
    int nlimits, limit_res[8];
    struct rlimit limit_val[8];
    long uid, gid;                 /* -1: unchanged */
    char **paths;                  /* with an env: where to exec argv[0] from, NULL-terminated */
};

/* Starts argv (execed from cs->paths when given) in a process group of its own, in cwd
 * (NULL: rlm's), with child[0..2] as its stdin, stdout and stderr (-1: rlm's own; stderr -2:
 * its stdout); the child reports the errno of a failure on status_fd. Returns the pid, or -1
 * with errno. */
pid_t spawn_child(char **argv, char **envp, const char *cwd, const int child[3],
                  int status_fd, const struct child_setup *cs);

/* A sealed, read-only memfd holding data; -1 with errno on failure. */
int sealed_memfd(const char *data, size_t len);

/* A regular file opened read-only for a child; when optional, one that cannot be opened is
 * passed empty. -1 with errno otherwise. */
int open_passed_file(const char *path, int optional);

/* Closes the descriptors cs would pass. */
void close_passed(struct child_setup *cs);

#endif
