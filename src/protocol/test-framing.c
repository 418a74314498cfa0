/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "protocol/framing.h"

/* Feeds text and checks framing_next() gives nothing yet. */
static void feed(Framing *f, const char *s) {
        ck_assert_int_eq(framing_feed(f, s, strlen(s)), 0);
}

static void expect_line(Framing *f, const char *want) {
        char *line = NULL;
        size_t len = 0;

        ck_assert_int_eq(framing_next(f, &line, &len), FRAMING_LINE);
        ck_assert_uint_eq(len, strlen(want));
        ck_assert_mem_eq(line, want, len);
        ck_assert_int_eq(line[len], 0);
}

static void expect_need_more(Framing *f) {
        char *line = NULL;
        size_t len = 0;

        ck_assert_int_eq(framing_next(f, &line, &len), FRAMING_NEED_MORE);
}

/* Drains every result framing_next() has now; counts lines and oversize reports. */
static void drain(Framing *f, unsigned *n_lines, unsigned *n_oversize, char *last, size_t last_size) {
        char *line;
        size_t len;
        int r;

        while ((r = framing_next(f, &line, &len)) != FRAMING_NEED_MORE) {
                if (r == FRAMING_OVERSIZE) {
                        (*n_oversize)++;
                        continue;
                }
                ck_assert_int_eq(r, FRAMING_LINE);
                (*n_lines)++;
                if (last)
                        snprintf(last, last_size, "%.*s", (int) len, line);
        }
}

START_TEST(test_single_line) {
        Framing f;

        framing_init(&f, 1024);
        expect_need_more(&f);
        feed(&f, "{\"a\":1}\n");
        expect_line(&f, "{\"a\":1}");
        expect_need_more(&f);
        ck_assert_uint_eq(framing_pending(&f), 0);
        framing_done(&f);
}
END_TEST

