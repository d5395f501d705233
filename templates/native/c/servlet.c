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
#include <stdlib.h>
#include <string.h>

#include "swan.h"

/* The value of a hex digit, or -1. */
static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes the first value of `key` in `query` into `out` (room for as many
 * bytes as the query has), with `+` and `%XX` decoded. Returns its length,
 * or -1 if the key is absent. */
static long query_param(const char *query, const char *key, char *out) {
    size_t key_len = strlen(key);
    for (const char *p = query; *p;) {
        const char *end = strchr(p, '&');
        if (!end) end = p + strlen(p);
        if ((size_t)(end - p) >= key_len && strncmp(p, key, key_len) == 0 &&
            (p + key_len == end || p[key_len] == '=')) {
            const char *v = p + key_len + (p + key_len < end);
            long n = 0;
            while (v < end) {
                if (*v == '+') {
                    out[n++] = ' ', v++;
                } else if (*v == '%' && end - v >= 3 && hex(v[1]) >= 0 && hex(v[2]) >= 0) {
                    out[n++] = (char)(hex(v[1]) * 16 + hex(v[2])), v += 3;
                } else {
                    out[n++] = *v++;
                }
            }
            return n;
        }
        p = *end ? end + 1 : end;
    }
    return -1;
}

/* A request part, whole, as a NUL-terminated string in memory of its own
 * (free it); NULL when memory runs out. With no room, swan_request_string
 * returns the part's length. */
static char *request_part(enum swan_part part) {
    int32_t n = swan_request_string(part, NULL, 0);
    size_t len = n > 0 ? (size_t)n : 0;
    char *s = malloc(len + 1);
    if (s) swan_request_string(part, s, (int32_t)len + 1);
    return s;
}

static void say(const char *s, size_t n) { swan_write(s, (int32_t)n); }

/* Every part is read whole, however long, and freed before the next
 * request (which matters when swan reuses an instance). */
static int handle(void) {
    char *method = request_part(SWAN_METHOD);
    char *path = request_part(SWAN_PATH);
    char *query = request_part(SWAN_QUERY);
    char *name = query ? malloc(strlen(query) + 1) : NULL;
    int failed = !method || !path || !query || !name;
    if (!failed) {
        long n = query_param(query, "name", name);
        swan_header("content-type", "text/plain; charset=utf-8");
        say("Hello, ", 7);
        if (n < 0) say("world", 5); else say(name, (size_t)n);
        say("! ", 2);
        say(method, strlen(method));
        say(" ", 1);
        say(path, strlen(path));
    }
    free(method), free(path), free(query), free(name);
    return failed;
}

SWAN_SERVLET(handle)
