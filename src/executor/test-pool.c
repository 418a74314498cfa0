/* SPDX-License-Identifier: MIT */
/*
 * The pool of processes started ahead, with a fake spawn: each "sandbox" is a sleep(1) whose readiness the
 * test decides (a pipe that holds a byte or not), and a spawn the test can make fail. The pool is compiled
 * into this suite with its clock replaced by one the test moves, so that the depth's decay (30 s) and the pause
 * after failures (60 s) are checked without waiting for them; pool.c itself is unchanged.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include "time-util.h"

/* The pool's clock, moved by the test. */
static uint64_t fake_now;
static uint64_t test_now_usec(void) {
        return fake_now;
}
#define now_usec test_now_usec
#include "executor/pool.c"
#undef now_usec

#include "executor/process.h"
#include "scheduler/scheduler.h"

#define MAX_SPAWNED 64
#define UID_A 1000
#define UID_B 1001
#define DAEMON SCHEDULER_DAEMON_UID

static sd_event *event;
static Reaper *reaper;                  /* where the pool's killed processes are reaped */
static Pool *pool;
static Scheduler *sched;

/* What the fake spawn did, all targets together. */
static struct {
        bool fail;              /* spawns fail at once */
        int nothing;            /* spawns return this positive outcome: nothing to start */
        bool ready;             /* a new process says at once that it waits */
        unsigned n_spawn;       /* spawn calls, failed ones too */
        unsigned n_dropped;     /* the dropped callback */
        unsigned n_spec_freed;
        pid_t pids[MAX_SPAWNED];
        uid_t owners[MAX_SPAWNED];
        size_t n_pids;
} fake;

typedef struct FakeSpec {
        char name[16];
} FakeSpec;

static int fake_spawn(void *spec, uid_t owner, ProcessDoneFunc done, void *userdata, PoolItem *ret) {
        static char *const argv[] = { (char *) "/bin/sleep", (char *) "60", NULL };
        int p[2], r;

        ck_assert_ptr_nonnull(spec);
        fake.n_spawn++;
        /* Each a moment after the last: which is the newest is known. */
        fake_now++;
        if (fake.fail)
                return -EIO;
        if (fake.nothing > 0)
                return fake.nothing;
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        if (fake.ready)
                ck_assert_int_eq(write(p[1], "w", 1), 1);
        /* Closed either way: without the byte the read end sees a hang-up, which is not "ready". */
        safe_close(p[1]);
        r = process_spawn(event,
                          &(ProcessOptions) { .argv = argv, .stdin_fd = -EBADF, .head_max = 64, .tail_max = 64,
                                              .reaper = reaper },
                          done, userdata, &ret->proc);
        if (r < 0) {
                safe_close(p[0]);
                return r;
        }
        ret->out_fd = p[0];
        ck_assert_uint_lt(fake.n_pids, MAX_SPAWNED);
        fake.pids[fake.n_pids] = ret->proc->pid;
        fake.owners[fake.n_pids++] = owner;
        return 0;
}

static void fake_free_spec(void *spec) {
        fake.n_spec_freed++;
        free(spec);
}

static void fake_dropped(void *spec, const PoolItem *it) {
        fake.n_dropped++;
}

static const PoolTargetOps ops = {
        .spawn = fake_spawn,
        .free_spec = fake_free_spec,
        .dropped = fake_dropped,
};

static int refill(const char *key, uid_t uid) {
        FakeSpec *f = calloc(1, sizeof(*f));

        ck_assert_ptr_nonnull(f);
        strncpy(f->name, key, sizeof(f->name) - 1);
        return pool_refill(pool, key, uid, &ops, f);
}

/* Take one for uid: 1 and the item in *ret (the test's now), or 0. */
static int take(const char *key, uid_t uid, PoolItem *ret, bool *ret_shared) {
        *ret = (PoolItem) { .proc = NULL, .in_fd = -EBADF, .out_fd = -EBADF, .ctl_fd = -EBADF };
        return pool_take(pool, key, uid, NULL, NULL, ret, ret_shared);
}

/* How many of key's processes wait for uid. */
static unsigned n_waiting(const char *key, uid_t uid) {
        PoolTarget *t = pool_find(pool, key, NULL);

        return t ? target_n_owned(t, uid) : 0;
}

static unsigned depth(const char *key, uid_t uid) {
        PoolTarget *t = pool_find(pool, key, NULL);

        ck_assert_ptr_nonnull(t);
        return target_depth(t, uid);
}

static bool alive(pid_t pid) {
        return kill(pid, 0) == 0;
}

