/* A servlet in C: greets by name and echoes what it was asked. */
#include <stdio.h>

#include "swan.h"

static int handle(void) {
    char path[256], query[256], agent[128], method[16];
    swan_request_string(SWAN_METHOD, method, sizeof method);
    swan_request_string(SWAN_PATH, path, sizeof path);
    swan_request_string(SWAN_QUERY, query, sizeof query);
    if (swan_request_header_string("user-agent", agent, sizeof agent) < 0) {
        snprintf(agent, sizeof agent, "(none)");
    }
    char body[1024];
    int n = snprintf(body, sizeof body,
                     "Hello from C!\nmethod: %s\npath: %s\nquery: %s\nuser-agent: %s\n",
                     method, path, query, agent);
    swan_header("content-type", "text/plain; charset=utf-8");
    swan_write(body, n < (int)sizeof body ? n : (int)sizeof body - 1);
    return 0;
}

SWAN_SERVLET(handle)
