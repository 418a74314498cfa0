/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "macro.h"
#include "scheduler/scheduler.h"

#define A 1000
#define B 1001
#define C 1002

/* What the callbacks saw: the order in which waiting tickets were granted. */
static uid_t granted[256];
static size_t n_granted;

static void on_grant(SchedTicket *t, void *userdata) {
        ck_assert(sched_ticket_held(t));
        ck_assert_uint_lt(n_granted, ELEMENTSOF(granted));
        granted[n_granted++] = sched_ticket_uid(t);
}

static void reset(void) {
        n_granted = 0;
}

START_TEST(test_global_and_per_user_caps) {
        _cleanup_(scheduler_freep) Scheduler *s = NULL;
        SchedTicket t[4] = {};

        ck_assert_int_eq(scheduler_new(&s), 0);
        scheduler_set_limits(s, SCHED_BUILD, &(SchedLimits) { .total = 3, .per_user = 2 });
        ck_assert_int_eq(scheduler_try_acquire(s, &t[0], SCHED_BUILD, A), 0);
        ck_assert_int_eq(scheduler_try_acquire(s, &t[1], SCHED_BUILD, A), 0);
        /* A is at its own cap; B is not. */
        ck_assert_int_eq(scheduler_try_acquire(s, &t[2], SCHED_BUILD, A), SCHEDULER_QUOTA);
        ck_assert_ptr_null(t[2].user);
        ck_assert_int_eq(scheduler_try_acquire(s, &t[2], SCHED_BUILD, B), 0);
        /* Now the global cap binds for everybody. */
        ck_assert_int_eq(scheduler_try_acquire(s, &t[3], SCHED_BUILD, C), SCHEDULER_QUOTA);
        ck_assert_uint_eq(scheduler_held(s, SCHED_BUILD), 3);
        ck_assert_uint_eq(scheduler_held_by(s, SCHED_BUILD, A), 2);
        ck_assert_uint_eq(scheduler_held_by(s, SCHED_BUILD, C), 0);
        /* Kinds are apart. */
        ck_assert_int_eq(scheduler_try_acquire(s, &t[3], SCHED_HELPER, C), 0);
        ck_assert_int_eq(scheduler_try_acquire(s, &t[3], SCHED_HELPER, C), -EINVAL);   /* t[3] holds */
        for (size_t i = 0; i < ELEMENTSOF(t); i++)
                scheduler_release(&t[i]);
        ck_assert_uint_eq(scheduler_held(s, SCHED_BUILD), 0);
        ck_assert_uint_eq(scheduler_held(s, SCHED_HELPER), 0);
        ck_assert_uint_eq(scheduler_peak(s, SCHED_BUILD), 3);
        /* Releasing nothing is fine. */
        scheduler_release(&t[0]);
}
END_TEST

