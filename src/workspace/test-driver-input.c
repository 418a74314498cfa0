/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "workspace/driver-input.h"

static DriverRecord feed(DriverInput *in, const char *rec, json_object **ret) {
        return driver_input_feed(in, rec, strlen(rec), ret);
}

START_TEST(test_hello_and_message) {
        DriverInput in = { .max = 1024 };
        json_object *j = NULL;

        ck_assert_int_eq(feed(&in, "H{\"hello\":7,\"python\":\"3.12.1\"}", &j), DRIVER_RECORD_HELLO);
        ck_assert_str_eq(json_get_string(j, "python"), "3.12.1");
        json_object_put(j);

        ck_assert_int_eq(feed(&in, "C{\"ok\":tr", &j), DRIVER_RECORD_NONE);
        ck_assert_ptr_null(j);
        ck_assert_int_eq(feed(&in, "C", &j), DRIVER_RECORD_NONE);
        ck_assert_int_eq(feed(&in, "Eue,\"stdout\":\"hi\"}", &j), DRIVER_RECORD_MESSAGE);
        ck_assert(json_object_get_boolean(json_get(j, "ok", json_type_boolean)));
        ck_assert_str_eq(json_get_string(j, "stdout"), "hi");
        json_object_put(j);
        ck_assert_uint_eq(in.len, 0);

        /* A message in one record. */
        ck_assert_int_eq(feed(&in, "E{}", &j), DRIVER_RECORD_MESSAGE);
        json_object_put(j);
        driver_input_done(&in);
}
END_TEST

START_TEST(test_what_is_not_the_drivers) {
        DriverInput in = { .max = 1024 };
        json_object *j = NULL;
        static char big[DRIVER_RECORD_MAX + 1];

        /* Not an object, not JSON, empty: the protocol is broken. */
        ck_assert_int_eq(feed(&in, "E[1,2]", &j), DRIVER_RECORD_INVALID);
        ck_assert_int_eq(feed(&in, "E{\"a\":", &j), DRIVER_RECORD_INVALID);
        ck_assert_int_eq(feed(&in, "E", &j), DRIVER_RECORD_INVALID);
        ck_assert_int_eq(feed(&in, "H5", &j), DRIVER_RECORD_INVALID);
        ck_assert_int_eq(driver_input_feed(&in, "", 0, &j), DRIVER_RECORD_NONE);
        ck_assert_ptr_null(j);

        /* An unknown kind or a record too long: so is it, and the message half received is dropped. */
        ck_assert_int_eq(feed(&in, "C{\"x\":", &j), DRIVER_RECORD_NONE);
        ck_assert_int_eq(feed(&in, "Zjunk", &j), DRIVER_RECORD_INVALID);
        ck_assert_uint_eq(in.len, 0);
        ck_assert_int_eq(feed(&in, "E{\"y\":1}", &j), DRIVER_RECORD_MESSAGE);
        ck_assert_ptr_null(json_get(j, "x", json_type_int));
        json_object_put(j);

        ck_assert_int_eq(feed(&in, "C{\"x\":", &j), DRIVER_RECORD_NONE);
        big[0] = 'C';
        ck_assert_int_eq(driver_input_feed(&in, big, sizeof(big), &j), DRIVER_RECORD_INVALID);
        ck_assert_uint_eq(in.len, 0);

        /* A hello drops what a dead worker left half sent. */
        ck_assert_int_eq(feed(&in, "C{\"x\":", &j), DRIVER_RECORD_NONE);
        ck_assert_int_eq(feed(&in, "H{\"hello\":2}", &j), DRIVER_RECORD_HELLO);
        ck_assert_uint_eq(in.len, 0);
        json_object_put(j);
        driver_input_done(&in);
}
END_TEST

/* A message of more values than DRIVER_MESSAGE_MAX_VALUES is refused as it comes, before json-c builds them; one of
 * as many as a listing of 1000 entries has is taken. */
START_TEST(test_message_too_many_values) {
        static const size_t ns[] = { 8000, DRIVER_MESSAGE_MAX_VALUES / 2 + 8 };
        DriverInput in = { .max = 1024 * 1024 };
        json_object *j = NULL;

        for (size_t k = 0; k < ELEMENTSOF(ns); k++) {
                _cleanup_free_ char *rec = malloc(3 * ns[k] + 64);
                size_t len;

                ck_assert_ptr_nonnull(rec);
                len = (size_t) sprintf(rec, "C{\"entries\":[");
                for (size_t i = 0; i < ns[k]; i++)
                        len += (size_t) sprintf(rec + len, "%s{}", i ? "," : "");
                ck_assert_int_eq(driver_input_feed(&in, rec, len, &j), k == 0 ? DRIVER_RECORD_NONE : DRIVER_RECORD_INVALID);
                if (k == 0) {
                        ck_assert_int_eq(feed(&in, "E]}", &j), DRIVER_RECORD_MESSAGE);
                        ck_assert_uint_eq(json_object_array_length(json_get(j, "entries", json_type_array)), ns[k]);
                        json_object_put(j);
                } else
                        ck_assert_uint_eq(in.len, 0);
        }
        driver_input_done(&in);
}
END_TEST

