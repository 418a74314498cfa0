/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "jsonrpc/jsonrpc.h"
#include "macro.h"

#define DEPTH 64

static json_object *parse(const char *s, const char **ret_reason) {
        const char *reason = NULL;
        json_object *j = jsonrpc_parse(s, strlen(s), DEPTH, &reason);

        if (ret_reason)
                *ret_reason = reason;
        return j;
}

static void assert_parse_fails(const char *s, size_t len, const char *reason_contains) {
        const char *reason = NULL;
        json_object *j = jsonrpc_parse(s, len, DEPTH, &reason);

        ck_assert_msg(!j, "parsed unexpectedly: %.60s", s);
        ck_assert_ptr_nonnull(reason);
        ck_assert_msg(startswith(reason, "Parse error"), "reason: %s", reason);
        if (reason_contains)
                ck_assert_msg(strstr(reason, reason_contains), "reason \"%s\" lacks \"%s\"", reason, reason_contains);
}

static void classify_text(const char *text, json_object **ret_msg, JsonrpcMessage *ret) {
        *ret_msg = parse(text, NULL);
        ck_assert_msg(*ret_msg, "does not parse: %s", text);
        jsonrpc_classify(*ret_msg, ret);
}

static void assert_line(json_object *j, const char *want) {
        size_t len;
        const char *s = json_to_line(j, &len);

        ck_assert_str_eq(s, want);
        ck_assert_uint_eq(len, strlen(want));
}

START_TEST(test_parse_non_finite_refused) {
        static const char *const cases[] = {
                "NaN", "Infinity", "-Infinity", "{\"x\":NaN}", "[1,[2,{\"y\":-Infinity}]]", "{\"x\":-NaN}",
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                assert_parse_fails(cases[i], strlen(cases[i]), NULL);
        assert_parse_fails("{\"x\":NaN}", strlen("{\"x\":NaN}"), "NaN and Infinity");

        /* Numbers beyond a double's range are JSON numbers all the same (test_parse_huge_numbers). */
        _cleanup_json_ json_object *j = parse("[1e300,-1e400,1e400,1e-400,0.5]", NULL);
        ck_assert_ptr_nonnull(j);
}
END_TEST

START_TEST(test_parse_valid) {
        static const char *const cases[] = {
                "{}",
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
                "  {\"a\":[1,2,{\"b\":null}]}  \t\r",
                "[{\"a\":1},{\"b\":2}]",
                "[]",
                "\"text\"",
                "{\"s\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x8d\"}",
                "{\"esc\":\"a\\n\\u00e9\\ud83d\\udc0d\"}",
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_json_ json_object *j = parse(cases[i], NULL);
                ck_assert_msg(j, "does not parse: %s", cases[i]);
        }

        _cleanup_json_ json_object *j = parse("{\"a\":1,\"b\":\"x\"}", NULL);
        ck_assert(json_object_is_type(j, json_type_object));
        ck_assert_str_eq(json_get_string(j, "b"), "x");
}
END_TEST

START_TEST(test_parse_scalar_at_end_of_line) {
        /* A number or literal that runs to the end of the line is complete JSON:
         * it must come out (the session answers it with -32600, not -32700). */
        static const char *const cases[] = { "42", "-1", "3.5", "true", "false", "1e5", " 7" };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *reason = NULL;
                _cleanup_json_ json_object *j = parse(cases[i], &reason);
                ck_assert_msg(j, "\"%s\" does not parse: %s", cases[i], strempty(reason));
        }

        _cleanup_json_ json_object *n = parse("42", NULL);
        ck_assert(json_object_is_type(n, json_type_int));
        ck_assert_int_eq(json_object_get_int64(n), 42);

        /* Cut short is still an error. */
        assert_parse_fails("{\"a\":", 5, NULL);
        assert_parse_fails("[1,2", 4, NULL);
        assert_parse_fails("-", 1, NULL);
        assert_parse_fails("nul", 3, NULL);
        assert_parse_fails("42 43", 5, NULL);
}
END_TEST

