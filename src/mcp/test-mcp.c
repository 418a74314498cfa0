/* SPDX-License-Identifier: MIT */
/*
 * The mcp module's suite: a session driven line by line through a fake sender, from initialize and the version
 * eras to batches, tool calls, progress, cancellation and errors. Over 800 lines, one suite: many short independent
 * cases sharing the fake session at the top, one program for one module.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charge.h"
#include "json-util.h"
#include "jsonrpc/jsonrpc.h"
#include "macro.h"
#include "mcp/mcp.h"

#define META_V "io.modelcontextprotocol/protocolVersion"
#define META_C "io.modelcontextprotocol/clientCapabilities"
#define META_SERVER_INFO "io.modelcontextprotocol/serverInfo"
/* params._meta of a modern (2026-07-28) request. */
#define MODERN_META "\"_meta\":{\"" META_V "\":\"2026-07-28\",\"" META_C "\":{}}"

/* ---- the fake server ----------------------------------------------------- */

/* Everything the session sent, in order. */
static json_object *sent;
static int send_result;          /* what the send callback returns */

/* Calls the "slow" tool holds until the test finishes them. */
static ToolCall *slow_calls[16];
static size_t n_slow;
static unsigned n_cancelled;
static int server_data;

static int echo_call(ToolCall *c, json_object *args) {
        ck_assert_ptr_eq(c->server_userdata, &server_data);
        ck_assert_uint_eq(c->uid, 1000);
        ck_assert_int_eq(c->pid, 4242);
        ck_assert(tool_call_is_live(c));
        tool_call_finish_text(c, false, "%s", json_get_string(args, "text"));
        return 0;
}

static void slow_cancel(ToolCall *c, void *userdata) {
        ck_assert_ptr_eq(userdata, &n_cancelled);
        ck_assert(!tool_call_is_live(c));
        n_cancelled++;
}

static int slow_call(ToolCall *c, json_object *args) {
        (void) args;
        ck_assert_uint_lt(n_slow, ELEMENTSOF(slow_calls));
        tool_call_set_cancel(c, slow_cancel, &n_cancelled);
        slow_calls[n_slow++] = tool_call_ref(c);
        return 0;
}

static int structured_call(ToolCall *c, json_object *args) {
        json_object *content = json_object_new_array(), *st = json_object_new_object();

        json_object_array_add(content, content_text_new("{\"value\":42}"));
        json_add_int(st, "value", 42);
        if (json_object_get_boolean(json_get(args, "image", json_type_boolean))) {
                json_object *img = json_object_new_object();
                json_add_string(img, "type", "image");
                json_add_string(img, "data", "iVBORw0KGgo=");
                json_add_string(img, "mimeType", "image/png");
                json_object_array_add(content, img);
        }
        tool_call_finish(c, content, st, false);
        return 0;
}

static int fail_call(ToolCall *c, json_object *args) {
        (void) c;
        (void) args;
        return -EIO;
}

static const Tool tool_echo = {
        .name = "echo",
        .title = "Echo",
        .description = "Says back what it is given.",
        .input_schema = "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"},"
                        "\"times\":{\"type\":\"integer\",\"minimum\":1}},"
                        "\"required\":[\"text\"],\"additionalProperties\":false}",
        .read_only_hint = true,
        .idempotent_hint = true,
        .call = echo_call,
};

static const Tool tool_slow = {
        .name = "slow",
        .description = "Finishes when the test says so.",
        .input_schema = "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},"
                        "\"additionalProperties\":false}",
        .open_world_hint = true,
        .call = slow_call,
};

static const Tool tool_structured = {
        .name = "structured",
        .title = "Structured",
        .description = "Answers with structured content.",
        .input_schema = "{\"type\":\"object\"}",
        .output_schema = "{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"}},\"required\":[\"value\"]}",
        .read_only_hint = true,
        .call = structured_call,
};

static const Tool tool_fail = {
        .name = "fail",
        .description = "Fails inside.",
        .input_schema = "{\"type\":\"object\"}",
        .destructive_hint = true,
        .call = fail_call,
};

static const Tool tool_last = {
        .name = "last",
        .description = "The fifth tool, for paging.",
        .input_schema = "{\"type\":\"object\"}",
        .call = echo_call,
};

static const Tool *const server_tools[] = { &tool_echo, &tool_slow, &tool_structured, &tool_fail, &tool_last, NULL };
static const char *const tool_names[] = { "echo", "slow", "structured", "fail", "last" };

static McpServer server;

static int collect(json_object *msg, void *userdata) {
        ck_assert_ptr_eq(userdata, &send_result);
        if (send_result < 0) {
                json_object_put(msg);
                return send_result;
        }
        ck_assert_int_eq(json_object_array_add(sent, msg), 0);
        return 0;
}

static void setup(void) {
        server = (McpServer) {
                .name = "test-server",
                .version = "1.2.3",
                .instructions = "Use the tools.",
                .tools = server_tools,
                .page_size = 100,
                .max_calls = 4,
                .max_depth = 64,
                .tools_ttl_ms = 60000,
                .userdata = &server_data,
        };
        sent = json_object_new_array();
        send_result = 0;
        n_slow = 0;
        n_cancelled = 0;
}

static void teardown(void) {
        for (size_t i = 0; i < n_slow; i++)
                tool_call_unref(slow_calls[i]);
        n_slow = 0;
        json_object_put(sent);
        sent = NULL;
}

/* ---- helpers ------------------------------------------------------------- */

static size_t n_sent(void) {
        return json_object_array_length(sent);
}

/* Everything sent so far, handed to the caller; the record starts empty again. */
static json_object *take_all(void) {
        json_object *all = sent;
        sent = json_object_new_array();
        return all;
}

/* The one message sent since the last take; fails if there were more or none. */
static json_object *take(void) {
        _cleanup_json_ json_object *all = take_all();
        ck_assert_msg(json_object_array_length(all) == 1, "expected one message, got %zu: %s",
                      json_object_array_length(all), json_object_to_json_string(all));
        return json_object_get(json_object_array_get_idx(all, 0));
}

static void assert_nothing_sent(void) {
        ck_assert_msg(n_sent() == 0, "unexpected: %s", json_object_to_json_string(sent));
}

static void feed(McpSession *s, const char *format, ...) _printf_(2, 3);
static void feed(McpSession *s, const char *format, ...) {
        _cleanup_free_ char *line = NULL;
        va_list ap;
        int r;

        va_start(ap, format);
        r = vasprintf(&line, format, ap);
        va_end(ap);
        ck_assert_int_ge(r, 0);
        ck_assert_int_eq(mcp_session_handle_line(s, line, strlen(line)), 0);
}

/* Nested member lookup: jget(o, "result", "tools", NULL). */
static json_object *jget(json_object *o, ...) {
        va_list ap;
        const char *k;

        va_start(ap, o);
        while (o && (k = va_arg(ap, const char *)))
                if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, k, &o))
                        o = NULL;
        va_end(ap);
        return o;
}

static bool has(json_object *o, const char *key) {
        return json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, NULL);
}

static void assert_id(json_object *m, const char *id) {
        if (!id) {
                /* A reply to a request whose id could not be read: "id": null, never left out. */
                ck_assert_msg(has(m, "id") && !jget(m, "id", NULL), "want \"id\": null: %s", json_object_to_json_string(m));
                return;
        }
        json_object *v = jget(m, "id", NULL);
        ck_assert_msg(v, "no id: %s", json_object_to_json_string(m));
        ck_assert_str_eq(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN), id);
}

/* id is the expected id as JSON text ("1", "\"a\""), or NULL for none. Returns error.data. */
static json_object *assert_error(json_object *m, const char *id, int code) {
        ck_assert_msg(m, "no message");
        ck_assert_str_eq(json_get_string(m, "jsonrpc"), "2.0");
        assert_id(m, id);
        ck_assert_msg(!has(m, "result"), "a result: %s", json_object_to_json_string(m));
        json_object *e = jget(m, "error", NULL);
        ck_assert_msg(e, "not an error: %s", json_object_to_json_string(m));
        int64_t c;
        ck_assert(json_get_int64(e, "code", &c));
        ck_assert_msg(c == code, "code %" PRIi64 " instead of %d: %s", c, code, json_object_to_json_string(m));
        ck_assert_ptr_nonnull(json_get_string(e, "message"));
        return jget(e, "data", NULL);
}

static json_object *assert_result(json_object *m, const char *id) {
        ck_assert_msg(m, "no message");
        ck_assert_str_eq(json_get_string(m, "jsonrpc"), "2.0");
        assert_id(m, id);
        ck_assert_msg(!has(m, "error"), "an error: %s", json_object_to_json_string(m));
        json_object *r = jget(m, "result", NULL);
        ck_assert_msg(r && json_object_is_type(r, json_type_object), "no result: %s", json_object_to_json_string(m));
        return r;
}

/* Sends one line and checks the single reply is an error with that code. */
static json_object *expect_error(McpSession *s, const char *id, int code, const char *line) {
        ck_assert_int_eq(mcp_session_handle_line(s, line, strlen(line)), 0);
        json_object *m = take();
        assert_error(m, id, code);
        return m;
}

