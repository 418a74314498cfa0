/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/capture.h"
#include "macro.h"

/* What capture_text() must give for a stream, computed the obvious way. */
static char *expected_text(const char *all, size_t n, size_t head_max, size_t tail_max) {
        char *s = NULL;

        if (n <= head_max + tail_max) {
                s = malloc(n + 1);
                ck_assert_ptr_nonnull(s);
                memcpy(s, all, n);
                s[n] = 0;
                return s;
        }

        /* The cut moves to a line boundary when one is near: the head back to the end of a line, the tail on
         * to the start of the next one (keeping at least one byte). */
        size_t head = head_max, start = n - tail_max;
        if (head > 0 && all[head - 1] != '\n') {
                const char *nl = memrchr(all + head_max - MIN(capture_near(head_max), head_max - 1) - 1, '\n',
                                         MIN(capture_near(head_max), head_max - 1));
                if (nl)
                        head = (size_t) (nl - all) + 1;
        }
        if (tail_max > 0 && all[start - 1] != '\n') {
                const char *nl = memchr(all + start, '\n', MIN(capture_near(tail_max), tail_max));
                if (nl && (size_t) (nl - all) + 1 < n)
                        start = (size_t) (nl - all) + 1;
        }
        size_t omitted = n - head - (n - start);
        const char *nl = head > 0 && all[head - 1] != '\n' ? "\n" : "";
        ck_assert_int_ge(asprintf(&s, "%.*s%s[... %zu bytes omitted ...]\n%.*s", (int) head, all, nl, omitted,
                                  (int) (n - start), all + start),
                         0);
        return s;
}

/* The bytes expected_text() says were omitted. */
static size_t expected_omitted(const char *text) {
        const char *m = strstr(text, "[... ");
        return m ? strtoull(m + 5, NULL, 10) : 0;
}

static void assert_capture(const Capture *c, const char *all, size_t n) {
        _cleanup_free_ char *want = expected_text(all, n, c->head_max, c->tail_max);
        size_t len = 0;
        _cleanup_free_ char *got = capture_text(c, &len);

        ck_assert_ptr_nonnull(got);
        ck_assert_uint_eq(c->total, n);
        ck_assert_uint_eq(len, strlen(want));
        ck_assert_mem_eq(got, want, len);
        ck_assert_int_eq(got[len], 0);
        ck_assert_uint_eq(capture_omitted(c), expected_omitted(want));
}

/* A deterministic stream of printable bytes with newlines now and then. */
static char *stream(size_t n, unsigned seed) {
        char *s = malloc(n + 1);

        ck_assert_ptr_nonnull(s);
        for (size_t i = 0; i < n; i++) {
                seed = seed * 1103515245u + 12345u;
                s[i] = (seed >> 16) % 17 == 0 ? '\n' : (char) ('!' + (seed >> 16) % 90);
        }
        s[n] = 0;
        return s;
}

START_TEST(test_short_output) {
        Capture c;
        size_t len;

        ck_assert_int_eq(capture_init(&c, 16, 16), 0);
        _cleanup_free_ char *empty = capture_text(&c, &len);
        ck_assert_str_eq(empty, "");
        ck_assert_uint_eq(len, 0);

        capture_add(&c, "hello\n", 6);
        ck_assert_uint_eq(capture_omitted(&c), 0);
        _cleanup_free_ char *t = capture_text(&c, &len);
        ck_assert_str_eq(t, "hello\n");
        ck_assert_uint_eq(len, 6);

        /* ret_len is optional. */
        _cleanup_free_ char *t2 = capture_text(&c, NULL);
        ck_assert_str_eq(t2, "hello\n");
        capture_done(&c);
}
END_TEST

START_TEST(test_exactly_head_plus_tail) {
        static const char all[] = "0123456789abcdefghij";
        Capture c;

        /* Everything fits in head and tail together: nothing omitted, no marker. */
        ck_assert_int_eq(capture_init(&c, 8, 12), 0);
        capture_add(&c, all, 20);
        ck_assert_uint_eq(capture_omitted(&c), 0);
        _cleanup_free_ char *t = capture_text(&c, NULL);
        ck_assert_str_eq(t, all);
        ck_assert_ptr_null(strstr(t, "omitted"));
        capture_done(&c);
}
END_TEST

START_TEST(test_head_tail_omitted) {
        Capture c;
        char all[100];

        for (size_t i = 0; i < sizeof(all); i++)
                all[i] = (char) ('0' + i % 10);

        ck_assert_int_eq(capture_init(&c, 10, 10), 0);
        capture_add(&c, all, sizeof(all));
        ck_assert_uint_eq(c.total, 100);
        ck_assert_uint_eq(capture_omitted(&c), 80);
        _cleanup_free_ char *t = capture_text(&c, NULL);
        ck_assert_str_eq(t, "0123456789\n[... 80 bytes omitted ...]\n0123456789");
        assert_capture(&c, all, sizeof(all));
        capture_done(&c);
}
END_TEST

