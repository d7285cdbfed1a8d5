/* json.h — the host's exact JSON codec, between JSON text and Lua values on the stack.
 * Used by rlm.core.json (ljson.c) and by any C binding that builds or parses wire formats.
 *
 * Values:
 *   null        <-> the NULL light userdata (the same value as cjson.null); encode(nil) is "null"
 *   true/false  <-> booleans
 *   numbers     an integer literal (no fraction, no exponent) that fits int64 decodes to a Lua
 *               integer, exactly; a larger one decodes to a float and loses precision beyond 2^53.
 *               Anything with a fraction or exponent decodes to a float. Integers encode as exact
 *               decimal; floats as the shortest of %.15g/%.16g/%.17g that round-trips, with ".0"
 *               added when integral (42.0 stays a float on the other side). NaN and infinities
 *               cannot be encoded.
 *   strings     UTF-8 passes through; '"', '\\' and control characters are escaped, '/' is not.
 *               Each byte XX that is not part of valid UTF-8 encodes as "\udcXX" (Python's
 *               surrogateescape), and a lone \udc80..\udcff decodes back to that raw byte, so any
 *               Lua string round-trips exactly, also through Python. A surrogate pair decodes to
 *               its 4-byte character, other lone surrogates to their 3-byte (WTF-8) form. Raw
 *               invalid UTF-8 inside a JSON string is accepted as it is; raw control characters
 *               are rejected (RFC 8259).
 *   arrays      decode to tables 1..n with the array metatable (json_push_array_mt), so an empty
 *               decoded array re-encodes as [].
 *   objects     decode to tables with the object metatable (json_push_object_mt), so an empty
 *               decoded object re-encodes as {}. Duplicate keys: the last one wins.
 * Encoding a table (raw access; other metamethods are ignored):
 *   array metatable  -> array of 1..n, n the largest key, holes as null; keys must be positive
 *                       integers, and a sparse one (n > 2 * count) is an error
 *   object metatable -> object; integer keys become their decimal string
 *   no (or another) metatable: empty -> {}; positive integer keys, not sparse -> array;
 *                       string keys -> object; anything else is an error.
 * Errors name the place as a path from the root "$", with Lua keys: "$.tools[2]" is
 * value.tools[2] of the encoded Lua value.
 * Nesting deeper than JSON_MAX_DEPTH containers is an error on both sides (a cycle shows up as
 * this error). Neither function raises except on out-of-memory; both leave the stack as it was
 * apart from what they document to push. */
#ifndef RLM_JSON_H
#define RLM_JSON_H
#include <stddef.h>
#include <stdint.h>
#include <lua.h>

#include "buf.h"

#define JSON_MAX_DEPTH 1000

/* Decodes s[0..len) (one value, surrounding whitespace allowed) and pushes it. On failure pushes
 * nothing and returns 0 with a message like "invalid JSON at byte 17: expected ',' or '}'" in
 * err, where 17 is the 0-based offset of the offending byte. */
int json_decode(lua_State *L, const char *s, size_t len, char *err, size_t errlen);

/* Reading a few fields of a document without making Lua values (a model's answer, say).
 * json_check checks text as json_decode would (same rules, same messages) and pushes nothing.
 * json_pick does the same and, in the same pass, finds the values at the picks' paths: steps
 * split by '.', each a key or, when all digits, a 1-based array index
 * ("choices.1.message.content"; "" is the whole value). A step of the other kind finds nothing
 * (an index never names an object's key). Each pick found gets its value's first byte and
 * length; the others get at = NULL. A repeated key: the last one wins, as in json_decode. A
 * value's type is its first byte: '"' string, '{' object, '[' array, 't'/'f', 'n', else a
 * number. */
#define JSON_PICKS_MAX 64        /* picks in one call */

struct json_pick {
    const char *path;      /* in */
    const char *at;        /* out: NULL when absent */
    size_t len;
};

int json_check(const char *s, size_t len, char *err, size_t errlen);
int json_pick(const char *s, size_t len, struct json_pick *picks, int npicks, char *err,
              size_t errlen);

/* The items of a checked array one by one: the first when after is NULL, else the one after
 * the item that ends at after. Sets *item_len; NULL when there are no more. */
const char *json_next_item(const char *array, size_t len, const char *after, size_t *item_len);

/* Writes the text of the checked string value v[0..len) (quotes included) into out, which has
 * room for len bytes (none is longer), with json_decode's rules for escapes; returns its
 * length. */
size_t json_unescape(const char *v, size_t len, char *out);

/* The checked number v[0..len) as an integer: exact when it is an integer literal that fits,
 * else truncated toward zero. 0 when it is not a number or out of int64's range. */
int json_integer(const char *v, size_t len, int64_t *out);

struct json_encode_opts {
    int indent;    /* > 0: pretty-print with this many spaces per level, ", " -> ",\n", ": " */
    int hash_order; /* nonzero: object keys in table order, which Lua's per-process string
                     * hash seed changes from one process to the next; zero: in byte order */
};

/* Encodes the value at idx and pushes the JSON text as a Lua string; opts may be NULL (compact,
 * no spaces, object keys in byte order: the same value gives the same bytes in every process). On failure pushes nothing and returns 0 with a message like
 * "cannot encode a function at $.tools[2]" in err. */
int json_encode(lua_State *L, int idx, const struct json_encode_opts *opts, char *err,
                size_t errlen);

/* Appends the JSON text of the value at idx to out, as json_encode with no opts would encode it
 * (for a document built in parts); 0 with a message in err on failure, out then holding part
 * of the text. */
int json_append(lua_State *L, int idx, struct buf *out, char *err, size_t errlen);

/* 1 when the value at idx is a table that would encode as a JSON array (so a decoded or
 * json.array table, or a plain one with keys 1..n, n > 0, not sparse), else 0. */
int json_is_array(lua_State *L, int idx);

/* Push the shared metatables decoded arrays and objects carry (created on first use). */
void json_push_array_mt(lua_State *L);
void json_push_object_mt(lua_State *L);

/* The characters of s[0..len) when it is valid UTF-8 (as Lua's utf8.len counts), else -1. */
long long json_utf8_count(const char *s, size_t len);

/* The C library's decimal point: os.setlocale can make it ',' for snprintf and strtod. */
char json_locale_point(void);

#endif
