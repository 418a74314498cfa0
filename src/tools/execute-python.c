/* SPDX-License-Identifier: MIT */
/*
 * execute_python: the tool, and a call's way through its phases (execute-phase.h): validate the arguments and
 * read the script's metadata, prepare its environment, queue for a run slot, run the script in a sandbox (a
 * fresh one, or one started ahead: execute-prestart.c), done. Every end, the result, an error or a cancel, goes
 * through the phase machine to done, which frees the job; the result itself is put together by the renderer
 * (execute-render.h) from what the job says happened.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "boot.h"
#include "execute-job.h"
#include "execute-render.h"
#include "hints.h"
#include "input-files.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "outputs.h"
#include "runlog.h"
#include "runtime/runtime.h"
#include "runtime/script.h"
#include "strv.h"
#include "time-util.h"
#include "tools.h"

#define PROGRESS_INTERVAL_USEC (2 * USEC_PER_SEC)
/* At the end of a run, what is read from stdout and stderr at most: the pipes' contents, unless something the
 * script left running floods them. */
#define DRAIN_MAX (4 * 1024 * 1024)

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

static void job_progress_phase(Job *j) {
        Runtime *r = j->runtime;
        unsigned mine = runtime_n_running_for(r, j->call->uid);
        char m[128];

        if (j->machine.phase == EXECUTE_QUEUE && mine >= runtime_max_runs_per_user(r) && mine < runtime_max_runs(r)) {
                snprintf(m, sizeof(m), "queued: %u of your scripts are running, the most one user may run at once",
                         mine);
                return job_progress(j, m);
        }
        job_progress(j, j->activity ?: execute_phase_progress(j->machine.phase));
}

/* The phase just entered starts: what it is busy with is its own, and the client hears of it. */
static void job_entered(Job *j) {
        j->activity = mfree(j->activity);
        job_progress_phase(j);
}

