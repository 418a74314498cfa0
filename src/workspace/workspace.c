/* SPDX-License-Identifier: MIT */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <limits.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "driver-input.h"
#include "fs-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "protocol/limits.h"
#include "runtime/runtime.h"
#include "runtime/script.h"
#include "sandbox/limits.h"
#include "strv.h"
#include "time-util.h"
#include "utf8.h"
#include "workspace.h"

#define HELLO_TIMEOUT_USEC (30 * USEC_PER_SEC)
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
        SchedTicket place;              /* SCHED_SANDBOX while it is open, charged to uid */
        SchedTicket run_slot;           /* SCHED_RUN while a cell (an "exec" request) runs, as a run's */
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
        int cpu_busy;                   /* the CPU cap in place: 1 a run's, 0 the idle one, -1 none yet */
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

struct WorkspaceRegistry {
        sd_event *event;
        const Config *config;
        Runtime *runtime;
        Workspace *list;
        unsigned n;
};

static void dispatch(Workspace *sb);
static int workspace_spawn(Workspace *sb);
static void workspace_stop(Workspace *sb);
static void schedule_dispatch(Workspace *sb);
static void reap_arm(Workspace *sb);
static void switch_env(Workspace *sb);

static Workspace *workspace_ref(Workspace *sb) {
        if (sb)
                sb->n_ref++;
        return sb;
}

static Workspace *workspace_unref(Workspace *sb) {
        if (!sb)
                return NULL;
        assert(sb->n_ref > 0);
        if (--sb->n_ref > 0)
                return NULL;
        /* Only workspace_close() drops the registry's reference: the process and the event sources are gone. */
        assert(sb->closed && !sb->proc && !sb->io && !sb->defer && !sb->ops && !sb->prepare);
        requirement_list_done(&sb->base_reqs);
        requirement_list_done(&sb->reqs);
        requirement_list_done(&sb->next_reqs);
        envstore_hold_release(sb->base_hold);
        envstore_hold_release(sb->env_hold);
        envstore_hold_release(sb->next_hold);
        free(sb->base_env);
        for (size_t i = 0; i < sb->n_data; i++) {
                safe_close(sb->data_fds[i]);
                free(sb->data_dests[i]);
        }
        free(sb->env);
        free(sb->next_env);
        free(sb->broken);
        free(sb);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Workspace *, workspace_unref);

/* ---- registry ------------------------------------------------------------ */

int workspace_registry_new(WorkspaceRegistry **ret, Runtime *r) {
        WorkspaceRegistry *reg = calloc(1, sizeof(*reg));

        if (!reg)
                return -ENOMEM;
        reg->event = sd_event_ref(runtime_event(r));
        reg->config = runtime_config(r);
        reg->runtime = r;
        *ret = reg;
        return 0;
}

WorkspaceRegistry *workspace_registry_free(WorkspaceRegistry *reg) {
        if (!reg)
                return NULL;
        while (reg->list)
                workspace_close(reg->list);
        sd_event_unref(reg->event);
        free(reg);
        return NULL;
}

bool workspace_registry_busy(const WorkspaceRegistry *reg) {
        return reg && reg->n > 0;
}

unsigned workspace_registry_count(const WorkspaceRegistry *reg, uid_t uid) {
        unsigned n = 0;
        for (Workspace *sb = reg->list; sb; sb = sb->next)
                n += sb->uid == uid;
        return n;
}

void workspace_registry_foreach(WorkspaceRegistry *reg, uid_t uid, void (*cb)(Workspace *sb, void *userdata),
                                void *userdata) {
        for (Workspace *sb = reg->list, *next; sb; sb = next) {
                next = sb->next;
                if (sb->uid == uid)
                        cb(sb, userdata);
        }
}

Workspace *workspace_find(WorkspaceRegistry *reg, const char *id, uid_t uid) {
        if (!id || strlen(id) != WORKSPACE_ID_LEN)
                return NULL;
        for (Workspace *sb = reg->list; sb; sb = sb->next)
                /* Another user's sandbox does not exist for this caller. */
                if (sb->uid == uid && streq(sb->id, id))
                        return sb;
        return NULL;
}

static int on_reap(sd_event_source *s, uint64_t usec, void *userdata) {
        Workspace *sb = userdata;
        const Config *c = sb->registry->config;
        uint64_t now = now_usec();
        bool expired = sb->ttl_usec > 0 && now >= sb->created_usec + sb->ttl_usec;

        if (!expired && (sb->ops || sb->prepare)) {
                /* Busy: working counts as use. */
                sb->used_usec = now;
                reap_arm(sb);
                return 0;
        }
        if (!expired && now < sb->used_usec + c->sandbox_idle_timeout_usec) {
                reap_arm(sb);
                return 0;
        }
        log_info("Closing sandbox %.8s… of uid " UID_FMT ": %s.", sb->id, sb->uid,
                 expired ? "its time to live is over" : "idle for too long");
        workspace_close(sb);
        return 0;
}

static void reap_arm(Workspace *sb) {
        const Config *c = sb->registry->config;
        uint64_t when = UINT64_MAX;

        if (sb->closed)
                return;
        if (c->sandbox_idle_timeout_usec > 0)
                when = sb->used_usec + c->sandbox_idle_timeout_usec;
        if (sb->ttl_usec > 0)
                when = MIN(when, sb->created_usec + sb->ttl_usec);
        if (when == UINT64_MAX) {
                if (sb->reap_timer)
                        (void) sd_event_source_set_enabled(sb->reap_timer, SD_EVENT_OFF);
                return;
        }
        if (!sb->reap_timer) {
                if (sd_event_add_time(sb->registry->event, &sb->reap_timer, CLOCK_MONOTONIC, when, USEC_PER_SEC / 10,
                                      on_reap, sb) < 0)
                        log_warning("No reaping timer for sandbox %.8s…; it lives until closed.", sb->id);
                return;
        }
        (void) sd_event_source_set_time(sb->reap_timer, when);
        (void) sd_event_source_set_enabled(sb->reap_timer, SD_EVENT_ONESHOT);
}

void workspace_touch(Workspace *sb) {
        sb->used_usec = now_usec();
        /* Tell the store the environment is in use, so its collection (least recently used first) spares it. */
        if (sb->env) {
                char marker[PATH_MAX];
                snprintf(marker, sizeof(marker), "%s/.mcp-python-sandbox-env.json", sb->env);
                (void) utimensat(AT_FDCWD, marker, NULL, 0);
        }
}

