/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Resource limits of one run: memory, processes, CPU time, file size, open
 * files, no core dumps.
 *
 * Two mechanisms. Where the daemon can have cgroups, every run gets a cgroup
 * of its own, and its memory, processes and CPU bandwidth are limits for the
 * run as a whole: in a delegated cgroup v2 subtree (memory.max, pids.max,
 * cpu.max) or, for a daemon running as root without one, in cgroups it
 * creates itself, on cgroup v2 or in the cgroup v1 pids and memory (and cpu)
 * hierarchies (pids.max, memory.limit_in_bytes, cpu.cfs_quota_us).
 * Otherwise rlimits set on bwrap, inherited by everything in the sandbox:
 * RLIMIT_AS (per process, address space rather than memory) and RLIMIT_NPROC
 * (which counts all processes of the daemon's user, and does not bind uid 0).
 * RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE and RLIMIT_CORE=0 apply in both
 * cases.
 *
 * The cgroup functions take the directories and files to work on, so that
 * tests can point them at a fake tree; sandbox_cgroup_probe() runs them once
 * on the real one and its SandboxCgroups (the manager's) remembers the outcome.
 *
 * limits.c: the model, the rlimits, what hit a limit; cgroup.c: cgroups on
 * either version; cgroup-mode.c: the daemon's mechanism.
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
        bool cpu_usec_without_cgroup;   /* cpu_usec binds only without a cgroup, whose cpu controller the caller
                                         * drives instead (a persistent sandbox's interpreter lives on) */
        uid_t owner;            /* whose share of the CPUs the run's cgroup is in (its uid's group of runs), or
                                 * SANDBOX_OWNER_DAEMON; not a limit of the run itself: sandbox_limits_equal()
                                 * and sandbox_limits_lower() leave it alone */
} SandboxLimits;

/* The daemon's own work (sandboxes started ahead for whoever comes first, metadata readers, compiles, the
 * self-test): never a peer's uid. */
#define SANDBOX_OWNER_DAEMON ((uid_t) -1)
/* Work that may use only a CPU nobody else wants (the bytecode compile of a new environment): its own group of
 * runs, "idle", at the least CPU weight there is. SCHED_IDLE alone does not do it: a policy binds only among the
 * tasks of one cgroup, and up the hierarchy a group on its CPU weighs what the group's weight says. Never a peer's
 * uid either ((uid_t) -2 is no account's). */
#define SANDBOX_OWNER_IDLE ((uid_t) -2)

/* The limits a call may lower (bits of a mask). */
enum {
        SANDBOX_LIMIT_MEMORY = 1 << 0,
        SANDBOX_LIMIT_PROCESSES = 1 << 1,
        SANDBOX_LIMIT_CPU = 1 << 2,
        SANDBOX_LIMIT_FILE_SIZE = 1 << 3,
};

#define SANDBOX_CPU_MARGIN_USEC (10 * 1000000ULL)
#define SANDBOX_N_RLIMITS 6

/* The configured limits (max-memory= ...); the automatic values (0) resolved; owned by the daemon. */
void sandbox_limits_from_config(const Config *c, SandboxLimits *ret);

/*
 * The limits of a call: max, with each field that want gives (nonzero) taking
 * its place when it is lower. Never higher than max. Returns the mask of the
 * fields want asked to raise: they were lowered to max.
 */
unsigned sandbox_limits_lower(const SandboxLimits *max, const SandboxLimits *want, SandboxLimits *ret);

/* Field by field (the struct has padding, which memcmp() would read). */
bool sandbox_limits_equal(const SandboxLimits *a, const SandboxLimits *b);

/* The rlimits to set on bwrap; with a cgroup, memory and processes are left to it. Returns how many. */
size_t sandbox_limits_rlimits(const SandboxLimits *l, bool cgroup, ProcessLimit ret[static SANDBOX_N_RLIMITS]);

/* ---- the service's own limits ------------------------------------------ */

/*
 * The whole service's last line of defence, under which the per-run cgroups do the real work: systemd's TasksMax=
 * and MemoryMax= of the unit, pids.max and the memory limit of the cgroup the daemon runs in and its ancestors.
 * They must hold what the configuration's caps let the service hold: every script that can run at once (max-runs
 * and max-sandboxes) at its max-processes, and SANDBOX_SERVICE_TASKS_MARGIN more for the daemon, uv and the
 * sandboxes' bwrap and driver processes; likewise memory at max-memory each and SANDBOX_SERVICE_MEMORY_MARGIN more,
 * but never more than SANDBOX_SERVICE_MEMORY_SHARE percent of the machine's memory (the unit's MemoryMax=80%: the
 * sum at the defaults is more than a machine has).
 */
#define SANDBOX_SERVICE_TASKS_MARGIN 768
#define SANDBOX_SERVICE_MEMORY_MARGIN (512ULL * 1024 * 1024)
#define SANDBOX_SERVICE_MEMORY_SHARE 80
#define SANDBOX_SERVICE_UNLIMITED UINT64_MAX

typedef struct SandboxServiceLimits {
        uint64_t tasks;         /* processes and threads; SANDBOX_SERVICE_UNLIMITED: none */
        uint64_t memory;        /* bytes; SANDBOX_SERVICE_UNLIMITED: none */
} SandboxServiceLimits;

/*
 * What the caps need: scripts (max-runs + max-sandboxes) of processes and memory each (0: a run's own is not
 * capped, so no limit is enough), mem_total the machine's memory (0: unknown).
 */
void sandbox_service_need(uint64_t scripts, uint64_t processes, uint64_t memory, uint64_t mem_total,
                          SandboxServiceLimits *ret);

/*
 * The limits the daemon's cgroup lives under: the smallest pids.max and memory limit of its own cgroup and every
 * ancestor up to the hierarchy's root (v1: the pids and memory hierarchies, memory.limit_in_bytes; v2: pids.max
 * and memory.max), from mountinfo and proc_cgroup (/proc/self/...). SANDBOX_SERVICE_UNLIMITED where none is set
 * or the hierarchy is not there.
 */
int sandbox_cgroup_service_limits(const char *mountinfo, const char *proc_cgroup, SandboxServiceLimits *ret);

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
 * "disk_space", "memory", "processes", "open_files", or NULL. The cgroup's
 * events first (a run that kept hitting pids.max until its timeout hit the
 * process limit), then the timeout; SIGXCPU and SIGXFSZ say it outright;
 * otherwise the last Python exception in stderr that names an exhausted
 * resource.
 */
const char *sandbox_limit_hit(const SandboxOutcome *o);

/* ---- cgroups, either version ------------------------------------------ */

typedef struct SandboxCgroupEvents {
        uint64_t oom_kill;      /* v2 memory.events, v1 memory.oom_control */
        uint64_t pids_max;      /* pids.events */
} SandboxCgroupEvents;

/*
 * The events of a run, added up over its cgroups (v2: one; v1: one in each
 * hierarchy): each directory gives what it has of memory.events,
 * memory.oom_control and pids.events. -ENOENT when none has any.
 */
int sandbox_cgroup_read_events(char *const *paths, SandboxCgroupEvents *ret);
/* Remove run cgroups left behind by an earlier daemon (run-*, empty), also in groups of runs (uid-*, daemon),
 * and those groups when they are empty then. */
void sandbox_cgroup_remove_stale(const char *dir);

/*
 * Groups of runs: every run's cgroup goes into the group of its owner, "uid-N" for a peer's uid N, "daemon" for
 * the daemon's own work, so that the cpu controller shares the CPUs among users (each group with work gets an
 * equal share, whatever the number of its runs and processes) rather than among runs. The daemon's group gets
 * a quarter of a user's weight.
 */
#define SANDBOX_CGROUP_DAEMON_WEIGHT 25         /* percent of a user's (the kernel's default) */
#define SANDBOX_CGROUP_IDLE_WEIGHT 0            /* the least: cpu.weight 1 (v2), cpu.shares 2 (v1) */
/* "uid-N", "daemon" or "idle", into buf (at least 32 bytes). */
const char *sandbox_cgroup_group_name(uid_t owner, char *buf, size_t size);
/*
 * dir/name made (or reused) to hold run cgroups: on cgroup v2 (a cgroup.subtree_control file there) with the
 * memory and pids controllers, and cpu where offered, enabled for its children; its CPU weight at weight percent
 * of the kernel's default: cpu.weight (v2, default 100) or cpu.shares (v1, default 1024), where there is such a
 * file. Its path in *ret_path.
 */
int sandbox_cgroup_new_group(const char *dir, const char *name, unsigned weight, char **ret_path);
/* The CPU weight of the cgroup at path, as sandbox_cgroup_new_group() writes it; 0 where it has no such file. */
int sandbox_cgroup_set_weight(const char *path, unsigned weight);
/* The CPU time the cgroup at path used, in µs: usage_usec of cpu.stat (v2) or cpuacct.usage (v1). */
int sandbox_cgroup_cpu_usage(const char *path, uint64_t *ret_usec);
/* Move every process listed in from/cgroup.procs into to. Returns how many, or the first error. */
int sandbox_cgroup_move_procs(const char *from, const char *to);

/*
 * Where a cgroup hierarchy is mounted, from a mountinfo file: the cgroup v1
 * hierarchy that has controller ("pids", "memory", "cpu"), or for NULL the
 * cgroup v2 one. The mount point in *ret_mount and the cgroup mounted there
 * (normally "/") in *ret_root; -ENOENT when there is none.
 */
int sandbox_cgroup_mount(const char *mountinfo, const char *controller, char **ret_mount, char **ret_root);

/* ---- cgroup v2 ---------------------------------------------------------- */

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

/*
 * Without a delegated subtree, as root: our own cgroup (proc_cgroup's "0::"
 * line, under mount, mounted from mount_root) gets a child, name, made to
 * hold run cgroups. Our cgroup must offer memory and pids, and must have them
 * enabled for its children already or be able to: cgroup v2 allows that only
 * to the root cgroup and to cgroups without processes of their own, and the
 * daemon moves no one, itself included. -EOPNOTSUPP with the reason
 * otherwise.
 */
int sandbox_cgroup_v2_create(const char *proc_cgroup, const char *mount, const char *mount_root, const char *name,
                             char **ret_dir, char **ret_reason);

/* dir/name created (or reused) with the limits written; its path in *ret_path. */
int sandbox_cgroup_new_run(const char *dir, const char *name, const SandboxLimits *l, char **ret_path);
/*
 * Set the CPU cap of the cgroups of one run (as sandbox_cgroup_new_run_cgroups()
 * made them) to quota percent of one CPU (0: none): cpu.max on v2,
 * cpu.cfs_quota_us on v1. -ENOENT when none of them has the cpu controller.
 */
int sandbox_cgroup_set_cpu_quota(char *const *paths, uint64_t quota);
/* Move pid (0: the caller) into the cgroup at path (for tests: a process in a run's group). */
int sandbox_cgroup_attach(const char *path, pid_t pid);

/* ---- cgroup v1 ---------------------------------------------------------- */

typedef enum SandboxCgroupV1 {
        SANDBOX_CGROUP_V1_PIDS,
        SANDBOX_CGROUP_V1_MEMORY,
        SANDBOX_CGROUP_V1_CPUACCT,      /* optional: what each group of runs used (scheduler/cpu-share.h) */
        SANDBOX_CGROUP_V1_CPU,          /* optional; last, as a child enters them in this order: in a group of
                                         * little weight it may wait for a CPU, and until it is in all of them
                                         * it cannot be moved to another group (a shared sandbox started ahead) */
        _SANDBOX_CGROUP_V1_MAX,
} SandboxCgroupV1;

/* "pids", "memory", "cpuacct", "cpu". */
const char *sandbox_cgroup_v1_controller(SandboxCgroupV1 c);

/*
 * Our own cgroup in the v1 hierarchy of controller: its line in proc_cgroup
 * ("4:memory:/path"), under where mountinfo says that hierarchy is mounted.
 * -EOPNOTSUPP with the reason in *ret_reason when there is none.
 */
int sandbox_cgroup_v1_find(const char *mountinfo, const char *proc_cgroup, const char *controller, char **ret_dir,
                           char **ret_reason);

/* dir/name made (or reused) to hold run cgroups; its path in *ret_dir. */
int sandbox_cgroup_v1_create(const char *dir, const char *name, char **ret_dir, char **ret_reason);

/*
 * The cgroups of one run: dirs[c]/name for each hierarchy (the cpu one may be
 * NULL; hierarchies mounted together share one directory), made (or reused)
 * with the limits written: pids.max; memory.limit_in_bytes and, where swap is
 * accounted, memory.memsw.limit_in_bytes at the same value; the OOM killer on;
 * cpu.cfs_quota_us. A CPU cap without a cpu hierarchy is -EOPNOTSUPP. Their
 * paths in *ret_paths; on failure none is left.
 */
int sandbox_cgroup_v1_new_run(char *const dirs[static _SANDBOX_CGROUP_V1_MAX], const char *name,
                              const SandboxLimits *l, char ***ret_paths);

/* ---- the daemon's mechanism ------------------------------------------- */

typedef enum SandboxCgroupMode {
        SANDBOX_CGROUP_NONE,            /* rlimits only */
        SANDBOX_CGROUP_V2_DELEGATED,    /* a subtree systemd delegated to us */
        SANDBOX_CGROUP_V2_OWN,          /* created by the daemon as root */
        SANDBOX_CGROUP_V1_OWN,          /* created by the daemon as root, in the v1 hierarchies */
} SandboxCgroupMode;

/*
 * The daemon's cgroups: which mechanism, where its runs' cgroups go, its groups
 * of runs. One for the daemon, owned by the manager and handed to what spawns.
 * key tells this daemon's cgroups from those of another on the same host (the
 * cache directory): the cgroups a root daemon creates are named after it,
 * "mcp-python-sandbox-<hash>", the same across restarts, so that a daemon
 * finds and removes what its predecessor left (NULL: "mcp-python-sandbox").
 */
typedef struct SandboxCgroups SandboxCgroups;
int sandbox_cgroups_new(SandboxCgroups **ret, const char *key);
/* At exit, when the runs are gone: remove the run cgroups still there, and the cgroups the daemon created (the
 * owners' groups among them, which stay until then). */
SandboxCgroups *sandbox_cgroups_free(SandboxCgroups *sc);
static inline void sandbox_cgroups_freep(SandboxCgroups **sc) {
        if (*sc)
                sandbox_cgroups_free(*sc);
}

/*
 * Probed once, on first use: does this daemon give runs their own cgroup? In
 * this order: a delegated cgroup v2 subtree; as root, cgroup v2 below our own
 * cgroup, then the cgroup v1 pids and memory hierarchies. Returns 1 (cgroup)
 * or 0 (rlimits only).
 */
int sandbox_cgroup_probe(SandboxCgroups *sc);
/* For tests: the mode, probed if it was not yet. */
SandboxCgroupMode sandbox_cgroup_mode(SandboxCgroups *sc);

/*
 * The cgroups of a new run, named name, in the group of l->owner, with the
 * limits written: one directory on cgroup v2, one in each hierarchy on v1.
 * -EOPNOTSUPP in rlimit mode.
 */
int sandbox_cgroup_new_run_cgroups(SandboxCgroups *sc, const char *name, const SandboxLimits *l, char ***ret_paths);
/*
 * The paths sandbox_cgroup_new_run_cgroups(sc, name, l) makes for a run of owner, without making them: the
 * group of owner is made here if it is not yet, the run's cgroups are for the spawned child to make
 * (executor/process.h: a cgroup v1 mkdir waits on a lock of the whole machine's). -EOPNOTSUPP in rlimit mode.
 */
int sandbox_cgroup_run_paths(SandboxCgroups *sc, const char *name, uid_t owner, char ***ret_paths);
/*
 * A run that was started in another group (a sandbox started ahead for whoever comes first) into the group of
 * l->owner: new cgroups named name there (as sandbox_cgroup_new_run_cgroups()), every process of from moved
 * into them. Their paths in *ret_paths; from, empty then, is the caller's to remove (off the event loop: an rmdir
 * of a cgroup waits for the kernel, executor/cgroup-remove.h). On failure the processes are back in from and
 * nothing new is left; -ESRCH (or -ENOENT) when from holds no process yet (its child makes and enters its
 * cgroups, process.h): it would enter from after the move.
 */
int sandbox_cgroup_move_run_cgroups(SandboxCgroups *sc, char *const *from, const char *name, const SandboxLimits *l,
                                    char ***ret_paths);

/* "cgroup" or "rlimit" (probes if needed). */
/*
 * From now on, the groups' CPU weights follow their recent use (cpu-share.h), read on e's clock while any group uses
 * CPU. Returns 1, or 0 where there is nothing to read it from (no cgroups; cgroup v1 without cpuacct).
 */
int sandbox_cgroups_share_cpus(SandboxCgroups *sc, sd_event *e);

const char *sandbox_limits_mechanism(SandboxCgroups *sc);
/* One sentence for people: the mechanism, and why cgroups are not used when they are not. */
const char *sandbox_limits_mechanism_detail(SandboxCgroups *sc);