/* Into another phase (execute-phase.h), which starts its work; the callers go only where the table allows. */
static void job_go(Job *j, ExecutePhase p) {
        int k;

        k = execute_machine_go(&j->machine, p);
        assert(k >= 0);
        (void) k;
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

/* The call's end, the same for every part of its result. */
static uint64_t job_end(Job *j) {
        if (j->t_end == 0)
                j->t_end = now_usec();
        return j->t_end;
}

/* What the renderer says of the call besides its script's outcome. */
static void job_facts(Job *j, ExecuteFacts *ret) {
        uint64_t end = job_end(j);

        *ret = (ExecuteFacts) {
                .banner = job_banner(j),
                .duration_usec = end - j->t_start,
                .prepare_usec = (j->t_run_start ?: end) - j->t_start,
                .built_now = j->built_now,
                .timeout_usec = j->timeout_usec,
                .timeout_clamped = j->timeout_clamped,
                .limits = &j->limits,
                .limits_lowered = j->limits_lowered,
                .limits_mechanism = sandbox_limits_mechanism(runtime_cgroups(j->runtime)),
                .limits_asked = j->limits_asked,
                .plan = j->plan,
                .prestarted = j->prestarted,
                .network = runtime_config(j->runtime)->network,
                .network_refused = j->netproxy ? net_proxy_refused(j->netproxy) : NULL,
                .outputs = j->outputs,
        };
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

/* A failure before the script ran: validation, preparation, a full queue, the sandbox (the machine's fail hook;
 * done comes next). */
static void job_failed(void *userdata, const char *phase, const char *msg) {
        Job *j = userdata;
        json_object *content, *st;
        ExecuteFacts f;

        job_facts(j, &f);
        execute_render_error(&f, phase, msg, &content, &st);

        RunLog l;
        job_log_begin(j, &l, "error");
        runlog_add(&l, "MCP_FAILED_PHASE", "%s", phase);
        runlog_add(&l, "MCP_ERROR", "%s", msg ?: "failed");
        runlog_emit(&l, "execute_python for uid " UID_FMT " (pid " PID_FMT ") did not run: its %s phase failed.",
                    j->call->uid, j->call->pid, phase);
        tool_call_finish(j->call, content, st, true);
}

#define job_fail(j, phase, ...) execute_machine_fail(&(j)->machine, (phase), __VA_ARGS__)

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

int execute_job_on_outputs(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
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

/*
 * The run is over: the sandbox exited (p reaped), or, finished, the script said so with its exit status (an 'X'
 * record, see boot_code) and p is still tearing down. Answer the call.
 */
static void job_done(Job *j, Process *p, bool finished, int status) {
        _cleanup_free_ char *out = NULL, *err = NULL;
        size_t out_len = 0, err_len = 0;

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
                execute_signal_name(sig, signame);
        bool failed = code != 0 || sig || timed_out;
        out = capture_text(&p->out, &out_len);
        err = capture_text(&p->err, &err_len);

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

        ExecuteOutcome o = {
                .code = code,
                .signal = sig,
                .timed_out = timed_out,
                .limit = limit,
                .run_usec = run_usec,
                .out = out,
                .out_len = out_len,
                .err = err,
                .err_len = err_len,
                .out_total = p->out.total,
                .out_omitted = capture_omitted(&p->out),
                .err_total = p->err.total,
                .err_omitted = capture_omitted(&p->err),
        };
        ExecuteFacts f;
        json_object *content, *st;
        job_facts(j, &f);
        execute_render_run(&f, &o, &content, &st);
        /* The content holds the files now: their bytes need not stay while the reply is written out. */
        outputs_drop_payloads(j->outputs);

        RunLog l;
        const char *verdict = execute_outcome_verdict(&o);
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

        if (!finished)
                process_free(p);
        tool_call_finish(j->call, content, st, failed);
        if (finished)
                process_detach(p);   /* killed and reaped in the background: its teardown is not the caller's wait */
        /* The reply is out: start the replacement (or the first) sandbox for the next run now. */
        execute_job_refill(j);
        (void) execute_machine_go(&j->machine, EXECUTE_DONE);
}

void execute_job_on_run_done(Process *p, void *userdata) {
        job_done(userdata, p, false, 0);
}

const char *execute_boot_arg(Runtime *r, const char *python, int *ret_fd, char **ret_loader) {
        size_t size;
        int fd = runtime_code_fd(r, boot_code, python, &size);

        *ret_fd = -EBADF;
        *ret_loader = NULL;
        if (fd < 0)
                return boot_code;
        *ret_loader = runtime_code_loader(fd, size);
        if (!*ret_loader) {
                safe_close(fd);
                return boot_code;
        }
        *ret_fd = fd;
        return *ret_loader;
}

/* Run: in a pre-started sandbox, else a fresh one. Its end is job_done(). */
static void job_run(void *userdata) {
        Job *j = userdata;
        _cleanup_close_ int fd = -EBADF, out_w = -EBADF, code_fd = -EBADF;
        const char *banner;
        _cleanup_free_ char *python = NULL, *loader = NULL;
        int pipe_fds[2];
        char out_fd[16];
        Runtime *r = j->runtime;
        const Config *c = runtime_config(r);
        int k;

        j->t_run_start = now_usec();
        /* Before the pool or the spawn looks at the setting: a reload cannot come in between. */
        banner = runtime_unsandboxed_banner(r);
        job_entered(j);

        if (outputs_new(&j->outputs) < 0)
                return job_fail(j, EXECUTE_RUN, "out of memory");
        /* A pre-started sandbox has its mounts already: the user's files need a sandbox of their own. */
        if (j->files.n == 0)
                execute_job_pool_key(j);
        if (execute_job_take_prestarted(j)) {
                j->banner = banner;
                j->spawned = true;
                return;
        }

        fd = memfd_with("script.py", j->script, j->script_len);
        if (fd < 0)
                return job_fail(j, EXECUTE_RUN, "the script could not be handed to the sandbox: %s", strerror(-fd));
        if (asprintf(&python, "%s/bin/python", j->env_path) < 0)
                return job_fail(j, EXECUTE_RUN, "out of memory");

        /* Figures and files come back through a pipe, read as the run goes. */
        if (pipe2(pipe_fds, O_CLOEXEC) < 0)
                return job_fail(j, EXECUTE_RUN, "the sandbox could not be started: %s", strerror(errno));
        j->out_fd = pipe_fds[0];
        out_w = pipe_fds[1];
        (void) fcntl(j->out_fd, F_SETFL, O_NONBLOCK);
        /* With a pool, the run reports what it loaded from the environment: what its next sandboxes import ahead. */
        snprintf(out_fd, sizeof(out_fd), j->pool_key ? "%d::1" : "%d", out_w);

        SandboxData data[1 + INPUT_FILES_MAX] = { { .fd = fd, .dest = SANDBOX_WORK_DIR "/script.py" } };
        k = input_files_data(&j->files, data + 1);
        if (k < 0)
                return job_fail(j, EXECUTE_RUN, "the files could not be handed to the sandbox: %s", strerror(-k));
        const char *prefix = j->plan->python->prefix;
        /* -I: no user site, no PYTHON* variables, no script dir on sys.path; -B no .pyc; stdout block-buffered
         * (boot.py's flush()). boot_code runs the script as `python /work/script.py` would. */
        const char *boot = execute_boot_arg(r, python, &code_fd, &loader);
        char *command[] = { python,      (char *) "-I", (char *) "-B", (char *) "-c",
                            (char *) boot, out_fd, (char *) SANDBOX_WORK_DIR "/script.py", NULL };
        size_t head, tail;
        execute_output_caps(c, &head, &tail);
        /* network-allow: the command behind the bridge, which hands the daemon's proxy its listening socket. */
        _cleanup_strv_free_ char **wrapped = NULL;
        _cleanup_close_ int net_fd = -EBADF;
        k = runtime_network_wrap(r, j->call->uid, command, &j->netproxy, &net_fd, &wrapped);
        if (k < 0)
                return job_fail(j, EXECUTE_RUN, "the network proxy could not be set up: %s", strerror(-k));
        char *ro[] = { (char *) prefix, NULL };
        int fds[3] = { out_w };
        size_t n_fds = 1;
        if (net_fd >= 0)
                fds[n_fds++] = net_fd;
        if (code_fd >= 0)
                fds[n_fds++] = code_fd;
        j->limits.owner = j->call->uid;         /* the run's CPU is a share of its user's */
        k = runtime_spawn_sandboxed_with_fds(r, j->env_path, streq(prefix, "/usr") ? NULL : ro,
                                             data, 1 + j->files.n, fds, n_fds, wrapped ?: command,
                                             j->timeout_usec, &j->limits, head, tail, execute_job_on_run_done, j, &j->proc);
        if (k == RUNTIME_NO_SANDBOX)
                return job_fail(j, EXECUTE_RUN, "%s", strempty(runtime_sandbox_error(r)));
        if (k < 0)
                return job_fail(j, EXECUTE_RUN, "the sandbox could not be started: %s", strerror(-k));
        j->banner = banner;
        j->spawned = true;
        j->proc->flush_on_timeout = true;   /* stdout is buffered (boot.py's flush()) */
        execute_job_warm_early(j, NULL);
        /* Only the sandbox writes: EOF when it is gone. */
        out_w = safe_close(out_w);
        k = sd_event_add_io(runtime_event(r), &j->out_source, j->out_fd, EPOLLIN, execute_job_on_outputs, j);
        if (k < 0)   /* nobody would read the pipe, and a full pipe would stall the script */
                return job_fail(j, EXECUTE_RUN, "the sandbox could not be watched: %s", strerror(-k));
}

static void on_slot(SchedTicket *t, void *userdata) {
        Job *j = userdata;

        job_go(j, EXECUTE_RUN);
}

/* Queue: a run slot now (then run), or a place in the queue (on_slot() when it comes), or a refusal that names the
 * cap. */
static void job_queue(void *userdata) {
        Job *j = userdata;
        Runtime *r = j->runtime;
        int k;

        j->t_prepared = now_usec();
        k = runtime_acquire_slot(r, &j->slot, j->call->uid, on_slot, j);
        if (k == SCHEDULER_QUEUE_FULL || k == SCHEDULER_USER_QUEUE_FULL) {
                _cleanup_free_ char *why = execute_refusal_message(k, runtime_n_running(r),
                                                                   runtime_n_running_for(r, j->call->uid),
                                                                   runtime_n_queued(r),
                                                                   runtime_n_queued_for(r, j->call->uid));
                return job_fail(j, EXECUTE_RUN, "%s", why ?: "out of memory");
        }
        if (k == SCHEDULER_REPLIES_UNREAD) {
                _cleanup_free_ char *why = runtime_replies_unread_message(r, j->call->uid);
                return job_fail(j, EXECUTE_RUN, "%s", why ?: "out of memory");
        }
        if (k < 0)
                return job_fail(j, EXECUTE_RUN, "out of memory");
        if (k == 0)
                return job_go(j, EXECUTE_RUN);
        job_entered(j);   /* it waits: say so */
}

static void on_env_ready(const EnvResult *res, void *userdata) {
        Job *j = userdata;

        j->env_waiter = NULL;
        if (res->error < 0) {
                _cleanup_free_ char *names = NULL;
                requirement_list_join(&j->plan->requirements, ", ", &names);
                _cleanup_free_ char *hint = hint_for_install(res->message, &j->plan->requirements,
                                                             runtime_config(j->runtime)->allow_source_builds);
                return job_fail(j, EXECUTE_PREPARE, "installing the dependencies (%s) failed:\n%s%s%s", strempty(names),
                                strempty(res->message), hint ? "\n" : "", strempty(hint));
        }
        j->env_path = strdup(res->path);
        j->env_hold = envstore_hold(runtime_envstore(j->runtime), j->env_path);
        j->built_now = true;
        job_go(j, EXECUTE_QUEUE);
}

/* Validate is done: the script's plan. On to prepare, or to queue when the environment is there. */
static void on_plan(ScriptPlan *plan, void *userdata) {
        Job *j = userdata;
        EnvStore *store = runtime_envstore(j->runtime);

        j->analysis = NULL;
        j->plan = plan;
        if (plan->error)
                return job_fail(j, EXECUTE_VALIDATE, "%s", plan->error);
        if (runtime_sandbox_error(j->runtime))
                return job_fail(j, EXECUTE_RUN, "%s", runtime_sandbox_error(j->runtime));

        j->env_path = TAKE_PTR(plan->env_path);
        if (j->env_path) {
                j->env_hold = envstore_hold(store, j->env_path);
                return job_go(j, EXECUTE_QUEUE);
        }
        job_go(j, EXECUTE_PREPARE);
}

/* Prepare: build the environment the plan names; on_env_ready() when it is there. */
static void job_prepare(void *userdata) {
        Job *j = userdata;
        ScriptPlan *plan = j->plan;
        int k;

        job_entered(j);
        k = envstore_prepare(runtime_envstore(j->runtime), j->call->uid, plan->key, plan->python, &plan->requirements,
                             on_env_ready, j, &j->env_waiter);
        if (k != 0)
                job_fail(j, EXECUTE_PREPARE, "the environment could not be prepared: %s",
                         k == ENVSTORE_SLOTS_FULL ? "every build slot is taken, try again later" : strerror(-k));
}

/* The machine's cancelled hook; done comes next, and kills the sandbox: the whole process tree goes with it. */
static void job_cancelled(void *userdata, const char *phase) {
        Job *j = userdata;

        RunLog l;
        /* Unlike a result's failed_phase, the record tells waiting for a slot from running. */
        job_log_begin(j, &l, "cancelled");
        runlog_add(&l, "MCP_FAILED_PHASE", "%s", phase);
        runlog_emit(&l, "execute_python for uid " UID_FMT " (pid " PID_FMT ") cancelled in phase %s; stopping it.",
                    j->call->uid, j->call->pid, phase);
}

/* Done: whatever the job still holds goes (the sandbox, its slot, its environment hold). */
static void job_finished(void *userdata) {
        job_free(userdata);
}

static const ExecutePhaseHooks job_hooks = {
        .enter = {
                [EXECUTE_PREPARE] = job_prepare,
                [EXECUTE_QUEUE] = job_queue,
                [EXECUTE_RUN] = job_run,
                [EXECUTE_DONE] = job_finished,
        },
        .fail = job_failed,
        .cancelled = job_cancelled,
};

static void on_cancel(ToolCall *call, void *userdata) {
        Job *j = userdata;

        execute_machine_cancel(&j->machine);
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
        execute_machine_init(&j->machine, &job_hooks, j);

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
                for (size_t i = 0; lim && i < ELEMENTSOF(execute_limit_args); i++) {
                        const ExecuteLimitArg *a = &execute_limit_args[i];
                        int64_t n;
                        if (json_get_int64(lim, a->name, &n) && n > 0)
                                *(uint64_t *) ((char *) &want + a->offset) =
                                        MIN((uint64_t) n, UINT64_MAX / a->unit) * a->unit;
                }
                j->limits_lowered = sandbox_limits_lower(&max, &want, &j->limits);
        }

        {
                _cleanup_free_ char *error = NULL;
                k = input_files_take(call, args, c->tmpfs_size, &j->files, &error);
                if (k == -EINVAL) {
                        job_fail(j, EXECUTE_VALIDATE, "%s", strempty(error));
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