START_TEST(test_message_too_long) {
        DriverInput in = { .max = 4 * DRIVER_RECORD_MAX };
        json_object *j = NULL;
        static char piece[DRIVER_RECORD_MAX];
        DriverRecord r = DRIVER_RECORD_NONE;
        size_t sent = 0;

        /* A message longer than the cap: refused at the record that passes it, and nothing held. */
        piece[0] = 'C';
        memset(piece + 1, 'x', sizeof(piece) - 1);
        ck_assert_int_eq(feed(&in, "C{\"s\":\"", &j), DRIVER_RECORD_NONE);
        while (r == DRIVER_RECORD_NONE) {
                r = driver_input_feed(&in, piece, sizeof(piece), &j);
                sent += sizeof(piece) - 1;
                ck_assert_uint_le(in.len, in.max);
        }
        ck_assert_int_eq(r, DRIVER_RECORD_INVALID);
        ck_assert_uint_le(sent, in.max + sizeof(piece));
        ck_assert_ptr_null(in.tok);
        ck_assert_ptr_null(in.done);
        ck_assert_uint_eq(in.max, 4 * DRIVER_RECORD_MAX);

        /* One of the cap's size is whole. */
        ck_assert_int_eq(feed(&in, "C{\"s\":\"", &j), DRIVER_RECORD_NONE);
        for (size_t i = 0; i < 3; i++)
                ck_assert_int_eq(driver_input_feed(&in, piece, sizeof(piece), &j), DRIVER_RECORD_NONE);
        ck_assert_int_eq(feed(&in, "E\"}", &j), DRIVER_RECORD_MESSAGE);
        json_object_put(j);

        /* Without a cap, a message is one record at most. */
        in.max = 0;
        ck_assert_int_eq(feed(&in, "C{", &j), DRIVER_RECORD_NONE);
        ck_assert_int_eq(driver_input_feed(&in, piece, sizeof(piece), &j), DRIVER_RECORD_INVALID);
        driver_input_done(&in);
}
END_TEST

/* A message is parsed piece by piece as it arrives: pieces may cut anywhere, even inside an escape; what is not
 * JSON is refused at the piece that shows it, not only at the end. */
START_TEST(test_pieces) {
        DriverInput in = { .max = 4 * DRIVER_RECORD_MAX };
        json_object *j = NULL;

        ck_assert_int_eq(feed(&in, "C{\"a\":\"x\\", &j), DRIVER_RECORD_NONE);
        ck_assert_ptr_nonnull(in.tok);
        ck_assert_int_eq(feed(&in, "Cu00", &j), DRIVER_RECORD_NONE);
        ck_assert_int_eq(feed(&in, "C41\", \"n\": [1, 2", &j), DRIVER_RECORD_NONE);
        ck_assert_int_eq(feed(&in, "E]}", &j), DRIVER_RECORD_MESSAGE);
        ck_assert_str_eq(json_object_get_string(json_object_object_get(j, "a")), "xA");
        ck_assert_int_eq(json_object_array_length(json_object_object_get(j, "n")), 2);
        json_object_put(j);
        ck_assert_ptr_null(in.tok);
        ck_assert_uint_eq(in.len, 0);

        /* Broken JSON: refused at once, nothing held. */
        ck_assert_int_eq(feed(&in, "C{\"a\": tru", &j), DRIVER_RECORD_NONE);
        ck_assert_int_eq(feed(&in, "Cx}", &j), DRIVER_RECORD_INVALID);
        ck_assert_ptr_null(in.tok);

        /* A complete value that is not an object, and an object that never closes: refused at the end. */
        ck_assert_int_eq(feed(&in, "C[1]", &j), DRIVER_RECORD_NONE);
        ck_assert_int_eq(feed(&in, "E", &j), DRIVER_RECORD_INVALID);
        ck_assert_int_eq(feed(&in, "C{\"a\": 1", &j), DRIVER_RECORD_NONE);
        ck_assert_int_eq(feed(&in, "E", &j), DRIVER_RECORD_INVALID);
        ck_assert_ptr_null(in.tok);
        driver_input_done(&in);
}
END_TEST

static Suite *driver_input_suite(void) {
        Suite *s = suite_create("driver-input");
        TCase *tc = tcase_create("records");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_hello_and_message);
        tcase_add_test(tc, test_what_is_not_the_drivers);
        tcase_add_test(tc, test_message_too_long);
        tcase_add_test(tc, test_message_too_many_values);
        tcase_add_test(tc, test_pieces);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(driver_input_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
