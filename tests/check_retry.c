/* check_retry.c — host/retry.c: Retry-After, backoff with jitter, the delay the LLM and Daytona
 * bindings wait before going again. */
#include <string.h>

#include "check_host.h"
#include "retry.h"

START_TEST(retry_after_reads_seconds_and_dates)
{
    ck_assert_double_eq(retry_after_parse("1", 0), 1);
    ck_assert_double_eq(retry_after_parse(" 0.5 ", 0), 0.5);
    ck_assert_double_eq(retry_after_parse("soon", 0), -1);
    ck_assert_double_eq(retry_after_parse("-3", 0), -1);
    ck_assert_double_eq(retry_after_parse(NULL, 0), -1);
    /* Wed, 21 Oct 2015 07:28:00 GMT is 1445412480. */
    ck_assert_double_eq(retry_after_parse("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470), 10);
    ck_assert_double_eq(retry_after_parse("Wed, 21 Oct 2015 07:28:00 GMT", 1445412490), 0);
}
END_TEST

/* A finished call as the curl layer leaves it, with these raw header lines. */
static struct http_call answered(const char *headers, CURLcode result)
{
    struct http_call c;
    memset(&c, 0, sizeof c);
    c.status = 429;
    c.result = result;
    ck_assert_int_eq(buf_add(&c.headers, headers, strlen(headers)), 0);
    return c;
}

START_TEST(retry_after_is_read_from_the_response_headers)
{
    struct http_call c = answered("Content-Type: text/plain\r\nretry-after:  2.5 \r\n", CURLE_OK);
    ck_assert_double_eq(retry_after_header(&c), 2.5);
    buf_free(&c.headers);
    c = answered("Content-Type: text/plain\r\n", CURLE_OK);
    ck_assert_double_eq(retry_after_header(&c), -1);
    buf_free(&c.headers);
    /* Headers of a response that was then cut off are no instruction. */
    c = answered("Retry-After: 3\r\n", CURLE_PARTIAL_FILE);
    ck_assert_double_eq(retry_after_header(&c), -1);
    buf_free(&c.headers);
}
END_TEST

START_TEST(backoff_grows_with_jitter_up_to_the_cap)
{
    ck_assert_double_eq(retry_backoff_ms(1, 250, 8000, 0), 125);
    ck_assert_double_eq(retry_backoff_ms(1, 250, 8000, 0.999999), 249.999875);
    ck_assert_double_eq(retry_backoff_ms(3, 250, 8000, 0), 500);
    ck_assert_double_eq(retry_backoff_ms(30, 250, 8000, 0), 4000);
    ck_assert_double_le(retry_backoff_ms(30, 250, 8000, 0.999), 8000);
}
END_TEST

START_TEST(the_delay_honours_the_server_and_is_jittered)
{
    double lo = 1e9, hi = -1, slo = 1e9, shi = -1;
    for (int i = 0; i < 200; i++) {
        double u = retry_unit_random();
        ck_assert(u >= 0 && u < 1);
        double d = retry_delay_ms(3, 250, 8000, -1);   /* no word from the server */
        ck_assert_double_ge(d, 500);
        ck_assert_double_le(d, 1000);
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
        d = retry_delay_ms(3, 250, 8000, 2);           /* "Retry-After: 2" wins over backoff */
        ck_assert_double_ge(d, 2000);
        ck_assert_double_lt(d, 2100);
        slo = d < slo ? d : slo;
        shi = d > shi ? d : shi;
        ck_assert_double_lt(retry_delay_ms(9, 250, 8000, 0), 100);
    }
    /* Two hundred draws are not all alike, with or without word from the server. */
    ck_assert_double_gt(hi - lo, 50);
    ck_assert_double_gt(shi - slo, 10);
}
END_TEST

Suite *make_retry_suite(void)
{
    Suite *s = suite_create("retry");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, retry_after_reads_seconds_and_dates);
    tcase_add_test(tc, retry_after_is_read_from_the_response_headers);
    tcase_add_test(tc, backoff_grows_with_jitter_up_to_the_cap);
    tcase_add_test(tc, the_delay_honours_the_server_and_is_jittered);
    suite_add_tcase(s, tc);
    return s;
}
