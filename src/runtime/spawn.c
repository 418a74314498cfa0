/* SPDX-License-Identifier: MIT */
/*
 * Spawning in the sandbox: a run's cgroup (or rlimits), the store's hold on its environment, a host uid of its
 * own under a root daemon, bwrap with the policy, and the bytecode and font-list compiles the store asks for.
 * runtime_spawn_sandboxed*() pick this or unsandboxed.c.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs-util.h"
#include "log.h"
#include "macro.h"
#include "programs.h"
#include "runtime-internal.h"
#include "sandbox/seccomp.h"
#include "strv.h"
#include "time-util.h"

/* ---- the sandbox -------------------------------------------------------- */

/* The cgroups of the next run (one, or one in each cgroup v1 hierarchy), when the daemon has cgroups; NULL: rlimits
 * only. */
/* A new run cgroup's name: unique across restarts too, so that a busy cgroup an earlier daemon left is never
 * joined. */
static void run_cgroup_name(Runtime *r, char name[static 64]) {
        if (!r->run_cgroups_started)
                r->run_cgroups_started = now_realtime_nsec();
        snprintf(name, 64, "run-%d-%" PRIx64 "-%llu", (int) getpid(), r->run_cgroups_started, ++r->n_run_cgroups);
}

static char **new_run_cgroup(Runtime *r, const SandboxLimits *limits, char name[static 64]) {
        char **paths = NULL;
        int k;

        if (!r->limits_logged) {
                r->limits_logged = true;
                log_info("Resource limits: %s.", strempty(sandbox_limits_mechanism_detail(r->cgroups)));
        }
        if (sandbox_cgroup_probe(r->cgroups) <= 0)
                return NULL;
        run_cgroup_name(r, name);
        k = sandbox_cgroup_run_paths(r->cgroups, name, limits->owner, &paths);
        if (k < 0) {
                log_warning_errno(k, "Failed to create the cgroup group of the run %s, falling back to rlimits for "
                                  "this run: %m", name);
                return NULL;
        }
        return paths;
}

/* The run's cgroups, made by its child before it enters them (ProcessOptions.make_cgroups): where and with which
 * limits the daemon decided. */
typedef struct RunCgroupPlan {
        SandboxCgroups *cgroups;
        const char *name;
        const SandboxLimits *limits;
        char *const *paths;
} RunCgroupPlan;

static int make_run_cgroups(void *userdata) {
        const RunCgroupPlan *plan = userdata;
        _cleanup_strv_free_ char **made = NULL;
        size_t n = strv_length(plan->paths);
        int k;

        k = sandbox_cgroup_new_run_cgroups(plan->cgroups, plan->name, plan->limits, &made);
        /* The ones the daemon watches, kills and removes, and none other. */
        for (size_t i = 0; k >= 0 && i < MAX(n, strv_length(made)); i++)
                if (i >= n || !made[i] || !streq(made[i], plan->paths[i]))
                        k = -EXDEV;
        if (k < 0)
                /* In the child, whose log is the daemon's; its rlimits instead (fallback_limits). */
                log_warning_errno(k, "Failed to create the cgroup %s of a run, falling back to rlimits for this run: "
                                  "%m", plan->name);
        return k;
}

/* A spawn in a cgroup: the owner whose group its cgroups are in (runtime_move_to_owner() changes it), and what is
 * to be released when its Process is freed. */
typedef struct CgroupSpawnHold {
        uid_t owner;
        ProcessReleaseFunc release;
        void *release_userdata;
} CgroupSpawnHold;

static void cgroup_spawn_hold_release(void *userdata) {
        CgroupSpawnHold *x = userdata;

        if (x->release)
                x->release(x->release_userdata);
        free(x);
}

