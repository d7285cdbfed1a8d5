/* daytona_wire.h — the pure pieces of the Daytona wire format, free of Lua and curl handles so
 * tests/check_daytona.c can test them directly: URL escaping, multipart/form-data encoding and
 * parsing. host/ldaytona.c builds the binding on them (retries are host/retry.h). */
#ifndef RLM_DAYTONA_WIRE_H
#define RLM_DAYTONA_WIRE_H
#include <stddef.h>

#include "buf.h"

/* Appends s percent-encoded: every byte but RFC 3986's unreserved ones (A-Z a-z 0-9 - . _ ~)
 * becomes %XX, so a path segment or query value can hold any bytes. 0, or -1 out of memory. */
int dw_escape(struct buf *b, const char *s, size_t len);

/* One multipart/form-data part. filename and content_type may be NULL. */
struct dw_part {
    const char *name;
    size_t name_len;
    const char *filename;
    size_t filename_len;
    const char *content_type;
    size_t content_type_len;
    const char *data;
    size_t len;
};

#define DW_BOUNDARY_SIZE 41   /* 40 characters and the NUL */

/* A fresh random boundary; random enough that it never occurs in file data by chance. */
void dw_boundary(char out[DW_BOUNDARY_SIZE]);

/* Appends the multipart body of parts to out. Names and filenames are quoted strings with '"'
 * and '\' backslash-escaped; a CR, LF or NUL in them (which would forge headers) is refused.
 * 0 on success, -1 with a message in err. */
int dw_multipart_encode(struct buf *out, const char *boundary, const struct dw_part *parts,
                        size_t n, char *err, size_t errlen);

/* The boundary parameter of a multipart Content-Type value (quoted or not); 0 if found. */
int dw_multipart_boundary(const char *content_type, char *out, size_t size);

/* Calls fn for each part of body, in order. The part's data and content type point into body;
 * name and filename are unquoted into scratch (caller-owned, so a callback that raises leaks
 * nothing) and stay valid during the call. A nonzero return from fn stops the walk and is
 * returned. Returns 0, or -1 with a message in err when body is not a well-formed multipart
 * body for that boundary. */
typedef int (*dw_part_fn)(void *ud, const struct dw_part *part);
int dw_multipart_parse(const char *body, size_t len, const char *boundary, struct buf *scratch,
                       dw_part_fn fn, void *ud, char *err, size_t errlen);

#endif
