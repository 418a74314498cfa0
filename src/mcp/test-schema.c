/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "mcp/schema.h"

static json_object *J(const char *text) {
        json_object *j = json_tokener_parse(text);
        ck_assert_msg(j, "bad JSON in test: %s", text);
        return j;
}

/* Validates value against schema; returns the error (malloc'd) or NULL when it conforms. */
static char *validate(const char *schema, const char *value) {
        _cleanup_json_ json_object *s = J(schema), *v = NULL;
        char *error = (char *) 0x1;
        int r;

        /* "null" parses to NULL in json-c, which is JSON null. */
        v = streq(value, "null") ? NULL : J(value);
        r = schema_validate(s, v, &error);
        if (r == 0) {
                ck_assert_ptr_null(error);
                return NULL;
        }
        ck_assert_int_eq(r, -EINVAL);
        ck_assert_ptr_nonnull(error);
        return error;
}

static void ok(const char *schema, const char *value) {
        _cleanup_free_ char *e = validate(schema, value);
        ck_assert_msg(!e, "%s against %s: unexpected error: %s", value, schema, e);
}

static void bad(const char *schema, const char *value, const char *error_contains) {
        _cleanup_free_ char *e = validate(schema, value);
        ck_assert_msg(e, "%s against %s: accepted", value, schema);
        if (error_contains)
                ck_assert_msg(strstr(e, error_contains), "error \"%s\" lacks \"%s\"", e, error_contains);
}

START_TEST(test_type_single) {
        ok("{\"type\":\"string\"}", "\"x\"");
        ok("{\"type\":\"integer\"}", "3");
        ok("{\"type\":\"integer\"}", "-3");
        ok("{\"type\":\"number\"}", "3");
        ok("{\"type\":\"number\"}", "3.25");
        ok("{\"type\":\"boolean\"}", "false");
        ok("{\"type\":\"object\"}", "{}");
        ok("{\"type\":\"array\"}", "[]");
        ok("{\"type\":\"null\"}", "null");

        bad("{\"type\":\"string\"}", "3", "must be of type string, not integer");
        bad("{\"type\":\"integer\"}", "\"3\"", "not string");
        bad("{\"type\":\"integer\"}", "3.5", "not number");
        bad("{\"type\":\"integer\"}", "true", "not boolean");
        bad("{\"type\":\"number\"}", "\"1\"", NULL);
        bad("{\"type\":\"boolean\"}", "0", NULL);
        bad("{\"type\":\"object\"}", "[]", "not array");
        bad("{\"type\":\"array\"}", "{}", "not object");
        bad("{\"type\":\"string\"}", "null", "not null");
}
END_TEST

START_TEST(test_integer_valued_number) {
        /* 3.0 is an integer in JSON Schema; fractions and huge values are not. */
        ok("{\"type\":\"integer\"}", "3.0");
        ok("{\"type\":\"integer\"}", "-0.0");
        bad("{\"type\":\"integer\"}", "3.000001", NULL);
        bad("{\"type\":\"integer\"}", "1e300", NULL);
}
END_TEST

START_TEST(test_type_list) {
        const char *schema = "{\"type\":[\"string\",\"null\"]}";

        ok(schema, "\"3.12\"");
        ok(schema, "null");
        bad(schema, "3.12", "must be of type [\"string\",\"null\"], not number");
        ok("{\"type\":[\"integer\",\"string\"]}", "7");
        bad("{\"type\":[]}", "7", NULL);
}
END_TEST

START_TEST(test_no_constraints) {
        ok("{}", "{\"anything\":[1,2,{\"x\":null}]}");
        ok("{}", "42");
        ok("{\"description\":\"no type\"}", "\"s\"");
}
END_TEST

