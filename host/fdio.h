/* fdio.h — whole writes on a descriptor, for the file and process bindings. */
#ifndef RLM_FDIO_H
#define RLM_FDIO_H
#include <stddef.h>

/* Writes all n bytes of p to fd, going on after EINTR and short writes; 0, or -1 with errno. */
int write_all(int fd, const char *p, size_t n);

#endif
