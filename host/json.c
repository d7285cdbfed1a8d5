/* json.c — the JSON decoder and finder behind json.h (the encoder is json_encode.c). Decoding
 * pushes values straight onto the Lua stack. */
#include <assert.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "buf.h"
#include "json.h"

#define ARRAY_MT "rlm.json.array"
#define OBJECT_MT "rlm.json.object"

void json_push_array_mt(lua_State *L)
{
    luaL_newmetatable(L, ARRAY_MT);
}

void json_push_object_mt(lua_State *L)
{
    luaL_newmetatable(L, OBJECT_MT);
}

char json_locale_point(void)
{
    const char *p = localeconv()->decimal_point;
    return p && p[0] && !p[1] ? p[0] : '.';
}

/* ======================================================================== decoding */

/* With L, values are pushed as they are decoded. Without, the text is only checked (json_check),
 * or one string is unescaped into a buffer the caller gave as scratch_data (json_unescape). */
struct decoder {
    lua_State *L;
    const char *start, *p, *end;
    int array_mt, object_mt, scratch;   /* absolute stack slots */
    char *scratch_data;
    size_t scratch_cap, unescaped;
    int is_integer;                     /* the last number read: integer, or else number */
    int escaped;                        /* the last string read had escapes */
    lua_Integer integer;
    double number;
    /* json_pick: live has a bit for each pick whose path begins with the path of the value
     * being read (0: none does, so nothing is tracked below it); depth is that path's length
     * in the picks' text. */
    struct json_pick *picks;
    int npicks;
    uint64_t live;
    size_t depth_at;
    int depth;
    char point;
    char *err;
    size_t errlen;
};

/* Bytes that end the fast scan of a string: the quote, the backslash, control characters. */
static const unsigned char string_stop[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
};

static int fail_at(struct decoder *d, const char *at, const char *msg)
{
    snprintf(d->err, d->errlen, "invalid JSON at byte %zu: %s", (size_t)(at - d->start), msg);
    return 0;
}