int workspace_new(WorkspaceRegistry *reg, uid_t uid, uint64_t ttl_usec, Workspace **ret) {
        Runtime *r = reg->runtime;
        const Config *c = reg->config;
        uint8_t raw[WORKSPACE_ID_LEN / 2];
        Workspace *sb;
        int k;

        /* The driver and the file tools hold on to /work and a sandbox around it: without one, no persistent
         * sandbox. Those started before a reload turned unsafe-no-sandbox on stay sandboxed. */
        if (runtime_unsandboxed(r))
                return WORKSPACE_UNSANDBOXED;
        /* 0 turns persistent sandboxes off (for everybody, or per user), as it always did. */
        if (c->max_sandboxes_per_user == 0)
                return WORKSPACE_USER_QUOTA;
        if (c->max_sandboxes == 0)
                return WORKSPACE_TOTAL_QUOTA;
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t) sizeof(raw))
                return -EIO;

        sb = calloc(1, sizeof(*sb));
        if (!sb)
                return -ENOMEM;
        /* An open sandbox holds its place in the scheduler: max-sandboxes-per-user and max-sandboxes. */
        Scheduler *sched = runtime_scheduler(r);
        k = scheduler_try_acquire(sched, &sb->place, SCHED_SANDBOX, uid);
        if (k != 0) {
                free(sb);
                if (k < 0)
                        return k;
                return scheduler_held_by(sched, SCHED_SANDBOX, uid) >= c->max_sandboxes_per_user
                               ? WORKSPACE_USER_QUOTA
                               : WORKSPACE_TOTAL_QUOTA;
        }
        sb->n_ref = 1;          /* the registry's */
        sb->registry = reg;
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(sb->id + 2 * i, 3, "%02x", raw[i]);
        sb->uid = uid;
        sb->sock = -EBADF;
        sb->status_fd = -EBADF;
        sb->worker_pidfd = -EBADF;
        sb->cpu_busy = -1;
        sb->created_usec = sb->used_usec = now_usec();
        sb->ttl_usec = MIN(ttl_usec, WORKSPACE_MAX_TTL_USEC);

        sb->next = sb->registry->list;
        if (sb->registry->list)
                sb->registry->list->prev = sb;
        sb->registry->list = sb;
        sb->registry->n++;
        reap_arm(sb);
        *ret = sb;
        return 0;
}

static void op_finish(WorkspaceOp *op, const WorkspaceOpOutcome *o);

static void fail_all(Workspace *sb, const char *error) {
        _unused_ _cleanup_(workspace_unrefp) Workspace *ref = workspace_ref(sb);

        while (sb->ops) {
                WorkspaceOpOutcome o = { .error = error };
                op_finish(sb->ops, &o);
        }
}

void workspace_close(Workspace *sb) {
        if (!sb || sb->closed)
                return;

        /* The callbacks below may close it again (a no-op now) or free what refers to it: hold it until the end. */
        _unused_ _cleanup_(workspace_unrefp) Workspace *ref = workspace_ref(sb);
        sb->closed = true;
        if (sb->prev)
                sb->prev->next = sb->next;
        else
                sb->registry->list = sb->next;
        if (sb->next)
                sb->next->prev = sb->prev;
        sb->next = sb->prev = NULL;
        sb->registry->n--;

        if (sb->prepare) {
                WorkspacePrepare *p = TAKE_PTR(sb->prepare);
                WorkspacePreparedFunc cb = p->cb;
                void *ud = p->userdata;
                p->cb = NULL;
                workspace_prepare_cancel(p);
                if (cb)
                        cb(NULL, "the sandbox was closed", ud);
        }
        fail_all(sb, "the sandbox was closed");
        workspace_stop(sb);
        sb->reap_timer = sd_event_source_disable_unref(sb->reap_timer);
        sb->op_timer = sd_event_source_disable_unref(sb->op_timer);
        sb->defer = sd_event_source_disable_unref(sb->defer);
        scheduler_release(&sb->run_slot);
        scheduler_release(&sb->place);
        workspace_unref(sb);    /* the registry's */
}

/* ---- the process ------------------------------------------------------------ */

static void output_flush(Workspace *sb);

static void workspace_stop(Workspace *sb) {
        if (sb->proc)
                output_flush(sb);
        sb->io = sd_event_source_disable_unref(sb->io);
        sb->sock = safe_close(sb->sock);
        sb->status_io = sd_event_source_disable_unref(sb->status_io);
        sb->status_fd = safe_close(sb->status_fd);
        sb->status_len = 0;
        sb->init_pid = 0;
        sb->worker_pidfd = safe_close(sb->worker_pidfd);
        sb->worker_pid = 0;
        sb->proc = process_free(sb->proc);   /* kills bwrap and all in it */
        sb->netproxy = net_proxy_free(sb->netproxy);
        sb->ready = false;
        sb->cpu_busy = -1;
        driver_input_done(&sb->input);
        free(sb->out);
        sb->out = NULL;
        sb->out_len = sb->out_off = 0;
}

static int pidfd_open_(pid_t pid) {
        return (int) syscall(SYS_pidfd_open, pid, 0);
}

static int pidfd_signal(int fd, int sig) {
        return syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) < 0 ? -errno : 0;
}

/* The parent pid from /proc/PID/stat. */
static pid_t proc_ppid(pid_t pid) {
        char p[64], buf[1024];
        ssize_t n;
        int fd;

        snprintf(p, sizeof(p), "/proc/%d/stat", pid);
        fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return -1;
        buf[n] = 0;
        char *e = strrchr(buf, ')');
        int ppid;
        if (!e || sscanf(e + 1, " %*c %d", &ppid) != 1)
                return -1;
        return ppid;
}

/*
 * The sandbox broke the protocol (a second hello, a record or message the driver never sends): say so once, read
 * nothing more from it, and stop it; on_bwrap_exit() starts it afresh and tells whoever waits why.
 */
static void protocol_error(Workspace *sb, const char *what) {
        if (sb->protocol_error)
                return;
        log_warning("Sandbox %.8s… of uid " UID_FMT " broke the protocol (%s): starting it afresh.", sb->id, sb->uid,
                    what);
        sb->protocol_error = what;
        sb->ready = false;
        if (sb->io)
                (void) sd_event_source_set_enabled(sb->io, SD_EVENT_OFF);
        process_kill(sb->proc);
}

static bool pidfd_exited(int fd) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        return poll(&p, 1, 0) != 0;
}

/* ---- bwrap's report ------------------------------------------------------------- */

static void status_line(Workspace *sb, const char *line) {
        _cleanup_json_ json_object *j = json_tokener_parse(line);
        int64_t pid = 0;

        if (j && json_get_int64(j, "child-pid", &pid) && pid > 1 && sb->init_pid == 0) {
                sb->init_pid = (pid_t) pid;
                /* Records wait for this (see on_io()). */
                if (sb->io && !sb->protocol_error)
                        (void) sd_event_source_set_enabled(sb->io, SD_EVENT_ON);
        }
}

