/* host.c — builds the Lua state: libraries, preloaded modules, search paths, signals. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "adopt.h"
#include "host.h"

int luaopen_cjson(lua_State *L);
int luaopen_cjson_safe(lua_State *L);

#define BINDING(name) int luaopen_rlm_core_##name(lua_State *L);
#include "bindings.h"
#undef BINDING

static const luaL_Reg host_bindings[] = {
#define BINDING(name) {"rlm.core." #name, luaopen_rlm_core_##name},
#include "bindings.h"
#undef BINDING
    {"cjson", luaopen_cjson},
    {"cjson.safe", luaopen_cjson_safe},
    {NULL, NULL}};

volatile sig_atomic_t host_signal;
static lua_State *signal_state;
static int signal_pipe[2] = {-1, -1};
static pid_t signal_pid, signal_tid;   /* rlm's process and its Lua thread */

const struct embedded_file *host_embedded(const char *path)
{
    for (size_t i = 0; i < embedded_count; i++)
        if (strcmp(embedded_files[i].path, path) == 0)
            return &embedded_files[i];
    return NULL;
}

void host_push_hash(lua_State *L, uint64_t h)
{
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    lua_pushstring(L, hex);
}

void host_push_redacted(lua_State *L, const char *msg, const char *secret)
{
    if (secret && strlen(secret) >= 8 && strstr(msg, secret))
        luaL_gsub(L, msg, secret, "[redacted]");
    else
        lua_pushstring(L, msg);
}

void host_free_secret(char *secret)
{
    if (secret) {
        /* volatile, so the compiler cannot drop a write to memory about to be freed */
        volatile char *p = secret;
        while (*p)
            *p++ = '\0';
    }
    free(secret);
}

void host_newclass(lua_State *L, const char *name, const luaL_Reg *metamethods,
                   const luaL_Reg *methods)
{
    luaL_newmetatable(L, name);                // [meta]
    luaL_setfuncs(L, metamethods, 0);
    lua_newtable(L);                           // [meta, methods]
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
}

static int msghandler(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int host_pcall(lua_State *L, int nargs, int nresults)
{
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    int status = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    return status;
}

void host_report(lua_State *L, int status)
{
    if (status == LUA_OK)
        return;
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "rlm: %s\n", msg ? msg : "(error without a message)");
    fflush(stderr);
    lua_pop(L, 1);
}

/* package.preload loader for an embedded lua/ file; upvalue 1 is its index. The chunk name is
 * the real path so tracebacks point at lua/... lines (bin2c keeps it in the bytecode too). */
static int load_embedded(lua_State *L)
{
    const struct embedded_file *f = &embedded_files[lua_tointeger(L, lua_upvalueindex(1))];
    lua_pushfstring(L, "@%s", f->path);
    if (luaL_loadbufferx(L, (const char *)f->data, f->len, lua_tostring(L, -1),
                         f->bytecode ? "b" : "t") != LUA_OK)
        return lua_error(L);
    lua_pushvalue(L, 1);               /* module name, as require passes it */
    lua_call(L, 1, 1);
    return 1;
}

/* "lua/rlm/init.lua" -> "rlm", "lua/rlm/http.lua" -> "rlm.http"; 0 if not a lua/ module. */
static int module_name(const char *path, char *out, size_t size)
{
    size_t n = strlen(path);
    if (strncmp(path, "lua/", 4) != 0 || n < 8 || strcmp(path + n - 4, ".lua") != 0 || n - 8 >= size)
        return 0;
    memcpy(out, path + 4, n - 8);
    out[n - 8] = '\0';
    size_t m = strlen(out);
    if (m > 5 && strcmp(out + m - 5, "/init") == 0)
        out[m - 5] = '\0';
    for (char *p = out; *p; p++)
        if (*p == '/')
            *p = '.';
    return 1;
}

static void preload_modules(lua_State *L)
{
    char name[256];
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);   // [preload]
    for (const luaL_Reg *b = host_bindings; b->name; b++) {
        lua_pushcfunction(L, b->func);
        lua_setfield(L, -2, b->name);
    }
    for (size_t i = 0; i < embedded_count; i++) {
        if (!module_name(embedded_files[i].path, name, sizeof name))
            continue;
        lua_pushinteger(L, (lua_Integer)i);
        lua_pushcclosure(L, load_embedded, 1);
        lua_setfield(L, -2, name);
    }
    lua_pop(L, 1);
}

/* The searcher of RLM_LUA_PATH's modules (upvalue 1 is its path): it goes in front of the
 * preload searcher, so a user can replace one of rlm's modules (a prompt template, say) without
 * rebuilding. It has a path of its own: the user's LUA_PATH never outranks an rlm module. */
static int search_overrides(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchpath");
    lua_pushvalue(L, 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_call(L, 2, 2);                                           // [package, file|nil, err]
    if (lua_isnil(L, -2))
        return 1;
    const char *file = lua_tostring(L, -2);
    if (luaL_loadfilex(L, file, NULL) != LUA_OK)
        return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, file,
                          lua_tostring(L, -1));
    lua_pushstring(L, file);
    return 2;
}

