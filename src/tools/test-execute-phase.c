/* SPDX-License-Identifier: MIT */
/*
 * The phase table of execute_python (execute-phase.h) driven with fake phases: where a call may go, and that a
 * cancel in each phase, an error in prepare and a refused run slot all end in done, once, with the right names.
 * The fake job is freed by its done hook as the real one is, so under valgrind a machine that touched it after
 * done would show.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "scheduler/scheduler.h"
#include "strv.h"
#include "tools/execute-phase.h"
#include "tools/execute-render.h"

/* What the hooks saw: it outlives the fake job. */
typedef struct Trace {
        char *entered;                  /* "prepare queue run done": the phases entered, in order */
        unsigned n_done, n_fail, n_cancelled;
        char *failed_phase, *message, *cancelled_phase;
} Trace;

typedef struct FakeJob {
        ExecuteMachine machine;
        Trace *trace;
        int queue_outcome;              /* what the fake scheduler answers: 0, SCHEDULER_QUEUED, ..._FULL */
        bool prepare_fails;
} FakeJob;

static void trace_done(Trace *t) {
        free(t->entered);
        free(t->failed_phase);
        free(t->message);
        free(t->cancelled_phase);
}

static void entered(FakeJob *j, const char *name) {
        strextendf(&j->trace->entered, "%s%s", j->trace->entered ? " " : "", name);
}

static void fake_prepare(void *userdata) {
        FakeJob *j = userdata;

        entered(j, "prepare");
        if (j->prepare_fails)
                execute_machine_fail(&j->machine, EXECUTE_PREPARE, "installing the dependencies (%s) failed", "nope");
}

static void fake_queue(void *userdata) {
        FakeJob *j = userdata;

        entered(j, "queue");
        if (j->queue_outcome == SCHEDULER_QUEUE_FULL || j->queue_outcome == SCHEDULER_USER_QUEUE_FULL) {
                _cleanup_free_ char *why = execute_refusal_message(j->queue_outcome, 2, 1, 8, 3);
                execute_machine_fail(&j->machine, EXECUTE_RUN, "%s", why);
                return;
        }
        if (j->queue_outcome == 0)
                (void) execute_machine_go(&j->machine, EXECUTE_RUN);
        /* SCHEDULER_QUEUED: it waits for its slot. */
}

static void fake_run(void *userdata) {
        entered(userdata, "run");
}

static void fake_done(void *userdata) {
        FakeJob *j = userdata;

        entered(j, "done");
        j->trace->n_done++;
        free(j);
}

static void fake_fail(void *userdata, const char *failed_phase, const char *message) {
        FakeJob *j = userdata;

        j->trace->n_fail++;
        j->trace->failed_phase = strdup(failed_phase);
        j->trace->message = message ? strdup(message) : NULL;
}

static void fake_cancelled(void *userdata, const char *phase) {
        FakeJob *j = userdata;

        j->trace->n_cancelled++;
        j->trace->cancelled_phase = strdup(phase);
}

static const ExecutePhaseHooks fake_hooks = {
        .enter = {
                [EXECUTE_PREPARE] = fake_prepare,
                [EXECUTE_QUEUE] = fake_queue,
                [EXECUTE_RUN] = fake_run,
                [EXECUTE_DONE] = fake_done,
        },
        .fail = fake_fail,
        .cancelled = fake_cancelled,
};

static FakeJob *fake_new(Trace *t, int queue_outcome) {
        FakeJob *j = calloc(1, sizeof(*j));

        ck_assert_ptr_nonnull(j);
        *t = (Trace) {};
        j->trace = t;
        j->queue_outcome = queue_outcome;
        execute_machine_init(&j->machine, &fake_hooks, j);
        ck_assert_int_eq(j->machine.phase, EXECUTE_VALIDATE);
        return j;
}

