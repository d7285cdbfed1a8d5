/* adopt.h — big Lua strings from C buffers without a second copy.
 *
 * lua_pushlstring allocates the string and copies the bytes into it, so a 100 MB value read
 * from a pipe lives twice until the buffer is freed. A buffer from adopt_alloc keeps room for
 * the string's header in front of the bytes; adopt_push offers the whole block to Lua's
 * allocator as the string's own memory, and Lua's copy then moves the bytes onto themselves.
 * Where this Lua lays strings out otherwise (checked once per process, and on every push),
 * adopt_push copies as lua_pushlstring does: never wrong, only not free. */
#ifndef RLM_ADOPT_H
#define RLM_ADOPT_H
#include <stddef.h>
#include <lua.h>

/* Installs the allocator that can adopt buffers; call once on a new state. */
void adopt_install(lua_State *L);

/* A buffer for len bytes (the caller fills them), or NULL when out of memory. */
char *adopt_alloc(size_t len);

/* Pushes the len bytes of a buffer from adopt_alloc as a string; the buffer is Lua's or freed
 * afterwards either way. [-0, +1, m] */
void adopt_push(lua_State *L, char *data, size_t len);

/* Frees a buffer from adopt_alloc that was never pushed. Safe on NULL. */
void adopt_free(char *data);

#endif