START_TEST(test_properties) {
        const char *schema = "{\"type\":\"object\",\"properties\":{"
                             "\"script\":{\"type\":\"string\"},"
                             "\"timeout_seconds\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":300},"
                             "\"options\":{\"type\":\"object\",\"properties\":{\"network\":{\"type\":\"boolean\"}}}}}";

        ok(schema, "{}");
        ok(schema, "{\"script\":\"print(1)\",\"timeout_seconds\":30}");
        ok(schema, "{\"options\":{\"network\":true}}");
        bad(schema, "{\"script\":1}", "script must be of type string, not integer");
        bad(schema, "{\"timeout_seconds\":\"30\"}", "timeout_seconds must be of type integer");
        bad(schema, "{\"options\":{\"network\":\"yes\"}}", "options.network must be of type boolean");
        /* Properties the schema does not name are allowed unless it says otherwise. */
        ok(schema, "{\"extra\":1}");
        bad(schema, "[]", "of type object");
}
END_TEST

START_TEST(test_required) {
        const char *schema = "{\"type\":\"object\",\"properties\":{\"script\":{\"type\":\"string\"},"
                             "\"sandbox_id\":{\"type\":\"string\"}},\"required\":[\"script\",\"sandbox_id\"]}";

        ok(schema, "{\"script\":\"\",\"sandbox_id\":\"a\"}");
        bad(schema, "{}", "\"script\" is required");
        bad(schema, "{\"script\":\"x\"}", "\"sandbox_id\" is required");

        /* Nested: the path says where. */
        bad("{\"type\":\"object\",\"properties\":{\"o\":{\"type\":\"object\",\"required\":[\"k\"]}}}", "{\"o\":{}}",
            "o: \"k\" is required");

        /* A required property that is null is present. */
        ok("{\"type\":\"object\",\"required\":[\"a\"]}", "{\"a\":null}");
}
END_TEST

START_TEST(test_additional_properties) {
        const char *closed = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},"
                             "\"additionalProperties\":false}";

        ok(closed, "{}");
        ok(closed, "{\"a\":\"x\"}");
        bad(closed, "{\"b\":1}", "unknown argument \"b\"");
        bad(closed, "{\"a\":\"x\",\"zzz\":true}", "unknown argument \"zzz\"");

        /* The no-argument tool. */
        ok("{\"type\":\"object\",\"additionalProperties\":false}", "{}");
        bad("{\"type\":\"object\",\"additionalProperties\":false}", "{\"x\":1}", "unknown argument \"x\"");
        bad("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}", "{\"x\":1}",
            "unknown argument \"x\"");

        /* additionalProperties: true is the default. */
        ok("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":true}", "{\"x\":1}");
}
END_TEST

START_TEST(test_items) {
        const char *schema = "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":5},\"maxItems\":3}";

        ok(schema, "[]");
        ok(schema, "[\"numpy\",\"rich\"]");
        bad(schema, "[\"numpy\",2]", "[1] must be of type string");
        bad(schema, "[\"abcdef\"]", "[0] is longer than 5 characters");
        bad(schema, "[\"a\",\"b\",\"c\",\"d\"]", "has more than 3 items");

        /* Inside an object the path names the property. */
        bad("{\"type\":\"object\",\"properties\":{\"dependencies\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}",
            "{\"dependencies\":[\"a\",{}]}", "dependencies[1] must be of type string");
}
END_TEST

START_TEST(test_enum) {
        const char *schema = "{\"type\":\"string\",\"enum\":[\"text\",\"base64\"]}";

        ok(schema, "\"text\"");
        ok(schema, "\"base64\"");
        bad(schema, "\"hex\"", "must be one of [\"text\",\"base64\"]");
        bad(schema, "\"Text\"", NULL);
        ok("{\"enum\":[1,\"a\",null]}", "1");
        ok("{\"enum\":[1,\"a\",null]}", "null");
        bad("{\"enum\":[1,\"a\",null]}", "2", NULL);
}
END_TEST

