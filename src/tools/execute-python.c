/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "boot.h"
#include "hints.h"
#include "input-files.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "outputs.h"
#include "preimport.h"
#include "runlog.h"
#include "runtime/runtime.h"
#include "runtime/script.h"
#include "strv.h"
#include "time-util.h"
#include "tools.h"
#include "utf8.h"

#define PROGRESS_INTERVAL_USEC (2 * USEC_PER_SEC)
/* At the end of a run, what is read from stdout and stderr at most: the pipes' contents, unless something the
 * script left running floods them. */
#define DRAIN_MAX (4 * 1024 * 1024)

typedef enum Phase {
        PHASE_VALIDATE,
        PHASE_PREPARE,
        PHASE_QUEUED,
        PHASE_RUN,
} Phase;

static const char *const phase_names[] = {
        [PHASE_VALIDATE] = "validate",
        [PHASE_PREPARE] = "prepare",
        [PHASE_QUEUED] = "run",
        [PHASE_RUN] = "run",
};

typedef struct Job {
        ToolCall *call;
        Runtime *runtime;
        char *script;
        size_t script_len;
        uint64_t timeout_usec;
        int64_t timeout_requested;
        bool timeout_clamped;
        SandboxLimits limits;           /* the configured ones, lowered by the call's "limits" */
        unsigned limits_lowered;        /* SANDBOX_LIMIT_* the call asked to raise: lowered to the maximum */
        bool limits_asked;              /* the call gave "limits": the result says what was in force */

        Phase phase;
        char *activity;                 /* what the phase is busy with, when more than its name says */
        ScriptAnalysis *analysis;
        ScriptPlan *plan;
        EnvWaiter *env_waiter;
        SchedTicket slot;               /* the run slot: waiting, then held until the job ends */
        Process *proc;
        Outputs *outputs;               /* figures and files, read from out_fd as the run goes */
        int out_fd;
        sd_event_source *out_source;
        char *env_path;
        EnvHold *env_hold;              /* the store keeps env_path while the job waits for its run and runs */
        bool built_now;
        char *pool_key;                 /* the run may use, and refills, a pre-started sandbox of this key */
        bool prestarted;                /* it did */
        char **script_modules;          /* its leading imports (preimport.h), when it may use a pre-started sandbox */
        bool plain_enough;              /* preimport_script_plain_enough() */
        bool prestart_shared;           /* the one it took was the daemon's, for whoever came first */
        const char *banner;             /* unsafe-no-sandbox: the line every result starts with, from the spawn */
        bool spawned;                   /* banner is the run's: it is NULL when the run is sandboxed */
        InputFiles files;               /* the user's files, at /work/in */
        NetProxy *netproxy;             /* network-allow: the run's way out; its connections end with the job */

        uint64_t t_start, t_prepared, t_run_start;   /* the call came, the environment was ready, the run began */
        uint64_t t_end;                 /* the result was put together: one duration for its text and fields */
        sd_event_source *progress_timer;
} Job;

static Job *job_free(Job *j) {
        if (!j)
                return NULL;
        script_analysis_cancel(j->analysis);
        envstore_waiter_cancel(j->env_waiter);
        process_free(j->proc);
        net_proxy_free(j->netproxy);
        sd_event_source_disable_unref(j->out_source);
        safe_close(j->out_fd);
        outputs_free(j->outputs);
        scheduler_release(&j->slot);
        sd_event_source_disable_unref(j->progress_timer);
        script_plan_free(j->plan);
        tool_call_unref(j->call);
        envstore_hold_release(j->env_hold);
        free(j->env_path);
        free(j->pool_key);
        strv_free(j->script_modules);
        free(j->activity);
        free(j->script);
        input_files_done(&j->files);
        free(j);
        return NULL;
}

static void job_progress(Job *j, const char *what) {
        char m[128];
        double elapsed = (double) (now_usec() - j->t_start) / (double) USEC_PER_SEC;

        snprintf(m, sizeof(m), "%s (%.0fs)", what, elapsed);
        /* Progress must grow: elapsed time does, and phase changes add a little. */
        tool_call_progress(j->call, elapsed + 0.001, 0, m);
}

static const char *phase_message(Phase p) {
        switch (p) {
        case PHASE_VALIDATE:
                return "reading the script metadata";
        case PHASE_PREPARE:
                return "preparing the environment";
        case PHASE_QUEUED:
                return "queued: waiting for a free run slot";
        case PHASE_RUN:
                return "running";
        }
        return "working";
}

static void job_progress_phase(Job *j) {
        Runtime *r = j->runtime;
        unsigned mine = runtime_n_running_for(r, j->call->uid);
        char m[128];

        if (j->phase == PHASE_QUEUED && mine >= runtime_max_runs_per_user(r) && mine < runtime_max_runs(r)) {
                snprintf(m, sizeof(m), "queued: %u of your scripts are running, the most one user may run at once",
                         mine);
                return job_progress(j, m);
        }
        job_progress(j, j->activity ?: phase_message(j->phase));
}

static void job_set_phase(Job *j, Phase p) {
        j->phase = p;
        j->activity = mfree(j->activity);
        job_progress_phase(j);
}

static void on_analysis_progress(const char *what, void *userdata) {
        Job *j = userdata;

        free(j->activity);
        j->activity = strdup(what);
        job_progress_phase(j);
}

static int on_progress_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Job *j = userdata;

        job_progress_phase(j);
        (void) sd_event_source_set_time_relative(s, PROGRESS_INTERVAL_USEC);
        return sd_event_source_set_enabled(s, SD_EVENT_ON);
}

static json_object *text_json(const char *s, size_t n) {
        _cleanup_free_ char *clean = NULL;
        size_t l;

        clean = utf8_sanitize(s, n, &l);
        return clean ? json_object_new_string_len(clean, (int) l) : json_object_new_string("");
}


static void append_section(char **buf, size_t *len, const char *name, const char *text, size_t n) {
        if (n == 0)
                return;
        strextendf_len(buf, len, "--- %s ---\n", name);
        char *nb = realloc(*buf, *len + n + 2);
        if (!nb)
                return;
        *buf = nb;
        memcpy(*buf + *len, text, n);
        *len += n;
        if (text[n - 1] != '\n')
                (*buf)[(*len)++] = '\n';
        (*buf)[*len] = 0;
}

/* {"key", "warm"[, "requirements"]}: an environment without requirements says nothing of them. */
static json_object *environment_json(const Job *j) {
        json_object *e = json_object_new_object();

        if (j->plan) {
                json_add_string(e, "key", j->plan->key);
                json_add_bool(e, "warm", j->plan->warm && !j->built_now);
                if (j->plan->requirements.n > 0) {
                        json_object *reqs = json_object_new_array();
                        for (size_t i = 0; i < j->plan->requirements.n; i++)
                                json_object_array_add(reqs,
                                                      json_object_new_string(j->plan->requirements.items[i].canonical));
                        json_add(e, "requirements", reqs);
                }
        }
        return e;
}

/* Limits as the call's "limits" argument names them. */
static const struct {
        const char *name;
        unsigned bit;
        size_t offset;
        uint64_t unit;
} limit_args[] = {
        { "memory_mb", SANDBOX_LIMIT_MEMORY, offsetof(SandboxLimits, memory), 1024 * 1024 },
        { "max_processes", SANDBOX_LIMIT_PROCESSES, offsetof(SandboxLimits, processes), 1 },
        { "max_file_size_mb", SANDBOX_LIMIT_FILE_SIZE, offsetof(SandboxLimits, file_size), 1024 * 1024 },
        { "cpu_seconds", SANDBOX_LIMIT_CPU, offsetof(SandboxLimits, cpu_usec), USEC_PER_SEC },
};

static uint64_t limit_get(const SandboxLimits *l, size_t i) {
        return *(const uint64_t *) ((const char *) l + limit_args[i].offset);
}