/* Read what bwrap reported so far, a line at a time: it writes, the sandbox cannot (bwrap keeps the fd from it). */
static void status_read(Workspace *sb) {
        for (;;) {
                ssize_t n = read(sb->status_fd, sb->status_line + sb->status_len,
                                 sizeof(sb->status_line) - 1 - sb->status_len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        if (n == 0 || errno != EAGAIN)
                                sb->status_io = sd_event_source_disable_unref(sb->status_io);
                        return;
                }
                sb->status_len += (size_t) n;
                sb->status_line[sb->status_len] = 0;
                for (char *nl; (nl = strchr(sb->status_line, '\n'));) {
                        *nl = 0;
                        status_line(sb, sb->status_line);
                        sb->status_len -= (size_t) (nl + 1 - sb->status_line);
                        memmove(sb->status_line, nl + 1, sb->status_len + 1);
                }
                if (sb->status_len == sizeof(sb->status_line) - 1)
                        sb->status_len = 0;     /* not bwrap's: too long a line */
        }
}

static int on_status(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        status_read(userdata);
        return 0;
}

/* ---- the driver's records --------------------------------------------------------- */

/*
 * A hello: a fresh interpreter (the driver forks one at the start and after one died) is ready. Only one of the
 * driver's children may say it (sender, from the kernel: SCM_CREDENTIALS, not what the record claims), the
 * driver being the child of the sandbox's pid 1, and only once: while the interpreter that said hello lives,
 * another hello breaks the protocol.
 */
static void on_hello(Workspace *sb, pid_t sender) {
        pid_t driver;

        if (sb->worker_pidfd >= 0 && !pidfd_exited(sb->worker_pidfd))
                return protocol_error(sb, "a second hello while its interpreter runs");
        driver = sender > 0 ? proc_ppid(sender) : -1;
        if (driver <= 1 || proc_ppid(driver) != sb->init_pid)
                return protocol_error(sb, "a hello from a process that is not a fresh interpreter");
        sb->worker_pidfd = safe_close(sb->worker_pidfd);
        sb->worker_pidfd = pidfd_open_(sender);
        /* Opened after the check: make sure it is still the one. */
        if (sb->worker_pidfd >= 0 && proc_ppid(sender) != driver)
                sb->worker_pidfd = safe_close(sb->worker_pidfd);
        if (sb->worker_pidfd < 0)
                return protocol_error(sb, "a hello from a process that is gone");
        sb->worker_pid = sender;
        sb->said_hello = true;
        sb->ready = true;
        sb->fast_deaths = 0;

        WorkspaceOp *op = sb->ops;
        if (op && op->kind == OP_REQUEST && op->phase != PHASE_QUEUED) {
                /* A fresh worker while a request was out: the old one was killed or died. */
                WorkspaceOpOutcome o = {
                        .timed_out = op->timed_out,
                        .restarted = true,
                        .error = op->timed_out ? "the time limit was reached and the interpreter did not stop when "
                                                 "interrupted, so it was killed and started afresh"
                                               : "the interpreter died (it may have run out of memory or exited) "
                                                 "and was started afresh",
                };
                op_finish(op, &o);
        } else if (op && op->kind == OP_RESTART && op->phase == PHASE_STARTING) {
                if (op->snapshot) {
                        op->phase = PHASE_RESTORE;
                        json_object *req = json_object_new_object();
                        json_add_string(req, "op", "restore");
                        json_add(req, "tar", TAKE_PTR(op->snapshot));
                        json_object_put(op->request);
                        op->request = req;
                        /* sent by dispatch() below */
                } else {
                        WorkspaceOpOutcome o = { .reset = !op->keep_files };
                        op_finish(op, &o);
                }
        }
        schedule_dispatch(sb);
}

static int send_pending(Workspace *sb) {
        while (sb->out && sb->out_off < sb->out_len) {
                size_t n = MIN(sb->out_len - sb->out_off, (size_t) DRIVER_RECORD_MAX - 1);
                char kind = sb->out_off + n >= sb->out_len ? 'E' : 'C';
                struct iovec iov[2] = { { &kind, 1 }, { sb->out + sb->out_off, n } };
                struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
                ssize_t k = sendmsg(sb->sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return sd_event_source_set_io_events(sb->io, EPOLLIN | EPOLLOUT);
                        return -errno;
                }
                sb->out_off += n;
        }
        free(sb->out);
        sb->out = NULL;
        sb->out_len = sb->out_off = 0;
        return sd_event_source_set_io_events(sb->io, EPOLLIN);
}

static void on_message(Workspace *sb, json_object *msg) {
        WorkspaceOp *op = sb->ops;

        if (!op || (op->phase != PHASE_SENT && op->phase != PHASE_INTERRUPTING && op->phase != PHASE_SNAPSHOT &&
                    op->phase != PHASE_RESTORE))
                return;   /* nobody asked: ignore it */
        if (op->kind == OP_REQUEST) {
                WorkspaceOpOutcome o = {
                        .reply = msg,
                        .timed_out = op->timed_out,
                        .interrupted = op->phase == PHASE_INTERRUPTING,
                };
                return op_finish(op, &o);
        }
        if (op->phase == PHASE_SNAPSHOT) {
                json_object *tar = json_get(msg, "tar", json_type_string);
                if (!tar) {
                        const char *e = json_get_string(msg, "error");
                        _cleanup_free_ char *m = NULL;
                        if (asprintf(&m, "the work directory could not be carried over: %s", strempty(e)) < 0)
                                m = NULL;
                        WorkspaceOpOutcome o = { .error = m ?: "the work directory could not be carried over" };
                        /* Nothing changed: the old environment stays. */
                        return op_finish(op, &o);
                }
                op->snapshot = json_object_get(tar);
                op->phase = PHASE_STARTING;
                workspace_stop(sb);
                switch_env(sb);
                int k = workspace_spawn(sb);
                if (k < 0) {
                        WorkspaceOpOutcome o = { .error = "the sandbox could not be started again", .reset = true };
                        return op_finish(op, &o);
                }
                return;
        }
        if (op->phase == PHASE_RESTORE) {
                WorkspaceOpOutcome o = {
                        .error = json_object_get_boolean(json_get(msg, "ok", json_type_boolean))
                                         ? NULL
                                         : "the work directory could not be put back",
                };
                op_finish(op, &o);
        }
}

