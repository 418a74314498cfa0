/* SPDX-License-Identifier: MIT */
/*
 * The daemon's mechanism: which cgroups, if any, this daemon gives its runs (a delegated cgroup v2 subtree; as
 * root, cgroup v2 below its own cgroup, or the v1 hierarchies), probed once, with the sentence that says why; the
 * group of runs of each owner, counted; a run's cgroups made, moved between groups, and all of them removed at
 * exit. An object, SandboxCgroups, that the manager owns.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "scheduler/cpu-share.h"
#include "limits.h"
#include "macro.h"
#include "reason.h"
#include "sha256.h"
#include "strv.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

/* ---- the daemon's mechanism ------------------------------------------- */

typedef struct Group {
        uid_t owner;
        CpuShare share;
        bool started;   /* a run of the group started since its use was last measured over a tick */
} Group;

struct SandboxCgroups {
        bool probed;
        SandboxCgroupMode mode;
        char *dirs[_SANDBOX_CGROUP_V1_MAX];     /* where runs go; v2: dirs[0] */
        char *name;                             /* of the cgroups a root daemon creates */
        char *detail;
        Group *groups;                          /* owners whose group is made */
        size_t n_groups;
        sd_event *event;                        /* weights follow use (cpu-share.h) when set */
        sd_event_source *share_timer;           /* armed while a group uses CPU */
        uint64_t share_last;                    /* when the use was last read */
};

static void share_start(SandboxCgroups *sc);

/* The owner's group, if it was made; NULL if not. */
static Group *group_find(SandboxCgroups *sc, uid_t owner) {
        for (size_t i = 0; i < sc->n_groups; i++)
                if (sc->groups[i].owner == owner)
                        return &sc->groups[i];
        return NULL;
}

/* An owner's group, once made, stays until the daemon exits (sandbox_cgroups_free()): removing it when its last run
 * ended would put an rmdir of a cgroup in the event loop, which waits for the kernel's RCU grace periods (15-30 ms
 * each on cgroup v1 beside a busy neighbour), and a user starting runs one after another would make and remove it
 * each time. There is one per owner that ran something: the peers' uids, the daemon's and the idle group. */
static void group_made(SandboxCgroups *sc, uid_t owner) {
        Group *g;

        /* A run is starting: its group's use is worth reading. */
        share_start(sc);
        g = group_find(sc, owner);
        if (g) {
                g->started = true;
                return;
        }
        g = realloc(sc->groups, (sc->n_groups + 1) * sizeof(*sc->groups));
        if (!g)
                return;   /* not remembered: made again (mkdir finds it) at its next run */
        sc->groups = g;
        sc->groups[sc->n_groups++] = (Group) { .owner = owner, .share = CPU_SHARE_INIT, .started = true };
}

