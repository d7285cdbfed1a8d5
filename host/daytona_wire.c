/* daytona_wire.c — see daytona_wire.h. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "daytona_wire.h"

static int unreserved(unsigned char c)
{
    return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

int dw_escape(struct buf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80 && unreserved(c)) {
            if (buf_add(b, &s[i], 1))
                return -1;
        } else {
            char esc[3] = {'%', hex[c >> 4], hex[c & 15]};
            if (buf_add(b, esc, 3))
                return -1;
        }
    }
    return 0;
}

void dw_boundary(char out[DW_BOUNDARY_SIZE])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char rnd[18];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        /* Without the kernel's generator, clock and pid still make collisions implausible. */
        unsigned long x = (unsigned long)time(NULL) * 2654435761u ^ (unsigned long)getpid();
        for (size_t i = 0; i < sizeof rnd; i++) {
            x = x * 6364136223846793005ul + 1442695040888963407ul;
            rnd[i] = (unsigned char)(x >> 56);
        }
    }
    memcpy(out, "rlm-", 4);
    for (size_t i = 0; i < sizeof rnd; i++) {
        out[4 + 2 * i] = hex[rnd[i] >> 4];
        out[5 + 2 * i] = hex[rnd[i] & 15];
    }
    out[DW_BOUNDARY_SIZE - 1] = '\0';
}

static int add_str(struct buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

/* Appends s as a quoted-string; -1 on a byte that cannot appear in a header. */
static int add_quoted(struct buf *b, const char *s, size_t len)
{
    if (buf_add(b, "\"", 1))
        return -1;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '\r' || c == '\n' || c == '\0')
            return -1;
        if ((c == '"' || c == '\\') && buf_add(b, "\\", 1))
            return -1;
        if (buf_add(b, &c, 1))
            return -1;
    }
    return buf_add(b, "\"", 1);
}

