/* base64.c — base64 encoding and decoding (see base64.h). */
#include "base64.h"

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

void base64_encode(const unsigned char *in, size_t n, char *out)
{
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
        *out++ = ALPHABET[v >> 18];
        *out++ = ALPHABET[(v >> 12) & 63];
        *out++ = ALPHABET[(v >> 6) & 63];
        *out++ = ALPHABET[v & 63];
    }
    if (i < n) {
        unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? (unsigned)in[i + 1] << 8 : 0);
        *out++ = ALPHABET[v >> 18];
        *out++ = ALPHABET[(v >> 12) & 63];
        *out++ = i + 1 < n ? ALPHABET[(v >> 6) & 63] : '=';
        *out++ = '=';
    }
}

/* The value of an alphabet character, -2 for padding, -3 for whitespace, -1 otherwise. */
static int value_of(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    if (c == '=') return -2;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') return -3;
    return -1;
}

long base64_decode(const char *in, size_t n, unsigned char *out)
{
    unsigned char *start = out;
    unsigned v = 0;
    int have = 0, pad = 0;
    for (size_t i = 0; i < n; i++) {
        int d = value_of((unsigned char)in[i]);
        if (d == -3) continue;
        if (d == -1) return -1;
        if (d == -2) {
            pad++;
            d = 0;
        } else if (pad) {
            return -1;                        /* data after padding */
        }
        v = v << 6 | (unsigned)d;
        if (++have == 4) {
            if (pad > 2) return -1;
            *out++ = (unsigned char)(v >> 16);
            if (pad < 2) *out++ = (unsigned char)(v >> 8);
            if (pad < 1) *out++ = (unsigned char)v;
            v = 0;
            have = 0;
            if (pad) pad = 3;                 /* nothing may follow a padded group */
        }
    }
    if (have != 0) return -1;
    return (long)(out - start);
}