/* One uid's backlog of 60 never delays another uid's first ticket by more than one turnover. */
START_TEST(test_round_robin) {
        _cleanup_(scheduler_freep) Scheduler *s = NULL;
        SchedTicket held[2] = {}, a[60] = {}, b[3] = {}, c = {};

        reset();
        ck_assert_int_eq(scheduler_new(&s), 0);
        scheduler_set_limits(s, SCHED_RUN, &(SchedLimits) { .total = 2 });
        ck_assert_int_eq(scheduler_acquire(s, &held[0], SCHED_RUN, A, on_grant, NULL), 0);
        ck_assert_int_eq(scheduler_acquire(s, &held[1], SCHED_RUN, A, on_grant, NULL), 0);
        for (size_t i = 0; i < ELEMENTSOF(a); i++)
                ck_assert_int_eq(scheduler_acquire(s, &a[i], SCHED_RUN, A, on_grant, NULL), SCHEDULER_QUEUED);
        for (size_t i = 0; i < ELEMENTSOF(b); i++)
                ck_assert_int_eq(scheduler_acquire(s, &b[i], SCHED_RUN, B, on_grant, NULL), SCHEDULER_QUEUED);
        ck_assert_int_eq(scheduler_acquire(s, &c, SCHED_RUN, C, on_grant, NULL), SCHEDULER_QUEUED);
        ck_assert_uint_eq(scheduler_waiting(s, SCHED_RUN), 64);
        ck_assert_uint_eq(scheduler_waiting_for(s, SCHED_RUN, A), 60);

        /* The first slot freed goes to A (first in the round), the next to B, then C, then A again. */
        scheduler_release(&held[0]);
        ck_assert_uint_eq(n_granted, 1);
        ck_assert_uint_eq(granted[0], A);
        scheduler_release(&held[1]);
        ck_assert_uint_eq(n_granted, 2);
        ck_assert_uint_eq(granted[1], B);
        ck_assert(sched_ticket_held(&b[0]));
        ck_assert(sched_ticket_waiting(&b[1]));
        scheduler_release(&a[0]);
        ck_assert_uint_eq(granted[2], C);
        ck_assert(sched_ticket_held(&c));
        scheduler_release(&b[0]);
        ck_assert_uint_eq(granted[3], A);
        ck_assert(sched_ticket_held(&a[1]));   /* A's own tickets in their order */
        scheduler_release(&c);
        ck_assert_uint_eq(granted[4], B);
        scheduler_release(&a[1]);
        ck_assert_uint_eq(granted[5], A);
        ck_assert(sched_ticket_held(&a[2]));

        /* Cancelling a waiter takes it out of the order. */
        scheduler_release(&b[2]);
        ck_assert_uint_eq(scheduler_waiting_for(s, SCHED_RUN, B), 0);
        scheduler_release(&b[1]);
        ck_assert_uint_eq(granted[6], A);
        for (size_t i = 0; i < ELEMENTSOF(a); i++)
                scheduler_release(&a[i]);
        ck_assert_uint_eq(scheduler_held(s, SCHED_RUN), 0);
        ck_assert_uint_eq(scheduler_waiting(s, SCHED_RUN), 0);
        ck_assert_uint_le(scheduler_peak(s, SCHED_RUN), 2);
}
END_TEST

/* A uid at its own cap is skipped: the freed slot goes to the next uid that may take it. */
START_TEST(test_per_user_cap_skips) {
        _cleanup_(scheduler_freep) Scheduler *s = NULL;
        SchedTicket a[3] = {}, b[2] = {};

        reset();
        ck_assert_int_eq(scheduler_new(&s), 0);
        scheduler_set_limits(s, SCHED_HELPER, &(SchedLimits) { .total = 3, .per_user = 2 });
        ck_assert_int_eq(scheduler_acquire(s, &a[0], SCHED_HELPER, A, on_grant, NULL), 0);
        ck_assert_int_eq(scheduler_acquire(s, &a[1], SCHED_HELPER, A, on_grant, NULL), 0);
        ck_assert_int_eq(scheduler_acquire(s, &a[2], SCHED_HELPER, A, on_grant, NULL), SCHEDULER_QUEUED);
        /* A free slot, and A waiting: B is not held back by A's waiter. */
        ck_assert_int_eq(scheduler_acquire(s, &b[0], SCHED_HELPER, B, on_grant, NULL), 0);
        ck_assert_int_eq(scheduler_acquire(s, &b[1], SCHED_HELPER, B, on_grant, NULL), SCHEDULER_QUEUED);
        /* B's slot comes free: A is first in the round but at its cap, so B's waiter gets it. */
        scheduler_release(&b[0]);
        ck_assert_uint_eq(n_granted, 1);
        ck_assert_uint_eq(granted[0], B);
        ck_assert(sched_ticket_waiting(&a[2]));
        scheduler_release(&a[0]);
        ck_assert_uint_eq(granted[1], A);
        for (size_t i = 0; i < 3; i++)
                scheduler_release(&a[i]);
        for (size_t i = 0; i < 2; i++)
                scheduler_release(&b[i]);
}
END_TEST

START_TEST(test_queue_caps) {
        _cleanup_(scheduler_freep) Scheduler *s = NULL;
        SchedTicket h = {}, w[4] = {};

        ck_assert_int_eq(scheduler_new(&s), 0);
        scheduler_set_limits(s, SCHED_RUN, &(SchedLimits) { .total = 1, .queue = 3, .queue_per_user = 2 });
        ck_assert_int_eq(scheduler_acquire(s, &h, SCHED_RUN, A, on_grant, NULL), 0);
        ck_assert_int_eq(scheduler_acquire(s, &w[0], SCHED_RUN, A, on_grant, NULL), SCHEDULER_QUEUED);
        ck_assert_int_eq(scheduler_acquire(s, &w[1], SCHED_RUN, A, on_grant, NULL), SCHEDULER_QUEUED);
        ck_assert_int_eq(scheduler_acquire(s, &w[2], SCHED_RUN, A, on_grant, NULL), SCHEDULER_USER_QUEUE_FULL);
        ck_assert_ptr_null(w[2].user);
        ck_assert_int_eq(scheduler_acquire(s, &w[2], SCHED_RUN, B, on_grant, NULL), SCHEDULER_QUEUED);
        ck_assert_int_eq(scheduler_acquire(s, &w[3], SCHED_RUN, C, on_grant, NULL), SCHEDULER_QUEUE_FULL);
        ck_assert_ptr_null(w[3].user);
        scheduler_release(&h);
        for (size_t i = 0; i < ELEMENTSOF(w); i++)
                scheduler_release(&w[i]);
        ck_assert_uint_eq(scheduler_waiting(s, SCHED_RUN), 0);
}
END_TEST