int sandbox_cgroups_new(SandboxCgroups **ret, const char *key) {
        _cleanup_free_ SandboxCgroups *sc = calloc(1, sizeof(*sc));
        char hex[65];

        if (!sc)
                return -ENOMEM;
        if (key) {
                sha256_hex(key, strlen(key), hex);
                if (asprintf(&sc->name, "mcp-python-sandbox-%.16s", hex) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(sc);
        return 0;
}

static const char *instance_name(SandboxCgroups *sc) {
        return sc->name ?: "mcp-python-sandbox";
}

static int probe_v2_delegated(SandboxCgroups *sc, char **why) {
        _cleanup_free_ char *dir = NULL;
        struct statfs fs;
        int r;

        if (statfs("/sys/fs/cgroup", &fs) < 0 || (uint64_t) fs.f_type != CGROUP2_SUPER_MAGIC)
                return reason(why, -EOPNOTSUPP,
                              "/sys/fs/cgroup is not a cgroup v2 hierarchy (cgroup v1 or a hybrid layout)");
        r = sandbox_cgroup_find("/proc/self/cgroup", "/sys/fs/cgroup", &dir, why);
        if (r >= 0)
                r = sandbox_cgroup_prepare(dir, why);
        if (r < 0)
                return r;
        sandbox_cgroup_remove_stale(dir);
        sc->dirs[0] = TAKE_PTR(dir);
        return 0;
}

static int probe_v2_own(SandboxCgroups *sc, char **why) {
        _cleanup_free_ char *mount = NULL, *root = NULL, *dir = NULL;
        int r;

        r = sandbox_cgroup_mount("/proc/self/mountinfo", NULL, &mount, &root);
        if (r == -ENOENT)
                return reason(why, -EOPNOTSUPP, "no cgroup v2 hierarchy is mounted");
        if (r < 0)
                return reason(why, r, "/proc/self/mountinfo cannot be read: %s", strerror(-r));
        r = sandbox_cgroup_v2_create("/proc/self/cgroup", mount, root, instance_name(sc), &dir, why);
        if (r < 0)
                return r;
        sandbox_cgroup_remove_stale(dir);
        sc->dirs[0] = TAKE_PTR(dir);
        return 0;
}

static int probe_v1(SandboxCgroups *sc, char **why) {
        char *dirs[_SANDBOX_CGROUP_V1_MAX] = {};
        int r = 0;

        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++) {
                _cleanup_free_ char *ours = NULL, *cpu_why = NULL;
                bool optional = c == SANDBOX_CGROUP_V1_CPU || c == SANDBOX_CGROUP_V1_CPUACCT;

                r = sandbox_cgroup_v1_find("/proc/self/mountinfo", "/proc/self/cgroup", sandbox_cgroup_v1_controller(c),
                                           &ours, optional ? &cpu_why : why);
                if (r >= 0)
                        r = sandbox_cgroup_v1_create(ours, instance_name(sc), &dirs[c], optional ? &cpu_why : why);
                if (r < 0 && optional)
                        r = 0;
                if (r < 0)
                        break;
        }
        if (r < 0) {
                for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++)
                        if (dirs[c]) {
                                (void) rmdir(dirs[c]);
                                free(dirs[c]);
                        }
                return r;
        }
        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++) {
                if (dirs[c])
                        sandbox_cgroup_remove_stale(dirs[c]);
                sc->dirs[c] = dirs[c];
        }
        return 0;
}

static int describe(SandboxCgroups *sc, bool root, const char *why_v2, const char *why_own, const char *why_v1) {
        const char *pids = sc->dirs[SANDBOX_CGROUP_V1_PIDS], *memory = sc->dirs[SANDBOX_CGROUP_V1_MEMORY],
                   *cpu = sc->dirs[SANDBOX_CGROUP_V1_CPU];
        static const char rest[] = "plus rlimits for CPU time, file size, open files and core dumps";
        char memsw[PATH_MAX];

        switch (sc->mode) {
        case SANDBOX_CGROUP_V2_DELEGATED:
                return asprintf(&sc->detail,
                                "cgroup v2: every run gets a cgroup of its own under %s, in a group per user "
                                "that shares the CPUs among users (memory.max, pids.max, cpu.max), %s",
                                sc->dirs[0], rest);
        case SANDBOX_CGROUP_V2_OWN:
                return asprintf(&sc->detail,
                                "cgroup v2, created by the daemon as root: every run gets a cgroup of its own under "
                                "%s, in a group per user that shares the CPUs among users (memory.max, pids.max, "
                                "cpu.max), %s",
                                sc->dirs[0], rest);
        case SANDBOX_CGROUP_V1_OWN:
                snprintf(memsw, sizeof(memsw), "%s/memory.memsw.limit_in_bytes", memory);
                return asprintf(&sc->detail,
                                "cgroup v1 (pids, memory%s), created by the daemon as root: every run gets a cgroup "
                                "of its own in each hierarchy, under %s%s%s and %s, in a group per user%s (pids.max, "
                                "memory.limit_in_bytes%s%s), %s",
                                cpu ? ", cpu" : "", pids, cpu ? ", " : "", cpu ? memory : "", cpu ?: memory,
                                cpu ? " that shares the CPUs among users" : "",
                                access(memsw, F_OK) >= 0 ? " with swap in memory.memsw.limit_in_bytes"
                                                         : " with swappiness 0, as this kernel does not account swap",
                                cpu ? ", cpu.cfs_quota_us" : "", rest);
        case SANDBOX_CGROUP_NONE:
                break;
        }
        if (!root)
                return asprintf(&sc->detail,
                                "rlimits on the sandbox (RLIMIT_AS per process, RLIMIT_NPROC per user, RLIMIT_CPU, "
                                "RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE); no cgroup of its own for each run "
                                "because %s, and only a daemon running as root creates cgroups itself",
                                why_v2 ?: "cgroup v2 could not be used");
        return asprintf(&sc->detail,
                        "rlimits on the sandbox (RLIMIT_AS per process, RLIMIT_NPROC per user, RLIMIT_CPU, "
                        "RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE); no cgroup of its own for each run because %s; "
                        "and as root the daemon could not create cgroups itself: on cgroup v2, %s; on cgroup v1, %s",
                        why_v2 ?: "cgroup v2 could not be used", why_own ?: "it could not",
                        why_v1 ?: "it could not");
}

