/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include "executor/offloop.h"
#include "macro.h"

/* The child's argument (f and done get the same userdata), and what the parent heard. */
typedef struct Heard {
        size_t n;
        bool done;
        int r;
        char *message;
} Heard;

static void on_done(int r, const char *message, void *userdata) {
        Heard *h = userdata;

        ck_assert(!h->done);
        h->done = true;
        h->r = r;
        h->message = message ? strdup(message) : NULL;
}

/* Under make check-valgrind the forked child (a copy of this process) fails its own leak check when it calls
 * _exit(), which the parent hears as a failure: these tests run in make check only. */
static bool under_valgrind(void) {
        return getenv("MCP_SANDBOX_VALGRIND") != NULL;
}

/* Spawn f with these limits and run the loop until done is heard. */
static void run(size_t report_max, uint64_t timeout_usec, OffLoopFunc f, Heard *h) {
        sd_event *e = NULL;
        OffLoopJob *j = NULL;
        sigset_t ss;

        /* sd-event watches children through SIGCHLD: it must be blocked. */
        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &ss, NULL), 0);
        ck_assert_int_ge(sd_event_new(&e), 0);
        ck_assert_int_eq(offloop_spawn_full(e, "test-offloop", report_max, timeout_usec, f, on_done, h, &j), 0);
        while (!h->done)
                ck_assert_int_ge(sd_event_run(e, UINT64_MAX), 0);
        offloop_job_free(j);
        sd_event_unref(e);
}

static int say_hello(void *userdata, char **ret_message) {
        *ret_message = strdup("hello\nworld");
        return 7;
}

START_TEST(test_result_and_message) {
        if (under_valgrind())
                return;
        Heard h = {};
        run(64 * 1024, 0, say_hello, &h);
        ck_assert_int_eq(h.r, 7);
        ck_assert_str_eq(h.message, "hello\nworld");
        free(h.message);
}
END_TEST

/* A message of h->n bytes of 'x'. */
static int say_much(void *userdata, char **ret_message) {
        size_t n = ((Heard *) userdata)->n;
        char *m = malloc(n + 1);

        if (!m)
                return -ENOMEM;
        memset(m, 'x', n);
        m[n] = 0;
        *ret_message = m;
        return 0;
}

START_TEST(test_report_grows_past_the_default) {
        if (under_valgrind())
                return;
        size_t n = 3 * 1024 * 1024;     /* well over offloop_spawn()'s 64 KiB, and many pipe buffers */
        Heard h = { .n = n };

        run(4 * 1024 * 1024, 0, say_much, &h);
        ck_assert_int_eq(h.r, 0);
        ck_assert_ptr_nonnull(h.message);
        ck_assert_uint_eq(strlen(h.message), n);
        free(h.message);
}
END_TEST

START_TEST(test_report_cut_at_report_max) {
        if (under_valgrind())
                return;
        Heard h = { .n = 100 * 1024 };

        run(1000, 0, say_much, &h);
        /* "0\n" and what fits of the message: the rest was dropped, not held. */
        ck_assert_int_eq(h.r, 0);
        ck_assert_ptr_nonnull(h.message);
        ck_assert_uint_eq(strlen(h.message), 1000 - 2);
        free(h.message);
}
END_TEST

static int sleep_long(void *userdata, char **ret_message) {
        for (;;)
                pause();
        return 0;
}

START_TEST(test_timeout_kills) {
        if (under_valgrind())
                return;
        Heard h = {};
        run(1024, 200 * 1000, sleep_long, &h);
        ck_assert_int_eq(h.r, -ETIME);
        ck_assert_ptr_null(h.message);
}
END_TEST

static int die(void *userdata, char **ret_message) {
        (void) raise(SIGKILL);
        return 0;
}

START_TEST(test_death_without_report) {
        if (under_valgrind())
                return;
        Heard h = {};
        run(1024, 0, die, &h);
        ck_assert_int_eq(h.r, -EIO);
        ck_assert_ptr_null(h.message);
}
END_TEST

static Suite *offloop_suite(void) {
        Suite *s = suite_create("offloop");
        TCase *tc = tcase_create("core");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_result_and_message);
        tcase_add_test(tc, test_report_grows_past_the_default);
        tcase_add_test(tc, test_report_cut_at_report_max);
        tcase_add_test(tc, test_timeout_kills);
        tcase_add_test(tc, test_death_without_report);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(offloop_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
