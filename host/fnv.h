/* fnv.h — 64-bit FNV-1a, the one hash rlm keys caches and manifests with (not for security).
 * Shared by sys.hash, the build's digests of embedded files (bin2c) and host.digest, which
 * must agree byte for byte. */
#ifndef RLM_FNV_H
#define RLM_FNV_H
#include <stddef.h>
#include <stdint.h>

#define FNV1A64_START 0xcbf29ce484222325u

/* h carried on over len more bytes: hashing in pieces gives what one call over all gives. */
static inline uint64_t fnv1a64_add(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3u;
    return h;
}

static inline uint64_t fnv1a64(const void *data, size_t len)
{
    return fnv1a64_add(FNV1A64_START, data, len);
}

#endif