/* Run the loop until cond holds or about 10 s have passed. */
#define RUN_UNTIL(cond)                                                                                              \
        do {                                                                                                         \
                for (unsigned _i = 0; !(cond) && _i < 1000; _i++)                                                    \
                        ck_assert_int_ge(sd_event_run(event, 10 * USEC_PER_MSEC), 0);                                \
        } while (0)

/* Every process killed in the background has been reaped. */
static void reap_detached(void) {
        RUN_UNTIL(reaper_n_detached(reaper) == 0);
        ck_assert_uint_eq(reaper_n_detached(reaper), 0);
}

static void setup_with(Scheduler *s, unsigned size) {
        sigset_t ss;

        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &ss, NULL), 0);
        ck_assert_int_ge(sd_event_new(&event), 0);
        ck_assert_int_eq(reaper_new(&reaper), 0);
        memset(&fake, 0, sizeof(fake));
        fake.ready = true;
        fake_now = now_usec();
        ck_assert_int_eq(pool_new(&pool, event, s, size), 0);
}

static void setup(void) {
        setup_with(NULL, 3);
}

static void teardown(void) {
        pool = pool_free(pool);
        reap_detached();
        reaper_finish(reaper);
        reaper = reaper_free(reaper);
        /* Nothing the pool started outlives it. */
        for (size_t i = 0; i < fake.n_pids; i++)
                ck_assert_msg(!alive(fake.pids[i]), "pid %d still runs", (int) fake.pids[i]);
        sched = scheduler_free(sched);
        event = sd_event_unref(event);
}

/* ---- depth per uid, following the call rate ------------------------------ */

START_TEST(test_depth_per_uid) {
        PoolItem it;

        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_int_eq(refill("env", UID_B), 0);
        /* One each to begin with. */
        ck_assert_uint_eq(n_waiting("env", UID_A), 1);
        ck_assert_uint_eq(n_waiting("env", UID_B), 1);
        ck_assert_uint_eq(pool_n_ready(pool), 2);
        ck_assert_uint_eq(pool_n_targets(pool), 1);
        /* A known target's spec is freed at once. */
        ck_assert_uint_eq(fake.n_spec_freed, 1);

        /* A takes its own. */
        ck_assert_int_eq(take("env", UID_A, &it, NULL), 1);
        ck_assert_uint_eq(it.owner, UID_A);
        pool_item_done(&it);
        /* At once again: nothing of A's is left, and B's is not A's to take. A's calls come faster than its
         * processes start: A's depth grows, nobody else's. */
        ck_assert_int_eq(take("env", UID_A, &it, NULL), 0);
        ck_assert_uint_eq(n_waiting("env", UID_B), 1);
        ck_assert_uint_eq(depth("env", UID_A), 2);
        ck_assert_uint_eq(depth("env", UID_B), 1);
        ck_assert(pool_in_burst(pool, "env", UID_A));
        ck_assert(!pool_in_burst(pool, "env", UID_B));

        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_uint_eq(n_waiting("env", UID_A), 2);
        ck_assert_uint_eq(n_waiting("env", UID_B), 1);
        ck_assert_uint_eq(pool_n_wanted(pool), 2);

        /* Takes that find one ready do not deepen it. */
        ck_assert_int_eq(take("env", UID_A, &it, NULL), 1);
        pool_item_done(&it);
        ck_assert_uint_eq(depth("env", UID_A), 2);
        /* More short takes: deeper, up to the pool's size and no further. */
        ck_assert_int_eq(take("env", UID_A, &it, NULL), 1);
        pool_item_done(&it);
        for (unsigned i = 0; i < 5; i++)
                ck_assert_int_eq(take("env", UID_A, &it, NULL), 0);
        ck_assert_uint_eq(depth("env", UID_A), 3);
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_uint_eq(n_waiting("env", UID_A), 3);
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_uint_eq(n_waiting("env", UID_A), 3);
        ck_assert_uint_eq(fake.n_spawn, 1 + 1 + 2 + 3);

        /* B's depth did not follow A's burst. */
        ck_assert_int_eq(refill("env", UID_B), 0);
        ck_assert_uint_eq(n_waiting("env", UID_B), 1);
}
END_TEST