int sandbox_cgroup_probe(SandboxCgroups *sc) {
        _cleanup_free_ char *why_v2 = NULL, *why_own = NULL, *why_v1 = NULL;

        if (sc->probed)
                return sc->mode != SANDBOX_CGROUP_NONE;
        sc->probed = true;

        if (probe_v2_delegated(sc, &why_v2) >= 0)
                sc->mode = SANDBOX_CGROUP_V2_DELEGATED;
        else if (geteuid() == 0) {
                if (probe_v2_own(sc, &why_own) >= 0)
                        sc->mode = SANDBOX_CGROUP_V2_OWN;
                else if (probe_v1(sc, &why_v1) >= 0)
                        sc->mode = SANDBOX_CGROUP_V1_OWN;
        }
        if (describe(sc, geteuid() == 0, why_v2, why_own, why_v1) < 0)
                sc->detail = NULL;
        return sc->mode != SANDBOX_CGROUP_NONE;
}

SandboxCgroupMode sandbox_cgroup_mode(SandboxCgroups *sc) {
        (void) sandbox_cgroup_probe(sc);
        return sc->mode;
}

static unsigned base_weight(uid_t owner) {
        return owner == SANDBOX_OWNER_DAEMON ? SANDBOX_CGROUP_DAEMON_WEIGHT :
               owner == SANDBOX_OWNER_IDLE   ? SANDBOX_CGROUP_IDLE_WEIGHT :
                                               100;
}

/* The group of owner in each hierarchy (NULL where there is none), made if it is not yet. */
static int new_groups(SandboxCgroups *sc, uid_t owner, char *ret[static _SANDBOX_CGROUP_V1_MAX]) {
        bool made = group_find(sc, owner) != NULL;
        char name[32];
        int r = 0;

        (void) sandbox_cgroup_group_name(owner, name, sizeof(name));
        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++) {
                ret[c] = NULL;
                if (!sc->dirs[c] || r < 0)
                        continue;
                if (made) {
                        if (asprintf(&ret[c], "%s/%s", sc->dirs[c], name) < 0) {
                                ret[c] = NULL;
                                r = -ENOMEM;
                        }
                } else
                        r = sandbox_cgroup_new_group(sc->dirs[c], name, base_weight(owner), &ret[c]);
        }
        if (r < 0)
                for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++)
                        ret[c] = mfree(ret[c]);
        return r;
}

static void free_groups(char *groups[static _SANDBOX_CGROUP_V1_MAX]) {
        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++)
                groups[c] = mfree(groups[c]);
}

int sandbox_cgroup_new_run_cgroups(SandboxCgroups *sc, const char *name, const SandboxLimits *l,
                                   char ***ret_paths) {
        _cleanup_strv_free_ char **paths = NULL;
        _cleanup_free_ char *path = NULL;
        char *groups[_SANDBOX_CGROUP_V1_MAX];
        int r;

        if (sandbox_cgroup_mode(sc) == SANDBOX_CGROUP_NONE)
                return -EOPNOTSUPP;
        r = new_groups(sc, l->owner, groups);
        if (r < 0)
                return r;

        switch (sandbox_cgroup_mode(sc)) {
        case SANDBOX_CGROUP_V2_DELEGATED:
        case SANDBOX_CGROUP_V2_OWN:
                r = sandbox_cgroup_new_run(groups[0], name, l, &path);
                free_groups(groups);
                if (r < 0)
                        return r;
                if (strv_extend(&paths, path) < 0) {
                        (void) rmdir(path);
                        return -ENOMEM;
                }
                *ret_paths = TAKE_PTR(paths);
                group_made(sc, l->owner);
                return 0;
        case SANDBOX_CGROUP_V1_OWN:
                r = sandbox_cgroup_v1_new_run(groups, name, l, ret_paths);
                free_groups(groups);
                if (r >= 0)
                        group_made(sc, l->owner);
                return r;
        case SANDBOX_CGROUP_NONE:
                break;
        }
        free_groups(groups);
        return -EOPNOTSUPP;
}