START_TEST(test_table) {
        static const ExecutePhase all[] = { EXECUTE_VALIDATE, EXECUTE_PREPARE, EXECUTE_QUEUE, EXECUTE_RUN,
                                            EXECUTE_DONE };

        /* Forward, one step or skipping (a warm environment, a free slot), and to done from anywhere but done. */
        for (size_t a = 0; a < ELEMENTSOF(all); a++)
                for (size_t b = 0; b < ELEMENTSOF(all); b++) {
                        bool want = all[a] != EXECUTE_DONE &&
                                    (all[b] == EXECUTE_DONE || (all[b] > all[a] && all[b] != EXECUTE_RUN) ||
                                     (all[a] == EXECUTE_QUEUE && all[b] == EXECUTE_RUN));
                        ck_assert_msg(execute_phase_may_go(all[a], all[b]) == want, "%s -> %s",
                                      execute_phase_log_name(all[a]), execute_phase_log_name(all[b]));
                }
        /* The run is reached only through the queue: nothing runs without a slot. */
        ck_assert(!execute_phase_may_go(EXECUTE_VALIDATE, EXECUTE_RUN));
        ck_assert(!execute_phase_may_go(EXECUTE_PREPARE, EXECUTE_RUN));
        ck_assert(!execute_phase_may_go(_EXECUTE_PHASE_MAX, EXECUTE_DONE));

        /* A result names waiting for a slot as the run; the run log tells them apart. */
        ck_assert_str_eq(execute_phase_name(EXECUTE_VALIDATE), "validate");
        ck_assert_str_eq(execute_phase_name(EXECUTE_PREPARE), "prepare");
        ck_assert_str_eq(execute_phase_name(EXECUTE_QUEUE), "run");
        ck_assert_str_eq(execute_phase_name(EXECUTE_RUN), "run");
        ck_assert_str_eq(execute_phase_log_name(EXECUTE_QUEUE), "queue");
        ck_assert_str_eq(execute_phase_log_name(EXECUTE_RUN), "run");
        ck_assert_str_eq(execute_phase_progress(EXECUTE_VALIDATE), "reading the script metadata");
        ck_assert_str_eq(execute_phase_progress(EXECUTE_PREPARE), "preparing the environment");
        ck_assert_str_eq(execute_phase_progress(EXECUTE_QUEUE), "queued: waiting for a free run slot");
        ck_assert_str_eq(execute_phase_progress(EXECUTE_RUN), "running");
}
END_TEST

/* Cancelled in each phase the call can wait in: the run log names it, done comes once, nothing fails. */
START_TEST(test_cancel_in_each_phase) {
        static const struct {
                ExecutePhase phase;
                const char *log_name, *entered;
        } t[] = {
                { EXECUTE_VALIDATE, "validate", "done" },
                { EXECUTE_PREPARE, "prepare", "prepare done" },
                { EXECUTE_QUEUE, "queue", "prepare queue done" },
                { EXECUTE_RUN, "run", "prepare queue run done" },
        };

        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                Trace tr;
                FakeJob *j = fake_new(&tr, SCHEDULER_QUEUED);

                for (ExecutePhase p = EXECUTE_PREPARE; p <= t[i].phase; p++)
                        ck_assert_int_eq(execute_machine_go(&j->machine, p), 0);
                ck_assert_int_eq(j->machine.phase, t[i].phase);
                execute_machine_cancel(&j->machine);   /* frees j */
                ck_assert_uint_eq(tr.n_cancelled, 1);
                ck_assert_str_eq(tr.cancelled_phase, t[i].log_name);
                ck_assert_uint_eq(tr.n_done, 1);
                ck_assert_uint_eq(tr.n_fail, 0);
                ck_assert_str_eq(tr.entered, t[i].entered);
                trace_done(&tr);
        }
}
END_TEST

START_TEST(test_error_in_prepare) {
        Trace tr;
        FakeJob *j = fake_new(&tr, 0);

        j->prepare_fails = true;
        ck_assert_int_eq(execute_machine_go(&j->machine, EXECUTE_PREPARE), 0);
        /* The failure ended the call from within prepare: never queued, never run. */
        ck_assert_str_eq(tr.entered, "prepare done");
        ck_assert_uint_eq(tr.n_fail, 1);
        ck_assert_str_eq(tr.failed_phase, "prepare");
        ck_assert_str_eq(tr.message, "installing the dependencies (nope) failed");
        ck_assert_uint_eq(tr.n_done, 1);
        ck_assert_uint_eq(tr.n_cancelled, 0);
        trace_done(&tr);
}
END_TEST

