/* buf.h — a growable byte buffer for C code that must not hold Lua memory (callbacks). */
#ifndef RLM_BUF_H
#define RLM_BUF_H
#include <stdlib.h>
#include <string.h>

struct buf {
    char *data;
    size_t len, cap;
};

/* Appends n bytes, keeping a NUL after them; 0 on success, -1 when out of memory. */
static inline int buf_add(struct buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (d == NULL)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

static inline void buf_clear(struct buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static inline void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* Drops the first n bytes. */
static inline void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        buf_clear(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}
#endif