int dw_multipart_encode(struct buf *out, const char *boundary, const struct dw_part *parts,
                        size_t n, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        const struct dw_part *p = &parts[i];
        if (add_str(out, "--") || add_str(out, boundary) ||
            add_str(out, "\r\nContent-Disposition: form-data; name=") ||
            add_quoted(out, p->name, p->name_len)) {
            snprintf(err, errlen, "multipart part %zu: bad name (line break or NUL?)", i + 1);
            return -1;
        }
        if (p->filename && (add_str(out, "; filename=") ||
                            add_quoted(out, p->filename, p->filename_len))) {
            snprintf(err, errlen, "multipart part %zu: bad filename (line break or NUL?)", i + 1);
            return -1;
        }
        if (p->content_type) {
            if (memchr(p->content_type, '\r', p->content_type_len) ||
                memchr(p->content_type, '\n', p->content_type_len)) {
                snprintf(err, errlen, "multipart part %zu: content type has a line break", i + 1);
                return -1;
            }
            if (add_str(out, "\r\nContent-Type: ") ||
                buf_add(out, p->content_type, p->content_type_len)) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
        }
        if (add_str(out, "\r\n\r\n") || buf_add(out, p->data, p->len) || add_str(out, "\r\n")) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    if (add_str(out, "--") || add_str(out, boundary) || add_str(out, "--\r\n")) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* Finds parameter key in a header value "type; k=v; k2="v 2"" and unquotes its value into
 * scratch; returns the value's offset there, -1 when absent, -2 when out of memory. */
static long header_param(const char *v, const char *end, const char *key, struct buf *scratch,
                         size_t *vlen)
{
    size_t klen = strlen(key);
    const char *p = memchr(v, ';', (size_t)(end - v));
    while (p && p < end) {
        p++;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        const char *k = p;
        while (p < end && *p != '=' && *p != ';')
            p++;
        const char *kend = p;
        while (kend > k && (kend[-1] == ' ' || kend[-1] == '\t'))
            kend--;
        if (p >= end || *p == ';')
            continue;
        p++;                                 /* '=' */
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        int match = (size_t)(kend - k) == klen && strncasecmp(k, key, klen) == 0;
        size_t off = scratch->len;
        if (p < end && *p == '"') {
            for (p++; p < end && *p != '"'; p++) {
                if (*p == '\\' && p + 1 < end)
                    p++;
                if (match && buf_add(scratch, p, 1))
                    return -2;
            }
            p = p < end ? memchr(p, ';', (size_t)(end - p)) : NULL;
        } else {
            const char *s = p;
            while (p < end && *p != ';' && *p != ' ' && *p != '\t')
                p++;
            if (match && buf_add(scratch, s, (size_t)(p - s)))
                return -2;
            p = p < end ? memchr(p, ';', (size_t)(end - p)) : NULL;
        }
        if (match) {
            *vlen = scratch->len - off;
            /* An empty value appends nothing; make sure scratch->data exists to point at. */
            return buf_add(scratch, "", 0) ? -2 : (long)off;
        }
    }
    return -1;
}

int dw_multipart_boundary(const char *content_type, char *out, size_t size)
{
    if (content_type == NULL || strncasecmp(content_type, "multipart/", 10) != 0)
        return -1;
    struct buf scratch = {0};
    size_t len = 0;
    long off = header_param(content_type, content_type + strlen(content_type), "boundary",
                            &scratch, &len);
    int ok = off >= 0 && len > 0 && len < size;
    if (ok) {
        memcpy(out, scratch.data + off, len);
        out[len] = '\0';
    }
    buf_free(&scratch);
    return ok ? 0 : -1;
}

/* Skips one line ending (CRLF, or a bare LF some servers send); NULL if none is there. */
static const char *after_eol(const char *p, const char *end)
{
    if (p < end && *p == '\r')
        p++;
    return p < end && *p == '\n' ? p + 1 : NULL;
}

/* Reads the header lines [h, hend) of one part into *part. -1 when out of memory. */
static int part_headers(const char *h, const char *hend, struct buf *scratch,
                        struct dw_part *part)
{
    long name_off = -1, file_off = -1;
    while (h < hend) {
        const char *eol = memchr(h, '\n', (size_t)(hend - h));
        const char *le = eol ? eol : hend;
        const char *ve = le > h && le[-1] == '\r' ? le - 1 : le;
        const char *colon = memchr(h, ':', (size_t)(ve - h));
        if (colon) {
            const char *v = colon + 1;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            size_t nlen = (size_t)(colon - h);
            if (nlen == 19 && strncasecmp(h, "Content-Disposition", 19) == 0) {
                scratch->len = 0;
                name_off = header_param(v, ve, "name", scratch, &part->name_len);
                file_off = header_param(v, ve, "filename", scratch, &part->filename_len);
                if (name_off == -2 || file_off == -2)
                    return -1;
            } else if (nlen == 12 && strncasecmp(h, "Content-Type", 12) == 0) {
                part->content_type = v;
                part->content_type_len = (size_t)(ve - v);
            }
        }
        h = eol ? eol + 1 : hend;
    }
    /* Offsets, not pointers, until here: scratch may move while it grows. */
    part->name = name_off >= 0 ? scratch->data + name_off : NULL;
    part->filename = file_off >= 0 ? scratch->data + file_off : NULL;
    if (part->name == NULL)
        part->name_len = 0;
    if (part->filename == NULL)
        part->filename_len = 0;
    return 0;
}

int dw_multipart_parse(const char *body, size_t len, const char *boundary, struct buf *scratch,
                       dw_part_fn fn, void *ud, char *err, size_t errlen)
{
    const char *end = body + len;
    size_t blen = strlen(boundary);
    char delim[80];
    if (blen == 0 || blen + 4 > sizeof delim) {
        snprintf(err, errlen, "multipart boundary is empty or too long");
        return -1;
    }
    /* After the first delimiter each one is preceded by the line break ending the data. */
    delim[0] = '\r', delim[1] = '\n', delim[2] = '-', delim[3] = '-';
    memcpy(delim + 4, boundary, blen);
    size_t dlen = blen + 4;
    const char *p;
    if (len >= dlen - 2 && memcmp(body, delim + 2, dlen - 2) == 0)
        p = body + dlen - 2;
    else {
        p = memmem(body, len, delim, dlen);
        if (p == NULL) {
            snprintf(err, errlen, "multipart body has no part delimited by its boundary");
            return -1;
        }
        p += dlen;
    }
    for (int index = 1;; index++) {
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return 0;                        /* the closing delimiter */
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        const char *h = after_eol(p, end);
        if (h == NULL) {
            snprintf(err, errlen, "multipart part %d: no line break after the boundary", index);
            return -1;
        }
        const char *hend = h, *data = NULL;
        while (hend < end) {
            const char *blank = after_eol(hend, end);
            if (blank) {
                data = blank;
                break;
            }
            const char *eol = memchr(hend, '\n', (size_t)(end - hend));
            if (eol == NULL)
                break;
            hend = eol + 1;
        }
        if (data == NULL) {
            snprintf(err, errlen, "multipart part %d: headers never end", index);
            return -1;
        }
        const char *next = memmem(data, (size_t)(end - data), delim, dlen);
        if (next == NULL) {
            snprintf(err, errlen, "multipart part %d: body ends before the closing boundary",
                     index);
            return -1;
        }
        struct dw_part part = {0};
        if (part_headers(h, hend, scratch, &part)) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        part.data = data;
        part.len = (size_t)(next - data);
        int r = fn(ud, &part);
        if (r)
            return r;
        p = next + dlen;
    }
}
