/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Resource limits of one run: memory, processes, CPU time, file size, open
 * files, no core dumps.
 *
 * Two mechanisms. When the daemon owns a delegated cgroup v2 subtree, every
 * run gets a child cgroup of its own (memory.max, pids.max, cpu.max): limits
 * for the run as a whole. Otherwise rlimits set on bwrap, inherited by
 * everything in the sandbox: RLIMIT_AS (per process, address space rather
 * than memory) and RLIMIT_NPROC (which counts all processes of the daemon's
 * user, and does not bind uid 0). RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE and
 * RLIMIT_CORE=0 apply in both cases.
 *
 * The cgroup functions take the directories to work on, so that tests can
 * point them at a fake tree; sandbox_cgroup_probe() runs them once on the
 * real one and remembers the outcome for the whole daemon.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "executor/process.h"

typedef struct Config Config;

typedef struct SandboxLimits {
        uint64_t memory;        /* bytes; 0: no limit */
        uint64_t processes;     /* processes and threads; 0: no limit */
        uint64_t cpu_usec;      /* CPU time; 0: no limit */
        uint64_t file_size;     /* bytes, the largest file a run may write; 0: no limit */
        uint64_t open_files;    /* 0: inherited */
        uint64_t cpu_quota;     /* percent of one CPU, cgroup only; 0: no cap */
} SandboxLimits;

/* The limits a call may lower (bits of a mask). */
enum {
        SANDBOX_LIMIT_MEMORY = 1 << 0,
        SANDBOX_LIMIT_PROCESSES = 1 << 1,
        SANDBOX_LIMIT_CPU = 1 << 2,
        SANDBOX_LIMIT_FILE_SIZE = 1 << 3,
};

#define SANDBOX_CPU_MARGIN_USEC (10 * 1000000ULL)
#define SANDBOX_N_RLIMITS 6

/* The configured limits (max-memory= ...); the automatic values (0) resolved. */
void sandbox_limits_from_config(const Config *c, SandboxLimits *ret);

/*
 * The limits of a call: max, with each field that want gives (nonzero) taking
 * its place when it is lower. Never higher than max. Returns the mask of the
 * fields want asked to raise: they were lowered to max.
 */
unsigned sandbox_limits_lower(const SandboxLimits *max, const SandboxLimits *want, SandboxLimits *ret);

/* The rlimits to set on bwrap; with a cgroup, memory and processes are left to it. Returns how many. */
size_t sandbox_limits_rlimits(const SandboxLimits *l, bool cgroup, ProcessLimit ret[static SANDBOX_N_RLIMITS]);

/* ---- what hit a limit --------------------------------------------------- */

/* bwrap, the sandbox's init, passes on the script's death by signal N as exit status 128+N: N, else 0. */
int sandbox_exit_signal(int exit_code);

typedef struct SandboxOutcome {
        int exit_code;          /* bwrap's: 128+N when the script died of signal N (unless decoded) */
        bool decoded;           /* exit_code is the script's own status, and signal its death: no 128+N in it */
        int signal;             /* bwrap itself killed by a signal, else 0 */
        bool timed_out;
        const char *stderr_text;
        bool oom_killed;        /* the run's cgroup saw an OOM kill */
        bool pids_max;          /* the run's cgroup refused a fork at pids.max */
} SandboxOutcome;

/*
 * Which limit a failed run hit: "timeout", "cpu_time", "file_size",
 * "disk_space", "memory", "processes", "open_files", or NULL. SIGXCPU and
 * SIGXFSZ say it outright; otherwise the cgroup's events, then the last
 * Python exception in stderr that names an exhausted resource.
 */
const char *sandbox_limit_hit(const SandboxOutcome *o);

/* ---- cgroup v2 ---------------------------------------------------------- */

typedef struct SandboxCgroupEvents {
        uint64_t oom_kill;      /* memory.events */
        uint64_t pids_max;      /* pids.events */
} SandboxCgroupEvents;

/*
 * The delegated cgroup this process may create run cgroups in, from
 * proc_cgroup (the "0::/path" line of /proc/self/cgroup) under mount. A
 * cgroup named "supervisor" (systemd's DelegateSubgroup=, or ours) stands for
 * its parent. Delegated means: not the root cgroup, cgroup.subtree_control
 * writable, and for uid 0 the trusted.delegate or user.delegate xattr systemd
 * sets. -EOPNOTSUPP with the reason in *ret_reason otherwise.
 */
int sandbox_cgroup_find(const char *proc_cgroup, const char *mount, char **ret_dir, char **ret_reason);

/*
 * Make dir hold run cgroups: the memory and pids controllers (and cpu, when
 * there) enabled for its children. A cgroup with processes cannot do that
 * ("no internal processes"), so they are moved to dir/supervisor first.
 */
int sandbox_cgroup_prepare(const char *dir, char **ret_reason);

/* dir/name created (or reused) with the limits written; its path in *ret_path. */
int sandbox_cgroup_new_run(const char *dir, const char *name, const SandboxLimits *l, char **ret_path);
/* Move pid (0: the caller) into the cgroup at path. */
int sandbox_cgroup_attach(const char *path, pid_t pid);
int sandbox_cgroup_read_events(const char *path, SandboxCgroupEvents *ret);
/* Remove run cgroups left behind by an earlier daemon (run-*, empty). */
void sandbox_cgroup_remove_stale(const char *dir);

/*
 * Process-wide, probed once on first use: does this daemon give runs their
 * own cgroup? Returns 1 (cgroup) or 0 (rlimits only).
 */
int sandbox_cgroup_probe(void);
/* The delegated cgroup runs are created in; NULL in rlimit mode. */
const char *sandbox_cgroup_dir(void);
/* "cgroup" or "rlimit" (probes if needed). */
const char *sandbox_limits_mechanism(void);
/* One sentence for people: the mechanism, and why cgroups are not used when they are not. */
const char *sandbox_limits_mechanism_detail(void);