START_TEST(test_marker_after_newline) {
        static const char all[] = "line one\nmiddle that is dropped\nlast line\n";
        Capture c;

        /* The head ends a line: the marker needs no newline of its own before it. */
        ck_assert_int_eq(capture_init(&c, 9, 10), 0);
        capture_add(&c, all, strlen(all));
        _cleanup_free_ char *t = capture_text(&c, NULL);
        ck_assert_str_eq(t, "line one\n[... 23 bytes omitted ...]\nlast line\n");
        capture_done(&c);
}
END_TEST

START_TEST(test_cut_at_line_boundaries) {
        /* 40 lines "line NN of the output\n" (22 bytes each); head 100 and tail 100 bytes kept at most. */
        char all[40 * 22 + 1];
        Capture c;

        for (int i = 0; i < 40; i++)
                snprintf(all + i * 22, 23, "line %02d of the output\n", i);
        ck_assert_int_eq(capture_init(&c, 100, 100), 0);
        capture_add(&c, all, strlen(all));
        _cleanup_free_ char *t = capture_text(&c, NULL);
        /* Whole lines only: 4 at the head (88 bytes), 4 at the tail (the partial 5th from the end dropped). */
        ck_assert_str_eq(t,
                         "line 00 of the output\nline 01 of the output\nline 02 of the output\nline 03 of the output\n"
                         "[... 704 bytes omitted ...]\n"
                         "line 36 of the output\nline 37 of the output\nline 38 of the output\nline 39 of the output\n");
        ck_assert_uint_eq(capture_omitted(&c), 40 * 22 - 8 * 22);
        capture_done(&c);

        /* One long line: no boundary near, so the cut stays where the bytes ran out. */
        char one[1000];
        memset(one, 'x', sizeof(one));
        ck_assert_int_eq(capture_init(&c, 100, 100), 0);
        capture_add(&c, one, sizeof(one));
        ck_assert_uint_eq(capture_omitted(&c), 800);
        capture_done(&c);
}
END_TEST

START_TEST(test_marker_counts_large) {
        Capture c;
        char chunk[65536];

        /* More than 4 GiB through: the count is 64-bit. */
        memset(chunk, 'm', sizeof(chunk));
        ck_assert_int_eq(capture_init(&c, 4, 4), 0);
        for (unsigned i = 0; i < 70000; i++)
                capture_add(&c, chunk, sizeof(chunk));
        ck_assert_uint_eq(c.total, (uint64_t) 70000 * sizeof(chunk));
        ck_assert_uint_eq(capture_omitted(&c), (uint64_t) 70000 * sizeof(chunk) - 8);
        _cleanup_free_ char *t = capture_text(&c, NULL);
        char want[128];
        snprintf(want, sizeof(want), "mmmm\n[... %" PRIu64 " bytes omitted ...]\nmmmm",
                 (uint64_t) 70000 * sizeof(chunk) - 8);
        ck_assert_str_eq(t, want);
        capture_done(&c);
}
END_TEST

START_TEST(test_many_small_writes) {
        static const size_t sizes[] = { 1, 2, 3, 5, 7, 13 };
        static const size_t tails[] = { 1, 7, 8, 64, 100 };
        enum { N = 10007 };

        for (size_t t = 0; t < ELEMENTSOF(tails); t++)
                for (size_t k = 0; k < ELEMENTSOF(sizes); k++) {
                        _cleanup_free_ char *all = stream(N, (unsigned) (t * 31 + k));
                        Capture c;

                        ck_assert_int_eq(capture_init(&c, 50, tails[t]), 0);
                        for (size_t off = 0; off < N; off += sizes[k]) {
                                capture_add(&c, all + off, MIN(sizes[k], (size_t) N - off));
                                /* Check along the way too, not only at the end. */
                                if (off % 997 == 0)
                                        assert_capture(&c, all, MIN(off + sizes[k], (size_t) N));
                        }
                        assert_capture(&c, all, N);
                        capture_done(&c);
                }
}
END_TEST

START_TEST(test_varied_writes) {
        enum { N = 200000 };
        _cleanup_free_ char *all = stream(N, 7);
        unsigned seed = 42;
        size_t off = 0;
        Capture c;

        /* Writes smaller than, equal to and larger than the tail, in a mixed order. */
        ck_assert_int_eq(capture_init(&c, 100, 1000), 0);
        while (off < N) {
                seed = seed * 1103515245u + 12345u;
                size_t n = MIN((size_t) ((seed >> 16) % 2500), (size_t) N - off);
                if ((seed >> 8) % 7 == 0)
                        n = MIN((size_t) 1000, (size_t) N - off);
                capture_add(&c, all + off, n);
                off += n;
                assert_capture(&c, all, off);
        }
        capture_done(&c);
}
END_TEST