int runtime_move_to_owner(Runtime *r, Process *p, uid_t uid) {
        _cleanup_strv_free_ char **paths = NULL;
        SandboxLimits limits;
        char name[64];
        int k;

        if (!p)
                return -EINVAL;
        if (!p->cgroups)
                return 0;   /* rlimits only: no group to be in */
        CgroupSpawnHold *x = p->release == cgroup_spawn_hold_release ? p->release_userdata : NULL;
        if (!x)
                return -EINVAL;   /* not one of runtime_spawn_limited()'s */
        if (x->owner == uid)
                return 0;
        /* A process of it may be on its way into the old cgroups still, and would stay there. */
        if (!process_settled(p))
                return -EBUSY;
        /* Sandboxes started ahead have the configured limits: the new cgroups get the same. */
        sandbox_limits_from_config(r->config, &limits);
        limits.owner = uid;
        run_cgroup_name(r, name);
        k = sandbox_cgroup_move_run_cgroups(r->cgroups, p->cgroups, name, &limits, &paths);
        if (k < 0)
                return log_warning_errno(k, "Failed to move a sandbox started ahead into the cgroup group of uid "
                                         UID_FMT ", not using it: %m", uid);
        /* The cgroups it leaves, empty, go off the loop: this is on the way of the call that takes it. */
        reaper_remove_empty_cgroups(p->reaper, p->event, p->cgroups);
        strv_free(p->cgroups);
        p->cgroups = TAKE_PTR(paths);
        x->owner = uid;
        return 0;
}

/* Spawn o with the run's resource limits: a cgroup of its own when we can (and may), rlimits otherwise
 * (sandbox/limits.h). */
static int runtime_spawn_limited(Runtime *r, ProcessOptions *o, const SandboxLimits *limits, bool may_cgroup,
                                 ProcessDoneFunc done, void *userdata, Process **ret) {
        char name[64];
        _cleanup_strv_free_ char **cgroups = may_cgroup ? new_run_cgroup(r, limits, name) : NULL;
        RunCgroupPlan plan = { .cgroups = r->cgroups, .name = name, .limits = limits, .paths = cgroups };
        ProcessLimit rlimits[SANDBOX_N_RLIMITS], fallback[SANDBOX_N_RLIMITS];
        int k;

        if (cgroups) {
                CgroupSpawnHold *x = calloc(1, sizeof(*x));
                if (!x) {
                        if (o->release)
                                o->release(o->release_userdata);   /* as process_spawn() does when it fails */
                        return -ENOMEM;
                }
                *x = (CgroupSpawnHold) { .owner = limits->owner, .release = o->release,
                                         .release_userdata = o->release_userdata };
                o->release = cgroup_spawn_hold_release;
                o->release_userdata = x;
        }
        o->limits = rlimits;
        o->n_limits = sandbox_limits_rlimits(limits, cgroups != NULL, rlimits);
        o->cgroups = cgroups;
        if (cgroups) {
                o->make_cgroups = make_run_cgroups;
                o->make_cgroups_userdata = &plan;
                o->fallback_limits = fallback;
                o->n_fallback_limits = sandbox_limits_rlimits(limits, false, fallback);
        }
        o->reaper = r->reaper;
        k = process_spawn(r->event, o, done, userdata, ret);
        /* Made by a child that failed after the fork: gone with it. */
        for (size_t i = 0; k < 0 && cgroups && cgroups[i]; i++)
                (void) rmdir(cgroups[i]);
        return k;
}

/* What a spawn gives back when its Process is freed: its hold on the environment, then what was to be released. */
typedef struct EnvSpawnHold {
        EnvHold *hold;
        ProcessReleaseFunc release;
        void *release_userdata;
} EnvSpawnHold;

static void env_spawn_hold_release(void *userdata) {
        EnvSpawnHold *x = userdata;

        envstore_hold_release(x->hold);
        if (x->release)
                x->release(x->release_userdata);
        free(x);
}

/* The store never collects env_dir while o's process lives (envstore_hold()). */
static int runtime_hold_env(Runtime *r, ProcessOptions *o, const char *env_dir) {
        EnvSpawnHold *x;

        if (!env_dir || !r->store)
                return 0;
        x = calloc(1, sizeof(*x));
        if (!x)
                return -ENOMEM;
        x->hold = envstore_hold(r->store, env_dir);
        if (!x->hold) {
                free(x);
                return 0;   /* not one of the store's */
        }
        x->release = o->release;
        x->release_userdata = o->release_userdata;
        o->release = env_spawn_hold_release;
        o->release_userdata = x;
        return 0;
}

/* ---- in the sandbox ------------------------------------------------------------ */

typedef struct UidLease {
        UidPool *pool;
        uid_t uid;
} UidLease;