static int on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        _cleanup_(workspace_unrefp) Workspace *sb = workspace_ref(userdata);
        char rec[DRIVER_RECORD_MAX + 1];        /* one more: a longer record is not the driver's */
        union {
                struct cmsghdr hdr;
                uint8_t buf[CMSG_SPACE(sizeof(struct ucred))];
        } control;

        if (revents & EPOLLOUT) {
                if (send_pending(sb) < 0)
                        log_debug("Sandbox %.8s…: sending failed.", sb->id);
        }
        if (!(revents & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                return 0;
        /* A hello is checked against the sandbox's pid 1, which bwrap reports: until it has, records wait. */
        if (sb->init_pid == 0 && sb->status_fd >= 0)
                status_read(sb);
        if (sb->init_pid == 0) {
                (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
                return 0;
        }
        for (int i = 0; i < 64 && sb->sock >= 0 && !sb->protocol_error; i++) {
                struct iovec iov = { rec, sizeof(rec) };
                struct msghdr mh = {
                        .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = &control,
                        .msg_controllen = sizeof(control),
                };
                pid_t sender = 0;
                ssize_t n = recvmsg(sb->sock, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return 0;
                        n = 0;
                }
                if (n == 0) {
                        /* Everyone in the sandbox closed it: bwrap's exit will tell the rest. */
                        sb->io = sd_event_source_disable_unref(sb->io);
                        return 0;
                }
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
                            c->cmsg_len == CMSG_LEN(sizeof(struct ucred))) {
                                struct ucred uc;
                                memcpy(&uc, CMSG_DATA(c), sizeof(uc));
                                sender = uc.pid;
                        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                                /* Nothing of ours: close what a cell sent along. */
                                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                                for (size_t f = 0; f < k; f++) {
                                        int x;
                                        memcpy(&x, CMSG_DATA(c) + f * sizeof(int), sizeof(int));
                                        (void) safe_close(x);
                                }
                        }
                _cleanup_json_ json_object *j = NULL;
                switch (driver_input_feed(&sb->input, rec, (size_t) n, &j)) {
                case DRIVER_RECORD_HELLO:
                        on_hello(sb, sender);
                        break;
                case DRIVER_RECORD_MESSAGE:
                        on_message(sb, j);
                        break;
                case DRIVER_RECORD_INVALID:
                        protocol_error(sb, sb->input.max > 0 && (size_t) n <= DRIVER_RECORD_MAX &&
                                                           (rec[0] == 'C' || rec[0] == 'E')
                                                   ? "a message that is too long or not a JSON object"
                                                   : "a record the driver does not send");
                        break;
                case DRIVER_RECORD_NONE:
                        break;
                }
        }
        return 0;
}

/* ---- what the sandbox prints ------------------------------------------------------ */

/*
 * A sandbox's stderr carries bwrap's complaints and the driver's notes, and anything a cell writes there (through
 * /proc/PID/fd/2 of the driver): none of it may pass for a line of our own. Each line becomes one log call at one
 * priority, escaped (no line breaks, no escape sequences, no leading '<' that could be taken for a priority), cut
 * at OUTPUT_LINE_MAX bytes, at most OUTPUT_LINES_BURST of them a minute.
 */
static void output_dropped_flush(Workspace *sb) {
        if (sb->lines_dropped > 0)
                log_info("Sandbox %.8s… of uid " UID_FMT ": %" PRIu64 " more line%s of its output not logged "
                         "(at most %u a minute).",
                         sb->id, sb->uid, sb->lines_dropped, sb->lines_dropped == 1 ? "" : "s", OUTPUT_LINES_BURST);
        sb->lines_dropped = 0;
}

static void output_line(Workspace *sb) {
        uint64_t now = now_usec();
        _cleanup_free_ char *text = NULL;

        if (now - sb->lines_since_usec >= OUTPUT_LINES_INTERVAL_USEC) {
                output_dropped_flush(sb);
                sb->lines_since_usec = now;
                sb->lines_logged = 0;
        }
        if (sb->lines_logged >= OUTPUT_LINES_BURST)
                sb->lines_dropped++;
        else {
                sb->lines_logged++;
                text = utf8_escape_line(sb->line, sb->line_len);
                if (sb->line_cut > 0)
                        log_info("Sandbox %.8s… of uid " UID_FMT " printed: %s [%" PRIu64 " more bytes]", sb->id,
                                 sb->uid, strempty(text), sb->line_cut);
                else
                        log_info("Sandbox %.8s… of uid " UID_FMT " printed: %s", sb->id, sb->uid, strempty(text));
        }
        sb->line_len = 0;
        sb->line_cut = 0;
}

static void on_stderr(Process *p, const char *data, size_t n, void *userdata) {
        Workspace *sb = userdata;

        while (n > 0) {
                const char *nl = memchr(data, '\n', n);
                size_t len = nl ? (size_t) (nl - data) : n;
                size_t take = MIN(len, OUTPUT_LINE_MAX - sb->line_len);

                memcpy(sb->line + sb->line_len, data, take);
                sb->line_len += take;
                sb->line_cut += len - take;
                if (!nl)
                        break;
                output_line(sb);
                data = nl + 1;
                n -= len + 1;
        }
}

/* The sandbox stopped: what it printed last, even without a line break, and how much was not logged. */
static void output_flush(Workspace *sb) {
        if (sb->line_len > 0 || sb->line_cut > 0)
                output_line(sb);
        output_dropped_flush(sb);
}

static void on_bwrap_exit(Process *p, void *userdata) {
        _cleanup_(workspace_unrefp) Workspace *sb = workspace_ref(userdata);
        _cleanup_free_ char *err = capture_text(&p->err, NULL);
        bool said_hello = sb->said_hello;
        bool fast = now_usec() - sb->spawned_usec < 5 * USEC_PER_SEC;
        const char *broke = sb->protocol_error;
        _cleanup_free_ char *why = NULL;

        output_flush(sb);
        log_info("Sandbox %.8s… of uid " UID_FMT " stopped (exit %d).", sb->id, sb->uid, p->exit_code);
        /* What it said, for the sandbox's user (see below): without the line break at its end. */
        for (size_t l = err ? strlen(err) : 0; l > 0 && strchr("\n\r\t ", err[l - 1]); l--)
                err[l - 1] = 0;
        sb->proc = NULL;
        process_free(p);
        workspace_stop(sb);

        if (!said_hello || fast)
                sb->fast_deaths++;
        if (sb->fast_deaths >= MAX_FAST_DEATHS || (!said_hello && err && *err)) {
                free(sb->broken);
                if (asprintf(&sb->broken, "the sandbox does not start: %s", err && *err ? err : "no reason given") <
                    0)
                        sb->broken = NULL;
                fail_all(sb, sb->broken ?: "the sandbox does not start");
                return;
        }

        WorkspaceOp *op = sb->ops;
        if (op && op->phase != PHASE_QUEUED && !(op->kind == OP_RESTART && op->phase == PHASE_STARTING)) {
                if (broke && asprintf(&why, "the sandbox broke the protocol with the service (%s), so it was "
                                            "stopped and started afresh: variables and files in /work are lost",
                                      broke) < 0)
                        why = NULL;
                WorkspaceOpOutcome o = {
                        .timed_out = op->timed_out,
                        .reset = true,
                        .error = why ?: "the sandbox stopped and was started afresh: variables and files in /work "
                                        "are lost",
                };
                op_finish(op, &o);
                if (sb->closed)
                        return;
        }
        if (workspace_spawn(sb) < 0)
                fail_all(sb, "the sandbox could not be started again");
}

/*
 * The largest message the driver may send us, which it keeps to (an answer that would be longer becomes an error
 * saying so): execute_code's reply, the largest there is. Its text (stdout, stderr, the result, a traceback) is cut
 * to half the output cap each, which json.dumps(ensure_ascii) writes as at most 12 bytes a character (a surrogate
 * pair of \uXXXX escapes); its figures and files are OUTPUTS_MAX_TOTAL bytes in all, base64; the rest (names,
 * sizes, a listing) gets 1 MiB. A read_file reply (WORKSPACE_FILE_MAX bytes, at most 6 JSON bytes each) fits as well.
 * With the default output cap: about 15 MiB, where the message is held once and parsed once.
 */
static size_t message_max(const Config *c) {
        uint64_t m = 24 * c->output_cap + (OUTPUTS_MAX_TOTAL + 2) / 3 * 4 + (1 << 20);
        return (size_t) MIN(m, (uint64_t) DRIVER_MESSAGE_MAX);
}

/* The snapshot that carries /work over to a new environment: SNAPSHOT_MAX bytes of tar, base64. */
#define SNAPSHOT_MESSAGE_MAX ((SNAPSHOT_MAX + 2) / 3 * 4 + 65536)

/*
 * The sandbox's CPU cap: a run's (cpu-quota=, or none) while we wait for it (starting, a request out), else
 * IDLE_CPU_QUOTA, so that what a cell leaves running bounds no one else. Only with a cgroup of its own, which a
 * sandbox gets only with the cpu controller (see workspace_spawn()).
 */
static void cpu_update(Workspace *sb) {
        uint64_t quota = sb->registry->config->cpu_quota;
        int busy = !sb->ready || sb->ops || sb->prepare;
        int k;

        if (!sb->proc || !sb->proc->cgroups || busy == sb->cpu_busy)
                return;
        if (!busy)
                quota = quota > 0 ? MIN(quota, (uint64_t) IDLE_CPU_QUOTA) : IDLE_CPU_QUOTA;
        k = sandbox_cgroup_set_cpu_quota(sb->proc->cgroups, quota);
        if (k < 0)
                log_warning_errno(k, "Sandbox %.8s…: could not set its CPU cap: %m", sb->id);
        sb->cpu_busy = busy;
}

void workspace_set_data(Workspace *sb, int *fds, char **dests, size_t n) {
        assert(n <= WORKSPACE_MAX_DATA && sb->n_data == 0);
        memcpy(sb->data_fds, fds, n * sizeof(int));
        memcpy(sb->data_dests, dests, n * sizeof(char *));
        sb->n_data = n;
}

static int workspace_spawn(Workspace *sb) {
        Runtime *r = sb->registry->runtime;
        const Config *c = sb->registry->config;
        _cleanup_free_ char *python = NULL;
        _cleanup_close_ int theirs = -EBADF, status_theirs = -EBADF;
        SandboxLimits limits;
        int pair[2], status[2];
        char fdstr[16];
        int k;

        if (sb->closed)
                return -ESHUTDOWN;
        /* Always in bwrap, also when runs go without it (unsafe-no-sandbox): what the self-test found decides. */
        if (runtime_self_test_error(r))
                return -EPERM;
        /*
         * The runs' limits and system call filter, in a cgroup of its own like a run's, with memory, processes and
         * the CPU bound for the sandbox as a whole. The CPU is capped rather than counted (this interpreter lives
         * on; each cell's time limit bounds it): created at the idle cap, so that without the cpu controller there
         * is no cgroup but rlimits, where RLIMIT_CPU bounds each process's CPU time instead.
         */
        sandbox_limits_from_config(c, &limits);
        limits.cpu_quota = IDLE_CPU_QUOTA;
        limits.cpu_usec_without_cgroup = true;
        limits.owner = sb->uid;         /* its CPU comes out of its owner's share, as that user's runs' does */
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                return -errno;
        sb->sock = pair[0];
        theirs = pair[1];
        (void) fcntl(sb->sock, F_SETFL, O_NONBLOCK);
        /* Who sent each record, from the kernel: a hello is believed only from a fresh interpreter. */
        if (setsockopt(sb->sock, SOL_SOCKET, SO_PASSCRED, &(int) { 1 }, sizeof(int)) < 0 ||
            pipe2(status, O_CLOEXEC) < 0) {
                k = -errno;
                sb->sock = safe_close(sb->sock);
                return k;
        }
        sb->status_fd = status[0];
        status_theirs = status[1];
        (void) fcntl(sb->status_fd, F_SETFL, O_NONBLOCK);
        sb->input.max = message_max(c);

        if (asprintf(&python, "%s/bin/python", sb->env) < 0) {
                workspace_stop(sb);
                return -ENOMEM;
        }
        snprintf(fdstr, sizeof(fdstr), "%d", theirs);
        char *command[] = { python, (char *) "-I", (char *) "-u", (char *) "-c", (char *) workspace_driver_code, fdstr,
                            NULL };
        char *ro[] = { (char *) sb->python->prefix, NULL };
        /* The user's files, copied in afresh from the start at each start (bwrap reads from the offset). */
        SandboxData data[WORKSPACE_MAX_DATA];
        for (size_t i = 0; i < sb->n_data; i++) {
                if (lseek(sb->data_fds[i], 0, SEEK_SET) < 0) {
                        k = -errno;
                        workspace_stop(sb);
                        return k;
                }
                data[i] = (SandboxData) { .fd = sb->data_fds[i], .dest = sb->data_dests[i] };
        }
        /* network-allow: the driver behind the bridge, which hands the daemon's proxy its listening socket. */
        _cleanup_strv_free_ char **wrapped = NULL;
        _cleanup_close_ int net_fd = -EBADF;
        k = runtime_network_wrap(r, sb->uid, command, &sb->netproxy, &net_fd, &wrapped);
        if (k < 0) {
                workspace_stop(sb);
                return k;
        }
        int fds[] = { theirs, net_fd };
        /* The same sandbox as execute_python's runs (network, tmpfs size, read-only system). */
        sb->network = runtime_sandbox_policy(r).network;
        k = runtime_spawn_in_bwrap(r, sb->env, streq(sb->python->prefix, "/usr") ? NULL : ro, data, sb->n_data,
                                   fds, net_fd >= 0 ? 2 : 1, status_theirs, wrapped ?: command, 0, &limits, 8192,
                                   8192, on_bwrap_exit, sb, &sb->proc);
        if (k < 0) {
                workspace_stop(sb);
                return k;
        }
        process_set_stderr_func(sb->proc, on_stderr, sb);
        cpu_update(sb);
        k = sd_event_add_io(sb->registry->event, &sb->io, sb->sock, EPOLLIN, on_io, sb);
        if (k >= 0)
                k = sd_event_add_io(sb->registry->event, &sb->status_io, sb->status_fd, EPOLLIN, on_status, sb);
        if (k < 0) {
                workspace_stop(sb);
                return k;
        }
        sb->spawned_usec = now_usec();
        sb->said_hello = false;
        sb->protocol_error = NULL;
        sb->started = true;
        log_debug("Sandbox %.8s… of uid " UID_FMT " started (bwrap pid %d%s).", sb->id, sb->uid, sb->proc->pid,
                  sb->proc->cgroups ? ", in a cgroup of its own" : "");
        return 0;
}

/* ---- operations ------------------------------------------------------------- */

/* A restart is under way: the environment it switches to becomes the current one. */
static void switch_env(Workspace *sb) {
        if (!sb->next_env)
                return;
        free(sb->env);
        sb->env = TAKE_PTR(sb->next_env);
        envstore_hold_release(sb->env_hold);
        sb->env_hold = TAKE_PTR(sb->next_hold);
        requirement_list_done(&sb->reqs);
        sb->reqs = sb->next_reqs;
        sb->next_reqs = (RequirementList) {};
}

static void op_free(WorkspaceOp *op) {
        json_object_put(op->request);
        json_object_put(op->snapshot);
        free(op);
}

static void op_unlink(WorkspaceOp *op) {
        Workspace *sb = op->sandbox;
        for (WorkspaceOp **p = &sb->ops; *p; p = &(*p)->next)
                if (*p == op) {
                        *p = op->next;
                        break;
                }
}

static void op_finish(WorkspaceOp *op, const WorkspaceOpOutcome *o) {
        _cleanup_(workspace_unrefp) Workspace *sb = workspace_ref(op->sandbox);
        bool was_head = sb->ops == op;
        WorkspaceReplyFunc cb = op->cb;
        void *ud = op->userdata;

        op_unlink(op);
        if (was_head && sb->op_timer)
                (void) sd_event_source_set_enabled(sb->op_timer, SD_EVENT_OFF);
        if (was_head)
                scheduler_release(&sb->run_slot);   /* the cell is over, or waits no more */
        sb->used_usec = now_usec();
        op_free(op);
        if (cb)
                cb(sb, o, ud);
        schedule_dispatch(sb);
}

static int on_op_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Workspace *sb = userdata;
        WorkspaceOp *op = sb->ops;

        if (!op)
                return 0;
        switch (op->phase) {
        case PHASE_SENT:
                op->timed_out = true;
                if (sb->out || sb->worker_pidfd < 0 || pidfd_signal(sb->worker_pidfd, SIGINT) < 0) {
                        /* Not even the request got through, or no way to reach the interpreter: start afresh. */
                        process_kill(sb->proc);
                        return 0;
                }
                log_debug("Sandbox %.8s…: time is up; interrupting.", sb->id);
                op->phase = PHASE_INTERRUPTING;
                (void) sd_event_source_set_time_relative(s, INTERRUPT_GRACE_USEC);
                return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        case PHASE_INTERRUPTING:
                log_debug("Sandbox %.8s…: the interrupt did not stop it; killing the interpreter.", sb->id);
                op->phase = PHASE_KILLING;
                sb->ready = false;
                if (pidfd_signal(sb->worker_pidfd, SIGKILL) < 0) {
                        process_kill(sb->proc);
                        return 0;
                }
                (void) sd_event_source_set_time_relative(s, RESTART_WAIT_USEC);
                return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        default:
                /* No fresh interpreter came, or a restart hangs: start the whole sandbox afresh. */
                op->timed_out = op->kind == OP_REQUEST;
                process_kill(sb->proc);
                return 0;
        }
}

