/* check_llm.c — the stream splitter under the LLM binding (host/sse.c), fed the way curl feeds
 * it: in pieces cut anywhere. The binding itself is tested end to end against the stand-in by
 * tests/lua/test_llm.lua. */
#include <stdio.h>
#include <string.h>

#include "check_host.h"
#include "host.h"
#include "sse.h"

struct seen {
    int n;
    char event[16][64];
    struct buf data[16];
};

static int collect(void *ud, const char *event, const char *data, size_t len)
{
    struct seen *s = ud;
    ck_assert_int_lt(s->n, 16);
    ck_assert_uint_eq(strlen(data), len);   /* NUL-terminated, no embedded NUL here */
    snprintf(s->event[s->n], 64, "%s", event);
    memset(&s->data[s->n], 0, sizeof s->data[s->n]);
    ck_assert_int_eq(buf_add(&s->data[s->n], data, len), 0);
    s->n++;
    return 0;
}

static void seen_free(struct seen *s)
{
    for (int i = 0; i < s->n; i++)
        buf_free(&s->data[i]);
    s->n = 0;
}

/* Feeds text split at cut (and, with step, every step bytes after it). */
static void feed_split(struct sse *p, const char *text, size_t cut, size_t step, struct seen *s)
{
    size_t n = strlen(text);
    if (cut > n)
        cut = n;
    ck_assert_int_eq(sse_feed(p, text, cut, collect, s), 0);
    for (size_t at = cut; at < n; at += step) {
        size_t len = n - at < step ? n - at : step;
        ck_assert_int_eq(sse_feed(p, text + at, len, collect, s), 0);
    }
}

static const char *const ANTHROPIC_LIKE =
    "event: message_start\r\n"
    "data: {\"type\":\"message_start\"}\r\n"
    "\r\n"
    ": a comment, ignored\r\n"
    "event: content_block_delta\r\n"
    "data: {\"text\":\"a\"}\r\n"
    "\r\n"
    "event: ping\n"
    "data:{}\n"
    "\n"
    "data: line one\r"
    "data: line two\r"
    "\r"
    "event: no data, dropped\n"
    "\n"
    "data: [DONE]\n"
    "\n"
    "data: unfinished, never dispatched\n";

static void check_anthropic_like(struct seen *s)
{
    ck_assert_int_eq(s->n, 5);
    ck_assert_str_eq(s->event[0], "message_start");
    ck_assert_str_eq(s->data[0].data, "{\"type\":\"message_start\"}");
    ck_assert_str_eq(s->event[1], "content_block_delta");
    ck_assert_str_eq(s->data[1].data, "{\"text\":\"a\"}");
    ck_assert_str_eq(s->event[2], "ping");
    ck_assert_str_eq(s->data[2].data, "{}");   /* no space after the colon is fine too */
    ck_assert_str_eq(s->event[3], "");         /* the event name does not carry over */
    ck_assert_str_eq(s->data[3].data, "line one\nline two");
    ck_assert_str_eq(s->data[4].data, "[DONE]");
}

START_TEST(events_come_out_whole_wherever_the_bytes_are_cut)
{
    size_t n = strlen(ANTHROPIC_LIKE);
    for (size_t cut = 0; cut <= n; cut++) {
        struct sse p = {0};
        struct seen s = {0};
        feed_split(&p, ANTHROPIC_LIKE, cut, n, &s);
        check_anthropic_like(&s);
        seen_free(&s);
        sse_free(&p);
    }
}
END_TEST

START_TEST(one_byte_at_a_time_splits_crlf_between_calls)
{
    struct sse p = {0};
    struct seen s = {0};
    feed_split(&p, ANTHROPIC_LIKE, 0, 1, &s);
    check_anthropic_like(&s);
    seen_free(&s);
    sse_free(&p);
}
END_TEST

START_TEST(empty_data_is_an_event_and_one_space_is_stripped)
{
    struct sse p = {0};
    struct seen s = {0};
    const char *text = "data\n\ndata:  two spaces\n\nevent:x\ndata: \n\n";
    ck_assert_int_eq(sse_feed(&p, text, strlen(text), collect, &s), 0);
    ck_assert_int_eq(s.n, 3);
    ck_assert_str_eq(s.data[0].data, "");
    ck_assert_str_eq(s.data[1].data, " two spaces");
    ck_assert_str_eq(s.event[2], "x");
    ck_assert_str_eq(s.data[2].data, "");
    seen_free(&s);
    sse_free(&p);
}
END_TEST

static int stop_at_second(void *ud, const char *event, const char *data, size_t len)
{
    int *count = ud;
    (void)event, (void)data, (void)len;
    return ++*count == 2 ? 7 : 0;
}

START_TEST(a_callback_can_stop_the_feed)
{
    struct sse p = {0};
    int count = 0;
    const char *text = "data: 1\n\ndata: 2\n\ndata: 3\n\n";
    ck_assert_int_eq(sse_feed(&p, text, strlen(text), stop_at_second, &count), 7);
    ck_assert_int_eq(count, 2);
    sse_free(&p);
}
END_TEST

START_TEST(long_lines_grow_the_buffer)
{
    struct sse p = {0};
    struct seen s = {0};
    static char text[100000];
    memcpy(text, "data: ", 6);
    memset(text + 6, 'x', sizeof text - 9);
    memcpy(text + sizeof text - 3, "\n\n", 3);
    feed_split(&p, text, 1000, 4096, &s);
    ck_assert_int_eq(s.n, 1);
    ck_assert_uint_eq(s.data[0].len, sizeof text - 9);
    seen_free(&s);
    sse_free(&p);
}
END_TEST

Suite *make_llm_suite(void)
{
    Suite *s = suite_create("llm");
    TCase *tc = tcase_create("sse");
    tcase_add_test(tc, events_come_out_whole_wherever_the_bytes_are_cut);
    tcase_add_test(tc, one_byte_at_a_time_splits_crlf_between_calls);
    tcase_add_test(tc, empty_data_is_an_event_and_one_space_is_stripped);
    tcase_add_test(tc, a_callback_can_stop_the_feed);
    tcase_add_test(tc, long_lines_grow_the_buffer);
    suite_add_tcase(s, tc);
    return s;
}
