/* netlib.c — dlopen of libcurl and libmicrohttpd on first use; see netlib.h for why. */
#include "netlib.h"

#include <dlfcn.h>
#include <stdio.h>

#include <lauxlib.h>

struct netlib netlib;

static int curl_loaded, mhd_loaded;

/* dlopen of soname, or NULL with err saying which package to install. */
static void *open_library(const char *soname, const char *purpose, const char *package, char *err,
                          size_t errlen)
{
    void *handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL)
        snprintf(err, errlen, "rlm needs %s (%s); install it with `sudo apt-get install %s`",
                 purpose, dlerror(), package);
    return handle;
}

/* Fills one pointer from the library's symbol table, or returns -1 with err set. */
#define NETLIB_RESOLVE(name)                                                                     \
    if ((*(void **)&netlib.p_##name = dlsym(handle, #name)) == NULL) {                           \
        snprintf(err, errlen, "%s has no %s (too old a version?)", soname, #name);               \
        return -1;                                                                               \
    }

static int load_curl(char *err, size_t errlen)
{
    const char *soname = "libcurl.so.4";
    if (curl_loaded)
        return 0;
    void *handle = open_library(soname, "libcurl for HTTP", "libcurl4", err, errlen);
    if (handle == NULL)
        return -1;
    NETLIB_CURL_FUNCTIONS(NETLIB_RESOLVE)
    /* TLS and the rest of curl's global state are set up here, not at rlm's start. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "libcurl failed to initialise");
        return -1;
    }
    curl_loaded = 1;
    return 0;
}

static int load_mhd(char *err, size_t errlen)
{
    const char *soname = "libmicrohttpd.so.12";
    if (mhd_loaded)
        return 0;
    void *handle = open_library(soname, "libmicrohttpd to serve HTTP", "libmicrohttpd12", err,
                                errlen);
    if (handle == NULL)
        return -1;
    NETLIB_MHD_FUNCTIONS(NETLIB_RESOLVE)
    mhd_loaded = 1;
    return 0;
}
#undef NETLIB_RESOLVE

void netlib_curl(lua_State *L)
{
    char err[512];
    if (load_curl(err, sizeof err))
        luaL_error(L, "%s", err);
}

void netlib_mhd(lua_State *L)
{
    char err[512];
    if (load_mhd(err, sizeof err))
        luaL_error(L, "%s", err);
}

int netlib_curl_loaded(void)
{
    return curl_loaded;
}

int netlib_load_all(char *err, size_t errlen)
{
    return load_curl(err, errlen) || load_mhd(err, errlen) ? -1 : 0;
}