static void uid_lease_release(void *userdata) {
        UidLease *l = userdata;

        uid_pool_release(l->pool, l->uid);
        uid_pool_unref(l->pool);
        free(l);
}

/* Under a root daemon: o runs as a host uid of its own, given back when the Process is freed, and the directories
 * own_dirs (NULL-terminated, may be NULL) become that uid's: they are where it may write. */
static int runtime_lease_uid(Runtime *r, ProcessOptions *o, char *const *own_dirs) {
        UidLease *l;
        uid_t uid;
        int k;

        if (!r->uids)
                return 0;
        k = uid_pool_take(r->uids, &uid);
        if (k == UID_POOL_EXHAUSTED) {
                log_warning("All %u uids of sandbox-uid-range are in use; a sandbox cannot start.",
                            uid_pool_n_taken(r->uids));
                return -EUSERS;   /* forwarded: the spawn fails */
        }
        if (k < 0)
                return k;
        l = malloc(sizeof(*l));
        if (!l) {
                uid_pool_release(r->uids, uid);
                return -ENOMEM;
        }
        *l = (UidLease) { .pool = uid_pool_ref(r->uids), .uid = uid };
        for (size_t i = 0; own_dirs && own_dirs[i]; i++)
                if (chown(own_dirs[i], uid, (gid_t) uid) < 0) {
                        k = -errno;
                        uid_lease_release(l);
                        return k;
                }
        o->uid = uid;
        o->gid = (gid_t) uid;
        o->release = uid_lease_release;
        o->release_userdata = l;
        return 0;
}

int runtime_spawn_sandboxed(Runtime *r, const char *env_dir, char *const *ro_paths, const SandboxData *data,
                            size_t n_data, char *const *command, uint64_t timeout_usec, const SandboxLimits *limits,
                            size_t head_max, size_t tail_max, ProcessDoneFunc done, void *userdata, Process **ret) {
        return runtime_spawn_sandboxed_with_fds(r, env_dir, ro_paths, data, n_data, NULL, 0, command, timeout_usec,
                                                limits, head_max, tail_max, done, userdata, ret);
}

/* runtime_spawn_in_bwrap(), and rw_dir (unless NULL) writable at its own path: it becomes the sandbox's. */
/* A spawn as a uid of its own (owning own_dirs), holding env_dir while it runs, with limits: what every sandbox
 * and every unsandboxed run goes through. */
int runtime_spawn_leased(Runtime *r, ProcessOptions *o, char *const *own_dirs, const char *env_dir,
                         const SandboxLimits *limits, bool may_cgroup, ProcessDoneFunc done, void *userdata,
                         Process **ret) {
        int k;

        k = runtime_lease_uid(r, o, own_dirs);
        if (k < 0)
                return k;
        k = runtime_hold_env(r, o, env_dir);
        if (k < 0) {
                if (o->release)
                        o->release(o->release_userdata);
                return k;
        }
        return runtime_spawn_limited(r, o, limits, may_cgroup, done, userdata, ret);
}