START_TEST(test_byte_by_byte) {
        static const char msg[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
        Framing f;

        framing_init(&f, 1024);
        for (size_t i = 0; i < strlen(msg) - 1; i++) {
                ck_assert_int_eq(framing_feed(&f, msg + i, 1), 0);
                expect_need_more(&f);
                ck_assert_uint_eq(framing_pending(&f), i + 1);
        }
        ck_assert_int_eq(framing_feed(&f, "\n", 1), 0);
        expect_line(&f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
        expect_need_more(&f);
        framing_done(&f);
}
END_TEST

START_TEST(test_several_in_one_chunk) {
        Framing f;

        framing_init(&f, 1024);
        feed(&f, "one\ntwo\nthree\nfour");
        expect_line(&f, "one");
        expect_line(&f, "two");
        expect_line(&f, "three");
        expect_need_more(&f);
        ck_assert_uint_eq(framing_pending(&f), 4);
        feed(&f, "\n");
        expect_line(&f, "four");
        expect_need_more(&f);
        framing_done(&f);
}
END_TEST

START_TEST(test_split_across_many_chunks) {
        char msg[5000], *line;
        size_t len;
        Framing f;

        for (size_t i = 0; i < sizeof(msg) - 1; i++)
                msg[i] = (char) ('a' + i % 26);
        msg[sizeof(msg) - 1] = '\n';

        framing_init(&f, sizeof(msg));
        for (size_t off = 0; off < sizeof(msg); off += 7) {
                size_t n = MIN((size_t) 7, sizeof(msg) - off);
                ck_assert_int_eq(framing_feed(&f, msg + off, n), 0);
                if (off + n < sizeof(msg))
                        expect_need_more(&f);
        }
        ck_assert_int_eq(framing_next(&f, &line, &len), FRAMING_LINE);
        ck_assert_uint_eq(len, sizeof(msg) - 1);
        ck_assert_mem_eq(line, msg, len);
        expect_need_more(&f);
        framing_done(&f);
}
END_TEST

START_TEST(test_reserve_commit) {
        char *p;
        Framing f;

        /* The way the session reads: straight into the reader's memory, short reads. */
        framing_init(&f, 1024);
        ck_assert_int_eq(framing_reserve(&f, 64, &p), 0);
        memcpy(p, "abc\nde", 6);
        framing_commit(&f, 6);
        expect_line(&f, "abc");
        expect_need_more(&f);
        ck_assert_int_eq(framing_reserve(&f, 64, &p), 0);
        memcpy(p, "f\r\n", 3);
        framing_commit(&f, 3);
        expect_line(&f, "def");
        ck_assert_int_eq(framing_reserve(&f, 64, &p), 0);
        framing_commit(&f, 0);
        expect_need_more(&f);
        framing_done(&f);
}
END_TEST

START_TEST(test_crlf) {
        Framing f;

        framing_init(&f, 1024);
        feed(&f, "a\r\nb\r\n");
        expect_line(&f, "a");
        expect_line(&f, "b");
        expect_need_more(&f);

        /* "\r" and "\n" in different reads. */
        feed(&f, "c\r");
        expect_need_more(&f);
        feed(&f, "\n");
        expect_line(&f, "c");

        /* Only a CR right before the LF is part of the line ending. */
        feed(&f, "d\re\n\r\r\n");
        expect_line(&f, "d\re");
        expect_line(&f, "\r");
        expect_need_more(&f);
        framing_done(&f);
}
END_TEST

START_TEST(test_empty_lines) {
        Framing f;

        /* Empty lines come out as lines of length 0; the session skips them. */
        framing_init(&f, 1024);
        feed(&f, "\n\r\n\nx\n\n");
        expect_line(&f, "");
        expect_line(&f, "");
        expect_line(&f, "");
        expect_line(&f, "x");
        expect_line(&f, "");
        expect_need_more(&f);
        framing_done(&f);
}
END_TEST

START_TEST(test_limit_boundary) {
        char line[17];
        Framing f;

        memset(line, 'x', 16);
        line[16] = 0;

        framing_init(&f, 16);
        /* Exactly the limit is fine, whether the newline is here already or not. */
        feed(&f, line);
        expect_need_more(&f);
        feed(&f, "\n");
        expect_line(&f, line);

        /* One byte more is not. */
        feed(&f, line);
        feed(&f, "y\nok\n");
        char *l;
        size_t len;
        ck_assert_int_eq(framing_next(&f, &l, &len), FRAMING_OVERSIZE);
        expect_line(&f, "ok");
        expect_need_more(&f);
        framing_done(&f);
}
END_TEST

START_TEST(test_oversize_one_chunk) {
        char *line;
        size_t len;
        Framing f;

        framing_init(&f, 8);
        feed(&f, "0123456789abcdef\n{\"ok\":1}\n");
        ck_assert_int_eq(framing_next(&f, &line, &len), FRAMING_OVERSIZE);
        expect_line(&f, "{\"ok\":1}");
        expect_need_more(&f);

        /* Two oversize lines in a row: reported once each. */
        feed(&f, "0123456789\nabcdefghijk\nend\n");
        ck_assert_int_eq(framing_next(&f, &line, &len), FRAMING_OVERSIZE);
        ck_assert_int_eq(framing_next(&f, &line, &len), FRAMING_OVERSIZE);
        expect_line(&f, "end");
        expect_need_more(&f);
        framing_done(&f);
}
END_TEST

START_TEST(test_oversize_many_chunks) {
        unsigned n_lines = 0, n_oversize = 0;
        char chunk[10], last[64] = "";
        Framing f;

        memset(chunk, 'x', sizeof(chunk));
        framing_init(&f, 16);
        for (unsigned i = 0; i < 1000; i++) {
                ck_assert_int_eq(framing_feed(&f, chunk, sizeof(chunk)), 0);
                drain(&f, &n_lines, &n_oversize, NULL, 0);
                ck_assert_uint_le(framing_pending(&f), 16);
        }
        ck_assert_uint_eq(n_oversize, 1);
        ck_assert_uint_eq(n_lines, 0);

        /* The newline alone ends the discarded line; nothing comes out for it. */
        feed(&f, "\n");
        drain(&f, &n_lines, &n_oversize, last, sizeof(last));
        ck_assert_uint_eq(n_oversize, 1);
        ck_assert_uint_eq(n_lines, 0);

        feed(&f, "{\"next\":1}\n");
        drain(&f, &n_lines, &n_oversize, last, sizeof(last));
        ck_assert_uint_eq(n_oversize, 1);
        ck_assert_uint_eq(n_lines, 1);
        ck_assert_str_eq(last, "{\"next\":1}");
        framing_done(&f);
}
END_TEST

START_TEST(test_oversize_newline_with_next_message) {
        unsigned n_lines = 0, n_oversize = 0;
        char chunk[100], last[64] = "";
        Framing f;

        memset(chunk, 'x', sizeof(chunk));
        framing_init(&f, 32);
        for (unsigned i = 0; i < 5; i++) {
                ck_assert_int_eq(framing_feed(&f, chunk, sizeof(chunk)), 0);
                drain(&f, &n_lines, &n_oversize, NULL, 0);
        }
        ck_assert_uint_eq(n_oversize, 1);

        /* The end of the long line and the next message arrive together. */
        feed(&f, "xxxxxxx\n{\"id\":2}\n{\"id\":");
        drain(&f, &n_lines, &n_oversize, last, sizeof(last));
        ck_assert_uint_eq(n_oversize, 1);
        ck_assert_uint_eq(n_lines, 1);
        ck_assert_str_eq(last, "{\"id\":2}");

        feed(&f, "3}\n");
        drain(&f, &n_lines, &n_oversize, last, sizeof(last));
        ck_assert_uint_eq(n_lines, 2);
        ck_assert_str_eq(last, "{\"id\":3}");

        /* And the same when the newline is the first byte of a chunk. */
        for (unsigned i = 0; i < 3; i++) {
                ck_assert_int_eq(framing_feed(&f, chunk, sizeof(chunk)), 0);
                drain(&f, &n_lines, &n_oversize, NULL, 0);
        }
        ck_assert_uint_eq(n_oversize, 2);
        feed(&f, "\n{\"id\":4}\n");
        drain(&f, &n_lines, &n_oversize, last, sizeof(last));
        ck_assert_uint_eq(n_oversize, 2);
        ck_assert_uint_eq(n_lines, 3);
        ck_assert_str_eq(last, "{\"id\":4}");
        framing_done(&f);
}
END_TEST

START_TEST(test_memory_bounded_while_discarding) {
        enum { CHUNK = 4096, LIMIT = 1024 };
        unsigned n_lines = 0, n_oversize = 0;
        char last[64] = "";
        Framing f;

        /* 64 MiB without a newline, read the way the session reads. */
        framing_init(&f, LIMIT);
        for (unsigned i = 0; i < 16384; i++) {
                char *p;
                ck_assert_int_eq(framing_reserve(&f, CHUNK, &p), 0);
                memset(p, 'z', CHUNK);
                framing_commit(&f, CHUNK);
                drain(&f, &n_lines, &n_oversize, NULL, 0);
                ck_assert_uint_le(framing_pending(&f), LIMIT + CHUNK);
                ck_assert_uint_le(f.buf.allocated, 4 * (LIMIT + CHUNK));
        }
        ck_assert_uint_eq(n_oversize, 1);
        ck_assert_uint_eq(n_lines, 0);
        ck_assert_uint_eq(framing_pending(&f), 0);

        feed(&f, "\n{}\n");
        drain(&f, &n_lines, &n_oversize, last, sizeof(last));
        ck_assert_uint_eq(n_oversize, 1);
        ck_assert_uint_eq(n_lines, 1);
        ck_assert_str_eq(last, "{}");
        framing_done(&f);
}
END_TEST

START_TEST(test_finish) {
        char *line;
        size_t len;
        Framing f;

        /* Nothing at all. */
        framing_init(&f, 64);
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_NEED_MORE);
        framing_done(&f);

        /* Complete lines first, then the last one without a newline. */
        framing_init(&f, 64);
        feed(&f, "a\nb\nlast");
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_LINE);
        ck_assert_str_eq(line, "a");
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_LINE);
        ck_assert_str_eq(line, "b");
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_LINE);
        ck_assert_uint_eq(len, 4);
        ck_assert_str_eq(line, "last");
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_NEED_MORE);
        ck_assert_uint_eq(framing_pending(&f), 0);
        framing_done(&f);

        /* A trailing CR is dropped there too. */
        framing_init(&f, 64);
        feed(&f, "tail\r");
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_LINE);
        ck_assert_str_eq(line, "tail");
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_NEED_MORE);
        framing_done(&f);

        /* Input ending in a newline leaves nothing for finish. */
        framing_init(&f, 64);
        feed(&f, "x\n");
        expect_line(&f, "x");
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_NEED_MORE);
        framing_done(&f);

        /* The exact number of bytes a reservation allowed: still room for the NUL. */
        framing_init(&f, 8192);
        char *p;
        ck_assert_int_eq(framing_reserve(&f, 4096, &p), 0);
        memset(p, 'q', 4096);
        framing_commit(&f, 4096);
        expect_need_more(&f);
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_LINE);
        ck_assert_uint_eq(len, 4096);
        ck_assert_int_eq(line[4096], 0);
        framing_done(&f);
}
END_TEST

