/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>

#include "macro.h"
#include "sandbox/uidpool.h"

static void uid_pool_unrefp(UidPool **p) {
        uid_pool_unref(*p);
}
#define _cleanup_pool_ _cleanup_(uid_pool_unrefp)

/* The default sandbox-uid-range: 0x7B000000-0x7B00FFFF. */
#define FIRST 2063597568U
#define LAST 2063663103U

/* ---- ranges ------------------------------------------------------------ */

START_TEST(test_new_rejects_unsafe_ranges) {
        static const struct {
                uint32_t first, last;
        } bad[] = {
                { 0, 0 },                       /* root */
                { 0, 100 },
                { 0, 65533 },
                { 1, 65534 },                   /* nobody */
                { 65000, 70000 },
                { 65534, 65534 },
                { 65534, 70000 },
                { 5, 3 },                       /* empty */
                { 70001, 70000 },
                { 100, INT32_MAX },             /* at 2^31 - 1, some tools turn negative */
                { INT32_MAX, INT32_MAX },
                { 100, (uint32_t) INT32_MAX + 1 },
                { 100, UINT32_MAX },            /* (uid_t) -1 */
                { UINT32_MAX, UINT32_MAX },
        };

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                UidPool *p = NULL;

                ck_assert_msg(uid_pool_new(&p, bad[i].first, bad[i].last) == -EINVAL, "%" PRIu32 "-%" PRIu32,
                              bad[i].first, bad[i].last);
                ck_assert_ptr_null(p);
        }
}
END_TEST

START_TEST(test_new_accepts_safe_ranges) {
        static const struct {
                uint32_t first, last;
        } good[] = {
                { 1, 1 },
                { 1, 65533 },
                { 65535, 65535 + 15 },
                { 100000, 165535 },
                { FIRST, LAST },
                { (uint32_t) INT32_MAX - 16, (uint32_t) INT32_MAX - 1 },
        };

        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                _cleanup_pool_ UidPool *p = NULL;
                uid_t uid;

                ck_assert_msg(uid_pool_new(&p, good[i].first, good[i].last) == 0, "%" PRIu32 "-%" PRIu32,
                              good[i].first, good[i].last);
                ck_assert_ptr_nonnull(p);
                ck_assert_uint_eq(uid_pool_n_taken(p), 0);
                /* The first uid handed out is the first of the range. */
                ck_assert_int_eq(uid_pool_take(p, &uid), 0);
                ck_assert_uint_eq(uid, good[i].first);
                ck_assert_uint_eq(uid_pool_n_taken(p), 1);
        }
}
END_TEST

/* ---- take and release -------------------------------------------------- */

START_TEST(test_take_distinct_in_range) {
        _cleanup_pool_ UidPool *p = NULL;
        _cleanup_free_ uint8_t *seen = NULL;
        const uint32_t first = 100000, last = 100999, n = last - first + 1;

        /* More than the pool's first allocation, so that its table grows several times. */
        ck_assert_int_eq(uid_pool_new(&p, first, last), 0);
        seen = calloc(n, 1);
        ck_assert_ptr_nonnull(seen);
        for (uint32_t i = 0; i < n; i++) {
                uid_t uid;

                ck_assert_int_eq(uid_pool_take(p, &uid), 0);
                ck_assert_uint_ge(uid, first);
                ck_assert_uint_le(uid, last);
                ck_assert_msg(!seen[uid - first], "uid %u handed out twice", (unsigned) uid);
                seen[uid - first] = 1;
                ck_assert_uint_eq(uid_pool_n_taken(p), i + 1);
        }
}
END_TEST

