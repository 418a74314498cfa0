/* SPDX-License-Identifier: MIT */
/*
 * The parser that takes a long line a slice at a time (jsonrpc_parser_step()): the same value, or the same reason,
 * as the line parsed whole, however it is cut; long strings in as many steps as slices; numbers, literals and runs
 * of bytes that no character has refused as they are counted, never taken in one piece.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "jsonrpc/jsonrpc.h"
#include "macro.h"
#include "strv.h"

/* The line parsed whole and a slice at a time give the same value, or the same reason. */
static void assert_sliced_same(const char *line, size_t len, size_t slice) {
        _cleanup_json_ json_object *whole = NULL, *sliced = NULL;
        const char *why_whole = NULL, *why_sliced = NULL;

        whole = jsonrpc_parse(line, len, 8, &why_whole);
        sliced = jsonrpc_parse_sliced(line, len, 8, slice, &why_sliced);
        if (!whole) {
                ck_assert_msg(!sliced, "'%.*s' in slices of %zu: a value, whole: %s", (int) len, line, slice, why_whole);
                ck_assert_msg(streq(why_whole, why_sliced), "'%.*s' in slices of %zu: '%s', whole: '%s'", (int) len,
                              line, slice, why_sliced, why_whole);
                return;
        }
        ck_assert_msg(sliced, "'%.*s' in slices of %zu: '%s', whole: a value", (int) len, line, slice, why_sliced);
        ck_assert_str_eq(json_object_to_json_string_ext(whole, JSON_C_TO_STRING_PLAIN),
                         json_object_to_json_string_ext(sliced, JSON_C_TO_STRING_PLAIN));
}

START_TEST(test_parse_sliced_same) {
        static const char *const lines[] = {
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
                "{\"a\": [1, -2.5e3, true, false, null, \"x\\\"y\\\\z\"], \"b\": {}}  ",
                "123", "-0.5e-7", "8-", "1 2", "true", "tru", "nul", "null", "null x", "  null  ", "[1,2]x", "[1,2] \t",
                "\"\\u00e9\\ud83d\\ude00\\n\"", "\"\\ud83d\"", "\"\\uZZZZ\"", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
                "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xc3\"", "[\"a\",\"b\\\"\",\"\"]", "{\"a\":NaN}", "[Infinity]",
                "[-Infinity, 1]", "[1e400]", "[[[[[[[[[[1]]]]]]]]]]", "[[[[[[[1]]]]]]]", "{\"a\":1,}", "[1,]", "{",
                "[1, 2", "\"abc", "", "   ", " \t\r", "}", "{\"a\" 1}", "[01]", "[1.]", "[.5]", "[+1]", "'x'",
                "{\"k\":\"v\"}{}", "[1]\n", "[\"\\/\\b\\f\\r\\t\"]", "[true false]", "[1 , 2 ,3 ]",
        };

        for (size_t i = 0; i < ELEMENTSOF(lines); i++) {
                size_t len = strlen(lines[i]);
                for (size_t slice = 1; slice <= len + 1; slice++)
                        assert_sliced_same(lines[i], len, slice);
        }
        /* A NUL inside, in each slice. */
        static const char nul[] = "{\"a\":\"x\0y\"}";
        for (size_t slice = 1; slice <= sizeof(nul); slice++)
                assert_sliced_same(nul, sizeof(nul) - 1, slice);

        /* Random text of JSON's pieces, good and bad, cut every way. */
        static const char *const bits[] = {
                "[", "]", "{", "}", ",", ":", " ", "\"", "\"k\"", "\"k\":", "1", "-", "2.5", "e", "true", "null", "\\",
                "\\u", "00e9", "\xc3\xa9", "\xe2\x82\xac", "\xc3", "\xed\xa0\x80", "x", "NaN",
        };
        char text[200];
        srand(31);
        for (int round = 0; round < 3000; round++) {
                size_t n = 0, parts = 1 + (size_t) rand() % 12;
                for (size_t k = 0; k < parts; k++) {
                        const char *b = bits[rand() % ELEMENTSOF(bits)];
                        memcpy(text + n, b, strlen(b));
                        n += strlen(b);
                }
                for (size_t slice = 1; slice <= n; slice++)
                        assert_sliced_same(text, n, slice);
        }
}
END_TEST

START_TEST(test_parser_long_string) {
        /* A 3 MiB string in slices of 64 KiB: the same value, in about as many steps as the slices; the element
         * count is kept, and a line over it refused before anything else. */
        size_t n = 3 << 20;
        char *line = malloc(n);
        ck_assert_ptr_nonnull(line);
        static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"";
        memcpy(line, head, sizeof(head) - 1);
        memset(line + sizeof(head) - 1, 'a', n - (sizeof(head) - 1));
        memcpy(line + n - 3, "\"}}", 3);

        _cleanup_(jsonrpc_parser_freep) JsonrpcParser *p = NULL;
        ck_assert_int_eq(jsonrpc_parser_new(&p, line, n, 64, 100), 0);
        unsigned steps = 1;
        while (jsonrpc_parser_step(p, 64 * 1024) != JSONRPC_PARSER_DONE)
                steps++;
        ck_assert_uint_eq(steps, 48);
        ck_assert(!jsonrpc_parser_blank(p));
        ck_assert(!jsonrpc_parser_too_many_elements(p));
        const char *why = NULL;
        _cleanup_json_ json_object *v = jsonrpc_parser_finish(p, &why);
        ck_assert_ptr_nonnull(v);
        ck_assert_str_eq(json_get_string(v, "method"), "ping");
        p = jsonrpc_parser_free(p);

        ck_assert_int_eq(jsonrpc_parser_new(&p, line, n, 64, 3), 0);
        while (jsonrpc_parser_step(p, 64 * 1024) != JSONRPC_PARSER_DONE)
                ;
        ck_assert(jsonrpc_parser_too_many_elements(p));
        p = jsonrpc_parser_free(p);

        ck_assert_int_eq(jsonrpc_parser_new(&p, "  \t", 3, 64, 3), 0);
        ck_assert_int_eq(jsonrpc_parser_step(p, 1024), JSONRPC_PARSER_DONE);
        ck_assert_int_eq(jsonrpc_parser_step(p, 1024), JSONRPC_PARSER_DONE);
        ck_assert(jsonrpc_parser_blank(p));
        free(line);
}
END_TEST

