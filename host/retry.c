/* retry.c — see retry.h. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "loop.h"
#include "retry.h"

double retry_after_parse(const char *value, time_t now)
{
    if (value == NULL)
        return -1;
    while (*value == ' ')
        value++;
    char *rest;
    double s = strtod(value, &rest);
    if (rest != value) {
        while (*rest == ' ')
            rest++;
        if (*rest == '\0')
            return s >= 0 ? s : -1;
    }
    time_t when = curl_getdate(value, &now);
    if (when == -1)
        return -1;
    return when > now ? (double)(when - now) : 0;
}

struct longest_wait {
    time_t now;
    double seconds;
};

/* Retry-After, and Retry-After-{throttler} as Daytona's named throttlers send it instead
 * (apps/api/src/common/guards/authenticated-rate-limit.guard.ts; the headers are listed in
 * apps/docs/src/content/docs/en/limits.mdx). retry-after-ms is OpenAI's, in milliseconds. */
static int note_wait(void *ud, const char *name, size_t nlen, const char *val, size_t vlen)
{
    static const char prefix[] = "retry-after";
    const size_t plen = sizeof prefix - 1;
    struct longest_wait *w = ud;
    if (nlen < plen || strncasecmp(name, prefix, plen) != 0)
        return 0;
    if (nlen > plen && (name[plen] != '-' || (nlen == plen + 3 &&
                                               strncasecmp(name + plen, "-ms", 3) == 0)))
        return 0;
    char value[64];
    size_t n = vlen < sizeof value - 1 ? vlen : sizeof value - 1;
    memcpy(value, val, n);
    value[n] = '\0';
    double s = retry_after_parse(value, w->now);
    if (s > w->seconds)
        w->seconds = s;
    return 0;
}

double retry_after_header(const struct http_call *c)
{
    struct longest_wait w = {time(NULL), -1};
    if (c->result != CURLE_OK)
        return -1;
    http_each_header(c, note_wait, &w);
    return w.seconds;
}

double retry_backoff_ms(int attempt, double base_ms, double cap_ms, double unit)
{
    double d = base_ms;
    for (int i = 1; i < attempt && d < cap_ms; i++)
        d *= 2;
    if (d > cap_ms)
        d = cap_ms;
    return d / 2 + d / 2 * unit;
}

double retry_unit_random(void)
{
    unsigned r;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        r = (unsigned)loop_now_ms() * 2654435761u;
    return (double)r / 4294967296.0;
}

double retry_delay_ms(int attempt, double base_ms, double cap_ms, double server_wait_s)
{
    if (server_wait_s >= 0)
        return server_wait_s * 1e3 + 100 * retry_unit_random();
    return retry_backoff_ms(attempt, base_ms, cap_ms, retry_unit_random());
}
