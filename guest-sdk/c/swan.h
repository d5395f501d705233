/*
 * swan.h: write swan servlets in C (native ABI version 1).
 *
 * The ABI is specified in guest-sdk/ABI.md. Build a servlet with Debian's
 * clang and wasi-libc:
 *
 *     clang --target=wasm32-wasi -O2 -mexec-model=reactor \
 *           -I guest-sdk/c -o hello-c.wasm hello.c
 *
 * and define the handler with SWAN_SERVLET:
 *
 *     #include "swan.h"
 *     static int handle(void) {
 *         swan_header("content-type", "text/plain");
 *         swan_print("hello from C\n");
 *         return 0;
 *     }
 *     SWAN_SERVLET(handle)
 */
#ifndef SWAN_H
#define SWAN_H

#include <stdint.h>
#include <string.h>

#define SWAN_ABI_VERSION 1

/* Request parts for swan_request_get. */
enum swan_part {
    SWAN_METHOD = 0,
    SWAN_PATH = 1,
    SWAN_QUERY = 2,
    SWAN_PATH_INFO = 3,
    SWAN_HEADERS = 4,
    SWAN_BODY = 5,
    SWAN_REMOTE_ADDR = 6,
    SWAN_REQUEST_ID = 7,
};

/* Log levels for swan_log. */
enum swan_level { SWAN_ERROR = 0, SWAN_WARN = 1, SWAN_INFO = 2, SWAN_DEBUG = 3 };

#define SWAN_IMPORT(name) __attribute__((import_module("swan"), import_name(name)))

/* Raw imports: see ABI.md. Functions that copy data out return its full
 * length (copying at most buf_len bytes), or -1 when it is absent. */
SWAN_IMPORT("request_get")
int32_t swan_request_get(int32_t part, char *buf, int32_t buf_len);
SWAN_IMPORT("request_header")
int32_t swan_request_header(const char *name, int32_t name_len, char *buf, int32_t buf_len);
SWAN_IMPORT("setting")
int32_t swan_setting_raw(const char *key, int32_t key_len, char *buf, int32_t buf_len);
SWAN_IMPORT("response_status")
int32_t swan_status(int32_t status);
SWAN_IMPORT("response_header")
int32_t swan_header_raw(const char *name, int32_t name_len, const char *value, int32_t value_len);
SWAN_IMPORT("response_write")
int32_t swan_write(const void *data, int32_t len);
SWAN_IMPORT("log")
void swan_log_raw(int32_t level, const char *msg, int32_t len);

/* Outbound HTTP (where the route's allowed_outbound_hosts allow it).
 * `request` is "METHOD URL\n", header lines "name: value\n", an empty line,
 * then the body. Returns the response status, or a negative error:
 * -1 denied, -2 address prohibited, -3 connect failed, -4 timeout,
 * -5 too many in flight, -6 bad request, -7 response too large, -8 other. */
SWAN_IMPORT("http_send")
int32_t swan_http_send(const char *request, int32_t len);
/* Parts of the last response: 0 headers ("name: value\n" lines), 1 body. */
enum swan_response_part { SWAN_RESPONSE_HEADERS = 0, SWAN_RESPONSE_BODY = 1 };
SWAN_IMPORT("http_response_get")
int32_t swan_http_response_get(int32_t part, char *buf, int32_t buf_len);

/* Key-value stores (the route lists the ones it may open in `stores`).
 * Every call returns >= 0 on success or a negative error:
 * -1 absent (swan_kv_get only), -2 denied (not listed, or no such store),
 * -3 unavailable (Redis down: try later; failing now gives the client 503),
 * -4 over a limit (key, value, keys per list, operations per request),
 * -5 not a number (swan_kv_increment), -6 other, -7 bad handle. */
SWAN_IMPORT("kv_open")
int32_t swan_kv_open(const char *name, int32_t name_len);             /* a handle */
SWAN_IMPORT("kv_get")
int32_t swan_kv_get(int32_t store, const char *key, int32_t key_len,
                    void *buf, int32_t buf_len);                        /* full length */
