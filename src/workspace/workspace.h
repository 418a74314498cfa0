/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Persistent sandboxes: one long-lived bwrap per sandbox running a small
 * Python driver (driver.py) that keeps an interpreter's state between calls.
 * The daemon talks to it over a SOCK_SEQPACKET socket pair (requests and
 * replies as JSON, see driver.py); the sandbox's user code never sees the
 * daemon's side of anything.
 *
 * A sandbox belongs to the uid that created it: to anyone else it does not
 * exist. Sandboxes live in a daemon-wide registry (they survive the client
 * reconnecting), are reaped when idle or past their time to live, and are
 * capped per uid and in total. The work dir /work is a size-capped tmpfs
 * inside the sandbox; the daemon never follows a path the sandbox controls.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pep723/pep508.h"

typedef struct Runtime Runtime;
typedef struct Workspace Workspace;
typedef struct WorkspaceRegistry WorkspaceRegistry;
typedef struct WorkspaceOp WorkspaceOp;
typedef struct WorkspacePrepare WorkspacePrepare;

#define WORKSPACE_ID_LEN 32                     /* 128 bits, hex */
#define WORKSPACE_FILE_MAX (1024 * 1024)         /* bytes per read_file / write_file */
#define WORKSPACE_MAX_TTL_USEC (24ULL * 3600 * 1000000)

typedef struct WorkspaceOpOutcome {
        json_object *reply;             /* the driver's answer (borrowed), NULL when there is none */
        bool timed_out;                 /* the time limit was reached */
        bool interrupted;               /* ...and the interrupt stopped it: the state is kept */
        bool restarted;                 /* the interpreter was replaced: variables lost, files kept */
        bool reset;                     /* the whole sandbox was started afresh: variables and files lost */
        const char *error;              /* why there is no reply */
} WorkspaceOpOutcome;

typedef void (*WorkspaceReplyFunc)(Workspace *sb, const WorkspaceOpOutcome *o, void *userdata);
typedef void (*WorkspacePreparedFunc)(Workspace *sb, const char *error, void *userdata);

/* The registry of the daemon's persistent sandboxes, on the services of r (the manager owns it). */
int workspace_registry_new(WorkspaceRegistry **ret, Runtime *r);
/* Close every sandbox and free the registry (the daemon's exit). */
WorkspaceRegistry *workspace_registry_free(WorkspaceRegistry *reg);
/* Any sandbox alive: the daemon should not exit for idleness. */
bool workspace_registry_busy(const WorkspaceRegistry *reg);

/* Why workspace_new() made none: its documented outcomes, apart from -errno for a failure. */
enum {
        WORKSPACE_USER_QUOTA = 1,       /* uid has max-sandboxes-per-user open (or that is 0) */
        WORKSPACE_TOTAL_QUOTA,          /* max-sandboxes are open (or that is 0) */
        WORKSPACE_UNSANDBOXED,          /* runs go without the sandbox (unsafe-no-sandbox): no persistent ones */
};
/* Register a new sandbox for uid (not started yet): 0 and *ret, one of the above, or -errno. */
int workspace_new(WorkspaceRegistry *reg, uid_t uid, uint64_t ttl_usec, Workspace **ret);
/* Files every start of the interpreter (reset_sandbox too) gets read-only at dests[i], copied from fds[i]: both
 * arrays are taken over (n at most WORKSPACE_MAX_DATA), the fds kept open for the sandbox's life. Before
 * workspace_prepare(). */
#define WORKSPACE_MAX_DATA 16
void workspace_set_data(Workspace *sb, int *fds, char **dests, size_t n);
/* The sandbox with this id if it belongs to uid, else NULL. */
Workspace *workspace_find(WorkspaceRegistry *reg, const char *id, uid_t uid);
/* Kill it, fail what waits for it (their callbacks run from in here), forget it. Safe from inside any of its
 * callbacks, and a second time: sb stays valid until the callback that closed it returns, but nothing new
 * starts on it (workspace_request(), workspace_reset() and workspace_prepare() return WORKSPACE_CLOSED). */
void workspace_close(Workspace *sb);
/* Calls back once with each of uid's sandboxes. */
void workspace_registry_foreach(WorkspaceRegistry *reg, uid_t uid, void (*cb)(Workspace *sb, void *userdata),
                                void *userdata);
/* For tests: how many sandboxes uid has. */
unsigned workspace_registry_count(const WorkspaceRegistry *reg, uid_t uid);

/* Why workspace_prepare(), workspace_request() or workspace_reset() started nothing (their callback never runs),
 * apart from -errno for a failure: */
enum {
        WORKSPACE_CLOSED = WORKSPACE_UNSANDBOXED + 1,   /* workspace_close() was called: nothing new starts on it */
        WORKSPACE_BUSY,                 /* workspace_prepare(): a preparation of this sandbox is already running */
};

/*
 * Resolve and prepare an environment: requirements (PEP 508 strings, a JSON
 * array or NULL) on python_version (NULL: newest). The first preparation
 * makes the sandbox's base environment and starts it; later ones (packages
 * added) restart it on the new environment with /work carried over. cb runs
 * once; cancel with workspace_prepare_cancel(). 0, WORKSPACE_CLOSED, WORKSPACE_BUSY or -errno.
 */
int workspace_prepare(Workspace *sb, json_object *requirements, const char *python_version, WorkspacePreparedFunc cb,
                      void *userdata, WorkspacePrepare **ret);
void workspace_prepare_cancel(WorkspacePrepare *p);

/* Queue a request for the driver; cb runs once (not from inside this call). 0, WORKSPACE_CLOSED or -errno. */
int workspace_request(Workspace *sb, json_object *request, uint64_t timeout_usec, WorkspaceReplyFunc cb,
                      void *userdata, WorkspaceOp **ret);
/* Restart on the base environment with an empty /work (reset_sandbox). 0, WORKSPACE_CLOSED or -errno. */
int workspace_reset(Workspace *sb, WorkspaceReplyFunc cb, void *userdata, WorkspaceOp **ret);
/* The caller no longer waits: a running cell is interrupted, a queued request dropped. */
void workspace_op_cancel(WorkspaceOp *op);

/* Mark the sandbox used now (for idle reaping). */
void workspace_touch(Workspace *sb);

const char *workspace_id(const Workspace *sb);
/* network-allow: the hosts the proxy refused since the last call (a strv the caller frees); NULL without a proxy. */
char **workspace_network_refused_take(Workspace *sb);
const char *workspace_python_version(const Workspace *sb);
/* For tests: the environment it runs on (kept across a restart of its driver). */
const char *workspace_env_path(const Workspace *sb);
const RequirementList *workspace_requirements(const Workspace *sb);
bool workspace_network(const Workspace *sb);
bool workspace_is_busy(const Workspace *sb);
/* A short word: "starting", "idle", "busy", "broken". */
const char *workspace_state(const Workspace *sb);
uint64_t workspace_age_usec(const Workspace *sb);
uint64_t workspace_idle_usec(const Workspace *sb);
uint64_t workspace_expires_in_usec(const Workspace *sb);
/* VmRSS of the interpreter in KiB, -errno when unknown. */
int64_t workspace_memory_kib(const Workspace *sb);
/* {"name": version} of the environment's installed distributions, read on the host. */
json_object *workspace_installed_packages(const Workspace *sb);
/* Text output per cell, stdout + stderr (from the output-cap setting). */
uint64_t workspace_output_cap(const Workspace *sb);
uint64_t workspace_default_timeout_usec(const Workspace *sb);
uint64_t workspace_max_timeout_usec(const Workspace *sb);

extern const char workspace_driver_code[];