/* In the argument's unit, rounded up; 0: no limit. */
static uint64_t limit_get_units(const SandboxLimits *l, size_t i) {
        return (limit_get(l, i) + limit_args[i].unit - 1) / limit_args[i].unit;
}

/* {"memory_mb": 2048, ..., "mechanism": "rlimit", "lowered": ["memory_mb"]}; a limit that is off is null. */
static json_object *limits_json(const Job *j) {
        json_object *o = json_object_new_object(), *lowered = json_object_new_array();

        for (size_t i = 0; i < ELEMENTSOF(limit_args); i++) {
                if (limit_get(&j->limits, i))
                        json_add_int(o, limit_args[i].name, (int64_t) limit_get_units(&j->limits, i));
                else
                        json_add(o, limit_args[i].name, json_object_new_null());
                if (j->limits_lowered & limit_args[i].bit)
                        json_object_array_add(lowered, json_object_new_string(limit_args[i].name));
        }
        json_add_string(o, "mechanism", sandbox_limits_mechanism(runtime_cgroups(j->runtime)));
        json_add(o, "lowered", lowered);
        return o;
}

static const char *limit_sentence(const char *limit) {
        static const struct {
                const char *name, *sentence;
        } t[] = {
                { "cpu_time", "The script used up its CPU time (limits.cpu_seconds) and was stopped." },
                { "file_size", "The script tried to write a file larger than a run may write (limits.max_file_size_mb)." },
                { "disk_space", "The script filled its writable space: the work directory and /tmp are size-capped." },
                { "memory", "The script ran out of memory: it needed more than a run may use (limits.memory_mb)." },
                { "processes", "The script hit the cap on processes and threads of a run (limits.max_processes)." },
                { "open_files", "The script hit the cap on open files of a process." },
        };
        for (size_t i = 0; i < ELEMENTSOF(t); i++)
                if (streq(t[i].name, limit))
                        return t[i].sentence;
        return NULL;
}

/* What every result of a server without the sandbox says first, when the call failed before its run. */
#define UNSANDBOXED_SERVER_BANNER                                                                                    \
        "WARNING: this server runs scripts without a sandbox (unsafe-no-sandbox=yes, development only)."

/* NULL when the run was (or would have been) sandboxed; else what every result says first. A run started in the
 * sandbox stays sandboxed, whatever a reload changes while it runs. */
static const char *job_banner(const Job *j) {
        if (j->spawned)
                return j->banner;
        return runtime_unsandboxed(j->runtime) ? UNSANDBOXED_SERVER_BANNER : NULL;
}

/*
 * Everything but the process outcome: shared by failures before the run. Lean: a field at its usual value
 * (no signal, not timed out, empty stderr, the default timeout, limits as configured, nothing left out) is left
 * out, for every result is read by the model and paid for in every conversation.
 */
/* The call's end, the same for every part of its result. */
static uint64_t job_end(Job *j) {
        if (j->t_end == 0)
                j->t_end = now_usec();
        return j->t_end;
}

static json_object *base_structured(Job *j, const char *failed_phase) {
        json_object *st = json_object_new_object();
        uint64_t now = job_end(j);
        uint64_t prepare_end = j->t_run_start ?: now;

        json_add_int(st, "duration_ms", (int64_t) ((now - j->t_start) / USEC_PER_MSEC));
        /* Preparing counts when an environment was built for this call; otherwise it is a few ms of planning. */
        if (j->built_now || (failed_phase && !streq(failed_phase, "run")))
                json_add_int(st, "prepare_ms", (int64_t) ((prepare_end - j->t_start) / USEC_PER_MSEC));
        if (j->timeout_clamped) {
                json_add_int(st, "timeout_seconds", (int64_t) (j->timeout_usec / USEC_PER_SEC));
                json_add_bool(st, "timeout_clamped", true);
        }
        if (j->limits_lowered || j->limits_asked)
                json_add(st, "limits", limits_json(j));
        if (j->plan && j->plan->python)
                json_add_string(st, "python", j->plan->python->version);
        if (j->plan)
                json_add(st, "environment", environment_json(j));
        if (j->prestarted)
                json_add_bool(st, "prestarted", true);
        /* Modules the sandbox had imported before the script came, as the script's first lines would have. */
        const char *pre = outputs_preimported(j->outputs, NULL);
        if (j->prestarted && pre) {
                _cleanup_strv_free_ char **l = strv_split(pre, " ");
                json_object *a = json_object_new_array();
                for (size_t i = 0; l && l[i]; i++)
                        json_object_array_add(a, json_object_new_string(l[i]));
                json_add(st, "warm_imports", a);
        }
        if (job_banner(j)) {
                json_add_bool(st, "sandboxed", false);
                json_add_string(st, "sandbox_warning", job_banner(j));
        }
        if (failed_phase)
                json_add_string(st, "failed_phase", failed_phase);
        if (j->plan && j->plan->warnings && j->plan->warnings[0]) {
                json_object *w = json_object_new_array();
                for (size_t i = 0; j->plan->warnings[i]; i++)
                        json_object_array_add(w, json_object_new_string(j->plan->warnings[i]));
                json_add(st, "warnings", w);
        }
        return st;
}

/* The audit record of the call (runlog.h): what every end of it says. Add the rest, then runlog_emit(). */
static void job_log_begin(Job *j, RunLog *l, const char *verdict) {
        uint64_t now = now_usec();

        runlog_begin(l, j->call, j->script, j->script_len);
        runlog_add(l, "MCP_VERDICT", "%s", verdict);
        if (j->plan && j->plan->key[0])
                runlog_add(l, "MCP_ENV_KEY", "%s", j->plan->key);
        if (j->plan && j->plan->python)
                runlog_add(l, "MCP_PYTHON", "%s", j->plan->python->version);
        if (j->plan && !j->plan->error)
                runlog_add(l, "MCP_ENV_BUILT", "%s", yes_no(j->built_now));
        runlog_add(l, "MCP_SANDBOXED", "%s", yes_no(!job_banner(j)));
        if (j->spawned)
                runlog_add(l, "MCP_PRESTARTED", "%s", yes_no(j->prestarted));
        uint64_t pre_kib = 0;
        const char *pre = outputs_preimported(j->outputs, &pre_kib);
        if (j->prestarted && pre) {
                runlog_add(l, "MCP_WARM_IMPORTS", "%s", pre);
                runlog_add(l, "MCP_WARM_IMPORTS_RSS_KIB", "%" PRIu64, pre_kib);
        }
        if (j->t_prepared) {
                runlog_add(l, "MCP_PREPARE_USEC", "%" PRIu64, j->t_prepared - j->t_start);
                runlog_add(l, "MCP_QUEUE_USEC", "%" PRIu64, (j->t_run_start ?: now) - j->t_prepared);
        }
        runlog_add(l, "MCP_DURATION_USEC", "%" PRIu64, now - j->t_start);
        runlog_add(l, "MCP_TIMEOUT_USEC", "%" PRIu64, j->timeout_usec);
}

/* A failure before the script ran: validation, preparation, a full queue, the sandbox. */
static void job_fail(Job *j, Phase phase, const char *format, ...) __attribute__((format(printf, 3, 4)));
static void job_fail(Job *j, Phase phase, const char *format, ...) {
        _cleanup_free_ char *msg = NULL, *text = NULL;
        size_t len = 0;
        va_list ap;

        va_start(ap, format);
        if (vasprintf(&msg, format, ap) < 0)
                msg = NULL;
        va_end(ap);

        json_object *st = base_structured(j, phase_names[phase]);
        json_add_string(st, "error", msg ?: "failed");
        if (job_banner(j))
                strextendf_len(&text, &len, "%s\n", job_banner(j));
        strextendf_len(&text, &len, "--- error ---\n%s\n--- phase: %s ---\n--- duration_ms: %" PRIu64 " ---\n",
               msg ?: "failed", phase_names[phase], (job_end(j) - j->t_start) / USEC_PER_MSEC);

        RunLog l;
        job_log_begin(j, &l, "error");
        runlog_add(&l, "MCP_FAILED_PHASE", "%s", phase_names[phase]);
        runlog_add(&l, "MCP_ERROR", "%s", msg ?: "failed");
        runlog_emit(&l, "execute_python for uid " UID_FMT " (pid " PID_FMT ") did not run: its %s phase failed.",
                    j->call->uid, j->call->pid, phase_names[phase]);
        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(text ?: "failed"));
        tool_call_finish(j->call, content, st, true);
        job_free(j);
}