START_TEST(test_one_huge_write) {
        enum { N = 1 << 20 };
        _cleanup_free_ char *all = stream(N, 3);
        Capture c;

        /* All at once. */
        ck_assert_int_eq(capture_init(&c, 1000, 2000), 0);
        capture_add(&c, all, N);
        assert_capture(&c, all, N);
        capture_done(&c);

        /* After the ring has wrapped, a write larger than the tail replaces it. */
        ck_assert_int_eq(capture_init(&c, 10, 100), 0);
        size_t off = 0;
        for (; off < 1234; off += 3)
                capture_add(&c, all + off, 3);
        capture_add(&c, all + off, 5000);
        off += 5000;
        assert_capture(&c, all, off);

        /* And small writes after the huge one go on from there. */
        for (unsigned i = 0; i < 37; i++, off += 11)
                capture_add(&c, all + off, 11);
        assert_capture(&c, all, off);

        /* A write of exactly the tail size. */
        capture_add(&c, all + off, 100);
        off += 100;
        assert_capture(&c, all, off);
        capture_done(&c);
}
END_TEST

START_TEST(test_write_spanning_head_and_tail) {
        static const char all[] = "HEADbodybodybodyTAIL";
        Capture c;

        /* One write fills the rest of the head and lands in the tail. */
        ck_assert_int_eq(capture_init(&c, 4, 4), 0);
        capture_add(&c, "HE", 2);
        capture_add(&c, all + 2, sizeof(all) - 3);
        _cleanup_free_ char *t = capture_text(&c, NULL);
        ck_assert_str_eq(t, "HEAD\n[... 12 bytes omitted ...]\nTAIL");
        capture_done(&c);
}
END_TEST

START_TEST(test_no_tail) {
        Capture c;

        ck_assert_int_eq(capture_init(&c, 5, 0), 0);
        capture_add(&c, "abcdefghij", 10);
        ck_assert_uint_eq(capture_omitted(&c), 5);
        _cleanup_free_ char *t = capture_text(&c, NULL);
        ck_assert_str_eq(t, "abcde\n[... 5 bytes omitted ...]\n");
        capture_done(&c);
}
END_TEST

START_TEST(test_no_head) {
        Capture c;

        ck_assert_int_eq(capture_init(&c, 0, 3), 0);
        capture_add(&c, "abcdefghij", 10);
        ck_assert_uint_eq(capture_omitted(&c), 7);
        _cleanup_free_ char *t = capture_text(&c, NULL);
        ck_assert_str_eq(t, "[... 7 bytes omitted ...]\nhij");
        capture_done(&c);
}
END_TEST

START_TEST(test_binary_bytes) {
        static const char all[] = "a\0b\0c\0d\0e\0f";
        Capture c;
        size_t len;

        /* NUL bytes are kept as they are; the length tells where the text ends. */
        ck_assert_int_eq(capture_init(&c, 2, 2), 0);
        capture_add(&c, all, sizeof(all) - 1);
        _cleanup_free_ char *t = capture_text(&c, &len);
        static const char want[] = "a\0\n[... 7 bytes omitted ...]\n\0f";
        ck_assert_uint_eq(len, sizeof(want) - 1);
        ck_assert_mem_eq(t, want, len);
        capture_done(&c);
}
END_TEST

START_TEST(test_done_twice) {
        Capture c;

        ck_assert_int_eq(capture_init(&c, 8, 8), 0);
        capture_add(&c, "x", 1);
        capture_done(&c);
        capture_done(&c);
        ck_assert_ptr_null(c.head);
        ck_assert_ptr_null(c.tail);
}
END_TEST

static Suite *capture_suite(void) {
        Suite *s = suite_create("capture");
        TCase *tc = tcase_create("core");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_short_output);
        tcase_add_test(tc, test_exactly_head_plus_tail);
        tcase_add_test(tc, test_head_tail_omitted);
        tcase_add_test(tc, test_marker_after_newline);
        tcase_add_test(tc, test_cut_at_line_boundaries);
        tcase_add_test(tc, test_marker_counts_large);
        tcase_add_test(tc, test_many_small_writes);
        tcase_add_test(tc, test_varied_writes);
        tcase_add_test(tc, test_one_huge_write);
        tcase_add_test(tc, test_write_spanning_head_and_tail);
        tcase_add_test(tc, test_no_tail);
        tcase_add_test(tc, test_no_head);
        tcase_add_test(tc, test_binary_bytes);
        tcase_add_test(tc, test_done_twice);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(capture_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
