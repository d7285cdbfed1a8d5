/* retry.c — see retry.h. */
#include <stdlib.h>
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

double retry_after_header(const struct http_call *c)
{
    char value[64];
    if (c->result != CURLE_OK || http_header(c, "retry-after", value, sizeof value) != 0)
        return -1;
    return retry_after_parse(value, time(NULL));
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
