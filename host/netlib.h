/* netlib.h — libcurl and libmicrohttpd, loaded on first use (host/netlib.c).
 *
 * Linking them pulls in about 36 libraries (TLS, Kerberos, LDAP, IDN, ...) whose loading and
 * relocation cost every command several milliseconds, even `rlm -e ''` and a sandbox-only
 * `rlm exec` that never speak HTTP. Instead the host calls them through function pointers that
 * netlib_curl() / netlib_mhd() fill with dlopen the first time a binding needs them; the names
 * below stay the library's own, so the code reads as plain libcurl / libmicrohttpd.
 *
 * Include this instead of <curl/curl.h> or <microhttpd.h>. */
#ifndef RLM_NETLIB_H
#define RLM_NETLIB_H
#define CURL_DISABLE_TYPECHECK   /* the type-checking macros would hide the pointer calls */
#include <curl/curl.h>
#include <stddef.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include <lua.h>

/* X(name) for every function the host calls. */
#define NETLIB_CURL_FUNCTIONS(X)                                                                  \
    X(curl_global_init) X(curl_easy_init) X(curl_easy_cleanup) X(curl_easy_reset)                 \
    X(curl_easy_setopt)                                                                           \
    X(curl_easy_getinfo) X(curl_easy_strerror) X(curl_slist_append) X(curl_slist_free_all)       \
    X(curl_getdate) X(curl_multi_init) X(curl_multi_cleanup) X(curl_multi_add_handle)            \
    X(curl_multi_remove_handle) X(curl_multi_setopt) X(curl_multi_socket_action)                \
    X(curl_multi_info_read)
#define NETLIB_MHD_FUNCTIONS(X)                                                                   \
    X(MHD_start_daemon) X(MHD_stop_daemon) X(MHD_run) X(MHD_get_timeout) X(MHD_get_daemon_info)  \
    X(MHD_get_connection_info) X(MHD_lookup_connection_value) X(MHD_queue_response)              \
    X(MHD_create_response_from_buffer) X(MHD_create_response_from_callback)                      \
    X(MHD_add_response_header) X(MHD_destroy_response) X(MHD_suspend_connection)                 \
    X(MHD_resume_connection)

#define NETLIB_POINTER(name) __typeof__(name) *p_##name;
struct netlib {
    NETLIB_CURL_FUNCTIONS(NETLIB_POINTER)
    NETLIB_MHD_FUNCTIONS(NETLIB_POINTER)
};
#undef NETLIB_POINTER
extern struct netlib netlib;

/* Loads libcurl (and runs curl_global_init) once; raises a Lua error that says what to install
 * when it cannot. Every binding that makes HTTP requests calls it when it is opened. */
void netlib_curl(lua_State *L);
/* The same for libmicrohttpd (rlm mcp --http). */
void netlib_mhd(lua_State *L);
/* Whether libcurl is loaded (the event loop waits with plain poll() until it is). */
int netlib_curl_loaded(void);
/* For programs without Lua (the C tests): loads both; 0, or -1 with a message in err. */
int netlib_load_all(char *err, size_t errlen);

/* From here on the library's names call through the pointers (curl.h makes three of them
 * argument-count macros; those go first). */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_global_init (*netlib.p_curl_global_init)
#define curl_easy_init (*netlib.p_curl_easy_init)
#define curl_easy_cleanup (*netlib.p_curl_easy_cleanup)
#define curl_easy_reset (*netlib.p_curl_easy_reset)
#define curl_easy_setopt (*netlib.p_curl_easy_setopt)
#define curl_easy_getinfo (*netlib.p_curl_easy_getinfo)
#define curl_easy_strerror (*netlib.p_curl_easy_strerror)
#define curl_slist_append (*netlib.p_curl_slist_append)
#define curl_slist_free_all (*netlib.p_curl_slist_free_all)
#define curl_getdate (*netlib.p_curl_getdate)
#define curl_multi_init (*netlib.p_curl_multi_init)
#define curl_multi_cleanup (*netlib.p_curl_multi_cleanup)
#define curl_multi_add_handle (*netlib.p_curl_multi_add_handle)
#define curl_multi_remove_handle (*netlib.p_curl_multi_remove_handle)
#define curl_multi_setopt (*netlib.p_curl_multi_setopt)
#define curl_multi_socket_action (*netlib.p_curl_multi_socket_action)
#define curl_multi_info_read (*netlib.p_curl_multi_info_read)
#define MHD_start_daemon (*netlib.p_MHD_start_daemon)
#define MHD_stop_daemon (*netlib.p_MHD_stop_daemon)
#define MHD_run (*netlib.p_MHD_run)
#define MHD_get_timeout (*netlib.p_MHD_get_timeout)
#define MHD_get_daemon_info (*netlib.p_MHD_get_daemon_info)
#define MHD_get_connection_info (*netlib.p_MHD_get_connection_info)
#define MHD_lookup_connection_value (*netlib.p_MHD_lookup_connection_value)
#define MHD_queue_response (*netlib.p_MHD_queue_response)
#define MHD_create_response_from_buffer (*netlib.p_MHD_create_response_from_buffer)
#define MHD_create_response_from_callback (*netlib.p_MHD_create_response_from_callback)
#define MHD_add_response_header (*netlib.p_MHD_add_response_header)
#define MHD_destroy_response (*netlib.p_MHD_destroy_response)
#define MHD_suspend_connection (*netlib.p_MHD_suspend_connection)
#define MHD_resume_connection (*netlib.p_MHD_resume_connection)
#endif