/* The steps a line of n bytes takes in slices of 64 KiB, which must refuse it; the reason in *ret_why. */
static unsigned steps_refused(const char *line, size_t n, const char **ret_why) {
        _cleanup_(jsonrpc_parser_freep) JsonrpcParser *p = NULL;
        unsigned steps = 1;

        ck_assert_int_eq(jsonrpc_parser_new(&p, line, n, 64, 0), 0);
        while (jsonrpc_parser_step(p, 64 * 1024) != JSONRPC_PARSER_DONE)
                steps++;
        _cleanup_json_ json_object *v = jsonrpc_parser_finish(p, ret_why);
        ck_assert_ptr_null(v);
        return steps;
}

/* A number or literal of a megabyte is refused as the count reaches JSONRPC_TOKEN_MAX of it, a slice at a time as
 * for any line (before, the first piece stretched to its end, and json-c took it in one go); whole or sliced, the
 * same line is refused, and one just under the limit is read. */
START_TEST(test_parser_long_token) {
        static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":";
        const size_t n = 1 << 20;
        _cleanup_free_ char *line = malloc(n + 1);

        ck_assert_ptr_nonnull(line);
        for (const char *fill = "1t"; *fill; fill++) {
                memcpy(line, head, sizeof(head) - 1);
                memset(line + sizeof(head) - 1, *fill, n - (sizeof(head) - 1));
                memcpy(line + n - 2, "}}", 2);
                line[n] = 0;

                const char *why = NULL;
                ck_assert_uint_ge(steps_refused(line, n, &why), 15);
                ck_assert_ptr_nonnull(why);
                ck_assert_ptr_null(jsonrpc_parse(line, n, 64, &why));
        }

        /* A megabyte of continuation bytes in a string: not UTF-8, found a slice at a time too. */
        static const char shead[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"";
        memcpy(line, shead, sizeof(shead) - 1);
        memset(line + sizeof(shead) - 1, 0x80, n - (sizeof(shead) - 1));
        memcpy(line + n - 3, "\"}}", 3);
        const char *why = NULL;
        ck_assert_uint_ge(steps_refused(line, n, &why), 15);
        ck_assert_str_eq(why, "Parse error: the message is not valid UTF-8");

        /* Whole or in slices, the same reason: a long token after characters of several bytes, or after an error
         * of its own, or after the value. */
        static const char *const before[] = { "[", "{\"b\":\"\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\",\"a\":",
                                              "[[[[[[[[[[[[", "{\"a\":1} ", "[\"\xf0\x9f\x98\x80\", " };
        static const char *const after[] = { "]", "}", "]]]]]]]]]]]]", "", "]" };
        for (size_t k = 0; k < ELEMENTSOF(before); k++)
                for (const char *fill = "1\xc3"; *fill; fill++) {
                        _cleanup_free_ char *t = NULL;
                        size_t len = 0;
                        ck_assert_int_ge(strextendf_len(&t, &len, "%s", before[k]), 0);
                        for (int i = 0; i < 2500; i++)
                                ck_assert_int_ge(strextendf_len(&t, &len, "%s", *fill == '1' ? "12" : "\xc3\xa9"), 0);
                        ck_assert_int_ge(strextendf_len(&t, &len, "%s", after[k]), 0);
                        for (size_t slice = 1; slice < len; slice += 613)
                                assert_sliced_same(t, len, slice);
                }

        /* Under the limit, whole and sliced: read. */
        for (size_t digits = JSONRPC_TOKEN_MAX - 8; digits <= JSONRPC_TOKEN_MAX + 8; digits += 16) {
                _cleanup_free_ char *s = malloc(digits + 16);
                ck_assert_ptr_nonnull(s);
                strcpy(s, "[");
                memset(s + 1, '7', digits);
                strcpy(s + 1 + digits, "]");
                _cleanup_json_ json_object *whole = jsonrpc_parse(s, digits + 2, 64, &why);
                if (digits <= JSONRPC_TOKEN_MAX)
                        ck_assert_ptr_nonnull(whole);
                else
                        ck_assert_ptr_null(whole);
                for (size_t slice = 100; slice < digits; slice += 1000)
                        assert_sliced_same(s, digits + 2, slice);
        }
}
END_TEST

static Suite *parser_suite(void) {
        Suite *s = suite_create("jsonrpc-parser");
        TCase *tc = tcase_create("sliced");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_parse_sliced_same);
        tcase_add_test(tc, test_parser_long_string);
        tcase_add_test(tc, test_parser_long_token);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(parser_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
