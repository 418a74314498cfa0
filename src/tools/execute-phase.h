/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The phases of an execute_python call and the one place it moves between
 * them: validate (the arguments, the script's metadata, the Python) →
 * prepare (the environment) → queue (a run slot) → run → done. A phase may
 * be skipped forward (a warm environment goes from validate to queue, a
 * free slot from queue to run) but never entered backwards; every end (the
 * result, an error, a cancel by the client) goes to done, whose hook frees
 * the call's state. What a phase does is the owner's (ExecutePhaseHooks):
 * execute-python.c's real work, or a unit test's fakes.
 */

#include <stdbool.h>

typedef enum ExecutePhase {
        EXECUTE_VALIDATE,
        EXECUTE_PREPARE,
        EXECUTE_QUEUE,
        EXECUTE_RUN,
        EXECUTE_DONE,
        _EXECUTE_PHASE_MAX,
} ExecutePhase;

typedef struct ExecutePhaseHooks {
        /* Start a phase's work (NULL: nothing to start). done's frees the owner: nothing may touch it after. */
        void (*enter[_EXECUTE_PHASE_MAX])(void *userdata);
        /* Answer the call with an error; failed_phase is what the result names ("validate", "prepare", "run"). */
        void (*fail)(void *userdata, const char *failed_phase, const char *message);
        /* The client cancelled the call in phase (the run log's name: "queue" is told from "run"). */
        void (*cancelled)(void *userdata, const char *phase);
} ExecutePhaseHooks;

typedef struct ExecuteMachine {
        ExecutePhase phase;
        const ExecutePhaseHooks *hooks;
        void *userdata;
} ExecuteMachine;

/* A failure's failed_phase: waiting for a slot counts as part of the run (for tests: the table read back). */
const char *execute_phase_name(ExecutePhase p);
/* The run log's: "queue" for waiting for a slot (for tests: the table read back). */
const char *execute_phase_log_name(ExecutePhase p);
/* What the progress notifications say while in it. */
const char *execute_phase_progress(ExecutePhase p);
/* Whether the table lets a call go from one phase to the other (for tests: the table read back). */
bool execute_phase_may_go(ExecutePhase from, ExecutePhase to);

/* In validate, whose work the call function starts itself. */
void execute_machine_init(ExecuteMachine *m, const ExecutePhaseHooks *hooks, void *userdata);
/* Enter a phase and start its work: -EINVAL (and nothing happens) when the table does not allow it. */
int execute_machine_go(ExecuteMachine *m, ExecutePhase to);
/* The call failed; the result names the phase named (which may be a later one than the current: a sandbox that
 * does not work fails the run before it is queued). Then done. */
void execute_machine_fail(ExecuteMachine *m, ExecutePhase named, const char *format, ...)
        __attribute__((format(printf, 3, 4)));
/* The client cancelled: said in the run log, then done. */
void execute_machine_cancel(ExecuteMachine *m);
