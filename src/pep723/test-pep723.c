/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "pep723/pep723.h"
#include "pep723/toml-subset.h"

static Pep723Block extract(const char *script) {
        _cleanup_free_ char *error = NULL;
        Pep723Block b = {};

        ck_assert_msg(pep723_extract(script, strlen(script), &b, &error) == 0,
                      "extraction failed: %s", strempty(error));
        ck_assert_ptr_null(error);
        return b;
}

static void assert_block(const char *script, const char *toml, unsigned start, unsigned end) {
        _cleanup_(pep723_block_done) Pep723Block b = extract(script);

        ck_assert_ptr_nonnull(b.toml);
        ck_assert_str_eq(b.toml, toml);
        ck_assert_uint_eq(b.start_line, start);
        ck_assert_uint_eq(b.end_line, end);
}

static void assert_no_block(const char *script) {
        _cleanup_(pep723_block_done) Pep723Block b = extract(script);

        ck_assert_ptr_null(b.toml);
        ck_assert_uint_eq(b.start_line, 0);
        ck_assert_uint_eq(b.end_line, 0);
}

static void assert_error(const char *script, size_t len, const char *message) {
        _cleanup_free_ char *error = NULL;
        Pep723Block b = {};

        ck_assert_int_eq(pep723_extract(script, len, &b, &error), -EINVAL);
        ck_assert_ptr_null(b.toml);
        ck_assert_ptr_nonnull(error);
        ck_assert_str_eq(error, message);
}

/* An error whose text contains each of the fragments. */
static void assert_refused(const char *script, const char *fragment, const char *fragment2) {
        _cleanup_free_ char *error = NULL;
        Pep723Block b = {};

        ck_assert_int_eq(pep723_extract(script, strlen(script), &b, &error), -EINVAL);
        ck_assert_ptr_null(b.toml);
        ck_assert_ptr_nonnull(error);
        ck_assert_msg(strstr(error, fragment), "'%s' not in '%s'", fragment, error);
        ck_assert_msg(!fragment2 || strstr(error, fragment2), "'%s' not in '%s'", strempty(fragment2), error);
}

START_TEST(test_simple) {
        assert_block("# /// script\n"
                     "# dependencies = [\"requests<3\", \"rich\"]\n"
                     "# requires-python = \">=3.11\"\n"
                     "# ///\n"
                     "import requests\n",
                     "dependencies = [\"requests<3\", \"rich\"]\n"
                     "requires-python = \">=3.11\"\n",
                     1, 4);

        /* At the very end, without a final newline. */
        assert_block("import sys\n# /// script\n# dependencies = []\n# ///", "dependencies = []\n", 2, 4);

        /* An empty block is a block with empty content. */
        assert_block("# /// script\n# ///\nprint(1)\n", "", 1, 2);
}
END_TEST

START_TEST(test_no_block) {
        assert_no_block("");
        assert_no_block("print('hello')\n");
        assert_no_block("# just a comment\n# ///\n");
        assert_no_block("\n\n\n");

        _cleanup_(pep723_block_done) Pep723Block b = {};
        ck_assert_int_eq(pep723_extract(NULL, 0, &b, NULL), 0);
        ck_assert_ptr_null(b.toml);
        ck_assert_int_eq(pep723_extract(NULL, 1, &b, NULL), -EINVAL);
        ck_assert_int_eq(pep723_extract("", 0, NULL, NULL), -EINVAL);
}
END_TEST

START_TEST(test_shebang_and_position) {
        assert_block("#!/usr/bin/env -S uv run --script\n"
                     "# -*- coding: utf-8 -*-\n"
                     "# /// script\n"
                     "# dependencies = []\n"
                     "# ///\n"
                     "\n"
                     "print(1)\n",
                     "dependencies = []\n", 3, 5);

        /* After code, too: only the column matters. */
        assert_block("import os\n\nx = 1\n# /// script\n# a = 1\n# ///\ny = 2\n", "a = 1\n", 4, 6);

        /* Not at the start of the line. */
        assert_no_block("x = 1  # /// script\n# a = 1\n# ///\n");
        assert_refused(" # /// script\n# a = 1\n# ///\n", "it is indented", NULL);
        assert_refused("\t# /// script\n# a = 1\n# ///\n", "it is indented", NULL);
        assert_refused("def f():\n    # /// script\n    # a = 1\n    # ///\n    pass\n", "line 2 looks like", NULL);

        /* A textual scan: a block inside a string literal still counts. */
        assert_block("s = '''\n# /// script\n# a = 1\n# ///\n'''\n", "a = 1\n", 2, 4);
}
END_TEST

