/* check_sys.c — lsys.c and lproc.c: files, processes and their pipes on the loop. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

START_TEST(atomic_write_replaces_and_leaves_no_temp_files)
{
    run_lua(L, "local sys = require 'rlm.core.sys'\n"
               "local dir = assert(sys.mkdtemp('rlm-check'))\n"
               "assert(sys.write_file(dir .. '/f', 'one'))\n"
               "assert(sys.write_file(dir .. '/f', 'two', 384))\n"
               "assert(sys.read_file(dir .. '/f') == 'two')\n"
               "assert(sys.stat(dir .. '/f').mode == 384)\n"
               "local names = sys.list_dir(dir)\n"
               "assert(#names == 1, #names)\n"
               "assert(sys.remove(dir, true))\n"
               "assert(sys.stat(dir) == nil)");
}
END_TEST

START_TEST(process_output_and_exit_status)
{
    run_lua(L, "local sys = require 'rlm.core.proc'\n"
               "local loop = require 'rlm.core.loop'\n"
               "local p = assert(sys.spawn{argv = {'/bin/sh', '-c', 'read x; echo \"$x!\"; exit 7'}})\n"
               "p:write('hi\\n')\n"
               "local deadline = loop.now() + 5\n"
               "while not p:status() and loop.now() < deadline do loop.poll(0.05) end\n"
               "while not p:eof('stdout') and loop.now() < deadline do loop.poll(0.05) end\n"
               "assert(p:line() == 'hi!')\n"
               "local how, code = p:status()\n"
               "assert(how == 'exit' and code == 7, tostring(how) .. ' ' .. tostring(code))\n"
               "p:close()");
}
END_TEST

START_TEST(misuse_raises_with_a_clear_message)
{
    run_lua(L, "local sys = require 'rlm.core.proc'\n"
               "local ok, err = pcall(sys.spawn, {argv = {}})\n"
               "assert(not ok and err:find('non%-empty list'), err)\n"
               "ok, err = pcall(sys.spawn, {argv = {'true'}, stdout = 'bogus'})\n"
               "assert(not ok and err:find('stdout must be'), err)\n"
               "ok, err = pcall(sys.kill, 1, 'NOPE')\n"
               "assert(not ok and err:find('unknown signal'), err)");
}
END_TEST

/* spawn starts children by vfork: the child shares rlm's memory until it execs, while rlm's
 * other threads (curl's threaded resolver: getaddrinfo reads LOCALDOMAIN, RES_OPTIONS,
 * HOSTALIASES) run on. The child must never point `environ` at the env it was given (as
 * execvp would need): those threads would read the child's environment. */
extern char **environ;
static atomic_int env_watching;
static atomic_long env_foreign, env_probe_seen;

static void *watch_environ(void *arg)
{
    char **own = arg;
    while (atomic_load(&env_watching)) {
        char **now = *(char **volatile *)&environ;
        if (now != own)
            atomic_fetch_add(&env_foreign, 1);
        const char *v = getenv("RLM_VFORK_PROBE");
        if (v != NULL && strcmp(v, "child") == 0)
            atomic_fetch_add(&env_probe_seen, 1);
    }
    return NULL;
}

START_TEST(spawn_never_shows_other_threads_the_childs_environment)
{
    unsetenv("RLM_VFORK_PROBE");
    atomic_store(&env_watching, 1);
    atomic_store(&env_foreign, 0);
    atomic_store(&env_probe_seen, 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, watch_environ, environ), 0);
    run_lua(L, "local sys = require 'rlm.sys'\n"
               "for _ = 1, 300 do\n"
               "  local p = assert(sys.spawn{argv = {'true'}, stdin = 'null', stdout = 'null',\n"
               "                             stderr = 'null',\n"
               "                             env = {RLM_VFORK_PROBE = 'child', PATH = '/usr/bin:/bin'}})\n"
               "  assert(sys.wait(p, 5) == 'exit')\n"
               "  p:close()\n"
               "end");
    atomic_store(&env_watching, 0);
    pthread_join(t, NULL);
    ck_assert_msg(atomic_load(&env_foreign) == 0 && atomic_load(&env_probe_seen) == 0,
                  "another thread saw environ swapped %ld times, the child's RLM_VFORK_PROBE %ld "
                  "times", atomic_load(&env_foreign), atomic_load(&env_probe_seen));
}
END_TEST

/* rlm's handler sets a hook on the Lua state, which no other thread may touch while the Lua
 * thread runs. The threads rlm's libraries start take no signal (check_http.c), but a thread
 * rlm did not make could still take one (the kernel gives a process's signal to any thread that
 * has it open, as soon as the Lua thread has one pending or waits in vfork): there the handler
 * must pass it on to the Lua thread and touch nothing itself. The Lua thread holds SIGHUP
 * blocked meanwhile, so what is passed on stays pending where the test can see it. */
static void *take_sighup_here(void *arg)
{
    (void)arg;
    sigset_t hup;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    pthread_sigmask(SIG_UNBLOCK, &hup, NULL);
    pthread_kill(pthread_self(), SIGHUP);       /* rlm's handler runs here before this returns */
    return NULL;
}