static void assert_strings(json_object *a, const char *const *want, size_t n) {
        ck_assert_msg(json_object_is_type(a, json_type_array), "not an array");
        ck_assert_uint_eq(json_object_array_length(a), n);
        for (size_t i = 0; i < n; i++)
                ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(a, i)), want[i]);
}

static void assert_version_list(json_object *a, bool legacy, bool modern) {
        const char *want[8];
        size_t n = 0;

        if (legacy)
                for (size_t i = 0; mcp_legacy_versions[i]; i++)
                        want[n++] = mcp_legacy_versions[i];
        if (modern)
                for (size_t i = 0; mcp_modern_versions[i]; i++)
                        want[n++] = mcp_modern_versions[i];
        assert_strings(a, want, n);
}

static uid_t session_uid = 1000;   /* the peer of the sessions made next */

static McpSession *session_new(void) {
        McpSession *s = NULL;

        ck_assert_int_eq(mcp_session_new(&s, &server, session_uid, 4242, collect, &send_result), 0);
        ck_assert_ptr_nonnull(s);
        return s;
}

/* A session after the legacy handshake at that version. */
static McpSession *session_init(const char *version) {
        McpSession *s = session_new();

        feed(s,
             "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"%s\","
             "\"capabilities\":{\"roots\":{}},\"clientInfo\":{\"name\":\"test\",\"version\":\"1\"}}}",
             version);
        _cleanup_json_ json_object *m = take();
        ck_assert_str_eq(json_get_string(assert_result(m, "0"), "protocolVersion"), version);
        feed(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
        assert_nothing_sent();
        ck_assert_str_eq(mcp_session_version(s), version);
        return s;
}

static json_object *call_tool(McpSession *s, const char *id, const char *name, const char *args) {
        if (args)
                feed(s, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
                        "\"arguments\":%s}}",
                     id, name, args);
        else
                feed(s, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\"}}", id,
                     name);
        return take();
}

static const char *first_text(json_object *result) {
        json_object *content = jget(result, "content", NULL);
        ck_assert(json_object_is_type(content, json_type_array));
        ck_assert_uint_ge(json_object_array_length(content), 1);
        json_object *b = json_object_array_get_idx(content, 0);
        ck_assert_str_eq(json_get_string(b, "type"), "text");
        return json_get_string(b, "text");
}

static bool is_error_result(json_object *result) {
        json_object *e = jget(result, "isError", NULL);
        ck_assert_msg(e && json_object_is_type(e, json_type_boolean), "isError missing");
        return json_object_get_boolean(e);
}

static void slow_finish(size_t i, const char *text) {
        ToolCall *c = slow_calls[i];

        ck_assert_ptr_nonnull(c);
        tool_call_finish_text(c, false, "%s", text);
}

/* ---- JSON-RPC errors ------------------------------------------------------ */

START_TEST(test_parse_error) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");
        static const char nul_line[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\0\"method\":\"ping\"}";
        static const char only_nul[] = "\0";

        /* -32700 carries no id: none could be read. */
        json_object_put(expect_error(s, NULL, JSONRPC_PARSE_ERROR, "{\"jsonrpc\":\"2.0\",\"id\":1,"));
        json_object_put(expect_error(s, NULL, JSONRPC_PARSE_ERROR, "not json"));
        json_object_put(expect_error(s, NULL, JSONRPC_PARSE_ERROR, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}"));
        json_object_put(expect_error(s, NULL, JSONRPC_PARSE_ERROR, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} x"));

        ck_assert_int_eq(mcp_session_handle_line(s, nul_line, sizeof(nul_line) - 1), 0);
        _cleanup_json_ json_object *m1 = take();
        assert_error(m1, NULL, JSONRPC_PARSE_ERROR);

        /* A line of NUL bytes is not a blank line. */
        ck_assert_int_eq(mcp_session_handle_line(s, only_nul, 1), 0);
        _cleanup_json_ json_object *m2 = take();
        assert_error(m2, NULL, JSONRPC_PARSE_ERROR);

        /* Too deep. */
        char deep[20001];
        memset(deep, '[', 10000);
        memset(deep + 10000, ']', 10000);
        deep[20000] = 0;
        json_object_put(expect_error(s, NULL, JSONRPC_PARSE_ERROR, deep));

        /* The session goes on. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}");
        _cleanup_json_ json_object *m3 = take();
        assert_result(m3, "2");
}
END_TEST

START_TEST(test_blank_lines) {
        _cleanup_(mcp_session_freep) McpSession *s = session_new();

        ck_assert_int_eq(mcp_session_handle_line(s, "", 0), 0);
        ck_assert_int_eq(mcp_session_handle_line(s, "   ", 3), 0);
        ck_assert_int_eq(mcp_session_handle_line(s, " \t\r", 3), 0);
        assert_nothing_sent();
}
END_TEST

START_TEST(test_invalid_request) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        json_object_put(expect_error(s, NULL, JSONRPC_INVALID_REQUEST, "42"));
        json_object_put(expect_error(s, NULL, JSONRPC_INVALID_REQUEST, "\"ping\""));
        json_object_put(expect_error(s, NULL, JSONRPC_INVALID_REQUEST, "true"));
        json_object_put(expect_error(s, "1", JSONRPC_INVALID_REQUEST, "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}"));
        json_object_put(expect_error(s, "2", JSONRPC_INVALID_REQUEST, "{\"id\":2,\"method\":\"ping\"}"));
        json_object_put(expect_error(s, "3", JSONRPC_INVALID_REQUEST, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":7}"));
        json_object_put(expect_error(s, "\"m\"", JSONRPC_INVALID_REQUEST, "{\"jsonrpc\":\"2.0\",\"id\":\"m\"}"));
        /* Ids MCP does not allow: answered without an id. */
        json_object_put(expect_error(s, NULL, JSONRPC_INVALID_REQUEST, "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}"));
        json_object_put(expect_error(s, NULL, JSONRPC_INVALID_REQUEST, "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}"));
        json_object_put(expect_error(s, NULL, JSONRPC_INVALID_REQUEST, "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}"));
        json_object_put(expect_error(s, NULL, JSONRPC_INVALID_REQUEST, "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}"));
        json_object_put(expect_error(s, NULL, JSONRPC_INVALID_REQUEST,
                                     "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}"));
        ck_assert_uint_eq(mcp_session_n_calls(s), 0);
}
END_TEST

START_TEST(test_method_not_found) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-06-18");

        json_object_put(expect_error(s, "5", JSONRPC_METHOD_NOT_FOUND, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"foo/bar\"}"));
        json_object_put(expect_error(s, "6", JSONRPC_METHOD_NOT_FOUND, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"prompts/list\"}"));
        json_object_put(expect_error(s, "7", JSONRPC_METHOD_NOT_FOUND,
                                     "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"resources/list\",\"params\":{}}"));
        json_object_put(expect_error(s, "\"x\"", JSONRPC_METHOD_NOT_FOUND,
                                     "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"unknown/thing\",\"params\":{" MODERN_META "}}"));
}
END_TEST

START_TEST(test_invalid_params) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        json_object_put(expect_error(s, "1", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":[]}"));
        json_object_put(expect_error(s, "2", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\",\"params\":\"x\"}"));
        json_object_put(expect_error(s, "3", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{}}"));
        json_object_put(expect_error(s, "4", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":5}}"));
        json_object_put(expect_error(s, "5", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\"}"));

        _cleanup_json_ json_object *m = expect_error(s, "6", JSONRPC_INVALID_PARAMS,
                                                     "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\","
                                                     "\"params\":{\"name\":\"nope\"}}");
        ck_assert_str_eq(json_get_string(jget(m, "error", NULL), "message"), "Unknown tool: nope");

        json_object_put(expect_error(s, "7", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\","
                                     "\"params\":{\"name\":\"echo\",\"arguments\":[\"hi\"]}}"));
        json_object_put(expect_error(s, "8", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\","
                                     "\"params\":{\"name\":\"echo\",\"arguments\":\"hi\"}}"));
        ck_assert_uint_eq(mcp_session_n_calls(s), 0);
}
END_TEST

START_TEST(test_request_before_initialize) {
        _cleanup_(mcp_session_freep) McpSession *s = session_new();
        static const char *const methods[] = { "tools/list", "tools/call", "logging/setLevel", "foo/bar", "server/discover" };

        for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
                char line[256];
                snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"method\":\"%s\",\"params\":{}}", i, methods[i]);
                char id[16];
                snprintf(id, sizeof(id), "%zu", i);
                _cleanup_json_ json_object *m = expect_error(s, id, JSONRPC_INVALID_PARAMS, line);
                json_object *data = jget(m, "error", "data", NULL);
                /* The error names the versions we speak. */
                assert_version_list(jget(data, "supported", NULL), true, true);
        }
        ck_assert_ptr_null(mcp_session_version(s));
}
END_TEST

START_TEST(test_internal_error) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        _cleanup_json_ json_object *m = call_tool(s, "\"f\"", "fail", "{}");
        assert_error(m, "\"f\"", JSONRPC_INTERNAL_ERROR);
        ck_assert_ptr_nonnull(strstr(json_get_string(jget(m, "error", NULL), "message"), "fail"));
        ck_assert_uint_eq(mcp_session_n_calls(s), 0);
}
END_TEST

