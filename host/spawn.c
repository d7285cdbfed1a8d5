/* spawn.c — the vfork child and what it is handed (spawn.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdio.h"
#include "spawn.h"

static void child_fail(int status_fd)
{
    int e = errno;
    ssize_t r = write(status_fd, &e, sizeof e);
    (void)r;
    _exit(127);
}

/* Marks every descriptor from 3 up close-on-exec (close_range needs Linux 5.11). */
static void cloexec_from_3(void)
{
    if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
        return;
    struct rlimit rl;
    long top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur
                                                                                : 65536;
    for (long fd = 3; fd < top; fd++)
        fcntl((int)fd, F_SETFD, FD_CLOEXEC);
}

/* Puts the pass descriptors at their numbers. They are first moved above every number in
 * play, so that placing one never overwrites another (or the status pipe). */
static int place_passed(const struct child_setup *cs, int *status_fd)
{
    int floor = 3;
    for (int i = 0; i < cs->npass; i++)
        if (cs->pass_fd[i] >= floor)
            floor = cs->pass_fd[i] + 1;
    int moved[MAX_PASS];
    int status_moved = fcntl(*status_fd, F_DUPFD_CLOEXEC, floor);
    if (status_moved < 0)
        return -1;                 /* reported on the status pipe where it is */
    *status_fd = status_moved;
    for (int i = 0; i < cs->npass; i++)
        if ((moved[i] = fcntl(cs->pass_src[i], F_DUPFD_CLOEXEC, floor)) < 0)
            return -1;
    for (int i = 0; i < cs->npass; i++)
        if (dup2(moved[i], cs->pass_fd[i]) < 0)
            return -1;
    return 0;
}

/* The identity calls are made as raw system calls: glibc's wrappers tell every other thread
 * of the process to change too, and in a vfork child those threads are rlm's own. Where the
 * plain calls take 16-bit ids (i386, 32-bit ARM), the 32-bit ones are used, as glibc does. */
#ifdef SYS_setresuid32
#define SYS_SETRESUID SYS_setresuid32
#define SYS_SETRESGID SYS_setresgid32
#define SYS_SETGROUPS SYS_setgroups32
#else
#define SYS_SETRESUID SYS_setresuid
#define SYS_SETRESGID SYS_setresgid
#define SYS_SETGROUPS SYS_setgroups
#endif

static int drop_privileges(const struct child_setup *cs)
{
    for (int i = 0; i < cs->nlimits; i++)
        if (setrlimit(cs->limit_res[i], &cs->limit_val[i]) != 0)
            return -1;
    if (cs->gid >= 0 && (syscall(SYS_SETGROUPS, 0, NULL) != 0 ||
                         syscall(SYS_SETRESGID, cs->gid, cs->gid, cs->gid) != 0))
        return -1;
    if (cs->uid >= 0 && syscall(SYS_SETRESUID, cs->uid, cs->uid, cs->uid) != 0)
        return -1;
    return 0;
}

/* In the child: every signal rlm handles or ignores back to its default action. exec would
 * reset the handled ones, not the ignored ones (SIGPIPE); and from here on a signal to the
 * child acts on the child alone. Before it, one of rlm's handlers may run in the child: it
 * does what it would do in rlm (note the signal, wake the loop, set a Lua hook), while rlm's
 * thread is held in vfork, so that is no race. */
static void default_signals(void)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL}, old;
    for (int sig = 1; sig < NSIG; sig++)
        if (sigaction(sig, NULL, &old) == 0 && old.sa_handler != SIG_DFL)
            sigaction(sig, &dfl, NULL);
}

/* Makes fd `target` a copy of fd, inheritable (dup2 onto itself would keep close-on-exec). */
static void wire(int fd, int target)
{
    if (fd == target)
        fcntl(fd, F_SETFD, 0);
    else
        dup2(fd, target);
}

/* Runs the file at path with /bin/sh, as execvp does for a file without a "#!" line; its
 * argument list is on the child's own stack. Returns only on failure. */