static void skip_space(struct decoder *d)
{
    const char *p = d->p;
    while (p < d->end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    d->p = p;
}

static int decode_value(struct decoder *d);
static size_t enter_index(struct decoder *d, lua_Integer n);
static size_t enter_key(struct decoder *d, const char *k);
static void leave_item(struct decoder *d, uint64_t live, size_t before);

/* Makes room for n more bytes after the first used ones of the scratch buffer; the buffer is
 * a userdata in its own stack slot, so Lua reclaims it whatever happens. */
static void scratch_reserve(struct decoder *d, size_t used, size_t n)
{
    /* Without Lua the caller's buffer is as long as the escaped text, and no output is
     * longer than its input. */
    if (used + n <= d->scratch_cap || d->L == NULL)
        return;
    size_t cap = d->scratch_cap ? d->scratch_cap * 2 : 256;
    while (cap < used + n)
        cap *= 2;
    char *data = lua_newuserdatauv(d->L, cap, 0);
    if (used)
        memcpy(data, d->scratch_data, used);
    lua_replace(d->L, d->scratch);
    d->scratch_data = data;
    d->scratch_cap = cap;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = (unsigned char)p[i], h;
        if (c >= '0' && c <= '9')
            h = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            h = (c | 0x20) - 'a' + 10;
        else
            return 0;
        v = v << 4 | h;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes the \u escape at p (pointing at the backslash) into o; returns the bytes written, or
 * 0 after reporting an error. *next is set past the escape (or the pair). */
static size_t unicode_escape(struct decoder *d, const char *p, char *o, const char **next)
{
    unsigned cp, lo;
    if (d->end - p < 6 || !hex4(p + 2, &cp)) {
        fail_at(d, p, "invalid \\u escape");
        return 0;
    }
    *next = p + 6;
    if (cp >= 0xD800 && cp <= 0xDBFF && d->end - p >= 12 && p[6] == '\\' && p[7] == 'u'
        && hex4(p + 8, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
        *next = p + 12;
        return put_utf8(o, 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00));
    }
    if (cp >= 0xDC80 && cp <= 0xDCFF) {   /* surrogateescape: the raw byte it stands for */
        o[0] = (char)(cp - 0xDC00);
        return 1;
    }
    return put_utf8(o, cp);
}

/* The slow path for a string with escapes: p is at the first backslash, s at the opening
 * quote. No output is longer than its escaped input, so reserving per escape is enough. */
static int decode_escaped(struct decoder *d, const char *s, const char *p)
{
    char dropped[4];   /* a check writes each escape's bytes here, and keeps none */
    d->escaped = 1;
    size_t used = (size_t)(p - s - 1);
    scratch_reserve(d, 0, used + 16);
    if (d->scratch_data)
        memcpy(d->scratch_data, s + 1, used);
    for (;;) {
        const char *run = p;
        while (p < d->end && !string_stop[(unsigned char)*p])
            p++;
        scratch_reserve(d, used, (size_t)(p - run) + 4);
        if (d->scratch_data)
            memcpy(d->scratch_data + used, run, (size_t)(p - run));
        used += (size_t)(p - run);
        if (p >= d->end)
            return fail_at(d, s, "unterminated string");
        if (*p == '"')
            break;
        if ((unsigned char)*p < 0x20)
            return fail_at(d, p, "control character in string");
        if (p + 1 >= d->end)
            return fail_at(d, s, "unterminated string");
        char *o = d->scratch_data ? d->scratch_data + used : dropped, c;
        switch (p[1]) {
        case '"': c = '"'; break;
        case '\\': c = '\\'; break;
        case '/': c = '/'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
            size_t n = unicode_escape(d, p, o, &p);
            if (n == 0)
                return 0;
            used += n;
            continue;
        }
        default:
            return fail_at(d, p, "invalid escape");
        }
        *o = c;
        used++;
        p += 2;
    }
    if (d->L)
        lua_pushlstring(d->L, d->scratch_data, used);
    d->unescaped = used;
    d->p = p + 1;
    return 1;
}

static int decode_string(struct decoder *d)
{
    const char *s = d->p, *p = s + 1, *end = d->end;
    while (p < end && !string_stop[(unsigned char)*p])
        p++;
    if (p >= end)
        return fail_at(d, s, "unterminated string");
    if (*p == '"') {
        size_t n = (size_t)(p - s - 1);
        if (d->L)
            lua_pushlstring(d->L, s + 1, n);
        else if (d->scratch_data)
            memcpy(d->scratch_data, s + 1, n);
        d->unescaped = n;
        d->escaped = 0;
        d->p = p + 1;
        return 1;
    }
    if (*p == '\\')
        return decode_escaped(d, s, p);
    return fail_at(d, p, "control character in string");
}

static int is_digit(const char *p, const char *end)
{
    return p < end && *p >= '0' && *p <= '9';
}

static int decode_float(struct decoder *d, const char *s, size_t n)
{
    char small[64], *text = n < sizeof small ? small : malloc(n + 1);
    if (text == NULL)
        return fail_at(d, s, "out of memory");
    memcpy(text, s, n);
    text[n] = '\0';
    if (d->point != '.') {
        char *dot = memchr(text, '.', n);
        if (dot)
            *dot = d->point;
    }
    double v = strtod(text, NULL);
    if (text != small)
        free(text);
    /* 1e999 would be inf, which no JSON text can carry back out: refuse it here, as a parse
     * error the caller reports, rather than let it fail later where nobody expects it. */
    if (isinf(v))
        return fail_at(d, s, "number out of range");
    d->is_integer = 0;
    d->number = v;
    if (d->L)
        lua_pushnumber(d->L, v);
    return 1;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? ; integers that fit int64 stay exact. */
/* Sets *p past the run of digits that starts at from; 0 when there is not even one. */
static int skip_digits(const char **p, const char *from, const char *end)
{
    if (!is_digit(from, end))
        return 0;
    while (is_digit(from, end))
        from++;
    *p = from;
    return 1;
}

static int decode_number(struct decoder *d)
{
    const char *s = d->p, *p = s, *end = d->end;
    int neg = 0, integral = 1;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    const char *digits = p;
    uint64_t acc = 0;
    if (is_digit(p, end) && *p == '0') {
        p++;
        if (is_digit(p, end))
            return fail_at(d, s, "invalid number (leading zero)");
    } else if (is_digit(p, end)) {
        while (is_digit(p, end)) {
            acc = acc * 10 + (uint64_t)(*p - '0');   /* wraps past 19 digits; checked below */
            p++;
        }
    } else {
        return fail_at(d, s, "invalid number");
    }
    size_t ndigits = (size_t)(p - digits);
    if (p < end && *p == '.') {
        if (!skip_digits(&p, p + 1, end))
            return fail_at(d, s, "invalid number");
        integral = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (!skip_digits(&p, p < end && (*p == '+' || *p == '-') ? p + 1 : p, end))
            return fail_at(d, s, "invalid number");
        integral = 0;
    }
    d->p = p;
    if (integral && ndigits <= 19 && acc <= (uint64_t)INT64_MAX + neg) {
        d->is_integer = 1;
        d->integer = neg ? (lua_Integer)(0 - acc) : (lua_Integer)acc;
        if (d->L)
            lua_pushinteger(d->L, d->integer);
        return 1;
    }
    return decode_float(d, s, (size_t)(p - s));
}

static int decode_literal(struct decoder *d, const char *word, size_t n)
{
    if ((size_t)(d->end - d->p) < n || memcmp(d->p, word, n) != 0)
        return fail_at(d, d->p, "expected a value");
    d->p += n;
    return 1;
}

/* The items of a container wait on the Lua stack, up to DECODE_BATCH of them, and its table
 * is made at their count when it closes: a small object or array (nearly every one) is never
 * rehashed as it fills. A bigger one gets a table at the batch's size and the rest go straight
 * in, Lua growing it as before. */
#define DECODE_BATCH 32

/* Stack space for one more item (a key and its value) and the work after it. Asked for item
 * by item: a decode in a coroutine (each model call's task) grows its small stack only as far
 * as the document needs. */
static int room(struct decoder *d)
{
    if (d->L && !lua_checkstack(d->L, 6))   /* key, value, and make_table's table and two copies */
        return fail_at(d, d->p, "out of Lua stack");
    return 1;
}

static int enter(struct decoder *d)
{
    if (++d->depth > JSON_MAX_DEPTH) {
        char msg[64];
        snprintf(msg, sizeof msg, "nesting deeper than %d levels", JSON_MAX_DEPTH);
        return fail_at(d, d->p, msg);
    }
    return room(d);
}

/* Opens the array or object at d->p (a nil holds the slot of its table; the bracket and the
 * space after it are skipped). 1 when items follow, 0 when close ends it at once, -1 after an
 * error. */
static int open_container(struct decoder *d, char close)
{
    if (!enter(d))
        return -1;
    if (d->L)
        lua_pushnil(d->L);
    d->p++;
    skip_space(d);
    if (d->p < d->end && *d->p == close) {
        d->p++;
        return 0;
    }
    return 1;
}

/* After an item: 1 when a ',' announces another, 0 when close ends the container, -1 after
 * an error. */
static int next_item(struct decoder *d, char close)
{
    skip_space(d);
    if (d->p >= d->end)
        return fail_at(d, d->p, "unexpected end of input") - 1;
    if (*d->p == ',') {
        d->p++;
        skip_space(d);
        return 1;
    }
    if (*d->p != close)
        return fail_at(d, d->p, close == ']' ? "expected ',' or ']'" : "expected ',' or '}'") - 1;
    d->p++;
    return 0;
}

/* Makes the table of the container at slot base, at the size of the items waiting above it
 * (array items, or key and value pairs), and moves them in, in order: a repeated key keeps
 * its last value. */
static void make_table(lua_State *L, int base, int is_array)
{
    int waiting = lua_gettop(L) - base;
    if (is_array) {
        lua_createtable(L, waiting, 0);
        for (int i = 1; i <= waiting; i++) {
            lua_pushvalue(L, base + i);
            lua_rawseti(L, -2, i);
        }
    } else {
        lua_createtable(L, 0, waiting / 2);
        for (int i = 1; i < waiting; i += 2) {
            lua_pushvalue(L, base + i);
            lua_pushvalue(L, base + i + 1);
            lua_rawset(L, -3);
        }
    }
    lua_replace(L, base);
    lua_settop(L, base);
}

/* Puts the item just decoded (a value, or a key and its value) into the container at base: the
 * first DECODE_BATCH wait on the stack and go into a table made at their count. */
static void store_item(lua_State *L, int base, lua_Integer n, int *made, int is_array)
{
    if (*made) {
        if (is_array)
            lua_rawseti(L, base, n);
        else
            lua_rawset(L, base);
    } else if (n == DECODE_BATCH) {
        make_table(L, base, is_array);
        *made = 1;
    }
}

/* Makes the finished container's table (when its items still wait) and marks it as an array
 * or object for the encoder. */
static int close_container(struct decoder *d, int base, int made, int is_array)
{
    if (d->L) {
        if (!made)
            make_table(d->L, base, is_array);
        lua_pushvalue(d->L, is_array ? d->array_mt : d->object_mt);
        lua_setmetatable(d->L, -2);
    }
    d->depth--;
    return 1;
}

static int decode_array(struct decoder *d)
{
    int more = open_container(d, ']');
    int base = d->L ? lua_gettop(d->L) : 0, made = 0;
    uint64_t live = d->live;
    for (lua_Integer n = 1; more > 0; n++) {
        size_t depth = live ? enter_index(d, n) : 0;
        if (!room(d) || !decode_value(d))
            return 0;
        if (live)
            leave_item(d, live, depth);
        if (d->L)
            store_item(d->L, base, n, &made, 1);
        more = next_item(d, ']');
    }
    if (more < 0)
        return 0;
    return close_container(d, base, made, 1);
}

static int decode_object(struct decoder *d)
{
    int more = open_container(d, '}');
    int base = d->L ? lua_gettop(d->L) : 0, made = 0, pairs = 0;
    uint64_t live = d->live;
    while (more > 0) {
        if (d->p >= d->end)
            return fail_at(d, d->p, "unexpected end of input");
        if (*d->p != '"')
            return fail_at(d, d->p, "expected a string key");
        const char *key = d->p;
        if (!room(d) || !decode_string(d))
            return 0;
        size_t depth = live ? enter_key(d, key) : 0;
        skip_space(d);
        if (d->p >= d->end)
            return fail_at(d, d->p, "unexpected end of input");
        if (*d->p != ':')
            return fail_at(d, d->p, "expected ':'");
        d->p++;
        if (!decode_value(d))
            return 0;
        if (live)
            leave_item(d, live, depth);
        if (d->L)
            store_item(d->L, base, ++pairs, &made, 0);
        more = next_item(d, '}');
    }
    if (more < 0)
        return 0;
    return close_container(d, base, made, 0);
}

static int decode_any(struct decoder *d)
{
    if (d->p >= d->end)
        return fail_at(d, d->p, "unexpected end of input");
    switch (*d->p) {
    case '{':
        return decode_object(d);
    case '[':
        return decode_array(d);
    case '"':
        return decode_string(d);
    case 't':
        if (!decode_literal(d, "true", 4))
            return 0;
        if (d->L)
            lua_pushboolean(d->L, 1);
        return 1;
    case 'f':
        if (!decode_literal(d, "false", 5))
            return 0;
        if (d->L)
            lua_pushboolean(d->L, 0);
        return 1;
    case 'n':
        if (!decode_literal(d, "null", 4))
            return 0;
        if (d->L)
            lua_pushlightuserdata(d->L, NULL);
        return 1;
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        return decode_number(d);
    default:
        return fail_at(d, d->p, "expected a value");
    }
}

/* Where the value just read (from start) is one of the picks, it is remembered there; a
 * repeated key comes later and so wins, as in a decoded table. */
static void mark_picks(struct decoder *d, const char *start)
{
    for (uint64_t m = d->live; m; m &= m - 1) {
        struct json_pick *pick = &d->picks[__builtin_ctzll(m)];
        if (pick->path[d->depth_at] == '\0') {
            pick->at = start;
            pick->len = (size_t)(d->p - start);
        }
    }
}

static int decode_value(struct decoder *d)
{
    skip_space(d);
    if (!d->live)
        return decode_any(d);
    const char *start = d->p;
    if (!decode_any(d))
        return 0;
    mark_picks(d, start);
    return 1;
}

/* A key no pick can name: empty, digits only (such a step of a pick is an array index), or
 * with a '.' (which splits a pick's steps). */
static int unnamable(const char *key, size_t n)
{
    size_t digits = 0;
    while (digits < n && key[digits] >= '0' && key[digits] <= '9')
        digits++;
    return n == 0 || digits == n || memchr(key, '.', n);
}

/* Steps into an item (a key, or an array's 1-based index, as text): live keeps the picks that
 * go on with this step. leave_item(d, the container's live, the returned depth) steps back.
 * What those picks found under an earlier item of the same key is forgotten: a repeated key
 * replaces the whole value, as in a decoded table. A key is checked for being nameable only
 * when some pick would go on with it: most keys are no pick's, and cost no more. */
static size_t enter_item(struct decoder *d, const char *step, size_t n, int is_key)
{
    size_t before = d->depth_at, at = before ? before + 1 : 0;
    uint64_t live = 0;
    for (uint64_t m = d->live; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        const char *want = d->picks[i].path;   /* begins with the path so far, at least */
        /* want[at] is readable (want[before] is '.', or at is 0), and the first byte that
         * differs ends the comparison before the end of want: no read goes past its NUL */
        if ((before ? want[before] == '.' : want[0] != '\0') && want[at] == step[0] &&
            strncmp(want + at, step, n) == 0 && (want[at + n] == '\0' || want[at + n] == '.'))
            live |= (uint64_t)1 << i;
    }
    if (live && is_key && unnamable(step, n))
        live = 0;
    for (uint64_t m = live; m; m &= m - 1)
        d->picks[__builtin_ctzll(m)].at = NULL;
    d->live = live;
    d->depth_at = at + n;
    return before;
}

/* Steps into an item no pick names. */
static size_t enter_nowhere(struct decoder *d)
{
    d->live = 0;
    return d->depth_at;
}

static void leave_item(struct decoder *d, uint64_t live, size_t before)
{
    d->live = live;
    d->depth_at = before;
}

static size_t enter_index(struct decoder *d, lua_Integer n)
{
    char digits[24], *p = digits + sizeof digits;
    do
        *--p = (char)('0' + n % 10);
    while ((n /= 10) > 0);
    return enter_item(d, p, (size_t)(digits + sizeof digits - p), 0);
}

/* Steps into the key just checked (its quote at k); escapes are undone first. */
static size_t enter_key(struct decoder *d, const char *k)
{
    size_t raw = (size_t)(d->p - k), n = raw - 2;
    char small[128], *text = (char *)k + 1, *copy = NULL;
    if (d->escaped) {
        text = raw <= sizeof small ? small : (copy = malloc(raw));
        if (text == NULL)
            return enter_nowhere(d);
        n = json_unescape(k, raw, text);
        text[n] = '\0';   /* n <= raw - 2 */
    }
    /* Only an escape makes a NUL (a raw string has no control character), and a step with a
     * NUL would end enter_item's comparison early, then read want past its end. */
    size_t before = d->escaped && memchr(text, '\0', n) ? enter_nowhere(d)
                                                         : enter_item(d, text, n, 1);
    free(copy);
    return before;
}

/* The one value that is the whole text, spaces around it allowed. */
static int decode_document(struct decoder *d)
{
    if (!decode_value(d))
        return 0;
    skip_space(d);
    if (d->p != d->end)
        return fail_at(d, d->p, "unexpected data after the value");
    return 1;
}

int json_decode(lua_State *L, const char *s, size_t len, char *err, size_t errlen)
{
    int top = lua_gettop(L);
    luaL_checkstack(L, 8, "json_decode");
    json_push_array_mt(L);
    json_push_object_mt(L);
    lua_pushnil(L);                                  // [array_mt, object_mt, scratch]
    struct decoder d = {
        .L = L, .start = s, .p = s, .end = s + len,
        .array_mt = top + 1, .object_mt = top + 2, .scratch = top + 3,
        .point = json_locale_point(), .err = err, .errlen = errlen,
    };
    if (!decode_document(&d)) {
        lua_settop(L, top);
        return 0;
    }
    lua_replace(L, top + 1);
    lua_settop(L, top + 1);
    return 1;
}

/* ======================================================================== finding */

int json_pick(const char *s, size_t len, struct json_pick *picks, int npicks, char *err,
              size_t errlen)
{
    assert(npicks <= JSON_PICKS_MAX);
    for (int i = 0; i < npicks; i++)
        picks[i].at = NULL;
    struct decoder d = {.start = s, .p = s, .end = s + len, .err = err, .errlen = errlen,
                        .point = json_locale_point(), .picks = picks, .npicks = npicks,
                        .live = npicks ? ~(uint64_t)0 >> (64 - npicks) : 0};
    return decode_document(&d);
}

int json_check(const char *s, size_t len, char *err, size_t errlen)
{
    return json_pick(s, len, NULL, 0, err, errlen);
}

const char *json_next_item(const char *array, size_t len, const char *after, size_t *item_len)
{
    char err[8];
    struct decoder d = {.start = array, .p = after ? after : array + 1, .end = array + len,
                        .err = err, .errlen = sizeof err, .point = json_locale_point()};
    skip_space(&d);
    if (after && d.p < d.end && *d.p == ',')
        d.p++;
    skip_space(&d);
    if (d.p >= d.end || *d.p == ']')
        return NULL;
    const char *item = d.p;
    if (!decode_value(&d))
        return NULL;
    *item_len = (size_t)(d.p - item);
    return item;
}

size_t json_unescape(const char *v, size_t len, char *out)
{
    char err[8];
    struct decoder d = {.start = v, .p = v, .end = v + len, .err = err, .errlen = sizeof err,
                        .scratch_data = out, .scratch_cap = len};
    return decode_string(&d) ? d.unescaped : 0;
}

int json_integer(const char *v, size_t len, int64_t *out)
{
    char err[8];
    struct decoder d = {.start = v, .p = v, .end = v + len, .err = err, .errlen = sizeof err,
                        .point = json_locale_point()};
    if (len == 0 || !(*v == '-' || (*v >= '0' && *v <= '9')) || !decode_number(&d))
        return 0;
    if (d.is_integer) {
        *out = d.integer;
        return 1;
    }
    if (!(d.number >= -9223372036854775808.0 && d.number < 9223372036854775808.0))
        return 0;
    *out = (int64_t)d.number;
    return 1;
}
