/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "charge.h"
#include "macro.h"

#define A 0
#define B 65534

START_TEST(test_take_release) {
        _cleanup_(charge_registry_freep) ChargeRegistry *r = NULL;
        Charge c = CHARGE_NULL;

        ck_assert_int_eq(charge_registry_new(&r), 0);
        ck_assert_int_eq(charge_take(r, &c, A, CHARGE_CONNECTIONS, 1), 0);
        ck_assert_uint_eq(charge_registry_used(r, A, CHARGE_CONNECTIONS), 1);
        ck_assert_uint_eq(charge_registry_n_users(r), 1);
        /* A holding charge cannot be taken twice. */
        ck_assert_int_eq(charge_take(r, &c, A, CHARGE_CONNECTIONS, 1), -EINVAL);
        charge_release(&c);
        ck_assert_ptr_null(c.user);
        ck_assert_uint_eq(charge_registry_used(r, A, CHARGE_CONNECTIONS), 0);
        ck_assert_uint_eq(charge_registry_total(r, CHARGE_CONNECTIONS), 0);
        ck_assert_uint_eq(charge_registry_n_users(r), 0);
        /* Releasing nothing is fine. */
        charge_release(&c);
}
END_TEST

START_TEST(test_per_user_quota_is_per_user) {
        _cleanup_(charge_registry_freep) ChargeRegistry *r = NULL;
        Charge a[4] = {}, b = CHARGE_NULL, extra = CHARGE_NULL;

        ck_assert_int_eq(charge_registry_new(&r), 0);
        charge_registry_set_limit(r, CHARGE_CONNECTIONS, 3, 0);
        for (size_t i = 0; i < 3; i++)
                ck_assert_int_eq(charge_take(r, &a[i], A, CHARGE_CONNECTIONS, 1), 0);
        /* A is at its quota: refused, and nothing changed. */
        ck_assert_int_eq(charge_take(r, &a[3], A, CHARGE_CONNECTIONS, 1), CHARGE_QUOTA);
        ck_assert_ptr_null(a[3].user);
        ck_assert_uint_eq(charge_registry_used(r, A, CHARGE_CONNECTIONS), 3);
        /* B does not notice. */
        ck_assert_int_eq(charge_take(r, &b, B, CHARGE_CONNECTIONS, 1), 0);
        ck_assert_uint_eq(charge_registry_n_users(r), 2);
        /* One of A's goes: A may take one again. */
        charge_release(&a[1]);
        ck_assert_int_eq(charge_take(r, &extra, A, CHARGE_CONNECTIONS, 1), 0);
        ck_assert_int_eq(charge_take(r, &a[3], A, CHARGE_CONNECTIONS, 1), CHARGE_QUOTA);

        charge_release(&a[0]);
        charge_release(&a[2]);
        charge_release(&extra);
        charge_release(&b);
        ck_assert_uint_eq(charge_registry_n_users(r), 0);
}
END_TEST

START_TEST(test_global_limit) {
        _cleanup_(charge_registry_freep) ChargeRegistry *r = NULL;
        Charge a = CHARGE_NULL, b = CHARGE_NULL, c = CHARGE_NULL;

        ck_assert_int_eq(charge_registry_new(&r), 0);
        charge_registry_set_limit(r, CHARGE_REPLY_BYTES, 100, 150);
        ck_assert_int_eq(charge_take(r, &a, A, CHARGE_REPLY_BYTES, 100), 0);
        ck_assert_int_eq(charge_take(r, &b, B, CHARGE_REPLY_BYTES, 60), CHARGE_QUOTA);
        ck_assert_int_eq(charge_take(r, &b, B, CHARGE_REPLY_BYTES, 50), 0);
        ck_assert_uint_eq(charge_registry_total(r, CHARGE_REPLY_BYTES), 150);
        ck_assert_int_eq(charge_take(r, &c, 1000, CHARGE_REPLY_BYTES, 1), CHARGE_QUOTA);
        /* Slots are separate. */
        ck_assert_int_eq(charge_take(r, &c, A, CHARGE_CONNECTIONS, 1000), 0);
        charge_release(&a);
        charge_release(&b);
        charge_release(&c);
}
END_TEST