/* A callback that gives its slot back at once: the next waiters are served from the same release, in order. */
static SchedTicket chain[5];
static void on_grant_release(SchedTicket *t, void *userdata) {
        on_grant(t, userdata);
        scheduler_release(t);
}

START_TEST(test_reentrant_release_and_raise) {
        _cleanup_(scheduler_freep) Scheduler *s = NULL;
        SchedTicket h = {}, w[3] = {};

        reset();
        ck_assert_int_eq(scheduler_new(&s), 0);
        scheduler_set_limits(s, SCHED_COMPILE, &(SchedLimits) { .total = 1 });
        ck_assert_int_eq(scheduler_acquire(s, &h, SCHED_COMPILE, SCHEDULER_DAEMON_UID, on_grant, NULL), 0);
        for (size_t i = 0; i < ELEMENTSOF(chain); i++)
                ck_assert_int_eq(scheduler_acquire(s, &chain[i], SCHED_COMPILE, i % 2 ? A : B, on_grant_release, NULL),
                                 SCHEDULER_QUEUED);
        scheduler_release(&h);
        ck_assert_uint_eq(n_granted, 5);
        ck_assert_uint_eq(granted[0], B);
        ck_assert_uint_eq(granted[1], A);
        ck_assert_uint_eq(scheduler_held(s, SCHED_COMPILE), 0);
        ck_assert_uint_eq(scheduler_peak(s, SCHED_COMPILE), 1);

        /* Raising a cap hands out what it frees at once; lowering it keeps what is held. */
        reset();
        ck_assert_int_eq(scheduler_acquire(s, &h, SCHED_COMPILE, A, on_grant, NULL), 0);
        for (size_t i = 0; i < ELEMENTSOF(w); i++)
                ck_assert_int_eq(scheduler_acquire(s, &w[i], SCHED_COMPILE, B, on_grant, NULL), SCHEDULER_QUEUED);
        scheduler_set_limits(s, SCHED_COMPILE, &(SchedLimits) { .total = 3 });
        ck_assert_uint_eq(n_granted, 2);
        scheduler_set_limits(s, SCHED_COMPILE, &(SchedLimits) { .total = 1 });
        ck_assert_uint_eq(scheduler_held(s, SCHED_COMPILE), 3);
        scheduler_release(&h);
        scheduler_release(&w[0]);
        ck_assert_uint_eq(n_granted, 2);    /* still 1 held: over the cap, nothing new */
        scheduler_release(&w[1]);
        ck_assert_uint_eq(n_granted, 3);
        scheduler_release(&w[2]);
}
END_TEST

/* A uid with a waiter of its own cannot jump it with try_acquire, even when a slot came free meanwhile by a
 * raised cap. */
START_TEST(test_no_jumping_own_queue) {
        _cleanup_(scheduler_freep) Scheduler *s = NULL;
        SchedTicket h = {}, w = {}, t = {};

        reset();
        ck_assert_int_eq(scheduler_new(&s), 0);
        scheduler_set_limits(s, SCHED_WALK, &(SchedLimits) { .total = 1 });
        ck_assert_int_eq(scheduler_acquire(s, &h, SCHED_WALK, A, on_grant, NULL), 0);
        ck_assert_int_eq(scheduler_acquire(s, &w, SCHED_WALK, A, on_grant, NULL), SCHEDULER_QUEUED);
        ck_assert_int_eq(scheduler_try_acquire(s, &t, SCHED_WALK, A), SCHEDULER_QUOTA);
        ck_assert_uint_eq(scheduler_held_by(s, SCHED_WALK, A), 1);
        ck_assert_uint_eq(sched_ticket_uid(&h), A);
        scheduler_release(&h);
        ck_assert_uint_eq(n_granted, 1);
        ck_assert(sched_ticket_held(&w));
        scheduler_release(&w);
        ck_assert_uint_eq(scheduler_held(s, SCHED_WALK), 0);
}
END_TEST

