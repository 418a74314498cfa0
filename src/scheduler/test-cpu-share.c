/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdlib.h>

#include "macro.h"
#include "scheduler/cpu-share.h"

#define TICK CPU_SHARE_TICK_USEC

/* One tick of n groups, as the daemon does it; how many changed weight. */
static size_t cpu_share_tick(CpuShare *s, const uint64_t *usage_usec, size_t n, uint64_t interval_usec) {
        size_t changed = 0;

        for (size_t i = 0; i < n; i++)
                changed += cpu_share_update(&s[i], usage_usec[i], interval_usec);
        return changed;
}

static bool cpu_share_busy(const CpuShare *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (cpu_share_active(&s[i]))
                        return true;
        return false;
}

/* n ticks where group i uses cpus[i] CPUs; usage[] carries each group's counter. */
static void ticks(CpuShare *s, uint64_t *usage, const double *cpus, size_t n, unsigned times) {
        for (unsigned t = 0; t < times; t++) {
                for (size_t i = 0; i < n; i++)
                        usage[i] += (uint64_t) (cpus[i] * TICK);
                (void) cpu_share_tick(s, usage, n, TICK);
        }
}

START_TEST(test_light_keeps_full_weight) {
        CpuShare s[2] = { CPU_SHARE_INIT, CPU_SHARE_INIT };
        uint64_t usage[2] = { 1000, 5000000 };

        /* The first reading only reads: a counter's total is no use. */
        ck_assert_uint_eq(cpu_share_tick(s, usage, 2, TICK), 0);
        ck_assert_uint_eq(s[1].shift, 0);
        /* An agent's pace (a few ms per call) and an idle group: full weight. */
        ticks(s, usage, (const double[]) { 0.04, 0.0 }, 2, 20);
        ck_assert_uint_eq(s[0].shift, 0);
        ck_assert_uint_eq(s[1].shift, 0);
        ck_assert(cpu_share_busy(s, 2));
        ck_assert(cpu_share_active(&s[0]));
        ck_assert(!cpu_share_active(&s[1]));
        ticks(s, usage, (const double[]) { 0.0, 0.0 }, 2, 40);
        ck_assert(!cpu_share_busy(s, 2));
        ck_assert(!cpu_share_active(&s[0]));
}
END_TEST

START_TEST(test_heavy_goes_down_at_once_and_up_slowly) {
        CpuShare s[2] = { CPU_SHARE_INIT, CPU_SHARE_INIT };
        uint64_t usage[2] = {};

        (void) cpu_share_tick(s, usage, 2, TICK);
        /* One tick of two busy CPUs is enough: 2 CPUs is 20 times CPU_SHARE_LIGHT, 4.3 halvings. */
        ticks(s, usage, (const double[]) { 2.0, 0.04 }, 2, 1);
        ck_assert_uint_eq(s[0].shift, 5);
        ck_assert_uint_eq(s[1].shift, 0);
        ck_assert_uint_eq(cpu_share_weight(100, s[0].shift), 3);
        ck_assert_uint_eq(cpu_share_weight(100, s[1].shift), 100);
        /* One quiet tick does not make it light; some seconds of quiet do, step by step. */
        ticks(s, usage, (const double[]) { 0.0, 0.04 }, 2, 1);
        ck_assert_uint_ge(s[0].shift, 4);
        ck_assert(cpu_share_active(&s[0]));
        ticks(s, usage, (const double[]) { 0.0, 0.04 }, 2, 40);
        ck_assert_uint_eq(s[0].shift, 0);
}
END_TEST

START_TEST(test_equal_use_equal_weight) {
        CpuShare s[3] = { CPU_SHARE_INIT, CPU_SHARE_INIT, CPU_SHARE_INIT };
        uint64_t usage[3] = {};

        (void) cpu_share_tick(s, usage, 3, TICK);
        ticks(s, usage, (const double[]) { 0.95, 1.0, 0.3 }, 3, 20);
        ck_assert_uint_eq(s[0].shift, s[1].shift);
        ck_assert_uint_gt(s[0].shift, s[2].shift);
        ck_assert_uint_gt(s[2].shift, 0);
}
END_TEST

START_TEST(test_unknown_and_reset) {
        CpuShare s[1] = { CPU_SHARE_INIT };
        uint64_t usage[1] = { 10 * TICK };

        (void) cpu_share_tick(s, usage, 1, TICK);
        /* Not read: left as it was. */
        usage[0] = CPU_SHARE_UNKNOWN;
        ck_assert_uint_eq(cpu_share_tick(s, usage, 1, TICK), 0);
        ck_assert_uint_eq(s[0].last_usec, 10 * TICK);
        /* A counter that went back (the group made anew) is a first reading, not a huge use. */
        usage[0] = 5;
        ck_assert_uint_eq(cpu_share_tick(s, usage, 1, TICK), 0);
        ck_assert_uint_eq(s[0].shift, 0);
        ck_assert_uint_eq(s[0].last_usec, 5);
        /* No time passed: nothing. */
        usage[0] = 5 + TICK;
        ck_assert_uint_eq(cpu_share_tick(s, usage, 1, 0), 0);
}
END_TEST

START_TEST(test_weight) {
        ck_assert_uint_eq(cpu_share_weight(100, 0), 100);
        ck_assert_uint_eq(cpu_share_weight(100, 1), 50);
        ck_assert_uint_eq(cpu_share_weight(25, 5), 1);
        ck_assert_uint_eq(cpu_share_weight(0, 0), 0);
        ck_assert_uint_eq(cpu_share_weight(0, 5), 0);
}
END_TEST

static Suite *cpu_share_suite(void) {
        Suite *s = suite_create("cpu-share");
        TCase *tc = tcase_create("policy");

        tcase_add_test(tc, test_light_keeps_full_weight);
        tcase_add_test(tc, test_heavy_goes_down_at_once_and_up_slowly);
        tcase_add_test(tc, test_equal_use_equal_weight);
        tcase_add_test(tc, test_unknown_and_reset);
        tcase_add_test(tc, test_weight);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(cpu_share_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
