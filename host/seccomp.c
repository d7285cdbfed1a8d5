/* seccomp.c — build/seccomp_gen: compiles the local sandbox's system-call filter with
 * libseccomp and prints it as C (build/seccomp_bpf.c), so that rlm carries the program ready
 * made instead of building it in every process that starts a sandbox. libseccomp's compiler
 * is used rather than hand-written BPF: it handles every architecture and ABI of the build
 * machine correctly.
 * bwrap installs the program (--seccomp FD); host/lsandbox.c hands it over. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <seccomp.h>

/* What a Python sandbox never needs and an attacker would reach for: namespaces and mounts
 * (a way back to capabilities), kernel interfaces with a history of exploits (bpf, io_uring,
 * keyctl, perf_event_open, userfaultfd), other processes' memory, the machine's own state
 * (modules, kexec, clocks, swap, reboot, accounting, quotas), and memfd_create (anonymous files
 * that no size limit of the sandbox counts). They fail with EPERM. */
static const int denied_calls[] = {
    SCMP_SYS(unshare), SCMP_SYS(setns), SCMP_SYS(mount), SCMP_SYS(umount2), SCMP_SYS(pivot_root),
    SCMP_SYS(chroot), SCMP_SYS(move_mount), SCMP_SYS(open_tree), SCMP_SYS(fsopen),
    SCMP_SYS(fsconfig), SCMP_SYS(fsmount), SCMP_SYS(fspick), SCMP_SYS(mount_setattr),
    SCMP_SYS(bpf), SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter), SCMP_SYS(io_uring_register),
    SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key), SCMP_SYS(perf_event_open),
    SCMP_SYS(userfaultfd), SCMP_SYS(ptrace), SCMP_SYS(process_vm_readv),
    SCMP_SYS(process_vm_writev), SCMP_SYS(kcmp), SCMP_SYS(pidfd_getfd), SCMP_SYS(kexec_load),
    SCMP_SYS(kexec_file_load), SCMP_SYS(init_module), SCMP_SYS(finit_module),
    SCMP_SYS(delete_module), SCMP_SYS(swapon), SCMP_SYS(swapoff), SCMP_SYS(reboot),
    SCMP_SYS(settimeofday), SCMP_SYS(clock_settime), SCMP_SYS(clock_adjtime), SCMP_SYS(adjtimex),
    SCMP_SYS(acct), SCMP_SYS(quotactl), SCMP_SYS(syslog), SCMP_SYS(lookup_dcookie),
    SCMP_SYS(vhangup), SCMP_SYS(iopl), SCMP_SYS(ioperm), SCMP_SYS(name_to_handle_at),
    SCMP_SYS(open_by_handle_at), SCMP_SYS(fanotify_init), SCMP_SYS(memfd_create),
};

/* clone's flags are its first argument: each namespace flag refuses the call. */
static const unsigned long namespace_flags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,
                                                CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
                                                CLONE_NEWCGROUP, 0x80 /* CLONE_NEWTIME */};

/* Injecting input into the controlling terminal, or reaching the console through it. */
static const unsigned long terminal_ioctls[] = {TIOCSTI, TIOCLINUX};

/* Socket families: Python needs unix (1), inet (2), inet6 (10) and netlink (16, for its
 * interfaces); every other is refused, vsock (40) above all: it is not namespaced, so a
 * sandbox without network could reach the host's vsock services. A rule compares one value,
 * so the families below netlink are listed and those above refused by one comparison. */
static const unsigned long refused_families[] = {0, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15};
#define LAST_FAMILY 16

/* personality(2) may only read the persona (0xffffffff) or set PER_LINUX (0): a persona without
 * address randomisation (or with READ_IMPLIES_EXEC) would outlive exec. A rule compares one
 * value, but a 32-bit value other than all zeros or all ones has, going round its bits, a set
 * bit followed by a clear one: one rule per such pair refuses exactly the rest. */
