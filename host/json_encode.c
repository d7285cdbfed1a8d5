/* json_encode.c — the JSON encoder behind json.h: it writes into a buffer owned by a userdata,
 * so an out-of-memory error raised by Lua in the middle never leaks it. */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "buf.h"
#include "json.h"

#define BUFFER_MT "rlm.json.buffer"

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

/* The characters of s[0..len) when it is valid UTF-8 (as utf8.len counts them), else -1. Eight
 * bytes at a time while they are ASCII: a long context is counted at memory speed. */
long long json_utf8_count(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    long long chars = 0;
    while (p < end) {
        if ((size_t)(end - p) >= 8) {
            uint64_t word;
            memcpy(&word, p, 8);
            if ((word & 0x8080808080808080ULL) == 0) {
                p += 8;
                chars += 8;
                continue;
            }
        }
        if (*p < 0x80) {
            p++;
        } else {
            size_t n = utf8_len(p, end);
            if (n == 0)
                return -1;
            p += n;
        }
        chars++;
    }
    return chars;
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
        .L = L, .out = out, .array_mt = top + 1, .object_mt = top + 2, .point = json_locale_point(),
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