static int arm_op_timer(Workspace *sb, uint64_t usec) {
        if (sb->closed)
                return -ESHUTDOWN;
        if (!sb->op_timer)
                return sd_event_add_time_relative(sb->registry->event, &sb->op_timer, CLOCK_MONOTONIC, usec,
                                                  USEC_PER_SEC / 50, on_op_timer, sb);
        (void) sd_event_source_set_time_relative(sb->op_timer, usec);
        return sd_event_source_set_enabled(sb->op_timer, SD_EVENT_ONESHOT);
}

static int send_request(Workspace *sb, json_object *req) {
        size_t len;
        const char *s;

        /* The answer's cap, which the driver keeps to. */
        sb->input.max = streq_ptr(json_get_string(req, "op"), "snapshot") ? SNAPSHOT_MESSAGE_MAX
                                                                         : message_max(sb->registry->config);
        json_add_int(req, "max_message", (int64_t) sb->input.max);
        s = json_to_line(req, &len);

        free(sb->out);
        sb->out = malloc(len ?: 1);
        if (!sb->out)
                return -ENOMEM;
        memcpy(sb->out, s, len);
        sb->out_len = len;
        sb->out_off = 0;
        return send_pending(sb);
}

static void on_run_slot(SchedTicket *t, void *userdata) {
        schedule_dispatch(userdata);   /* through the loop: this runs inside another run's release */
}

