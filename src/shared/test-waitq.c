/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "waitq.h"

/* What was called, in order: the userdata of each call, as a small integer. */
static int calls[64];
static size_t n_calls;

static void record(void *userdata) {
        ck_assert_uint_lt(n_calls, ELEMENTSOF(calls));
        calls[n_calls++] = (int) (long) userdata;
}

static void setup(void) {
        n_calls = 0;
        memset(calls, 0, sizeof(calls));
}

static void expect(const int *want, size_t n) {
        ck_assert_uint_eq(n_calls, n);
        for (size_t i = 0; i < n; i++)
                ck_assert_int_eq(calls[i], want[i]);
}

START_TEST(test_fifo) {
        WaitQueue q = {};

        for (long i = 1; i <= 3; i++)
                ck_assert_ptr_nonnull(waitq_push(&q, record, (void *) i));
        ck_assert_uint_eq(q.n, 3);
        waitq_call_all(&q);
        expect((int[]) { 1, 2, 3 }, 3);
        ck_assert_uint_eq(q.n, 0);
        ck_assert_ptr_null(q.head);
        ck_assert_ptr_null(q.tail);
        waitq_call_all(&q);
        expect((int[]) { 1, 2, 3 }, 3);
}
END_TEST

START_TEST(test_cancel_anywhere) {
        WaitQueue q = {};
        WaitEntry *e[5];

        for (long i = 0; i < 5; i++)
                e[i] = waitq_push(&q, record, (void *) i);
        waitq_cancel(e[2]);     /* middle */
        waitq_cancel(e[0]);     /* head */
        waitq_cancel(e[4]);     /* tail */
        waitq_cancel(NULL);
        ck_assert_uint_eq(q.n, 2);
        ck_assert_ptr_eq(q.head, e[1]);
        ck_assert_ptr_eq(q.tail, e[3]);
        waitq_call_all(&q);
        expect((int[]) { 1, 3 }, 2);
}
END_TEST

START_TEST(test_clear_calls_nobody) {
        WaitQueue q = {};

        for (long i = 0; i < 3; i++)
                ck_assert_ptr_nonnull(waitq_push(&q, record, (void *) i));
        waitq_clear(&q);
        ck_assert_uint_eq(q.n, 0);
        ck_assert_ptr_null(q.head);
        ck_assert_ptr_null(q.tail);
        expect(NULL, 0);
}
END_TEST

/* A callback that queues another waiter on the same queue: waitq_call_all() calls that one too. */
static WaitQueue *requeue_q;

static void requeue(void *userdata) {
        record(userdata);
        if ((long) userdata < 3)
                ck_assert_ptr_nonnull(waitq_push(requeue_q, requeue, (void *) ((long) userdata + 1)));
}

START_TEST(test_call_all_includes_added) {
        WaitQueue q = {};

        requeue_q = &q;
        ck_assert_ptr_nonnull(waitq_push(&q, requeue, (void *) 1L));
        ck_assert_ptr_nonnull(waitq_push(&q, record, (void *) 10L));
        waitq_call_all(&q);
        expect((int[]) { 1, 10, 2, 3 }, 4);
        ck_assert_uint_eq(q.n, 0);
}
END_TEST

/* A callback that cancels a later waiter (its owner went away meanwhile): that one is not called. */
static WaitEntry *victim;

static void cancel_victim(void *userdata) {
        record(userdata);
        waitq_cancel(TAKE_PTR(victim));
}

START_TEST(test_callback_cancels_a_later_one) {
        WaitQueue q = {};

        ck_assert_ptr_nonnull(waitq_push(&q, cancel_victim, (void *) 1L));
        victim = waitq_push(&q, record, (void *) 2L);
        ck_assert_ptr_nonnull(waitq_push(&q, record, (void *) 3L));
        waitq_call_all(&q);
        expect((int[]) { 1, 3 }, 2);
        ck_assert_uint_eq(q.n, 0);
}
END_TEST

static Suite *waitq_suite(void) {
        Suite *s = suite_create("waitq");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, NULL);
        tcase_add_test(tc, test_fifo);
        tcase_add_test(tc, test_cancel_anywhere);
        tcase_add_test(tc, test_clear_calls_nobody);
        tcase_add_test(tc, test_call_all_includes_added);
        tcase_add_test(tc, test_callback_cancels_a_later_one);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(waitq_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
