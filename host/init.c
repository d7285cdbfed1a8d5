/* init.c — rlm started as PID 1 (a container run without an init) splits in two, the way tini
 * does: a minimal init that forwards signals and reaps, and rlm as its child.
 *
 * Why: PID 1 inherits every orphan of its namespace. Each sandbox leaves one (bubblewrap's
 * pid-namespace init, whose parent is gone by the time it ends), and rlm waits only for the
 * children it started: a long `rlm mcp` in a container gathered one zombie per sandbox until the
 * container's pid limit refused every start. And PID 1 gets no default action for SIGTERM, so
 * `docker stop` waited out its timeout and then killed rlm before it could clean up. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "init.h"

/* The init's life: every signal but SIGCHLD goes to the child; every child that ends is reaped;
 * the child's end is the init's exit status (128 + the signal for a signal, as a shell says). */
static void serve_as_init(pid_t child)
{
    sigset_t all;
    sigfillset(&all);
    for (;;) {
        siginfo_t info;
        int sig = sigwaitinfo(&all, &info);
        if (sig < 0)
            continue;                       /* EINTR: a stop and continue */
        if (sig != SIGCHLD) {
            kill(child, sig);
            continue;
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0 || (pid < 0 && errno == EINTR))
            if (pid == child)
                _exit(WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
    }
}

void init_if_pid1(void)
{
    if (getpid() != 1)
        return;
    /* Blocked before the fork, so no signal is lost between the two: a blocked signal is kept
     * pending even for PID 1, which the kernel would otherwise drop with no handler set. */
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid_t child = fork();
    if (child > 0)
        serve_as_init(child);               /* never returns */
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (child < 0)
        return;                             /* no fork: rlm runs as PID 1 after all */
    /* A process group of its own, in the terminal's foreground when there is one: Ctrl-C then
     * reaches rlm once, from the terminal, and not a second time through the init. */
    setpgid(0, 0);
    if (isatty(STDIN_FILENO)) {
        struct sigaction ignore = {.sa_handler = SIG_IGN}, was;
        sigaction(SIGTTOU, &ignore, &was);  /* a background group may not take the terminal */
        tcsetpgrp(STDIN_FILENO, getpgrp());
        sigaction(SIGTTOU, &was, NULL);
    }
}
