/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "tools/outputs.h"

/* A record as the sandbox's bootstrap writes it (outputs.h). */
static size_t record(uint8_t *buf, char kind, const char *name, uint64_t size, const char *payload) {
        size_t n = strlen(name), len = 0;

        buf[len++] = (uint8_t) kind;
        for (int i = 3; i >= 0; i--)
                buf[len++] = (uint8_t) (n >> (8 * i));
        for (int i = 7; i >= 0; i--)
                buf[len++] = (uint8_t) (size >> (8 * i));
        memcpy(buf + len, name, n);
        len += n;
        if (payload) {
                memcpy(buf + len, payload, (size_t) size);
                len += (size_t) size;
        }
        return len;
}

/* Feed it in pieces of step bytes: the parser must not care where reads split. */
static void feed(Outputs *o, const uint8_t *buf, size_t n, size_t step) {
        for (size_t i = 0; i < n; i += step)
                outputs_feed(o, buf + i, MIN(step, n - i));
}

static json_object *file_named(json_object *files, const char *name) {
        for (size_t i = 0; i < json_object_array_length(files); i++) {
                json_object *f = json_object_array_get_idx(files, i);
                if (streq(json_get_string(f, "name"), name))
                        return f;
        }
        return NULL;
}

START_TEST(test_files_then_exit_status) {
        uint8_t buf[256];
        size_t steps[] = { 1, 2, 3, 7, 13, sizeof(buf) };

        for (size_t s = 0; s < ELEMENTSOF(steps); s++) {
                _cleanup_(outputs_freep) Outputs *o = NULL;
                size_t n = 0;
                int status = -1;

                ck_assert_int_ge(outputs_new(&o), 0);
                n += record(buf + n, 'O', "a.txt", 5, "hello");
                n += record(buf + n, 'o', "big.bin", 1 << 30, NULL);
                n += record(buf + n, 'X', "x", 3, NULL);
                /* Whatever follows the end is not read. */
                n += record(buf + n, 'O', "late.txt", 4, "late");
                feed(o, buf, n, steps[s]);

                ck_assert(outputs_finished(o, &status));
                ck_assert_int_eq(status, 3);
                json_object *files = outputs_files_json(o);
                ck_assert_uint_eq(json_object_array_length(files), 2);
                ck_assert_ptr_nonnull(file_named(files, "a.txt"));
                ck_assert_ptr_nonnull(file_named(files, "big.bin"));
                ck_assert_ptr_null(file_named(files, "late.txt"));
                json_object_put(files);
        }
}
END_TEST

/* 'R', 'P' and 'M' say things about the run, not items: the last 'P' and 'M' count; none is a file. */
START_TEST(test_ready_warm_imports_and_loaded) {
        uint8_t buf[256];
        size_t steps[] = { 1, 5, sizeof(buf) };

        for (size_t s = 0; s < ELEMENTSOF(steps); s++) {
                _cleanup_(outputs_freep) Outputs *o = NULL;
                uint64_t kib = 0;
                size_t n = 0;

                ck_assert_int_ge(outputs_new(&o), 0);
                ck_assert_ptr_null(outputs_preimported(o, &kib));
                ck_assert_ptr_null(outputs_loaded_modules(o));
                n += record(buf + n, 'P', "numpy", 1000, NULL);
                n += record(buf + n, 'P', "numpy pandas", 81234, NULL);
                n += record(buf + n, 'R', "-", 0, NULL);
                n += record(buf + n, 'O', "a.txt", 2, "hi");
                n += record(buf + n, 'M', "numpy pandas pytz", 0, NULL);
                n += record(buf + n, 'X', "x", 0, NULL);
                feed(o, buf, n, steps[s]);
                ck_assert(outputs_finished(o, NULL));
                ck_assert_str_eq(outputs_preimported(o, &kib), "numpy pandas");
                ck_assert_uint_eq(kib, 81234);
                ck_assert_str_eq(outputs_loaded_modules(o), "numpy pandas pytz");
                json_object *files = outputs_files_json(o);
                ck_assert_uint_eq(json_object_array_length(files), 1);
                json_object_put(files);
        }
}
END_TEST