START_TEST(test_opening_line) {
        assert_no_block("# ///script\n# a = 1\n# ///\n");
        assert_no_block("#  /// script\n# a = 1\n# ///\n");
        assert_no_block("## /// script\n# a = 1\n# ///\n");
        assert_no_block("# // script\n# a = 1\n# ///\n");
        assert_no_block("# //// script\n# a = 1\n# ///\n");
        assert_refused("# /// script \n# a = 1\n# ///\n", "blanks after 'script'", NULL);
        assert_no_block("# /// script x\n# a = 1\n# ///\n");
        assert_no_block("# /// scripts\n# a = 1\n# ///\n");
        assert_no_block("# /// Script\n# a = 1\n# ///\n");
        assert_no_block("# /// my_type\n# a = 1\n# ///\n");
        assert_no_block("# /// \n# a = 1\n# ///\n");
}
END_TEST

START_TEST(test_content_lines) {
        /* "#" alone is an empty line, "# " is stripped, further spaces are kept. */
        assert_block("# /// script\n#\n# a = 1\n#   b = 2\n# \n#\n# ///\n", "\na = 1\n  b = 2\n\n\n", 1, 7);

        /* "#text" is not a content line: it ends the run, and the block is not closed. */
        assert_refused("# /// script\n#a = 1\n# ///\n", "block on line 1 is not closed: line 2 ends it because it "
                       "starts with '#' but not with '# '", NULL);
        assert_refused("# /// script\n# a = 1\n#a = 2\n# ///\n", "line 3 ends it because it starts with '#' but not", NULL);

        /* A blank or code line ends the run too. */
        assert_refused("# /// script\n# a = 1\n\n# ///\n", "line 3 ends it because it does not start with '#'", NULL);
        assert_refused("# /// script\n# a = 1\nx = 1\n# ///\n", "line 3 ends it because it does not start with '#'", NULL);

        /* "# ///" with anything after it is a content line, not a closing line. */
        assert_refused("# /// script\n# a = 1\n# /// \nx\n",
                       "line 3 is not a closing line because it has more after '# ///'", "exactly '# ///'");
        assert_refused("# /// script\n# a = 1\n# ////\nx\n", "line 3 is not a closing line", NULL);
}
END_TEST

START_TEST(test_closing_precedence) {
        /* "# /// x" lines may appear in the content. */
        assert_block("# /// script\n"
                     "# text = '''\n"
                     "# /// example\n"
                     "# '''\n"
                     "# ///\n",
                     "text = '''\n/// example\n'''\n", 1, 5);

        /* The last "# ///" of the run closes the block; earlier ones are content. */
        assert_block("# /// script\n# a = 1\n# ///\n# b = 2\n# ///\nx = 1\n", "a = 1\n///\nb = 2\n", 1, 5);
        assert_block("# /// script\n# ///\n# ///\n", "///\n", 1, 3);

        /* Comment lines after the closing line are outside the block (uv and the PEP's regex agree). */
        assert_block("# /// script\n# dependencies = [\"rich\"]\n# ///\n# Run with: uv run x.py\nimport rich\n",
                     "dependencies = [\"rich\"]\n", 1, 3);
        assert_block("# /// script\n# a = 1\n# ///\n#\n# ruff: noqa\nimport x\n", "a = 1\n", 1, 3);
        assert_block("# /// script\n# a = 1\n# ///\n# ///\n# x\n", "a = 1\n///\n", 1, 4);
        assert_block("# /// script\n# a = 1\n# ///\n#\n", "a = 1\n", 1, 3);
        assert_block("# /// script\n# ///\n# x\n", "", 1, 2);

        /* Two blocks in one run of comment lines are one block, up to the last "# ///". */
        assert_block("# /// script\n# a = 1\n# ///\n# /// script\n# b = 2\n# ///\n# x\n",
                     "a = 1\n///\n/// script\nb = 2\n", 1, 6);
        /* What follows the closing line is read again: an opening line there opens a block. */
        assert_refused("# /// script\n# a = 1\n# ///\n# /// script\n# b = 2\nx\n", "block on line 4 is not closed", NULL);
}
END_TEST

START_TEST(test_crlf) {
        assert_block("#!/usr/bin/env python3\r\n"
                     "# /// script\r\n"
                     "# dependencies = [\r\n"
                     "#   \"numpy\",\r\n"
                     "# ]\r\n"
                     "#\r\n"
                     "# ///\r\n"
                     "print(1)\r\n",
                     "dependencies = [\n  \"numpy\",\n]\n\n", 2, 7);

        /* Mixed endings. */
        assert_block("# /// script\r\n# a = 1\n# ///\r\n", "a = 1\n", 1, 3);
        assert_block("# /// script\r\n# a = 1\r\n# ///", "a = 1\n", 1, 3);
        assert_block("# /// script\r\n# a = 1\r\n# ///\r\n# uv run x.py\r\n", "a = 1\n", 1, 3);

        /* Only one "\r" before "\n" is a line ending; others stay. */
        assert_refused("# /// script\r\n# a = 1\r\n# ///\r\r\n#\n", "line 3 is not a closing line", NULL);
}
END_TEST