START_TEST(test_resize) {
        _cleanup_(charge_registry_freep) ChargeRegistry *r = NULL;
        Charge a = CHARGE_NULL, a2 = CHARGE_NULL, b = CHARGE_NULL;

        ck_assert_int_eq(charge_registry_new(&r), 0);
        charge_registry_set_limit(r, CHARGE_REPLY_BYTES, 1000, 0);
        ck_assert_int_eq(charge_take(r, &a, A, CHARGE_REPLY_BYTES, 0), 0);
        ck_assert_int_eq(charge_take(r, &a2, A, CHARGE_REPLY_BYTES, 0), 0);
        ck_assert_int_eq(charge_take(r, &b, B, CHARGE_REPLY_BYTES, 0), 0);
        ck_assert_int_eq(charge_resize(&a, 600, false), 0);
        /* A's two connections share A's budget. */
        ck_assert_int_eq(charge_resize(&a2, 500, false), CHARGE_QUOTA);
        ck_assert_uint_eq(a2.amount, 0);
        ck_assert_int_eq(charge_resize(&a2, 400, false), 0);
        ck_assert_uint_eq(charge_registry_used(r, A, CHARGE_REPLY_BYTES), 1000);
        /* B has a budget of its own. */
        ck_assert_int_eq(charge_resize(&b, 1000, false), 0);
        /* Forced: over the limit, on purpose. */
        ck_assert_int_eq(charge_resize(&a2, 450, true), 0);
        ck_assert_uint_eq(charge_registry_used(r, A, CHARGE_REPLY_BYTES), 1050);
        /* Shrinking always works. */
        ck_assert_int_eq(charge_resize(&a, 10, false), 0);
        ck_assert_uint_eq(charge_registry_used(r, A, CHARGE_REPLY_BYTES), 460);
        ck_assert_uint_eq(charge_registry_total(r, CHARGE_REPLY_BYTES), 1460);
        /* A zero charge still holds the user. */
        ck_assert_int_eq(charge_resize(&a, 0, false), 0);
        ck_assert_uint_eq(charge_registry_n_users(r), 2);
        charge_release(&a);
        charge_release(&a2);
        charge_release(&b);
        ck_assert_uint_eq(charge_registry_total(r, CHARGE_REPLY_BYTES), 0);
        ck_assert_uint_eq(charge_registry_n_users(r), 0);
}
END_TEST

/* The watch: called once when a uid's holding falls from the threshold or more to under it, for that uid only. */
static uid_t watched[8];
static unsigned n_watched;

static void on_under(uid_t uid, void *userdata) {
        ck_assert_ptr_eq(userdata, &n_watched);
        ck_assert_uint_lt(n_watched, ELEMENTSOF(watched));
        watched[n_watched++] = uid;
}

