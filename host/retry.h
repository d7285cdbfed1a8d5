/* retry.h — when to try an HTTP call again: Retry-After, exponential backoff with jitter.
 * Shared by the LLM and Daytona bindings; which outcomes are worth retrying, and the deadline,
 * stay each binding's own policy. */
#ifndef RLM_RETRY_H
#define RLM_RETRY_H
#include <time.h>

#include "http.h"

/* Seconds to wait from a Retry-After value (delta-seconds, fractional accepted, or an HTTP
 * date compared with now); -1 when it is absent or unreadable. */
double retry_after_parse(const char *value, time_t now);

/* Seconds the Retry-After headers of c's response ask for (Retry-After and every
 * Retry-After-{name}; the longest wins); -1 when there is none (or no response at all). */
double retry_after_header(const struct http_call *c);

/* Delay before retry number attempt (1 = first retry): base * 2^(attempt-1) capped at cap,
 * then scaled into [1/2, 1] of that by unit (a random number in [0, 1)) — "equal jitter", so
 * clients that failed together do not retry together, yet the wait still grows. */
double retry_backoff_ms(int attempt, double base_ms, double cap_ms, double unit);

/* A random number in [0, 1) for jitter. */
double retry_unit_random(void);

/* The wait before retry number attempt: what the server asked for (server_wait_s >= 0) plus
 * up to 100 ms, since clients told the same still should not come back in step; otherwise
 * the jittered backoff. */
double retry_delay_ms(int attempt, double base_ms, double cap_ms, double server_wait_s);

#endif
