/* fail.h — the one shape of an expected failure a binding returns as nil, err:
 *   err = {kind =, status =, message =, retry_after =}
 * kind: a short word to branch on (connect, dns, timeout, tls, transfer, http, cut, malformed,
 * provider, request, os, ...); status: the HTTP status when there was one; retry_after: the
 * seconds the server asked to wait, when it did. A binding may add fields of its own
 * (attempts; Daytona's code and retryable). tostring(err) and err .. "text" give the message,
 * so code that only shows errors treats it as text. */
#ifndef RLM_FAIL_H
#define RLM_FAIL_H
#include <lua.h>

/* Replaces the message at the top of the stack with the error table. status <= 0 and
 * retry_after < 0 are left out. [-1, +1] */
void fail_push(lua_State *L, const char *kind, long status, double retry_after);
/* fail_push, then puts nil below the error; returns 2 for `return fail_return(...)`. */
int fail_return(lua_State *L, const char *kind, long status, double retry_after);
/* Gives the table at idx the error metatable. */
void fail_set_metatable(lua_State *L, int idx);
/* Whether the value at idx is an error table. */
int fail_is(lua_State *L, int idx);

/* For a failed system call: pushes nil, "what: strerror(errno)", errno; returns 3. */
int fail_errno(lua_State *L, const char *what);

#endif
