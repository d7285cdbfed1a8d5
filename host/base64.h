/* base64.h — base64 (RFC 4648, standard alphabet, padded) without allocation of its own. */
#ifndef RLM_BASE64_H
#define RLM_BASE64_H

#include <stddef.h>

/* The length of the encoding of n bytes. */
size_t base64_encoded_len(size_t n);

/* Writes the encoding of in[0..n) to out (base64_encoded_len(n) bytes, no terminator). */
void base64_encode(const unsigned char *in, size_t n, char *out);

/* Decodes in[0..n), skipping ASCII whitespace, into out (at least n / 4 * 3 bytes). Returns the
 * number of bytes written, or -1 when the text is not valid base64 (a character outside the
 * alphabet, padding anywhere but the end, or a length that is not a multiple of four). */
long base64_decode(const char *in, size_t n, unsigned char *out);

#endif
