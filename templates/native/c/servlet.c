/*
 * {{name}}: a swan servlet in C (native ABI v1, swan.h).
 *
 * Try it:
 *   curl 'http://127.0.0.1:8080/{{name}}?name=Ada'
 *   -> Hello, Ada! GET /{{name}}
 *
 * swan builds this folder itself when it sits in a servlets folder
 * (development mode), with swan.h on the include path. By hand:
 *   clang --target=wasm32-wasi -O2 -mexec-model=reactor \
 *         -I SWAN/guest-sdk/c -o {{name}}.wasm *.c
 */
#include <stdio.h>
#include <string.h>

#include "swan.h"

/* The value of a hex digit, or -1. */
static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Copies the first value of `key` in `query` into `out` (NUL-terminated, cut
 * to fit), with `+` and `%XX` decoded. Returns 0 if found, -1 if absent. */
static int query_param(const char *query, const char *key, char *out, size_t out_len) {
    size_t key_len = strlen(key);
    for (const char *p = query; *p;) {
        const char *end = strchr(p, '&');
        if (!end) end = p + strlen(p);
        if ((size_t)(end - p) >= key_len && strncmp(p, key, key_len) == 0 &&
            (p + key_len == end || p[key_len] == '=')) {
            const char *v = p + key_len + (p + key_len < end);
            size_t n = 0;
            while (v < end && n + 1 < out_len) {
                if (*v == '+') {
                    out[n++] = ' ', v++;
                } else if (*v == '%' && end - v >= 3 && hex(v[1]) >= 0 && hex(v[2]) >= 0) {
                    out[n++] = (char)(hex(v[1]) * 16 + hex(v[2])), v += 3;
                } else {
                    out[n++] = *v++;
                }
            }
            out[n] = '\0';
            return 0;
        }
        p = *end ? end + 1 : end;
    }
    return -1;
}

static int handle(void) {
    char method[16], path[1024], query[2048], name[512];
    swan_request_string(SWAN_METHOD, method, sizeof method);
    swan_request_string(SWAN_PATH, path, sizeof path);
    swan_request_string(SWAN_QUERY, query, sizeof query);
    if (query_param(query, "name", name, sizeof name) < 0) strcpy(name, "world");

    char body[4096];
    int n = snprintf(body, sizeof body, "Hello, %s! %s %s", name, method, path);
    swan_header("content-type", "text/plain; charset=utf-8");
    swan_write(body, n < (int)sizeof body ? n : (int)sizeof body - 1);
    return 0;
}

SWAN_SERVLET(handle)
