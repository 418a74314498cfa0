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
typedef struct Sandbox Sandbox;
typedef struct SandboxOp SandboxOp;
typedef struct SandboxPrepare SandboxPrepare;

#define SANDBOX_ID_LEN 32                       /* 128 bits, hex */
#define SANDBOX_FILE_MAX (1024 * 1024)           /* bytes per read_file / write_file */
#define SANDBOX_MAX_TTL_USEC (24ULL * 3600 * 1000000)

typedef struct SandboxOpOutcome {
        json_object *reply;             /* the driver's answer (borrowed), NULL when there is none */
        bool timed_out;                 /* the time limit was reached */
        bool interrupted;               /* ...and the interrupt stopped it: the state is kept */
        bool restarted;                 /* the interpreter was replaced: variables lost, files kept */
        bool reset;                     /* the whole sandbox was started afresh: variables and files lost */
        const char *error;              /* why there is no reply */
} SandboxOpOutcome;

typedef void (*SandboxReplyFunc)(Sandbox *sb, const SandboxOpOutcome *o, void *userdata);
typedef void (*SandboxPreparedFunc)(Sandbox *sb, const char *error, void *userdata);

/* The registry, made on first use, on the services of r. */
int sandboxes_setup(Runtime *r);
/* Close every sandbox and free the registry (the daemon's exit). */
void sandboxes_free(void);
/* Any sandbox alive: the daemon should not exit for idleness. */
bool sandboxes_busy(void);

/* Register a new sandbox for uid (not started yet). -EDQUOT: the uid's cap; -EUSERS: the total cap;
 * -EOPNOTSUPP: runs go without the sandbox (unsafe-no-sandbox). */
int sandbox_new(Runtime *r, uid_t uid, uint64_t ttl_usec, Sandbox **ret);
/* Files every start of the interpreter (reset_sandbox too) gets read-only at dests[i], copied from fds[i]: both
 * arrays are taken over (n at most SANDBOX_MAX_DATA), the fds kept open for the sandbox's life. Before
 * sandbox_prepare(). */
#define SANDBOX_MAX_DATA 16
void sandbox_set_data(Sandbox *sb, int *fds, char **dests, size_t n);
/* The sandbox with this id if it belongs to uid, else NULL. */
Sandbox *sandbox_find(const char *id, uid_t uid);
/* Kill it, fail what waits for it (their callbacks run from in here), forget it. Safe from inside any of its
 * callbacks, and a second time: sb stays valid until the callback that closed it returns, but nothing new
 * starts on it (sandbox_request(), sandbox_reset() and sandbox_prepare() return -ESHUTDOWN). */
void sandbox_close(Sandbox *sb);
/* Calls back once with each of uid's sandboxes. */
void sandboxes_foreach(uid_t uid, void (*cb)(Sandbox *sb, void *userdata), void *userdata);
unsigned sandboxes_count(uid_t uid);

/*
 * Resolve and prepare an environment: requirements (PEP 508 strings, a JSON
 * array or NULL) on python_version (NULL: newest). The first preparation
 * makes the sandbox's base environment and starts it; later ones (packages
 * added) restart it on the new environment with /work carried over. cb runs
 * once; cancel with sandbox_prepare_cancel().
 */
int sandbox_prepare(Sandbox *sb, json_object *requirements, const char *python_version, SandboxPreparedFunc cb,
                    void *userdata, SandboxPrepare **ret);
void sandbox_prepare_cancel(SandboxPrepare *p);

/* Queue a request for the driver; cb runs once (not from inside this call). */
int sandbox_request(Sandbox *sb, json_object *request, uint64_t timeout_usec, SandboxReplyFunc cb, void *userdata,
                    SandboxOp **ret);
/* Restart on the base environment with an empty /work (reset_sandbox). */
int sandbox_reset(Sandbox *sb, SandboxReplyFunc cb, void *userdata, SandboxOp **ret);
/* The caller no longer waits: a running cell is interrupted, a queued request dropped. */
void sandbox_op_cancel(SandboxOp *op);

/* Mark the sandbox used now (for idle reaping). */
void sandbox_touch(Sandbox *sb);

const char *sandbox_id(const Sandbox *sb);
/* network-allow: the hosts the proxy refused since the last call (a strv the caller frees); NULL without a proxy. */
char **sandbox_network_refused_take(Sandbox *sb);
uid_t sandbox_uid(const Sandbox *sb);
const char *sandbox_python_version(const Sandbox *sb);
const char *sandbox_env_path(const Sandbox *sb);
const RequirementList *sandbox_requirements(const Sandbox *sb);
bool sandbox_network(const Sandbox *sb);
bool sandbox_is_busy(const Sandbox *sb);
/* A short word: "starting", "idle", "busy", "broken". */
const char *sandbox_state(const Sandbox *sb);
uint64_t sandbox_age_usec(const Sandbox *sb);
uint64_t sandbox_idle_usec(const Sandbox *sb);
uint64_t sandbox_expires_in_usec(const Sandbox *sb);
/* VmRSS of the interpreter in KiB, -errno when unknown. */
int64_t sandbox_memory_kib(const Sandbox *sb);
/* {"name": version} of the environment's installed distributions, read on the host. */
json_object *sandbox_installed_packages(const Sandbox *sb);
/* Text output per cell, stdout + stderr (from the output-cap setting). */
uint64_t sandbox_output_cap(const Sandbox *sb);
uint64_t sandbox_default_timeout_usec(const Sandbox *sb);
uint64_t sandbox_max_timeout_usec(const Sandbox *sb);

extern const char sandbox_driver_code[];