START_TEST(test_oversize) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        ck_assert_int_eq(mcp_session_handle_oversize(s, 1024), 0);
        _cleanup_json_ json_object *m = take();
        json_object *data = assert_error(m, NULL, JSONRPC_INVALID_REQUEST);
        int64_t limit;
        ck_assert(json_get_int64(data, "limit", &limit));
        ck_assert_int_eq(limit, 1024);
}
END_TEST

START_TEST(test_send_failure) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");
        static const char ping[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}";

        /* A failed send ends the session: every later call reports it. */
        send_result = -EPIPE;
        ck_assert_int_eq(mcp_session_handle_line(s, ping, strlen(ping)), -EPIPE);
        send_result = 0;
        ck_assert_int_eq(mcp_session_handle_line(s, ping, strlen(ping)), -EPIPE);
        assert_nothing_sent();
}
END_TEST

/* ---- versions ------------------------------------------------------------ */

START_TEST(test_initialize_echoes_legacy_versions) {
        for (size_t i = 0; mcp_legacy_versions[i]; i++) {
                _cleanup_(mcp_session_freep) McpSession *s = session_new();
                const char *v = mcp_legacy_versions[i];

                feed(s,
                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"%s\","
                     "\"capabilities\":{},\"clientInfo\":{\"name\":\"c\",\"version\":\"0\"}}}",
                     v);
                _cleanup_json_ json_object *m = take();
                json_object *r = assert_result(m, "1");
                ck_assert_str_eq(json_get_string(r, "protocolVersion"), v);
                ck_assert_str_eq(json_get_string(jget(r, "serverInfo", NULL), "name"), "test-server");
                ck_assert_str_eq(json_get_string(jget(r, "serverInfo", NULL), "version"), "1.2.3");
                ck_assert_ptr_nonnull(jget(r, "capabilities", "tools", NULL));
                ck_assert_ptr_nonnull(jget(r, "capabilities", "logging", NULL));
                ck_assert_str_eq(json_get_string(r, "instructions"), "Use the tools.");
                /* Legacy results carry none of the modern decorations. */
                ck_assert(!has(r, "resultType"));
                ck_assert(!has(r, "_meta"));
                ck_assert(!has(r, "ttlMs"));
                /* serverInfo.title arrived with 2025-06-18. */
                ck_assert(has(jget(r, "serverInfo", NULL), "title") == (strcmp(v, "2025-06-18") >= 0));
                ck_assert_str_eq(mcp_session_version(s), v);
        }
}
END_TEST

START_TEST(test_initialize_other_versions) {
        static const char *const requested[] = { "1999-01-01", "2026-07-28", "2030-01-01", "", "2025-11-25x" };

        for (size_t i = 0; i < ELEMENTSOF(requested); i++) {
                _cleanup_(mcp_session_freep) McpSession *s = session_new();

                feed(s,
                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"%s\","
                     "\"capabilities\":{},\"clientInfo\":{\"name\":\"c\",\"version\":\"0\"}}}",
                     requested[i]);
                _cleanup_json_ json_object *m = take();
                ck_assert_str_eq(json_get_string(assert_result(m, "1"), "protocolVersion"), MCP_LATEST_LEGACY_VERSION);
                ck_assert_str_eq(mcp_session_version(s), MCP_LATEST_LEGACY_VERSION);

                /* One handshake per connection: a second is refused and changes nothing. */
                json_object_put(expect_error(s, "9", JSONRPC_INVALID_REQUEST,
                                             "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"initialize\",\"params\":"
                                             "{\"protocolVersion\":\"2025-03-26\",\"capabilities\":{}}}"));
                ck_assert_str_eq(mcp_session_version(s), MCP_LATEST_LEGACY_VERSION);
        }

        ck_assert_str_eq(mcp_negotiate_legacy("2025-03-26"), "2025-03-26");
        ck_assert_str_eq(mcp_negotiate_legacy("2026-07-28"), "2025-11-25");
        ck_assert_str_eq(mcp_negotiate_legacy(NULL), "2025-11-25");
        ck_assert_ptr_null(mcp_legacy_version_find("2026-07-28"));
        ck_assert_ptr_eq(mcp_legacy_version_find("2024-11-05"), mcp_legacy_versions[0]);

        /* No version at all is a bad request. */
        _cleanup_(mcp_session_freep) McpSession *s = session_new();
        json_object_put(expect_error(s, "2", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"capabilities\":{}}}"));
        json_object_put(expect_error(s, "3", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{\"protocolVersion\":20251125}}"));
        json_object_put(expect_error(s, "4", JSONRPC_INVALID_PARAMS, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"initialize\"}"));
        ck_assert_ptr_null(mcp_session_version(s));
}
END_TEST

START_TEST(test_modern_meta_required) {
        _cleanup_(mcp_session_freep) McpSession *s = session_new();

        /* The version without client capabilities. */
        json_object_put(expect_error(s, "1", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                                     "\"" META_V "\":\"2026-07-28\"}}}"));
        json_object_put(expect_error(s, "2", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"server/discover\",\"params\":{\"_meta\":{"
                                     "\"" META_V "\":\"2026-07-28\",\"" META_C "\":true}}}"));
        /* The version not a string. */
        json_object_put(expect_error(s, "3", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                                     "\"" META_V "\":20260728,\"" META_C "\":{}}}}"));
        /* Only capabilities: not a modern request, and no initialize yet. */
        json_object_put(expect_error(s, "4", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                                     "\"" META_C "\":{}}}}"));
}
END_TEST

START_TEST(test_modern_unsupported_version) {
        _cleanup_(mcp_session_freep) McpSession *s = session_new();
        static const char *const versions[] = { "2025-11-25", "2099-01-01", "" };

        for (size_t i = 0; i < ELEMENTSOF(versions); i++) {
                char line[512];
                snprintf(line, sizeof(line),
                         "{\"jsonrpc\":\"2.0\",\"id\":\"v%zu\",\"method\":\"server/discover\",\"params\":{\"_meta\":{"
                         "\"" META_V "\":\"%s\",\"" META_C "\":{}}}}",
                         i, versions[i]);
                char id[16];
                snprintf(id, sizeof(id), "\"v%zu\"", i);
                _cleanup_json_ json_object *m = expect_error(s, id, MCP_ERROR_UNSUPPORTED_VERSION, line);
                json_object *data = jget(m, "error", "data", NULL);
                assert_version_list(jget(data, "supported", NULL), false, true);
                ck_assert_str_eq(json_get_string(data, "requested"), versions[i]);
        }
}
END_TEST

START_TEST(test_discover) {
        _cleanup_(mcp_session_freep) McpSession *s = session_new();

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{" MODERN_META "}}");
        _cleanup_json_ json_object *m = take();
        json_object *r = assert_result(m, "1");
        ck_assert_str_eq(json_get_string(r, "resultType"), "complete");
        assert_version_list(jget(r, "supportedVersions", NULL), false, true);
        int64_t ttl;
        ck_assert(json_get_int64(r, "ttlMs", &ttl));
        ck_assert_int_eq(ttl, 60000);
        ck_assert_str_eq(json_get_string(r, "cacheScope"), "public");
        ck_assert_ptr_nonnull(jget(r, "capabilities", "tools", NULL));
        ck_assert_ptr_null(jget(r, "capabilities", "logging", NULL));   /* deprecated in the modern era */
        ck_assert_str_eq(json_get_string(r, "instructions"), "Use the tools.");
        json_object *info = jget(r, "_meta", META_SERVER_INFO, NULL);
        ck_assert_str_eq(json_get_string(info, "name"), "test-server");
        ck_assert_str_eq(json_get_string(info, "version"), "1.2.3");
        /* Stateless: it negotiates nothing for the connection. */
        ck_assert_ptr_null(mcp_session_version(s));

        /* A client that probed first may still initialize on the same connection. */
        feed(s,
             "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\","
             "\"capabilities\":{},\"clientInfo\":{\"name\":\"c\",\"version\":\"0\"}}}");
        _cleanup_json_ json_object *m2 = take();
        json_object *r2 = assert_result(m2, "2");
        ck_assert_str_eq(json_get_string(r2, "protocolVersion"), "2025-06-18");
        ck_assert(!has(r2, "resultType"));

        /* And both eras keep working side by side. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"server/discover\",\"params\":{" MODERN_META "}}");
        _cleanup_json_ json_object *m3 = take();
        ck_assert_str_eq(json_get_string(assert_result(m3, "3"), "resultType"), "complete");
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}");
        _cleanup_json_ json_object *m4 = take();
        assert_result(m4, "4");

        /* server/discover without modern _meta is not a legacy method. */
        json_object_put(expect_error(s, "5", JSONRPC_INVALID_PARAMS, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"server/discover\"}"));
}
END_TEST

