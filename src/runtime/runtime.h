/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Runtime: what the tools need to run scripts — the programs found on this
 * machine (bwrap, uv, Pythons) and whether the sandbox works, the
 * environment store, the TOML reader for script metadata, and the run
 * scheduler (a cap on concurrent runs with a FIFO queue behind it).
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"
#include "envstore/envstore.h"
#include "envstore/pythons.h"
#include "executor/pool.h"
#include "executor/process.h"
#include "netproxy/proxy.h"
#include "sandbox/limits.h"
#include "sandbox/sandbox.h"
#include "scheduler/scheduler.h"
#include "waitq.h"

typedef struct Runtime Runtime;
typedef struct TomlRequest TomlRequest;

/* reaper: what every process the runtime and its store spawn is handed to (executor/process.h); it must outlive
 * the runtime, which finishes it (runtime_free()) before its own releases' targets go. cgroups: the daemon's
 * (sandbox/limits.h), where runs get their cgroups; it must outlive the reaper. */
int runtime_new(Runtime **ret, sd_event *event, const Config *config, Reaper *reaper, SandboxCgroups *cgroups);
Runtime *runtime_free(Runtime *r);
/* Background work after READY: probes, warm-up. Never delays serving. */
void runtime_start(Runtime *r);
bool runtime_is_idle(const Runtime *r);
void runtime_reload(Runtime *r);

/* Start-up probes (Pythons, uv version, sandbox self-test) finished? Else wait. */
bool runtime_is_ready(const Runtime *r);
WaitEntry *runtime_when_ready(Runtime *r, WaitFunc cb, void *userdata);
/*
 * The sandbox self-test again, for check_environment; cb when done. A result younger than
 * RUNTIME_SELF_TEST_FRESH_USEC is taken as it is, so that a client asking over and over makes the daemon start at
 * most one sandbox per that time, whoever else asks: NULL then, and also when the test could not be started (its
 * error in runtime_self_test_error()). Callers asking while a test runs share it. Like the one at start and at
 * reload, it is the daemon's background work (its group of runs, at a quarter of a user's CPU weight).
 */
#define RUNTIME_SELF_TEST_FRESH_USEC (5 * USEC_PER_SEC)
WaitEntry *runtime_self_test(Runtime *r, WaitFunc cb, void *userdata);

const char *runtime_uv_path(const Runtime *r);
const char *runtime_uv_version(const Runtime *r);
/* Why uv is not used although it was found (older than ENVSTORE_UV_VERSION_MIN), or NULL. */
const char *runtime_uv_refused(const Runtime *r);
/*
 * At start and at each reload: do the limits of the cgroup the daemon runs in (the unit's TasksMax= and
 * MemoryMax=) hold what the configuration's caps let the service hold (sandbox_service_need())? Logs one warning
 * naming the setting to raise and by how much when not. Returns whether they do.
 */
bool runtime_check_service_limits(Runtime *r);
/* Its finding in a few words ("enough: ...", "too small: ..."), NULL before the first check. */
const char *runtime_service_limits(const Runtime *r);
const char *runtime_bwrap_version(const Runtime *r);
/* NULL when scripts can run: the sandbox works, or runs go without it (unsafe-no-sandbox); else the cause and
 * the fix. */
const char *runtime_sandbox_error(const Runtime *r);
/* What the last sandbox self-test found (NULL: it passed), also when it does not decide. */
const char *runtime_self_test_error(const Runtime *r);
/* How long ago the last self-test ended, in whole seconds (0 also while none has). */
unsigned runtime_self_test_age_sec(const Runtime *r);
/* unsafe-no-sandbox=yes: runs go without bwrap (see runtime_spawn_sandboxed()). A reload may turn it on or off. */
bool runtime_unsandboxed(const Runtime *r);
/* Unsandboxed: one line that says so, for every result of a run; NULL when runs are sandboxed. Take it when
 * the run is spawned (or handed a pre-started process): a reload may flip the switch while it runs. The
 * string lives as long as the Runtime. */
const char *runtime_unsandboxed_banner(const Runtime *r);
/* The name of the user the daemon runs as (unsandboxed, every script too). */
const char *runtime_user(const Runtime *r);
const Pythons *runtime_pythons(const Runtime *r);
EnvStore *runtime_envstore(const Runtime *r);
const Config *runtime_config(const Runtime *r);
sd_event *runtime_event(const Runtime *r);
/* Sandboxes started ahead for recently used environments (execute_python fills and takes them). */
Pool *runtime_pool(const Runtime *r);
/* Keep a sandbox started ahead for runs in this environment: the hook the execute_python tool registers with
 * runtime_set_prestart() (the pool's items are its runs'). Without one, warm-up starts nothing ahead. 0;
 * RUNTIME_NO_SANDBOX when the sandbox does not work (nothing started); -errno. */