/* Amounts (connections, queued bytes, proxy connections) are charged in the scheduler's one account, each kind
 * against its own caps. */
START_TEST(test_one_account_for_amounts) {
        _cleanup_(scheduler_freep) Scheduler *s = NULL;
        Charge conn = CHARGE_NULL, proxy = CHARGE_NULL, proxy2 = CHARGE_NULL;
        ChargeRegistry *r;

        ck_assert_int_eq(scheduler_new(&s), 0);
        r = scheduler_charges(s);
        ck_assert_ptr_nonnull(r);
        charge_registry_set_limit(r, CHARGE_PROXY_CONNECTIONS, 1, 0);
        ck_assert_int_eq(charge_take(r, &conn, 1000, CHARGE_CONNECTIONS, 1), 0);
        ck_assert_int_eq(charge_take(r, &proxy, 1000, CHARGE_PROXY_CONNECTIONS, 1), 0);
        ck_assert_int_eq(charge_take(r, &proxy2, 1000, CHARGE_PROXY_CONNECTIONS, 1), CHARGE_QUOTA);
        ck_assert_uint_eq(charge_registry_used(r, 1000, CHARGE_CONNECTIONS), 1);
        ck_assert_uint_eq(charge_registry_used(r, 1000, CHARGE_PROXY_CONNECTIONS), 1);
        charge_release(&proxy);
        charge_release(&conn);
        ck_assert_uint_eq(charge_registry_n_users(r), 0);
}
END_TEST

/* Runs of a uid whose clients leave the reply gate's bytes unread wait, at once and from the queue, while other
 * uids' go; once the clients read, they are served, through the wake function when there is one. */
static unsigned n_wakes;

static void on_wake(void *userdata) {
        ck_assert_ptr_eq(userdata, &n_wakes);
        n_wakes++;
}

START_TEST(test_runs_wait_for_unread_replies) {
        _cleanup_(scheduler_freep) Scheduler *s = NULL;
        SchedTicket t[4] = {};
        Charge unread = CHARGE_NULL;
        ChargeRegistry *r;

        reset();
        n_wakes = 0;
        ck_assert_int_eq(scheduler_new(&s), 0);
        r = scheduler_charges(s);
        scheduler_set_limits(s, SCHED_RUN, &(SchedLimits) { .total = 8, .per_user = 4 });
        scheduler_set_reply_gate(s, 1000);
        ck_assert_int_eq(charge_take(r, &unread, A, CHARGE_REPLY_BYTES, 999), 0);
        /* Under the gate: A's run goes. */
        ck_assert_int_eq(scheduler_try_acquire(s, &t[0], SCHED_RUN, A), 0);
        /* At it: A's next waits, B's goes, and other kinds of A's are not held back. */
        ck_assert_int_eq(charge_resize(&unread, 1000, true), 0);
        ck_assert_int_eq(scheduler_acquire(s, &t[1], SCHED_RUN, A, on_grant, NULL), SCHEDULER_QUEUED);
        ck_assert_int_eq(scheduler_acquire(s, &t[2], SCHED_RUN, B, on_grant, NULL), 0);
        ck_assert_int_eq(scheduler_try_acquire(s, &t[3], SCHED_BUILD, A), 0);
        scheduler_release(&t[3]);
        /* A run slot freed is no help while A's clients do not read. */
        scheduler_release(&t[0]);
        ck_assert(sched_ticket_waiting(&t[1]));
        ck_assert_uint_eq(n_granted, 0);
        /* They read: with no wake function, A's run is served from within that. */
        ck_assert_int_eq(charge_resize(&unread, 10, false), 0);
        ck_assert(sched_ticket_held(&t[1]));
        ck_assert_uint_eq(n_granted, 1);
        ck_assert_uint_eq(granted[0], A);

        /* With a wake function, the scheduler asks for a turn of the loop and serves the run on scheduler_retry(). */
        scheduler_set_wake(s, on_wake, &n_wakes);
        ck_assert_int_eq(charge_resize(&unread, 5000, true), 0);
        ck_assert_int_eq(scheduler_acquire(s, &t[0], SCHED_RUN, A, on_grant, NULL), SCHEDULER_QUEUED);
        ck_assert_int_eq(charge_resize(&unread, 0, false), 0);
        ck_assert_uint_eq(n_wakes, 1);
        ck_assert(sched_ticket_waiting(&t[0]));
        scheduler_retry(s, SCHED_RUN);
        ck_assert(sched_ticket_held(&t[0]));
        ck_assert_uint_eq(n_granted, 2);

        /* No gate: unread replies hold nothing back. */
        scheduler_set_reply_gate(s, 0);
        ck_assert_int_eq(charge_resize(&unread, 1 << 30, true), 0);
        ck_assert_int_eq(scheduler_try_acquire(s, &t[3], SCHED_RUN, A), 0);
        for (size_t i = 0; i < ELEMENTSOF(t); i++)
                scheduler_release(&t[i]);
        charge_release(&unread);
}
END_TEST