static void dispatch(Workspace *sb) {
        WorkspaceOp *op = sb->ops;
        int k;

        if (!op)
                return;
        if (sb->broken) {
                fail_all(sb, sb->broken);
                return;
        }
        if (!sb->proc) {
                if (sb->started && workspace_spawn(sb) < 0)
                        fail_all(sb, "the sandbox could not be started");
                if (!sb->proc)
                        return;
        }
        if (op->phase == PHASE_RESTORE && sb->ready && !sb->out) {
                k = send_request(sb, op->request);
                (void) arm_op_timer(sb, INTERNAL_TIMEOUT_USEC);
                if (k < 0) {
                        WorkspaceOpOutcome o = { .error = "the work directory could not be put back" };
                        op_finish(op, &o);
                }
                return;
        }
        if (op->phase != PHASE_QUEUED || !sb->ready)
                return;

        if (op->kind == OP_RESTART) {
                if (op->keep_files) {
                        _cleanup_json_ json_object *req = json_object_new_object();
                        json_add_string(req, "op", "snapshot");
                        json_add_int(req, "max_bytes", SNAPSHOT_MAX);
                        op->phase = PHASE_SNAPSHOT;
                        k = send_request(sb, req);
                } else {
                        op->phase = PHASE_STARTING;
                        workspace_stop(sb);
                        switch_env(sb);
                        k = workspace_spawn(sb);
                }
                (void) arm_op_timer(sb, INTERNAL_TIMEOUT_USEC);
                if (k < 0) {
                        WorkspaceOpOutcome o = { .error = "the sandbox could not be restarted", .reset = true };
                        op_finish(op, &o);
                }
                return;
        }

        /* A cell runs code as a run does: it holds a run slot (max-runs, max-runs-per-user) while it runs, and
         * waits its turn in the same queue. */
        if (op->kind == OP_REQUEST && streq_ptr(json_get_string(op->request, "op"), "exec") &&
            !sched_ticket_held(&sb->run_slot)) {
                if (sched_ticket_waiting(&sb->run_slot))
                        return;
                k = runtime_acquire_slot(sb->registry->runtime, &sb->run_slot, sb->uid, on_run_slot, sb);
                if (k == SCHEDULER_QUEUED)
                        return;
                if (k != 0) {
                        WorkspaceOpOutcome o = {
                                .error = k == SCHEDULER_USER_QUEUE_FULL
                                                 ? "you have the most runs waiting that one user may have "
                                                   "(max-queue, shared as max-runs-per-user); try again when one "
                                                   "has finished"
                                         : k == SCHEDULER_QUEUE_FULL
                                                 ? "the server is busy: its run queue is full (max-queue); try "
                                                   "again in a little while"
                                                 : "out of memory",
                        };
                        op_finish(op, &o);
                        return;
                }
        }

        op->phase = PHASE_SENT;
        k = send_request(sb, op->request);
        (void) arm_op_timer(sb, op->timeout_usec);
        if (k < 0) {
                WorkspaceOpOutcome o = { .error = "the request could not be sent to the sandbox" };
                op_finish(op, &o);
        }
}

