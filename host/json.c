/* json.c — the JSON codec behind json.h. Decoding pushes values straight onto the Lua stack;
 * encoding writes into a buffer owned by a userdata, so an out-of-memory error raised by Lua in
 * the middle never leaks it. */
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
#define BUFFER_MT "rlm.json.buffer"

void json_push_array_mt(lua_State *L)
{
    luaL_newmetatable(L, ARRAY_MT);
}

void json_push_object_mt(lua_State *L)
{
    luaL_newmetatable(L, OBJECT_MT);
}

/* The C library's decimal point: os.setlocale can make it ',' for snprintf and strtod. */
static char locale_point(void)
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
        .point = locale_point(), .err = err, .errlen = errlen,
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
                        .point = locale_point(), .picks = picks, .npicks = npicks,
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
                        .err = err, .errlen = sizeof err, .point = locale_point()};
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
                        .point = locale_point()};
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

/* ======================================================================== encoding */

struct encoder {
    lua_State *L;
    struct buf *out;
    int array_mt, object_mt;   /* absolute stack slots */
    int indent, hash_order, depth;
    char point;
    char reason[160];
    char path[200];            /* filled from the failing value outwards, see path_prepend */
    size_t path_len;
    int path_cut;
};

static int buffer_gc(lua_State *L)
{
    buf_free(lua_touserdata(L, 1));
    return 0;
}

static int fail(struct encoder *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct encoder *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->reason, sizeof e->reason, fmt, ap);
    va_end(ap);
    return 0;
}

/* Errors unwind from the failing value to the root, each level prepending its step. When the
 * path gets too long the innermost steps are dropped, since the outer ones locate it. */
static void path_prepend(struct encoder *e, const char *step, size_t n)
{
    size_t room = sizeof e->path - 4;   /* keeps space for "..." and the NUL */
    if (n > room)
        return;
    if (e->path_len + n > room) {
        e->path_len = room - n;
        e->path_cut = 1;
    }
    memmove(e->path + n, e->path, e->path_len);
    memcpy(e->path, step, n);
    e->path_len += n;
}

static void path_index(struct encoder *e, lua_Integer i)
{
    char step[32];
    int n = snprintf(step, sizeof step, "[%lld]", (long long)i);
    path_prepend(e, step, (size_t)n);
}

/* The step for the key at stack index k: .name when it looks like an identifier. */
static void path_key(struct encoder *e, int k)
{
    lua_State *L = e->L;
    if (lua_type(L, k) == LUA_TNUMBER && lua_isinteger(L, k)) {
        path_index(e, lua_tointeger(L, k));
        return;
    }
    if (lua_type(L, k) != LUA_TSTRING) {
        char step[48];
        int n = snprintf(step, sizeof step, "[<%s>]", luaL_typename(L, k));
        path_prepend(e, step, (size_t)n);
        return;
    }
    size_t len;
    const char *s = lua_tolstring(L, k, &len);
    int ident = len > 0 && len <= 40 && !(s[0] >= '0' && s[0] <= '9');
    for (size_t i = 0; ident && i < len; i++) {
        char c = s[i];
        ident = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    }
    char step[64];
    size_t n = 0;
    if (ident) {
        step[n++] = '.';
        memcpy(step + n, s, len);
        n += len;
    } else {
        step[n++] = '[';
        step[n++] = '"';
        for (size_t i = 0; i < len && i < 40; i++)
            step[n++] = (unsigned char)s[i] < 0x20 || s[i] == '"' ? '?' : s[i];
        if (len > 40)
            for (int i = 0; i < 3; i++)
                step[n++] = '.';
        step[n++] = '"';
        step[n++] = ']';
    }
    path_prepend(e, step, n);
}

/* Most pieces are a few bytes (punctuation, short keys): copied by hand, not through a call. */
static inline int put(struct encoder *e, const void *p, size_t n)
{
    struct buf *b = e->out;
    if (b->len + n < b->cap) {   /* the common case, without buf_add's NUL */
        char *o = b->data + b->len;
        if (n <= 16) {
            const char *c = p;
            for (size_t i = 0; i < n; i++)
                o[i] = c[i];
        } else {
            memcpy(o, p, n);
        }
        b->len += n;
        return 1;
    }
    if (buf_add(b, p, n) != 0)
        return fail(e, "out of memory");
    return 1;
}

/* Space for n bytes at the end of the output; commit with e->out->len += used. */
static char *reserve(struct encoder *e, size_t n)
{
    struct buf *b = e->out;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *data = realloc(b->data, cap);
        if (data == NULL) {
            fail(e, "out of memory");
            return NULL;
        }
        b->data = data;
        b->cap = cap;
    }
    return b->data + b->len;
}

