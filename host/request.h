/* request.h — one HTTP request that retries itself: the engine under rlm.core.http, the LLM
 * binding and the Daytona binding. It runs attempts (http.h calls) on the event loop, decides
 * after each whether to go again, waits the backoff on a loop timer, and calls done once.
 * Bindings build the request and read the last attempt's response; they hold no retry state.
 *
 * One retry policy:
 *   - never after answer bytes were handed on to the caller (request_mark_delivered): a
 *     repeat would deliver them twice;
 *   - a connection that could not be made, and 429 (the server did not run the request):
 *     always, unless hand_back_429 gives the 429 to the caller;
 *   - 408 and 5xx but 501, a timeout or a broken transfer: only when the request is replayable
 *     (an idempotent method, an Idempotency-Key, or a binding that says repeating is safe):
 *     a request that may have reached the server is never sent twice, and one that is not
 *     replayable goes on a connection of its own, since libcurl itself repeats a request
 *     whose reused connection broke;
 *   - also_retry_status (a binding's own, e.g. Daytona's 409 "state change in progress").
 * Waits honour retry-after-ms, Retry-After and Retry-After-{name}, else jittered exponential
 * backoff (retry.h).
 * One timeout model: deadline_ms bounds the whole request, retries included; each attempt gets
 * what is left, capped by attempt_timeout_ms when set; a wait that would end past the
 * deadline is not started. */
#ifndef RLM_REQUEST_H
#define RLM_REQUEST_H
#include "http.h"

struct request;
typedef void (*request_done_fn)(void *ud, struct request *r);
/* Called before every attempt (the first too), so a binding can reset what it parsed. */
typedef void (*request_attempt_fn)(void *ud);

struct request_spec {
    struct http_req http;          /* its timeout_ms is set per attempt; connect_timeout_ms
                                      0 = 10 s */
    int max_attempts;              /* 1 = no retries */
    double backoff_base_ms, backoff_cap_ms;
    double deadline_ms;            /* loop_now_ms() time the whole request must end by;
                                      HUGE_VAL = none */
    long attempt_timeout_ms;       /* 0 = up to the deadline */
    int replayable;                /* repeating it is safe whatever the method and headers */
    long also_retry_status;        /* 0 = none */
    int hand_back_429;             /* a 429 ends the request at once: the caller paces its
                                      calls itself (a batch that narrows its width) */
    http_chunk_fn on_chunk;        /* NULL keeps the body in the call */
    request_attempt_fn on_attempt;
    request_done_fn done;
    void *ud;
};

struct request {
    loop *lp;
    struct request_spec spec;      /* borrowed pointers stay the binding's */
    struct http_call *call;        /* the current or last attempt; NULL if none could start */
    lua_Integer timer;
    int attempts, finished;
    int delivered;                 /* answer bytes went to the caller: no more retries */
    int wait_past_deadline;        /* gave up because the server's wait ran past the deadline */
    double started_ms, retry_after; /* retry_after: seconds the last answer asked for, or -1 */
    size_t answer_bytes;           /* body bytes of the current attempt, kept or streamed */
};

/* Starts the first attempt; NULL when out of memory. If no attempt can start (a bad URL),
 * the request finishes at once with call == NULL and done is called from here. */
struct request *request_start(loop *lp, const struct request_spec *spec);
/* The caller has been given answer bytes; the request will not be repeated from now on. */
void request_mark_delivered(struct request *r);
/* Stops the request where it is (a binding found the answer unusable); the last response's
 * status and headers stay readable. done is not called. */
void request_stop(struct request *r);
/* Stops and frees everything (timer, transfer, the request). Safe on NULL. */
void request_free(struct request *r);
/* Whether the last attempt's outcome was one the policy retries (ignoring limits). */
int request_retryable(const struct request *r);
/* " (gave up after N attempts in S s)" when there were retries, else "". */
void request_attempts_note(const struct request *r, char *out, size_t size);

#endif