/* A run that cannot wait (the queue is full) while its uid's runs wait for its clients to read is refused with
 * that reason, not "the queue is full"; another uid's, or A's once its clients read, with the queue's. */
START_TEST(test_refusal_names_unread_replies) {
        _cleanup_(scheduler_freep) Scheduler *s = NULL;
        SchedTicket t[5] = {};
        Charge unread = CHARGE_NULL;

        reset();
        ck_assert_int_eq(scheduler_new(&s), 0);
        scheduler_set_limits(s, SCHED_RUN, &(SchedLimits) { .total = 1, .per_user = 1, .queue = 1,
                                                            .queue_per_user = 1 });
        scheduler_set_reply_gate(s, 1000);
        ck_assert_int_eq(scheduler_acquire(s, &t[0], SCHED_RUN, B, on_grant, NULL), 0);
        ck_assert_int_eq(scheduler_acquire(s, &t[1], SCHED_RUN, B, on_grant, NULL), SCHEDULER_QUEUED);
        ck_assert(!scheduler_replies_unread(s, A));
        ck_assert_int_eq(scheduler_acquire(s, &t[2], SCHED_RUN, A, on_grant, NULL), SCHEDULER_QUEUE_FULL);
        ck_assert_int_eq(charge_take(scheduler_charges(s), &unread, A, CHARGE_REPLY_BYTES, 1000), 0);
        ck_assert(scheduler_replies_unread(s, A));
        ck_assert(!scheduler_replies_unread(s, B));
        ck_assert_uint_eq(scheduler_reply_gate(s), 1000);
        ck_assert_int_eq(scheduler_acquire(s, &t[2], SCHED_RUN, A, on_grant, NULL), SCHEDULER_REPLIES_UNREAD);
        ck_assert(!t[2].user);
        /* B's own share of the queue is full: B hears that. */
        ck_assert_int_eq(scheduler_acquire(s, &t[3], SCHED_RUN, B, on_grant, NULL), SCHEDULER_QUEUE_FULL);
        /* Other kinds of A's are not concerned. */
        scheduler_set_limits(s, SCHED_BUILD, &(SchedLimits) { .total = 1, .per_user = 1, .queue = 1,
                                                              .queue_per_user = 1 });
        ck_assert_int_eq(scheduler_acquire(s, &t[2], SCHED_BUILD, B, on_grant, NULL), 0);
        ck_assert_int_eq(scheduler_acquire(s, &t[3], SCHED_BUILD, B, on_grant, NULL), SCHEDULER_QUEUED);
        ck_assert_int_eq(scheduler_acquire(s, &t[4], SCHED_BUILD, A, on_grant, NULL), SCHEDULER_QUEUE_FULL);
        charge_release(&unread);
        ck_assert(!scheduler_replies_unread(s, A));
        for (size_t i = 0; i < ELEMENTSOF(t); i++)
                scheduler_release(&t[i]);
}
END_TEST

#define MS USEC_PER_MSEC
#define HALF SCHEDULER_LOOP_HALF_LIFE_USEC