START_TEST(test_modern_removed_methods) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        /* ping and logging/setLevel do not exist in 2026-07-28, even on a legacy connection. */
        json_object_put(expect_error(s, "1", JSONRPC_METHOD_NOT_FOUND,
                                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{" MODERN_META "}}"));
        json_object_put(expect_error(s, "2", JSONRPC_METHOD_NOT_FOUND,
                                     "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"logging/setLevel\",\"params\":{\"level\":"
                                     "\"info\"," MODERN_META "}}"));
}
END_TEST

START_TEST(test_ping) {
        _cleanup_(mcp_session_freep) McpSession *s = session_new();

        /* Before initialize too. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":\"123\",\"method\":\"ping\"}");
        _cleanup_json_ json_object *m = take();
        json_object *r = assert_result(m, "\"123\"");
        ck_assert_uint_eq(json_object_object_length(r), 0);

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"params\":{}}");
        _cleanup_json_ json_object *m2 = take();
        ck_assert_uint_eq(json_object_object_length(assert_result(m2, "9")), 0);
        ck_assert_ptr_null(mcp_session_version(s));
}
END_TEST

START_TEST(test_modern_requests_on_fresh_connection) {
        _cleanup_(mcp_session_freep) McpSession *s = session_new();

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}");
        _cleanup_json_ json_object *m = take();
        json_object *r = assert_result(m, "1");
        ck_assert_uint_eq(json_object_array_length(jget(r, "tools", NULL)), 5);

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
                "\"arguments\":{\"text\":\"modern\"}," MODERN_META "}}");
        _cleanup_json_ json_object *m2 = take();
        json_object *r2 = assert_result(m2, "2");
        ck_assert_str_eq(first_text(r2), "modern");
        ck_assert(!is_error_result(r2));
        ck_assert_ptr_null(mcp_session_version(s));

        /* A legacy request on the same connection still needs initialize. */
        json_object_put(expect_error(s, "3", JSONRPC_INVALID_PARAMS, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}"));
}
END_TEST

/* ---- notifications and responses ---------------------------------------- */

START_TEST(test_notifications_never_answered) {
        static const char *const lines[] = {
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/unknown\"}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"tools/list\"}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\"}}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\"}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":[1]}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{}}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":99}}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":null}}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":{}}}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":\"x\"}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{" MODERN_META "}}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"_meta\":{\"" META_V "\":\"1999-01-01\"}}}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\",\"params\":null}",
        };

        /* Before and after initialize. */
        for (int round = 0; round < 2; round++) {
                _cleanup_(mcp_session_freep) McpSession *s = round == 0 ? session_new() : session_init("2025-11-25");
                const char *version = mcp_session_version(s);

                for (size_t i = 0; i < ELEMENTSOF(lines); i++) {
                        ck_assert_int_eq(mcp_session_handle_line(s, lines[i], strlen(lines[i])), 0);
                        ck_assert_msg(n_sent() == 0, "answered %s: %s", lines[i], json_object_to_json_string(sent));
                }
                /* A notification "initialize" negotiates nothing. */
                ck_assert_ptr_eq(mcp_session_version(s), version);
        }
}
END_TEST

START_TEST(test_responses_dropped) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"error\":{\"code\":-1,\"message\":\"no\"}}");
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"x\"}}");
        assert_nothing_sent();
}
END_TEST

/* ---- batches ------------------------------------------------------------- */

START_TEST(test_batch) {
        server.max_calls = 8;
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-03-26");

        feed(s, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},"
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/unknown\"},"
                "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"b\"}}},"
                "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"nope\"},"
                "42,"
                "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{}},"
                "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\"}]");
        _cleanup_json_ json_object *m = take();
        ck_assert_msg(json_object_is_type(m, json_type_array), "not an array: %s", json_object_to_json_string(m));
        ck_assert_uint_eq(json_object_array_length(m), 5);
        assert_result(json_object_array_get_idx(m, 0), "1");
        ck_assert_str_eq(first_text(assert_result(json_object_array_get_idx(m, 1), "2")), "b");
        assert_error(json_object_array_get_idx(m, 2), "3", JSONRPC_METHOD_NOT_FOUND);
        assert_error(json_object_array_get_idx(m, 3), NULL, JSONRPC_INVALID_REQUEST);
        ck_assert_uint_eq(json_object_array_length(jget(assert_result(json_object_array_get_idx(m, 4), "5"), "tools", NULL)), 5);
}
END_TEST

START_TEST(test_batch_empty) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-03-26");

        /* One error object, not an array. */
        json_object_put(expect_error(s, NULL, JSONRPC_INVALID_REQUEST, "[]"));
        json_object_put(expect_error(s, NULL, JSONRPC_INVALID_REQUEST, " [ ] "));
}
END_TEST

START_TEST(test_batch_too_long) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-03-26");
        char batch[1024] = "[";

        /* max_calls is 4: a batch of five is refused whole, with one error. */
        for (int i = 0; i < 5; i++)
                snprintf(batch + strlen(batch), sizeof(batch) - strlen(batch),
                         "%s{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"ping\"}", i ? "," : "", i);
        strcat(batch, "]");
        json_object_put(expect_error(s, NULL, JSONRPC_INVALID_REQUEST, batch));
}
END_TEST

START_TEST(test_element_budget) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");
        _cleanup_free_ char *line = NULL;
        size_t n = 1000, len;
        FILE *f;

        server.max_elements = 500;
        f = open_memstream(&line, &len);
        fputs("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
              "\"arguments\":{\"text\":\"x\",\"pad\":[1", f);
        for (size_t i = 1; i < n; i++)
                fputs(",1", f);
        fputs("]}}}", f);
        fclose(f);
        /* Refused before parsing: no id is known. */
        _cleanup_json_ json_object *e = expect_error(s, NULL, JSONRPC_INVALID_REQUEST, line);
        ck_assert_ptr_nonnull(strstr(json_object_to_json_string(e), "max-message-elements"));
        /* Commas, brackets and colons inside strings are no values. */
        _cleanup_free_ char *text = malloc(4000);
        memset(text, ',', 3999);
        text[3999] = 0;
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":"
                "{\"name\":\"echo\",\"arguments\":{\"text\":\"%s\\\"[{:\"}}}",
             text);
        _cleanup_json_ json_object *m = take();
        assert_result(m, "8");
        server.max_elements = 0;
}
END_TEST

START_TEST(test_batch_only_notifications) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-03-26");

        feed(s, "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/a\"},{\"jsonrpc\":\"2.0\",\"method\":\"notifications/b\"}]");
        feed(s, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}]");
        assert_nothing_sent();
}
END_TEST

START_TEST(test_batch_initialize_refused) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-03-26");

        feed(s, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\","
                "\"capabilities\":{},\"clientInfo\":{\"name\":\"c\",\"version\":\"0\"}}},"
                "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}]");
        _cleanup_json_ json_object *m = take();
        ck_assert(json_object_is_type(m, json_type_array));
        ck_assert_uint_eq(json_object_array_length(m), 2);
        assert_error(json_object_array_get_idx(m, 0), "1", JSONRPC_INVALID_REQUEST);
        assert_result(json_object_array_get_idx(m, 1), "2");
        ck_assert_str_eq(mcp_session_version(s), "2025-03-26");
}
END_TEST

START_TEST(test_batch_other_versions) {
        static const char batch[] = "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]";

        /* Before initialize. */
        _cleanup_(mcp_session_freep) McpSession *s0 = session_new();
        json_object_put(expect_error(s0, NULL, JSONRPC_INVALID_REQUEST, batch));

        /* Every version but 2025-03-26. */
        static const char *const versions[] = { "2024-11-05", "2025-06-18", "2025-11-25" };
        for (size_t i = 0; i < ELEMENTSOF(versions); i++) {
                _cleanup_(mcp_session_freep) McpSession *s = session_init(versions[i]);
                _cleanup_json_ json_object *m = expect_error(s, NULL, JSONRPC_INVALID_REQUEST, batch);
                ck_assert(json_object_is_type(m, json_type_object));
        }

        /* A batch of modern requests is no better. */
        _cleanup_(mcp_session_freep) McpSession *s1 = session_new();
        json_object_put(expect_error(s1, NULL, JSONRPC_INVALID_REQUEST,
                                     "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}]"));
}
END_TEST

START_TEST(test_batch_async) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-03-26");

        feed(s, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}},"
                "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"},"
                "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}]");
        /* Nothing until every call of the batch is done. */
        assert_nothing_sent();
        ck_assert_uint_eq(n_slow, 2);
        ck_assert_uint_eq(mcp_session_n_calls(s), 2);

        /* Meanwhile single messages are answered. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}");
        _cleanup_json_ json_object *p = take();
        assert_result(p, "4");

        slow_finish(1, "second");
        assert_nothing_sent();
        slow_finish(0, "first");

        _cleanup_json_ json_object *m = take();
        ck_assert(json_object_is_type(m, json_type_array));
        ck_assert_uint_eq(json_object_array_length(m), 3);
        /* Replies in the order they were ready. */
        assert_result(json_object_array_get_idx(m, 0), "2");
        ck_assert_str_eq(first_text(assert_result(json_object_array_get_idx(m, 1), "3")), "second");
        ck_assert_str_eq(first_text(assert_result(json_object_array_get_idx(m, 2), "1")), "first");
        ck_assert_uint_eq(mcp_session_n_calls(s), 0);
}
END_TEST

