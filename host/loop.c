/* loop.c — the event loop (see loop.h): curl transfers, watched descriptors and timers under
 * one epoll set. Its Lua face is host/lloop.c.
 *
 * curl runs in its socket mode: it names the sockets it waits on (they join the watches) and
 * the time it wants to be called back, and each ready socket costs one curl_multi_socket_action
 * for the transfers on that socket alone. curl_multi_perform would instead look at every
 * transfer and poll each one's socket on every wake-up: 32 poll() calls per sub-call with 64 in
 * flight. The set is epoll rather than poll(), whose every wake-up looked at each of the 64
 * sockets in flight again.
 *
 * A watched descriptor must be unwatched before it is closed (curl says so of its own with
 * CURL_POLL_REMOVE): a closed one leaves the set silently, where poll() said POLLNVAL. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include "host.h"
#include "loop.h"

#define LOOP_KEY "rlm.loop"            /* registry: the loop userdata */
#define LOOP_META "rlm.loop.meta"      /* registry: its metatable */

struct easy_reg {
    CURL *easy;
    loop_done_fn done;
    void *ud;
};

struct watch {
    int fd;
    short events;
    loop_fd_fn fn;
    void *ud;
};

struct timer {
    lua_Integer id;
    double due;
    loop_timer_fn fn;
    void *ud;
};

/* Idle easy handles kept for the next transfers, reset: a new handle (its state, its buffers)
 * cost as much as the rest of setting up a short request. As many as a batch usually has in
 * flight. */
#define IDLE_EASIES 64

struct loop {
    CURLM *multi;
    CURL *idle[IDLE_EASIES];
    size_t nidle;
    int closed;                  /* collected: a handle returned late is cleaned up at once */
    double curl_due;             /* when curl wants its timeout action (ms); < 0: not wanted */
    struct easy_reg **easies;
    size_t neasies, caneasies;
    struct watch *watches;
    size_t nwatches, canwatches;
    struct timer *timers;
    size_t ntimers, cantimers;
    lua_Integer *ready;
    size_t nready, canready;
    int epfd;                    /* the epoll set of the watches (and the signal pipe) */
    int signal_watched;
    int signals_held;            /* curl started a lookup: signals blocked until its call returns */
    sigset_t unheld;             /* the mask to restore then */
    lua_Integer next_id;
};

_Static_assert(POLLIN == EPOLLIN && POLLOUT == EPOLLOUT && POLLERR == EPOLLERR &&
               POLLHUP == EPOLLHUP, "watch events pass between poll and epoll bits as they are");

/* Grows *arr to hold at least need items of size sz; 0 on success. */
static int grow(void *arr, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(*(void **)arr, ncap * sz);
    if (p == NULL)
        return -1;
    *(void **)arr = p;
    *cap = ncap;
    return 0;
}

double loop_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int loop_gc(lua_State *L)
{
    loop *lp = luaL_checkudata(L, 1, LOOP_META);
    if (lp->multi != NULL) {
        for (size_t i = 0; i < lp->neasies; i++) {
            curl_multi_remove_handle(lp->multi, lp->easies[i]->easy);
            free(lp->easies[i]);
        }
        curl_multi_cleanup(lp->multi);
        lp->multi = NULL;
    }
    for (size_t i = 0; i < lp->nidle; i++)
        curl_easy_cleanup(lp->idle[i]);
    lp->nidle = 0;
    free(lp->easies);
    free(lp->watches);
    free(lp->timers);
    free(lp->ready);
    if (lp->epfd >= 0)
        close(lp->epfd);
    memset(lp, 0, sizeof *lp);
    lp->epfd = -1;
    lp->closed = 1;
    return 0;
}

