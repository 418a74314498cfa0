/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * An execute_python call in flight (a Job), shared by the files of the tool: execute-python.c (the tool, its
 * phases and the run) and execute-prestart.c (sandboxes started ahead: the pool's spec, what a job takes from it
 * and gives back). Nothing outside these includes it.
 */

#include <stdbool.h>
#include <stdint.h>

#include "execute-phase.h"
#include "input-files.h"
#include "mcp/tool.h"
#include "outputs.h"
#include "runtime/runtime.h"
#include "runtime/script.h"

typedef struct Job {
        ToolCall *call;
        Runtime *runtime;
        char *script;
        size_t script_len;
        uint64_t timeout_usec;
        int64_t timeout_requested;
        bool timeout_clamped;
        SandboxLimits limits;           /* the configured ones, lowered by the call's "limits" */
        unsigned limits_lowered;        /* SANDBOX_LIMIT_* the call asked to raise: lowered to the maximum */
        bool limits_asked;              /* the call gave "limits": the result says what was in force */

        ExecuteMachine machine;         /* the phase it is in (execute-phase.h) */
        char *activity;                 /* what the phase is busy with, when more than its name says */
        ScriptAnalysis *analysis;
        ScriptPlan *plan;
        EnvWaiter *env_waiter;
        SchedTicket slot;               /* the run slot: waiting, then held until the job ends */
        Process *proc;
        Outputs *outputs;               /* figures and files, read from out_fd as the run goes */
        int out_fd;
        sd_event_source *out_source;
        char *env_path;
        EnvHold *env_hold;              /* the store keeps env_path while the job waits for its run and runs */
        bool built_now;
        char *pool_key;                 /* the run may use, and refills, a pre-started sandbox of this key */
        bool prestarted;                /* it did */
        char **script_modules;          /* its leading imports (preimport.h), when it may use a pre-started sandbox */
        bool plain_enough;              /* preimport_script_plain_enough() */
        bool prestart_shared;           /* the one it took was the daemon's, for whoever came first */
        const char *banner;             /* unsafe-no-sandbox: the line every result starts with, from the spawn */
        bool spawned;                   /* banner is the run's: it is NULL when the run is sandboxed */
        InputFiles files;               /* the user's files, at /work/in */
        NetProxy *netproxy;             /* network-allow: the run's way out; its connections end with the job */

        uint64_t t_start, t_prepared, t_run_start;   /* the call came, the environment was ready, the run began */
        uint64_t t_end;                 /* the result was put together: one duration for its text and fields */
        sd_event_source *progress_timer;
} Job;

/* execute-python.c: the run's sandbox ended; its figures and files pipe is readable. */
void execute_job_on_run_done(Process *p, void *userdata);
int execute_job_on_outputs(sd_event_source *s, int fd, uint32_t revents, void *userdata);

/* execute-prestart.c. What one stream of a run keeps at its head and tail. */
void execute_output_caps(const Config *c, size_t *ret_head, size_t *ret_tail);
/* python -c's argument for the boot program run by python (an environment's bin/python): a loader of the code its
 * interpreter compiled once (runtime_code_fd(); *ret_fd is the descriptor the sandbox keeps, *ret_loader the string)
 * when there is one yet, else boot_code itself. */
const char *execute_boot_arg(Runtime *r, const char *python, int *ret_fd, char **ret_loader);
/* A run with the configured limits may use a pre-started sandbox: set j->pool_key. */
void execute_job_pool_key(Job *j);
/* Hand the script to a pre-started sandbox: true when it runs there now. */
bool execute_job_take_prestarted(Job *j);
/*
 * The run just started imports the environment's modules first (its leading import statements, up to the last whose
 * top-level name site-packages provides: what its end would teach) and the sandbox it took (taken: its warm
 * imports; NULL: a fresh one) had not imported them: its user's next sandbox starts now, importing them beside the
 * run, so that the same script called again at once finds them imported. The refill after the reply learns the same
 * list and keeps that sandbox.
 */
void execute_job_warm_early(Job *j, const char *taken);
/* The environment was just used: keep a sandbox for it started (again), importing what this run teaches. */
void execute_job_refill(Job *j);
