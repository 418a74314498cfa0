/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The environment store: one virtual environment per key, where the key is
 * a hash of everything that decides its contents (requirements, interpreter,
 * index settings, uv version). Environments are built by uv from the
 * sanitized requirement list (never from a script) in a temporary directory
 * and renamed into place when complete, so a failed or interrupted build
 * leaves nothing. Concurrent requests for one key wait for the one build.
 * Runs only ever see an environment read-only.
 */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "config/config.h"
#include "executor/process.h"
#include "envstore/pythons.h"
#include "scheduler/scheduler.h"
#include "pep723/pep508.h"

typedef struct EnvStore EnvStore;
typedef struct EnvWaiter EnvWaiter;

typedef struct EnvResult {
        int error;              /* 0, or -errno */
        const char *path;       /* the environment, when ready */
        const char *message;    /* why the build failed: a few lines for the model */
        uint64_t build_usec;
} EnvResult;

typedef void (*EnvReadyFunc)(const EnvResult *result, void *userdata);

/* The store's documented outcomes: positive values, never errors (HACKING.md, "Errors"), each of the functions
 * named. */
enum {
        ENVSTORE_SIZES_CACHED = 1,      /* envstore_sizes(): sizes from a walk that ended a few seconds ago */
        ENVSTORE_WALKS_FULL,            /* envstore_gc(), envstore_sizes(): max-walks is reached, no walk is started
                                         * now (the timer's next one collects); cb is not called */
        ENVSTORE_SLOTS_FULL,            /* envstore_prepare(): every build slot of the Python is held, by builds of
                                         * this daemon or of another one on the same store; nothing is built and cb
                                         * is not called */
};

/* other_uids: sandboxes run as uids other than ours (a root daemon's): they pass through envs/ (0711) to their
 * environment; else envs/ is ours alone (0700). */
/* sched: where builds (SCHED_BUILD), compiles (SCHED_COMPILE) and disk walks (SCHED_WALK) wait their turn;
 * reaper: what the builds' processes are spawned with (it gives background work its cgroups). */
int envstore_new(EnvStore **ret, sd_event *e, const Config *config, Scheduler *sched, Reaper *reaper,
                 const char *uv_path, bool other_uids);

/*
 * How the store starts an interpreter on one of its environments: in a sandbox where env_dir is read-only and
 * out_dir the only writable place of the host's. ENV_COMPILE_BYTECODE: the base interpreter python compiles the
 * environment's bytecode into out_dir (a pycache_prefix tree), running nothing of the packages.
 * ENV_COMPILE_FONTS: the environment's interpreter, as a run sees it, imports matplotlib.font_manager with
 * MPLCONFIGDIR in the sandbox's own size-capped /tmp (out_dir is NULL: no host directory is writable), then writes
 * to its stdout the font list's name, a newline and its contents, at most ENV_FONTS_MAX bytes in all; charged to
 * uid. Set by whoever owns the sandbox, once it can start them; until then, nothing is compiled. Returns 0 when
 * started, ENV_COMPILE_NO_SANDBOX when there is no working sandbox to start it in (nothing runs outside one), or
 * -errno.
 */
#define ENV_FONTS_MAX (4 * 1024 * 1024)
#define ENV_COMPILE_NO_SANDBOX 1
typedef enum EnvCompileStep {
        ENV_COMPILE_BYTECODE,
        ENV_COMPILE_FONTS,
} EnvCompileStep;
typedef int (*EnvCompileFunc)(void *userdata, EnvCompileStep step, const char *env_dir, const char *python,
                              const char *out_dir, uid_t uid, uint64_t timeout_usec, ProcessDoneFunc done,
                              void *done_userdata, Process **ret);
void envstore_set_compiler(EnvStore *s, EnvCompileFunc f, void *userdata);
EnvStore *envstore_free(EnvStore *s);
void envstore_set_uv_version(EnvStore *s, const char *version);