/* ttl_ms > 0: the key expires after that many milliseconds. */
SWAN_IMPORT("kv_set")
int32_t swan_kv_set(int32_t store, const char *key, int32_t key_len,
                    const void *value, int32_t value_len, int64_t ttl_ms);
SWAN_IMPORT("kv_delete")
int32_t swan_kv_delete(int32_t store, const char *key, int32_t key_len); /* 1 if it existed */
SWAN_IMPORT("kv_exists")
int32_t swan_kv_exists(int32_t store, const char *key, int32_t key_len); /* 1 or 0 */
/* Adds delta atomically (absent counts as 0); the new value goes to *out. */
SWAN_IMPORT("kv_increment")
int32_t swan_kv_increment(int32_t store, const char *key, int32_t key_len,
                          int64_t delta, int64_t *out);
/* Sets key to `new_value` only if its value is `expected` now; with
 * expected_len -1, only if the key is absent. 1 if it swapped, 0 if not. */
SWAN_IMPORT("kv_cas")
int32_t swan_kv_cas(int32_t store, const char *key, int32_t key_len,
                    const void *expected, int32_t expected_len,
                    const void *new_value, int32_t new_len);
/* Keys starting with prefix, a page at a time: cursor 0 for the first page.
 * Writes "NEXT\n" then one key per line ("\n" alone: no more pages);
 * returns the full length. */
SWAN_IMPORT("kv_list")
int32_t swan_kv_list(int32_t store, const char *prefix, int32_t prefix_len,
                     int64_t cursor, char *buf, int32_t buf_len);

/* Copies a request part into buf as a NUL-terminated string (truncated to
 * fit); returns the part's full length. */
static inline int32_t swan_request_string(enum swan_part part, char *buf, int32_t buf_len) {
    int32_t n = swan_request_get(part, buf, buf_len > 0 ? buf_len - 1 : 0);
    if (buf_len > 0) buf[n < buf_len - 1 ? n : buf_len - 1] = '\0';
    return n;
}

/* A request header's value as a NUL-terminated string; -1 when absent. */
static inline int32_t swan_request_header_string(const char *name, char *buf, int32_t buf_len) {
    int32_t n = swan_request_header(name, (int32_t)strlen(name), buf, buf_len > 0 ? buf_len - 1 : 0);
    if (buf_len > 0) buf[n < 0 ? 0 : (n < buf_len - 1 ? n : buf_len - 1)] = '\0';
    return n;
}

/* A setting as a NUL-terminated string; -1 when absent. */
static inline int32_t swan_setting(const char *key, char *buf, int32_t buf_len) {
    int32_t n = swan_setting_raw(key, (int32_t)strlen(key), buf, buf_len > 0 ? buf_len - 1 : 0);
    if (buf_len > 0) buf[n < 0 ? 0 : (n < buf_len - 1 ? n : buf_len - 1)] = '\0';
    return n;
}

/* Adds a response header (0 ok, -1 invalid, -2 set by swan itself). */
static inline int32_t swan_header(const char *name, const char *value) {
    return swan_header_raw(name, (int32_t)strlen(name), value, (int32_t)strlen(value));
}

/* Appends a NUL-terminated string to the response body. */
static inline int32_t swan_print(const char *text) {
    return swan_write(text, (int32_t)strlen(text));
}

/* Writes a line to swan's log. */
static inline void swan_log(enum swan_level level, const char *msg) {
    swan_log_raw(level, msg, (int32_t)strlen(msg));
}

/* Exports `handler` (int handler(void), 0 on success) as the servlet. */
#define SWAN_SERVLET(handler)                                                   \
    __attribute__((export_name("swan_abi_version"))) int32_t swan_abi_version(void) { \
        return SWAN_ABI_VERSION;                                                \
    }                                                                           \
    __attribute__((export_name("swan_handle"))) int32_t swan_handle(void) {    \
        return handler();                                                       \
    }

#endif /* SWAN_H */