static int spawn_bwrap(Runtime *r, const char *env_dir, char *const *ro_paths, const char *rw_dir,
                       const SandboxData *data, size_t n_data, const int *pass_fds, size_t n_pass, int status_fd,
                       char *const *command, uint64_t timeout_usec, const SandboxLimits *limits, bool may_cgroup,
                       size_t head_max, size_t tail_max, ProcessDoneFunc done, void *userdata, Process **ret) {
        char *rw[] = { (char *) rw_dir, NULL };
        _cleanup_strv_free_ char **argv = NULL, **env = sandbox_run_env(env_dir ? SANDBOX_ENV_DIR : NULL),
                                 **inside = strv_new();
        static char *bwrap_env[] = { (char *) "PATH=/usr/bin:/bin", (char *) "LANG=C.UTF-8", NULL };
        _cleanup_close_ int seccomp_fd = -EBADF, args_fd = -EBADF;
        /* status, args, seccomp; the script and up to 16 of the user's files (tools/input-files.h); a few more. */
        int keep[32];
        size_t n_keep = 0;
        int k;

        if (n_data + n_pass + 3 > ELEMENTSOF(keep))
                return -E2BIG;
        /* No filter, no run: the sandbox never starts with less than it promises. Built at the first run. */
        if (!r->seccomp && (k = sandbox_seccomp_new(&r->seccomp)) < 0)
                return k;
        seccomp_fd = sandbox_seccomp_export(r->seccomp);
        if (seccomp_fd < 0)
                return seccomp_fd;

        /* The command as the run sees it: the environment at SANDBOX_ENV_DIR, not where it is on the host. */
        for (size_t i = 0; command && command[i]; i++) {
                _cleanup_free_ char *moved = NULL;
                k = env_dir ? runtime_path_moved(command[i], env_dir, SANDBOX_ENV_DIR, &moved) : 0;
                if (k < 0 || strv_extend(&inside, k > 0 ? moved : command[i]) < 0)
                        return -ENOMEM;
        }
        if (!env || !inside)
                return -ENOMEM;

        SandboxPolicy policy = runtime_sandbox_policy(r);
        policy.env_dir = env_dir;
        policy.ro_paths = ro_paths;
        policy.rw_paths = rw_dir ? rw : NULL;
        /* network-allow: a command behind the bridge (runtime_network_wrap()) gets the bridge. */
        if (inside[0] && streq(inside[0], SANDBOX_BRIDGE_PATH))
                policy.bridge = net_proxy_context_bridge(r->netproxy);
        policy.data = data;
        policy.n_data = n_data;
        policy.seccomp_fd = seccomp_fd;
        policy.env = env;
        policy.command = inside;
        /* The options through a memfd (--args): the sandbox's pid 1, a copy of bwrap, shows only the command. */
        k = sandbox_build_args(&policy, &argv, &args_fd);
        if (k < 0)
                return k;

        /* bwrap's own report (the sandbox's pid, then its exit code), which bwrap keeps from what it runs: one
         * more option in the memfd, out of sight like the others. */
        if (status_fd >= 0) {
                char opt[64];
                int n = snprintf(opt, sizeof(opt), "--json-status-fd%c%d", 0, status_fd);
                if (lseek(args_fd, 0, SEEK_END) < 0)
                        return -errno;
                k = write_all(args_fd, opt, (size_t) n + 1);
                if (k < 0)
                        return k;
                if (lseek(args_fd, 0, SEEK_SET) < 0)
                        return -errno;
                keep[n_keep++] = status_fd;
        }
        keep[n_keep++] = args_fd;
        for (size_t i = 0; i < n_data; i++)
                keep[n_keep++] = data[i].fd;
        keep[n_keep++] = seccomp_fd;
        for (size_t i = 0; i < n_pass; i++)
                keep[n_keep++] = pass_fds[i];
        ProcessOptions o = {
                .argv = argv,
                .env = bwrap_env,
                .keep_fds = keep,
                .n_keep_fds = n_keep,
                .stdin_fd = -EBADF,
                .timeout_usec = timeout_usec,
                .head_max = head_max,
                .tail_max = tail_max,
                /* The bytecode compile, the one sandbox with a directory to write to: it never slows a run. */
                .idle = rw_dir != NULL,
        };
        return runtime_spawn_leased(r, &o, rw_dir ? rw : NULL, env_dir, limits, may_cgroup, done, userdata, ret);
}

int runtime_spawn_in_bwrap(Runtime *r, const char *env_dir, char *const *ro_paths, const SandboxData *data,
                           size_t n_data, const int *pass_fds, size_t n_pass, int status_fd, char *const *command,
                           uint64_t timeout_usec, const SandboxLimits *limits, size_t head_max, size_t tail_max,
                           ProcessDoneFunc done, void *userdata, Process **ret) {
        return spawn_bwrap(r, env_dir, ro_paths, NULL, data, n_data, pass_fds, n_pass, status_fd, command,
                           timeout_usec, limits, true, head_max, tail_max, done, userdata, ret);
}

/* envstore's EnvCompileFunc: the base interpreter of the environment compiles its sources into out_dir, in the
 * sandbox, with the run's limits and no more than a run may have. */
