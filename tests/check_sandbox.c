/* check_sandbox.c — lsandbox.c: the seccomp program, and file operations beneath a folder that
 * hold while another thread swaps a directory for a symbolic link. */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lauxlib.h>

#include "check_host.h"
#include "host.h"

static lua_State *L;

static void setup(void)
{
    L = host_newstate();
}

static void teardown(void)
{
    lua_close(L);
}

/* The filter's bytes, from Lua. */
static const char *filter_program(size_t *len)
{
    run_lua(L, "FILTER = require('rlm.core.sandbox').seccomp_filter()");
    lua_getglobal(L, "FILTER");
    return lua_tolstring(L, -1, len);
}

START_TEST(seccomp_program_denies_namespaces_and_keeps_fork)
{
    size_t len;
    const char *prog = filter_program(&len);
    ck_assert_uint_gt(len, 0);
    ck_assert_uint_eq(len % sizeof(struct sock_filter), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct sock_fprog fprog = {(unsigned short)(len / sizeof(struct sock_filter)),
                                   (struct sock_filter *)prog};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0)
            _exit(10);
        if (unshare(CLONE_NEWUSER) == 0 || errno != EPERM)
            _exit(11);
        if (syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, NULL) == 0 || errno != EPERM)
            _exit(12);
        if (syscall(SYS_clone3, NULL, 0) == 0 || errno != ENOSYS)
            _exit(13);
        if (syscall(SYS_bpf, 0, NULL, 0) == 0 || errno != EPERM)
            _exit(14);
        if (syscall(SYS_io_uring_setup, 1, NULL) == 0 || errno != EPERM)
            _exit(15);
        pid_t child = fork();             /* an ordinary fork still works */
        if (child == 0)
            _exit(0);
        int st;
        if (child < 0 || waitpid(child, &st, 0) != child || getpid() <= 0)
            _exit(16);
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child check %d failed",
                  WEXITSTATUS(status));
}
END_TEST

START_TEST(links_and_dotdot_are_refused_wherever_they_are)
{
    run_lua(L, "local sb = require 'rlm.core.sandbox'\n"
               "local sys = require 'rlm.core.sys'\n"
               "local root = assert(sys.mkdtemp('rlm-check'))\n"
               "local outside = assert(sys.mkdtemp('rlm-check'))\n"
               "assert(sys.write_file(outside .. '/secret', 'S'))\n"
               "assert(sb.write_beneath(root, 'a/b/c.txt', 'data', {mkdirs = true}))\n"
               "assert(sb.read_beneath(root, 'a/b/c.txt') == 'data')\n"
               "assert(sys.mkdir_p(root .. '/d'))\n"
               "os.execute(('ln -s %s %s/link; ln -s %s/secret %s/d/last'):format(outside, root, outside, root))\n"
               "for _, rel in ipairs{'link/secret', 'd/last', 'd/../link/secret', '../x', '/etc/passwd'} do\n"
               "  local data, err = sb.read_beneath(root, rel)\n"
               "  assert(data == nil and err, rel)\n"
               "  local ok = sb.write_beneath(root, rel == 'd/last' and 'link/new' or rel, 'x', {mkdirs = true})\n"
               "  assert(ok == nil, rel)\n"
               "end\n"
               "local _, err = sb.read_beneath(root, 'link/secret')\n"
               "assert(err:find('symbolic link'), err)\n"
               "assert(sb.list_beneath(root, 'link') == nil)\n"
               "local names = {}\n"
               "for _, e in ipairs(assert(sb.list_beneath(root, '.'))) do names[#names + 1] = e.path .. ':' .. e.type end\n"
               "assert(table.concat(names, ' ') == 'a:dir a/b:dir a/b/c.txt:file d:dir d/last:link link:link',\n"
               "       table.concat(names, ' '))\n"
               "assert(#sys.list_dir(outside) == 1)\n"
               "assert(sb.usage(root) > 0)\n"
               "os.execute('mkfifo ' .. root .. '/fifo')\n"
               "assert(sb.read_beneath(root, 'fifo') == nil, 'a FIFO is not read (it would block)')\n"
               "sys.remove(root, true); sys.remove(outside, true)");
}
END_TEST

/* The race: a thread swaps root/d (a directory) and root/l (a link to `outside`) as fast as
 * it can, while the test writes, reads and lists beneath root/d. */
struct swapper {
    int rootfd;
    volatile int stop;
    long swaps;
};

static void *swap_loop(void *arg)
{
    struct swapper *s = arg;
    while (!s->stop)
        if (syscall(SYS_renameat2, s->rootfd, "d", s->rootfd, "l", 2 /* RENAME_EXCHANGE */) == 0)
            s->swaps++;
    return NULL;
}

START_TEST(operations_hold_against_a_swapping_thread)
{
    char root[] = "/tmp/rlm-race-XXXXXX", outside[] = "/tmp/rlm-outside-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(root));
    ck_assert_ptr_nonnull(mkdtemp(outside));
    char path[256];
    snprintf(path, sizeof path, "%s/d", root);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/d/decoy", root);
    FILE *f = fopen(path, "w");
    fputs("decoy", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/marker", outside);
    f = fopen(path, "w");
    fputs("HOST", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/l", root);
    ck_assert_int_eq(symlink(outside, path), 0);

    struct swapper s = {.rootfd = open(root, O_RDONLY | O_DIRECTORY)};
    pthread_t t;
    pthread_create(&t, NULL, swap_loop, &s);
    lua_pushstring(L, root);
    lua_setglobal(L, "ROOT");
    run_lua(L, "local sb = require 'rlm.core.sandbox'\n"
               "local wrote, read = 0, 0\n"
               "for k = 1, 5000 do\n"
               "  if sb.write_beneath(ROOT, 'd/f' .. k, 'x') then wrote = wrote + 1 end\n"
               "  local data = sb.read_beneath(ROOT, 'd/marker')\n"
               "  assert(data == nil, 'read the host file through the link')\n"
               "  if sb.read_beneath(ROOT, 'd/decoy') then read = read + 1 end\n"
               "  if k % 10 == 0 then\n"
               "    for _, e in ipairs(sb.list_beneath(ROOT, 'd') or {}) do\n"
               "      assert(not e.path:find('marker'), 'listed the host folder')\n"
               "    end\n"
               "  end\n"
               "end\n"
               "assert(wrote > 0 and read > 0, ('no work got through: %d %d'):format(wrote, read))");
    s.stop = 1;
    pthread_join(t, NULL);
    close(s.rootfd);
    ck_assert_int_gt(s.swaps, 1000);
    /* The outside folder holds its marker and nothing else. */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "test \"$(ls -A %s)\" = marker", outside);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", root, outside);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *make_sandbox_suite(void)
{
    Suite *s = suite_create("sandbox");
    TCase *tc = tcase_create("Core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, seccomp_program_denies_namespaces_and_keeps_fork);
    tcase_add_test(tc, links_and_dotdot_are_refused_wherever_they_are);
    tcase_add_test(tc, operations_hold_against_a_swapping_thread);
    suite_add_tcase(s, tc);
    return s;
}