/* Read what the pipe holds, at most max bytes. false: the pipe is finished (EOF or an error). */
static bool job_read_outputs(Job *j, size_t max) {
        char buf[65536];

        while (max > 0) {
                ssize_t n = read(j->out_fd, buf, MIN(sizeof(buf), max));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return true;
                if (n <= 0)
                        return false;
                outputs_feed(j->outputs, buf, (size_t) n);
                max -= (size_t) n;
        }
        return true;
}

static void job_close_outputs(Job *j) {
        j->out_source = sd_event_source_disable_unref(j->out_source);
        j->out_fd = safe_close(j->out_fd);
}

static void job_done(Job *j, Process *p, bool finished, int status);

static int on_outputs(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Job *j = userdata;
        int status;

        /* One pipe's worth at a time, so a chatty sandbox cannot hold up the loop. */
        if (!job_read_outputs(j, 65536))
                job_close_outputs(j);
        if (j->proc && outputs_finished(j->outputs, &status)) {
                /* All the script wrote to stdout and stderr was written before the record: it is in the pipes. */
                process_drain(j->proc, DRAIN_MAX);
                job_done(j, j->proc, true, status);
        }
        return 0;
}

/* ---- pre-started sandboxes ------------------------------------------------- */

/*
 * What a pre-started sandbox is: all that decides its policy. It is started exactly as a run's sandbox (the
 * same argv builder, limits, cgroup, system call filter), only without the script, and used for one run. The
 * timeout starts at the hand-over; RLIMIT_CPU cannot be reset, so the CPU Python spent starting (a few ms,
 * against a limit counted in seconds) counts towards it, as the memory it holds counts towards memory.max.
 */
/* Warm imports are learnt and kept per user: one user's runs neither show nor change what another's import. */
#define PRESTART_MAX_USERS 64

typedef struct PrestartUser {
        uid_t uid;
        char **imports;                 /* learnt from this user's last run in the environment (preimport.h) */
        bool imports_failed;            /* a sandbox that imported them went unused: none for this user any more */
        uint64_t imports_kib;           /* the memory the last one used held once it had imported them ('P') */
        uint64_t used;                  /* when last learnt from: the least recent goes when the table is full */
} PrestartUser;

typedef struct Prestart {
        Runtime *runtime;
        char *env_path, *python, *prefix;
        dev_t dev;
        ino_t ino;
        SandboxLimits limits;
        size_t head_max, tail_max;
        uint64_t import_max_kib;        /* prestart-memory: 0 (or the network on), no warm imports */
        bool learnt;                    /* a new spec: users[0]'s imports is what a run just taught */
        PrestartUser users[PRESTART_MAX_USERS];
        size_t n_users;
} Prestart;

static void prestart_free(void *userdata) {
        Prestart *ps = userdata;

        if (!ps)
                return;
        free(ps->env_path);
        free(ps->python);
        free(ps->prefix);
        for (size_t i = 0; i < ps->n_users; i++)
                strv_free(ps->users[i].imports);
        free(ps);
}

/* uid's entry; with create, made (in place of the least recently used one when the table is full). The daemon
 * has none: what it starts for whoever comes first imports nothing. */
static PrestartUser *prestart_user(Prestart *ps, uid_t uid, bool create) {
        size_t oldest = 0;

        if (uid == SCHEDULER_DAEMON_UID)
                return NULL;
        for (size_t i = 0; i < ps->n_users; i++)
                if (ps->users[i].uid == uid)
                        return &ps->users[i];
        if (!create)
                return NULL;
        if (ps->n_users < PRESTART_MAX_USERS)
                oldest = ps->n_users++;
        else
                for (size_t i = 1; i < ps->n_users; i++)
                        if (ps->users[i].used < ps->users[oldest].used)
                                oldest = i;
        strv_free(ps->users[oldest].imports);
        ps->users[oldest] = (PrestartUser) { .uid = uid, .used = now_usec() };
        return &ps->users[oldest];
}

/* What a sandbox of ps started for owner imports ahead, comma-separated ("" for nothing): the boot program's
 * MODULES. */
static char *prestart_imports(Prestart *ps, uid_t owner) {
        PrestartUser *u = prestart_user(ps, owner, false);

        if (ps->import_max_kib == 0 || !u || u->imports_failed || !u->imports || !u->imports[0])
                return strdup("");
        return strv_join(u->imports, ",");
}

static void prestart_update(void *userdata, void *new_userdata) {
        Prestart *ps = userdata, *n = new_userdata;
        PrestartUser *u;

        if (n->n_users == 0)
                return;
        u = prestart_user(ps, n->users[0].uid, true);
        if (!u)
                return;
        if (n->users[0].imports_kib > 0)
                u->imports_kib = n->users[0].imports_kib;
        if (!n->learnt)
                return;
        u->used = n->users[0].used;
        strv_free(u->imports);
        u->imports = TAKE_PTR(n->users[0].imports);
}

/* A waiting sandbox is kept while it imported what its owner's would import now. */
static bool prestart_keep(void *userdata, const PoolItem *it) {
        _cleanup_free_ char *want = prestart_imports(userdata, it->owner);

        return want && streq(want, strempty(it->tag));
}

/* One that imported modules ended or printed before use: most likely their doing (boot.py exits when an import
 * fails); its owner's import nothing from now on. */
static void prestart_dropped(void *userdata, const PoolItem *it) {
        Prestart *ps = userdata;
        PrestartUser *u;

        if (!it->tag || !it->tag[0] || !(u = prestart_user(ps, it->owner, true)))
                return;
        if (!u->imports_failed)
                log_info("A pre-started sandbox of %s for uid " UID_FMT " went unused after importing %s; its next "
                         "ones import nothing ahead.", ps->env_path, it->owner, it->tag);
        u->imports_failed = true;
}

/* The environment it binds is still the one in the store (not collected, not rebuilt). */
static bool prestart_check(void *userdata) {
        Prestart *ps = userdata;
        struct stat st;

        return stat(ps->env_path, &st) >= 0 && st.st_dev == ps->dev && st.st_ino == ps->ino;
}

