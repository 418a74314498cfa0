/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What the pieces of src/workspace/ share and the tools do not see: the Workspace, its registry, its requests
 * (WorkspaceOp) and preparations, and the functions one piece calls in another. workspace.c holds the object, the
 * registry and the facts; ops.c the queue of requests and its state machine; spawn.c the long-lived bwrap and what
 * it prints; wire.c the driver's records, its hello and bwrap's report; prepare.c the environments.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "driver-input.h"
#include "macro.h"
#include "runtime/runtime.h"
#include "runtime/script.h"
#include "workspace.h"

#define INTERRUPT_GRACE_USEC (2 * USEC_PER_SEC)
#define RESTART_WAIT_USEC (10 * USEC_PER_SEC)
#define INTERNAL_TIMEOUT_USEC (60 * USEC_PER_SEC)
#define SNAPSHOT_MAX (16 * 1024 * 1024)
/* The CPU a sandbox's cgroup may use while nothing of ours runs in it (what a cell left running), in percent of
 * one CPU: enough to keep a server a cell started answering, too little to matter to anyone else. */
#define IDLE_CPU_QUOTA 5
#define MAX_FAST_DEATHS 3
/* What a sandbox prints on stderr goes to the log: a line is cut after this many bytes, */
#define OUTPUT_LINE_MAX 400
/* and at most this many lines per interval are logged, the rest counted. */
#define OUTPUT_LINES_BURST 50
#define OUTPUT_LINES_INTERVAL_USEC (60 * USEC_PER_SEC)

typedef enum OpKind {
        OP_REQUEST,             /* a message for the driver */
        OP_RESTART,             /* switch to sb->next_env (or the base one), maybe carrying /work over */
} OpKind;

typedef enum OpPhase {
        PHASE_QUEUED,
        PHASE_SENT,             /* sending or sent; waiting for the reply */
        PHASE_INTERRUPTING,     /* SIGINT sent, waiting a little */
        PHASE_KILLING,          /* the worker was killed; waiting for the fresh one */
        PHASE_SNAPSHOT,         /* restart: saving /work */
        PHASE_STARTING,         /* restart: waiting for the new sandbox */
        PHASE_RESTORE,          /* restart: putting /work back */
} OpPhase;

struct WorkspaceOp {
        Workspace *sandbox;
        WorkspaceOp *next;
        OpKind kind;
        OpPhase phase;
        json_object *request;
        uint64_t timeout_usec;
        bool keep_files;
        bool timed_out;
        json_object *snapshot;          /* restart: the tar of /work, base64 */
        WorkspaceReplyFunc cb;          /* NULL once the caller is gone */
        void *userdata;
};

struct WorkspacePrepare {
        Workspace *sandbox;
        ScriptAnalysis *analysis;
        ScriptPlan *plan;
        EnvWaiter *env_waiter;
        WorkspaceOp *restart;
        sd_event_source *defer;
        char *error;
        WorkspacePreparedFunc cb;
        void *userdata;
};

/*
 * A Workspace is referenced by its registry (from workspace_new() until workspace_close()) and, for as long as they
 * run, by the event handlers and functions that call back into the tools: a callback may close the sandbox (a
 * failed create_sandbox does), and the code that called it must still be able to look at it afterwards. Closed, it
 * is out of the registry, its process and event sources are gone, and nothing new starts on it; the memory goes with
 * the last reference.
 */
struct Workspace {
        unsigned n_ref;
        bool closed;
        WorkspaceRegistry *registry;
        Workspace *next, *prev;
        char id[WORKSPACE_ID_LEN + 1];
        uid_t uid;
        bool network;                   /* its interpreter was started with network access */
        SchedTicket place;              /* SCHED_WORKSPACE while it is open, charged to uid */
        SchedTicket run_slot;           /* SCHED_RUN while a cell (an "exec" request) runs, as a run's */
        SchedTicket carry;              /* SCHED_CARRY while a restart carries /work over (the head op's) */
        SchedLoop loop;                 /* the event loop's CPU its messages take, charged to uid */
        int loop_priority;              /* its sources' sd-event priority, as the scheduler last said */
        uint64_t created_usec, used_usec, ttl_usec;
        sd_event_source *reap_timer;

        /* The environment: the base one from creation, the current one, the one a restart switches to. */
        const Python *python;
        RequirementList base_reqs, reqs, next_reqs;
        char *base_env, *env, *next_env;
        int data_fds[WORKSPACE_MAX_DATA];       /* the user's files (workspace_set_data()) */
        char *data_dests[WORKSPACE_MAX_DATA];
        size_t n_data;
        EnvHold *base_hold, *env_hold, *next_hold;   /* the store keeps them while the sandbox may use them */
        bool started;

