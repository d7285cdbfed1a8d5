/* check_daytona.c — the pure wire pieces of the Daytona binding (host/daytona_wire.c):
 * URL escaping, multipart encoding and parsing (retries: check_retry.c). The binding itself is
 * tested end to end against the stand-in by tests/lua/test_daytona_client.lua. */
#include <stdio.h>
#include <string.h>

#include "check_host.h"
#include "daytona_wire.h"

START_TEST(escaping_keeps_only_unreserved_bytes)
{
    struct buf b = {0};
    ck_assert_int_eq(dw_escape(&b, "a b/c~_.-\xc3\xa9%", 12), 0);
    ck_assert_str_eq(b.data, "a%20b%2Fc~_.-%C3%A9%25");
    buf_clear(&b);
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    ck_assert_int_eq(dw_escape(&b, all, sizeof all), 0);
    /* 66 unreserved bytes stay, the other 190 become three characters each. */
    ck_assert_uint_eq(b.len, 66 + 190 * 3);
    ck_assert_ptr_nonnull(strstr(b.data, "%00%01"));
    ck_assert_ptr_nonnull(strstr(b.data, "%FE%FF"));
    buf_free(&b);
}
END_TEST

struct collected {
    int n;
    char name[8][64], filename[8][64], ctype[8][64];
    struct buf data[8];
};

static int collect(void *ud, const struct dw_part *p)
{
    struct collected *c = ud;
    int i = c->n++;
    ck_assert_int_lt(i, 8);
    snprintf(c->name[i], 64, "%.*s", (int)p->name_len, p->name ? p->name : "");
    if (p->filename)
        snprintf(c->filename[i], 64, "%.*s", (int)p->filename_len, p->filename);
    else
        strcpy(c->filename[i], "-");
    if (p->content_type)
        snprintf(c->ctype[i], 64, "%.*s", (int)p->content_type_len, p->content_type);
    else
        strcpy(c->ctype[i], "-");
    memset(&c->data[i], 0, sizeof c->data[i]);
    ck_assert_int_eq(buf_add(&c->data[i], p->data, p->len), 0);
    return 0;
}

static void free_collected(struct collected *c)
{
    for (int i = 0; i < c->n; i++)
        buf_free(&c->data[i]);
}