static void exec_script(const char *path, char **argv, char **envp)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    char *sh_argv[argc + 2];
    sh_argv[0] = "/bin/sh";
    sh_argv[1] = (char *)path;
    for (int i = 1; i <= argc; i++)   /* argv[1..] and its NULL */
        sh_argv[i + 1] = argv[i];
    execve(sh_argv[0], sh_argv, envp);
}

/* Execs argv in the child: from cs->paths with an env (the places its PATH gives, tried as
 * execvp tries them: past any that is missing or not allowed, a file without "#!" by
 * /bin/sh), else as execvp does. Returns only on failure, with errno. */
static void exec_argv(char **argv, char **envp, const struct child_setup *cs)
{
    if (envp == NULL) {
        execvp(argv[0], argv);
        return;
    }
    int denied = 0;
    for (char **path = cs->paths; *path; path++) {
        execve(*path, argv, envp);
        if (errno == ENOEXEC) {
            exec_script(*path, argv, envp);
            return;
        }
        if (errno == EACCES)
            denied = 1;
        else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV &&
                 errno != ETIMEDOUT)
            return;
    }
    if (denied)
        errno = EACCES;
}

/* In the vfork child, which shares rlm's memory until it execs: wire stdio and the passed
 * descriptors, close everything else, own process group, signals, limits and identity, cwd,
 * exec. Reports errno on status_fd. It writes only its own stack (never `environ`: rlm's other
 * threads read it meanwhile), and calls nothing that allocates or takes a lock (a thread of
 * rlm's could hold it). */
static void child_exec(char **argv, char **envp, const char *cwd, int in, int out, int err,
                       int status_fd, const struct child_setup *cs)
{
    setpgid(0, 0);
    default_signals();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (place_passed(cs, &status_fd) != 0)
        child_fail(status_fd);
    if (in >= 0)
        wire(in, 0);
    if (out >= 0)
        wire(out, 1);
    if (err == -2)
        dup2(1, 2);
    else if (err >= 0)
        wire(err, 2);
    cloexec_from_3();
    for (int i = 0; i < cs->npass; i++)
        fcntl(cs->pass_fd[i], F_SETFD, 0);
    if (drop_privileges(cs) != 0)
        child_fail(status_fd);
    if (cwd && chdir(cwd) != 0)
        child_fail(status_fd);
    exec_argv(argv, envp, cs);
    child_fail(status_fd);
}

/* Starts the child: vfork, because fork copies rlm's page tables and then every page rlm
 * writes is copied once more, which costs a user-visible share of a sandbox's start once rlm
 * holds a big context (make bench prints both). rlm's thread waits until the child has called
 * exec or exited; a signal sent to rlm meanwhile stays pending (rlm's other threads have every
 * signal blocked, see host.c) and is handled when the wait ends. Returns the pid, or -1 with
 * errno. */
pid_t spawn_child(char **argv, char **envp, const char *cwd, const int child[3],
                  int status_fd, const struct child_setup *cs)
{
    pid_t pid = vfork();
    if (pid == 0)
        child_exec(argv, envp, cwd, child[0], child[1], child[2], status_fd, cs);
    return pid;
}

/* A sealed, read-only memfd holding data; -1 with errno on failure. */
int sealed_memfd(const char *data, size_t len)
{
    int fd = memfd_create("rlm-pass", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    if (write_all(fd, data, len) != 0 || lseek(fd, 0, SEEK_SET) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* A regular file opened read-only for a child (O_NONBLOCK: a FIFO put in its place cannot hold
 * rlm); when optional, one that cannot be opened is passed empty. -1 with errno otherwise. */
int open_passed_file(const char *path, int optional)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        fd = -1;
        errno = EINVAL;
    }
    if (fd < 0 && optional)
        return sealed_memfd("", 0);
    if (fd >= 0)
        fcntl(fd, F_SETFL, 0);    /* blocking again for the child's reads */
    return fd;
}

void close_passed(struct child_setup *cs)
{
    for (int i = 0; i < cs->npass; i++)
        close(cs->pass_src[i]);
    cs->npass = 0;
}
