/* buf.h — a growable byte buffer for C code that must not hold Lua memory (callbacks). */
#ifndef RLM_BUF_H
#define RLM_BUF_H
#include <stdlib.h>
#include <string.h>

/* data points at the first live byte; off bytes before it were consumed and are reclaimed on
 * the next growth, so taking bytes from the front never moves the rest (a 100 MB pipe write in
 * 64 KB pieces stays linear). cap counts from data. A buffer never consumed has off == 0 and
 * data is its allocation, as code that reallocates it directly (json.c) expects. */
struct buf {
    char *data;
    size_t len, cap, off;
};

/* Room for n more bytes (and a NUL) after the live ones; returns where they go, or NULL when
 * out of memory. len is unchanged: the caller adds what it wrote. */
static inline char *buf_room(struct buf *b, size_t n)
{
    if (b->len + n + 1 > b->cap && b->off) {   /* reclaim the consumed front first */
        char *base = b->data - b->off;
        memmove(base, b->data, b->len + 1);
        b->data = base;
        b->cap += b->off;
        b->off = 0;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (d == NULL)
            return NULL;
        b->data = d;
        b->cap = cap;
    }
    return b->data + b->len;
}

/* Appends n bytes, keeping a NUL after them; 0 on success, -1 when out of memory. */
static inline int buf_add(struct buf *b, const void *p, size_t n)
{
    char *to = buf_room(b, n);
    if (to == NULL)
        return -1;
    if (n)
        memcpy(to, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

static inline void buf_clear(struct buf *b)
{
    b->data -= b->off;
    b->cap += b->off;
    b->off = 0;
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static inline void buf_free(struct buf *b)
{
    free(b->data ? b->data - b->off : NULL);
    b->data = NULL;
    b->len = b->cap = b->off = 0;
}

/* Drops the first n bytes without moving the rest. */
static inline void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        buf_clear(b);
        return;
    }
    b->data += n;
    b->cap -= n;
    b->off += n;
    b->len -= n;
}
#endif
