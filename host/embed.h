/* embed.h — files of lua/ and skills/ compiled into the binary by build/bin2c. */
#ifndef RLM_EMBED_H
#define RLM_EMBED_H
#include <stddef.h>
#include <stdint.h>

struct embedded_file {
    const char *path;           /* repository-relative, e.g. "lua/rlm/init.lua" */
    const unsigned char *data;  /* NUL-terminated for convenience; len excludes the NUL */
    size_t len;
    int bytecode;               /* a lua/ module, stored compiled (bin2c) */
    uint64_t digest;            /* FNV-1a of the bytes at data (fnv.h) */
};

extern const struct embedded_file embedded_files[];
extern const size_t embedded_count;

#endif