/*
 * The oldest uv whose options the store relies on: UV_SYSTEM_CERTS (system-certs=) came in uv 0.11.0;
 * UV_LOCK_TIMEOUT in 0.9.4; --default-index and --index (index-url=, extra-index-url=) in 0.4.23. An older
 * uv ignores the environment variables silently and answers unknown options with a usage error.
 */
#define ENVSTORE_UV_VERSION_MIN "0.11.0"
/* 0 when uv's version (as "uv --version" gives it, "0.13.9") is new enough; 1 with a one-sentence reason naming
 * the version needed in *ret_reason when it is older or cannot be read; -ENOMEM. */
int envstore_check_uv_version(const char *version, char **ret_reason);
/* Refuse uv: from now on every build that needs packages fails with reason, and uv is never started. */
int envstore_refuse_uv(EnvStore *s, const char *reason);

void envstore_key(const EnvStore *s, const Python *py, const RequirementList *reqs, char ret[65]);
/* The directory of a built environment (malloc'd), or NULL if it is not there. */
char *envstore_lookup(EnvStore *s, const char *key);
/*
 * Build the environment unless it is being built already; either way, cb
 * runs when it is ready or failed (never from inside this call). ret_waiter
 * may be NULL (warm-up); a waiter can be cancelled. 0, ENVSTORE_SLOTS_FULL
 * (cb is not called), or -errno.
 */
int envstore_prepare(EnvStore *s, uid_t uid, const char *key, const Python *py, const RequirementList *reqs, EnvReadyFunc cb,
                     void *userdata, EnvWaiter **ret_waiter);
void envstore_waiter_cancel(EnvWaiter *w);

unsigned envstore_n_building(const EnvStore *s);
unsigned envstore_n_ready(EnvStore *s);
/*
 * Remove leftovers of interrupted builds (only those no daemon on this store holds the lock of); then enforce the
 * size and age budget (LRU), now and every few minutes.
 */
void envstore_cleanup(EnvStore *s);
/*
 * Start the disk walk that measures the store and the uv cache (each inode once) and collects the least recently
 * used environments over the budget. In a child process; one at a time (a request while one runs makes one more
 * run after it). 0, ENVSTORE_WALKS_FULL, or -errno.
 */
int envstore_gc(EnvStore *s, const char *keep_key);

/*
 * Keep the environment at path (a directory envstore_lookup() or a build gave) from being collected until the hold
 * is released: whatever runs, waits to run or stands ready on it holds it. NULL when path is none of the store's
 * (or out of memory). A hold may outlive the store.
 */
typedef struct EnvHold EnvHold;
EnvHold *envstore_hold(EnvStore *s, const char *path);
EnvHold *envstore_hold_release(EnvHold *h);
static inline void envstore_hold_releasep(EnvHold **h) {
        *h = envstore_hold_release(*h);
}
/* Whether the environment of key is held (for tests: a hold keeps it from the collector). */
bool envstore_held(const EnvStore *s, const char *key);

typedef struct EnvSizes {
        bool known;             /* false: the walk failed */
        uint64_t store_bytes;   /* inodes first seen in the store */
        uint64_t cache_bytes;   /* inodes in the uv cache */
        uint64_t total_bytes;   /* both, each inode once: what the budget counts */
} EnvSizes;
typedef struct EnvSizesWaiter EnvSizesWaiter;
typedef void (*EnvSizesFunc)(const EnvSizes *sizes, void *userdata);
/*
 * The store's sizes: ENVSTORE_SIZES_CACHED and *ret_cached when a walk ended a few seconds ago; otherwise 0, and cb
 * is called when the walk in flight (started if there is none: all callers share one) ends; ENVSTORE_WALKS_FULL or
 * -errno when none can be started.
 */
int envstore_sizes(EnvStore *s, EnvSizes *ret_cached, EnvSizesFunc cb, void *userdata, EnvSizesWaiter **ret_waiter);
void envstore_sizes_cancel(EnvSizesWaiter *w);
/* For tests: disk walks in flight, 0 or 1. */
unsigned envstore_n_walks(const EnvStore *s);