START_TEST(test_batch_async_cancelled) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-03-26");

        feed(s, "[{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}},"
                "{\"jsonrpc\":\"2.0\",\"id\":\"b\",\"method\":\"ping\"}]");
        assert_nothing_sent();

        /* The cancelled call gets no reply; the batch closes without it. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"a\"}}");
        ck_assert_uint_eq(n_cancelled, 1);
        _cleanup_json_ json_object *m = take();
        ck_assert(json_object_is_type(m, json_type_array));
        ck_assert_uint_eq(json_object_array_length(m), 1);
        assert_result(json_object_array_get_idx(m, 0), "\"b\"");

        /* The work finishing later sends nothing. */
        slow_finish(0, "late");
        assert_nothing_sent();
}
END_TEST

START_TEST(test_batch_free_pending) {
        McpSession *s = session_init("2025-03-26");

        /* The session goes away with a batch still waiting. */
        feed(s, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}},"
                "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}]");
        ck_assert_ptr_null(mcp_session_free(s));
        ck_assert_uint_eq(n_cancelled, 1);
        assert_nothing_sent();
        slow_finish(0, "late");
        assert_nothing_sent();
}
END_TEST

/* ---- result shapes ------------------------------------------------------- */

static json_object *list_tools(McpSession *s, bool modern) {
        if (modern)
                feed(s, "{\"jsonrpc\":\"2.0\",\"id\":\"l\",\"method\":\"tools/list\",\"params\":{" MODERN_META "}}");
        else
                feed(s, "{\"jsonrpc\":\"2.0\",\"id\":\"l\",\"method\":\"tools/list\"}");
        return take();
}

static json_object *find_tool(json_object *result, const char *name) {
        json_object *tools = jget(result, "tools", NULL);
        for (size_t i = 0; i < json_object_array_length(tools); i++) {
                json_object *t = json_object_array_get_idx(tools, i);
                if (streq(json_get_string(t, "name"), name))
                        return t;
        }
        ck_abort_msg("no tool %s", name);
        return NULL;
}

START_TEST(test_shapes_2024_11_05) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2024-11-05");

        _cleanup_json_ json_object *m = list_tools(s, false);
        json_object *r = assert_result(m, "\"l\"");
        json_object *echo = find_tool(r, "echo"), *st = find_tool(r, "structured");
        ck_assert_str_eq(json_get_string(echo, "description"), "Says back what it is given.");
        ck_assert_str_eq(json_get_string(jget(echo, "inputSchema", NULL), "type"), "object");
        ck_assert(!has(echo, "title"));
        ck_assert(!has(echo, "annotations"));
        ck_assert(!has(st, "outputSchema"));
        ck_assert(!has(r, "resultType"));
        ck_assert(!has(r, "ttlMs"));
        ck_assert(!has(r, "_meta"));

        _cleanup_json_ json_object *c = call_tool(s, "1", "structured", "{}");
        json_object *cr = assert_result(c, "1");
        ck_assert(!has(cr, "structuredContent"));
        ck_assert_str_eq(first_text(cr), "{\"value\":42}");
        ck_assert(!is_error_result(cr));
        ck_assert(!has(cr, "resultType"));
}
END_TEST

START_TEST(test_shapes_2025_03_26) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-03-26");

        _cleanup_json_ json_object *m = list_tools(s, false);
        json_object *r = assert_result(m, "\"l\"");
        json_object *echo = find_tool(r, "echo"), *st = find_tool(r, "structured"), *fail = find_tool(r, "fail");
        ck_assert(!has(echo, "title"));
        ck_assert(!has(st, "outputSchema"));
        json_object *a = jget(echo, "annotations", NULL);
        ck_assert_ptr_nonnull(a);
        /* Only what differs from the defaults, and the title, which 2025-03-26 has nowhere else. */
        ck_assert_str_eq(json_get_string(a, "title"), "Echo");
        ck_assert(json_object_get_boolean(jget(a, "readOnlyHint", NULL)));
        ck_assert(!has(a, "idempotentHint"));   /* meaningful only when not read-only */
        ck_assert(!has(a, "destructiveHint"));
        ck_assert(!json_object_get_boolean(jget(a, "openWorldHint", NULL)));
        ck_assert(!has(jget(fail, "annotations", NULL), "destructiveHint"));   /* true, the default */
        ck_assert(!has(jget(find_tool(r, "slow"), "annotations", NULL), "openWorldHint"));
        ck_assert(!json_object_get_boolean(jget(find_tool(r, "slow"), "annotations", "destructiveHint", NULL)));

        _cleanup_json_ json_object *c = call_tool(s, "1", "structured", "{}");
        ck_assert(!has(assert_result(c, "1"), "structuredContent"));
}
END_TEST

START_TEST(test_shapes_2025_06_18) {
        static const char *const versions[] = { "2025-06-18", "2025-11-25" };

        for (size_t i = 0; i < ELEMENTSOF(versions); i++) {
                _cleanup_(mcp_session_freep) McpSession *s = session_init(versions[i]);

                _cleanup_json_ json_object *m = list_tools(s, false);
                json_object *r = assert_result(m, "\"l\"");
                json_object *echo = find_tool(r, "echo"), *st = find_tool(r, "structured");
                ck_assert_str_eq(json_get_string(echo, "title"), "Echo");
                ck_assert(!has(find_tool(r, "slow"), "title"));
                ck_assert_ptr_nonnull(jget(echo, "annotations", NULL));
                ck_assert(!has(jget(echo, "annotations", NULL), "title"));   /* the tool's own title says it */
                ck_assert(!has(echo, "outputSchema"));
                ck_assert_str_eq(json_get_string(jget(st, "outputSchema", NULL), "type"), "object");
                ck_assert(!has(r, "resultType"));
                ck_assert(!has(r, "ttlMs"));
                ck_assert(!has(r, "cacheScope"));
                ck_assert(!has(r, "_meta"));

                _cleanup_json_ json_object *c = call_tool(s, "1", "structured", "{}");
                json_object *cr = assert_result(c, "1");
                int64_t v;
                ck_assert(json_get_int64(jget(cr, "structuredContent", NULL), "value", &v));
                ck_assert_int_eq(v, 42);
                ck_assert_str_eq(first_text(cr), "{\"value\":42}");
                ck_assert(!has(cr, "resultType"));
                ck_assert(!has(cr, "_meta"));

                /* An image: clients that show structuredContent when there is one would drop it, so there is none. */
                _cleanup_json_ json_object *ci = call_tool(s, "2", "structured", "{\"image\":true}");
                json_object *ir = assert_result(ci, "2");
                ck_assert(!has(ir, "structuredContent"));
                ck_assert_int_eq(json_object_array_length(jget(ir, "content", NULL)), 2);
                ck_assert_str_eq(json_get_string(json_object_array_get_idx(jget(ir, "content", NULL), 1), "type"), "image");
        }
}
END_TEST

/* A reload that changes the tool list: legacy sessions that finished the handshake hear of it, no one else. */
START_TEST(test_tools_list_changed) {
        _cleanup_(mcp_session_freep) McpSession *fresh = session_new(), *s = NULL;

        feed(fresh,
             "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\","
             "\"capabilities\":{},\"clientInfo\":{\"name\":\"test\",\"version\":\"1\"}}}");
        _cleanup_json_ json_object *m = take();
        ck_assert(json_object_get_boolean(jget(assert_result(m, "0"), "capabilities", "tools", "listChanged", NULL)));
        mcp_session_tools_changed(fresh);   /* no notifications/initialized yet */
        assert_nothing_sent();

        s = session_init("2025-11-25");
        mcp_session_tools_changed(s);
        _cleanup_json_ json_object *n = take();
        ck_assert_str_eq(json_get_string(n, "method"), "notifications/tools/list_changed");
        ck_assert(!has(n, "id"));
        assert_nothing_sent();
}
END_TEST

START_TEST(test_shapes_modern) {
        _cleanup_(mcp_session_freep) McpSession *s = session_new();

        _cleanup_json_ json_object *m = list_tools(s, true);
        json_object *r = assert_result(m, "\"l\"");
        ck_assert_str_eq(json_get_string(r, "resultType"), "complete");
        ck_assert_str_eq(json_get_string(r, "cacheScope"), "public");
        int64_t ttl;
        ck_assert(json_get_int64(r, "ttlMs", &ttl));
        ck_assert_int_eq(ttl, 60000);
        ck_assert_str_eq(json_get_string(jget(r, "_meta", META_SERVER_INFO, NULL), "name"), "test-server");
        ck_assert_str_eq(json_get_string(find_tool(r, "echo"), "title"), "Echo");
        ck_assert_ptr_nonnull(jget(find_tool(r, "structured"), "outputSchema", NULL));
        ck_assert_ptr_nonnull(jget(find_tool(r, "echo"), "annotations", NULL));

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"structured\","
                "\"arguments\":{}," MODERN_META "}}");
        _cleanup_json_ json_object *c = take();
        json_object *cr = assert_result(c, "2");
        ck_assert_str_eq(json_get_string(cr, "resultType"), "complete");
        ck_assert_str_eq(json_get_string(jget(cr, "_meta", META_SERVER_INFO, NULL), "version"), "1.2.3");
        ck_assert_ptr_nonnull(jget(cr, "structuredContent", NULL));
        /* Tool results are not cacheable. */
        ck_assert(!has(cr, "ttlMs"));
        ck_assert(!has(cr, "cacheScope"));

        /* Errors are errors in both eras: no resultType. */
        _cleanup_json_ json_object *e = expect_error(s, "3", JSONRPC_INVALID_PARAMS,
                                                     "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\","
                                                     "\"params\":{\"name\":\"nope\"," MODERN_META "}}");
        ck_assert(!has(e, "resultType"));
        ck_assert(!has(jget(e, "error", NULL), "resultType"));
}
END_TEST