static int put_newline(struct encoder *e)
{
    if (e->indent <= 0)
        return 1;
    size_t n = 1 + (size_t)e->indent * (size_t)e->depth;
    char *o = reserve(e, n);
    if (o == NULL)
        return 0;
    o[0] = '\n';
    memset(o + 1, ' ', n - 1);
    e->out->len += n;
    return 1;
}

static int encode_integer(struct encoder *e, lua_Integer v)
{
    char tmp[24], *p = tmp + sizeof tmp;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return put(e, p, (size_t)(tmp + sizeof tmp - p));
}

/* The shortest of %.15g, %.16g and %.17g that reads back as v: exact, and fewest digits. */
static int shortest_printf(struct encoder *e, double v, char *tmp)
{
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(tmp, 40, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    int marked = 0;
    for (int i = 0; i < n; i++) {
        if (tmp[i] == e->point)
            tmp[i] = '.';
        if (tmp[i] == '.' || tmp[i] == 'e')
            marked = 1;
    }
    if (!marked) {   /* integral: keep it a float on the other side */
        tmp[n++] = '.';
        tmp[n++] = '0';
    }
    return n;
}

static int encode_float(struct encoder *e, double v)
{
    if (isnan(v) || isinf(v))
        return fail(e, "cannot encode %s", isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf");
    if (v == floor(v) && fabs(v) < 1e15 && !(v == 0 && signbit(v)))   /* exact, and fast */
        return encode_integer(e, (lua_Integer)v) && put(e, ".0", 2);
    char tmp[40];
    int n = shortest_printf(e, v, tmp);
    return put(e, tmp, (size_t)n);
}

static const char hex[] = "0123456789abcdef";

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), or 0 if it is not one. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;   /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)   /* surrogates are not valid UTF-8 */
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* Bytes that need more than a copy: '"', '\\', controls, and non-ASCII (to check UTF-8). */
static int needs_care(unsigned char c)
{
    return c < 0x20 || c == '"' || c == '\\' || c >= 0x80;
}

/* Writes the byte at *p that needs care (or the UTF-8 sequence it starts) and advances *p. */
static char *escape_byte(char *o, const unsigned char **pp, const unsigned char *end)
{
    const unsigned char *p = *pp;
    unsigned c = *p;
    if (c >= 0x80) {
        size_t n = utf8_len(p, end);
        if (n) {
            memcpy(o, p, n);
            *pp = p + n;
            return o + n;
        }
        memcpy(o, "\\udc", 4);   /* surrogateescape */
        o[4] = hex[c >> 4];
        o[5] = hex[c & 15];
        *pp = p + 1;
        return o + 6;
    }
    *o++ = '\\';
    switch (c) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '\n': *o++ = 'n'; break;
    case '\t': *o++ = 't'; break;
    case '\r': *o++ = 'r'; break;
    case '\b': *o++ = 'b'; break;
    case '\f': *o++ = 'f'; break;
    default:
        memcpy(o, "u00", 3);
        o[3] = hex[c >> 4];
        o[4] = hex[c & 15];
        o += 5;
    }
    *pp = p + 1;
    return o;
}

/* Writes s[0..len) as the body of a JSON string, a chunk at a time so that the room reserved
 * for the worst case (every byte a 6-byte escape) stays small for long strings. */
static int encode_string_body(struct encoder *e, const unsigned char *p, const unsigned char *end)
{
    while (p < end) {
        size_t chunk = (size_t)(end - p) < 4096 ? (size_t)(end - p) : 4096;
        const unsigned char *stop = p + chunk;
        /* +3: a UTF-8 sequence that starts in this chunk may end in the next */
        char *o = reserve(e, chunk * 6 + 3);
        if (o == NULL)
            return 0;
        char *start = o;
        while (p < stop) {
            const unsigned char *run = p;
            while (p < stop && !needs_care(*p))
                p++;
            memcpy(o, run, (size_t)(p - run));
            o += p - run;
            if (p < stop)
                o = escape_byte(o, &p, end);
        }
        e->out->len += (size_t)(o - start);
    }
    return 1;
}