START_TEST(test_finish_oversize) {
        char *line, big[100];
        size_t len;
        Framing f;

        memset(big, 'x', sizeof(big));

        /* An oversize last line is reported, not returned. */
        framing_init(&f, 16);
        ck_assert_int_eq(framing_feed(&f, big, sizeof(big)), 0);
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_OVERSIZE);
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_NEED_MORE);
        framing_done(&f);

        /* The rest of a line being discarded is not a line at end of input. */
        framing_init(&f, 16);
        ck_assert_int_eq(framing_feed(&f, big, sizeof(big)), 0);
        ck_assert_int_eq(framing_next(&f, &line, &len), FRAMING_OVERSIZE);
        feed(&f, "short");
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_NEED_MORE);
        ck_assert_int_eq(framing_finish(&f, &line, &len), FRAMING_NEED_MORE);
        framing_done(&f);
}
END_TEST

START_TEST(test_done_twice) {
        Framing f;

        framing_init(&f, 16);
        feed(&f, "partial");
        framing_done(&f);
        framing_done(&f);
        ck_assert_uint_eq(framing_pending(&f), 0);
}
END_TEST

/* A line dropped by its reader before it ended (over the element budget): what is held goes, its rest is dropped as
 * it comes, without an oversize report, and the line after it comes whole. */
