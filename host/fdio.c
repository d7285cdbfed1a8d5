/* fdio.c — whole writes on a descriptor (fdio.h). */
#include <errno.h>
#include <unistd.h>

#include "fdio.h"

int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}