/* ---- tools/list pagination ---------------------------------------------- */

static json_object *list_page(McpSession *s, const char *cursor_json, bool modern) {
        if (cursor_json)
                feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"cursor\":%s%s}}", cursor_json,
                     modern ? "," MODERN_META : "");
        else
                feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{%s}}", modern ? MODERN_META : "");
        return take();
}

static void walk_pages(McpSession *s, bool modern) {
        char cursor[64] = "";
        size_t seen = 0, pages = 0;
        bool first = true;

        for (;;) {
                char cj[80];
                snprintf(cj, sizeof(cj), "\"%s\"", cursor);
                _cleanup_json_ json_object *m = list_page(s, first ? NULL : cj, modern);
                json_object *r = assert_result(m, "1");
                json_object *tools = jget(r, "tools", NULL);

                pages++;
                ck_assert_uint_le(json_object_array_length(tools), 2);
                for (size_t i = 0; i < json_object_array_length(tools); i++) {
                        ck_assert_uint_lt(seen, ELEMENTSOF(tool_names));
                        ck_assert_str_eq(json_get_string(json_object_array_get_idx(tools, i), "name"), tool_names[seen++]);
                }
                if (modern) {
                        /* Every page says how to cache it, the same way. */
                        ck_assert_str_eq(json_get_string(r, "cacheScope"), "public");
                        ck_assert(has(r, "ttlMs"));
                }
                const char *next = json_get_string(r, "nextCursor");
                if (!next)
                        break;
                ck_assert_uint_lt(strlen(next), sizeof(cursor));
                strcpy(cursor, next);
                first = false;
        }
        ck_assert_uint_eq(seen, 5);
        ck_assert_uint_eq(pages, 3);
}

START_TEST(test_pagination) {
        server.page_size = 2;
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        walk_pages(s, false);
        walk_pages(s, true);

        /* The empty string is a valid cursor: the start. */
        _cleanup_json_ json_object *m = list_page(s, "\"\"", false);
        json_object *r = assert_result(m, "1");
        ck_assert_uint_eq(json_object_array_length(jget(r, "tools", NULL)), 2);
        ck_assert_ptr_nonnull(json_get_string(r, "nextCursor"));

        /* A page that ends exactly at the last tool has no nextCursor. */
        server.page_size = 5;
        _cleanup_json_ json_object *all = list_page(s, NULL, false);
        ck_assert(!has(assert_result(all, "1"), "nextCursor"));
}
END_TEST

START_TEST(test_pagination_invalid_cursor) {
        server.page_size = 2;
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");
        static const char *const cursors[] = {
                "\"abc\"", "\"-1\"", "\"+2\"", "\" 2\"", "\"2 \"", "\"2x\"", "\"99\"", "\"18446744073709551616\"",
                "2", "{}", "true",
        };

        for (size_t i = 0; i < ELEMENTSOF(cursors); i++) {
                char line[256];
                snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"cursor\":%s}}",
                         cursors[i]);
                ck_assert_int_eq(mcp_session_handle_line(s, line, strlen(line)), 0);
                _cleanup_json_ json_object *m = take();
                ck_assert_msg(has(m, "error"), "cursor %s accepted: %s", cursors[i], json_object_to_json_string(m));
                assert_error(m, "1", JSONRPC_INVALID_PARAMS);
        }

        /* Modern too. */
        json_object_put(expect_error(s, "1", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"cursor\":\"zz\","
                                     MODERN_META "}}"));
}
END_TEST

/* ---- tools/call ---------------------------------------------------------- */

START_TEST(test_call_sync) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        _cleanup_json_ json_object *m = call_tool(s, "\"c1\"", "echo", "{\"text\":\"hello \\\"world\\\"\",\"times\":2}");
        json_object *r = assert_result(m, "\"c1\"");
        ck_assert_str_eq(first_text(r), "hello \"world\"");
        ck_assert(!is_error_result(r));
        ck_assert_uint_eq(mcp_session_n_calls(s), 0);

        /* The id comes back as it was sent. */
        _cleanup_json_ json_object *m2 = call_tool(s, "-17", "echo", "{\"text\":\"x\"}");
        assert_result(m2, "-17");
        _cleanup_json_ json_object *m3 = call_tool(s, "9007199254740993", "echo", "{\"text\":\"x\"}");
        assert_result(m3, "9007199254740993");
}
END_TEST

START_TEST(test_call_argument_validation) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");
        static const struct {
                const char *args;
                const char *says;
        } cases[] = {
                { "{\"text\":5}", "text must be of type string" },
                { "{\"text\":\"x\",\"times\":\"2\"}", "times must be of type integer" },
                { "{\"text\":\"x\",\"times\":0}", "times must be at least 1" },
                { "{}", "\"text\" is required" },
                { NULL, "\"text\" is required" },
                { "{\"text\":\"x\",\"colour\":\"red\"}", "unknown argument \"colour\"" },
        };

        /* What the model can fix comes back as a result with isError, not a protocol error. */
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_json_ json_object *m = call_tool(s, "1", "echo", cases[i].args);
                json_object *r = assert_result(m, "1");
                ck_assert(is_error_result(r));
                const char *text = first_text(r);
                ck_assert_msg(strstr(text, cases[i].says), "\"%s\" lacks \"%s\"", text, cases[i].says);
                ck_assert_msg(strstr(text, "echo"), "\"%s\" does not name the tool", text);
        }
        ck_assert_uint_eq(mcp_session_n_calls(s), 0);

        /* Tools without arguments get an empty object. */
        _cleanup_json_ json_object *m = call_tool(s, "2", "structured", NULL);
        ck_assert(!is_error_result(assert_result(m, "2")));
        _cleanup_json_ json_object *m2 = call_tool(s, "3", "slow", "{\"x\":1}");
        ck_assert(is_error_result(assert_result(m2, "3")));
        ck_assert_uint_eq(n_slow, 0);
}
END_TEST

START_TEST(test_call_async) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        assert_nothing_sent();
        ck_assert_uint_eq(mcp_session_n_calls(s), 1);
        ck_assert(tool_call_is_live(slow_calls[0]));

        slow_finish(0, "done");
        _cleanup_json_ json_object *m = take();
        ck_assert_str_eq(first_text(assert_result(m, "1")), "done");
        ck_assert_uint_eq(mcp_session_n_calls(s), 0);
        ck_assert(!tool_call_is_live(slow_calls[0]));

        /* Finishing twice sends nothing more. */
        slow_finish(0, "again");
        tool_call_fail(slow_calls[0], JSONRPC_INTERNAL_ERROR, "again");
        assert_nothing_sent();
        ck_assert_uint_eq(n_cancelled, 0);
}
END_TEST

START_TEST(test_call_fail_later) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        tool_call_fail(slow_calls[0], JSONRPC_INTERNAL_ERROR, "Internal error: the sandbox could not start");
        _cleanup_json_ json_object *m = take();
        assert_error(m, "1", JSONRPC_INTERNAL_ERROR);
        ck_assert_uint_eq(mcp_session_n_calls(s), 0);
}
END_TEST