static int prestart_spawn(void *userdata, uid_t owner, ProcessDoneFunc done, void *done_userdata, PoolItem *ret) {
        Prestart *ps = userdata;
        SandboxLimits limits = ps->limits;
        _cleanup_close_ int out_r = -EBADF, out_w = -EBADF, in_r = -EBADF, in_w = -EBADF;
        int fds[2];
        _cleanup_free_ char *arg = NULL;
        int k;

        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        out_r = fds[0];
        out_w = fds[1];
        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        in_r = fds[0];
        in_w = fds[1];
        _cleanup_free_ char *imports = prestart_imports(ps, owner);
        if (!imports)
                return -ENOMEM;
        /* FD:IN:LEARN:CAP (boot.py). The modules go first on IN, not on a command line every local user can read. */
        if (asprintf(&arg, "%d:%d:1:%" PRIu64, out_w, in_r, ps->import_max_kib) < 0) {
                arg = NULL;
                return -ENOMEM;
        }

        char *command[] = { ps->python,         (char *) "-I",
                            (char *) "-B",      (char *) "-c", (char *) boot_code,
                            arg,                (char *) SANDBOX_WORK_DIR "/script.py", NULL };
        /* network-allow: behind the bridge; the proxy is made for whoever takes the sandbox, from ctl. */
        _cleanup_strv_free_ char **wrapped = NULL;
        _cleanup_close_ int ctl = -EBADF, net_fd = -EBADF;
        k = runtime_network_wrap_later(ps->runtime, command, &ctl, &net_fd, &wrapped);
        if (k < 0)
                return k;
        char *ro[] = { ps->prefix, NULL };
        int pass[] = { out_w, in_r, net_fd };
        limits.owner = owner;   /* in the cgroup group of the user it is for, or the daemon's */
        k = runtime_spawn_sandboxed_with_fds(ps->runtime, ps->env_path, streq(ps->prefix, "/usr") ? NULL : ro, NULL,
                                             0, pass, net_fd >= 0 ? 3 : 2, wrapped ?: command, 0, &limits,
                                             ps->head_max, ps->tail_max, done, done_userdata, &ret->proc);
        if (k < 0)
                return k;
        ret->ctl_fd = TAKE_FD(ctl);
        (void) fcntl(out_r, F_SETFL, O_NONBLOCK);
        (void) fcntl(in_w, F_SETFL, O_NONBLOCK);
        /* A line of at most PREIMPORT_MAX_MODULES names: far less than the pipe holds. */
        size_t n = strlen(imports);
        imports[n] = '\n';
        if (write(in_w, imports, n + 1) != (ssize_t) (n + 1))
                return -EIO;
        imports[n] = 0;
        ret->in_fd = TAKE_FD(in_w);
        ret->out_fd = TAKE_FD(out_r);
        ret->tag = TAKE_PTR(imports);
        return 0;
}

static const PoolTargetOps prestart_ops = {
        .spawn = prestart_spawn,
        .check = prestart_check,
        .free_spec = prestart_free,
        .update = prestart_update,
        .keep = prestart_keep,
        .dropped = prestart_dropped,
};

static void output_caps(const Config *c, size_t *ret_head, size_t *ret_tail) {
        size_t cap = c->output_cap / 2;   /* per stream */

        *ret_head = cap / 4;
        *ret_tail = cap - cap / 4;
}

/* What decides a pre-started sandbox beyond the settings (a reload flushes the pool): NULL if none fits. */
static char *prestart_key(const Config *c, const char *env_path, const char *prefix, const struct stat *st) {
        size_t head, tail;
        char *key = NULL;

        output_caps(c, &head, &tail);
        if (asprintf(&key, "%s\n%s\n%" PRIu64 ":%" PRIu64 "\n%zu:%zu", env_path, prefix, (uint64_t) st->st_dev,
                     (uint64_t) st->st_ino, head, tail) < 0)
                return NULL;
        return key;
}

static int prestart_learnt(Runtime *r, const char *env_path, const char *prefix, uid_t uid, char **imports,
                           uint64_t imports_kib) {
        const Config *c = runtime_config(r);
        _cleanup_free_ char *key = NULL;
        Prestart *ps;
        struct stat st;

        if (pool_size(runtime_pool(r)) == 0) {
                strv_free(imports);
                return 0;
        }
        if (stat(env_path, &st) < 0) {
                strv_free(imports);
                return -errno;
        }
        key = prestart_key(c, env_path, prefix, &st);
        ps = calloc(1, sizeof(*ps));
        if (!key || !ps) {
                free(ps);
                strv_free(imports);
                return -ENOMEM;
        }
        ps->learnt = imports != NULL;
        if (uid != SCHEDULER_DAEMON_UID) {
                ps->users[0] = (PrestartUser) { .uid = uid, .imports = imports, .imports_kib = imports_kib,
                                                .used = now_usec() };
                ps->n_users = 1;
        } else
                strv_free(imports);
        /* With the network on, no warm imports: nothing a module does at import time runs before its user's
         * connections are theirs (network-allow's proxy is made at the hand-over). */
        ps->import_max_kib = c->network || runtime_network_allowlisted(r) ? 0 : c->prestart_memory / 1024;
        ps->runtime = r;
        ps->env_path = strdup(env_path);
        ps->prefix = strdup(prefix);
        if (asprintf(&ps->python, "%s/bin/python", env_path) < 0)
                ps->python = NULL;
        if (!ps->env_path || !ps->prefix || !ps->python) {
                prestart_free(ps);
                return -ENOMEM;
        }
        ps->dev = st.st_dev;
        ps->ino = st.st_ino;
        sandbox_limits_from_config(c, &ps->limits);
        output_caps(c, &ps->head_max, &ps->tail_max);
        return pool_refill(runtime_pool(r), key, uid, &prestart_ops, ps);
}

int execute_python_prestart(Runtime *r, const char *env_path, const char *prefix) {
        return prestart_learnt(r, env_path, prefix, SCHEDULER_DAEMON_UID, NULL, 0);
}

typedef struct PoolJson {
        json_object *targets;
        uid_t uid;
} PoolJson;

/* An environment's pool as uid may see it: its own warm imports only. */
static void prestart_target_json(void *userdata, unsigned n_waiting, unsigned depth, void *arg) {
        Prestart *ps = userdata;
        PoolJson *pj = arg;
        json_object *o = json_object_new_object(), *imports = json_object_new_array();
        _cleanup_free_ char *now = prestart_imports(ps, pj->uid);
        PrestartUser *u = prestart_user(ps, pj->uid, false);
        const char *slash = strrchr(ps->env_path, '/');

        json_add_string(o, "environment", slash ? slash + 1 : ps->env_path);
        json_add_int(o, "waiting", n_waiting);
        json_add_int(o, "depth", depth);
        for (size_t i = 0; now && now[0] && u && u->imports && u->imports[i]; i++)
                json_object_array_add(imports, json_object_new_string(u->imports[i]));
        json_add(o, "warm_imports", imports);
        if (u && u->imports_kib > 0)   /* what one held, the last time one was used */
                json_add_int(o, "warm_imports_memory_bytes", (int64_t) (u->imports_kib * 1024));
        if (u && u->imports_failed)
                json_add_bool(o, "warm_imports_off", true);
        json_object_array_add(pj->targets, o);
}

json_object *execute_python_pool_json(Runtime *r, uid_t uid) {
        const Config *c = runtime_config(r);
        Pool *p = runtime_pool(r);
        json_object *o = json_object_new_object();
        PoolJson pj = { .targets = json_object_new_array(), .uid = uid };
        bool network = c->network || runtime_network_allowlisted(r);

        json_add_int(o, "max_per_environment", pool_size(p));
        json_add_int(o, "waiting", pool_n_ready(p));
        json_add_int(o, "wanted", pool_n_wanted(p));
        json_add_int(o, "warm_import_memory_max_bytes", network ? 0 : (int64_t) c->prestart_memory);
        pool_foreach_target(p, prestart_target_json, &pj);
        json_add(o, "environments", pj.targets);
        return o;
}

/* A run with the configured limits may use a pre-started sandbox: set j->pool_key. */
static void job_pool_key(Job *j) {
        const Config *c = runtime_config(j->runtime);
        SandboxLimits configured;
        struct stat st;

        if (pool_size(runtime_pool(j->runtime)) == 0)
                return;
        sandbox_limits_from_config(c, &configured);
        if (!sandbox_limits_equal(&configured, &j->limits) || stat(j->env_path, &st) < 0)
                return;
        j->pool_key = prestart_key(c, j->env_path, j->plan->python->prefix, &st);
}