START_TEST(test_exit_status_is_a_byte) {
        _cleanup_(outputs_freep) Outputs *o = NULL;
        uint8_t buf[64];
        int status = -1;

        ck_assert_int_ge(outputs_new(&o), 0);
        feed(o, buf, record(buf, 'X', "x", 0x1ff, NULL), sizeof(buf));
        ck_assert(outputs_finished(o, &status));
        ck_assert_int_eq(status, 0xff);
}
END_TEST

START_TEST(test_no_status_until_the_record_is_whole) {
        _cleanup_(outputs_freep) Outputs *o = NULL;
        uint8_t buf[64];
        size_t n;

        ck_assert_int_ge(outputs_new(&o), 0);
        ck_assert(!outputs_finished(o, NULL));
        n = record(buf, 'X', "x", 0, NULL);
        feed(o, buf, 12, 1);   /* the header lacks its last byte */
        ck_assert(!outputs_finished(o, NULL));
        feed(o, buf + 12, n - 12, 1);
        ck_assert(outputs_finished(o, NULL));
        ck_assert(!outputs_finished(NULL, NULL));
}
END_TEST

START_TEST(test_malformed_stream_has_no_status) {
        _cleanup_(outputs_freep) Outputs *o = NULL;
        uint8_t buf[64];
        size_t n = 0;

        ck_assert_int_ge(outputs_new(&o), 0);
        n += record(buf + n, 'Q', "what", 0, NULL);   /* an unknown kind: the stream is dropped from here */
        n += record(buf + n, 'X', "x", 0, NULL);
        feed(o, buf, n, 5);
        ck_assert(!outputs_finished(o, NULL));
        ck_assert(outputs_empty(o));
}
END_TEST

/* Once the content holds the files, their bytes go; the content, the files' list and what the run said stay. */
START_TEST(test_payloads_dropped_after_the_content) {
        _cleanup_(outputs_freep) Outputs *o = NULL;
        uint8_t buf[256];
        size_t n = 0;
        int status = -1;
        char bin[6] = { 0, 1, 2, 3, 4, 5 };

        ck_assert_int_ge(outputs_new(&o), 0);
        n += record(buf + n, 'O', "a.txt", 5, "hello");
        n += record(buf + n, 'O', "b.bin", sizeof(bin), bin);
        n += record(buf + n, 'X', "x", 0, NULL);
        feed(o, buf, n, 7);
        ck_assert(outputs_finished(o, &status));
        ck_assert_uint_eq(outputs_payload_bytes(o), 5 + sizeof(bin));

        json_object *content = json_object_new_array();
        outputs_append_content(o, content);
        _cleanup_free_ char *before = strdup(json_object_to_json_string(content));
        json_object *files = outputs_files_json(o);
        _cleanup_free_ char *files_before = strdup(json_object_to_json_string(files));
        json_object_put(files);

        outputs_drop_payloads(o);
        ck_assert_uint_eq(outputs_payload_bytes(o), 0);
        ck_assert_str_eq(json_object_to_json_string(content), before);
        ck_assert_msg(strstr(before, "hello") && strstr(before, "AAECAwQF"), "%s", before);
        files = outputs_files_json(o);
        ck_assert_str_eq(json_object_to_json_string(files), files_before);
        json_object_put(files);
        ck_assert(outputs_finished(o, &status));
        ck_assert_int_eq(status, 0);
        ck_assert_uint_eq(outputs_n_included(o), 2);
        json_object_put(content);
}
END_TEST

static Suite *outputs_suite(void) {
        Suite *s = suite_create("outputs");
        TCase *tc = tcase_create("stream");

        tcase_add_test(tc, test_files_then_exit_status);
        tcase_add_test(tc, test_exit_status_is_a_byte);
        tcase_add_test(tc, test_ready_warm_imports_and_loaded);
        tcase_add_test(tc, test_no_status_until_the_record_is_whole);
        tcase_add_test(tc, test_malformed_stream_has_no_status);
        tcase_add_test(tc, test_payloads_dropped_after_the_content);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(outputs_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
