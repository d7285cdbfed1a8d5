/* check_json.c — the JSON codec through its C API (host/json.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "check_host.h"
#include "json.h"

int luaopen_rlm_core_json(lua_State *L);

static lua_State *L;
static char err[256];

static void setup(void)
{
    L = luaL_newstate();
    luaL_openlibs(L);
    luaL_requiref(L, "json", luaopen_rlm_core_json, 1);   /* for json.array() in expressions */
    lua_pop(L, 1);
    err[0] = '\0';
}

static void teardown(void)
{
    lua_close(L);
}

/* Pushes the value of a Lua expression. */
static void eval(const char *expr)
{
    lua_pushfstring(L, "return %s", expr);
    int st = luaL_loadstring(L, lua_tostring(L, -1));
    if (st == LUA_OK)
        st = lua_pcall(L, 0, 1, 0);
    ck_assert_msg(st == LUA_OK, "%s: %s", expr, lua_tostring(L, -1));
    lua_remove(L, -2);
}

/* The JSON text of a Lua expression, or NULL with the message in err. The stack is unchanged. */
static const char *enc_opts(const char *expr, int indent, int hash_order)
{
    static char out[4096];
    struct json_encode_opts o = {.indent = indent, .hash_order = hash_order};
    eval(expr);
    int top = lua_gettop(L);
    if (!json_encode(L, -1, &o, err, sizeof err)) {
        ck_assert_int_eq(lua_gettop(L), top);
        lua_pop(L, 1);
        return NULL;
    }
    ck_assert_int_eq(lua_gettop(L), top + 1);
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    ck_assert_uint_lt(n, sizeof out);
    memcpy(out, s, n + 1);
    lua_pop(L, 2);
    return out;
}

static const char *enc(const char *expr)
{
    return enc_opts(expr, 0, 0);
}

#define ck_enc(expr, want) do { \
        const char *got_ = enc(expr); \
        ck_assert_msg(got_ != NULL, "%s: %s", expr, err); \
        ck_assert_str_eq(got_, want); \
    } while (0)

#define ck_enc_fails(expr, msg) do { \
        ck_assert_msg(enc(expr) == NULL, "%s should not encode", expr); \
        ck_assert_str_eq(err, msg); \
    } while (0)

/* Decodes text (with its exact length) and leaves the value on the stack. */
static void dec_len(const char *text, size_t len)
{
    int top = lua_gettop(L);
    ck_assert_msg(json_check(text, len, err, sizeof err), "check of %s: %s", text, err);
    ck_assert_msg(json_decode(L, text, len, err, sizeof err), "%s: %s", text, err);
    ck_assert_int_eq(lua_gettop(L), top + 1);
}

static void dec(const char *text)
{
    dec_len(text, strlen(text));
}

/* Both the decoder and the checker (json_check) refuse text, with the same message. */
static void ck_dec_fails(const char *text, const char *msg)
{
    int top = lua_gettop(L);
    ck_assert_msg(!json_decode(L, text, strlen(text), err, sizeof err), "%s decoded", text);
    ck_assert_int_eq(lua_gettop(L), top);
    ck_assert_str_eq(err, msg);
    err[0] = '\0';
    ck_assert_msg(!json_check(text, strlen(text), err, sizeof err), "%s checked", text);
    ck_assert_str_eq(err, msg);
}

/* Decodes text and encodes the result again (keys in byte order, the default). */
static const char *reencode(const char *text)
{
    static char out[4096];
    dec(text);
    ck_assert_msg(json_encode(L, -1, NULL, err, sizeof err), "%s", err);
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    ck_assert_uint_lt(n, sizeof out);
    memcpy(out, s, n + 1);
    lua_pop(L, 2);
    return out;
}

START_TEST(decode_integers_exact)
{
    dec("2432902008176640000");
    ck_assert(lua_isinteger(L, -1));
    ck_assert(lua_tointeger(L, -1) == 2432902008176640000LL);
    dec("-9223372036854775808");
    ck_assert(lua_isinteger(L, -1));
    ck_assert(lua_tointeger(L, -1) == LUA_MININTEGER);
    dec("9223372036854775807");
    ck_assert(lua_isinteger(L, -1));
    ck_assert(lua_tointeger(L, -1) == LUA_MAXINTEGER);
    dec("-0");
    ck_assert(lua_isinteger(L, -1));
    ck_assert_int_eq(lua_tointeger(L, -1), 0);
    dec("42");
    ck_assert(lua_isinteger(L, -1));
    ck_assert_int_eq(lua_tointeger(L, -1), 42);
}
END_TEST