loop *loop_get(lua_State *L)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, LOOP_KEY) == LUA_TUSERDATA) {
        loop *lp = lua_touserdata(L, -1);
        lua_pop(L, 1);
        return lp;
    }
    lua_pop(L, 1);
    loop *lp = lua_newuserdatauv(L, sizeof *lp, 0);
    memset(lp, 0, sizeof *lp);
    lp->next_id = 1;
    lp->curl_due = -1;
    lp->epfd = -1;
    if (luaL_newmetatable(L, LOOP_META)) {
        lua_pushcfunction(L, loop_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    lp->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (lp->epfd < 0)
        luaL_error(L, "cannot create the event loop: %s", strerror(errno));
    lua_setfield(L, LUA_REGISTRYINDEX, LOOP_KEY);
    return lp;
}

/* curl's threaded resolver starts a thread for each name it looks up, from inside rlm's call
 * into curl, and a thread starts with its creator's signal mask: with rlm's signals open, it
 * would take them whenever the Lua thread could not (see host.c) and run rlm's handler beside
 * it. So from the moment curl announces a lookup until its call returns, the Lua thread blocks
 * every signal; one that arrives meanwhile is delivered to it then. Held from the lookup on
 * rather than around every call, which would add two system calls to each of curl's calls. */
static int hold_signals(void *resolver, void *reserved, void *ud)
{
    loop *lp = ud;
    if (!lp->signals_held) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &lp->unheld);
        lp->signals_held = 1;
    }
    return 0;
}

/* Every call into curl's transfers goes through here. */
static void curl_act(loop *lp, curl_socket_t fd, int bits)
{
    int running;
    curl_multi_socket_action(lp->multi, fd, bits, &running);
    if (lp->signals_held) {
        lp->signals_held = 0;
        pthread_sigmask(SIG_SETMASK, &lp->unheld, NULL);
    }
}

static void on_curl_ready(void *ud, int fd, short revents)
{
    /* No bits (an error or hang-up alone): curl looks at the socket itself. */
    int bits = (revents & POLLIN ? CURL_CSELECT_IN : 0) | (revents & POLLOUT ? CURL_CSELECT_OUT : 0);
    curl_act(ud, fd, bits);
}

/* curl says which of its sockets to wait on, and for what. */
static int on_curl_socket(CURL *easy, curl_socket_t s, int what, void *ud, void *socketp)
{
    loop *lp = ud;
    if (what == CURL_POLL_REMOVE) {
        loop_unwatch(lp, s);
        return 0;
    }
    short events = (what & CURL_POLL_IN ? POLLIN : 0) | (what & CURL_POLL_OUT ? POLLOUT : 0);
    return loop_watch(lp, s, events, on_curl_ready, lp) == 0 ? 0 : -1;
}

/* curl says when to call it back whatever its sockets do (timeouts, a new transfer's start). */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *ud)
{
    loop *lp = ud;
    lp->curl_due = timeout_ms < 0 ? -1 : loop_now_ms() + (double)timeout_ms;
    return 0;
}