static int on_defer(sd_event_source *s, void *userdata) {
        _cleanup_(workspace_unrefp) Workspace *sb = workspace_ref(userdata);

        dispatch(sb);
        cpu_update(sb);
        return 0;
}

static void schedule_dispatch(Workspace *sb) {
        if (sb->closed)
                return;
        if (!sb->defer) {
                if (sd_event_add_defer(sb->registry->event, &sb->defer, on_defer, sb) < 0)
                        return;
        }
        (void) sd_event_source_set_enabled(sb->defer, SD_EVENT_ONESHOT);
}

static int op_queue(Workspace *sb, WorkspaceOp *op, bool front, WorkspaceOp **ret) {
        op->sandbox = sb;
        if (front && sb->ops && sb->ops->phase == PHASE_QUEUED) {
                op->next = sb->ops;
                sb->ops = op;
        } else if (front && sb->ops) {
                op->next = sb->ops->next;
                sb->ops->next = op;
        } else {
                WorkspaceOp **p = &sb->ops;
                while (*p)
                        p = &(*p)->next;
                *p = op;
        }
        sb->used_usec = now_usec();
        schedule_dispatch(sb);
        if (ret)
                *ret = op;
        return 0;
}

int workspace_request(Workspace *sb, json_object *request, uint64_t timeout_usec, WorkspaceReplyFunc cb, void *userdata,
                      WorkspaceOp **ret) {
        if (sb->closed)
                return -ESHUTDOWN;
        WorkspaceOp *op = calloc(1, sizeof(*op));
        if (!op)
                return -ENOMEM;
        *op = (WorkspaceOp) {
                .kind = OP_REQUEST,
                .request = json_object_get(request),
                .timeout_usec = timeout_usec ?: INTERNAL_TIMEOUT_USEC,
                .cb = cb,
                .userdata = userdata,
        };
        return op_queue(sb, op, false, ret);
}

int workspace_reset(Workspace *sb, WorkspaceReplyFunc cb, void *userdata, WorkspaceOp **ret) {
        if (sb->closed)
                return -ESHUTDOWN;
        WorkspaceOp *op = calloc(1, sizeof(*op));
        if (!op)
                return -ENOMEM;
        free(sb->next_env);
        sb->next_env = strdup(sb->base_env);
        sb->next_hold = envstore_hold_release(sb->next_hold);   /* the base one is held as long as the sandbox */
        requirement_list_done(&sb->next_reqs);
        for (size_t i = 0; i < sb->base_reqs.n; i++)
                (void) requirement_list_append(&sb->next_reqs, sb->base_reqs.items[i].canonical, NULL);
        *op = (WorkspaceOp) { .kind = OP_RESTART, .keep_files = false, .cb = cb, .userdata = userdata };
        return op_queue(sb, op, false, ret);
}

void workspace_op_cancel(WorkspaceOp *op) {
        if (!op)
                return;
        op->cb = NULL;
        if (op->phase == PHASE_QUEUED) {
                op_unlink(op);
                op_free(op);
                return;
        }
        /* Running: stop the cell now, as a timeout would (the state is kept if it stops). */
        if (op->kind == OP_REQUEST && op->phase == PHASE_SENT && op->sandbox->op_timer)
                (void) arm_op_timer(op->sandbox, 1);
}

/* ---- environments -------------------------------------------------------------- */

static void prepare_free(WorkspacePrepare *p) {
        if (!p)
                return;
        if (p->sandbox && p->sandbox->prepare == p)
                p->sandbox->prepare = NULL;
        script_analysis_cancel(p->analysis);
        envstore_waiter_cancel(p->env_waiter);
        workspace_op_cancel(p->restart);
        sd_event_source_disable_unref(p->defer);
        script_plan_free(p->plan);
        free(p->error);
        free(p);
}

void workspace_prepare_cancel(WorkspacePrepare *p) {
        prepare_free(p);
}

static void prepare_done(WorkspacePrepare *p, const char *error) {
        _cleanup_(workspace_unrefp) Workspace *sb = workspace_ref(p->sandbox);
        WorkspacePreparedFunc cb = p->cb;
        void *ud = p->userdata;
        _cleanup_free_ char *e = error ? strdup(error) : NULL;

        p->restart = NULL;
        prepare_free(p);
        if (cb)
                cb(sb, error ? (e ?: "failed") : NULL, ud);
}

static void on_restarted(Workspace *sb, const WorkspaceOpOutcome *o, void *userdata) {
        WorkspacePrepare *p = userdata;
        p->restart = NULL;
        prepare_done(p, o->error);
}

static void use_env(WorkspacePrepare *p, const char *path) {
        Workspace *sb = p->sandbox;
        ScriptPlan *plan = p->plan;

        if (!sb->started) {
                sb->python = plan->python;
                sb->base_env = strdup(path);
                sb->env = strdup(path);
                sb->base_hold = envstore_hold(runtime_envstore(sb->registry->runtime), path);
                sb->base_reqs = plan->requirements;
                plan->requirements = (RequirementList) {};
                for (size_t i = 0; i < sb->base_reqs.n; i++)
                        (void) requirement_list_append(&sb->reqs, sb->base_reqs.items[i].canonical, NULL);
                if (!sb->base_env || !sb->env)
                        return prepare_done(p, "out of memory");
                int k = workspace_spawn(sb);
                if (k == -EPERM)
                        return prepare_done(p, runtime_self_test_error(sb->registry->runtime));
                if (k < 0)
                        return prepare_done(p, "the sandbox could not be started");
                return prepare_done(p, NULL);
        }

        if (streq(path, sb->env))
                return prepare_done(p, NULL);   /* nothing new */
        free(sb->next_env);
        sb->next_env = strdup(path);
        envstore_hold_release(sb->next_hold);
        sb->next_hold = envstore_hold(runtime_envstore(sb->registry->runtime), path);
        requirement_list_done(&sb->next_reqs);
        sb->next_reqs = plan->requirements;
        plan->requirements = (RequirementList) {};
        WorkspaceOp *op = calloc(1, sizeof(*op));
        if (!op || !sb->next_env) {
                free(op);
                return prepare_done(p, "out of memory");
        }
        *op = (WorkspaceOp) { .kind = OP_RESTART, .keep_files = true, .cb = on_restarted, .userdata = p };
        p->restart = op;
        (void) op_queue(sb, op, false, NULL);
}