static int encode_string(struct encoder *e, const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    if (len <= 64) {   /* short: room for the worst case, quotes included, in one step */
        char *o = reserve(e, len * 6 + 2), *start = o;
        if (o == NULL)
            return 0;
        *o++ = '"';
        while (p < end) {
            if (needs_care(*p))
                o = escape_byte(o, &p, end);
            else
                *o++ = (char)*p++;
        }
        *o++ = '"';
        e->out->len += (size_t)(o - start);
        return 1;
    }
    return put(e, "\"", 1) && encode_string_body(e, p, end) && put(e, "\"", 1);
}

static int encode_value(struct encoder *e, int idx);

enum shape { SHAPE_ARRAY, SHAPE_OBJECT, SHAPE_ERROR };

/* Decides how the table at idx encodes; for arrays *n is the length. *empty is 1 when the
 * table has no entries, -1 when that is not known yet (a forced object is not walked). */
static enum shape table_shape(struct encoder *e, int idx, lua_Integer *n, int *empty)
{
    lua_State *L = e->L;
    int forced = -1;   /* SHAPE_* chosen by a json metatable, or -1 */
    if (lua_getmetatable(L, idx)) {
        if (lua_rawequal(L, -1, e->array_mt))
            forced = SHAPE_ARRAY;
        else if (lua_rawequal(L, -1, e->object_mt))
            forced = SHAPE_OBJECT;
        lua_pop(L, 1);
    }
    *empty = -1;
    if (forced == SHAPE_OBJECT)
        return SHAPE_OBJECT;   /* keys are checked while writing */
    lua_Integer count = 0, max = 0;
    int strings = 0, bad_ints = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING) {
            strings = 1;
        } else if (lua_isinteger(L, -1)) {
            lua_Integer k = lua_tointeger(L, -1);
            if (k > 0) {
                count++;
                if (k > max)
                    max = k;
            } else
                bad_ints = 1;
        } else {
            const char *type = lua_type(L, -1) == LUA_TNUMBER ? "float" : luaL_typename(L, -1);
            lua_pop(L, 1);
            fail(e, "cannot encode a %s key", type);
            return SHAPE_ERROR;
        }
    }
    *empty = count == 0 && !strings && !bad_ints;
    if (forced != SHAPE_ARRAY && count == 0 && !bad_ints)
        return SHAPE_OBJECT;   /* all strings, or empty */
    if (strings && (count || bad_ints || forced == SHAPE_ARRAY)) {
        fail(e, forced == SHAPE_ARRAY ? "array with string keys" : "table with mixed keys");
        return SHAPE_ERROR;
    }
    if (bad_ints) {
        fail(e, "table with an integer key below 1 (arrays start at 1)");
        return SHAPE_ERROR;
    }
    if (max > 2 * count) {
        fail(e, "sparse array (largest index %lld, %lld elements)", (long long)max,
             (long long)count);
        return SHAPE_ERROR;
    }
    *n = max;
    return SHAPE_ARRAY;
}

static int encode_array(struct encoder *e, int idx, lua_Integer n)
{
    lua_State *L = e->L;
    if (!put(e, "[", 1))
        return 0;
    for (lua_Integer i = 1; i <= n; i++) {
        if ((i > 1 && !put(e, ",", 1)) || !put_newline(e))
            return 0;
        lua_rawgeti(L, idx, i);
        if (!encode_value(e, lua_gettop(L))) {
            path_index(e, i);
            return 0;
        }
        lua_pop(L, 1);
    }
    return 1;
}

/* Writes the key at stack index k as a JSON string. */
static int encode_key(struct encoder *e, int k)
{
    lua_State *L = e->L;
    if (lua_type(L, k) == LUA_TSTRING) {
        size_t len;
        const char *s = lua_tolstring(L, k, &len);
        if (!encode_string(e, s, len))
            return 0;
    } else if (lua_isinteger(L, k)) {
        if (!put(e, "\"", 1) || !encode_integer(e, lua_tointeger(L, k)) || !put(e, "\"", 1))
            return 0;
    } else {
        const char *type = lua_type(L, k) == LUA_TNUMBER ? "float" : luaL_typename(L, k);
        return fail(e, "cannot encode a %s key", type);
    }
    return put(e, e->indent > 0 ? ": " : ":", e->indent > 0 ? 2 : 1);
}

/* Key, value and position: the stack holds [key, value] on top when called. */
static int encode_member(struct encoder *e, int first)
{
    int top = lua_gettop(e->L);
    if ((!first && !put(e, ",", 1)) || !put_newline(e) || !encode_key(e, top - 1)
        || !encode_value(e, top)) {
        path_key(e, top - 1);
        return 0;
    }
    return 1;
}

