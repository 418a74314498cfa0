/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The result of an execute_python call, from plain facts: the text (the
 * "--- stdout ---" layout), structuredContent and the figures and files in
 * content[]. It knows nothing of the phases a call goes through or of
 * processes: execute-python.c says what happened (ExecuteFacts, and
 * ExecuteOutcome when the script ran) and sends what comes back.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "outputs.h"
#include "runtime/script.h"
#include "sandbox/limits.h"

/* The call's "limits" argument, by name: what the results say in the same words. */
typedef struct ExecuteLimitArg {
        const char *name;
        unsigned bit;
        size_t offset;
        uint64_t unit;
} ExecuteLimitArg;

#define EXECUTE_N_LIMIT_ARGS 4
extern const ExecuteLimitArg execute_limit_args[EXECUTE_N_LIMIT_ARGS];

/* What a result says of the call besides its script's outcome. */
typedef struct ExecuteFacts {
        const char *banner;             /* unsafe-no-sandbox: the line every result starts with; NULL: sandboxed */
        uint64_t duration_usec;         /* from the call to its result */
        uint64_t prepare_usec;          /* from the call to its run's start (or to its result, without a run) */
        bool built_now;                 /* an environment was built for this call */
        uint64_t timeout_usec;
        bool timeout_clamped;
        const SandboxLimits *limits;    /* in force */
        unsigned limits_lowered;        /* SANDBOX_LIMIT_* the call asked to raise: lowered to the maximum */
        const char *limits_mechanism;   /* what binds them: sandbox_limits_mechanism() */
        bool limits_asked;              /* the call gave "limits" */
        const ScriptPlan *plan;         /* NULL: the metadata was not read */
        bool prestarted;                /* the run went to a pre-started sandbox */
        bool network;                   /* the network is on (network=): hints do not suggest it */
        char *const *network_refused;   /* hosts network-allow's proxy refused, NULL or empty: none */
        const Outputs *outputs;         /* figures and files; NULL: none */
} ExecuteFacts;

/* How the script's run ended, decoded from its process. */
typedef struct ExecuteOutcome {
        int code;                       /* its exit status; 0 when killed by a signal */
        int signal;                     /* killed by this signal, else 0 */
        bool timed_out;
        const char *limit;              /* sandbox_limit_hit(): the limit it hit, or NULL */
        uint64_t run_usec;              /* how long it ran */
        const char *out, *err;          /* captured stdout and stderr (capture_text(), not yet UTF-8 clean) */
        size_t out_len, err_len;
        uint64_t out_total, out_omitted;
        uint64_t err_total, err_omitted;
} ExecuteOutcome;

static inline bool execute_outcome_failed(const ExecuteOutcome *o) {
        return o->code != 0 || o->signal || o->timed_out;
}

/* The result's and the run log's exit code: -N for death by signal N. */
static inline int execute_outcome_exit_code(const ExecuteOutcome *o) {
        return o->signal ? -o->signal : o->code;
}

/* The run log's verdict: "timeout", "limit", "killed", "failed" or "ok". */
const char *execute_outcome_verdict(const ExecuteOutcome *o);

/* "SIGKILL" for 9, into buf. */
void execute_signal_name(int sig, char buf[static 32]);

/* The result of a run: content (the text, then figures and files) and structuredContent (NULL when figures or
 * files come in content[]). The call failed when execute_outcome_failed(). */
void execute_render_run(const ExecuteFacts *f, const ExecuteOutcome *o, json_object **ret_content,
                        json_object **ret_structured);

/* The result of a call that failed before or instead of its run: phase is the result's failed_phase
 * ("validate", "prepare", "run"), message the error. */
void execute_render_error(const ExecuteFacts *f, const char *phase, const char *message, json_object **ret_content,
                          json_object **ret_structured);

/* Why a run slot was refused (SCHEDULER_QUEUE_FULL or SCHEDULER_USER_QUEUE_FULL), naming the setting that caps
 * it. running and queued count everybody's, mine and mine_queued the caller's. */
char *execute_refusal_message(int outcome, unsigned running, unsigned mine, unsigned queued, unsigned mine_queued);