START_TEST(test_two_blocks) {
        static const char two[] = "# /// script\n# a = 1\n# ///\n\nx = 1\n# /// script\n# b = 2\n# ///\n";
        static const char two_crlf[] = "# /// script\r\n# ///\r\n\r\n# /// script\r\n# ///\r\n";

        assert_error(two, strlen(two), "the script has two '# /// script' metadata blocks (lines 1 and 6); merge them into one");
        assert_error(two_crlf, strlen(two_crlf),
                     "the script has two '# /// script' metadata blocks (lines 1 and 4); merge them into one");

        /* Without ret_error. */
        Pep723Block b = {};
        ck_assert_int_eq(pep723_extract(two, strlen(two), &b, NULL), -EINVAL);
        ck_assert_ptr_null(b.toml);
}
END_TEST

START_TEST(test_other_types) {
        /* Blocks of other types are skipped. */
        assert_block("# /// pyproject\n# [project]\n# name = 'x'\n# ///\n\n# /// script\n# a = 1\n# ///\n",
                     "a = 1\n", 6, 8);
        assert_block("# /// script\n# a = 1\n# ///\n\n# /// my-tool2\n# b = 2\n# ///\n", "a = 1\n", 1, 3);

        /* A "# /// script" line inside a block of another type is its content. */
        assert_no_block("# /// other\n# /// script\n# a = 1\n# ///\n");

        /* Two blocks of another type are not our business; an unclosed one is not reported. */
        assert_no_block("# /// other\n# ///\n\n# /// other\n# ///\n");
        assert_no_block("# /// other\n# a = 1\n");
}
END_TEST

START_TEST(test_unclosed) {
        assert_refused("# /// script\n# dependencies = []\nimport x\n",
                       "the '# /// script' metadata block on line 1 is not closed: line 3 ends it because it does not "
                       "start with '#'; start every line of the block with '# ' (or a bare '#', for an empty line) and "
                       "end it with a line that is exactly '# ///'",
                       NULL);
        assert_refused("# /// script", "block on line 1 is not closed: the script ends before a line that is exactly '# ///'",
                       NULL);
        assert_refused("# /// script\n", "the script ends before", NULL);
        assert_refused("x = 1\n# /// script\nx = 2\n", "block on line 2 is not closed: line 3 ends it", NULL);

        /* Refused even when a complete block follows: uv refuses it too, and the author meant one of them. */
        assert_refused("# /// script\n# a = 1\n\n# /// script\n# b = 2\n# ///\n", "block on line 1 is not closed", NULL);
}
END_TEST

START_TEST(test_near_miss) {
        assert_refused("# /// script \n# a = 1\n# ///\n",
                       "line 1 looks like the start of a '# /// script' metadata block, but it has blanks after "
                       "'script', so uv and every other reader ignore the block; write that line as exactly "
                       "'# /// script', at the start of the line",
                       NULL);
        assert_refused("  # /// script\n  # a = 1\n  # ///\n", "line 1 looks like the start", "it is indented");
        assert_refused("x = 1\n\t# /// script\t\n", "line 2 looks like the start", "it is indented");

        /* Inside a block it is content; mid-line it is not an opening at all. */
        assert_block("# /// script\n# s = '# /// script '\n#  # /// script\n# ///\n",
                     "s = '# /// script '\n # /// script\n", 1, 4);
        assert_no_block("x = 1  # /// script\n");
        assert_no_block("# /// scripts \n");
}
END_TEST

START_TEST(test_nul_byte) {
        static const char script[] = "# /// script\n# a = 1\0\n# ///\n";
        static const char nul_first[] = "\0";

        assert_error(script, sizeof(script) - 1, "the script contains a NUL byte on line 2");
        assert_error(nul_first, 1, "the script contains a NUL byte on line 1");

        /* len bounds the script: a NUL after it is not looked at. */
        assert_block("# /// script\n# ///\n", "", 1, 2);
        Pep723Block b = {};
        ck_assert_int_eq(pep723_extract(script, 13, &b, NULL), -EINVAL);
        ck_assert_ptr_null(b.toml);
        pep723_block_done(NULL);
}
END_TEST

