/* sse.c — see sse.h. */
#include <string.h>

#include "sse.h"

static int sse_line(struct sse *s, sse_event_fn fn, void *ud)
{
    const char *l = s->line.data ? s->line.data : "";
    size_t n = s->line.len;
    if (n == 0) {
        int r = 0;
        if (s->has_data)
            r = fn(ud, s->event, s->data.data ? s->data.data : "", s->data.len);
        buf_clear(&s->data);
        s->has_data = 0;
        s->event[0] = '\0';
        return r;
    }
    if (l[0] == ':')
        return 0;
    const char *colon = memchr(l, ':', n);
    size_t name_len = colon ? (size_t)(colon - l) : n;
    const char *value = colon ? colon + 1 : l + n;
    if (colon && value < l + n && *value == ' ')
        value++;
    size_t vlen = (size_t)(l + n - value);
    if (name_len == 4 && memcmp(l, "data", 4) == 0) {
        if ((s->has_data && buf_add(&s->data, "\n", 1)) || buf_add(&s->data, value, vlen))
            return -1;
        s->has_data = 1;
    } else if (name_len == 5 && memcmp(l, "event", 5) == 0) {
        size_t m = vlen < sizeof s->event - 1 ? vlen : sizeof s->event - 1;
        memcpy(s->event, value, m);
        s->event[m] = '\0';
    }
    return 0;
}

int sse_feed(struct sse *s, const char *p, size_t n, sse_event_fn fn, void *ud)
{
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (ch == '\n' && s->after_cr) {
            s->after_cr = 0;
            continue;
        }
        s->after_cr = ch == '\r';
        if (ch == '\n' || ch == '\r') {
            int r = sse_line(s, fn, ud);
            buf_clear(&s->line);
            if (r)
                return r;
        } else {
            /* Copy the run up to the next line end in one go: streams are mostly long lines. */
            size_t j = i;
            while (j < n && p[j] != '\n' && p[j] != '\r')
                j++;
            if (buf_add(&s->line, p + i, j - i))
                return -1;
            i = j - 1;
        }
    }
    return 0;
}

void sse_free(struct sse *s)
{
    buf_free(&s->line);
    buf_free(&s->data);
    s->has_data = s->after_cr = 0;
    s->event[0] = '\0';
}