int runtime_spawn_compile(void *userdata, EnvCompileStep step, const char *env_dir, const char *python,
                          const char *out_dir, uid_t uid, uint64_t timeout_usec, ProcessDoneFunc done,
                          void *done_userdata, Process **ret) {
        Runtime *r = userdata;
        _cleanup_free_ char *prefix_arg = NULL, *lib = NULL, *env_python = NULL;
        const Python *py = NULL;
        SandboxLimits limits;

        if (runtime_sandbox_error(r) || runtime_unsandboxed(r))
                return ENV_COMPILE_NO_SANDBOX;   /* never outside the sandbox */
        for (size_t i = 0; i < r->pythons.n && !py; i++)
                if (streq(r->pythons.items[i]->executable, python))
                        py = r->pythons.items[i];
        if (!py)
                return -ENOENT;
        if (step == ENV_COMPILE_FONTS) {
                /* matplotlib's font list: its code runs, so as a run's would, the environment where runs see it,
                 * charged to uid, with nothing of the host to write to: the list is made in the sandbox's /tmp (a
                 * tmpfs of tmpfs-size) and handed back on stdout, its name first; more than ENV_FONTS_MAX bytes
                 * are not kept (envstore's fonts_adopt() refuses them). */
                char *ro_fonts[] = { streq(py->prefix, "/usr") ? NULL : py->prefix, NULL };
                if (out_dir)
                        return -EINVAL;   /* never a host directory to write to */
                if (asprintf(&env_python, "%s/bin/python", env_dir) < 0)
                        return -ENOMEM;
                char *command[] = { env_python, (char *) "-I", (char *) "-B", (char *) "-c", (char *) font_list_code,
                                    NULL };
                sandbox_limits_from_config(r->config, &limits);
                limits.cpu_usec = 0;    /* its own time limit stands */
                limits.owner = uid;
                return spawn_bwrap(r, env_dir, ro_fonts, NULL, NULL, 0, NULL, 0, -EBADF, command, timeout_usec,
                                   &limits, true, ENV_FONTS_MAX + 1, 4096, done, done_userdata, ret);
        }
        if (asprintf(&prefix_arg, "pycache_prefix=%s", out_dir) < 0 || asprintf(&lib, "%s/lib", env_dir) < 0)
                return -ENOMEM;
        /* The environment at its own path here, which the pycache_prefix tree then mirrors (nothing of it reaches a
         * model: co_filename is set anew when a run imports the .pyc). */
        char *ro[] = { (char *) env_dir, streq(py->prefix, "/usr") ? NULL : py->prefix, NULL };
        char *command[] = { py->executable, (char *) "-I", (char *) "-S", (char *) "-B", (char *) "-X", prefix_arg,
                            (char *) "-m", (char *) "compileall", (char *) "-q", lib, NULL };
        sandbox_limits_from_config(r->config, &limits);
        limits.cpu_usec = 0;    /* the build's own time limit stands */
        limits.owner = SANDBOX_OWNER_IDLE;      /* only CPU that no run wants (limits.h) */
        return spawn_bwrap(r, NULL, ro, out_dir, NULL, 0, NULL, 0, -EBADF, command, timeout_usec, &limits, true, 4096,
                           4096, done, done_userdata, ret);
}


int runtime_spawn_sandboxed_with_fds(Runtime *r, const char *env_dir, char *const *ro_paths, const SandboxData *data,
                                     size_t n_data, const int *pass_fds, size_t n_pass, char *const *command,
                                     uint64_t timeout_usec, const SandboxLimits *limits, size_t head_max,
                                     size_t tail_max, ProcessDoneFunc done, void *userdata, Process **ret) {
        SandboxLimits configured;
        bool self_test = ret == &r->self_test;

        if (!limits) {
                sandbox_limits_from_config(r->config, &configured);
                limits = &configured;
        }
        /* The self-test always tries the real thing. */
        if (runtime_unsandboxed(r) && !self_test)
                return runtime_spawn_unsandboxed(r, env_dir, data, n_data, pass_fds, n_pass, command, timeout_usec,
                                                 limits, head_max, tail_max, done, userdata, ret);
        if (r->sandbox_error && !self_test)
                return RUNTIME_NO_SANDBOX;
        return runtime_spawn_in_bwrap(r, env_dir, ro_paths, data, n_data, pass_fds, n_pass, -EBADF, command,
                                      timeout_usec, limits, head_max, tail_max, done, userdata, ret);
}