static int encode_object_unsorted(struct encoder *e, int idx)
{
    lua_State *L = e->L;
    int first = 1;
    lua_pushnil(L);
    while (lua_next(L, idx)) {   // [key, value]
        if (!encode_member(e, first))
            return 0;
        first = 0;
        lua_pop(L, 1);
    }
    return 1;
}

struct sort_key {
    const char *s;
    size_t len;
    lua_Integer slot;   /* index of the key in the keys table */
    char num[24];       /* decimal text of an integer key */
};

static int compare_keys(const void *a, const void *b)
{
    const struct sort_key *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Collects the keys into a Lua table (which keeps the strings alive), sorts pointers to their
 * text in a userdata, then writes the members in that order. */
static int encode_object_sorted(struct encoder *e, int idx)
{
    lua_State *L = e->L;
    lua_newtable(L);                                 // [keys]
    int keys = lua_gettop(L);
    lua_Integer n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_rawseti(L, keys, ++n);
    }
    if (n == 0) {
        lua_pop(L, 1);
        return 1;
    }
    struct sort_key *sk = lua_newuserdatauv(L, (size_t)n * sizeof *sk, 0);   // [keys, sk]
    for (lua_Integer i = 0; i < n; i++) {
        struct sort_key *k = &sk[i];
        k->slot = i + 1;
        lua_rawgeti(L, keys, i + 1);
        if (lua_type(L, -1) == LUA_TSTRING) {
            k->s = lua_tolstring(L, -1, &k->len);
        } else if (lua_isinteger(L, -1)) {
            k->len = (size_t)snprintf(k->num, sizeof k->num, "%lld", (long long)lua_tointeger(L, -1));
            k->s = k->num;
        } else {
            k->s = "";
            k->len = 0;   /* encode_key reports it */
        }
        lua_pop(L, 1);
    }
    qsort(sk, (size_t)n, sizeof *sk, compare_keys);
    for (lua_Integer i = 0; i < n; i++) {
        lua_rawgeti(L, keys, sk[i].slot);
        lua_pushvalue(L, -1);
        lua_rawget(L, idx);                          // [keys, sk, key, value]
        if (!encode_member(e, i == 0))
            return 0;
        lua_pop(L, 2);
    }
    lua_pop(L, 2);
    return 1;
}

static int table_empty(lua_State *L, int idx)
{
    lua_pushnil(L);
    if (lua_next(L, idx) == 0)
        return 1;
    lua_pop(L, 2);
    return 0;
}

/* Empty containers stay "[]" and "{}" even when pretty-printing. */
static int encode_table(struct encoder *e, int idx)
{
    lua_State *L = e->L;
    if (e->depth >= JSON_MAX_DEPTH)
        return fail(e, "nesting deeper than %d levels (a cycle?)", JSON_MAX_DEPTH);
    if (!lua_checkstack(L, 8))
        return fail(e, "out of Lua stack");
    int top = lua_gettop(L);
    lua_Integer n = 0;
    int empty;
    enum shape shape = table_shape(e, idx, &n, &empty);
    if (shape == SHAPE_ERROR)
        return 0;
    e->depth++;
    if (shape == SHAPE_ARRAY)
        empty = n == 0;
    else if (empty < 0)
        empty = table_empty(L, idx);
    int ok;
    if (shape == SHAPE_ARRAY)
        ok = encode_array(e, idx, n);
    else
        ok = put(e, "{", 1) && (e->hash_order ? encode_object_unsorted(e, idx)
                                              : encode_object_sorted(e, idx));
    e->depth--;
    if (!ok)
        return 0;
    assert(lua_gettop(L) == top);
    if (!empty && !put_newline(e))
        return 0;
    return put(e, shape == SHAPE_ARRAY ? "]" : "}", 1);
}

static int encode_value(struct encoder *e, int idx)
{
    lua_State *L = e->L;
    int type = lua_type(L, idx);
    switch (type) {
    case LUA_TNIL:
        return put(e, "null", 4);
    case LUA_TBOOLEAN:
        return lua_toboolean(L, idx) ? put(e, "true", 4) : put(e, "false", 5);
    case LUA_TNUMBER:
        return lua_isinteger(L, idx) ? encode_integer(e, lua_tointeger(L, idx))
                                     : encode_float(e, lua_tonumber(L, idx));
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        return encode_string(e, s, len);
    }
    case LUA_TTABLE:
        return encode_table(e, idx);
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == NULL)
            return put(e, "null", 4);
        return fail(e, "cannot encode a light userdata other than null");
    case LUA_TUSERDATA:
        return fail(e, "cannot encode a userdata");
    default:
        return fail(e, "cannot encode a %s", lua_typename(L, type));
    }
}

