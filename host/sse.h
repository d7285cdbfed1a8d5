/* sse.h — a Server-Sent Events splitter (the WHATWG event-stream rules), byte-level and free
 * of Lua and curl, so it can run inside a curl write callback and be tested directly.
 * Feed it the body in pieces of any size; it calls back once per complete event. */
#ifndef RLM_SSE_H
#define RLM_SSE_H
#include <stddef.h>

#include "buf.h"

struct sse {
    struct buf line;     /* the current, unfinished line */
    struct buf data;     /* data lines of the current event, joined with '\n' */
    char event[64];      /* the event field ("" when the event has none) */
    int has_data;
    int after_cr;        /* the last byte was '\r': a following '\n' belongs to it */
};

/* event is "" when the stream named none; data has no trailing newline and is NUL-terminated.
 * A nonzero return stops feeding and is returned by sse_feed. */
typedef int (*sse_event_fn)(void *ud, const char *event, const char *data, size_t len);

/* Splits bytes into lines (LF, CRLF or CR), fields ("name: value", comments starting with ':'
 * ignored) and events (a blank line ends one; events without data are dropped). Returns 0, -1
 * when out of memory, or the callback's nonzero return. */
int sse_feed(struct sse *s, const char *p, size_t n, sse_event_fn fn, void *ud);

void sse_free(struct sse *s);

#endif