static int add_personality_rules(scmp_filter_ctx ctx)
{
    int r = 0;
    for (unsigned bit = 0; r == 0 && bit < 32; bit++) {
        unsigned long set = 1UL << bit, clear = 1UL << ((bit + 1) % 32);
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, set | clear, set));
    }
    return r;
}

static int add_socket_rules(scmp_filter_ctx ctx)
{
    int r = 0;
    const int calls[] = {SCMP_SYS(socket), SCMP_SYS(socketpair)};
    for (size_t c = 0; r == 0 && c < sizeof calls / sizeof *calls; c++) {
        for (size_t i = 0; r == 0 && i < sizeof refused_families / sizeof *refused_families; i++)
            r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), calls[c], 1,
                                 SCMP_A0(SCMP_CMP_EQ, refused_families[i]));
        if (r == 0)
            r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), calls[c], 1,
                                 SCMP_A0(SCMP_CMP_GT, LAST_FAMILY));
    }
    return r;
}

static int add_rules(scmp_filter_ctx ctx)
{
    int r = 0;
    for (size_t i = 0; r == 0 && i < sizeof denied_calls / sizeof *denied_calls; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), denied_calls[i], 0);
    for (size_t i = 0; r == 0 && i < sizeof namespace_flags / sizeof *namespace_flags; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, namespace_flags[i], namespace_flags[i]));
    /* clone3 passes its flags in memory, where a filter cannot look: ENOSYS makes glibc and
     * Python fall back to clone, which is checked above. */
    if (r == 0)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    for (size_t i = 0; r == 0 && i < sizeof terminal_ioctls / sizeof *terminal_ioctls; i++)
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                             SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, terminal_ioctls[i]));
    if (r == 0)
        r = add_personality_rules(ctx);
    if (r == 0)
        r = add_socket_rules(ctx);
    return r;
}

/* Prints the program as a C array to stdout; 0, or -errno from libseccomp. */
static int print_program(scmp_filter_ctx ctx)
{
    FILE *tmp = tmpfile();
    if (tmp == NULL)
        return -errno;
    int r = seccomp_export_bpf(ctx, fileno(tmp));
    long size = r == 0 ? lseek(fileno(tmp), 0, SEEK_CUR) : -1;
    if (r == 0 && size <= 0)
        r = -EIO;
    if (r == 0) {
        rewind(tmp);
        printf("/* Generated by build/seccomp_gen from host/seccomp.c. */\n"
               "#include <stddef.h>\n#include \"seccomp.h\"\n"
               "const unsigned char seccomp_bpf[] = {");
        for (long i = 0; i < size; i++)
            printf("%s%d", i == 0 ? "\n    " : i % 16 ? "," : ",\n    ", getc(tmp));
        printf("\n};\nconst size_t seccomp_bpf_len = %ld;\n", size);
    }
    fclose(tmp);
    return r;
}

int main(void)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL) {
        fputs("seccomp_gen: cannot create a filter (out of memory)\n", stderr);
        return 1;
    }
    /* On x86-64 the 32-bit ABIs are other doors to the same kernel: the same rules go there. */
    int r = 0;
    if (seccomp_arch_native() == SCMP_ARCH_X86_64) {
        r = seccomp_arch_add(ctx, SCMP_ARCH_X86);
        if (r == 0)
            r = seccomp_arch_add(ctx, SCMP_ARCH_X32);
    }
    /* A binary tree of the rules rather than a chain: every system call the code makes runs
     * the filter, so its depth is what the sandbox pays. */
    if (r == 0)
        r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    if (r == 0)
        r = add_rules(ctx);
    if (r == 0)
        r = print_program(ctx);
    seccomp_release(ctx);
    if (r != 0) {
        fprintf(stderr, "seccomp_gen: cannot build the sandbox's filter: %s\n", strerror(-r));
        return 1;
    }
    return 0;
}