START_TEST(test_discard_line) {
        Framing f;

        framing_init(&f, 64);
        feed(&f, "{\"a\":[1,2,");
        expect_need_more(&f);
        framing_discard_line(&f);
        ck_assert_uint_eq(framing_pending(&f), 0);
        feed(&f, "3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29");
        expect_need_more(&f);
        ck_assert_uint_eq(framing_pending(&f), 0);
        feed(&f, "]}\n{\"b\":");
        expect_need_more(&f);
        feed(&f, "1}\n");
        expect_line(&f, "{\"b\":1}");
        expect_need_more(&f);
        framing_done(&f);
}
END_TEST

static Suite *framing_suite(void) {
        Suite *s = suite_create("framing");
        TCase *tc = tcase_create("core");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_single_line);
        tcase_add_test(tc, test_byte_by_byte);
        tcase_add_test(tc, test_several_in_one_chunk);
        tcase_add_test(tc, test_split_across_many_chunks);
        tcase_add_test(tc, test_reserve_commit);
        tcase_add_test(tc, test_crlf);
        tcase_add_test(tc, test_empty_lines);
        tcase_add_test(tc, test_limit_boundary);
        tcase_add_test(tc, test_oversize_one_chunk);
        tcase_add_test(tc, test_oversize_many_chunks);
        tcase_add_test(tc, test_oversize_newline_with_next_message);
        tcase_add_test(tc, test_memory_bounded_while_discarding);
        tcase_add_test(tc, test_finish);
        tcase_add_test(tc, test_finish_oversize);
        tcase_add_test(tc, test_done_twice);
        tcase_add_test(tc, test_discard_line);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(framing_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