START_TEST(test_depth_decays) {
        PoolItem it;

        ck_assert_int_eq(refill("env", UID_A), 0);
        for (unsigned i = 0; i < 4; i++) {
                if (take("env", UID_A, &it, NULL) > 0)
                        pool_item_done(&it);
                fake_now += POOL_DEPTH_BURST_USEC / 4;
        }
        ck_assert_uint_eq(depth("env", UID_A), 3);
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_uint_eq(n_waiting("env", UID_A), 3);
        pid_t newest = fake.pids[fake.n_pids - 1], oldest = fake.pids[fake.n_pids - 3];

        /* Within the decay time a sweep changes nothing. */
        fake_now += POOL_DEPTH_DECAY_USEC / 2;
        pool_sweep(pool);
        ck_assert_uint_eq(depth("env", UID_A), 3);
        ck_assert_uint_eq(n_waiting("env", UID_A), 3);

        /* After it, one less; the newest process goes (the oldest is the readiest). */
        fake_now += POOL_DEPTH_DECAY_USEC;
        pool_sweep(pool);
        ck_assert_uint_eq(depth("env", UID_A), 2);
        ck_assert_uint_eq(n_waiting("env", UID_A), 2);
        reap_detached();
        ck_assert(!alive(newest));
        ck_assert(alive(oldest));
        /* One step per decay time, not all at once. */
        pool_sweep(pool);
        ck_assert_uint_eq(depth("env", UID_A), 2);
        fake_now += POOL_DEPTH_DECAY_USEC + 1;
        pool_sweep(pool);
        ck_assert_uint_eq(depth("env", UID_A), 1);
        ck_assert_uint_eq(n_waiting("env", UID_A), 1);
        /* Never below one. */
        fake_now += 2 * POOL_DEPTH_DECAY_USEC;
        pool_sweep(pool);
        ck_assert_uint_eq(depth("env", UID_A), 1);
        ck_assert_uint_eq(n_waiting("env", UID_A), 1);

        /* Unused for long, the target goes with its processes. */
        fake_now += POOL_TARGET_IDLE_USEC + 1;
        pool_sweep(pool);
        ck_assert_uint_eq(pool_n_targets(pool), 0);
        ck_assert_uint_eq(pool_n_ready(pool), 0);
        reap_detached();
        ck_assert(!alive(oldest));
}
END_TEST

/* ---- the daemon's process ------------------------------------------------ */

START_TEST(test_shared_not_twice) {
        PoolItem it;
        bool shared = false;

        /* One for whoever comes first. */
        ck_assert_int_eq(refill("env", DAEMON), 0);
        ck_assert_uint_eq(n_waiting("env", DAEMON), 1);

        ck_assert_int_eq(take("env", UID_A, &it, &shared), 1);
        ck_assert(shared);
        ck_assert_uint_eq(it.owner, DAEMON);
        pool_item_done(&it);
        ck_assert_int_eq(refill("env", DAEMON), 0);

        /* Not twice in a row for A ... */
        ck_assert_int_eq(take("env", UID_A, &it, &shared), 0);
        ck_assert_uint_eq(n_waiting("env", DAEMON), 1);
        /* ... but B may, and after B, A again. */
        ck_assert_int_eq(take("env", UID_B, &it, &shared), 1);
        ck_assert(shared);
        pool_item_done(&it);
        ck_assert_int_eq(refill("env", DAEMON), 0);
        ck_assert_int_eq(take("env", UID_A, &it, &shared), 1);
        ck_assert(shared);
        pool_item_done(&it);

        /* A's own is no shared one, and does not count as taking the daemon's. */
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_int_eq(take("env", UID_A, &it, &shared), 1);
        ck_assert(!shared);
        ck_assert_uint_eq(it.owner, UID_A);
        pool_item_done(&it);
}
END_TEST

START_TEST(test_own_before_shared_ready_before_starting) {
        PoolItem it;
        bool shared = true;

        ck_assert_int_eq(refill("env", DAEMON), 0);
        ck_assert_int_eq(refill("env", UID_A), 0);
        /* Both ready: A's own first. */
        ck_assert_int_eq(take("env", UID_A, &it, &shared), 1);
        ck_assert(!shared);
        ck_assert_uint_eq(it.owner, UID_A);
        pool_item_done(&it);

        /* A's own still starting, the daemon's ready: the ready one. */
        fake.ready = false;
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_uint_eq(n_waiting("env", UID_A), 1);
        ck_assert_int_eq(take("env", UID_A, &it, &shared), 1);
        ck_assert(shared);
        ck_assert_uint_eq(it.owner, DAEMON);
        pool_item_done(&it);
        /* Then its own, though still starting, rather than nothing. */
        ck_assert_int_eq(take("env", UID_A, &it, &shared), 1);
        ck_assert_uint_eq(it.owner, UID_A);
        pool_item_done(&it);
}
END_TEST