START_TEST(test_minimum_maximum) {
        const char *schema = "{\"type\":\"integer\",\"minimum\":1,\"maximum\":300}";

        ok(schema, "1");
        ok(schema, "300");
        bad(schema, "0", "must be at least 1");
        bad(schema, "301", "must be at most 300");
        bad(schema, "-9223372036854775808", "must be at least 1");
        bad(schema, "9223372036854775807", "must be at most 300");

        /* Numbers against integer bounds. */
        ok("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "0.5");
        bad("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1.5", "at most 1");
        bad("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "-0.001", "at least 0");

        /* Bounds that are not whole numbers are bounds too. */
        ok("{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2.5}", "0.5");
        ok("{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2.5}", "2.5");
        bad("{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2.5}", "0.25", "at least 0.5");
        bad("{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2.5}", "3", "at most 2.5");
}
END_TEST

START_TEST(test_non_finite) {
        /* json-c reads 1e400 as infinity. */
        bad("{\"type\":\"number\"}", "1e400", "finite");
        bad("{\"type\":\"number\"}", "-1e400", "finite");
        bad("{\"type\":\"number\",\"maximum\":10}", "-1e400", NULL);
}
END_TEST

START_TEST(test_string_length) {
        const char *schema = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}";

        ok(schema, "\"ab\"");
        ok(schema, "\"abcd\"");
        bad(schema, "\"a\"", "must not be shorter than 2 characters");
        bad(schema, "\"abcde\"", "is longer than 4 characters");
        ok("{\"type\":\"string\",\"maxLength\":0}", "\"\"");

        /* Lengths count characters, not bytes (JSON Schema). */
        ok(schema, "\"\xc3\xa9\xc3\xa9\xc3\xa9\"");                 /* 3 characters, 6 bytes */
        ok(schema, "\"\xf0\x9f\x90\x8d\xf0\x9f\x90\x8d\"");         /* 2 characters, 8 bytes */
        bad(schema, "\"\xe2\x82\xac\"", "shorter than 2");          /* 1 character, 3 bytes */
        bad(schema, "\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"", "longer than 4");
}
END_TEST

START_TEST(test_nested_paths) {
        const char *schema = "{\"type\":\"object\",\"properties\":{\"files\":{\"type\":\"array\",\"items\":{"
                             "\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},"
                             "\"mode\":{\"enum\":[\"text\",\"base64\"]}},\"required\":[\"path\"],"
                             "\"additionalProperties\":false}}}}";

        ok(schema, "{\"files\":[{\"path\":\"a\"},{\"path\":\"b\",\"mode\":\"text\"}]}");
        bad(schema, "{\"files\":[{\"path\":\"a\"},{\"mode\":\"text\"}]}", "files[1]: \"path\" is required");
        bad(schema, "{\"files\":[{\"path\":\"a\",\"mode\":\"hex\"}]}", "files[0].mode must be one of");
        bad(schema, "{\"files\":[{\"path\":\"a\",\"size\":1}]}", "unknown argument \"size\"");
}
END_TEST

START_TEST(test_error_reset) {
        _cleanup_json_ json_object *s = J("{\"type\":\"string\"}");
        _cleanup_json_ json_object *good = J("\"x\""), *wrong = J("1");
        char *error = NULL;

        ck_assert_int_eq(schema_validate(s, wrong, &error), -EINVAL);
        ck_assert_ptr_nonnull(error);
        free(error);

        /* Success always leaves NULL, whatever was there. */
        error = (char *) "stale";
        ck_assert_int_eq(schema_validate(s, good, &error), 0);
        ck_assert_ptr_null(error);
}
END_TEST

static Suite *schema_suite(void) {
        Suite *s = suite_create("schema");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_type_single);
        tcase_add_test(tc, test_integer_valued_number);
        tcase_add_test(tc, test_type_list);
        tcase_add_test(tc, test_no_constraints);
        tcase_add_test(tc, test_properties);
        tcase_add_test(tc, test_required);
        tcase_add_test(tc, test_additional_properties);
        tcase_add_test(tc, test_items);
        tcase_add_test(tc, test_enum);
        tcase_add_test(tc, test_minimum_maximum);
        tcase_add_test(tc, test_non_finite);
        tcase_add_test(tc, test_string_length);
        tcase_add_test(tc, test_nested_paths);
        tcase_add_test(tc, test_error_reset);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(schema_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
