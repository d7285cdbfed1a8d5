/* adopt.c — big Lua strings from C buffers without a second copy (see adopt.h).
 *
 * Lua 5.4 makes a long string with one allocation of header + bytes + NUL, tagged LUA_TSTRING,
 * and then copies the bytes in. The allocator below hands out an offered block for exactly
 * that request, so the copy is of the bytes onto themselves. The header's size is learnt once
 * from a probe string instead of from Lua's private headers, and each push checks that the
 * string's bytes are where the block put them; if not, adoption is switched off for good. */
#include <stdlib.h>
#include <string.h>

#include "adopt.h"

/* Shorter strings are interned and copied as usual: offering them gains nothing. */
#define ADOPT_MIN 64

static size_t header;        /* bytes in front of a string's contents */
static int calibrated;
static int adopting;         /* the layout is as expected: blocks are offered */
static size_t probe_size;    /* while calibrating: the size of the probe string's allocation */
static char *offer;          /* the block the next long string takes, if its size matches */
static size_t offer_size;

static void *alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    (void)ud;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (ptr == NULL && osize == LUA_TSTRING) {
        if (offer && nsize == offer_size) {
            void *block = offer;
            offer = NULL;
            return block;
        }
        if (!calibrated && probe_size == 0)
            probe_size = nsize;
    }
    return realloc(ptr, nsize);
}

void adopt_install(lua_State *L)
{
    lua_setallocf(L, alloc, NULL);
    if (calibrated)
        return;
    char probe[64] = {0};    /* longer than any short (interned) string */
    probe_size = 0;
    lua_pushlstring(L, probe, sizeof probe);
    lua_pop(L, 1);
    header = probe_size > sizeof probe + 1 ? probe_size - sizeof probe - 1 : 0;
    adopting = header > 0;
    calibrated = 1;
}

char *adopt_alloc(size_t len)
{
    char *block = malloc(header + len + 1);
    return block ? block + header : NULL;
}

void adopt_free(char *data)
{
    if (data)
        free(data - header);
}

/* The offer is made here, right before the push: a finaliser run by a GC step on the way in
 * (growing the stack for this call) must not take it for a string of its own. */
static int push_bytes(lua_State *L)
{
    char *data = lua_touserdata(L, 1);
    size_t len = (size_t)lua_tointeger(L, 2);
    if (adopting && len >= ADOPT_MIN) {
        offer = data - header;
        offer_size = header + len + 1;
    }
    lua_pushlstring(L, data, len);
    return 1;
}

void adopt_push(lua_State *L, char *data, size_t len)
{
    /* Protected, so that a copy that runs out of memory still frees the buffer. */
    lua_pushcfunction(L, push_bytes);
    lua_pushlightuserdata(L, data);
    lua_pushinteger(L, (lua_Integer)len);
    int status = lua_pcall(L, 2, 1, 0);
    int adopted = offer == NULL && adopting && len >= ADOPT_MIN;
    offer = NULL;
    if (adopted && (status != LUA_OK || lua_tostring(L, -1) != data))
        adopting = 0;        /* laid out otherwise: never offer again (the block is Lua's) */
    if (!adopted)
        adopt_free(data);
    if (status != LUA_OK)
        lua_error(L);
}