/* The environment was just used: keep a sandbox for it started (again), importing what this run teaches. */
static void job_refill(Job *j) {
        char **imports = NULL;
        const char *loaded;
        int k;

        if (!j->pool_key)
                return;
        /* A script that starts with imports says what the environment's scripts import; one that does not, nothing. */
        loaded = outputs_loaded_modules(j->outputs);
        if (loaded && j->script_modules && j->script_modules[0])
                imports = preimport_learn(j->script_modules, loaded);
        uint64_t kib = 0;
        (void) outputs_preimported(j->outputs, &kib);
        /* The caller's next run gets one of its own; an environment without dependencies, everybody's hello world,
         * also keeps one for whoever comes first (as at start-up), unless it has one. */
        k = prestart_learnt(j->runtime, j->env_path, j->plan->python->prefix, j->call->uid, imports,
                            j->prestarted ? kib : 0);
        if (k >= 0 && j->plan->requirements.n == 0)
                k = prestart_learnt(j->runtime, j->env_path, j->plan->python->prefix, SCHEDULER_DAEMON_UID, NULL, 0);
        if (k < 0)
                log_debug_errno(k, "Failed to start a sandbox ahead for the next run: %m");
}

static int on_outputs(sd_event_source *s, int fd, uint32_t revents, void *userdata);
static void on_run_done(Process *p, void *userdata);

/* A waiting sandbox suits the job when what it imported is what the script imports first (preimport.h). */
static int job_accept(const PoolItem *it, void *userdata) {
        Job *j = userdata;
        _cleanup_strv_free_ char **pre = NULL;

        if (!it->tag || !it->tag[0])
                return 0;
        if (!j->plain_enough)
                return -1;
        pre = strv_split(it->tag, ",");
        if (!pre || !preimport_is_prefix(pre, j->script_modules))
                return -1;
        return (int) strv_length(pre);
}

/* Hand the script to a pre-started sandbox: true when it runs there now. */
static bool job_take_prestarted(Job *j) {
        Runtime *r = j->runtime;
        PoolItem it = { .in_fd = -EBADF, .out_fd = -EBADF, .ctl_fd = -EBADF };
        ssize_t n;
        int size;

        /* A script larger than a pipe holds goes to a fresh sandbox: the hand-over is one write. */
        if (!j->pool_key || j->script_len > 65536)
                return false;
        j->script_modules = preimport_leading_modules(j->script, j->script_len);
        j->plain_enough = j->script_modules && preimport_script_plain_enough(j->script, j->script_len);
        if (pool_take(runtime_pool(r), j->pool_key, j->call->uid, job_accept, j, &it, &j->prestart_shared) <= 0)
                return false;
        /* The script must fit the pipe in one write: the loop never waits on a sandbox. Else a fresh one. (The line
         * of modules before it may still be in the pipe.) */
        size = fcntl(it.in_fd, F_GETPIPE_SZ);
        if (size < 0 || j->script_len + strlen(strempty(it.tag)) + 1 > (size_t) size) {
                pool_item_done(&it);
                return false;
        }
        /* One started for whoever came first waited in the daemon's group: it goes into its user's before it has
         * the script (which then starts, and may fork), so that all the run does is charged to its user. A sandbox
         * that cannot move is no sandbox of theirs: dropped (torn down off the loop), and a fresh one instead. */
        if (j->prestart_shared && runtime_move_to_owner(r, it.proc, j->call->uid) < 0) {
                process_detach(TAKE_PTR(it.proc));
                pool_item_done(&it);
                return false;
        }
        /* network-allow: the sandbox's proxy becomes the caller's now (a reload flushes the pool: the two agree). */
        if ((it.ctl_fd >= 0) != runtime_network_allowlisted(r) ||
            (it.ctl_fd >= 0 && runtime_network_adopt(r, j->call->uid, TAKE_FD(it.ctl_fd), &j->netproxy) < 0)) {
                pool_item_done(&it);
                return false;
        }
        it.proc->done = on_run_done;
        it.proc->userdata = j;
        if (pool_item_start(&it, runtime_event(r), j->timeout_usec) < 0) {
                pool_item_done(&it);
                j->netproxy = net_proxy_free(j->netproxy);
                return false;
        }
        n = j->script_len > 0 ? write(it.in_fd, j->script, j->script_len) : 0;
        if (n < 0 || (size_t) n != j->script_len ||
            sd_event_add_io(runtime_event(r), &j->out_source, it.out_fd, EPOLLIN, on_outputs, j) < 0) {
                j->out_source = sd_event_source_disable_unref(j->out_source);
                pool_item_done(&it);
                j->netproxy = net_proxy_free(j->netproxy);
                return false;
        }
        it.in_fd = safe_close(it.in_fd);   /* EOF: the script is all there */
        j->proc = TAKE_PTR(it.proc);
        j->proc->flush_on_timeout = true;   /* stdout is buffered (boot.py's flush()) */
        j->out_fd = TAKE_FD(it.out_fd);
        j->prestarted = true;
        /* During a burst the replacement starts now, beside the run: a client calling back to back finds it further
         * along. Otherwise after the reply (job_refill(), which also brings in what the run taught), so that its
         * start-up does not compete with the run for the CPU. */
        if (pool_in_burst(runtime_pool(r), j->pool_key, j->call->uid) &&
            prestart_learnt(r, j->env_path, j->plan->python->prefix, j->call->uid, NULL, 0) < 0)
                log_debug("Failed to start a sandbox ahead for the next run.");
        log_debug("execute_python for uid " UID_FMT ": running in a pre-started sandbox (warm imports: %s).",
                  j->call->uid, it.tag && it.tag[0] ? it.tag : "none");
        it.tag = mfree(it.tag);
        /* It was there for whoever came first: another goes back now, for the next user to come. */
        if (j->prestart_shared &&
            prestart_learnt(r, j->env_path, j->plan->python->prefix, SCHEDULER_DAEMON_UID, NULL, 0) < 0)
                log_debug("Failed to start a sandbox ahead for the next user.");
        return true;
}

/*
 * The run is over: the sandbox exited (p reaped), or, finished, the script said so with its exit status (an 'X'
 * record, see boot_code) and p is still tearing down. Answer the call.
 */