START_TEST(test_parse_invalid) {
        static const char *const cases[] = {
                "{",
                "}",
                "{\"a\":}",
                "{\"a\" 1}",
                "{\"a\":1,}",
                "[1,]",
                "{\"a\":01}",
                "{\"a\":nan}",
                "{\"a\":TRUE}",
                "{\"a\":\"unterminated}",
                "{\"a\":\"bad escape \\x\"}",
                "{\"a\":tru}",
                "/* comment */ {}",
                "hello",
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                assert_parse_fails(cases[i], strlen(cases[i]), NULL);

        assert_parse_fails("", 0, NULL);
        assert_parse_fails("   ", 3, NULL);
}
END_TEST

START_TEST(test_parse_nul_byte) {
        static const char a[] = "{\"a\":\"x\0y\"}";
        static const char b[] = "{}\0";
        static const char c[] = "\0{}";

        assert_parse_fails(a, sizeof(a) - 1, "NUL");
        assert_parse_fails(b, sizeof(b) - 1, "NUL");
        assert_parse_fails(c, sizeof(c) - 1, "NUL");
}
END_TEST

START_TEST(test_parse_invalid_utf8) {
        static const char *const cases[] = {
                "{\"a\":\"\xff\"}",
                "{\"a\":\"\xc3\"}",                /* truncated sequence */
                "{\"a\":\"\xe2\x82\"}",
                "{\"a\":\"\x80\"}",                /* lone continuation byte */
                "{\"\xfe\":1}",
                "{\"a\":1}\xff",
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                assert_parse_fails(cases[i], strlen(cases[i]), NULL);
}
END_TEST

START_TEST(test_parse_trailing_garbage) {
        static const char *const cases[] = {
                "{} x", "{}{}", "{}]", "{\"a\":1}}", "[] []", "{}\n{}", "\"a\"b", "{} 1",
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                assert_parse_fails(cases[i], strlen(cases[i]), NULL);

        /* White space after the value is fine. */
        _cleanup_json_ json_object *j = parse("{} \t\r\n ", NULL);
        ck_assert_ptr_nonnull(j);
}
END_TEST

START_TEST(test_parse_depth_limit) {
        enum { N = 10000 };
        const char *reason = NULL;
        char *s = malloc(2 * N + 1);

        ck_assert_ptr_nonnull(s);
        memset(s, '[', N);
        memset(s + N, ']', N);
        s[2 * N] = 0;
        ck_assert_ptr_null(jsonrpc_parse(s, 2 * N, DEPTH, &reason));
        ck_assert_str_eq(reason, "Parse error: nested too deeply");

        /* Unbalanced: only openers. */
        ck_assert_ptr_null(jsonrpc_parse(s, N, DEPTH, &reason));
        ck_assert_str_eq(reason, "Parse error: nested too deeply");

        /* Objects nest the same way. */
        char *o = malloc(6 * N + 1), *p = o;
        ck_assert_ptr_nonnull(o);
        for (size_t i = 0; i < N; i++)
                p = stpcpy(p, "{\"a\":");
        ck_assert_ptr_null(jsonrpc_parse(o, (size_t) (p - o), DEPTH, &reason));
        ck_assert_str_eq(reason, "Parse error: nested too deeply");
        free(o);

        /* Under the limit is fine. */
        memset(s, '[', 32);
        memset(s + 32, ']', 32);
        json_object *j = jsonrpc_parse(s, 64, DEPTH, &reason);
        ck_assert_ptr_nonnull(j);
        json_object_put(j);
        free(s);
}
END_TEST

START_TEST(test_parse_huge_numbers) {
        static const char *const cases[] = {
                "{\"a\":99999999999999999999999999999999999999}",
                "{\"a\":-99999999999999999999999999999999999999}",
                "{\"a\":18446744073709551616}",
                "{\"a\":1e400}",
                "{\"a\":-1e400}",
                "{\"a\":1e-400}",
                "{\"a\":123456789012345678901234567890.5e300}",
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_json_ json_object *j = parse(cases[i], NULL);
                json_object *a;

                ck_assert_msg(j, "does not parse: %s", cases[i]);
                a = json_object_object_get(j, "a");
                ck_assert(json_object_is_type(a, json_type_int) || json_object_is_type(a, json_type_double));
        }

        /* Hundreds of digits. */
        char big[600] = "{\"a\":";
        memset(big + 5, '9', 500);
        strcpy(big + 505, "}");
        _cleanup_json_ json_object *j = parse(big, NULL);
        ck_assert_ptr_nonnull(j);
}
END_TEST

START_TEST(test_classify_request) {
        _cleanup_json_ json_object *msg = NULL;
        JsonrpcMessage m;

        classify_text("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\",\"params\":{\"cursor\":\"2\"}}", &msg, &m);
        ck_assert_int_eq(m.kind, JSONRPC_REQUEST);
        ck_assert_str_eq(m.method, "tools/list");
        ck_assert_ptr_nonnull(m.id);
        ck_assert_int_eq(json_object_get_int64(m.id), 7);
        ck_assert_ptr_nonnull(m.params);
        ck_assert_str_eq(json_get_string(m.params, "cursor"), "2");
        ck_assert_int_eq(m.error_code, 0);

        /* String id, no params. */
        json_object_put(TAKE_PTR(msg));
        classify_text("{\"method\":\"ping\",\"id\":\"abc\",\"jsonrpc\":\"2.0\"}", &msg, &m);
        ck_assert_int_eq(m.kind, JSONRPC_REQUEST);
        ck_assert_str_eq(json_object_get_string(m.id), "abc");
        ck_assert_ptr_null(m.params);

        /* Negative and zero ids, empty string id. */
        static const char *const ids[] = { "0", "-5", "\"\"", "9007199254740993" };
        for (size_t i = 0; i < ELEMENTSOF(ids); i++) {
                char text[256];
                json_object_put(TAKE_PTR(msg));
                snprintf(text, sizeof(text), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"x\"}", ids[i]);
                classify_text(text, &msg, &m);
                ck_assert_msg(m.kind == JSONRPC_REQUEST, "id %s", ids[i]);
                ck_assert_ptr_nonnull(m.id);
        }
}
END_TEST

START_TEST(test_classify_notification) {
        _cleanup_json_ json_object *msg = NULL;
        JsonrpcMessage m;

        classify_text("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &msg, &m);
        ck_assert_int_eq(m.kind, JSONRPC_NOTIFICATION);
        ck_assert_str_eq(m.method, "notifications/initialized");
        ck_assert_ptr_null(m.id);
        ck_assert_int_eq(m.error_code, 0);

        json_object_put(TAKE_PTR(msg));
        classify_text("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1}}", &msg,
                      &m);
        ck_assert_int_eq(m.kind, JSONRPC_NOTIFICATION);
        ck_assert_ptr_nonnull(m.params);
}
END_TEST

START_TEST(test_classify_response) {
        _cleanup_json_ json_object *msg = NULL;
        JsonrpcMessage m;

        classify_text("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}", &msg, &m);
        ck_assert_int_eq(m.kind, JSONRPC_RESPONSE);

        json_object_put(TAKE_PTR(msg));
        classify_text("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"error\":{\"code\":-1,\"message\":\"no\"}}", &msg, &m);
        ck_assert_int_eq(m.kind, JSONRPC_RESPONSE);

        /* An error reply to something we could not read carries a null id. */
        json_object_put(TAKE_PTR(msg));
        classify_text("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"x\"}}", &msg, &m);
        ck_assert_int_eq(m.kind, JSONRPC_RESPONSE);

        /* No id: not a response. */
        json_object_put(TAKE_PTR(msg));
        classify_text("{\"jsonrpc\":\"2.0\",\"result\":{}}", &msg, &m);
        ck_assert_int_eq(m.kind, JSONRPC_INVALID);
        ck_assert_int_eq(m.error_code, JSONRPC_INVALID_REQUEST);
}
END_TEST

START_TEST(test_classify_invalid) {
        static const struct {
                const char *text;
                int code;
                bool has_id;
        } cases[] = {
                { "[]", JSONRPC_INVALID_REQUEST, false },
                { "42", JSONRPC_INVALID_REQUEST, false },
                { "\"ping\"", JSONRPC_INVALID_REQUEST, false },
                { "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", JSONRPC_INVALID_REQUEST, false },
                { "{\"id\":1,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, true },
                { "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, true },
                { "{\"jsonrpc\":2.0,\"id\":1,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, true },
                { "{\"jsonrpc\":null,\"id\":1,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, true },
                { "{\"jsonrpc\":\"2.0\",\"id\":1}", JSONRPC_INVALID_REQUEST, true },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", JSONRPC_INVALID_REQUEST, true },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":null}", JSONRPC_INVALID_REQUEST, true },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":[\"ping\"]}", JSONRPC_INVALID_REQUEST, true },
                { "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, false },
                { "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, false },
                { "{\"jsonrpc\":\"2.0\",\"id\":1.0,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, false },
                { "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, false },
                { "{\"jsonrpc\":\"2.0\",\"id\":false,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, false },
                { "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, false },
                { "{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, false },
                { "{\"jsonrpc\":\"2.0\",\"id\":99999999999999999999999,\"method\":\"ping\"}", JSONRPC_INVALID_REQUEST, false },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[]}", JSONRPC_INVALID_PARAMS, true },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":\"x\"}", JSONRPC_INVALID_PARAMS, true },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":null}", JSONRPC_INVALID_PARAMS, true },
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":3}", JSONRPC_INVALID_PARAMS, true },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_json_ json_object *msg = NULL;
                JsonrpcMessage m;

                classify_text(cases[i].text, &msg, &m);
                ck_assert_msg(m.kind == JSONRPC_INVALID, "not invalid: %s", cases[i].text);
                ck_assert_msg(m.error_code == cases[i].code, "%s: code %d", cases[i].text, m.error_code);
                ck_assert_ptr_nonnull(m.error_message);
                ck_assert_msg(cases[i].has_id == !!m.id, "%s: id %s", cases[i].text, m.id ? "kept" : "dropped");
        }
}
END_TEST

START_TEST(test_classify_notification_bad_params) {
        static const char *const cases[] = {
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":[1]}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":null}",
                "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"s\"}",
        };

        /* A notification stays a notification (it must never get a reply), but it is flagged. */
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_json_ json_object *msg = NULL;
                JsonrpcMessage m;

                classify_text(cases[i], &msg, &m);
                ck_assert_msg(m.kind == JSONRPC_NOTIFICATION, "%s", cases[i]);
                ck_assert_int_eq(m.error_code, JSONRPC_INVALID_PARAMS);
                ck_assert_ptr_null(m.params);
                ck_assert_ptr_null(m.id);
        }
}
END_TEST

START_TEST(test_id_valid) {
        static const struct {
                const char *json;
                bool valid;
        } cases[] = {
                { "1", true },          { "0", true },      { "-7", true },   { "\"\"", true },
                { "\"abc\"", true },    { "null", false },  { "1.5", false }, { "2.0", false },
                { "true", false },      { "false", false }, { "{}", false },  { "[]", false },
                { "1e3", false },       { "99999999999999999999", false },
                { "-99999999999999999999", false },
                { "18446744073709551615", false },
        };

        ck_assert(!jsonrpc_id_valid(NULL));
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char text[64];
                snprintf(text, sizeof(text), "{\"id\":%s}", cases[i].json);
                _cleanup_json_ json_object *o = parse(text, NULL);
                ck_assert_ptr_nonnull(o);
                ck_assert_msg(jsonrpc_id_valid(json_object_object_get(o, "id")) == cases[i].valid, "id %s",
                              cases[i].json);
        }
}
END_TEST

START_TEST(test_id_key) {
        _cleanup_json_ json_object *o = parse("{\"a\":42,\"b\":\"42\",\"c\":\"abc\",\"d\":-3,\"e\":\"\",\"f\":null,"
                                              "\"g\":1.5,\"h\":true,\"i\":9007199254740993}",
                                              NULL);
        _cleanup_free_ char *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *i = NULL;

        a = jsonrpc_id_key(json_object_object_get(o, "a"));
        b = jsonrpc_id_key(json_object_object_get(o, "b"));
        c = jsonrpc_id_key(json_object_object_get(o, "c"));
        d = jsonrpc_id_key(json_object_object_get(o, "d"));
        e = jsonrpc_id_key(json_object_object_get(o, "e"));
        i = jsonrpc_id_key(json_object_object_get(o, "i"));
        ck_assert_str_eq(a, "i:42");
        ck_assert_str_eq(b, "s:42");
        ck_assert_str_ne(a, b);
        ck_assert_str_eq(c, "s:abc");
        ck_assert_str_eq(d, "i:-3");
        ck_assert_str_eq(e, "s:");
        ck_assert_str_eq(i, "i:9007199254740993");
        ck_assert_ptr_null(jsonrpc_id_key(json_object_object_get(o, "f")));
        ck_assert_ptr_null(jsonrpc_id_key(json_object_object_get(o, "g")));
        ck_assert_ptr_null(jsonrpc_id_key(json_object_object_get(o, "h")));
        ck_assert_ptr_null(jsonrpc_id_key(NULL));
}
END_TEST

START_TEST(test_result_new) {
        _cleanup_json_ json_object *id = json_object_new_string("x/1");
        _cleanup_json_ json_object *r = NULL, *r2 = NULL;
        json_object *result = json_object_new_object();

        json_add_int(result, "n", 1);
        r = jsonrpc_result_new(id, result);
        ck_assert_ptr_nonnull(r);
        assert_line(r, "{\"jsonrpc\":\"2.0\",\"id\":\"x/1\",\"result\":{\"n\":1}}");

        /* The id is shared, not stolen. */
        json_object_put(TAKE_PTR(r));
        ck_assert_str_eq(json_object_get_string(id), "x/1");

        r2 = jsonrpc_result_new(NULL, json_object_new_object());
        assert_line(r2, "{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":{}}");

        /* A failed allocation of the result gives NULL. */
        ck_assert_ptr_null(jsonrpc_result_new(id, NULL));
}
END_TEST

START_TEST(test_error_new) {
        _cleanup_json_ json_object *id = json_object_new_int64(12);
        _cleanup_json_ json_object *e1 = NULL, *e2 = NULL, *e3 = NULL, *e4 = NULL;
        json_object *data = json_object_new_object();

        json_add_string(data, "requested", "1999-01-01");
        e1 = jsonrpc_error_new(id, MCP_ERROR_UNSUPPORTED_VERSION, "Unsupported protocol version", data);
        assert_line(e1, "{\"jsonrpc\":\"2.0\",\"id\":12,\"error\":{\"code\":-32022,\"message\":\"Unsupported protocol "
                        "version\",\"data\":{\"requested\":\"1999-01-01\"}}}");

        e2 = jsonrpc_error_new(NULL, JSONRPC_PARSE_ERROR, "Parse error: not valid JSON", NULL);
        assert_line(e2, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error: not valid JSON\"}}");

        e3 = jsonrpc_error_new(id, JSONRPC_METHOD_NOT_FOUND, "Method not found: foo/bar", NULL);
        assert_line(e3, "{\"jsonrpc\":\"2.0\",\"id\":12,\"error\":{\"code\":-32601,\"message\":\"Method not found: "
                        "foo/bar\"}}");

        /* Messages with quotes, newlines and slashes stay one line, slashes unescaped. */
        e4 = jsonrpc_error_new(id, JSONRPC_INTERNAL_ERROR, "a \"b\"\nc/d", NULL);
        assert_line(e4, "{\"jsonrpc\":\"2.0\",\"id\":12,\"error\":{\"code\":-32603,\"message\":\"a \\\"b\\\"\\nc/d\"}}");

        ck_assert_int_eq(json_object_get_int64(id), 12);
}
END_TEST

START_TEST(test_notification_new) {
        _cleanup_json_ json_object *n1 = NULL, *n2 = NULL;
        json_object *p = json_object_new_object();

        json_add_string(p, "progressToken", "t");
        json_add(p, "progress", json_object_new_double(0.5));
        n1 = jsonrpc_notification_new("notifications/progress", p);
        assert_line(n1, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\","
                        "\"progress\":0.5}}");

        n2 = jsonrpc_notification_new("notifications/tools/list_changed", NULL);
        assert_line(n2, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}");

        /* What we build classifies as what it is. */
        JsonrpcMessage m;
        jsonrpc_classify(n1, &m);
        ck_assert_int_eq(m.kind, JSONRPC_NOTIFICATION);
}
END_TEST

START_TEST(test_count_elements) {
        static const struct {
                const char *text;
                size_t n;
        } cases[] = {
                { "1", 1 },
                { "[1,2,3]", 4 },
                { "{\"a\":1,\"b\":[true,null]}", 7 },
                { "\"[,{:\"", 1 },
                { "[\"a\\\"\",\"b\"]", 3 },      /* an escaped quote does not end the string */
                { "[[[[[]]]]]", 6 },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                ck_assert_uint_eq(jsonrpc_count_elements(cases[i].text, strlen(cases[i].text), 1000), cases[i].n);
        /* Counting stops past the limit. */
        ck_assert_uint_eq(jsonrpc_count_elements("[1,2,3,4,5,6,7,8]", 17, 3), 4);

        /* Fed in pieces, cut anywhere (inside a string, between a backslash and what it escapes) or a byte at a
         * time: the same count as in one piece. */
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *t = cases[i].text;
                size_t len = strlen(t);
                JsonrpcElementCount c;

                for (size_t cut = 0; cut <= len; cut++) {
                        c = JSONRPC_ELEMENT_COUNT_INIT;
                        (void) jsonrpc_count_elements_feed(&c, t, cut, 1000);
                        ck_assert_uint_eq(jsonrpc_count_elements_feed(&c, t + cut, len - cut, 1000), cases[i].n);
                }
                c = JSONRPC_ELEMENT_COUNT_INIT;
                for (size_t k = 0; k < len; k++)
                        (void) jsonrpc_count_elements_feed(&c, t + k, 1, 1000);
                ck_assert_uint_eq(c.n, cases[i].n);
        }
        /* And stops past the limit, whatever comes after. */
        JsonrpcElementCount c = JSONRPC_ELEMENT_COUNT_INIT;
        ck_assert_uint_eq(jsonrpc_count_elements_feed(&c, "[1,2,", 5, 3), 4);
        ck_assert_uint_eq(jsonrpc_count_elements_feed(&c, "3,4]", 4, 3), 4);
}
END_TEST

/* The count as it was, a byte at a time: what the count that skips strings must agree with. */
static size_t count_bytewise(JsonrpcElementCount *c, const char *p, size_t len, size_t limit) {
        for (size_t i = 0; i < len && c->n <= limit; i++) {
                char ch = p[i];

                if (c->escaped) {
                        c->escaped = false;
                        continue;
                }
                if (c->in_string) {
                        if (ch == '\\')
                                c->escaped = true;
                        else if (ch == '"')
                                c->in_string = false;
                        continue;
                }
                if (ch == '"')
                        c->in_string = true;
                else if (ch == '[' || ch == '{' || ch == ',' || ch == ':')
                        c->n++;
        }
        return c->n;
}

START_TEST(test_count_elements_skips_strings) {
        /* Random text of quotes, backslashes, structure and letters, fed whole and in random pieces, with and
         * without a limit: the same counts, and the same state (inside a string, after a backslash) between
         * pieces, as a byte at a time. */
        static const char alphabet[] = "\"\"\\\\\\[]{},:ab é";
        char text[300];

        srand(23);
        for (int round = 0; round < 5000; round++) {
                size_t n = (size_t) rand() % sizeof(text), limit = rand() % 4 ? 1000 : (size_t) rand() % 20;
                JsonrpcElementCount fast = JSONRPC_ELEMENT_COUNT_INIT, slow = JSONRPC_ELEMENT_COUNT_INIT;

                for (size_t i = 0; i < n; i++)
                        text[i] = alphabet[rand() % (sizeof(alphabet) - 1)];
                for (size_t at = 0; at < n;) {
                        size_t piece = 1 + (size_t) rand() % (n - at);
                        size_t a = jsonrpc_count_elements_feed(&fast, text + at, piece, limit);
                        size_t b = count_bytewise(&slow, text + at, piece, limit);
                        ck_assert_uint_eq(a, b);
                        if (b <= limit) {
                                ck_assert_int_eq(fast.in_string, slow.in_string);
                                ck_assert_int_eq(fast.escaped, slow.escaped);
                        }
                        at += piece;
                }
                JsonrpcElementCount whole = JSONRPC_ELEMENT_COUNT_INIT;
                ck_assert_uint_eq(jsonrpc_count_elements(text, n, limit), count_bytewise(&whole, text, n, limit));
        }

        /* A long string of escapes with no end (one pass, not one per escape), and a long plain string. */
        size_t big_n = 1 << 20;
        char *big = malloc(big_n);
        ck_assert_ptr_nonnull(big);
        memset(big, '\\', big_n);
        big[0] = '[';
        big[1] = '"';
        ck_assert_uint_eq(jsonrpc_count_elements(big, big_n, 1000), 2);
        memset(big + 2, 'x', big_n - 2);
        memcpy(big + big_n - 4, "\",1]", 4);
        ck_assert_uint_eq(jsonrpc_count_elements(big, big_n, 1000), 3);
        free(big);
}
END_TEST

static Suite *jsonrpc_suite(void) {
        Suite *s = suite_create("jsonrpc");
        TCase *tc = tcase_create("parse");

        tcase_add_test(tc, test_parse_valid);
        tcase_add_test(tc, test_parse_non_finite_refused);
        tcase_add_test(tc, test_count_elements);
        tcase_add_test(tc, test_count_elements_skips_strings);
        tcase_add_test(tc, test_parse_scalar_at_end_of_line);
        tcase_add_test(tc, test_parse_invalid);
        tcase_add_test(tc, test_parse_nul_byte);
        tcase_add_test(tc, test_parse_invalid_utf8);
        tcase_add_test(tc, test_parse_trailing_garbage);
        tcase_add_test(tc, test_parse_depth_limit);
        tcase_add_test(tc, test_parse_huge_numbers);
        suite_add_tcase(s, tc);

        tc = tcase_create("classify");
        tcase_add_test(tc, test_classify_request);
        tcase_add_test(tc, test_classify_notification);
        tcase_add_test(tc, test_classify_response);
        tcase_add_test(tc, test_classify_invalid);
        tcase_add_test(tc, test_classify_notification_bad_params);
        tcase_add_test(tc, test_id_valid);
        tcase_add_test(tc, test_id_key);
        suite_add_tcase(s, tc);

        tc = tcase_create("replies");
        tcase_add_test(tc, test_result_new);
        tcase_add_test(tc, test_error_new);
        tcase_add_test(tc, test_notification_new);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(jsonrpc_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
