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
#include <lua.h>

#define JSON_MAX_DEPTH 1000

/* Decodes s[0..len) (one value, surrounding whitespace allowed) and pushes it. On failure pushes
 * nothing and returns 0 with a message like "invalid JSON at byte 17: expected ',' or '}'" in
 * err, where 17 is the 0-based offset of the offending byte. */
int json_decode(lua_State *L, const char *s, size_t len, char *err, size_t errlen);

struct json_encode_opts {
    int indent;    /* > 0: pretty-print with this many spaces per level, ", " -> ",\n", ": " */
    int sort_keys; /* nonzero: object keys in byte order, for deterministic output */
};

/* Encodes the value at idx and pushes the JSON text as a Lua string; opts may be NULL (compact,
 * no spaces, table order). On failure pushes nothing and returns 0 with a message like
 * "cannot encode a function at $.tools[2]" in err. */
int json_encode(lua_State *L, int idx, const struct json_encode_opts *opts, char *err,
                size_t errlen);

/* 1 when the value at idx is a table that would encode as a JSON array (so a decoded or
 * json.array table, or a plain one with keys 1..n, n > 0, not sparse), else 0. */
int json_is_array(lua_State *L, int idx);

/* Push the shared metatables decoded arrays and objects carry (created on first use). */
void json_push_array_mt(lua_State *L);
void json_push_object_mt(lua_State *L);

#endif