START_TEST(test_large) {
        /* Many lines, one block at the end. */
        size_t n = 200000;
        _cleanup_free_ char *s = malloc(n * 2 + 64);
        _cleanup_(pep723_block_done) Pep723Block b = {};
        size_t k;

        ck_assert_ptr_nonnull(s);
        for (k = 0; k < n * 2; k += 2)
                memcpy(s + k, "#\n", 2);
        k += (size_t) sprintf(s + k, "x\n# /// script\n# a = 1\n# ///\n");

        ck_assert_int_eq(pep723_extract(s, k, &b, NULL), 0);
        ck_assert_str_eq(b.toml, "a = 1\n");
        ck_assert_uint_eq(b.start_line, n + 2);

        /* Many opening lines in one run of comment lines, none closed, then one closed after them: each line is
         * looked at a bounded number of times (quadratic work here would not finish in the test's time). */
        _cleanup_free_ char *t = malloc(n * 8 + 64);
        _cleanup_free_ char *error = NULL;
        _cleanup_(pep723_block_done) Pep723Block c = {};
        ck_assert_ptr_nonnull(t);
        for (k = 0; k < n * 8; k += 8)
                memcpy(t + k, "# /// a\n", 8);
        k += (size_t) sprintf(t + k, "x\n# /// a\n# ///\n# x\n");
        ck_assert_int_eq(pep723_extract(t, k, &c, NULL), 0);
        ck_assert_ptr_null(c.toml);
        /* The same with a script block among them: inside the run of another type's unclosed block, unclosed too. */
        for (k = 0; k < n * 4; k += 8)
                memcpy(t + k, "# /// a\n", 8);
        k += (size_t) sprintf(t + k, "# /// script\n");
        for (size_t m = 0; m < n / 2; m++, k += 8)
                memcpy(t + k, "# /// a\n", 8);
        ck_assert_int_eq(pep723_extract(t, k, &c, &error), -EINVAL);
        ck_assert_ptr_nonnull(strstr(error, "the '# /// script' metadata block on line 100001 is not closed"));
}
END_TEST

/* What the daemon reads itself is bounded: one item or one byte over its caps, and the block goes to tomllib. */
static int subset_items(size_t n, size_t *ret_n) {
        _cleanup_free_ char *text = malloc(32 + 4 * n);
        json_object *doc = NULL, *deps;
        int k;

        ck_assert_ptr_nonnull(text);
        strcpy(text, "dependencies = [");
        for (size_t i = 0; i < n; i++)
                strcat(text, "'a',");
        strcat(text, "]\n");
        k = toml_subset_parse(text, &doc);
        if (k > 0) {
                ck_assert(json_object_object_get_ex(doc, "dependencies", &deps));
                *ret_n = json_object_array_length(deps);
        }
        json_object_put(doc);
        return k;
}

static int subset_bytes(size_t n) {
        _cleanup_free_ char *text = malloc(n + 1);
        json_object *doc = NULL;
        int k;

        ck_assert_ptr_nonnull(text);
        strcpy(text, "dependencies = []\n#");
        memset(text + strlen(text), 'x', n - strlen(text) - 1);
        text[n - 1] = '\n';
        text[n] = 0;
        k = toml_subset_parse(text, &doc);
        json_object_put(doc);
        return k;
}

START_TEST(test_subset_caps) {
        size_t n = 0;

        ck_assert_int_eq(subset_items(TOML_SUBSET_MAX_ITEMS, &n), 1);
        ck_assert_uint_eq(n, TOML_SUBSET_MAX_ITEMS);
        ck_assert_int_eq(subset_items(TOML_SUBSET_MAX_ITEMS + 1, &n), 0);
        ck_assert_int_eq(subset_bytes(TOML_SUBSET_MAX_BYTES), 1);
        ck_assert_int_eq(subset_bytes(TOML_SUBSET_MAX_BYTES + 1), 0);
}
END_TEST

static Suite *pep723_suite(void) {
        Suite *s = suite_create("pep723");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_simple);
        tcase_add_test(tc, test_no_block);
        tcase_add_test(tc, test_shebang_and_position);
        tcase_add_test(tc, test_opening_line);
        tcase_add_test(tc, test_content_lines);
        tcase_add_test(tc, test_closing_precedence);
        tcase_add_test(tc, test_crlf);
        tcase_add_test(tc, test_two_blocks);
        tcase_add_test(tc, test_other_types);
        tcase_add_test(tc, test_unclosed);
        tcase_add_test(tc, test_near_miss);
        tcase_add_test(tc, test_nul_byte);
        tcase_add_test(tc, test_subset_caps);
        tcase_add_test(tc, test_large);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(pep723_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