START_TEST(decode_floats)
{
    dec("9223372036854775808");   /* past int64: a float */
    ck_assert(!lua_isinteger(L, -1));
    ck_assert(lua_tonumber(L, -1) == 9223372036854775808.0);
    dec("-9223372036854775809");
    ck_assert(!lua_isinteger(L, -1));
    dec("123456789012345678901234567890");
    ck_assert(!lua_isinteger(L, -1));
    ck_assert(lua_tonumber(L, -1) == 1.2345678901234568e29);
    char longnum[200];   /* longer than the decoder's stack copy */
    memset(longnum, '1', 150);
    strcpy(longnum + 150, ".5e-140");
    dec(longnum);
    ck_assert(lua_tonumber(L, -1) == strtod(longnum, NULL));
    dec("1.0");
    ck_assert(!lua_isinteger(L, -1));
    ck_assert(lua_tonumber(L, -1) == 1.0);
    dec("1e2");
    ck_assert(!lua_isinteger(L, -1));
    ck_assert(lua_tonumber(L, -1) == 100.0);
    dec("-2.5E-3");
    ck_assert(lua_tonumber(L, -1) == -0.0025);
    dec("0.1");
    ck_assert(lua_tonumber(L, -1) == 0.1);
    dec("-0.0");
    ck_assert(signbit(lua_tonumber(L, -1)));
}
END_TEST

START_TEST(encode_numbers)
{
    ck_enc("42", "42");
    ck_enc("42.0", "42.0");
    ck_enc("-7", "-7");
    ck_enc("math.mininteger", "-9223372036854775808");
    ck_enc("math.maxinteger", "9223372036854775807");
    ck_enc("2432902008176640000", "2432902008176640000");
    ck_enc("0.1", "0.1");
    ck_enc("1/3", "0.3333333333333333");
    ck_enc("2^53", "9007199254740992.0");
    ck_enc("1e300", "1e+300");
    ck_enc("-0.0", "-0.0");
    ck_enc("5e-324", "4.94065645841247e-324");
    ck_enc("0.1 + 0.2", "0.30000000000000004");
    ck_enc_fails("0/0", "cannot encode NaN at $");
    ck_enc_fails("{x = {1, math.huge}}", "cannot encode inf at $.x[2]");
    ck_enc_fails("-math.huge", "cannot encode -inf at $");
}
END_TEST