START_TEST(test_watch) {
        _cleanup_(charge_registry_freep) ChargeRegistry *r = NULL;
        Charge a = CHARGE_NULL, a2 = CHARGE_NULL, b = CHARGE_NULL;

        n_watched = 0;
        ck_assert_int_eq(charge_registry_new(&r), 0);
        charge_registry_watch(r, CHARGE_REPLY_BYTES, 100, on_under, &n_watched);
        ck_assert_int_eq(charge_take(r, &a, A, CHARGE_REPLY_BYTES, 60), 0);
        ck_assert_int_eq(charge_take(r, &a2, A, CHARGE_REPLY_BYTES, 50), 0);
        ck_assert_int_eq(charge_take(r, &b, B, CHARGE_REPLY_BYTES, 20), 0);
        /* Under it all along: nothing. Other slots are not watched. */
        ck_assert_int_eq(charge_resize(&b, 10, false), 0);
        ck_assert_uint_eq(n_watched, 0);
        /* A at 110 falls to 100: still at it. */
        ck_assert_int_eq(charge_resize(&a2, 40, false), 0);
        ck_assert_uint_eq(n_watched, 0);
        /* Then to 99: once, for A. */
        ck_assert_int_eq(charge_resize(&a, 59, false), 0);
        ck_assert_uint_eq(n_watched, 1);
        ck_assert_uint_eq(watched[0], A);
        ck_assert_int_eq(charge_resize(&a, 10, false), 0);
        ck_assert_uint_eq(n_watched, 1);
        /* Back over and released: once more. */
        ck_assert_int_eq(charge_resize(&a, 200, true), 0);
        charge_release(&a);
        ck_assert_uint_eq(n_watched, 2);
        ck_assert_uint_eq(watched[1], A);
        /* No watch: nothing. */
        charge_registry_watch(r, CHARGE_REPLY_BYTES, 0, NULL, NULL);
        ck_assert_int_eq(charge_resize(&a2, 500, true), 0);
        ck_assert_int_eq(charge_resize(&a2, 0, true), 0);
        ck_assert_uint_eq(n_watched, 2);
        charge_release(&a2);
        charge_release(&b);
}
END_TEST

START_TEST(test_overflow_and_move) {
        _cleanup_(charge_registry_freep) ChargeRegistry *r = NULL;
        Charge a = CHARGE_NULL, b = CHARGE_NULL;

        ck_assert_int_eq(charge_registry_new(&r), 0);
        /* Unlimited by default, and sums cannot wrap. */
        ck_assert_int_eq(charge_take(r, &a, A, CHARGE_REPLY_BYTES, UINT64_MAX - 1), 0);
        ck_assert_int_eq(charge_take(r, &b, A, CHARGE_REPLY_BYTES, 2), CHARGE_QUOTA);
        charge_move(&b, &a);
        ck_assert_ptr_null(a.user);
        ck_assert_uint_eq(charge_registry_used(r, A, CHARGE_REPLY_BYTES), UINT64_MAX - 1);
        charge_release(&b);
        ck_assert_uint_eq(charge_registry_n_users(r), 0);
}
END_TEST

/* Fairness: many users at their quota leave room for one more, as long as
 * the per-user limits times the users fit the global one. */
START_TEST(test_fair_share) {
        _cleanup_(charge_registry_freep) ChargeRegistry *r = NULL;
        Charge c[10][4] = {}, late = CHARGE_NULL;

        ck_assert_int_eq(charge_registry_new(&r), 0);
        charge_registry_set_limit(r, CHARGE_CONNECTIONS, 4, 44);
        for (uid_t u = 0; u < 10; u++) {
                for (size_t i = 0; i < 4; i++)
                        ck_assert_int_eq(charge_take(r, &c[u][i], 1000 + u, CHARGE_CONNECTIONS, 1), 0);
                ck_assert_int_eq(charge_take(r, &late, 1000 + u, CHARGE_CONNECTIONS, 1), CHARGE_QUOTA);
        }
        ck_assert_uint_eq(charge_registry_n_users(r), 10);
        ck_assert_int_eq(charge_take(r, &late, 5000, CHARGE_CONNECTIONS, 1), 0);
        charge_release(&late);
        for (uid_t u = 0; u < 10; u++)
                for (size_t i = 0; i < 4; i++)
                        charge_release(&c[u][i]);
        ck_assert_uint_eq(charge_registry_n_users(r), 0);
}
END_TEST

static Suite *charge_suite(void) {
        Suite *s = suite_create("charge");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_take_release);
        tcase_add_test(tc, test_per_user_quota_is_per_user);
        tcase_add_test(tc, test_global_limit);
        tcase_add_test(tc, test_resize);
        tcase_add_test(tc, test_watch);
        tcase_add_test(tc, test_overflow_and_move);
        tcase_add_test(tc, test_fair_share);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(charge_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