/* The loop's CPU per uid: half of it gone each half life, nothing left after many, never more as time passes. */
START_TEST(test_loop_decay) {
        _cleanup_(scheduler_freep) Scheduler *s = NULL;
        SchedLoop a = {};
        uint64_t t0 = 1000 * HALF, prev;

        ck_assert_int_eq(scheduler_new(&s), 0);
        ck_assert_int_eq(scheduler_loop_join(s, &a, A), 0);
        ck_assert_int_eq(scheduler_loop_join(s, &a, A), -EINVAL);   /* a holds */
        scheduler_loop_charge(&a, 80 * MS, t0);
        ck_assert_uint_eq(scheduler_loop_load(s, A, t0), 80 * MS);
        ck_assert_uint_eq(scheduler_loop_load(s, A, t0 + HALF), 40 * MS);
        ck_assert_uint_eq(scheduler_loop_load(s, A, t0 + 2 * HALF), 20 * MS);
        /* Between halvings: between their values. */
        ck_assert_uint_lt(scheduler_loop_load(s, A, t0 + HALF / 2), 80 * MS);
        ck_assert_uint_gt(scheduler_loop_load(s, A, t0 + HALF / 2), 40 * MS);
        prev = UINT64_MAX;
        for (uint64_t t = t0; t < t0 + 20 * HALF; t += HALF / 7) {
                uint64_t v = scheduler_loop_load(s, A, t);
                ck_assert_uint_le(v, prev);
                prev = v;
        }
        ck_assert_uint_eq(scheduler_loop_load(s, A, t0 + 64 * HALF), 0);
        /* Charges add up on what is left of earlier ones. */
        scheduler_loop_charge(&a, 10 * MS, t0 + HALF);
        ck_assert_uint_eq(scheduler_loop_load(s, A, t0 + HALF), 50 * MS);
        ck_assert_uint_eq(scheduler_loop_load(s, A, t0 + 2 * HALF), 25 * MS);
        /* An earlier clock reading (a caller's cached "now") takes nothing away. */
        scheduler_loop_charge(&a, 1 * MS, t0);
        ck_assert_uint_eq(scheduler_loop_load(s, A, t0 + HALF), 51 * MS);
        scheduler_loop_leave(&a);
        ck_assert_ptr_null(a.user);
        ck_assert_uint_eq(scheduler_loop_n_users(s), 0);
        ck_assert_uint_eq(scheduler_loop_load(s, A, t0), 0);
        scheduler_loop_leave(&a);   /* empty: fine */
        scheduler_loop_charge(&a, 1 * MS, t0);
        ck_assert_int_eq(scheduler_loop_priority(&a, t0), SCHEDULER_LOOP_NORMAL);
}
END_TEST