/* A double of 64 random bits: NaN and the infinities among them. */
static double random_double(void)
{
    uint64_t bits = 0;
    for (int k = 0; k < 4; k++)
        bits = bits << 16 | (uint64_t)(rand() & 0xFFFF);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* Every float survives encode then decode bit for bit, and integral ones stay floats. */
START_TEST(float_round_trip)
{
    srand(7);
    for (int i = 0; i < 2000; i++) {
        double v = random_double();
        if (i % 3 == 0)
            v = (double)(rand() - RAND_MAX / 2) * 1024;   /* integral values too */
        if (isnan(v) || isinf(v))
            continue;
        lua_pushnumber(L, v);
        ck_assert(json_encode(L, -1, NULL, err, sizeof err));
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        dec_len(s, n);
        ck_assert_msg(!lua_isinteger(L, -1), "%s decoded as an integer", s);
        double back = lua_tonumber(L, -1);
        ck_assert_msg(memcmp(&back, &v, sizeof v) == 0, "%s: %.17g != %.17g", s, back, v);
        lua_pop(L, 3);
    }
}
END_TEST

/* The significant digits of the text s: from its first nonzero digit to its last, before any
 * exponent. */
static int significant_digits(const char *s)
{
    int n = 0, run = 0;
    for (; *s && *s != 'e'; s++) {
        if (*s < '0' || *s > '9' || (n == 0 && *s == '0'))
            continue;
        run++;
        if (*s != '0')
            n = run;
    }
    return n;
}

/* Each float is written in as few digits as reads back, 15 at the least as %.15g writes them:
 * one digit fewer never reads back as the same double. The values are the products and
 * quotients of API traffic, exact ties at the 16th or 17th digit, the ends of the range, and
 * random doubles of every magnitude. */
static void ck_float_shortest(double v)
{
    lua_pushnumber(L, v);
    ck_assert(json_encode(L, -1, NULL, err, sizeof err));
    const char *s = lua_tostring(L, -1);
    int digits = significant_digits(s);
    ck_assert_msg(digits >= 1 && digits <= 17, "%.17g: wrote %s", v, s);
    if (digits > 15) {
        char fewer[40];
        snprintf(fewer, sizeof fewer, "%.*g", digits - 1, v);
        ck_assert_msg(strtod(fewer, NULL) != v, "%.17g: wrote %s where %s reads back", v, s,
                      fewer);
    }
    dec(s);
    double back = lua_tonumber(L, -1);
    ck_assert_msg(memcmp(&back, &v, sizeof v) == 0, "%s: %.17g != %.17g", s, back, v);
    lua_pop(L, 3);
}

START_TEST(float_text_shortest)
{
    for (int i = 1; i <= 200; i++) {
        ck_float_shortest(i / 3.0);
        ck_float_shortest((i % 100) / 7.0 + 0.5);
        ck_float_shortest(i * 1.25e-6);
        ck_float_shortest(-i / 11.0);
        ck_float_shortest(1e14 / i + 0.25);
    }
    for (int k = 19; k <= 24; k++)   /* exact ties: m / 2^k ends in ...5 at the 16th or 17th digit */
        for (int m = 1; m <= 199; m += 2)
            ck_float_shortest(ldexp(m, -k));
    ck_float_shortest(0.14285714285714285);
    ck_float_shortest(2.5e-17);
    ck_float_shortest(5e-324);
    ck_float_shortest(1.7976931348623157e308);
    srand(11);
    for (int i = 0; i < 1000; i++) {
        double v = random_double();
        if (!isnan(v) && !isinf(v))
            ck_float_shortest(v);
    }
}
END_TEST

START_TEST(encode_strings)
{
    ck_enc("'plain'", "\"plain\"");
    ck_enc("'q\"b\\\\s/'", "\"q\\\"b\\\\s/\"");
    ck_enc("'\\n\\t\\r\\b\\f\\0\\1\\31\\127'", "\"\\n\\t\\r\\b\\f\\u0000\\u0001\\u001f\x7f\"");
    ck_enc("'h\\u{E9}\\u{20AC}\\u{1F600}'", "\"h\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"");
    /* invalid UTF-8 as surrogateescape: lone bytes, truncated, overlong, surrogate, > U+10FFFF */
    ck_enc("'a\\xff\\x80b'", "\"a\\udcff\\udc80b\"");
    ck_enc("'\\xe2\\x82'", "\"\\udce2\\udc82\"");
    ck_enc("'\\xe2\\x82\\xe2\\x82\\xac'", "\"\\udce2\\udc82\xE2\x82\xAC\"");
    ck_enc("'\\xc0\\xaf'", "\"\\udcc0\\udcaf\"");
    ck_enc("'\\xed\\xa0\\x80'", "\"\\udced\\udca0\\udc80\"");
    ck_enc("'\\xf4\\x90\\x80\\x80'", "\"\\udcf4\\udc90\\udc80\\udc80\"");
    ck_enc("'\\xf4\\x8f\\xbf\\xbf'", "\"\xF4\x8F\xBF\xBF\"");
}
END_TEST

START_TEST(decode_strings)
{
    size_t n;
    dec("\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000z\"");
    const char *s = lua_tolstring(L, -1, &n);
    ck_assert_uint_eq(n, 11);
    ck_assert(memcmp(s, "a\"\\/\b\f\n\r\t\0z", 11) == 0);
    dec("\"\\u00e9\\u20AC\\ud83d\\ude00\"");   /* BMP and a surrogate pair */
    ck_assert_str_eq(lua_tostring(L, -1), "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
    dec("\"\\udc80\\udcff\"");                  /* surrogateescape bytes */
    ck_assert_str_eq(lua_tostring(L, -1), "\x80\xFF");
    dec("\"\\ud800x\\udc00\\udfff\"");          /* other lone surrogates: WTF-8 */
    ck_assert_str_eq(lua_tostring(L, -1), "\xED\xA0\x80x\xED\xB0\x80\xED\xBF\xBF");
    dec("\"\\ud800\\udc80\"");                  /* a pair wins over surrogateescape */
    ck_assert_str_eq(lua_tostring(L, -1), "\xF0\x90\x82\x80");
    dec("\"raw \xff\xfe bytes\"");              /* raw invalid UTF-8 is kept as it is */
    ck_assert_str_eq(lua_tostring(L, -1), "raw \xff\xfe bytes");
    char big[3000];                             /* escapes past the first scratch size */
    big[0] = '"';
    for (int i = 0; i < 499; i++)
        memcpy(big + 1 + i * 6, "\\u00e9", 6);
    memcpy(big + 1 + 499 * 6, "\"", 2);
    dec(big);
    s = lua_tolstring(L, -1, &n);
    ck_assert_uint_eq(n, 998);
    ck_assert(memcmp(s + 996, "\xC3\xA9", 2) == 0);
}
END_TEST

/* Any byte string survives Lua -> JSON -> Lua, including every byte value. */
START_TEST(string_round_trip)
{
    char all[512];
    for (int i = 0; i < 256; i++)
        all[i] = all[511 - i] = (char)i;
    lua_pushlstring(L, all, sizeof all);
    ck_assert(json_encode(L, -1, NULL, err, sizeof err));
    size_t n, m;
    const char *text = lua_tolstring(L, -1, &n);
    dec_len(text, n);
    const char *back = lua_tolstring(L, -1, &m);
    ck_assert_uint_eq(m, sizeof all);
    ck_assert(memcmp(back, all, m) == 0);
    ck_assert(lua_rawequal(L, -1, -3));
}
END_TEST

START_TEST(decode_errors)
{
    ck_dec_fails("", "invalid JSON at byte 0: unexpected end of input");
    ck_dec_fails("   ", "invalid JSON at byte 3: unexpected end of input");
    ck_dec_fails("[1,2", "invalid JSON at byte 4: unexpected end of input");
    ck_dec_fails("[1 2]", "invalid JSON at byte 3: expected ',' or ']'");
    ck_dec_fails("[1,]", "invalid JSON at byte 3: expected a value");
    ck_dec_fails("{\"a\":1 \"b\":2}", "invalid JSON at byte 7: expected ',' or '}'");
    ck_dec_fails("{\"a\" 1}", "invalid JSON at byte 5: expected ':'");
    ck_dec_fails("{\"a\":1,}", "invalid JSON at byte 7: expected a string key");
    ck_dec_fails("{1:2}", "invalid JSON at byte 1: expected a string key");
    ck_dec_fails("\"abc", "invalid JSON at byte 0: unterminated string");
    ck_dec_fails("[\"a\\", "invalid JSON at byte 1: unterminated string");
    ck_dec_fails("\"a\nb\"", "invalid JSON at byte 2: control character in string");
    ck_dec_fails("\"a\\x\"", "invalid JSON at byte 2: invalid escape");
    ck_dec_fails("\"\\u12G4\"", "invalid JSON at byte 1: invalid \\u escape");
    ck_dec_fails("\"\\u12\"", "invalid JSON at byte 1: invalid \\u escape");
    ck_dec_fails("01", "invalid JSON at byte 0: invalid number (leading zero)");
    ck_dec_fails("-", "invalid JSON at byte 0: invalid number");
    ck_dec_fails("1.", "invalid JSON at byte 0: invalid number");
    ck_dec_fails("1e+", "invalid JSON at byte 0: invalid number");
    ck_dec_fails(".5", "invalid JSON at byte 0: expected a value");
    ck_dec_fails("tru", "invalid JSON at byte 0: expected a value");
    ck_dec_fails("NaN", "invalid JSON at byte 0: expected a value");
    ck_dec_fails("{} x", "invalid JSON at byte 3: unexpected data after the value");
    ck_dec_fails("1 2", "invalid JSON at byte 2: unexpected data after the value");
    /* not NUL-terminated: the decoder must stop at len */
    ck_assert(json_decode(L, "123456", 3, err, sizeof err));
    ck_assert_int_eq(lua_tointeger(L, -1), 123);
    ck_assert(!json_decode(L, "\"ab\"", 3, err, sizeof err));
    ck_assert_str_eq(err, "invalid JSON at byte 0: unterminated string");
}
END_TEST

START_TEST(values_and_whitespace)
{
    dec(" \t\r\n{\"t\": true, \"f\": false, \"n\": null, \"a\": [null]} \n");
    lua_getfield(L, -1, "t");
    ck_assert(lua_isboolean(L, -1) && lua_toboolean(L, -1));
    lua_getfield(L, -2, "f");
    ck_assert(lua_isboolean(L, -1) && !lua_toboolean(L, -1));
    lua_getfield(L, -3, "n");
    ck_assert(lua_islightuserdata(L, -1) && lua_touserdata(L, -1) == NULL);
    lua_getfield(L, -4, "a");
    ck_assert_int_eq((int)lua_rawlen(L, -1), 1);
    ck_enc("nil", "null");
    ck_enc("json.null", "null");
    ck_enc("true", "true");
    ck_enc_fails("{f = print}", "cannot encode a function at $.f");
    ck_enc_fails("{coroutine.create(print)}", "cannot encode a thread at $[1]");
    ck_enc_fails("{io.stdout}", "cannot encode a userdata at $[1]");
}
END_TEST

START_TEST(containers_keep_their_kind)
{
    ck_assert_str_eq(reencode("[]"), "[]");
    ck_assert_str_eq(reencode("{}"), "{}");
    ck_assert_str_eq(reencode("{\"a\":[],\"b\":{},\"c\":[[],{}]}"), "{\"a\":[],\"b\":{},\"c\":[[],{}]}");
    ck_assert_str_eq(reencode("{\"1\":1,\"2\":2}"), "{\"1\":1,\"2\":2}");   /* stays an object */
    ck_assert_str_eq(reencode("[1,null,3]"), "[1,null,3]");
    ck_assert_str_eq(reencode("{\"a\":1,\"a\":2}"), "{\"a\":2}");

    dec("[[], {}]");
    lua_rawgeti(L, -1, 1);
    json_push_array_mt(L);
    ck_assert(lua_getmetatable(L, -2) && lua_rawequal(L, -1, -2));
    lua_pop(L, 3);
    lua_rawgeti(L, -1, 2);
    json_push_object_mt(L);
    ck_assert(lua_getmetatable(L, -2) && lua_rawequal(L, -1, -2));
    lua_pop(L, 4);

    eval("{1, 2}");
    ck_assert_int_eq(json_is_array(L, -1), 1);
    eval("{}");
    ck_assert_int_eq(json_is_array(L, -1), 0);
    eval("json.array({})");
    ck_assert_int_eq(json_is_array(L, -1), 1);
    eval("{a = 1}");
    ck_assert_int_eq(json_is_array(L, -1), 0);
    lua_pushinteger(L, 1);
    ck_assert_int_eq(json_is_array(L, -1), 0);
}
END_TEST

START_TEST(table_shapes)
{
    ck_enc("{}", "{}");
    ck_enc("{1, 2, 3}", "[1,2,3]");
    ck_enc("{a = 1, b = 'x'}", "{\"a\":1,\"b\":\"x\"}");
    ck_enc("{[1] = 'a', [3] = 'c'}", "[\"a\",null,\"c\"]");            /* a hole, not sparse */
    ck_enc("json.array({})", "[]");
    ck_enc("json.array({[2] = true})", "[null,true]");
    ck_enc("json.object({})", "{}");
    ck_enc("json.object({1, 2})", "{\"1\":1,\"2\":2}");
    ck_enc("json.object({[10] = 'x', [-2] = 'y', b = 1})", "{\"-2\":\"y\",\"10\":\"x\",\"b\":1}");
    ck_enc_fails("{1, x = 2}", "table with mixed keys at $");
    ck_enc_fails("{a = {b = {[5] = 1}}}", "sparse array (largest index 5, 1 elements) at $.a.b");
    ck_enc_fails("{[0] = 1}", "table with an integer key below 1 (arrays start at 1) at $");
    ck_enc_fails("{[1.5] = 1}", "cannot encode a float key at $");
    ck_enc_fails("{[true] = 1}", "cannot encode a boolean key at $");
    ck_enc_fails("json.array({x = 1})", "array with string keys at $");
    ck_enc_fails("json.object({[true] = 1})", "cannot encode a boolean key at $[<boolean>]");
    ck_enc_fails("{tools = {{}, {f = print}}}", "cannot encode a function at $.tools[2].f");
    ck_enc_fails("{['a b'] = {print}}", "cannot encode a function at $[\"a b\"][1]");
}
END_TEST

START_TEST(sort_and_indent)
{
    const char *expr = "{b = 1, a = {1, {c = json.array(), d = {}}}, ['aa'] = 'x', A = 2}";
    ck_enc(expr, "{\"A\":2,\"a\":[1,{\"c\":[],\"d\":{}}],\"aa\":\"x\",\"b\":1}");
    const char *pretty = enc_opts(expr, 2, 0);
    ck_assert_ptr_nonnull(pretty);
    ck_assert_str_eq(pretty,
                     "{\n"
                     "  \"A\": 2,\n"
                     "  \"a\": [\n"
                     "    1,\n"
                     "    {\n"
                     "      \"c\": [],\n"
                     "      \"d\": {}\n"
                     "    }\n"
                     "  ],\n"
                     "  \"aa\": \"x\",\n"
                     "  \"b\": 1\n"
                     "}");
    const char *unsorted = enc_opts("{x = {y = 1}}", 0, 1);
    ck_assert_str_eq(unsorted, "{\"x\":{\"y\":1}}");
    const char *four = enc_opts("{1}", 4, 0);
    ck_assert_str_eq(four, "[\n    1\n]");
}
END_TEST

static void nested(char *s, int depth, char open, char close)
{
    memset(s, open, (size_t)depth);
    memset(s + depth, close, (size_t)depth);
    s[2 * depth] = '\0';
}

START_TEST(depth_limit)
{
    static char s[2 * (JSON_MAX_DEPTH + 1) + 1];
    nested(s, JSON_MAX_DEPTH, '[', ']');
    dec(s);
    ck_assert(json_encode(L, -1, NULL, err, sizeof err));
    ck_assert_str_eq(lua_tostring(L, -1), s);
    nested(s, JSON_MAX_DEPTH + 1, '[', ']');
    ck_dec_fails(s, "invalid JSON at byte 1000: nesting deeper than 1000 levels");
    /* 1001 levels built in Lua cannot be encoded either */
    eval("(function() local t = {} for i = 1, 1000 do t = {t} end return t end)()");
    ck_assert(!json_encode(L, -1, NULL, err, sizeof err));
    const char *want = "nesting deeper than 1000 levels (a cycle?) at $[1][1][1]";
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
}
END_TEST

START_TEST(cycle_is_a_depth_error)
{
    const char *r = enc("(function() local t = {} t.next = {back = t} return t end)()");
    ck_assert_ptr_null(r);
    const char *want = "nesting deeper than 1000 levels (a cycle?) at $.next.back.next.back";
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
    ck_assert(strlen(err) < sizeof err - 1);
    ck_assert(strcmp(err + strlen(err) - 3, "...") == 0);
}
END_TEST

/* A document of every kind of value round-trips to the same text. */
START_TEST(document_round_trip)
{
    const char *doc =
        "{\"choices\":[{\"finish_reason\":\"stop\",\"index\":0,\"message\":{\"content\":\"x = 1\\n"
        "print(x)\",\"role\":\"assistant\",\"tool_calls\":[]}}],\"created\":1700000000,"
        "\"id\":\"chatcmpl-\xC3\xA9\",\"usage\":{\"cost\":0.0012,\"prompt_tokens\":12345678901234,"
        "\"ratio\":1.0,\"tiny\":1e-20,\"unset\":null}}";
    ck_assert_str_eq(reencode(doc), doc);
}
END_TEST

/* The text of the value at path in doc, or NULL when json_pick finds none there. */
static const char *at(const char *doc, const char *path)
{
    static char out[512];
    char *own = strdup(path);   /* on the heap, exactly long: ASan sees a read past its end */
    struct json_pick pick = {own, doc, 0};
    ck_assert_msg(json_pick(doc, strlen(doc), &pick, 1, err, sizeof err), "%s: %s", doc, err);
    free(own);
    if (pick.at == NULL)
        return NULL;
    ck_assert_uint_lt(pick.len, sizeof out);
    memcpy(out, pick.at, pick.len);
    out[pick.len] = '\0';
    return out;
}

/* The unescaped string at path, as json_decode would give it. */
static const char *string_at(const char *doc, const char *path)
{
    static char out[512];
    const char *v = at(doc, path);
    ck_assert_msg(v && *v == '"', "no string at %s", path);
    size_t n = json_unescape(v, strlen(v), out);
    out[n] = '\0';
    return out;
}

START_TEST(finding_fields)
{
    const char *doc =
        " { \"id\" : \"x\", \"choices\" : [ {\"message\": {\"content\": \"a, \\\"b\\\" ]}\"},"
        " \"finish_reason\" :\"stop\"}, [1, {\"k\": [2]}], 3.5e1 ] ,"
        " \"usage\": {\"prompt_tokens\": 12, \"prompt_tokens\": 13}, \"t\": true, \"n\": null,"
        " \"mod\\u0065l\": \"m\", \"1\": \"key one\", \"e\": {}, \"z\": [] } ";
    ck_assert_str_eq(at(doc, "id"), "\"x\"");
    ck_assert_str_eq(string_at(doc, "choices.1.message.content"), "a, \"b\" ]}");
    ck_assert_str_eq(at(doc, "choices.1.finish_reason"), "\"stop\"");
    ck_assert_str_eq(at(doc, "choices.2.2.k.1"), "2");
    ck_assert_str_eq(at(doc, "choices.3"), "3.5e1");
    ck_assert_str_eq(at(doc, "usage.prompt_tokens"), "13");   /* the last duplicate wins */
    ck_assert_str_eq(at(doc, "t"), "true");
    ck_assert_str_eq(at(doc, "n"), "null");
    ck_assert_str_eq(at(doc, "model"), "\"m\"");                /* keys compare unescaped */
    ck_assert_str_eq(at(doc, "e"), "{}");
    ck_assert_str_eq(at(doc, "z"), "[]");
    ck_assert_str_eq(at(doc, "choices.1"), "{\"message\": {\"content\": \"a, \\\"b\\\" ]}\"},"
                                          " \"finish_reason\" :\"stop\"}");
    ck_assert_ptr_null(at(doc, "choices.4"));
    ck_assert_ptr_null(at(doc, "choices.0"));
    ck_assert_ptr_null(at(doc, "1"));                  /* an index never names a key */
    ck_assert_ptr_null(at(doc, "choices.x"));          /* nor a key an item */
    ck_assert_ptr_null(at(doc, "id.x"));
    ck_assert_ptr_null(at(doc, "t.1"));
    ck_assert_ptr_null(at(doc, "z.1"));
    ck_assert_ptr_null(at(doc, "e.k"));
    ck_assert_ptr_null(at(doc, "missing"));
    ck_assert_ptr_null(at(doc, "i"));                  /* a prefix of "id" is not "id" */
    /* a repeated key replaces the whole value: nothing found under the first one stays */
    ck_assert_ptr_null(at("{\"a\":{\"b\":1},\"a\":2}", "a.b"));
    ck_assert_str_eq(at("{\"a\":{\"b\":1},\"a\":{\"b\":3}}", "a.b"), "3");
    /* keys no path can name: a dot in them, a NUL in them */
    ck_assert_ptr_null(at("{\"a.b\":1}", "a.b"));
    ck_assert_ptr_null(at("{\"a\\u002eb\":1}", "a.b"));
    ck_assert_ptr_null(at("{\"a\\u0000\":1}", "a"));
    /* a long key written all in escapes */
    char doc2[400] = "{\"", path2[40] = "";
    for (int i = 0; i < 30; i++) {
        strcat(doc2, "\\u0061");
        strcat(path2, "a");
    }
    strcat(doc2, "\":5}");
    ck_assert_str_eq(at(doc2, path2), "5");
    ck_assert_str_eq(at("[7]", ""), "[7]");
    ck_assert_str_eq(at("\"s\"", ""), "\"s\"");
}
END_TEST

/* Picks of different lengths in one pass, short ones on the heap at their exact size: a short
 * path is never read past its end while a longer one goes deeper (`make asan` sees it). */
START_TEST(many_picks_in_one_pass)
{
    const char *doc = "{\"choices\":[{\"message\":{\"content\":\"x\"}}],\"a\":{\"b\":[1,2]},"
                      "\"model\":\"m\"}";
    const char *paths[] = {"a", "model", "choices.1.message.content", "a.b.2", "choices", "z"};
    const char *want[] = {"{\"b\":[1,2]}", "\"m\"", "\"x\"", "2",
                          "[{\"message\":{\"content\":\"x\"}}]", NULL};
    struct json_pick picks[6];
    for (int i = 0; i < 6; i++)
        picks[i] = (struct json_pick){strdup(paths[i]), NULL, 0};
    ck_assert(json_pick(doc, strlen(doc), picks, 6, err, sizeof err));
    for (int i = 0; i < 6; i++) {
        if (want[i] == NULL) {
            ck_assert_ptr_null(picks[i].at);
        } else {
            ck_assert_msg(picks[i].at && picks[i].len == strlen(want[i]) &&
                              memcmp(picks[i].at, want[i], picks[i].len) == 0, "%s", paths[i]);
        }
        free((char *)picks[i].path);
    }
}
END_TEST

START_TEST(unescaping_as_decode_does)
{
    const char *texts[] = {
        "\"plain\"", "\"\"", "\"tab\\there\\n\\\"q\\\" \\\\ \\/\"",
        "\"\\u00e9\\u4e2d\\ud83d\\ude00\"", "\"raw \xC3\xA9 and \xFF\"",
        "\"\\udcff lone \\ud800 x\"", "\"nul \\u0000 inside\"",
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        char out[128];
        size_t n = json_unescape(texts[i], strlen(texts[i]), out);
        dec(texts[i]);
        size_t want_len;
        const char *want = lua_tolstring(L, -1, &want_len);
        ck_assert_msg(n == want_len && memcmp(out, want, n) == 0, "%s", texts[i]);
        lua_pop(L, 1);
    }
}
END_TEST

START_TEST(integers_of_numbers)
{
    int64_t v = 0;
    ck_assert(json_integer("42", 2, &v) && v == 42);
    ck_assert(json_integer("-9223372036854775808", 20, &v) && v == INT64_MIN);
    ck_assert(json_integer("9223372036854775807", 19, &v) && v == INT64_MAX);
    ck_assert(json_integer("12.9", 4, &v) && v == 12);
    ck_assert(json_integer("-12.9", 5, &v) && v == -12);
    ck_assert(json_integer("1e3", 3, &v) && v == 1000);
    ck_assert(json_integer("2.5E-1", 6, &v) && v == 0);
    v = 7;
    ck_assert(!json_integer("1e300", 5, &v) && v == 7);          /* past int64: no value */
    ck_assert(!json_integer("9223372036854775808", 19, &v) && v == 7);
    ck_assert(!json_integer("\"5\"", 3, &v) && v == 7);
    ck_assert(!json_integer("true", 4, &v) && v == 7);
    ck_assert(!json_integer("null", 4, &v) && v == 7);
    ck_assert(json_integer("123", 2, &v) && v == 12);             /* stops at len */
    ck_assert(json_integer("-9223372036854775808.0", 22, &v) && v == INT64_MIN);
    char long_one[200] = "3.";
    memset(long_one + 2, '0', 150);
    strcpy(long_one + 152, "1e2");
    ck_assert(json_integer(long_one, strlen(long_one), &v) && v == 300);
}
END_TEST

/* Mutated documents: the checker and the decoder agree on every one, message included. */
/* The fast scan of a string stops only at a byte that needs a look: one such byte at every
 * position of strings up to 40 long must be seen (a scan that took several bytes at a time
 * could miss one at a word's edge); bytes that need none must pass. */
START_TEST(every_stop_byte_is_seen_wherever_it_falls)
{
    static const struct { char byte; int valid; } cases[] = {
        {'"', 0}, {'\\', 0}, {'\x01', 0}, {'\x1f', 0}, {'\n', 0}, {' ', 1}, {'\x7f', 1},
        {'!', 1}, {'#', 1}, {'[', 1}, {']', 1},
    };
    lua_State *Ls = luaL_newstate();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int len = 1; len <= 40; len++)
            for (int at = 0; at < len; at++) {
                char doc[48];
                memset(doc, 'a', sizeof doc);
                doc[0] = '"';
                doc[1 + at] = cases[c].byte;
                doc[1 + len] = '"';
                size_t n = (size_t)len + 2;
                ck_assert_msg(json_check(doc, n, err, sizeof err) == cases[c].valid,
                              "byte %d at %d of %d", cases[c].byte, at, len);
                if (cases[c].valid) {
                    ck_assert(json_decode(Ls, doc, n, err, sizeof err));
                    ck_assert_uint_eq(lua_rawlen(Ls, -1), (size_t)len);
                    lua_pop(Ls, 1);
                }
            }
    lua_close(Ls);
}
END_TEST

START_TEST(check_agrees_with_decode)
{
    const char *seeds[] = {
        "{\"a\":[1,2.5e3,-0,\"x\\u00e9\\n\"],\"b\":{\"c\":null,\"d\":true,\"e\":false}}",
        "[{\"k\":\"\\ud83d\\ude00\"},[],{},\"\\\\\",1e-5,123456789012345678901234]",
    };
    const char alphabet[] = "{}[]\",:\\u0123456789.eE+-tfnl \n\x01\xC3";
    unsigned seed = 12345;
    for (int round = 0; round < 20000; round++) {
        char doc[256], err2[256];
        const char *from = seeds[round % 2];
        size_t n = strlen(from);
        memcpy(doc, from, n + 1);
        for (int edits = 1 + round % 3; edits > 0; edits--) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % n;
            char c = alphabet[(seed >> 20) % (sizeof alphabet - 1)];
            if ((seed >> 4) % 3 == 0 && n > 1) {
                memmove(doc + at, doc + at + 1, n - at);   /* delete */
                n--;
            } else {
                doc[at] = c;                               /* replace */
            }
        }
        int top = lua_gettop(L);
        err[0] = err2[0] = '\0';
        int decoded = json_decode(L, doc, n, err, sizeof err);
        int checked = json_check(doc, n, err2, sizeof err2);
        ck_assert_msg(decoded == checked, "%s: decode %d, check %d", doc, decoded, checked);
        if (!decoded)
            ck_assert_str_eq(err2, err);
        lua_settop(L, top);
    }
}
END_TEST

Suite *make_json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("codec");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, decode_integers_exact);
    tcase_add_test(tc, decode_floats);
    tcase_add_test(tc, encode_numbers);
    tcase_add_test(tc, float_round_trip);
    tcase_add_test(tc, float_text_shortest);
    tcase_add_test(tc, encode_strings);
    tcase_add_test(tc, decode_strings);
    tcase_add_test(tc, string_round_trip);
    tcase_add_test(tc, decode_errors);
    tcase_add_test(tc, values_and_whitespace);
    tcase_add_test(tc, containers_keep_their_kind);
    tcase_add_test(tc, table_shapes);
    tcase_add_test(tc, sort_and_indent);
    tcase_add_test(tc, depth_limit);
    tcase_add_test(tc, cycle_is_a_depth_error);
    tcase_add_test(tc, document_round_trip);
    tcase_add_test(tc, finding_fields);
    tcase_add_test(tc, many_picks_in_one_pass);
    tcase_add_test(tc, unescaping_as_decode_does);
    tcase_add_test(tc, integers_of_numbers);
    tcase_add_test(tc, check_agrees_with_decode);
    tcase_add_test(tc, every_stop_byte_is_seen_wherever_it_falls);
    suite_add_tcase(s, tc);
    return s;
}