static void job_done(Job *j, Process *p, bool finished, int status) {
        _cleanup_free_ char *out = NULL, *err = NULL, *text = NULL, *message = NULL;
        _cleanup_free_ char *out_clean = NULL, *err_clean = NULL;
        size_t out_len = 0, err_len = 0, ol = 0, el = 0, len = 0, mlen = 0;

        j->proc = NULL;
        /* The sandbox is gone: what is left in the pipe is all there is (bounded, should anything linger). */
        if (j->out_fd >= 0) {
                (void) job_read_outputs(j, 2 * OUTPUTS_MAX_TOTAL);
                job_close_outputs(j);
        }

        /* The record may be among what was left: the loop can see the sandbox end before the pipe's last bytes. */
        bool recorded = finished || outputs_finished(j->outputs, &status);
        /* Once: a run that said it was done is still tearing down, and its clock would go on. */
        uint64_t run_usec = process_duration_usec(p);
        int sig = recorded ? 0 : p->signal;
        bool timed_out = !recorded && p->timed_out;
        int code = recorded ? status : p->exit_code;

        /* A script that exits (sys.exit(137) too) says so in its record: without one, bwrap's 128+N is death by
         * signal N (or the rare os._exit(128+N)). */
        if (!recorded && !sig && sandbox_exit_signal(code)) {
                sig = sandbox_exit_signal(code);
                code = 0;
        }
        int exit_code = sig ? -sig : code;
        char signame[32] = "";
        if (sig)
                snprintf(signame, sizeof(signame), "SIG%s", sigabbrev_np(sig) ?: "UNKNOWN");
        bool failed = code != 0 || sig || timed_out;
        out = capture_text(&p->out, &out_len);
        err = capture_text(&p->err, &err_len);
        out_clean = utf8_sanitize(strempty(out), out ? out_len : 0, &ol);
        err_clean = utf8_sanitize(strempty(err), err ? err_len : 0, &el);

        const char *limit = NULL;
        if (failed) {
                SandboxCgroupEvents ev = {};
                if (p->cgroups)
                        (void) sandbox_cgroup_read_events(p->cgroups, &ev);
                limit = sandbox_limit_hit(&(SandboxOutcome) {
                        .exit_code = code,
                        .decoded = true,   /* above */
                        .signal = sig,
                        .timed_out = timed_out,
                        .stderr_text = err,
                        .oom_killed = ev.oom_kill > 0,
                        .pids_max = ev.pids_max > 0,
                });
        }

        /* The layout users of the Python servers already parse, after the warning of a run without a sandbox. */
        if (job_banner(j))
                strextendf_len(&text, &len, "%s\n", job_banner(j));
        append_section(&text, &len, "stdout", out_clean ?: "", ol);
        append_section(&text, &len, "stderr", err_clean ?: "", el);
        strextendf_len(&text, &len, "--- exit_code: %d ---\n", exit_code);
        strextendf_len(&text, &len, "--- duration_ms: %" PRIu64 " ---\n", (job_end(j) - j->t_start) / USEC_PER_MSEC);
        if (timed_out)
                strextendf_len(&text, &len, "--- timed_out: true ---\n");
        if (j->timeout_clamped)
                strextendf_len(&text, &len, "--- timeout_clamped: %" PRIu64 "s (the server's maximum) ---\n",
                       j->timeout_usec / USEC_PER_SEC);

        /* What explains the outcome, in sentences: in the text, and as structuredContent's "message", for clients
         * that show the model only one of the two. */
        if (timed_out)
                strextendf_len(&message, &mlen, "The script was stopped after %" PRIu64 "s, the timeout.\n",
                       j->timeout_usec / USEC_PER_SEC);
        else if (sig)
                strextendf_len(&message, &mlen, "The script was killed by signal %d (%s).\n", sig, strsignal(sig));
        if (limit && limit_sentence(limit))
                strextendf_len(&message, &mlen, "%s\n", limit_sentence(limit));
        /* A sentence naming the fix, where stderr shows a cause the model can act on (hints.h). */
        _cleanup_free_ char *hint = failed && !timed_out && !limit
                                            ? hint_for_run(err_clean, !runtime_config(j->runtime)->network,
                                                           j->plan ? &j->plan->requirements : NULL, false)
                                            : NULL;
        if (hint)
                strextendf_len(&message, &mlen, "%s\n", hint);
        if (message)
                strextendf_len(&text, &len, "%s", message);
        if (limit)
                strextendf_len(&text, &len, "--- limit: %s ---\n", limit);
        /* The text says these on lines of its own (above, and below); the structured message in sentences. */
        if (j->timeout_clamped)
                strextendf_len(&message, &mlen,
                               "The timeout asked for was lowered to %" PRIu64 "s, the server's maximum.\n",
                               j->timeout_usec / USEC_PER_SEC);
        for (size_t i = 0; i < ELEMENTSOF(limit_args); i++)
                if (j->limits_lowered & limit_args[i].bit) {
                        strextendf_len(&text, &len, "--- limits.%s lowered to %" PRIu64 " (the server's maximum) ---\n",
                               limit_args[i].name, limit_get_units(&j->limits, i));
                        strextendf_len(&message, &mlen, "limits.%s was lowered to %" PRIu64 ", the server's maximum.\n",
                               limit_args[i].name, limit_get_units(&j->limits, i));
                }

        json_object *st = base_structured(j, failed ? "run" : NULL);
        json_add_int(st, "exit_code", exit_code);
        /* How long it ran before it failed or was stopped; a good run's is about its duration. */
        if (failed)
                json_add_int(st, "run_ms", (int64_t) (run_usec / USEC_PER_MSEC));
        if (sig)
                json_add_string(st, "signal", signame);
        if (timed_out) {
                json_add_bool(st, "timed_out", true);
                json_add_int(st, "timeout_seconds", (int64_t) (j->timeout_usec / USEC_PER_SEC));
        }
        if (limit) {
                json_add_string(st, "limit", limit);
                if (!j->limits_lowered && !j->limits_asked && !streq(limit, "timeout"))
                        json_add(st, "limits", limits_json(j));
        }
        if (message) {
                /* Without the last newline: one sentence reads as one. */
                if (mlen > 0 && message[mlen - 1] == '\n')
                        message[--mlen] = 0;
                json_add_string(st, "message", message);
        }
        if (hint)
                json_add_string(st, "hint", hint);
        json_add(st, "stdout", text_json(out_clean ?: "", ol));
        if (el > 0)
                json_add(st, "stderr", text_json(err_clean ?: "", el));
        if (capture_omitted(&p->out) || capture_omitted(&p->err)) {
                json_object *tr = json_object_new_object();
                json_add_int(tr, "stdout_bytes_total", (int64_t) p->out.total);
                json_add_int(tr, "stdout_bytes_omitted", (int64_t) capture_omitted(&p->out));
                json_add_int(tr, "stderr_bytes_total", (int64_t) p->err.total);
                json_add_int(tr, "stderr_bytes_omitted", (int64_t) capture_omitted(&p->err));
                json_add(st, "truncated", tr);
        }

        RunLog l;
        const char *verdict = timed_out ? "timeout" : limit ? "limit" : sig ? "killed" : code != 0 ? "failed" : "ok";
        job_log_begin(j, &l, verdict);
        runlog_add(&l, "MCP_EXIT_CODE", "%d", exit_code);
        if (sig)
                runlog_add(&l, "MCP_SIGNAL", "%s", signame);
        if (limit)
                runlog_add(&l, "MCP_LIMIT", "%s", limit);
        runlog_add(&l, "MCP_RUN_USEC", "%" PRIu64, run_usec);
        if (j->netproxy && net_proxy_refused(j->netproxy)[0]) {
                _cleanup_free_ char *refused = strv_join(net_proxy_refused(j->netproxy), " ");
                runlog_add(&l, "MCP_NETWORK_REFUSED", "%s", strempty(refused));
        }
        runlog_emit(&l, "execute_python for uid " UID_FMT " (pid " PID_FMT "): %s, exit code %d, %" PRIu64 " ms.",
                    j->call->uid, j->call->pid, verdict, exit_code, run_usec / USEC_PER_MSEC);

        /* network-allow: the hosts the proxy refused this run (one line of text, one list). */
        char *const *refused = j->netproxy ? net_proxy_refused(j->netproxy) : NULL;
        if (refused && refused[0]) {
                _cleanup_free_ char *list = strv_join((char **) refused, " ");
                strextendf_len(&text, &len,
                               "--- network_refused: %s (not in the administrator's network allowlist, "
                               "network-allow) ---\n", strempty(list));
        }
        /* Figures and files reach the model only in content[]: then there is no structuredContent (outputs.h). */
        if (outputs_n_included(j->outputs) > 0) {
                json_object_put(st);
                st = NULL;
        } else if (!outputs_empty(j->outputs)) {
                json_object *figures = outputs_figures_json(j->outputs), *files = outputs_files_json(j->outputs);
                if (json_object_array_length(figures) > 0)
                        json_add(st, "figures", figures);
                else
                        json_object_put(figures);
                if (json_object_array_length(files) > 0)
                        json_add(st, "files", files);
                else
                        json_object_put(files);
                if (outputs_n_unlisted(j->outputs) > 0)
                        json_add_int(st, "outputs_unlisted", (int64_t) outputs_n_unlisted(j->outputs));
        }
        if (st && refused && refused[0]) {
                json_object *a = json_object_new_array();
                for (size_t i = 0; refused[i]; i++)
                        json_object_array_add(a, json_object_new_string(refused[i]));
                json_add(st, "network_refused", a);
        }

        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(text ?: ""));
        outputs_append_content(j->outputs, content);
        if (!finished)
                process_free(p);
        tool_call_finish(j->call, content, st, failed);
        if (finished)
                process_detach(p);   /* killed and reaped in the background: its teardown is not the caller's wait */
        /* The reply is out: start the replacement (or the first) sandbox for the next run now. */
        job_refill(j);
        job_free(j);
}