/* A uid over the threshold and over its share goes down; the others stay; it comes back as its charges decay. */
START_TEST(test_loop_priority) {
        _cleanup_(scheduler_freep) Scheduler *s = NULL;
        SchedLoop a1 = {}, a2 = {}, b = {}, c = {};
        uint64_t t = 1000 * HALF;

        ck_assert_int_eq(scheduler_new(&s), 0);
        ck_assert_int_eq(scheduler_loop_join(s, &a1, A), 0);
        /* Alone, nobody waits behind A: never lowered, whatever it spends. */
        scheduler_loop_charge(&a1, 500 * MS, t);
        ck_assert_int_eq(scheduler_loop_priority(&a1, t), SCHEDULER_LOOP_NORMAL);

        /* B is here (idle): A is over its share now. A's second connection is A's: the same account. */
        ck_assert_int_eq(scheduler_loop_join(s, &b, B), 0);
        ck_assert_int_eq(scheduler_loop_join(s, &a2, A), 0);
        ck_assert_uint_eq(scheduler_loop_n_users(s), 2);
        ck_assert_int_eq(scheduler_loop_priority(&a1, t), SCHEDULER_LOOP_LOW);
        ck_assert_int_eq(scheduler_loop_priority(&a2, t), SCHEDULER_LOOP_LOW);
        ck_assert_int_eq(scheduler_loop_priority(&b, t), SCHEDULER_LOOP_NORMAL);

        /* One callback's account: the charge, then whether its sources move (once, not at every callback). */
        int prio = SCHEDULER_LOOP_NORMAL;
        ck_assert(scheduler_loop_account(&a2, 1 * MS, t, &prio));
        ck_assert_int_eq(prio, SCHEDULER_LOOP_LOW);
        ck_assert(!scheduler_loop_account(&a2, 1 * MS, t, &prio));
        ck_assert_int_eq(prio, SCHEDULER_LOOP_LOW);
        prio = SCHEDULER_LOOP_NORMAL;
        ck_assert(!scheduler_loop_account(&b, 0, t, &prio));

        /* B spends a little: still under its share, still served first. */
        scheduler_loop_charge(&b, 5 * MS, t);
        ck_assert_int_eq(scheduler_loop_priority(&b, t), SCHEDULER_LOOP_NORMAL);
        ck_assert_int_eq(scheduler_loop_priority(&a1, t), SCHEDULER_LOOP_LOW);

        /* A stops; its charges decay: back once under half the threshold (500 ms -> under 5 ms: 7 half lives). */
        t += 6 * HALF;
        ck_assert_uint_ge(scheduler_loop_load(s, A, t), SCHEDULER_LOOP_THRESHOLD_USEC / 2);
        ck_assert_int_eq(scheduler_loop_priority(&a1, t), SCHEDULER_LOOP_LOW);
        t += HALF;
        ck_assert_uint_lt(scheduler_loop_load(s, A, t), SCHEDULER_LOOP_THRESHOLD_USEC / 2);
        ck_assert_int_eq(scheduler_loop_priority(&a1, t), SCHEDULER_LOOP_NORMAL);

        /* Under the threshold, over its share: not lowered (a burst of one call's work is nobody's abuse). */
        t += 64 * HALF;
        scheduler_loop_charge(&a1, SCHEDULER_LOOP_THRESHOLD_USEC - 1, t);
        ck_assert_int_eq(scheduler_loop_priority(&a1, t), SCHEDULER_LOOP_NORMAL);
        /* Over it: lowered; between half the threshold and the threshold it stays down (no flapping). */
        scheduler_loop_charge(&a1, 2, t);
        ck_assert_int_eq(scheduler_loop_priority(&a1, t), SCHEDULER_LOOP_LOW);
        t += HALF;
        ck_assert_uint_lt(scheduler_loop_load(s, A, t), SCHEDULER_LOOP_THRESHOLD_USEC);
        ck_assert_int_eq(scheduler_loop_priority(&a1, t), SCHEDULER_LOOP_LOW);

        /* Equal shares: nobody over. Three uids: A at 40 of 100 is over a third, B at 30 and C at 30 are not. */
        t += 64 * HALF;
        scheduler_loop_charge(&a1, 50 * MS, t);
        scheduler_loop_charge(&b, 50 * MS, t);
        ck_assert_int_eq(scheduler_loop_priority(&a1, t), SCHEDULER_LOOP_NORMAL);
        ck_assert_int_eq(scheduler_loop_priority(&b, t), SCHEDULER_LOOP_NORMAL);
        t += 64 * HALF;
        ck_assert_int_eq(scheduler_loop_join(s, &c, C), 0);
        scheduler_loop_charge(&a1, 40 * MS, t);
        scheduler_loop_charge(&b, 30 * MS, t);
        scheduler_loop_charge(&c, 30 * MS, t);
        ck_assert_int_eq(scheduler_loop_priority(&a2, t), SCHEDULER_LOOP_LOW);
        ck_assert_int_eq(scheduler_loop_priority(&b, t), SCHEDULER_LOOP_NORMAL);
        ck_assert_int_eq(scheduler_loop_priority(&c, t), SCHEDULER_LOOP_NORMAL);

        /* A uid goes when its last SchedLoop does; the others' shares are then reckoned without it. */
        scheduler_loop_leave(&a1);
        ck_assert_uint_eq(scheduler_loop_n_users(s), 3);
        scheduler_loop_leave(&a2);
        ck_assert_uint_eq(scheduler_loop_n_users(s), 2);
        ck_assert_uint_eq(scheduler_loop_load(s, A, t), 0);
        scheduler_loop_leave(&b);
        scheduler_loop_leave(&c);
        ck_assert_uint_eq(scheduler_loop_n_users(s), 0);
}
END_TEST

static Suite *scheduler_suite(void) {
        Suite *s = suite_create("scheduler");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_global_and_per_user_caps);
        tcase_add_test(tc, test_one_account_for_amounts);
        tcase_add_test(tc, test_runs_wait_for_unread_replies);
        tcase_add_test(tc, test_refusal_names_unread_replies);
        tcase_add_test(tc, test_round_robin);
        tcase_add_test(tc, test_per_user_cap_skips);
        tcase_add_test(tc, test_queue_caps);
        tcase_add_test(tc, test_reentrant_release_and_raise);
        tcase_add_test(tc, test_no_jumping_own_queue);
        tcase_add_test(tc, test_loop_decay);
        tcase_add_test(tc, test_loop_priority);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(scheduler_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
