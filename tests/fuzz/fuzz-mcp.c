/* SPDX-License-Identifier: MIT */
/* JSON-RPC/MCP dispatch: every line gets a well-formed reply or none, and nothing crashes or leaks. */
#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mcp/mcp.h"

static int echo_call(ToolCall *c, json_object *args) {
        tool_call_finish_text(c, false, "ok");
        return 0;
}

static const Tool echo = {
        .name = "echo",
        .title = "Echo",
        .description = "Answers ok.",
        .input_schema = "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":8},"
                        "\"n\":{\"type\":\"integer\",\"minimum\":1}},\"additionalProperties\":false}",
        .output_schema = NULL,
        .call = echo_call,
};

static const Tool *const tools[] = { &echo, NULL };

static int sink(json_object *msg, void *userdata) {
        json_object_put(msg);
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        McpServer server = {
                .name = "fuzz", .version = "0", .tools = tools, .page_size = 1, .max_calls = 4, .max_depth = 32,
        };
        McpSession *s;
        const char *p = (const char *) data, *end = p + size;

        if (mcp_session_new(&s, &server, 0, 0, sink, NULL) < 0)
                return 0;
        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t) (end - p));
                size_t len = nl ? (size_t) (nl - p) : (size_t) (end - p);
                if (mcp_session_handle_line(s, p, len) < 0)
                        break;
                p += len + 1;
        }
        mcp_session_free(s);
        return 0;
}