static void on_env_ready(const EnvResult *res, void *userdata) {
        WorkspacePrepare *p = userdata;
        _cleanup_free_ char *m = NULL;

        p->env_waiter = NULL;
        if (res->error < 0) {
                if (asprintf(&m, "installing the packages failed:\n%s", strempty(res->message)) < 0)
                        m = NULL;
                return prepare_done(p, m ?: "installing the packages failed");
        }
        use_env(p, res->path);
}

static void on_plan(ScriptPlan *plan, void *userdata) {
        WorkspacePrepare *p = userdata;
        Workspace *sb = p->sandbox;
        EnvStore *store = runtime_envstore(sb->registry->runtime);
        _cleanup_free_ char *path = NULL;

        p->analysis = NULL;
        p->plan = plan;
        if (plan->error)
                return prepare_done(p, plan->error);
        if (runtime_self_test_error(sb->registry->runtime))
                return prepare_done(p, runtime_self_test_error(sb->registry->runtime));
        if (p->sandbox->started && plan->python != p->sandbox->python)
                return prepare_done(p, "the sandbox's Python is no longer available");
        path = TAKE_PTR(plan->env_path);
        if (path)
                return use_env(p, path);
        int k = envstore_prepare(store, p->sandbox->uid, plan->key, plan->python, &plan->requirements, on_env_ready, p, &p->env_waiter);
        if (k != 0)   /* an error, or ENVSTORE_SLOTS_FULL */
                prepare_done(p, "the environment could not be prepared");
}

int workspace_prepare(Workspace *sb, json_object *requirements, const char *python_version, WorkspacePreparedFunc cb,
                      void *userdata, WorkspacePrepare **ret) {
        WorkspacePrepare *p;
        int k;

        if (sb->closed)
                return -ESHUTDOWN;
        if (sb->prepare)
                return -EBUSY;
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        *p = (WorkspacePrepare) { .sandbox = sb, .cb = cb, .userdata = userdata };
        k = script_analyze(sb->registry->runtime, sb->uid, "", 0, requirements,
                           sb->started ? sb->python->version : python_version, on_plan, p, &p->analysis);
        if (k < 0) {
                free(p);
                return k;
        }
        sb->prepare = p;
        if (ret)
                *ret = p;
        return 0;
}

/* ---- facts ---------------------------------------------------------------------- */

char **workspace_network_refused_take(Workspace *sb) {
        return sb->netproxy ? net_proxy_refused_take(sb->netproxy) : NULL;
}

const char *workspace_id(const Workspace *sb) {
        return sb->id;
}
uid_t workspace_uid(const Workspace *sb) {
        return sb->uid;
}
const char *workspace_python_version(const Workspace *sb) {
        return sb->python ? sb->python->version : NULL;
}
const char *workspace_env_path(const Workspace *sb) {
        return sb->env;
}
const RequirementList *workspace_requirements(const Workspace *sb) {
        return &sb->reqs;
}
bool workspace_network(const Workspace *sb) {
        return sb->network;
}
bool workspace_is_busy(const Workspace *sb) {
        return sb->ops != NULL || sb->prepare != NULL;
}
const char *workspace_state(const Workspace *sb) {
        if (sb->broken)
                return "broken";
        if (!sb->started || !sb->ready)
                return "starting";
        return sb->ops ? "busy" : "idle";
}
uint64_t workspace_age_usec(const Workspace *sb) {
        return now_usec() - sb->created_usec;
}
uint64_t workspace_idle_usec(const Workspace *sb) {
        return sb->ops ? 0 : now_usec() - sb->used_usec;
}
uint64_t workspace_expires_in_usec(const Workspace *sb) {
        const Config *c = sb->registry->config;
        uint64_t now = now_usec(), when = UINT64_MAX;

        if (c->sandbox_idle_timeout_usec > 0)
                when = sb->used_usec + c->sandbox_idle_timeout_usec;
        if (sb->ttl_usec > 0)
                when = MIN(when, sb->created_usec + sb->ttl_usec);
        return when == UINT64_MAX ? 0 : when > now ? when - now : 0;
}
uint64_t workspace_output_cap(const Workspace *sb) {
        return sb->registry->config->output_cap;
}
uint64_t workspace_default_timeout_usec(const Workspace *sb) {
        return sb->registry->config->default_timeout_usec;
}
uint64_t workspace_max_timeout_usec(const Workspace *sb) {
        return sb->registry->config->max_timeout_usec;
}

int64_t workspace_memory_kib(const Workspace *sb) {
        _cleanup_free_ char *s = NULL;
        char p[64];
        pid_t pid = -1;
        int k;

        if (sb->worker_pidfd < 0 || pidfd_signal(sb->worker_pidfd, 0) < 0 || !sb->proc)
                return -ESRCH;
        /* The pid behind our pidfd, from its fdinfo: no guessing. */
        snprintf(p, sizeof(p), "/proc/self/fdinfo/%d", sb->worker_pidfd);
        if (read_small_file(p, 4096, &s) < 0)
                return -ESRCH;
        char *l = strstr(s, "Pid:");
        if (!l || (pid = (pid_t) strtol(l + 4, NULL, 10)) <= 0)
                return -ESRCH;
        free(s);
        s = NULL;
        snprintf(p, sizeof(p), "/proc/%d/status", pid);
        k = read_small_file(p, 16384, &s);
        if (k < 0)
                return k;
        l = strstr(s, "\nVmRSS:");
        if (!l)
                return -ENODATA;
        return strtoll(l + 7, NULL, 10);
}

json_object *workspace_installed_packages(const Workspace *sb) {
        json_object *o = json_object_new_object();
        _cleanup_free_ char *lib = NULL;
        DIR *d;
        struct dirent *de;

        if (!sb->env || asprintf(&lib, "%s/lib", sb->env) < 0)
                return o;
        d = opendir(lib);
        while (d && (de = readdir(d))) {
                if (!startswith(de->d_name, "python"))
                        continue;
                _cleanup_free_ char *sp = NULL;
                if (asprintf(&sp, "%s/%s/site-packages", lib, de->d_name) < 0)
                        continue;
                DIR *s = opendir(sp);
                struct dirent *e;
                while (s && (e = readdir(s))) {
                        size_t n = strlen(e->d_name);
                        if (n < 11 || !streq(e->d_name + n - 10, ".dist-info"))
                                continue;
                        _cleanup_free_ char *base = strndup(e->d_name, n - 10);
                        char *dash = base ? strchr(base, '-') : NULL;
                        if (!dash)
                                continue;
                        *dash = 0;
                        json_add_string(o, base, dash + 1);
                }
                if (s)
                        closedir(s);
        }
        if (d)
                closedir(d);
        return o;
}