/* ---- failures ------------------------------------------------------------ */

START_TEST(test_failed_spawn_backs_off) {
        fake.fail = true;
        for (unsigned i = 0; i < MAX_FAILURES; i++)
                ck_assert_int_eq(refill("env", UID_A), -EIO);
        ck_assert_uint_eq(fake.n_spawn, MAX_FAILURES);

        /* Then no more tries for a while, whoever asks. */
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_int_eq(refill("env", UID_B), 0);
        fake_now += FAILURE_PAUSE_USEC / 2;
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_uint_eq(fake.n_spawn, MAX_FAILURES);
        ck_assert_uint_eq(pool_n_ready(pool), 0);

        /* After the pause, it tries again. */
        fake.fail = false;
        fake_now += FAILURE_PAUSE_USEC;
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_uint_eq(fake.n_spawn, MAX_FAILURES + 1);
        ck_assert_uint_eq(n_waiting("env", UID_A), 1);
}
END_TEST

/* A spawn function's positive outcome (nothing to start: RUNTIME_NO_SANDBOX) is passed through and backs off too. */
START_TEST(test_nothing_to_start_backs_off) {
        fake.nothing = 1;
        for (unsigned i = 0; i < MAX_FAILURES; i++)
                ck_assert_int_eq(refill("env", UID_A), 1);
        ck_assert_uint_eq(fake.n_spawn, MAX_FAILURES);
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_uint_eq(fake.n_spawn, MAX_FAILURES);
        ck_assert_uint_eq(pool_n_ready(pool), 0);
        ck_assert_uint_eq(n_waiting("env", UID_A), 0);
}
END_TEST

/* A process that dies before anyone takes it (its sandbox failed) counts as a failure too. */
START_TEST(test_dying_processes_back_off) {
        PoolItem it;

        for (unsigned i = 0; i < MAX_FAILURES; i++) {
                ck_assert_int_eq(refill("env", UID_A), 0);
                ck_assert_uint_eq(n_waiting("env", UID_A), 1);
                ck_assert_int_eq(kill(fake.pids[fake.n_pids - 1], SIGKILL), 0);
                RUN_UNTIL(n_waiting("env", UID_A) == 0);
                ck_assert_uint_eq(n_waiting("env", UID_A), 0);
        }
        ck_assert_uint_eq(fake.n_dropped, MAX_FAILURES);
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_uint_eq(fake.n_spawn, MAX_FAILURES);
        ck_assert_uint_eq(pool_n_ready(pool), 0);

        /* After the pause, one that lives and is taken resets the count. */
        fake_now += FAILURE_PAUSE_USEC + 1;
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_uint_eq(fake.n_spawn, MAX_FAILURES + 1);
        ck_assert_int_eq(take("env", UID_A, &it, NULL), 1);
        pool_item_done(&it);
        PoolTarget *t = pool_find(pool, "env", NULL);
        ck_assert_ptr_nonnull(t);
        ck_assert_uint_eq(t->failures, 0);
}
END_TEST

/* ---- reload -------------------------------------------------------------- */

START_TEST(test_flush_on_reload) {
        PoolItem taken;
        pid_t kept;

        ck_assert_int_eq(refill("one", UID_A), 0);
        ck_assert_int_eq(refill("two", UID_B), 0);
        ck_assert_int_eq(refill("two", DAEMON), 0);
        ck_assert_int_eq(take("one", UID_A, &taken, NULL), 1);
        kept = taken.proc->pid;
        ck_assert_int_eq(refill("one", UID_A), 0);
        ck_assert_uint_eq(pool_n_ready(pool), 3);
        ck_assert_uint_eq(pool_n_targets(pool), 2);

        /* What runtime_reload() does: everything waiting is stopped and every target forgotten. */
        size_t n = fake.n_pids;
        pool_flush(pool);
        ck_assert_uint_eq(pool_n_ready(pool), 0);
        ck_assert_uint_eq(pool_n_targets(pool), 0);
        reap_detached();
        for (size_t i = 0; i < n; i++)
                if (fake.pids[i] != kept)
                        ck_assert_msg(!alive(fake.pids[i]), "pid %d outlived the flush", (int) fake.pids[i]);
        /* A process already taken is its taker's: untouched. */
        ck_assert(alive(kept));
        pool_item_done(&taken);

        /* The same size changes nothing; another size flushes; 0 turns the pool off. */
        ck_assert_int_eq(refill("one", UID_A), 0);
        pool_set_size(pool, 3);
        ck_assert_uint_eq(pool_n_ready(pool), 1);
        pool_set_size(pool, 2);
        ck_assert_uint_eq(pool_n_ready(pool), 0);
        pool_set_size(pool, 0);
        unsigned spawned = fake.n_spawn;
        ck_assert_int_eq(refill("one", UID_A), 0);
        ck_assert_uint_eq(fake.n_spawn, spawned);
        ck_assert_int_eq(take("one", UID_A, &taken, NULL), 0);
        ck_assert_uint_eq(pool_n_targets(pool), 0);
}
END_TEST