typedef int (*RuntimePrestartFunc)(Runtime *r, const char *env_path, const char *prefix);
void runtime_set_prestart(Runtime *r, RuntimePrestartFunc f);

/*
 * Pythons installed on demand (envstore/pyinstall.h). runtime_python_downloads(): may a call have one installed
 * (python-downloads=, and uv is there)? runtime_install_python(): install what request names ("3.12", ">=3.12"),
 * charged to uid as a build (SCHED_BUILD);
 * cb gets NULL when it is there, then runtime_pythons() lists it, else the reason. -EPERM when installs are off,
 * -EINVAL for a request that is no version. The Python list only grows while the daemon runs: a chosen Python
 * stays valid, though its files may have been collected (runtime_python_installed(): one of ours, which can be
 * installed again).
 */
typedef struct RuntimePythonRequest RuntimePythonRequest;
typedef void (*RuntimePythonFunc)(const char *error, void *userdata);
bool runtime_python_downloads(const Runtime *r);
bool runtime_python_installed(const Runtime *r, const Python *py);
int runtime_install_python(Runtime *r, uid_t uid, const char *request, RuntimePythonFunc cb, void *userdata,
                           RuntimePythonRequest **ret);
void runtime_install_python_cancel(RuntimePythonRequest *req);

/* Parse TOML text (a PEP 723 block) into JSON; cached by content hash. */
/* Parse TOML text (a PEP 723 block) into JSON; cached by content hash. A block not in the cache costs a
 * metadata-reader sandbox, charged to uid (SCHED_HELPER: it waits its turn over max-helpers). */
typedef void (*TomlParsedFunc)(json_object *doc, const char *error, void *userdata);
int runtime_parse_toml(Runtime *r, uid_t uid, const char *toml, TomlParsedFunc cb, void *userdata, TomlRequest **ret);
void runtime_toml_cancel(TomlRequest *req);

/* The one scheduler every spawn and held process of the daemon goes through (scheduler/scheduler.h). */
Scheduler *runtime_scheduler(const Runtime *r);
/* The daemon's cgroups (sandbox/limits.h): the limits mechanism runs get. */
SandboxCgroups *runtime_cgroups(const Runtime *r);

/*
 * Run slots (the scheduler's SCHED_RUN): max-runs in all, max-runs-per-user for one uid, served round robin
 * among the uids that wait. 0: t holds the slot; SCHEDULER_QUEUED: t waits and cb runs when it is granted (from
 * within another run's release); SCHEDULER_QUEUE_FULL when max-queue is full, SCHEDULER_USER_QUEUE_FULL when the
 * user's share of it is, SCHEDULER_REPLIES_UNREAD instead of either while the user's runs wait for its clients to
 * read their replies; -ENOMEM. Give it back with scheduler_release(t).
 */
int runtime_acquire_slot(Runtime *r, SchedTicket *t, uid_t uid, SchedGrantFunc cb, void *userdata);
/* What a call refused with SCHEDULER_REPLIES_UNREAD is told: how much its user leaves unread, and what to do. NULL:
 * out of memory. */
char *runtime_replies_unread_message(const Runtime *r, uid_t uid);
unsigned runtime_n_running(const Runtime *r);
unsigned runtime_n_running_for(const Runtime *r, uid_t uid);
unsigned runtime_max_runs_per_user(const Runtime *r);
unsigned runtime_n_queued_for(const Runtime *r, uid_t uid);
unsigned runtime_max_queued_per_user(const Runtime *r);
unsigned runtime_n_queued(const Runtime *r);
unsigned runtime_max_runs(const Runtime *r);

enum {
        RUNTIME_NO_SANDBOX = 1,         /* runtime_spawn_sandboxed*(): the sandbox does not work (runtime_sandbox_error()
                                         * says why); nothing was started */
};

/*
 * Spawn a command in the run sandbox. env_dir (the virtual environment, may be
 * NULL) and ro_paths are bound read-only, data files are created from their
 * fds. 0 and *ret; without a working sandbox RUNTIME_NO_SANDBOX, and nothing
 * starts: there is no silent unsandboxed fallback; -errno. limits: the run's resource limits, NULL for the
 * configured ones (see sandbox/limits.h for what enforces them); in the
 * sandbox, the system call filter of sandbox/seccomp.h always applies.
 *
 * With unsafe-no-sandbox=yes the command runs directly instead, as the
 * daemon's user, in a private directory made for it in $TMPDIR and removed
 * when the Process is freed: RUN/work stands for /work (the cwd and HOME;
 * each argument after the program that is /work or below it is rewritten;
 * data files are written there, read-only, and a dest outside /work is
 * -EINVAL), RUN/tmp for /tmp (TMPDIR). The resource limits, the cgroup and
 * pass_fds are the same; there are no namespaces, no read-only root and no
 * system call filter.
 */
int runtime_spawn_sandboxed(Runtime *r, const char *env_dir, char *const *ro_paths, const SandboxData *data, size_t n_data,
                            char *const *command, uint64_t timeout_usec, const SandboxLimits *limits, size_t head_max,
                            size_t tail_max, ProcessDoneFunc done, void *userdata, Process **ret);