static void add_override_searcher(lua_State *L, const char *dirs)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (const char *p = dirs; *p;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if (len) {
            luaL_addlstring(&b, p, len);
            luaL_addstring(&b, "/?.lua;");
            luaL_addlstring(&b, p, len);
            luaL_addstring(&b, "/?/init.lua;");
        }
        p += len + (colon != NULL);
    }
    luaL_pushresult(&b);                                          // [package, path]
    lua_pushcclosure(L, search_overrides, 1);                     // [package, searcher]
    lua_getfield(L, -2, "searchers");                             // [package, searcher, searchers]
    for (lua_Integer i = (lua_Integer)luaL_len(L, -1); i >= 1; i--) {
        lua_rawgeti(L, -1, i);
        lua_rawseti(L, -2, i + 1);
    }
    lua_insert(L, -2);
    lua_rawseti(L, -2, 1);
    lua_pop(L, 1);
}

/* lua5.4's default path without its entries in the working directory ("./?.lua"): mpv's
 * reasoning, a stray ./x.lua in whatever folder rlm is started from must not hijack a require.
 * A user who wants the working directory puts "./?.lua" in LUA_PATH. */
static void without_working_dir(const char *dflt, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (const char *p = dflt; *p;) {
        const char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        if (len && strncmp(p, "./", 2) != 0 && n + len + 2 < size) {
            if (n)
                out[n++] = ';';
            memcpy(out + n, p, len);
            n += len;
            out[n] = '\0';
        }
        p += len + (semi != NULL);
    }
}

/* package[field] as lua.c sets it: the first of var54 and var that is set, a ";;" in it
 * standing for the default; the default alone when neither is set. */
static void set_path(lua_State *L, const char *field, const char *var54, const char *var,
                     const char *dflt)
{
    char safe[1024];
    without_working_dir(dflt, safe, sizeof safe);
    const char *env = getenv(var54);
    if (env == NULL)
        env = getenv(var);
    const char *mark = env ? strstr(env, ";;") : NULL;
    if (env == NULL) {
        lua_pushstring(L, safe);
    } else if (mark == NULL) {
        lua_pushstring(L, env);
    } else {
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        if (mark > env) {
            luaL_addlstring(&b, env, (size_t)(mark - env));
            luaL_addchar(&b, ';');
        }
        luaL_addstring(&b, safe);
        if (mark[2]) {
            luaL_addchar(&b, ';');
            luaL_addstring(&b, mark + 2);
        }
        luaL_pushresult(&b);
    }
    lua_setfield(L, -2, field);
}

static void set_search_paths(lua_State *L)
{
    const char *dirs = getenv("RLM_LUA_PATH");
    lua_getglobal(L, "package");                                  // [package]
    set_path(L, "path", "LUA_PATH_5_4", "LUA_PATH", LUA_PATH_DEFAULT);
    set_path(L, "cpath", "LUA_CPATH_5_4", "LUA_CPATH", LUA_CPATH_DEFAULT);
    if (dirs && *dirs)
        add_override_searcher(L, dirs);
    lua_pop(L, 1);
}

static int host_setup(lua_State *L)
{
    luaL_checkversion(L);
    luaL_openlibs(L);
    preload_modules(L);
    set_search_paths(L);
    return 0;
}

lua_State *host_newstate(void)
{
    lua_State *L = luaL_newstate();
    if (L == NULL)
        return NULL;
    adopt_install(L);
    lua_pushcfunction(L, host_setup);
    int status = host_pcall(L, 0, 0);
    if (status != LUA_OK) {
        host_report(L, status);
        lua_close(L);
        return NULL;
    }
    return L;
}

/* Signals: the handler only records the signal, pokes the self-pipe (which wakes the event
 * loop's wait) and arms a count hook, the same trick lua.c uses, so that plain Lua code is
 * interrupted too. Both paths then raise "interrupted" from normal Lua context.
 *
 * The hook may be set only from the Lua thread: another thread would race it on the state's
 * call frames. The kernel gives a signal sent to rlm to any thread that has it unblocked, and
 * to another one whenever the Lua thread already has one pending or waits in vfork; so the
 * threads rlm's libraries start run with every signal blocked (loop.c), and should a thread
 * rlm did not make take one all the same, the handler there passes it on to the Lua thread and
 * does nothing else. In a vfork child (another process, whose parent is held until it execs)
 * it does what it does in rlm. */
static void interrupt_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    host_check_signal(L);
}

static void on_signal(int signo)
{
    int saved = errno;
    if (getpid() == signal_pid && gettid() != signal_tid) {
        tgkill(signal_pid, signal_tid, signo);
        errno = saved;
        return;
    }
    host_signal = signo;
    if (signal_pipe[1] >= 0) {
        ssize_t r = write(signal_pipe[1], "!", 1);
        (void)r;
    }
    if (signal_state)
        lua_sethook(signal_state, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
    errno = saved;
}

void host_install_signals(lua_State *L)
{
    signal_state = L;
    signal_pid = getpid();
    signal_tid = gettid();
    if (signal_pipe[0] < 0 && pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        signal_pipe[0] = signal_pipe[1] = -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* Every signal that ends a program from outside: the terminal closing (HUP) and Ctrl-\\ (QUIT)
     * too, so the same cleanup runs and no sandbox outlives rlm. */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int host_signal_fd(void)
{
    return signal_pipe[0];
}

void host_check_signal(lua_State *L)
{
    if (!host_signal || host_signal < 0)
        return;
    char drain[64];
    while (signal_pipe[0] >= 0 && read(signal_pipe[0], drain, sizeof drain) > 0)
        ;
    int signo = host_signal;
    host_signal = -signo;     /* handled; main still sees which signal ended the run */
    luaL_error(L, "interrupted (SIG%s)", sigabbrev_np(signo));
}