START_TEST(a_signal_another_thread_takes_is_handled_on_the_lua_thread)
{
    host_install_signals(L);
    sigset_t hup, was, pending;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &hup, &was);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, take_sighup_here, NULL), 0);
    pthread_join(t, NULL);
    int hook_set_there = lua_gethook(L) != NULL, noted_there = host_signal;
    sigpending(&pending);
    int passed_on = sigismember(&pending, SIGHUP);
    pthread_sigmask(SIG_SETMASK, &was, NULL);   /* the handler runs now, on this thread */
    int hook_set_here = lua_gethook(L) != NULL, noted_here = host_signal;
    char message[512] = "it ran to its end";
    if (luaL_loadstring(L, "for _ = 1, 10 do end") == LUA_OK && host_pcall(L, 0, 0) != LUA_OK)
        snprintf(message, sizeof message, "%s", lua_tostring(L, -1));
    lua_settop(L, 0);
    run_lua(L, "for _ = 1, 10 do end");         /* handled once: no second interrupt */
    struct sigaction dfl = {.sa_handler = SIG_DFL};   /* CK_FORK=no: later tests keep defaults */
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGTERM, &dfl, NULL);
    sigaction(SIGHUP, &dfl, NULL);
    sigaction(SIGQUIT, &dfl, NULL);
    host_signal = 0;
    ck_assert_msg(!hook_set_there && noted_there == 0,
                  "rlm's handler touched the Lua state from another thread (hook %d, signal %d)",
                  hook_set_there, noted_there);
    ck_assert_msg(passed_on, "the other thread did not pass SIGHUP on to the Lua thread");
    ck_assert_msg(hook_set_here && noted_here == SIGHUP,
                  "on the Lua thread the handler set no hook (%d) or noted %d", hook_set_here,
                  noted_here);
    ck_assert_msg(strstr(message, "interrupted (SIGHUP)"), "the Lua code was not interrupted: %s",
                  message);
}
END_TEST

/* The child changes identity by raw system calls, which act on the calling task alone: with
 * another thread of rlm running, the child is exactly uid/gid 65534 with no groups, and rlm and
 * its other thread stay as they were. */
static atomic_int idle_running;
static atomic_int idle_tid;

static void *idle_thread(void *arg)
{
    (void)arg;
    atomic_store(&idle_tid, (int)gettid());
    while (atomic_load(&idle_running))
        usleep(1000);
    return NULL;
}

START_TEST(spawn_drops_the_child_alone_to_its_uid_and_gid)
{
    if (geteuid() != 0)
        return;                      /* only root can change a child's identity */
    atomic_store(&idle_running, 1);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, idle_thread, NULL), 0);
    while (atomic_load(&idle_tid) == 0)
        usleep(1000);
    run_lua(L, "local sys = require 'rlm.sys'\n"
               "for _, ids in ipairs{{uid = 65534, gid = 65534}, {gid = 65534}} do\n"
               "  local r = assert(sys.run({'/bin/grep', '-E', '^(Uid|Gid|Groups):',\n"
               "                            '/proc/self/status'}, ids))\n"
               "  local u, g = tostring(ids.uid or 0), tostring(ids.gid)\n"
               "  assert(r.stdout:find('Uid:\\t' .. u .. '\\t' .. u .. '\\t' .. u .. '\\t' .. u .. '\\n', 1, true), r.stdout)\n"
               "  assert(r.stdout:find('Gid:\\t' .. g .. '\\t' .. g .. '\\t' .. g .. '\\t' .. g .. '\\n', 1, true), r.stdout)\n"
               "  assert(r.stdout:match('Groups:%s*$'), r.stdout)\n"
               "end");
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", atomic_load(&idle_tid));
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    int uid_ok = 0, gid_ok = 0;
    while (fgets(line, sizeof line, f)) {
        uid_ok |= strcmp(line, "Uid:\t0\t0\t0\t0\n") == 0;
        gid_ok |= strcmp(line, "Gid:\t0\t0\t0\t0\n") == 0;
    }
    fclose(f);
    atomic_store(&idle_running, 0);
    pthread_join(t, NULL);
    ck_assert_msg(uid_ok && gid_ok, "rlm's other thread changed identity");
    ck_assert_int_eq(geteuid(), 0);
    ck_assert_int_eq(getegid(), 0);
}
END_TEST

Suite *make_sys_suite(void)
{
    Suite *s = suite_create("sys");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);      /* 300 spawns beside a spinning thread, on a loaded machine */
    tcase_add_test(tc, atomic_write_replaces_and_leaves_no_temp_files);
    tcase_add_test(tc, process_output_and_exit_status);
    tcase_add_test(tc, misuse_raises_with_a_clear_message);
    tcase_add_test(tc, spawn_never_shows_other_threads_the_childs_environment);
    tcase_add_test(tc, a_signal_another_thread_takes_is_handled_on_the_lua_thread);
    tcase_add_test(tc, spawn_drops_the_child_alone_to_its_uid_and_gid);
    suite_add_tcase(s, tc);
    return s;
}
