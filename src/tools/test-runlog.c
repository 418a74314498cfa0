/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "tools/runlog.h"

static const Tool fake_tool = { .name = "execute_python" };

/* What the records written by fn went to stderr as; malloc'd. */
static char *capture_stderr(void (*fn)(void)) {
        FILE *f = tmpfile();
        int saved = dup(STDERR_FILENO);
        char *text;
        long n;

        ck_assert_ptr_nonnull(f);
        ck_assert_int_ge(saved, 0);
        fflush(stderr);
        ck_assert_int_ge(dup2(fileno(f), STDERR_FILENO), 0);
        fn();
        fflush(stderr);
        ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
        close(saved);
        n = (long) lseek(fileno(f), 0, SEEK_END);
        ck_assert_int_ge(n, 0);
        text = calloc(1, (size_t) n + 1);
        ck_assert_ptr_nonnull(text);
        ck_assert_int_eq(pread(fileno(f), text, (size_t) n, 0), n);
        fclose(f);
        return text;
}

static void one_record(void) {
        ToolCall call = { .tool = &fake_tool, .uid = 1000, .pid = 4242 };
        RunLog l;

        runlog_begin(&l, &call, "print(1)\n", 9);
        runlog_add(&l, "MCP_VERDICT", "%s", "ok");
        runlog_add(&l, "MCP_ERROR", "%s", "two words, a \"quote\" and\na newline\\");
        runlog_add(&l, "MCP_EMPTY", "%s", "");
        runlog_add(&l, "MCP_CONTROL", "%s", "a\033bc");
        runlog_emit(&l, "execute_python for uid %u: ok.", 1000u);
        ck_assert_ptr_null(l.fields);
}

START_TEST(test_line_on_stderr) {
        _cleanup_free_ char *text = NULL;

        unsetenv("JOURNAL_STREAM");
        ck_assert(!runlog_to_journal());
        log_set_max_level(LOG_INFO);
        text = capture_stderr(one_record);
        /* sha256("print(1)\n") */
        ck_assert_str_eq(text,
                         "<6>execute_python for uid 1000: ok. MCP_TOOL=execute_python MCP_PEER_UID=1000 "
                         "MCP_PEER_PID=4242 "
                         "MCP_SCRIPT_SHA256=cc42155088fca5730758db72b2a5bca33112a941dfaa2d43098ec422ce4ea213 "
                         "MCP_SCRIPT_BYTES=9 MCP_VERDICT=ok "
                         "MCP_ERROR=\"two words, a \\\"quote\\\" and\\na newline\\\\\" MCP_EMPTY=\"\" "
                         "MCP_CONTROL=\"a\\033bc\"\n");
}
END_TEST

START_TEST(test_below_log_level) {
        _cleanup_free_ char *text = NULL;

        unsetenv("JOURNAL_STREAM");
        log_set_max_level(LOG_NOTICE);
        text = capture_stderr(one_record);
        ck_assert_str_eq(text, "");
        log_set_max_level(LOG_INFO);
}
END_TEST

static void long_record(void) {
        ToolCall call = { .tool = &fake_tool };
        char big[4000];
        RunLog l;

        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        runlog_begin(&l, &call, "", 0);
        runlog_add(&l, "MCP_ERROR", "%s", big);
        /* "é" (2 bytes) across the cut at 1021: cut before it, not in it. */
        memcpy(big + 1020, "\xc3\xa9", 2);
        runlog_add(&l, "MCP_UTF8", "%s", big);
        runlog_emit(&l, "m");
}

START_TEST(test_long_value_is_cut) {
        _cleanup_free_ char *text = NULL;
        const char *v;

        unsetenv("JOURNAL_STREAM");
        log_set_max_level(LOG_INFO);
        text = capture_stderr(long_record);
        v = strstr(text, "MCP_ERROR=");
        ck_assert_ptr_nonnull(v);
        v += strlen("MCP_ERROR=");
        ck_assert_uint_eq(strspn(v, "a"), 1024 - 3);
        ck_assert(strncmp(v + 1024 - 3, "... ", 4) == 0);
        v = strstr(text, "MCP_UTF8=");
        ck_assert_ptr_nonnull(v);
        v += strlen("MCP_UTF8=");
        ck_assert_uint_eq(strspn(v, "a"), 1020);
        ck_assert(strncmp(v + 1020, "...\n", 4) == 0);
}
END_TEST

START_TEST(test_journal_stream_must_match_stderr) {
        /* JOURNAL_STREAM naming another file than fd 2: stderr it is. */
        setenv("JOURNAL_STREAM", "1:1", 1);
        ck_assert(!runlog_to_journal());
}
END_TEST

static Suite *runlog_suite(void) {
        Suite *s = suite_create("runlog");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_line_on_stderr);
        tcase_add_test(tc, test_below_log_level);
        tcase_add_test(tc, test_long_value_is_cut);
        tcase_add_test(tc, test_journal_stream_must_match_stderr);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(runlog_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