START_TEST(test_round_robin) {
        _cleanup_pool_ UidPool *p = NULL;
        uid_t a, b, c, uid;

        ck_assert_int_eq(uid_pool_new(&p, FIRST, FIRST + 15), 0);
        ck_assert_int_eq(uid_pool_take(p, &a), 0);
        ck_assert_int_eq(uid_pool_take(p, &b), 0);
        ck_assert_int_eq(uid_pool_take(p, &c), 0);
        ck_assert_uint_eq(a, FIRST);
        ck_assert_uint_eq(b, FIRST + 1);
        ck_assert_uint_eq(c, FIRST + 2);

        /* b given back is taken again only after every other free uid of the range. */
        uid_pool_release(p, b);
        ck_assert_uint_eq(uid_pool_n_taken(p), 2);
        for (uint32_t i = 3; i < 16; i++) {
                ck_assert_int_eq(uid_pool_take(p, &uid), 0);
                ck_assert_uint_eq(uid, FIRST + i);
        }
        ck_assert_int_eq(uid_pool_take(p, &uid), 0);
        ck_assert_uint_eq(uid, b);
        ck_assert_uint_eq(uid_pool_n_taken(p), 16);

        /* Two given back: the round robin goes on from where it was, past the last uid to the first. */
        uid_pool_release(p, FIRST + 15);
        uid_pool_release(p, FIRST + 4);
        ck_assert_int_eq(uid_pool_take(p, &uid), 0);
        ck_assert_uint_eq(uid, FIRST + 4);
        ck_assert_int_eq(uid_pool_take(p, &uid), 0);
        ck_assert_uint_eq(uid, FIRST + 15);
}
END_TEST

START_TEST(test_round_robin_no_quick_reuse) {
        _cleanup_pool_ UidPool *p = NULL;
        uid_t held, uid, prev;

        /* One sandbox at a time in a range of 16: each gets a uid other than the one before. */
        ck_assert_int_eq(uid_pool_new(&p, FIRST, FIRST + 15), 0);
        ck_assert_int_eq(uid_pool_take(p, &held), 0);
        ck_assert_int_eq(uid_pool_take(p, &prev), 0);
        uid_pool_release(p, prev);
        for (unsigned i = 0; i < 64; i++) {
                ck_assert_int_eq(uid_pool_take(p, &uid), 0);
                ck_assert_uint_ne(uid, prev);
                ck_assert_uint_ne(uid, held);
                /* 15 free uids, taken in turn: the one after prev, wrapping around and skipping held. */
                ck_assert_uint_eq(uid, prev == FIRST + 15 ? FIRST + 1 : prev + 1);
                uid_pool_release(p, uid);
                ck_assert_uint_eq(uid_pool_n_taken(p), 1);
                prev = uid;
        }
}
END_TEST

START_TEST(test_exhaust) {
        _cleanup_pool_ UidPool *p = NULL;
        uid_t uid;

        ck_assert_int_eq(uid_pool_new(&p, 70000, 70015), 0);
        for (unsigned i = 0; i < 16; i++)
                ck_assert_int_eq(uid_pool_take(p, &uid), 0);
        ck_assert_uint_eq(uid_pool_n_taken(p), 16);

        uid = 4242;
        ck_assert_int_eq(uid_pool_take(p, &uid), UID_POOL_EXHAUSTED);
        ck_assert_uint_eq(uid, 4242);
        ck_assert_int_eq(uid_pool_take(p, &uid), UID_POOL_EXHAUSTED);
        ck_assert_uint_eq(uid_pool_n_taken(p), 16);

        /* One given back makes room for one, and it is that one. */
        uid_pool_release(p, 70007);
        ck_assert_uint_eq(uid_pool_n_taken(p), 15);
        ck_assert_int_eq(uid_pool_take(p, &uid), 0);
        ck_assert_uint_eq(uid, 70007);
        ck_assert_int_eq(uid_pool_take(p, &uid), UID_POOL_EXHAUSTED);

        /* All given back: all can be taken again. */
        for (uid_t u = 70000; u <= 70015; u++)
                uid_pool_release(p, u);
        ck_assert_uint_eq(uid_pool_n_taken(p), 0);
        for (unsigned i = 0; i < 16; i++)
                ck_assert_int_eq(uid_pool_take(p, &uid), 0);
        ck_assert_int_eq(uid_pool_take(p, &uid), UID_POOL_EXHAUSTED);
}
END_TEST

START_TEST(test_single_uid) {
        _cleanup_pool_ UidPool *p = NULL;
        uid_t uid;

        ck_assert_int_eq(uid_pool_new(&p, 65535, 65535), 0);
        for (unsigned i = 0; i < 3; i++) {
                ck_assert_int_eq(uid_pool_take(p, &uid), 0);
                ck_assert_uint_eq(uid, 65535);
                ck_assert_int_eq(uid_pool_take(p, &uid), UID_POOL_EXHAUSTED);
                uid_pool_release(p, 65535);
        }
}
END_TEST