static void on_run_done(Process *p, void *userdata) {
        job_done(userdata, p, false, 0);
}

static void job_run(Job *j) {
        _cleanup_close_ int fd = -EBADF, out_w = -EBADF;
        const char *banner;
        _cleanup_free_ char *python = NULL;
        int pipe_fds[2];
        char out_fd[16];
        Runtime *r = j->runtime;
        const Config *c = runtime_config(r);
        int k;

        j->t_run_start = now_usec();
        /* Before the pool or the spawn looks at the setting: a reload cannot come in between. */
        banner = runtime_unsandboxed_banner(r);
        job_set_phase(j, PHASE_RUN);

        if (outputs_new(&j->outputs) < 0)
                return job_fail(j, PHASE_RUN, "out of memory");
        /* A pre-started sandbox has its mounts already: the user's files need a sandbox of their own. */
        if (j->files.n == 0)
                job_pool_key(j);
        if (job_take_prestarted(j)) {
                j->banner = banner;
                j->spawned = true;
                return;
        }

        fd = memfd_with("script.py", j->script, j->script_len);
        if (fd < 0)
                return job_fail(j, PHASE_RUN, "the script could not be handed to the sandbox: %s", strerror(-fd));
        if (asprintf(&python, "%s/bin/python", j->env_path) < 0)
                return job_fail(j, PHASE_RUN, "out of memory");

        /* Figures and files come back through a pipe, read as the run goes. */
        if (pipe2(pipe_fds, O_CLOEXEC) < 0)
                return job_fail(j, PHASE_RUN, "the sandbox could not be started: %s", strerror(errno));
        j->out_fd = pipe_fds[0];
        out_w = pipe_fds[1];
        (void) fcntl(j->out_fd, F_SETFL, O_NONBLOCK);
        /* With a pool, the run reports what it loaded from the environment: what its next sandboxes import ahead. */
        snprintf(out_fd, sizeof(out_fd), j->pool_key ? "%d::1" : "%d", out_w);

        SandboxData data[1 + INPUT_FILES_MAX] = { { .fd = fd, .dest = SANDBOX_WORK_DIR "/script.py" } };
        k = input_files_data(&j->files, data + 1);
        if (k < 0)
                return job_fail(j, PHASE_RUN, "the files could not be handed to the sandbox: %s", strerror(-k));
        const char *prefix = j->plan->python->prefix;
        /* -I: no user site, no PYTHON* variables, no script dir on sys.path; -B no .pyc; stdout block-buffered
         * (boot.py's flush()). boot_code runs the script as `python /work/script.py` would. */
        char *command[] = { python,      (char *) "-I", (char *) "-B", (char *) "-c",
                            (char *) boot_code, out_fd, (char *) SANDBOX_WORK_DIR "/script.py", NULL };
        size_t head, tail;
        output_caps(c, &head, &tail);
        /* network-allow: the command behind the bridge, which hands the daemon's proxy its listening socket. */
        _cleanup_strv_free_ char **wrapped = NULL;
        _cleanup_close_ int net_fd = -EBADF;
        k = runtime_network_wrap(r, j->call->uid, command, &j->netproxy, &net_fd, &wrapped);
        if (k < 0)
                return job_fail(j, PHASE_RUN, "the network proxy could not be set up: %s", strerror(-k));
        char *ro[] = { (char *) prefix, NULL };
        int fds[] = { out_w, net_fd };
        j->limits.owner = j->call->uid;         /* the run's CPU is a share of its user's */
        k = runtime_spawn_sandboxed_with_fds(r, j->env_path, streq(prefix, "/usr") ? NULL : ro,
                                             data, 1 + j->files.n, fds, net_fd >= 0 ? 2 : 1, wrapped ?: command,
                                             j->timeout_usec, &j->limits, head, tail, on_run_done, j, &j->proc);
        if (k == -EPERM && runtime_sandbox_error(r))
                return job_fail(j, PHASE_RUN, "%s", strempty(runtime_sandbox_error(r)));
        if (k < 0)
                return job_fail(j, PHASE_RUN, "the sandbox could not be started: %s", strerror(-k));
        j->banner = banner;
        j->spawned = true;
        j->proc->flush_on_timeout = true;   /* stdout is buffered (boot.py's flush()) */
        /* Only the sandbox writes: EOF when it is gone. */
        out_w = safe_close(out_w);
        k = sd_event_add_io(runtime_event(r), &j->out_source, j->out_fd, EPOLLIN, on_outputs, j);
        if (k < 0)   /* nobody would read the pipe, and a full pipe would stall the script */
                return job_fail(j, PHASE_RUN, "the sandbox could not be watched: %s", strerror(-k));
}

static void on_slot(SchedTicket *t, void *userdata) {
        Job *j = userdata;

        job_run(j);
}

static void job_queue(Job *j) {
        Runtime *r = j->runtime;
        int k;

        j->t_prepared = now_usec();
        k = runtime_acquire_slot(r, &j->slot, j->call->uid, on_slot, j);
        if (k == SCHEDULER_QUEUE_FULL || k == SCHEDULER_USER_QUEUE_FULL) {
                unsigned running = runtime_n_running(r), mine = runtime_n_running_for(r, j->call->uid);
                if (k == SCHEDULER_QUEUE_FULL)
                        return job_fail(j, PHASE_RUN,
                                        "the server is busy: %u script%s running (%u of them yours) and %u waiting, "
                                        "the most it takes (max-queue). Try again in a little while",
                                        running, running == 1 ? " is" : "s are", mine, runtime_n_queued(r));
                return job_fail(j, PHASE_RUN,
                                "you have %u script%s running and %u waiting, the most one user may have "
                                "(max-runs-per-user). Try again when one of them has finished",
                                mine, mine == 1 ? "" : "s", runtime_n_queued_for(r, j->call->uid));
        }
        if (k < 0)
                return job_fail(j, PHASE_RUN, "out of memory");
        if (k == 0)
                return job_run(j);
        job_set_phase(j, PHASE_QUEUED);
}

static void on_env_ready(const EnvResult *res, void *userdata) {
        Job *j = userdata;

        j->env_waiter = NULL;
        if (res->error < 0) {
                _cleanup_free_ char *names = NULL;
                requirement_list_join(&j->plan->requirements, ", ", &names);
                _cleanup_free_ char *hint = hint_for_install(res->message, &j->plan->requirements,
                                                             runtime_config(j->runtime)->allow_source_builds);
                return job_fail(j, PHASE_PREPARE, "installing the dependencies (%s) failed:\n%s%s%s", strempty(names),
                                strempty(res->message), hint ? "\n" : "", strempty(hint));
        }
        j->env_path = strdup(res->path);
        j->env_hold = envstore_hold(runtime_envstore(j->runtime), j->env_path);
        j->built_now = true;
        job_queue(j);
}

static void on_plan(ScriptPlan *plan, void *userdata) {
        Job *j = userdata;
        EnvStore *store = runtime_envstore(j->runtime);
        int k;

        j->analysis = NULL;
        j->plan = plan;
        if (plan->error)
                return job_fail(j, PHASE_VALIDATE, "%s", plan->error);
        if (runtime_sandbox_error(j->runtime))
                return job_fail(j, PHASE_RUN, "%s", runtime_sandbox_error(j->runtime));

        j->env_path = TAKE_PTR(plan->env_path);
        if (j->env_path) {
                j->env_hold = envstore_hold(store, j->env_path);
                return job_queue(j);
        }

        job_set_phase(j, PHASE_PREPARE);
        k = envstore_prepare(store, j->call->uid, plan->key, plan->python, &plan->requirements, on_env_ready, j, &j->env_waiter);
        if (k < 0)
                job_fail(j, PHASE_PREPARE, "the environment could not be prepared: %s", strerror(-k));
}

