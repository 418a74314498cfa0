/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The Runtime's own state and the functions its files share (runtime.c, probes.c, spawn.c, unsandboxed.c,
 * network.c, metadata.c, python-install.c). Only src/runtime/ includes this: the tools see runtime.h alone.
 */

#include "metadata.h"
#include "runtime.h"
#include "envstore/pyinstall.h"
#include "sandbox/seccomp.h"
#include "sandbox/uidpool.h"

typedef struct RuntimeCode RuntimeCode;

struct Runtime {
        sd_event *event;
        const Config *config;
        Reaper *reaper;                 /* the manager's */
        SandboxCgroups *cgroups;        /* the manager's */
        SandboxSeccomp *seccomp;        /* the runs' system call filter, built at the first */
        uint64_t run_cgroups_started;   /* wall clock (ns) at the first run cgroup: names unique across restarts */
        unsigned long long n_run_cgroups;
        bool limits_logged;             /* "Resource limits: ..." said once */
        sd_event_source *runs_retry;    /* serves runs that waited for their clients to read (scheduler_set_wake()) */

        char *uv_path, *uv_version, *bwrap_version;
        char *uv_refused;               /* why uv is not used (older than the store needs), or NULL */
        char *service_limits;           /* runtime_check_service_limits()'s finding, for check_environment */
        char *etc_dir;
        char **data_binds;              /* the data-dirs entries a sandbox can read (runtime_check_data_dirs()) */
        EnvStore *store;

        /* Start-up probes */
        Pythons pythons;
        Process **probes;
        size_t n_probes;
        unsigned pending;
        bool started, ready;
        WaitQueue ready_waiters;

        /* Sandbox self-test */
        Process *self_test;
        uint64_t self_test_usec;        /* CLOCK_MONOTONIC when the last one ended; 0: none has yet */
        char *sandbox_error;
        WaitQueue self_test_waiters;

        /* unsafe-no-sandbox */
        char *user;                     /* who the daemon, and then every script, runs as */
        char *unsandboxed_banner;
        bool unsandboxed;               /* as last announced in the log */
        bool source_builds_announced;   /* allow-source-builds, likewise */

        MetadataReader *metadata;       /* runtime_parse_toml()'s */

        /* The one scheduler (scheduler/scheduler.h): runs, helpers, builds, compiles, walks, sandboxes. */
        Scheduler *sched;
        unsigned max_runs;

        /* Sandboxes started ahead (prestart=); they count neither as running nor against idleness. */
        Pool *pool;
        RuntimePrestartFunc prestart;   /* starts one (execute_python's), NULL: none */

        /* A root daemon's sandboxes each run as a host uid of their own (sandbox-uid-range=); NULL otherwise. */
        UidPool *uids;

        /* Pythons installed on demand (python-downloads=) into the store's pythons/; NULL without uv. */
        PyInstaller *pyinstaller;
        /* network-allow=: the proxy that is the runs' only way out. */
        NetProxyContext *netproxy;
        /* execute_python's boot program compiled, one per interpreter (code.c). */
        RuntimeCode **codes;
        size_t n_codes;
};

/* code.c: one interpreter's compiled boot program. */
RuntimeCode *runtime_code_free(RuntimeCode *c);
/* network.c: network-allow= as the configuration says now (at start and at each reload). */
void runtime_configure_netproxy(Runtime *r);

/* probes.c: the warnings unsafe-no-sandbox= and allow-source-builds= call for; the sandbox self-test (again). */
void runtime_announce_unsandboxed(Runtime *r);
int runtime_start_self_test(Runtime *r);

/* spawn.c: a spawn with the run's limits (its cgroup or rlimits), the store's hold on env_dir, a uid of its own;
 * envstore's EnvCompileFunc. */
int runtime_spawn_leased(Runtime *r, ProcessOptions *o, char *const *own_dirs, const char *env_dir,
                         const SandboxLimits *limits, bool may_cgroup, ProcessDoneFunc done, void *userdata,
                         Process **ret);
int runtime_spawn_compile(void *userdata, EnvCompileStep step, const char *env_dir, const char *python,
                          const char *out_dir, uid_t uid, uint64_t timeout_usec, ProcessDoneFunc done,
                          void *done_userdata, Process **ret);

/* unsandboxed.c: a path below from moved below to; a spawn without the sandbox (unsafe-no-sandbox=yes). */
int runtime_path_moved(const char *path, const char *from, const char *to, char **ret);
int runtime_spawn_unsandboxed(Runtime *r, const char *env_dir, const SandboxData *data, size_t n_data,
                              const int *pass_fds, size_t n_pass, char *const *command, uint64_t timeout_usec,
                              const SandboxLimits *limits, size_t head_max, size_t tail_max, ProcessDoneFunc done,
                              void *userdata, Process **ret);

/* metadata.c: the Runtime's metadata reader (r->metadata), which spawns in the sandbox. */
int runtime_metadata_setup(Runtime *r);

/* python-install.c: the store's pythons/ and its installer; an interpreter uv installed, added to the list. */
int runtime_pythons_dir_setup(Runtime *r);
void runtime_on_python_installed(const char *version, const char *executable, const char *prefix,
                                 void *userdata);