int sandbox_cgroup_run_paths(SandboxCgroups *sc, const char *name, uid_t owner, char ***ret_paths) {
        _cleanup_strv_free_ char **paths = NULL;
        char *groups[_SANDBOX_CGROUP_V1_MAX];
        int r;

        if (sandbox_cgroup_mode(sc) == SANDBOX_CGROUP_NONE)
                return -EOPNOTSUPP;
        r = new_groups(sc, owner, groups);
        if (r < 0)
                return r;
        group_made(sc, owner);
        /* As sandbox_cgroup_new_run() and sandbox_cgroup_v1_new_run() name them: v2, the first; v1, one in each
         * hierarchy, once where controllers share one. */
        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX && r >= 0; c++) {
                _cleanup_free_ char *path = NULL;
                if (!groups[c])
                        continue;
                if (asprintf(&path, "%s/%s", groups[c], name) < 0)
                        r = -ENOMEM;
                else if (!strv_contains(paths, path) && strv_extend(&paths, path) < 0)
                        r = -ENOMEM;
                if (sandbox_cgroup_mode(sc) != SANDBOX_CGROUP_V1_OWN)
                        break;
        }
        free_groups(groups);
        if (r < 0)
                return r;
        *ret_paths = TAKE_PTR(paths);
        return 0;
}

int sandbox_cgroup_move_run_cgroups(SandboxCgroups *sc, char *const *from, const char *name, const SandboxLimits *l,
                                    char ***ret_paths) {
        _cleanup_strv_free_ char **paths = NULL;
        size_t n = strv_length((char **) from), i;
        int r;

        r = sandbox_cgroup_new_run_cgroups(sc, name, l, &paths);
        if (r < 0)
                return r;
        /* Made from the same hierarchies in the same order: one for one. */
        if (strv_length(paths) != n)
                r = -EINVAL;
        for (i = 0; r >= 0 && i < n; i++) {
                r = sandbox_cgroup_move_procs(from[i], paths[i]);
                /* None there: its child has not made or entered them yet, and would enter them after the move. */
                if (r == 0)
                        r = -ESRCH;
                /* Once more, for a child forked meanwhile (a sandbox waiting for its script forks nothing). */
                if (r >= 0)
                        r = sandbox_cgroup_move_procs(from[i], paths[i]);
        }
        if (r < 0) {
                for (size_t j = 0; j <= i && j < n; j++)
                        (void) sandbox_cgroup_move_procs(paths[j], from[j]);
                for (size_t j = 0; paths && paths[j]; j++)
                        (void) rmdir(paths[j]);
                return r;
        }
        *ret_paths = TAKE_PTR(paths);
        return 0;
}


SandboxCgroups *sandbox_cgroups_free(SandboxCgroups *sc) {
        if (!sc)
                return NULL;
        bool own = sc->mode == SANDBOX_CGROUP_V2_OWN || sc->mode == SANDBOX_CGROUP_V1_OWN;

        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++) {
                if (!sc->dirs[c])
                        continue;
                sandbox_cgroup_remove_stale(sc->dirs[c]);
                /* Ours to remove unless systemd delegated it; busy (a run still going): left for the next daemon. */
                if (own)
                        (void) rmdir(sc->dirs[c]);
                free(sc->dirs[c]);
        }
        sc->share_timer = sd_event_source_disable_unref(sc->share_timer);
        sc->event = sd_event_unref(sc->event);
        free(sc->name);
        free(sc->detail);
        free(sc->groups);
        free(sc);
        return NULL;
}

const char *sandbox_limits_mechanism(SandboxCgroups *sc) {
        return sandbox_cgroup_probe(sc) > 0 ? "cgroup" : "rlimit";
}

const char *sandbox_limits_mechanism_detail(SandboxCgroups *sc) {
        (void) sandbox_cgroup_probe(sc);
        return sc->detail ?: sandbox_limits_mechanism(sc);
}

/* ---- weights that follow use ------------------------------------------- */