START_TEST(test_cancel) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        ck_assert_uint_eq(mcp_session_n_calls(s), 2);

        /* Wrong type of id: a different request. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"7\"}}");
        ck_assert_uint_eq(n_cancelled, 0);

        feed(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"abc\","
                "\"reason\":\"user pressed stop\"}}");
        ck_assert_uint_eq(n_cancelled, 1);
        ck_assert_uint_eq(mcp_session_n_calls(s), 1);
        ck_assert(!tool_call_is_live(slow_calls[0]));
        assert_nothing_sent();

        /* The work ends later: no reply for a cancelled request. */
        slow_finish(0, "too late");
        assert_nothing_sent();

        /* Cancelling again, or something finished, is ignored. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"abc\"}}");
        ck_assert_uint_eq(n_cancelled, 1);

        /* Modern clients cancel the same way. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":7," MODERN_META "}}");
        ck_assert_uint_eq(n_cancelled, 2);
        ck_assert_uint_eq(mcp_session_n_calls(s), 0);
        assert_nothing_sent();

        /* The id is free again. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        ck_assert_uint_eq(mcp_session_n_calls(s), 1);
        assert_nothing_sent();
}
END_TEST

START_TEST(test_cancel_all) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        mcp_session_cancel_all(s);
        ck_assert_uint_eq(n_cancelled, 2);
        ck_assert_uint_eq(mcp_session_n_calls(s), 0);
        assert_nothing_sent();
}
END_TEST

START_TEST(test_duplicate_id) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        assert_nothing_sent();

        json_object_put(expect_error(s, "7", JSONRPC_INVALID_REQUEST,
                                     "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
                                     "\"arguments\":{\"text\":\"x\"}}}"));
        ck_assert_uint_eq(mcp_session_n_calls(s), 1);
        ck_assert_uint_eq(n_slow, 1);

        /* The string "7" is another id. */
        _cleanup_json_ json_object *m = call_tool(s, "\"7\"", "echo", "{\"text\":\"x\"}");
        assert_result(m, "\"7\"");

        /* The first call still answers, once. */
        slow_finish(0, "first");
        _cleanup_json_ json_object *m2 = take();
        ck_assert_str_eq(first_text(assert_result(m2, "7")), "first");

        /* Then the id may be used again. */
        _cleanup_json_ json_object *m3 = call_tool(s, "7", "echo", "{\"text\":\"y\"}");
        ck_assert_str_eq(first_text(assert_result(m3, "7")), "y");
}
END_TEST

START_TEST(test_max_calls) {
        server.max_calls = 2;
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        assert_nothing_sent();
        ck_assert_uint_eq(mcp_session_n_calls(s), 2);

        /* One too many: refused with a result the model can read, and the tool is not run. */
        _cleanup_json_ json_object *m = call_tool(s, "3", "slow", NULL);
        json_object *r = assert_result(m, "3");
        ck_assert(is_error_result(r));
        ck_assert_ptr_nonnull(strstr(first_text(r), "limit is 2"));
        ck_assert_uint_eq(n_slow, 2);
        ck_assert_uint_eq(mcp_session_n_calls(s), 2);

        /* Once one finishes there is room again. */
        slow_finish(0, "one");
        _cleanup_json_ json_object *m1 = take();
        assert_result(m1, "1");
        _cleanup_json_ json_object *m4 = call_tool(s, "4", "echo", "{\"text\":\"room\"}");
        ck_assert(!is_error_result(assert_result(m4, "4")));
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        assert_nothing_sent();
        ck_assert_uint_eq(n_slow, 3);
}
END_TEST

/* A call's arguments are charged to its user while it runs (CHARGE_CALL_BYTES): over the user's limit a call is
 * refused with a result that names it, another user is not, and what a call held is given back when it ends. */
START_TEST(test_call_bytes_charged) {
        _cleanup_(charge_registry_freep) ChargeRegistry *reg = NULL;
        _cleanup_free_ char *big = malloc(3001);

        ck_assert_ptr_nonnull(big);
        memset(big, 'a', 3000);
        big[3000] = 0;
        ck_assert_int_eq(charge_registry_new(&reg), 0);
        charge_registry_set_limit(reg, CHARGE_CALL_BYTES, 4096, 0);
        server.charges = reg;
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\","
                "\"arguments\":{\"text\":\"%s\"}}}", big);
        assert_nothing_sent();
        ck_assert_uint_ge(charge_registry_used(reg, 1000, CHARGE_CALL_BYTES), 3000);

        /* A second one of that size would go over: refused, and the tool is not run. */
        _cleanup_free_ char *args = NULL;
        ck_assert_int_ge(asprintf(&args, "{\"text\":\"%s\"}", big), 0);
        _cleanup_json_ json_object *m2 = call_tool(s, "2", "slow", args);
        json_object *r = assert_result(m2, "2");
        ck_assert(is_error_result(r));
        ck_assert_ptr_nonnull(strstr(first_text(r), "max-call-buffer-per-user"));
        ck_assert_ptr_nonnull(strstr(first_text(r), "Wait for one to finish"));
        ck_assert_uint_eq(n_slow, 1);

        /* One larger than the limit by itself: waiting would not help, and it says so. */
        _cleanup_free_ char *huge = NULL;
        ck_assert_int_ge(asprintf(&huge, "{\"text\":\"%s%s\"}", big, big), 0);
        _cleanup_json_ json_object *m5 = call_tool(s, "5", "slow", huge);
        r = assert_result(m5, "5");
        ck_assert(is_error_result(r));
        ck_assert_ptr_nonnull(strstr(first_text(r), "Send less"));
        ck_assert_ptr_null(strstr(first_text(r), "Wait for one"));
        ck_assert_uint_eq(n_slow, 1);

        /* A small one fits; and another user has a budget of their own. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\","
                "\"arguments\":{\"text\":\"x\"}}}");
        assert_nothing_sent();
        ck_assert_uint_eq(n_slow, 2);
        session_uid = 1001;
        McpSession *other = session_init("2025-11-25");
        session_uid = 1000;
        feed(other, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\","
                    "\"arguments\":{\"text\":\"%s\"}}}", big);
        assert_nothing_sent();
        ck_assert_uint_eq(n_slow, 3);

        /* The first one ends: its bytes are given back, and a large call fits again. */
        slow_finish(0, "done");
        _cleanup_json_ json_object *m1 = take();
        assert_result(m1, "1");
        ck_assert_uint_lt(charge_registry_used(reg, 1000, CHARGE_CALL_BYTES), 1000);
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\","
                "\"arguments\":{\"text\":\"%s\"}}}", big);
        assert_nothing_sent();
        ck_assert_uint_eq(n_slow, 4);

        /* Sessions that go cancel their calls, and the calls hold nothing after. */
        mcp_session_free(other);
        ck_assert_uint_eq(charge_registry_used(reg, 1001, CHARGE_CALL_BYTES), 0);
        s = mcp_session_free(s);
        ck_assert_uint_eq(charge_registry_used(reg, 1000, CHARGE_CALL_BYTES), 0);
        server.charges = NULL;
}
END_TEST

START_TEST(test_set_level) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");
        static const char *const levels[] = { "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency" };

        for (size_t i = 0; i < ELEMENTSOF(levels); i++) {
                feed(s, "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"%s\"}}", i,
                     levels[i]);
                _cleanup_json_ json_object *m = take();
                char id[16];
                snprintf(id, sizeof(id), "%zu", i);
                ck_assert_uint_eq(json_object_object_length(assert_result(m, id)), 0);
        }

        json_object_put(expect_error(s, "10", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"verbose\"}}"));
        json_object_put(expect_error(s, "11", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"INFO\"}}"));
        json_object_put(expect_error(s, "12", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"logging/setLevel\",\"params\":{\"level\":3}}"));
        json_object_put(expect_error(s, "13", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"logging/setLevel\",\"params\":{}}"));
        json_object_put(expect_error(s, "14", JSONRPC_INVALID_PARAMS,
                                     "{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"logging/setLevel\"}"));
}
END_TEST

START_TEST(test_free_cancels_calls) {
        McpSession *s = session_init("2025-11-25");

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        slow_finish(1, "done before");
        _cleanup_json_ json_object *m = take();
        assert_result(m, "2");

        ck_assert_ptr_null(mcp_session_free(s));
        /* The two still running were cancelled; the finished one was not. */
        ck_assert_uint_eq(n_cancelled, 2);
        assert_nothing_sent();
        for (size_t i = 0; i < n_slow; i++) {
                ck_assert(!tool_call_is_live(slow_calls[i]));
                ck_assert_ptr_null(slow_calls[i]->session);
        }

        /* The work may still finish or report progress: both are no-ops now. */
        tool_call_progress(slow_calls[0], 1, 2, "x");
        slow_finish(0, "late");
        tool_call_fail(slow_calls[2], JSONRPC_INTERNAL_ERROR, "late");
        assert_nothing_sent();

        ck_assert_ptr_null(mcp_session_free(NULL));
}
END_TEST

/* ---- progress ------------------------------------------------------------ */

static void assert_progress(json_object *m, const char *token, double progress, double total, const char *message) {
        ck_assert_str_eq(json_get_string(m, "jsonrpc"), "2.0");
        ck_assert_str_eq(json_get_string(m, "method"), "notifications/progress");
        ck_assert(!has(m, "id"));
        json_object *p = jget(m, "params", NULL);
        ck_assert_str_eq(json_object_to_json_string_ext(jget(p, "progressToken", NULL), JSON_C_TO_STRING_PLAIN), token);
        ck_assert_double_eq(json_object_get_double(jget(p, "progress", NULL)), progress);
        if (total > 0)
                ck_assert_double_eq(json_object_get_double(jget(p, "total", NULL)), total);
        else
                ck_assert(!has(p, "total"));
        if (message)
                ck_assert_str_eq(json_get_string(p, "message"), message);
        else
                ck_assert(!has(p, "message"));
}

