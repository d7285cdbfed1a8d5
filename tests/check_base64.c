/* check_base64.c — base64 (host/base64.h): RFC 4648's vectors, every byte, and what is refused. */
#include <string.h>

#include "check_host.h"
#include "base64.h"

static const char *VECTORS[][2] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                   {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                   {"foobar", "Zm9vYmFy"}};

START_TEST(rfc_vectors_both_ways)
{
    for (size_t i = 0; i < sizeof VECTORS / sizeof VECTORS[0]; i++) {
        const char *plain = VECTORS[i][0], *coded = VECTORS[i][1];
        char out[16] = {0};
        ck_assert_uint_eq(base64_encoded_len(strlen(plain)), strlen(coded));
        base64_encode((const unsigned char *)plain, strlen(plain), out);
        ck_assert_str_eq(out, coded);
        unsigned char back[16] = {0};
        ck_assert_int_eq(base64_decode(coded, strlen(coded), back), (long)strlen(plain));
        ck_assert_mem_eq(back, plain, strlen(plain));
    }
}
END_TEST

START_TEST(every_byte_round_trips)
{
    unsigned char all[256], back[258];
    char coded[344];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    base64_encode(all, sizeof all, coded);
    ck_assert_int_eq(base64_decode(coded, base64_encoded_len(sizeof all), back), 256);
    ck_assert_mem_eq(back, all, sizeof all);
}
END_TEST

START_TEST(whitespace_is_skipped)
{
    unsigned char out[8];
    const char *text = " Zm9v\r\nYmFy\t";
    ck_assert_int_eq(base64_decode(text, strlen(text), out), 6);
    ck_assert_mem_eq(out, "foobar", 6);
}
END_TEST

START_TEST(bad_text_is_refused)
{
    const char *bad[] = {"Zg", "Zg=", "Z===", "Zg==Zg==", "Zm9v!", "=Zm9", "Zg=a", "Zm9v\x80"};
    unsigned char out[16];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(base64_decode(bad[i], strlen(bad[i]), out) == -1, "accepted %s", bad[i]);
}
END_TEST

Suite *make_base64_suite(void)
{
    Suite *s = suite_create("base64");
    TCase *tc = tcase_create("codec");
    tcase_add_test(tc, rfc_vectors_both_ways);
    tcase_add_test(tc, every_byte_round_trips);
    tcase_add_test(tc, whitespace_is_skipped);
    tcase_add_test(tc, bad_text_is_refused);
    suite_add_tcase(s, tc);
    return s;
}
