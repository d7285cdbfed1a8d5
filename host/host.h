/* host.h — the one lua_State: creation, protected calls, error reports, signals. */
#ifndef RLM_HOST_H
#define RLM_HOST_H
#include <signal.h>
#include <stdint.h>
#include <lua.h>
#include <lauxlib.h>
#include "embed.h"

#define RLM_VERSION "0.1.0"

/* A fresh state with the standard libraries, cjson, the C bindings (rlm.core.*) and every
 * embedded lua/ module in package.preload. Returns NULL only when out of memory. */
lua_State *host_newstate(void);

/* lua_pcall with a message handler that appends a traceback. */
int host_pcall(lua_State *L, int nargs, int nresults);

/* Prints the error on top of the stack as "rlm: <message>" to stderr and pops it. */
void host_report(lua_State *L, int status);

/* Pushes msg with every occurrence of secret replaced by "[redacted]", so no error path can
 * leak a credential. A secret shorter than 8 bytes is no real credential and would match
 * ordinary words, so it is left alone. [-0, +1] */
void host_push_redacted(lua_State *L, const char *msg, const char *secret);

/* Pushes a 64-bit hash as 16 lower-case hex digits (sys.hash, host.digest). [-0, +1] */
void host_push_hash(lua_State *L, uint64_t h);

/* Overwrites a heap copy of a secret before freeing it, so it does not linger in freed
 * memory (and core dumps). Safe on NULL. */
void host_free_secret(char *secret);

/* Registers the metatable name for a binding's userdata: metamethods, and methods as its
 * __index table (metamethods must hold an "__index" placeholder). [-0, +0] */
void host_newclass(lua_State *L, const char *name, const luaL_Reg *metamethods,
                   const luaL_Reg *methods);

/* The embedded file at a repository-relative path ("lua/rlm/driver.py"), or NULL. */
const struct embedded_file *host_embedded(const char *path);

/* SIGINT/SIGTERM set host_signal and interrupt the running Lua code (and the event loop)
 * with the error "interrupted", so <close> handlers and cleanup run before the exit. The
 * thread that installs them is the Lua thread: a signal another thread takes is passed on to
 * it. */
extern volatile sig_atomic_t host_signal;
void host_install_signals(lua_State *L);
/* Raises "interrupted" if a signal arrived and has not been handled yet. */
void host_check_signal(lua_State *L);
/* The read end of the self-pipe a signal writes to, for the event loop's wait; -1 if none. */
int host_signal_fd(void);

#endif
