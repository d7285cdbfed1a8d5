/* request.c — see request.h. Everything here runs from loop callbacks in plain C. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "request.h"
#include "retry.h"

#define CONNECT_TIMEOUT_MS 10000.0

static void finish(struct request *r)
{
    r->finished = 1;
    if (r->spec.done)
        r->spec.done(r->spec.ud, r);
}

/* A failure before anything could be sent: any request may go again. */
static int connect_failure(CURLcode c)
{
    return c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST;
}

/* A transfer that broke or ran out of time after the request may have reached the server. */
static int broken_transfer(CURLcode c)
{
    return c == CURLE_OPERATION_TIMEDOUT || c == CURLE_GOT_NOTHING || c == CURLE_SEND_ERROR ||
           c == CURLE_RECV_ERROR || c == CURLE_PARTIAL_FILE || c == CURLE_HTTP2 ||
           c == CURLE_HTTP2_STREAM;
}

int request_retryable(const struct request *r)
{
    const struct http_call *c = r->call;
    if (c == NULL || r->delivered)
        return 0;
    if (c->result != CURLE_OK) {
        if (connect_failure(c->result))
            return 1;
        /* Nothing arrived does not mean nothing ran: the request may have reached the server
         * and be running there (Daytona's daemon runs a command whether or not its client is
         * still connected: apps/daemon/pkg/toolbox/process/execute.go). */
        return broken_transfer(c->result) && r->spec.replayable;
    }
    long s = c->status;
    if (s == 429)
        return !r->spec.hand_back_429;
    if (s == r->spec.also_retry_status && s > 0)
        return 1;
    /* A gateway's 5xx says nothing of whether the request ran: only a replayable one goes
     * again (a second create would make a second sandbox). 501 will not change. */
    return (s == 408 || (s >= 500 && s != 501)) && r->spec.replayable;
}

/* Seconds the server asked us to wait, or -1; OpenAI also says it in milliseconds. */
static double server_wait(const struct http_call *c)
{
    char value[64];
    if (c->result == CURLE_OK && http_header(c, "retry-after-ms", value, sizeof value) == 0) {
        char *end;
        double ms = strtod(value, &end);
        if (end != value && ms >= 0)
            return ms / 1e3;
    }
    return retry_after_header(c);
}

static void on_chunk(void *ud, struct http_call *c, const char *data, size_t len)
{
    struct request *r = ud;
    r->answer_bytes += len;
    r->spec.on_chunk(r->spec.ud, c, data, len);
}

static void start_attempt(struct request *r);

static void timer_fired(void *ud)
{
    struct request *r = ud;
    r->timer = 0;
    start_attempt(r);
}

static void attempt_done(void *ud, struct http_call *c)
{
    struct request *r = ud;
    if (r->spec.on_chunk == NULL)
        r->answer_bytes = c->body.len;
    r->retry_after = c->result == CURLE_OK ? server_wait(c) : -1;
    if (!request_retryable(r) || r->attempts >= r->spec.max_attempts) {
        finish(r);
        return;
    }
    double wait = retry_delay_ms(r->attempts, r->spec.backoff_base_ms, r->spec.backoff_cap_ms,
                                 r->retry_after);
    double now = loop_now_ms();
    if (now + wait >= r->spec.deadline_ms) {
        r->wait_past_deadline = r->retry_after >= 0;
        finish(r);
        return;
    }
    r->timer = loop_timer_add(r->lp, now + wait, timer_fired, r);
    if (r->timer == 0)
        finish(r);
}

static void start_attempt(struct request *r)
{
    http_free(r->call);
    r->call = NULL;
    r->answer_bytes = 0;
    r->retry_after = -1;
    if (r->spec.on_attempt)
        r->spec.on_attempt(r->spec.ud);
    double left = r->spec.deadline_ms - loop_now_ms();
    if (r->spec.attempt_timeout_ms > 0 && r->spec.attempt_timeout_ms < left)
        left = (double)r->spec.attempt_timeout_ms;
    if (left < 1)
        left = 1;
    struct http_req req = r->spec.http;
    /* libcurl sends a request once more, by itself, when a reused connection dies before any
     * answer byte (lib/transfer.c, Curl_retry_request): only a new connection keeps a request
     * that must not repeat from going twice. */
    req.fresh_connect = !r->spec.replayable;
    double connect = req.connect_timeout_ms > 0 ? (double)req.connect_timeout_ms
                                                : CONNECT_TIMEOUT_MS;
    req.timeout_ms = isinf(left) ? 0 : (long)left;
    req.connect_timeout_ms = (long)(left < connect ? left : connect);
    r->attempts++;
    r->call = http_start(r->lp, &req, r->spec.on_chunk ? on_chunk : NULL, attempt_done, r);
    if (r->call == NULL)
        finish(r);
}

static int has_idempotency_key(const struct curl_slist *headers)
{
    static const char name[] = "idempotency-key:";
    for (; headers; headers = headers->next)
        if (strncasecmp(headers->data, name, sizeof name - 1) == 0)
            return 1;
    return 0;
}

/* GET when there is no method and no body, as http_start does. */
static int idempotent_method(const struct http_req *req)
{
    static const char *const safe[] = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"};
    if (req->method == NULL)
        return req->body == NULL;
    for (size_t i = 0; i < sizeof safe / sizeof safe[0]; i++)
        if (strcasecmp(req->method, safe[i]) == 0)
            return 1;
    return 0;
}

struct request *request_start(loop *lp, const struct request_spec *spec)
{
    struct request *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->lp = lp;
    r->spec = *spec;
    if (r->spec.max_attempts < 1)
        r->spec.max_attempts = 1;
    r->spec.replayable = spec->replayable || idempotent_method(&spec->http) ||
                         has_idempotency_key(spec->http.headers);
    r->started_ms = loop_now_ms();
    r->retry_after = -1;
    start_attempt(r);
    return r;
}

void request_mark_delivered(struct request *r)
{
    r->delivered = 1;
}

void request_stop(struct request *r)
{
    if (r->timer)
        loop_timer_cancel(r->lp, r->timer);
    r->timer = 0;
    http_stop(r->call);
    r->finished = 1;
}

void request_free(struct request *r)
{
    if (r == NULL)
        return;
    request_stop(r);
    http_free(r->call);
    free(r);
}

void request_attempts_note(const struct request *r, char *out, size_t size)
{
    if (r->attempts > 1)
        snprintf(out, size, " (gave up after %d attempts in %.1f s)", r->attempts,
                 (loop_now_ms() - r->started_ms) / 1e3);
    else if (size > 0)
        out[0] = '\0';
}