static void on_cancel(ToolCall *call, void *userdata) {
        Job *j = userdata;

        RunLog l;
        /* Unlike a result's failed_phase, the record tells waiting for a slot from running. */
        const char *phase = j->phase == PHASE_QUEUED ? "queue" : phase_names[j->phase];
        job_log_begin(j, &l, "cancelled");
        runlog_add(&l, "MCP_FAILED_PHASE", "%s", phase);
        runlog_emit(&l, "execute_python for uid " UID_FMT " (pid " PID_FMT ") cancelled in phase %s; stopping it.",
                    call->uid, call->pid, phase);
        job_free(j);   /* kills the sandbox: the whole process tree goes with it */
}

static int execute_python_call(ToolCall *call, json_object *args) {
        ToolServices *m = call->server_userdata;
        const Config *c = m->config;
        json_object *v;
        Job *j;
        int k;

        j = calloc(1, sizeof(*j));
        if (!j)
                return -ENOMEM;
        j->call = tool_call_ref(call);
        j->runtime = m->runtime;
        j->out_fd = -EBADF;
        j->t_start = now_usec();
        j->phase = PHASE_VALIDATE;

        v = json_get(args, "script", json_type_string);
        j->script_len = (size_t) json_object_get_string_len(v);
        j->script = malloc(j->script_len + 1);
        if (!j->script) {
                job_free(j);
                return -ENOMEM;
        }
        memcpy(j->script, json_object_get_string(v), j->script_len + 1);

        j->timeout_usec = c->default_timeout_usec;
        if (json_get_int64(args, "timeout_seconds", &j->timeout_requested) ||
            ((v = json_get(args, "timeout_seconds", json_type_double)) &&
             (j->timeout_requested = (int64_t) json_object_get_double(v), true))) {
                uint64_t want = (uint64_t) MAX(j->timeout_requested, (int64_t) 1) * USEC_PER_SEC;
                j->timeout_clamped = want > c->max_timeout_usec;
                j->timeout_usec = MIN(want, c->max_timeout_usec);
        }

        /* A call may lower a limit, never raise it. */
        {
                SandboxLimits max, want = {};
                json_object *lim = json_get(args, "limits", json_type_object);
                j->limits_asked = lim != NULL;
                sandbox_limits_from_config(c, &max);
                for (size_t i = 0; lim && i < ELEMENTSOF(limit_args); i++) {
                        int64_t n;
                        if (json_get_int64(lim, limit_args[i].name, &n) && n > 0)
                                *(uint64_t *) ((char *) &want + limit_args[i].offset) =
                                        MIN((uint64_t) n, UINT64_MAX / limit_args[i].unit) * limit_args[i].unit;
                }
                j->limits_lowered = sandbox_limits_lower(&max, &want, &j->limits);
        }

        {
                _cleanup_free_ char *error = NULL;
                k = input_files_take(call, args, c->tmpfs_size, &j->files, &error);
                if (k == -EINVAL) {
                        job_fail(j, PHASE_VALIDATE, "%s", strempty(error));
                        return 0;
                }
                if (k < 0) {
                        job_free(j);
                        return k;
                }
        }

        tool_call_set_cancel(call, on_cancel, j);
        if (tool_call_is_live(call) && call->progress_token) {
                k = sd_event_add_time_relative(m->event, &j->progress_timer, CLOCK_MONOTONIC, PROGRESS_INTERVAL_USEC,
                                               USEC_PER_SEC / 4, on_progress_timer, j);
                if (k < 0)
                        log_debug_errno(k, "No progress timer: %m");
        }

        const char *pv = json_get_string(args, "python_version");
        k = script_analyze(m->runtime, j->call->uid, j->script, j->script_len, json_get(args, "dependencies", json_type_array), pv,
                           on_plan, j, &j->analysis);
        if (k < 0) {
                tool_call_set_cancel(call, NULL, NULL);
                job_free(j);
                return k;
        }
        script_analysis_set_progress(j->analysis, on_analysis_progress, j);
        return 0;
}

static const char input_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"script\":{\"type\":\"string\",\"description\":\"Python source, run as is; may start with a PEP 723 "
        "block.\"},"
        "\"dependencies\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":1024},\"maxItems\":256,"
        "\"description\":\"PEP 508 requirements, added to the script's own (these win for the same package); no "
        "URLs.\"},"
        "\"timeout_seconds\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":86400,\"description\":\"Seconds.\"},"
        INPUT_FILES_SCHEMA ","
        "\"python_version\":{\"type\":[\"string\",\"null\"],\"maxLength\":32,\"description\":\"e.g. \\\"3.12\\\" "
        "(default: the newest that fits requires-python).\"},"
        "\"limits\":{\"type\":\"object\",\"description\":\"Lower this run's limits; the result's limit field names "
        "one that was hit.\","
        "\"properties\":{"
        "\"memory_mb\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":16777216},"
        "\"max_processes\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000000},"
        "\"max_file_size_mb\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":16777216},"
        "\"cpu_seconds\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":86400}"
        "},\"additionalProperties\":false}"
        "},\"required\":[\"script\"],\"additionalProperties\":false}";

const Tool tool_execute_python = {
        .name = "execute_python",
        .title = "Run a Python script in a sandbox",
        .description =
                "Run a Python script in a fresh, locked-down sandbox; returns stdout, stderr and the exit code. "
                "Declare third-party packages in a PEP 723 block or the dependencies argument; they are installed "
                "into a cached environment. The script runs as an unprivileged user without access to the user's "
                "files, in a private working directory /work, with an empty stdin; nothing persists between calls. "
                "Long output keeps its beginning and end.\n"
                "Figures (matplotlib, shown or left open) come back as PNG images, and files written to /work/out/ "
                "as text or resources (at most 8 figures and 16 files, 4 MiB each, 10 MiB in all).\n"
                "Example:\n# /// script\n# dependencies = [\"rich\"]\n# requires-python = \">=3.11\"\n# ///\n"
                "import rich; rich.print(\"[bold]hi[/bold]\")",
        .input_schema = input_schema,
        .read_only_hint = false,
        .destructive_hint = false,
        .idempotent_hint = false,
        .open_world_hint = true,
        .call = execute_python_call,
};

/* unsafe-no-sandbox=yes: the same tool, described as what it then is. */
const Tool tool_execute_python_unsandboxed = {
        .name = "execute_python",
        .title = "Run a Python script WITHOUT a sandbox (development server)",
        .description =
                "DEVELOPMENT SERVER WITHOUT A SANDBOX: the script runs directly on the server's machine, as the "
                "server's user, with access to that user's files and to the network (unsafe-no-sandbox=yes). Only "
                "a time limit (timeout_seconds), resource limits and a temporary working directory "
                "remain; do not run code you would not run on that machine yourself. Returns stdout, stderr and "
                "the exit code; every result says that the run was not sandboxed.\n\n"
                "Third-party packages are installed from the package index into a cached environment: declare them "
                "in a PEP 723 block at the top of the script or in the dependencies argument. stdin is empty. "
                "Output longer than the cap keeps its beginning and end.\n\n"
                "The working directory is a new temporary directory (not /work): use relative paths. Files the "
                "script writes to out/ in it, and matplotlib figures, come back with the result (at most 8 figures "
                "and 16 files, 4 MiB each and 10 MiB in all). Use $TMPDIR for scratch files; both are removed "
                "after the run.",
        .input_schema = input_schema,
        .read_only_hint = false,
        .destructive_hint = true,
        .idempotent_hint = false,
        .open_world_hint = true,
        .call = execute_python_call,
};