/* The directory of owner's group where its use is read: v2, the one hierarchy; v1, cpuacct's (NULL: none). */
static const char *usage_dir(SandboxCgroups *sc) {
        return sc->mode == SANDBOX_CGROUP_V1_OWN ? sc->dirs[SANDBOX_CGROUP_V1_CPUACCT] : sc->dirs[0];
}

static void share_write(SandboxCgroups *sc, const Group *g) {
        char name[32], path[PATH_MAX];

        (void) sandbox_cgroup_group_name(g->owner, name, sizeof(name));
        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++) {
                if (!sc->dirs[c])
                        continue;
                snprintf(path, sizeof(path), "%s/%s", sc->dirs[c], name);
                /* Best effort: a weight not written leaves the CPU shared as it was. */
                (void) sandbox_cgroup_set_weight(path, cpu_share_weight(base_weight(g->owner), g->share.shift));
        }
}

static int share_again(sd_event_source *s) {
        int r = sd_event_source_set_time_relative(s, CPU_SHARE_TICK_USEC);
        return r < 0 ? r : sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

static int on_share_tick(sd_event_source *s, uint64_t usec, void *userdata) {
        SandboxCgroups *sc = userdata;
        uint64_t now = now_usec(), interval = now - sc->share_last, usage;
        char name[32], path[PATH_MAX];
        bool compared = false, read_any = false, busy = false;

        sc->share_last = now;
        for (size_t i = 0; i < sc->n_groups; i++) {
                Group *g = &sc->groups[i];
                /* The idle group has the least weight already, and uses only CPUs nobody else wants; the daemon's
                 * is on every user's way (cpu-share.h): neither is counted. A quiet group is not read (a daemon
                 * keeps one per user it ever served) until a run of its starts, and then its next reading is a
                 * first one. */
                if (g->owner == SANDBOX_OWNER_IDLE || g->owner == SANDBOX_OWNER_DAEMON ||
                    !(g->started || cpu_share_active(&g->share))) {
                        g->share.last_usec = CPU_SHARE_UNKNOWN;
                        continue;
                }
                (void) sandbox_cgroup_group_name(g->owner, name, sizeof(name));
                snprintf(path, sizeof(path), "%s/%s", usage_dir(sc), name);
                if (sandbox_cgroup_cpu_usage(path, &usage) < 0) {
                        busy = busy || cpu_share_active(&g->share);
                        continue;
                }
                read_any = true;
                if (g->share.last_usec != CPU_SHARE_UNKNOWN) {
                        /* Measured over a tick: from now on its use decides whether it is read. */
                        g->started = false;
                        compared = true;
                }
                if (cpu_share_update(&g->share, usage, interval))
                        share_write(sc, g);
                busy = busy || cpu_share_active(&g->share);
        }
        /* Nobody using CPU (measured over a tick), or nothing to read: no more ticks until the next run
         * (group_made()). */
        if (!read_any || (compared && !busy))
                return 0;
        return share_again(s);
}

static void share_start(SandboxCgroups *sc) {
        int enabled = SD_EVENT_OFF;

        if (!sc->event || !usage_dir(sc))
                return;
        if (sc->share_timer && sd_event_source_get_enabled(sc->share_timer, &enabled) >= 0 && enabled != SD_EVENT_OFF)
                return;
        /* After a pause the counters moved for longer than one tick: the next tick only reads them. */
        for (size_t i = 0; i < sc->n_groups; i++)
                sc->groups[i].share.last_usec = CPU_SHARE_UNKNOWN;
        sc->share_last = now_usec();
        if (!sc->share_timer) {
                if (sd_event_add_time_relative(sc->event, &sc->share_timer, CLOCK_MONOTONIC, CPU_SHARE_TICK_USEC,
                                               50 * USEC_PER_MSEC, on_share_tick, sc) < 0)
                        return;
                (void) sd_event_source_set_description(sc->share_timer, "cpu-share");
                return;
        }
        (void) share_again(sc->share_timer);
}

int sandbox_cgroups_share_cpus(SandboxCgroups *sc, sd_event *e) {
        if (sandbox_cgroup_mode(sc) == SANDBOX_CGROUP_NONE || !usage_dir(sc))
                return 0;
        sc->event = sd_event_ref(e);
        share_start(sc);
        return 1;
}