START_TEST(test_queue_refused) {
        static const struct {
                int outcome;
                const char *cap;
        } t[] = {
                { SCHEDULER_QUEUE_FULL, "(max-queue)" },
                { SCHEDULER_USER_QUEUE_FULL, "(max-runs-per-user)" },
        };

        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                Trace tr;
                FakeJob *j = fake_new(&tr, t[i].outcome);

                /* A warm environment: straight from validate to the queue. */
                ck_assert_int_eq(execute_machine_go(&j->machine, EXECUTE_QUEUE), 0);
                ck_assert_str_eq(tr.entered, "queue done");
                ck_assert_uint_eq(tr.n_fail, 1);
                ck_assert_str_eq(tr.failed_phase, "run");
                ck_assert_ptr_nonnull(strstr(tr.message, t[i].cap));
                ck_assert_uint_eq(tr.n_done, 1);
                trace_done(&tr);
        }
}
END_TEST

START_TEST(test_free_slot_runs_at_once) {
        Trace tr;
        FakeJob *j = fake_new(&tr, 0);

        ck_assert_int_eq(execute_machine_go(&j->machine, EXECUTE_PREPARE), 0);
        ck_assert_int_eq(execute_machine_go(&j->machine, EXECUTE_QUEUE), 0);
        ck_assert_int_eq(j->machine.phase, EXECUTE_RUN);
        ck_assert_str_eq(tr.entered, "prepare queue run");
        /* The run's end. */
        ck_assert_int_eq(execute_machine_go(&j->machine, EXECUTE_DONE), 0);
        ck_assert_str_eq(tr.entered, "prepare queue run done");
        ck_assert_uint_eq(tr.n_done, 1);
        ck_assert_uint_eq(tr.n_fail + tr.n_cancelled, 0);
        trace_done(&tr);
}
END_TEST

START_TEST(test_refused_transitions_change_nothing) {
        Trace tr;
        FakeJob *j = fake_new(&tr, SCHEDULER_QUEUED);

        ck_assert_int_eq(execute_machine_go(&j->machine, EXECUTE_RUN), -EINVAL);   /* no run without a slot */
        ck_assert_int_eq(execute_machine_go(&j->machine, EXECUTE_VALIDATE), -EINVAL);
        ck_assert_int_eq(j->machine.phase, EXECUTE_VALIDATE);
        ck_assert_ptr_null(tr.entered);
        ck_assert_int_eq(execute_machine_go(&j->machine, EXECUTE_QUEUE), 0);
        ck_assert_int_eq(execute_machine_go(&j->machine, EXECUTE_PREPARE), -EINVAL);   /* never backwards */
        ck_assert_int_eq(j->machine.phase, EXECUTE_QUEUE);
        ck_assert_str_eq(tr.entered, "queue");
        /* A failure may name a later phase than the current one: a sandbox that does not work fails the run. */
        execute_machine_fail(&j->machine, EXECUTE_RUN, "the sandbox does not work");
        ck_assert_str_eq(tr.failed_phase, "run");
        ck_assert_str_eq(tr.entered, "queue done");
        ck_assert_uint_eq(tr.n_done, 1);
        trace_done(&tr);
}
END_TEST

static Suite *phase_suite(void) {
        Suite *s = suite_create("execute-phase");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_table);
        tcase_add_test(tc, test_cancel_in_each_phase);
        tcase_add_test(tc, test_error_in_prepare);
        tcase_add_test(tc, test_queue_refused);
        tcase_add_test(tc, test_free_slot_runs_at_once);
        tcase_add_test(tc, test_refused_transitions_change_nothing);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(phase_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