START_TEST(test_progress) {
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\","
                "\"_meta\":{\"progressToken\":\"tok\"}}}");
        ToolCall *c = slow_calls[0];

        /* Starting at zero is progress too. */
        tool_call_progress(c, 0, 100, "resolving");
        _cleanup_json_ json_object *p0 = take();
        assert_progress(p0, "\"tok\"", 0, 100, "resolving");

        tool_call_progress(c, 50, 100, "installing");
        _cleanup_json_ json_object *p1 = take();
        assert_progress(p1, "\"tok\"", 50, 100, "installing");

        /* Only ever increasing. */
        tool_call_progress(c, 50, 100, "same");
        tool_call_progress(c, 10, 100, "back");
        assert_nothing_sent();

        tool_call_progress(c, 50.5, 0, NULL);
        _cleanup_json_ json_object *p2 = take();
        assert_progress(p2, "\"tok\"", 50.5, 0, NULL);

        /* Nothing after the final response. */
        slow_finish(0, "done");
        _cleanup_json_ json_object *r = take();
        assert_result(r, "1");
        tool_call_progress(c, 100, 100, "after");
        assert_nothing_sent();
}
END_TEST

START_TEST(test_progress_needs_token) {
        server.max_calls = 8;
        _cleanup_(mcp_session_freep) McpSession *s = session_init("2025-11-25");

        /* No token, or one that is not a string or integer: no progress at all. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}");
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\",\"_meta\":{}}}");
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\","
                "\"_meta\":{\"progressToken\":null}}}");
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\","
                "\"_meta\":{\"progressToken\":1.5}}}");
        for (size_t i = 0; i < n_slow; i++) {
                tool_call_progress(slow_calls[i], 0, 10, "x");
                tool_call_progress(slow_calls[i], 5, 10, "x");
        }
        assert_nothing_sent();

        /* An integer token comes back as an integer. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\","
                "\"_meta\":{\"progressToken\":77}}}");
        tool_call_progress(slow_calls[4], 1, 0, NULL);
        _cleanup_json_ json_object *p = take();
        assert_progress(p, "77", 1, 0, NULL);

        /* After a cancel: nothing. */
        feed(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":5}}");
        tool_call_progress(slow_calls[4], 2, 0, NULL);
        assert_nothing_sent();
}
END_TEST

START_TEST(test_progress_versions) {
        /* progress "message" arrived with 2025-03-26. */
        _cleanup_(mcp_session_freep) McpSession *old = session_init("2024-11-05");
        feed(old, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\","
                  "\"_meta\":{\"progressToken\":\"t\"}}}");
        tool_call_progress(slow_calls[0], 1, 2, "dropped");
        _cleanup_json_ json_object *p = take();
        assert_progress(p, "\"t\"", 1, 2, NULL);

        /* Modern requests carry the token in the same place. */
        _cleanup_(mcp_session_freep) McpSession *s = session_new();
        feed(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\","
                "\"_meta\":{\"progressToken\":\"m\",\"" META_V "\":\"2026-07-28\",\"" META_C "\":{}}}}");
        tool_call_progress(slow_calls[1], 1, 2, "kept");
        _cleanup_json_ json_object *p2 = take();
        assert_progress(p2, "\"m\"", 1, 2, "kept");
        ck_assert(tool_call_version_at_least(slow_calls[1], "2025-06-18"));
        ck_assert(!tool_call_version_at_least(slow_calls[0], "2025-03-26"));
}
END_TEST

/* Schemas parsed once per server, in the cache its owner gave it: as many as there are schema texts, however many
 * lists and calls; the lists the same with it as without; arguments still checked against the cached schema. */
START_TEST(test_schema_cache) {
        _cleanup_json_ json_object *plain = NULL, *cached = NULL, *again = NULL, *bad = NULL, *good = NULL;
        McpSchemaCache *cache = NULL;
        const char *texts[2 * ELEMENTSOF(server_tools)];
        size_t n_texts = 0;

        /* Distinct by address, as the cache keys them: the compiler may merge equal literals. */
        for (size_t i = 0; server_tools[i]; i++) {
                const char *t[] = { server_tools[i]->input_schema, server_tools[i]->output_schema };
                for (size_t k = 0; k < ELEMENTSOF(t); k++) {
                        bool seen = !t[k];
                        for (size_t j = 0; !seen && j < n_texts; j++)
                                seen = texts[j] == t[k];
                        if (!seen)
                                texts[n_texts++] = t[k];
                }
        }

        {
                _cleanup_(mcp_session_freep) McpSession *s = session_init(MCP_LATEST_LEGACY_VERSION);
                plain = list_tools(s, false);
        }
        ck_assert_int_eq(mcp_schema_cache_new(&cache), 0);
        ck_assert_uint_eq(mcp_schema_cache_size(cache), 0);
        server.schemas = cache;
        {
                _cleanup_(mcp_session_freep) McpSession *s = session_init(MCP_LATEST_LEGACY_VERSION),
                                                        *t = session_init(MCP_LATEST_LEGACY_VERSION);
                cached = list_tools(s, false);
                ck_assert_uint_eq(mcp_schema_cache_size(cache), n_texts);
                again = list_tools(t, false);
                ck_assert_uint_eq(mcp_schema_cache_size(cache), n_texts);
                bad = call_tool(s, "2", "echo", "{\"text\":5}");
                ck_assert(json_object_get_boolean(jget(assert_result(bad, "2"), "isError", NULL)));
                ck_assert_msg(strstr(first_text(assert_result(bad, "2")), "Invalid arguments"), "%s",
                              json_object_to_json_string(bad));
                good = call_tool(s, "3", "echo", "{\"text\":\"hi\"}");
                ck_assert(!json_object_get_boolean(jget(assert_result(good, "3"), "isError", NULL)));
                ck_assert_uint_eq(mcp_schema_cache_size(cache), n_texts);
        }
        ck_assert_str_eq(json_object_to_json_string(jget(plain, "result", NULL)),
                         json_object_to_json_string(jget(cached, "result", NULL)));
        ck_assert_str_eq(json_object_to_json_string(jget(cached, "result", NULL)),
                         json_object_to_json_string(jget(again, "result", NULL)));
        server.schemas = NULL;
        /* The replies hold their own references: they outlive the cache. */
        cache = mcp_schema_cache_free(cache);
        ck_assert_ptr_nonnull(json_object_to_json_string(cached));
}
END_TEST

static Suite *mcp_suite(void) {
        Suite *s = suite_create("mcp");
        TCase *tc;

        tc = tcase_create("errors");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_parse_error);
        tcase_add_test(tc, test_blank_lines);
        tcase_add_test(tc, test_invalid_request);
        tcase_add_test(tc, test_method_not_found);
        tcase_add_test(tc, test_invalid_params);
        tcase_add_test(tc, test_request_before_initialize);
        tcase_add_test(tc, test_internal_error);
        tcase_add_test(tc, test_oversize);
        tcase_add_test(tc, test_send_failure);
        suite_add_tcase(s, tc);

        tc = tcase_create("versions");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_initialize_echoes_legacy_versions);
        tcase_add_test(tc, test_initialize_other_versions);
        tcase_add_test(tc, test_modern_meta_required);
        tcase_add_test(tc, test_modern_unsupported_version);
        tcase_add_test(tc, test_discover);
        tcase_add_test(tc, test_modern_removed_methods);
        tcase_add_test(tc, test_ping);
        tcase_add_test(tc, test_modern_requests_on_fresh_connection);
        suite_add_tcase(s, tc);

        tc = tcase_create("notifications");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_notifications_never_answered);
        tcase_add_test(tc, test_responses_dropped);
        suite_add_tcase(s, tc);

        tc = tcase_create("batches");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_batch);
        tcase_add_test(tc, test_batch_empty);
        tcase_add_test(tc, test_batch_only_notifications);
        tcase_add_test(tc, test_batch_too_long);
        tcase_add_test(tc, test_element_budget);
        tcase_add_test(tc, test_batch_initialize_refused);
        tcase_add_test(tc, test_batch_other_versions);
        tcase_add_test(tc, test_batch_async);
        tcase_add_test(tc, test_batch_async_cancelled);
        tcase_add_test(tc, test_batch_free_pending);
        suite_add_tcase(s, tc);

        tc = tcase_create("shapes");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_shapes_2024_11_05);
        tcase_add_test(tc, test_shapes_2025_03_26);
        tcase_add_test(tc, test_shapes_2025_06_18);
        tcase_add_test(tc, test_shapes_modern);
        tcase_add_test(tc, test_tools_list_changed);
        tcase_add_test(tc, test_pagination);
        tcase_add_test(tc, test_pagination_invalid_cursor);
        tcase_add_test(tc, test_schema_cache);
        suite_add_tcase(s, tc);

        tc = tcase_create("calls");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_call_sync);
        tcase_add_test(tc, test_call_argument_validation);
        tcase_add_test(tc, test_call_async);
        tcase_add_test(tc, test_call_fail_later);
        tcase_add_test(tc, test_cancel);
        tcase_add_test(tc, test_cancel_all);
        tcase_add_test(tc, test_duplicate_id);
        tcase_add_test(tc, test_max_calls);
        tcase_add_test(tc, test_call_bytes_charged);
        tcase_add_test(tc, test_set_level);
        tcase_add_test(tc, test_free_cancels_calls);
        tcase_add_test(tc, test_progress);
        tcase_add_test(tc, test_progress_needs_token);
        tcase_add_test(tc, test_progress_versions);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(mcp_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