/* A fifth target takes the place of the least recently used one of the same uid. */
START_TEST(test_targets_per_uid) {
        static const char *const keys[] = { "a1", "b1", "a2", "b2" };

        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                ck_assert_int_eq(refill(keys[i], keys[i][0] == 'a' ? UID_A : UID_B), 0);
                fake_now += USEC_PER_SEC;
        }
        ck_assert_uint_eq(pool_n_targets(pool), POOL_MAX_TARGETS);
        ck_assert_int_eq(refill("b3", UID_B), 0);
        ck_assert_uint_eq(pool_n_targets(pool), POOL_MAX_TARGETS);
        ck_assert_ptr_null(pool_find(pool, "b1", NULL));
        /* A's targets stay, though a1 is the oldest of all. */
        ck_assert_ptr_nonnull(pool_find(pool, "a1", NULL));
        ck_assert_ptr_nonnull(pool_find(pool, "a2", NULL));
}
END_TEST

/* ---- accounting ---------------------------------------------------------- */

static void setup_sched(void) {
        Scheduler *s = NULL;

        ck_assert_int_eq(scheduler_new(&s), 0);
        scheduler_set_limits(s, SCHED_PRESTART, &(SchedLimits) { .total = 4, .per_user = 2 });
        sched = s;
        setup_with(s, 3);
}

START_TEST(test_charged_to_owner) {
        PoolItem it;

        /* Deep for A: three wanted, two allowed per uid. */
        ck_assert_int_eq(refill("env", UID_A), 0);
        for (unsigned i = 0; i < 4; i++)
                if (take("env", UID_A, &it, NULL) > 0)
                        pool_item_done(&it);
        ck_assert_uint_eq(depth("env", UID_A), 3);
        ck_assert_int_eq(refill("env", UID_A), 0);
        ck_assert_uint_eq(n_waiting("env", UID_A), 2);
        ck_assert_uint_eq(scheduler_held_by(sched, SCHED_PRESTART, UID_A), 2);

        /* The others' places are their own, up to the total. */
        ck_assert_int_eq(refill("env", UID_B), 0);
        ck_assert_int_eq(refill("env", DAEMON), 0);
        ck_assert_uint_eq(scheduler_held_by(sched, SCHED_PRESTART, UID_B), 1);
        ck_assert_uint_eq(scheduler_held_by(sched, SCHED_PRESTART, DAEMON), 1);
        ck_assert_uint_eq(scheduler_held(sched, SCHED_PRESTART), 4);

        /* A taken process is the taker's run's: its place is given back. */
        ck_assert_int_eq(take("env", UID_B, &it, NULL), 1);
        pool_item_done(&it);
        ck_assert_uint_eq(scheduler_held_by(sched, SCHED_PRESTART, UID_B), 0);
        pool_flush(pool);
        ck_assert_uint_eq(scheduler_held(sched, SCHED_PRESTART), 0);
}
END_TEST

static Suite *pool_suite(void) {
        Suite *s = suite_create("pool");
        TCase *tc;

        tc = tcase_create("depth");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_depth_per_uid);
        tcase_add_test(tc, test_depth_decays);
        suite_add_tcase(s, tc);

        tc = tcase_create("taking");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_shared_not_twice);
        tcase_add_test(tc, test_own_before_shared_ready_before_starting);
        tcase_add_test(tc, test_targets_per_uid);
        suite_add_tcase(s, tc);

        tc = tcase_create("failures");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_failed_spawn_backs_off);
        tcase_add_test(tc, test_nothing_to_start_backs_off);
        tcase_add_test(tc, test_dying_processes_back_off);
        suite_add_tcase(s, tc);

        tc = tcase_create("reload");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_flush_on_reload);
        suite_add_tcase(s, tc);

        tc = tcase_create("accounting");
        tcase_add_checked_fixture(tc, setup_sched, teardown);
        tcase_add_test(tc, test_charged_to_owner);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(pool_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