static struct buf *push_buffer(lua_State *L)
{
    struct buf *b = lua_newuserdatauv(L, sizeof *b, 0);
    memset(b, 0, sizeof *b);
    if (luaL_newmetatable(L, BUFFER_MT)) {
        lua_pushcfunction(L, buffer_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    return b;
}

int json_is_array(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    if (lua_type(L, idx) != LUA_TTABLE)
        return 0;
    int top = lua_gettop(L);
    luaL_checkstack(L, 4, "json_is_array");
    json_push_array_mt(L);
    json_push_object_mt(L);
    struct encoder e = {.L = L, .array_mt = top + 1, .object_mt = top + 2};
    lua_Integer n;
    int empty;
    int array = table_shape(&e, idx, &n, &empty) == SHAPE_ARRAY;
    lua_settop(L, top);
    return array;
}

/* The encoder's output buffer: one per Lua state, kept in the registry between calls (a new
 * userdata with a finalizer for each call cost more than encoding a short string). It gives
 * its memory back after an output of more than ENCODE_BUFFER_KEEP bytes. An encode that
 * starts while it is in use (from a finalizer run by a GC step inside another encode) gets a
 * buffer of its own. */
#define ENCODE_BUFFER_KEEP (1 << 20)

struct kept_buffer {
    struct buf buf;
    int busy;
};

static int kept_buffer_gc(lua_State *L)
{
    buf_free(&((struct kept_buffer *)lua_touserdata(L, 1))->buf);
    return 0;
}

/* An encode that raised (out of memory only) leaves the mark set: later ones then take a
 * buffer each, as every encode did before the buffer was kept. */
static struct kept_buffer *kept_buffer(lua_State *L)
{
    static const char key = 0;   /* its address is the registry key */
    struct kept_buffer *k;
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &key) == LUA_TUSERDATA) {
        k = lua_touserdata(L, -1);
        lua_pop(L, 1);
        return k;
    }
    lua_pop(L, 1);
    k = lua_newuserdatauv(L, sizeof *k, 0);
    memset(k, 0, sizeof *k);
    lua_newtable(L);
    lua_pushcfunction(L, kept_buffer_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &key);
    return k;
}

/* Encodes the value at idx (absolute) onto out; the metatables go on the stack above top and
 * come off again. 0 with the message in err on failure. */
static int encode_onto(lua_State *L, int idx, struct buf *out, const struct json_encode_opts *opts,
                       char *err, size_t errlen)
{
    int top = lua_gettop(L);
    luaL_checkstack(L, 8, "json_encode");
    struct encoder e = {
        .L = L, .out = out, .array_mt = top + 1, .object_mt = top + 2, .point = locale_point(),
        .indent = opts ? opts->indent : 0, .hash_order = opts ? opts->hash_order : 0,
    };
    json_push_array_mt(L);
    json_push_object_mt(L);                          // [array_mt, object_mt]
    int ok = encode_value(&e, idx);
    lua_settop(L, top);
    if (!ok) {
        if (e.path_cut) {
            memcpy(e.path + e.path_len, "...", 3);
            e.path_len += 3;
        }
        e.path[e.path_len] = '\0';
        snprintf(err, errlen, "%s at $%s", e.reason, e.path);
    }
    return ok;
}

int json_encode(lua_State *L, int idx, const struct json_encode_opts *opts, char *err,
                size_t errlen)
{
    idx = lua_absindex(L, idx);
    int top = lua_gettop(L);
    struct buf *out;
    struct kept_buffer *kept = kept_buffer(L);
    if (kept->busy) {
        out = push_buffer(L);
    } else {
        kept->busy = 1;
        kept->buf.len = 0;
        out = &kept->buf;
        lua_pushnil(L);
    }                                                // [buffer or nil]
    int ok = encode_onto(L, idx, out, opts, err, errlen);
    if (ok)
        lua_pushlstring(L, out->data ? out->data : "", out->len);
    if (out != &kept->buf || out->cap > ENCODE_BUFFER_KEEP)
        buf_free(out);
    if (out == &kept->buf)
        kept->busy = 0;
    if (!ok) {
        lua_settop(L, top);
        return 0;
    }
    lua_replace(L, top + 1);
    lua_settop(L, top + 1);
    return 1;
}

int json_append(lua_State *L, int idx, struct buf *out, char *err, size_t errlen)
{
    return encode_onto(L, lua_absindex(L, idx), out, NULL, err, errlen);
}
