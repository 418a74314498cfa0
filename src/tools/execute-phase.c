/* SPDX-License-Identifier: MIT */
/*
 * The phase table of an execute_python call (execute-phase.h): each phase's names, its progress message and the
 * phases it may go to, and the three ways a call moves: forward, failed, cancelled. All end in done.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "execute-phase.h"
#include "macro.h"

#define PHASE_BIT(p) (1u << (p))

static const struct {
        const char *name;               /* in a result's failed_phase */
        const char *log_name;           /* in the run log's MCP_FAILED_PHASE when cancelled */
        const char *progress;
        unsigned next;                  /* PHASE_BIT()s of the phases it may go to */
} phase_table[_EXECUTE_PHASE_MAX] = {
        [EXECUTE_VALIDATE] = {
                "validate", "validate", "reading the script metadata",
                PHASE_BIT(EXECUTE_PREPARE) | PHASE_BIT(EXECUTE_QUEUE) | PHASE_BIT(EXECUTE_DONE),
        },
        [EXECUTE_PREPARE] = {
                "prepare", "prepare", "preparing the environment",
                PHASE_BIT(EXECUTE_QUEUE) | PHASE_BIT(EXECUTE_DONE),
        },
        [EXECUTE_QUEUE] = {
                "run", "queue", "queued: waiting for a free run slot",
                PHASE_BIT(EXECUTE_RUN) | PHASE_BIT(EXECUTE_DONE),
        },
        [EXECUTE_RUN] = {
                "run", "run", "running",
                PHASE_BIT(EXECUTE_DONE),
        },
        [EXECUTE_DONE] = {
                "done", "done", "done",
                0,
        },
};

const char *execute_phase_name(ExecutePhase p) {
        return p < _EXECUTE_PHASE_MAX ? phase_table[p].name : NULL;
}

const char *execute_phase_log_name(ExecutePhase p) {
        return p < _EXECUTE_PHASE_MAX ? phase_table[p].log_name : NULL;
}

const char *execute_phase_progress(ExecutePhase p) {
        return p < _EXECUTE_PHASE_MAX ? phase_table[p].progress : "working";
}

bool execute_phase_may_go(ExecutePhase from, ExecutePhase to) {
        return from < _EXECUTE_PHASE_MAX && to < _EXECUTE_PHASE_MAX && (phase_table[from].next & PHASE_BIT(to));
}

void execute_machine_init(ExecuteMachine *m, const ExecutePhaseHooks *hooks, void *userdata) {
        *m = (ExecuteMachine) { .phase = EXECUTE_VALIDATE, .hooks = hooks, .userdata = userdata };
}

int execute_machine_go(ExecuteMachine *m, ExecutePhase to) {
        void (*enter)(void *userdata);

        if (!execute_phase_may_go(m->phase, to))
                return -EINVAL;
        m->phase = to;
        enter = m->hooks->enter[to];
        /* Last: done's hook frees what holds m. */
        if (enter)
                enter(m->userdata);
        return 0;
}

void execute_machine_fail(ExecuteMachine *m, ExecutePhase named, const char *format, ...) {
        _cleanup_free_ char *msg = NULL;
        va_list ap;

        if (m->phase == EXECUTE_DONE)
                return;
        va_start(ap, format);
        if (vasprintf(&msg, format, ap) < 0)
                msg = NULL;
        va_end(ap);

        if (m->hooks->fail)
                m->hooks->fail(m->userdata, execute_phase_name(named), msg);
        (void) execute_machine_go(m, EXECUTE_DONE);
}

void execute_machine_cancel(ExecuteMachine *m) {
        if (m->phase == EXECUTE_DONE)
                return;
        if (m->hooks->cancelled)
                m->hooks->cancelled(m->userdata, execute_phase_log_name(m->phase));
        (void) execute_machine_go(m, EXECUTE_DONE);
}
