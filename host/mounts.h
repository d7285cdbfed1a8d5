/* mounts.h — rlm's own mount namespace, where each local sandbox's files lie on a tmpfs of
 * their own whose size is limits.workspace: the kernel refuses a write or an fallocate past it
 * (ENOSPC), whenever it comes, which a measure taken now and then could not. */
#ifndef RLM_MOUNTS_H
#define RLM_MOUNTS_H
#include <stdint.h>

/* Moves this process into a mount namespace of its own, once: as root a plain one; otherwise
 * with a user namespace that maps the user to itself (so its files, its uid and what it may
 * open stay what they were). Mounts made there reach neither the host nor other processes; the
 * host's later mounts still reach this one. 0, or -1 with errno; the step that failed in *step.
 * Must run while the process has a single thread (a user namespace requires it). */
int mounts_enter_private(const char **step);

/* Mounts a tmpfs of at most `bytes` bytes and `inodes` files at path (mode 0711, no devices,
 * no set-uid). 0, or -1 with errno. */
int mounts_tmpfs(const char *path, uint64_t bytes, uint64_t inodes);

/* Detaches the mount at path and every mount beneath it (lazily: what still uses the file system
 * keeps it until it lets go); a link at path is not followed. 0, or -1 with errno. */
int mounts_detach(const char *path);

/* The bytes the file system at path holds in blocks, and its size. 0, or -1 with errno. */
int mounts_space(const char *path, uint64_t *used, uint64_t *size);

#endif
