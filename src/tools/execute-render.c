/* SPDX-License-Identifier: MIT */
/*
 * execute_python's result renderer (execute-render.h): the text sections, the structuredContent fields and the
 * sentences that explain an outcome, built from what the call reports (ExecuteFacts, ExecuteOutcome). Lean: a
 * field at its usual value is left out, for every result is read by the model and paid for in every conversation.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "execute-render.h"
#include "hints.h"
#include "json-util.h"
#include "macro.h"
#include "mcp/tool.h"
#include "scheduler/scheduler.h"
#include "strv.h"
#include "utf8.h"

static json_object *text_json(const char *s, size_t n) {
        _cleanup_free_ char *clean = NULL;
        size_t l;

        clean = utf8_sanitize(s, n, &l);
        return clean ? json_object_new_string_len(clean, (int) l) : json_object_new_string("");
}


/* text may hold NUL bytes (JSON escapes them), where printf's %.*s would stop: copied by hand (HACKING.md). */
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
static json_object *environment_json(const ExecuteFacts *f) {
        json_object *e = json_object_new_object();

        if (f->plan) {
                json_add_string(e, "key", f->plan->key);
                json_add_bool(e, "warm", f->plan->warm && !f->built_now);
                if (f->plan->requirements.n > 0) {
                        json_object *reqs = json_object_new_array();
                        for (size_t i = 0; i < f->plan->requirements.n; i++)
                                json_object_array_add(reqs,
                                                      json_object_new_string(f->plan->requirements.items[i].canonical));
                        json_add(e, "requirements", reqs);
                }
        }
        return e;
}

/* Limits as the call's "limits" argument names them. */
const ExecuteLimitArg execute_limit_args[EXECUTE_N_LIMIT_ARGS] = {
        { "memory_mb", SANDBOX_LIMIT_MEMORY, offsetof(SandboxLimits, memory), 1024 * 1024 },
        { "max_processes", SANDBOX_LIMIT_PROCESSES, offsetof(SandboxLimits, processes), 1 },
        { "max_file_size_mb", SANDBOX_LIMIT_FILE_SIZE, offsetof(SandboxLimits, file_size), 1024 * 1024 },
        { "cpu_seconds", SANDBOX_LIMIT_CPU, offsetof(SandboxLimits, cpu_usec), USEC_PER_SEC },
};
#define limit_args execute_limit_args

static uint64_t limit_get(const SandboxLimits *l, size_t i) {
        return *(const uint64_t *) ((const char *) l + limit_args[i].offset);
}

/* In the argument's unit, rounded up; 0: no limit. */
static uint64_t limit_get_units(const SandboxLimits *l, size_t i) {
        return (limit_get(l, i) + limit_args[i].unit - 1) / limit_args[i].unit;
}

/* {"memory_mb": 2048, ..., "mechanism": "rlimit", "lowered": ["memory_mb"]}; a limit that is off is null. */
static json_object *limits_json(const ExecuteFacts *f) {
        json_object *o = json_object_new_object(), *lowered = json_object_new_array();

        for (size_t i = 0; i < ELEMENTSOF(limit_args); i++) {
                if (limit_get(f->limits, i))
                        json_add_int(o, limit_args[i].name, (int64_t) limit_get_units(f->limits, i));
                else
                        json_add(o, limit_args[i].name, json_object_new_null());
                if (f->limits_lowered & limit_args[i].bit)
                        json_object_array_add(lowered, json_object_new_string(limit_args[i].name));
        }
        json_add_string(o, "mechanism", f->limits_mechanism);
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

/*
 * Everything but the process outcome: shared by failures before the run. Lean: a field at its usual value
 * (no signal, not timed out, empty stderr, the default timeout, limits as configured, nothing left out) is left
 * out, for every result is read by the model and paid for in every conversation.
 */
static json_object *base_structured(const ExecuteFacts *f, const char *failed_phase) {
        json_object *st = json_object_new_object();

        json_add_int(st, "duration_ms", (int64_t) (f->duration_usec / USEC_PER_MSEC));
        /* Preparing counts when an environment was built for this call; otherwise it is a few ms of planning. */
        if (f->built_now || (failed_phase && !streq(failed_phase, "run")))
                json_add_int(st, "prepare_ms", (int64_t) (f->prepare_usec / USEC_PER_MSEC));
        if (f->timeout_clamped) {
                json_add_int(st, "timeout_seconds", (int64_t) (f->timeout_usec / USEC_PER_SEC));
                json_add_bool(st, "timeout_clamped", true);
        }
        if (f->limits_lowered || f->limits_asked)
                json_add(st, "limits", limits_json(f));
        if (f->plan && f->plan->python)
                json_add_string(st, "python", f->plan->python->version);
        if (f->plan)
                json_add(st, "environment", environment_json(f));
        if (f->prestarted)
                json_add_bool(st, "prestarted", true);
        /* Modules the sandbox had imported before the script came, as the script's first lines would have. */
        const char *pre = outputs_preimported(f->outputs, NULL);
        if (f->prestarted && pre) {
                _cleanup_strv_free_ char **l = strv_split(pre, " ");
                json_object *a = json_object_new_array();
                for (size_t i = 0; l && l[i]; i++)
                        json_object_array_add(a, json_object_new_string(l[i]));
                json_add(st, "warm_imports", a);
        }
        if (f->banner) {
                json_add_bool(st, "sandboxed", false);
                json_add_string(st, "sandbox_warning", f->banner);
        }
        if (failed_phase)
                json_add_string(st, "failed_phase", failed_phase);
        if (f->plan && f->plan->warnings && f->plan->warnings[0]) {
                json_object *w = json_object_new_array();
                for (size_t i = 0; f->plan->warnings[i]; i++)
                        json_object_array_add(w, json_object_new_string(f->plan->warnings[i]));
                json_add(st, "warnings", w);
        }
        return st;
}

void execute_render_error(const ExecuteFacts *f, const char *phase, const char *message, json_object **ret_content,
                          json_object **ret_structured) {
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        const char *msg = message;

        json_object *st = base_structured(f, phase);
        json_add_string(st, "error", msg ?: "failed");
        if (f->banner)
                strextendf_len(&text, &len, "%s\n", f->banner);
        strextendf_len(&text, &len, "--- error ---\n%s\n--- phase: %s ---\n--- duration_ms: %" PRIu64 " ---\n",
               msg ?: "failed", phase, f->duration_usec / USEC_PER_MSEC);

        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(text ?: "failed"));
        *ret_content = content;
        *ret_structured = st;
}

