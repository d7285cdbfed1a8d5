/* loop.h — the host's one event loop (host/loop.c; its Lua face is host/lloop.c): curl transfers, watched file descriptors (child
 * pipes) and timers, all waited on by a single epoll set.
 *
 * Everything here is C-to-C: callbacks never touch Lua. A binding tells the Lua scheduler
 * (lua/rlm/async.lua) that something happened by marking an op id ready; loop.poll() hands
 * those ids to Lua, which resumes the coroutine waiting on each. */
#ifndef RLM_LOOP_H
#define RLM_LOOP_H
#include "netlib.h"
#include <lua.h>

typedef struct loop loop;
typedef void (*loop_done_fn)(void *ud, CURLcode result);
typedef void (*loop_fd_fn)(void *ud, int fd, short revents);
typedef void (*loop_timer_fn)(void *ud);

/* The loop of this state, created on first use and freed when the state closes. */
loop *loop_get(lua_State *L);
CURLM *loop_multi(loop *lp);

/* Transfers. The loop owns CURLOPT_PRIVATE of added handles. done is called once, from
 * loop_poll, after the handle has been removed from the multi. */
int loop_add_easy(loop *lp, CURL *easy, loop_done_fn done, void *ud);
void loop_remove_easy(loop *lp, CURL *easy);

/* Easy handles for transfers: a handle with every option at its default (an idle one kept
 * from an earlier transfer, or a new one; NULL when out of memory), and its return once its
 * transfer is over and it is out of the multi. */
CURL *loop_easy(loop *lp);
void loop_easy_done(loop *lp, CURL *easy);

/* Descriptors: fn is called from loop_poll when fd has any of events (POLLIN/POLLOUT);
 * POLLHUP/POLLERR are always reported. Watching an fd again replaces its entry. Unwatch an fd
 * before closing it: a closed one just stops being reported. -1 when out of memory or the
 * kernel refuses the fd. */
int loop_watch(loop *lp, int fd, short events, loop_fd_fn fn, void *ud);
void loop_unwatch(loop *lp, int fd);
/* Hands a watched fd to another callback, its events unchanged (no system call); -1 if fd is
 * not watched. */
int loop_retarget(loop *lp, int fd, loop_fd_fn fn, void *ud);

/* Timers on the monotonic clock (milliseconds); ids are never reused; 0 when out of memory.
 * A timer with fn NULL is an op timer: its id is marked ready when it fires. */
lua_Integer loop_timer_add(loop *lp, double due_ms, loop_timer_fn fn, void *ud);
void loop_timer_cancel(loop *lp, lua_Integer id);
/* Cancels id only if it is an op timer (so Lua cannot cancel a binding's timer). */
void loop_op_timer_cancel(loop *lp, lua_Integer id);

/* Op ids shared with Lua, and the ready signal. */
lua_Integer loop_new_id(loop *lp);
void loop_ready(loop *lp, lua_Integer id);

/* Runs what is due, then waits up to timeout_ms (less when a timer is due sooner) unless
 * some op is ready already, when it only takes what the descriptors have without waiting; -1
 * when out of memory. */
int loop_poll(loop *lp, double timeout_ms);
/* The op ids marked ready since the last take; valid until the next loop call. */
const lua_Integer *loop_take_ready(loop *lp, size_t *n);

double loop_now_ms(void);

#endif
