/* seccomp.h — the local sandbox's seccomp program, compiled when rlm is built (host/seccomp.c). */
#ifndef RLM_SECCOMP_H
#define RLM_SECCOMP_H
#include <stddef.h>

extern const unsigned char seccomp_bpf[];
extern const size_t seccomp_bpf_len;

#endif