START_TEST(multipart_round_trips_binary_data_and_awkward_names)
{
    char bytes[256 * 2];
    for (int i = 0; i < 512; i++)
        bytes[i] = (char)(i & 255);
    char boundary[DW_BOUNDARY_SIZE];
    dw_boundary(boundary);
    ck_assert_uint_eq(strlen(boundary), DW_BOUNDARY_SIZE - 1);
    /* Data that looks like a delimiter with another boundary must not end the part. */
    static const char tricky[] = "\r\n--rlm-\r\n--\r\n\r\n";
    struct dw_part parts[] = {
        {.name = "files[0].path", .name_len = 13, .data = "/tmp/x y", .len = 8},
        {.name = "files[0].file", .name_len = 13, .filename = "a\"b\\c.bin", .filename_len = 9,
         .content_type = "application/octet-stream", .content_type_len = 24,
         .data = bytes, .len = sizeof bytes},
        {.name = "empty", .name_len = 5, .data = "", .len = 0},
        {.name = "tricky", .name_len = 6, .data = tricky, .len = sizeof tricky - 1},
    };
    struct buf body = {0}, scratch = {0};
    char err[128];
    ck_assert_int_eq(dw_multipart_encode(&body, boundary, parts, 4, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(body.data, "filename=\"a\\\"b\\\\c.bin\""));
    struct collected got = {0};
    ck_assert_int_eq(dw_multipart_parse(body.data, body.len, boundary, &scratch, collect, &got,
                                        err, sizeof err), 0);
    ck_assert_int_eq(got.n, 4);
    ck_assert_str_eq(got.name[0], "files[0].path");
    ck_assert_str_eq(got.data[0].data, "/tmp/x y");
    ck_assert_str_eq(got.filename[0], "-");
    ck_assert_str_eq(got.filename[1], "a\"b\\c.bin");
    ck_assert_str_eq(got.ctype[1], "application/octet-stream");
    ck_assert_uint_eq(got.data[1].len, sizeof bytes);
    ck_assert_int_eq(memcmp(got.data[1].data, bytes, sizeof bytes), 0);
    ck_assert_uint_eq(got.data[2].len, 0);
    ck_assert_uint_eq(got.data[3].len, sizeof tricky - 1);
    ck_assert_int_eq(memcmp(got.data[3].data, tricky, sizeof tricky - 1), 0);
    free_collected(&got);
    buf_free(&body);
    buf_free(&scratch);
}
END_TEST

START_TEST(multipart_refuses_header_injection)
{
    struct dw_part bad[] = {{.name = "x\r\nX-Evil: 1", .name_len = 13, .data = "", .len = 0}};
    struct buf body = {0};
    char err[128];
    ck_assert_int_eq(dw_multipart_encode(&body, "b", bad, 1, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "part 1"));
    buf_free(&body);
}
END_TEST

/* What Daytona's daemon (Go's mime/multipart) sends for a bulk download with a missing file. */
static const char download[] =
    "preamble is ignored\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"/home/daytona/a.txt\"\r\n"
    "Content-Type: application/octet-stream\r\n"
    "\r\n"
    "hello\r\n"
    "--XyZ\r\n"
    "content-disposition: form-data; filename=\"/nope\"; name=error\r\n"
    "content-type: application/json\r\n"
    "\r\n"
    "{\"message\":\"not found\",\"statusCode\":404,\"code\":\"FILE_NOT_FOUND\"}\r\n"
    "--XyZ--\r\n"
    "epilogue is ignored";

START_TEST(multipart_parses_a_download_with_an_error_part)
{
    struct buf scratch = {0};
    struct collected got = {0};
    char err[128];
    ck_assert_int_eq(dw_multipart_parse(download, sizeof download - 1, "XyZ", &scratch, collect,
                                        &got, err, sizeof err), 0);
    ck_assert_int_eq(got.n, 2);
    ck_assert_str_eq(got.name[0], "file");
    ck_assert_str_eq(got.filename[0], "/home/daytona/a.txt");
    ck_assert_str_eq(got.data[0].data, "hello");
    ck_assert_str_eq(got.name[1], "error");
    ck_assert_str_eq(got.filename[1], "/nope");
    ck_assert_str_eq(got.ctype[1], "application/json");
    ck_assert_ptr_nonnull(strstr(got.data[1].data, "FILE_NOT_FOUND"));
    free_collected(&got);
    buf_free(&scratch);
}
END_TEST

START_TEST(broken_multipart_bodies_are_errors)
{
    struct buf scratch = {0};
    struct collected got = {0};
    char err[128];
    /* Cut before the closing delimiter. */
    ck_assert_int_eq(dw_multipart_parse(download, 150, "XyZ", &scratch, collect, &got, err,
                                        sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "part"));
    free_collected(&got);
    got.n = 0;
    ck_assert_int_eq(dw_multipart_parse("{}", 2, "XyZ", &scratch, collect, &got, err,
                                        sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "boundary"));
    buf_free(&scratch);
}
END_TEST

START_TEST(boundaries_are_read_from_content_types)
{
    char b[64];
    ck_assert_int_eq(dw_multipart_boundary("multipart/form-data; boundary=abc", b, sizeof b), 0);
    ck_assert_str_eq(b, "abc");
    ck_assert_int_eq(dw_multipart_boundary("Multipart/Form-Data; charset=utf-8; "
                                           "BOUNDARY=\"a b\\\"c\"", b, sizeof b), 0);
    ck_assert_str_eq(b, "a b\"c");
    ck_assert_int_ne(dw_multipart_boundary("application/json", b, sizeof b), 0);
    ck_assert_int_ne(dw_multipart_boundary("multipart/form-data", b, sizeof b), 0);
    ck_assert_int_ne(dw_multipart_boundary("multipart/form-data; boundary=", b, sizeof b), 0);
}
END_TEST

Suite *make_daytona_suite(void)
{
    Suite *s = suite_create("daytona");
    TCase *tc = tcase_create("wire");
    tcase_add_test(tc, escaping_keeps_only_unreserved_bytes);
    tcase_add_test(tc, multipart_round_trips_binary_data_and_awkward_names);
    tcase_add_test(tc, multipart_refuses_header_injection);
    tcase_add_test(tc, multipart_parses_a_download_with_an_error_part);
    tcase_add_test(tc, broken_multipart_bodies_are_errors);
    tcase_add_test(tc, boundaries_are_read_from_content_types);
    suite_add_tcase(s, tc);
    return s;
}