/* The same, and each of pass_fds stays open in the sandbox at the same number: pipes the command writes
 * results to. */
int runtime_spawn_sandboxed_with_fds(Runtime *r, const char *env_dir, char *const *ro_paths, const SandboxData *data,
                                     size_t n_data, const int *pass_fds, size_t n_pass, char *const *command,
                                     uint64_t timeout_usec, const SandboxLimits *limits, size_t head_max,
                                     size_t tail_max, ProcessDoneFunc done, void *userdata, Process **ret);
/* The bwrap half of the above, whatever unsafe-no-sandbox says: persistent sandboxes always run in bwrap, with a
 * cgroup of their own wherever runs get one (Process.cgroups). status_fd (unless negative) becomes bwrap's
 * --json-status-fd: a line with "child-pid" (the sandbox's pid 1 as we see it), later one with "exit-code". */
int runtime_spawn_in_bwrap(Runtime *r, const char *env_dir, char *const *ro_paths, const SandboxData *data,
                           size_t n_data, const int *pass_fds, size_t n_pass, int status_fd, char *const *command,
                           uint64_t timeout_usec, const SandboxLimits *limits, size_t head_max, size_t tail_max,
                           ProcessDoneFunc done, void *userdata, Process **ret);
/*
 * A program of the daemon's own, compiled once per Python (src/runtime/code.c): a new read-only descriptor of a
 * sealed memfd holding source compiled by the base interpreter of python (an environment's bin/python, resolved) in
 * the sandbox, marshal()ed, and its size. -EAGAIN while that compile runs (the first call starts it); -ENOMEDIUM
 * when runs may not use the sandbox (it does not work, unsafe-no-sandbox=yes, or the probes are not done): there is
 * nothing to compile in; another negative errno when there is none for other reasons (-ENOENT: an unknown
 * interpreter, a compile that failed). On any error the caller runs the source itself. One source per daemon: the
 * first call's.
 */
#define RUNTIME_CODE_MAX (1024 * 1024)
int runtime_code_fd(Runtime *r, const char *source, const char *python, size_t *ret_size);
/* python -c's argument that runs the code in fd (of size bytes) as -c would have run its source; malloc'd. */
char *runtime_code_loader(int fd, size_t size);
/* A memfd with data, sealed against any change (for tests). */
int runtime_code_seal(const void *data, size_t size);
/*
 * network-allow= (and network=no, and runs sandboxed): a run's only way out is the daemon's proxy. Then
 * runtime_network_wrap() makes a proxy for a run of uid and returns 1: *ret_command is command behind the bridge
 * (SANDBOX_BRIDGE_PATH, which the spawn binds into the sandbox), *ret_fd the socket the sandbox must keep at the
 * same number, *ret_proxy the run's proxy (free it when the run ends: that closes its connections). Else 0 and
 * nothing: no bridge, no socket.
 */
bool runtime_network_allowlisted(const Runtime *r);
int runtime_network_wrap(Runtime *r, uid_t uid, char *const *command, NetProxy **ret_proxy, int *ret_fd,
                         char ***ret_command);
/* The same for a sandbox started before it is known whose it is (prestart=): no proxy yet, but *ret_ctl_fd, the
 * daemon's end, which runtime_network_adopt() turns into the proxy of the uid that takes the sandbox (taking
 * ctl_fd, also on failure). */
int runtime_network_wrap_later(Runtime *r, char *const *command, int *ret_ctl_fd, int *ret_fd, char ***ret_command);
int runtime_network_adopt(Runtime *r, uid_t uid, int ctl_fd, NetProxy **ret);
/* A run started in the daemon's cgroup group (a sandbox started ahead for whoever came first) into the group of
 * uid, whose share of the CPUs it then uses (sandbox/limits.h). 0 when it is there now (or has no cgroups to move),
 * negative when it stays where it was: then it is no sandbox for uid (the caller drops it); -EBUSY while it is
 * still entering its cgroups (process_settled()). */
int runtime_move_to_owner(Runtime *r, Process *p, uid_t uid);
/* The machine-wide part of a run's sandbox policy (bwrap, network, tmpfs size,
 * /etc): every sandboxed process starts from it. */
SandboxPolicy runtime_sandbox_policy(const Runtime *r);
/* Why sandboxes cannot read this data directory (*ret: a sentence fragment, "is not a directory"), or *ret NULL
 * when they can. Looks now. -ENOMEM only. */
int runtime_data_dir_problem(const Runtime *r, const char *path, char **ret);
/* The data-dirs entries (NAME=PATH) the sandboxes get: those they can read, as last checked. */
char *const *runtime_data_binds(const Runtime *r);
/* A memfd holding data, positioned at its start. */
int memfd_with(const char *name, const void *data, size_t n);