/* The multi handle is made with the first transfer: until then libcurl need not be loaded. */
CURLM *loop_multi(loop *lp)
{
    if (lp->multi == NULL && netlib_curl_loaded()) {
        lp->multi = curl_multi_init();
        if (lp->multi == NULL)
            return NULL;
        curl_multi_setopt(lp->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
        curl_multi_setopt(lp->multi, CURLMOPT_SOCKETDATA, lp);
        curl_multi_setopt(lp->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
        curl_multi_setopt(lp->multi, CURLMOPT_TIMERDATA, lp);
    }
    return lp->multi;
}

int loop_add_easy(loop *lp, CURL *easy, loop_done_fn done, void *ud)
{
    if (grow(&lp->easies, &lp->caneasies, lp->neasies + 1, sizeof *lp->easies))
        return -1;
    struct easy_reg *reg = malloc(sizeof *reg);
    if (reg == NULL)
        return -1;
    *reg = (struct easy_reg){easy, done, ud};
    curl_easy_setopt(easy, CURLOPT_PRIVATE, reg);
    if (loop_multi(lp) == NULL || curl_multi_add_handle(lp->multi, easy) != CURLM_OK) {
        free(reg);
        return -1;
    }
    lp->easies[lp->neasies++] = reg;
    return 0;
}

/* Unregisters without calling done; returns the registration so the caller may free it. */
static struct easy_reg *detach_easy(loop *lp, CURL *easy)
{
    for (size_t i = 0; i < lp->neasies; i++) {
        struct easy_reg *reg = lp->easies[i];
        if (reg->easy == easy) {
            lp->easies[i] = lp->easies[--lp->neasies];
            curl_multi_remove_handle(lp->multi, easy);
            return reg;
        }
    }
    return NULL;
}

void loop_remove_easy(loop *lp, CURL *easy)
{
    free(detach_easy(lp, easy));
}

CURL *loop_easy(loop *lp)
{
    CURL *easy = lp->nidle > 0 ? lp->idle[--lp->nidle] : curl_easy_init();
    if (easy != NULL) {     /* set on each handout: curl_easy_reset clears it */
        curl_easy_setopt(easy, CURLOPT_RESOLVER_START_FUNCTION, hold_signals);
        curl_easy_setopt(easy, CURLOPT_RESOLVER_START_DATA, lp);
    }
    return easy;
}

void loop_easy_done(loop *lp, CURL *easy)
{
    if (easy == NULL)
        return;
    if (lp->closed || lp->nidle == IDLE_EASIES) {
        curl_easy_cleanup(easy);
        return;
    }
    curl_easy_reset(easy);   /* options back to their defaults; connections stay the multi's */
    lp->idle[lp->nidle++] = easy;
}

static int epoll_set(loop *lp, int op, int fd, short events)
{
    struct epoll_event ev = {.events = (uint32_t)events, .data.fd = fd};
    return epoll_ctl(lp->epfd, op, fd, &ev);
}

int loop_watch(loop *lp, int fd, short events, loop_fd_fn fn, void *ud)
{
    for (size_t i = 0; i < lp->nwatches; i++)
        if (lp->watches[i].fd == fd) {
            /* ENOENT: the descriptor was closed and its number reused, unwatched or not */
            if (epoll_set(lp, EPOLL_CTL_MOD, fd, events) != 0 &&
                (errno != ENOENT || epoll_set(lp, EPOLL_CTL_ADD, fd, events) != 0))
                return -1;
            lp->watches[i] = (struct watch){fd, events, fn, ud};
            return 0;
        }
    if (grow(&lp->watches, &lp->canwatches, lp->nwatches + 1, sizeof *lp->watches))
        return -1;
    if (epoll_set(lp, EPOLL_CTL_ADD, fd, events) != 0 &&
        (errno != EEXIST || epoll_set(lp, EPOLL_CTL_MOD, fd, events) != 0))
        return -1;
    lp->watches[lp->nwatches++] = (struct watch){fd, events, fn, ud};
    return 0;
}

void loop_unwatch(loop *lp, int fd)
{
    for (size_t i = 0; i < lp->nwatches; i++)
        if (lp->watches[i].fd == fd) {
            epoll_ctl(lp->epfd, EPOLL_CTL_DEL, fd, NULL);
            lp->watches[i] = lp->watches[--lp->nwatches];
            return;
        }
}

int loop_retarget(loop *lp, int fd, loop_fd_fn fn, void *ud)
{
    for (size_t i = 0; i < lp->nwatches; i++)
        if (lp->watches[i].fd == fd) {
            lp->watches[i].fn = fn;
            lp->watches[i].ud = ud;
            return 0;
        }
    return -1;
}

lua_Integer loop_new_id(loop *lp)
{
    return lp->next_id++;
}

lua_Integer loop_timer_add(loop *lp, double due_ms, loop_timer_fn fn, void *ud)
{
    if (grow(&lp->timers, &lp->cantimers, lp->ntimers + 1, sizeof *lp->timers))
        return 0;
    lua_Integer id = loop_new_id(lp);
    lp->timers[lp->ntimers++] = (struct timer){id, due_ms, fn, ud};
    return id;
}

/* Drops timer id; with ops_only, only an op timer (fn NULL). */
static void cancel_timer(loop *lp, lua_Integer id, int ops_only)
{
    for (size_t i = 0; i < lp->ntimers; i++)
        if (lp->timers[i].id == id) {
            if (!ops_only || lp->timers[i].fn == NULL)
                lp->timers[i] = lp->timers[--lp->ntimers];
            return;
        }
}

void loop_timer_cancel(loop *lp, lua_Integer id)
{
    cancel_timer(lp, id, 0);
}

void loop_op_timer_cancel(loop *lp, lua_Integer id)
{
    cancel_timer(lp, id, 1);
}

void loop_ready(loop *lp, lua_Integer id)
{
    /* On allocation failure the id is dropped; its waiter's own deadline still fires. */
    if (grow(&lp->ready, &lp->canready, lp->nready + 1, sizeof *lp->ready) == 0)
        lp->ready[lp->nready++] = id;
}

static void drain_done(loop *lp)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(lp->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURLcode result = msg->data.result;
        struct easy_reg *reg = detach_easy(lp, msg->easy_handle);
        if (reg) {
            reg->done(reg->ud, result);
            free(reg);
        }
    }
}

/* The due timer that is due first, or ntimers when none is due. */
static size_t first_due(const loop *lp, double now)
{
    size_t first = lp->ntimers;
    for (size_t i = 0; i < lp->ntimers; i++) {
        double due = lp->timers[i].due;
        if (due <= now && (first == lp->ntimers || due < lp->timers[first].due))
            first = i;
    }
    return first;
}

/* Fires the due timers earliest first: several come due at one poll when the machine is busy. */
static void fire_timers(loop *lp)
{
    double now = loop_now_ms();
    for (size_t i; (i = first_due(lp, now)) < lp->ntimers;) {
        struct timer t = lp->timers[i];
        lp->timers[i] = lp->timers[--lp->ntimers];
        if (t.fn)
            t.fn(t.ud);
        else
            loop_ready(lp, t.id);
    }
}

static double next_timer_ms(loop *lp)
{
    double next = lp->curl_due;
    for (size_t i = 0; i < lp->ntimers; i++)
        if (next < 0 || lp->timers[i].due < next)
            next = lp->timers[i].due;
    return next;
}

static void run_ready_work(loop *lp)
{
    if (lp->curl_due >= 0 && lp->curl_due <= loop_now_ms()) {
        lp->curl_due = -1;
        curl_act(lp, CURL_SOCKET_TIMEOUT, 0);
    }
    if (lp->multi != NULL)
        drain_done(lp);
    fire_timers(lp);
}

/* Waits on the watched descriptors (curl's sockets among them) and the signal pipe together. */
static int wait_once(loop *lp, int timeout_ms)
{
    int sfd = host_signal_fd();
    if (sfd >= 0 && !lp->signal_watched) {
        if (epoll_set(lp, EPOLL_CTL_ADD, sfd, POLLIN) != 0 && errno != EEXIST)
            return -1;
        lp->signal_watched = 1;
    }
    struct epoll_event ready[64];    /* more wait at the next call: the set is level-triggered */
    int n = epoll_wait(lp->epfd, ready, 64, timeout_ms);   /* EINTR: the signal pipe tells */
    /* A callback may add or drop watches, so look each one up again before calling it. */
    for (int i = 0; i < n; i++) {
        for (size_t j = 0; j < lp->nwatches; j++)
            if (lp->watches[j].fd == ready[i].data.fd) {
                struct watch w = lp->watches[j];
                w.fn(w.ud, w.fd, (short)ready[i].events);
                break;
            }
    }
    return 0;
}

int loop_poll(loop *lp, double timeout_ms)
{
    run_ready_work(lp);
    /* Ops ready already: no wait, but a look at the descriptors all the same. Otherwise tasks
     * that keep each other ready (a timer due now, the next sandbox's start) hold back a
     * socket that is ready too: a request waiting to go out, an answer waiting to be read. */
    if (lp->nready > 0) {
        if (wait_once(lp, 0))
            return -1;
        run_ready_work(lp);
        return 0;
    }
    double wait = timeout_ms < 0 ? 0 : timeout_ms;
    double next = next_timer_ms(lp);
    if (next >= 0) {
        double until = next - loop_now_ms();
        if (until < wait)
            wait = until < 0 ? 0 : until;
    }
    if (wait_once(lp, (int)(wait + 0.999)))
        return -1;
    run_ready_work(lp);
    return 0;
}

const lua_Integer *loop_take_ready(loop *lp, size_t *n)
{
    *n = lp->nready;
    lp->nready = 0;
    return lp->ready;
}