const char *execute_outcome_verdict(const ExecuteOutcome *o) {
        return o->timed_out ? "timeout" : o->limit ? "limit" : o->signal ? "killed" : o->code != 0 ? "failed" : "ok";
}

void execute_signal_name(int sig, char buf[static 32]) {
        snprintf(buf, 32, "SIG%s", sigabbrev_np(sig) ?: "UNKNOWN");
}

void execute_render_run(const ExecuteFacts *f, const ExecuteOutcome *o, json_object **ret_content,
                        json_object **ret_structured) {
        _cleanup_free_ char *text = NULL, *message = NULL;
        _cleanup_free_ char *out_clean = NULL, *err_clean = NULL;
        size_t ol = 0, el = 0, len = 0, mlen = 0;
        int sig = o->signal;
        bool timed_out = o->timed_out;
        int exit_code = execute_outcome_exit_code(o);
        char signame[32] = "";
        if (sig)
                execute_signal_name(sig, signame);
        bool failed = execute_outcome_failed(o);
        out_clean = utf8_sanitize(strempty(o->out), o->out ? o->out_len : 0, &ol);
        err_clean = utf8_sanitize(strempty(o->err), o->err ? o->err_len : 0, &el);
        const char *limit = o->limit;

        /* The layout users of the Python servers already parse, after the warning of a run without a sandbox. */
        if (f->banner)
                strextendf_len(&text, &len, "%s\n", f->banner);
        append_section(&text, &len, "stdout", out_clean ?: "", ol);
        append_section(&text, &len, "stderr", err_clean ?: "", el);
        strextendf_len(&text, &len, "--- exit_code: %d ---\n", exit_code);
        strextendf_len(&text, &len, "--- duration_ms: %" PRIu64 " ---\n", f->duration_usec / USEC_PER_MSEC);
        if (timed_out)
                strextendf_len(&text, &len, "--- timed_out: true ---\n");
        if (f->timeout_clamped)
                strextendf_len(&text, &len, "--- timeout_clamped: %" PRIu64 "s (the server's maximum) ---\n",
                       f->timeout_usec / USEC_PER_SEC);

        /* What explains the outcome, in sentences: in the text, and as structuredContent's "message", for clients
         * that show the model only one of the two. */
        if (timed_out)
                strextendf_len(&message, &mlen, "The script was stopped after %" PRIu64 "s, the timeout.\n",
                       f->timeout_usec / USEC_PER_SEC);
        else if (sig)
                strextendf_len(&message, &mlen, "The script was killed by signal %d (%s).\n", sig, strsignal(sig));
        if (limit && limit_sentence(limit))
                strextendf_len(&message, &mlen, "%s\n", limit_sentence(limit));
        /* A sentence naming the fix, where stderr shows a cause the model can act on (hints.h). */
        _cleanup_free_ char *hint = failed && !timed_out && !limit
                                            ? hint_for_run(err_clean, !f->network,
                                                           f->plan ? &f->plan->requirements : NULL, false)
                                            : NULL;
        if (hint)
                strextendf_len(&message, &mlen, "%s\n", hint);
        if (message)
                strextendf_len(&text, &len, "%s", message);
        if (limit)
                strextendf_len(&text, &len, "--- limit: %s ---\n", limit);
        /* The text says these on lines of its own (above, and below); the structured message in sentences. */
        if (f->timeout_clamped)
                strextendf_len(&message, &mlen,
                               "The timeout asked for was lowered to %" PRIu64 "s, the server's maximum.\n",
                               f->timeout_usec / USEC_PER_SEC);
        for (size_t i = 0; i < ELEMENTSOF(limit_args); i++)
                if (f->limits_lowered & limit_args[i].bit) {
                        strextendf_len(&text, &len, "--- limits.%s lowered to %" PRIu64 " (the server's maximum) ---\n",
                               limit_args[i].name, limit_get_units(f->limits, i));
                        strextendf_len(&message, &mlen, "limits.%s was lowered to %" PRIu64 ", the server's maximum.\n",
                               limit_args[i].name, limit_get_units(f->limits, i));
                }

        json_object *st = base_structured(f, failed ? "run" : NULL);
        json_add_int(st, "exit_code", exit_code);
        /* How long it ran before it failed or was stopped; a good run's is about its duration. */
        if (failed)
                json_add_int(st, "run_ms", (int64_t) (o->run_usec / USEC_PER_MSEC));
        if (sig)
                json_add_string(st, "signal", signame);
        if (timed_out) {
                json_add_bool(st, "timed_out", true);
                json_add_int(st, "timeout_seconds", (int64_t) (f->timeout_usec / USEC_PER_SEC));
        }
        if (limit) {
                json_add_string(st, "limit", limit);
                if (!f->limits_lowered && !f->limits_asked && !streq(limit, "timeout"))
                        json_add(st, "limits", limits_json(f));
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
        if (o->out_omitted || o->err_omitted) {
                json_object *tr = json_object_new_object();
                json_add_int(tr, "stdout_bytes_total", (int64_t) o->out_total);
                json_add_int(tr, "stdout_bytes_omitted", (int64_t) o->out_omitted);
                json_add_int(tr, "stderr_bytes_total", (int64_t) o->err_total);
                json_add_int(tr, "stderr_bytes_omitted", (int64_t) o->err_omitted);
                json_add(st, "truncated", tr);
        }

        /* network-allow: the hosts the proxy refused this run (one line of text, one list). */
        char *const *refused = f->network_refused;
        if (refused && refused[0]) {
                _cleanup_free_ char *list = strv_join((char **) refused, " ");
                strextendf_len(&text, &len,
                               "--- network_refused: %s (not in the administrator's network allowlist, "
                               "network-allow) ---\n", strempty(list));
        }
        /* Figures and files reach the model only in content[]: then there is no structuredContent (outputs.h). */
        if (outputs_n_included(f->outputs) > 0) {
                json_object_put(st);
                st = NULL;
        } else if (!outputs_empty(f->outputs)) {
                json_object *figures = outputs_figures_json(f->outputs), *files = outputs_files_json(f->outputs);
                if (json_object_array_length(figures) > 0)
                        json_add(st, "figures", figures);
                else
                        json_object_put(figures);
                if (json_object_array_length(files) > 0)
                        json_add(st, "files", files);
                else
                        json_object_put(files);
                if (outputs_n_unlisted(f->outputs) > 0)
                        json_add_int(st, "outputs_unlisted", (int64_t) outputs_n_unlisted(f->outputs));
        }
        if (st && refused && refused[0]) {
                json_object *a = json_object_new_array();
                for (size_t i = 0; refused[i]; i++)
                        json_object_array_add(a, json_object_new_string(refused[i]));
                json_add(st, "network_refused", a);
        }

        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(text ?: ""));
        outputs_append_content(f->outputs, content);
        *ret_content = content;
        *ret_structured = st;
}

char *execute_refusal_message(int outcome, unsigned running, unsigned mine, unsigned queued, unsigned mine_queued) {
        char *m = NULL;

        if (outcome == SCHEDULER_QUEUE_FULL)
                strextendf(&m, "the server is busy: %u script%s running (%u of them yours) and %u waiting, "
                           "the most it takes (max-queue). Try again in a little while",
                           running, running == 1 ? " is" : "s are", mine, queued);
        else
                strextendf(&m, "you have %u script%s running and %u waiting, the most one user may have "
                           "(max-runs-per-user). Try again when one of them has finished",
                           mine, mine == 1 ? "" : "s", mine_queued);
        return m;
}