START_TEST(test_release_unknown) {
        _cleanup_pool_ UidPool *p = NULL;
        uid_t a, b;

        ck_assert_int_eq(uid_pool_new(&p, 70000, 70015), 0);
        ck_assert_int_eq(uid_pool_take(p, &a), 0);
        ck_assert_int_eq(uid_pool_take(p, &b), 0);

        /* A uid that is not taken, or not of the range, changes nothing. */
        uid_pool_release(p, 70009);
        uid_pool_release(p, 0);
        uid_pool_release(p, 12345);
        ck_assert_uint_eq(uid_pool_n_taken(p), 2);

        /* Giving one back twice frees it once. */
        uid_pool_release(p, a);
        uid_pool_release(p, a);
        ck_assert_uint_eq(uid_pool_n_taken(p), 1);
        uid_pool_release(p, b);
        ck_assert_uint_eq(uid_pool_n_taken(p), 0);
}
END_TEST

/* ---- references -------------------------------------------------------- */

START_TEST(test_refcount) {
        UidPool *p = NULL, *q;
        uid_t uid;

        ck_assert_ptr_null(uid_pool_ref(NULL));
        ck_assert_ptr_null(uid_pool_unref(NULL));

        ck_assert_int_eq(uid_pool_new(&p, 70000, 70015), 0);
        /* A holder of a uid holds the pool. */
        ck_assert_int_eq(uid_pool_take(p, &uid), 0);
        q = uid_pool_ref(p);
        ck_assert_ptr_eq(q, p);

        /* The owner lets go first: the pool lives on for the holder (valgrind would see a use after free). */
        ck_assert_ptr_null(uid_pool_unref(p));
        p = NULL;
        ck_assert_uint_eq(uid_pool_n_taken(q), 1);
        uid_pool_release(q, uid);
        ck_assert_uint_eq(uid_pool_n_taken(q), 0);
        ck_assert_int_eq(uid_pool_take(q, &uid), 0);
        ck_assert_uint_eq(uid, 70001);

        /* The last reference frees it, with the uids still taken (valgrind would see a leak). */
        ck_assert_ptr_null(uid_pool_unref(q));
}
END_TEST

START_TEST(test_refcount_many) {
        UidPool *p = NULL, *refs[8];
        uid_t uid;

        ck_assert_int_eq(uid_pool_new(&p, 70000, 70015), 0);
        for (size_t i = 0; i < ELEMENTSOF(refs); i++) {
                ck_assert_int_eq(uid_pool_take(p, &uid), 0);
                refs[i] = uid_pool_ref(p);
        }
        ck_assert_ptr_null(uid_pool_unref(p));
        for (size_t i = 0; i < ELEMENTSOF(refs); i++) {
                ck_assert_uint_eq(uid_pool_n_taken(refs[i]), ELEMENTSOF(refs) - i);
                uid_pool_release(refs[i], (uid_t) (70000 + i));
                ck_assert_ptr_null(uid_pool_unref(refs[i]));
        }
}
END_TEST

static Suite *uidpool_suite(void) {
        Suite *s = suite_create("uidpool");
        TCase *tc;

        tc = tcase_create("ranges");
        tcase_add_test(tc, test_new_rejects_unsafe_ranges);
        tcase_add_test(tc, test_new_accepts_safe_ranges);
        suite_add_tcase(s, tc);

        tc = tcase_create("take");
        tcase_add_test(tc, test_take_distinct_in_range);
        tcase_add_test(tc, test_round_robin);
        tcase_add_test(tc, test_round_robin_no_quick_reuse);
        tcase_add_test(tc, test_exhaust);
        tcase_add_test(tc, test_single_uid);
        tcase_add_test(tc, test_release_unknown);
        suite_add_tcase(s, tc);

        tc = tcase_create("refs");
        tcase_add_test(tc, test_refcount);
        tcase_add_test(tc, test_refcount_many);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(uidpool_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