        /* The running sandbox */
        Process *proc;
        NetProxy *netproxy;             /* network-allow: the sandbox's way out, made anew with each start */
        int sock;
        sd_event_source *io;
        bool ready;                     /* the worker said hello */
        bool said_hello;                /* some worker did, since the sandbox started */
        const char *protocol_error;     /* what broke the protocol; the sandbox is being stopped */
        int status_fd;                  /* bwrap's --json-status-fd */
        sd_event_source *status_io;
        char status_line[256];
        size_t status_len;
        pid_t init_pid;                 /* the sandbox's pid 1 (bwrap's "child-pid"), as we see it; 0: not yet */
        pid_t worker_pid;
        int worker_pidfd;
        int cpu_busy;                   /* the CPU cap in place: 1 a run's, 0 the idle one, -1 the one it was
                                         * started with (idle), not set since */
        bool cpu_cap_failed;            /* setting it failed since the start (said once) */
        unsigned fast_deaths;
        uint64_t spawned_usec;
        char *broken;                   /* why it cannot run; set after repeated failures */

        /* Its stderr (bwrap's and the driver's, which a cell can reach too) on its way to the log */
        char line[OUTPUT_LINE_MAX];
        size_t line_len;
        uint64_t line_cut;              /* bytes of this line past OUTPUT_LINE_MAX */
        uint64_t lines_since_usec;
        unsigned lines_logged;          /* in the interval since lines_since_usec */
        uint64_t lines_dropped;

        /* Messages */
        char *out;                      /* the message being sent */
        size_t out_len, out_off;
        DriverInput input;

        WorkspaceOp *ops;               /* head is the current one */
        sd_event_source *op_timer;
        sd_event_source *defer;         /* dispatch from the loop, not from callers */
        WorkspacePrepare *prepare;      /* the preparation in progress, if any */
};

/* How a sandbox's bwrap is started: runtime_spawn_in_bwrap(), or a fake that test-workspace.c puts in its place. */
typedef int (*WorkspaceSpawnFunc)(Runtime *r, const char *env_dir, char *const *ro_paths, const SandboxData *data,
                                  size_t n_data, const int *pass_fds, size_t n_pass, int status_fd,
                                  char *const *command, uint64_t timeout_usec, const SandboxLimits *limits,
                                  size_t head_max, size_t tail_max, ProcessDoneFunc done, void *userdata,
                                  Process **ret);

struct WorkspaceRegistry {
        sd_event *event;
        const Config *config;
        Runtime *runtime;
        WorkspaceSpawnFunc spawn;
        Workspace *list;
        unsigned n;
};

/* The snapshot that carries /work over to a new environment: SNAPSHOT_MAX bytes of tar, base64. */
#define SNAPSHOT_MESSAGE_MAX ((SNAPSHOT_MAX + 2) / 3 * 4 + 65536)

/* workspace.c: a reference held while code that calls back into the tools runs (see struct Workspace). */
Workspace *workspace_ref(Workspace *sb);
Workspace *workspace_unref(Workspace *sb);
DEFINE_TRIVIAL_CLEANUP_FUNC(Workspace *, workspace_unref);
/* Answer every request of sb with error (their callbacks run from in here). */
void workspace_fail_all(Workspace *sb, const char *error);

/* ops.c: answer op (its callback runs from in here) and forget it. */
void workspace_op_finish(WorkspaceOp *op, const WorkspaceOpOutcome *o);
/* Look at the queue from the loop, not from the caller. */
void workspace_schedule_dispatch(Workspace *sb);
/* A restart is under way: the environment it switches to becomes the current one. */
void workspace_switch_env(Workspace *sb);
/* Queue op at the end; *ret = op. */
int workspace_op_queue(Workspace *sb, WorkspaceOp *op, WorkspaceOp **ret);

/* spawn.c: start the sandbox on sb->env: 0, WORKSPACE_CLOSED, WORKSPACE_NO_SANDBOX (the sandbox self-test failed:
 * runtime_self_test_error() says why) or -errno. Stop it, freeing all that belongs to the running one. */
enum {
        WORKSPACE_NO_SANDBOX = WORKSPACE_BUSY + 1,
};
int workspace_spawn(Workspace *sb);
void workspace_stop(Workspace *sb);
/* Put the CPU cap that fits what it does now in place (a run's while we wait for it, else the idle one). */
void workspace_cpu_update(Workspace *sb);

/* wire.c: the driver's socket and bwrap's status fd, as event handlers. */
int workspace_on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata);
int workspace_on_status(sd_event_source *s, int fd, uint32_t revents, void *userdata);
/* Send what is left of sb->out (0, or -errno; EPOLLOUT is watched until it is gone). */
int workspace_send_pending(Workspace *sb);
/* The largest message the driver may send us (the request's "max_message"). */
size_t workspace_message_max(const Config *c);
int workspace_pidfd_signal(int fd, int sig);
