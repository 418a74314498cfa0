/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "executor/process.h"
#include "json-util.h"
#include "macro.h"
#include "mcp/mcp.h"
#include "sandbox/limits.h"
#include "strv.h"
#include "tools.h"

/* One line of the report. */
#define appendf(s, format, ...) strextendf(s, format "\n", ##__VA_ARGS__)

/*
 * Live facts, gathered when the tool is called: the sandbox self-test runs
 * again and the store's size comes from the store's disk walk (in a child
 * process, so a large cache never stalls the daemon), shared by all callers:
 * one walk at a time, its result reused for a few seconds.
 */

typedef struct CheckEnv {
        ToolCall *call;
        ToolServices *services;
        WaitEntry *ready_wait, *self_test_wait;
        EnvSizesWaiter *sizes_wait;
        uint64_t store_bytes, cache_bytes;
        bool sizes_known;
        unsigned pending;
} CheckEnv;

static void check_env_free(CheckEnv *c) {
        waitq_cancel(c->ready_wait);
        waitq_cancel(c->self_test_wait);
        envstore_sizes_cancel(c->sizes_wait);
        tool_call_unref(c->call);
        free(c);
}


/* data-dirs as a sandbox finds them now: where each is (not where it is on the host), and why it cannot be read
 * when it cannot. *ret_text: the same in a line, NULL when there are none. */
static json_object *data_dirs_report(const Runtime *r, const Config *cfg, char **ret_text) {
        json_object *a = json_object_new_array();

        for (size_t i = 0; cfg->data_dirs && cfg->data_dirs[i]; i++) {
                _cleanup_free_ char *name = NULL, *why = NULL, *problem = NULL, *where = NULL;
                json_object *d;
                const char *path;

                if (data_dir_split(cfg->data_dirs[i], &name, &path, &why) < 0 ||
                    runtime_data_dir_problem(r, path, &problem) < 0 ||
                    asprintf(&where, SANDBOX_DATA_DIR "/%s", name) < 0)
                        continue;
                d = json_object_new_object();
                json_add_string(d, "name", name);
                json_add_string(d, "path", where);
                json_add_bool(d, "readable", problem == NULL);
                if (problem)
                        json_add_string(d, "problem", problem);
                json_object_array_add(a, d);
                strextendf(ret_text, "%s%s%s%s%s", *ret_text ? ", " : "", where, problem ? " (UNAVAILABLE: it " : "",
                           strempty(problem), problem ? ")" : "");
        }
        return a;
}

static void check_env_finish(CheckEnv *c) {
        Runtime *r = c->services->runtime;
        const Config *cfg = c->services->config;
        const Pythons *pys = runtime_pythons(r);
        const char *sandbox_error = runtime_sandbox_error(r), *self_test_error = runtime_self_test_error(r);
        bool unsandboxed = runtime_unsandboxed(r);
        EnvStore *store = runtime_envstore(r);
        unsigned age_s = runtime_self_test_age_sec(r);
        char age[64];
        _cleanup_free_ char *text = NULL, *list = pythons_list(pys), *warning = NULL, *data_text = NULL;
        json_object *st = json_object_new_object(), *pv = json_object_new_array(), *o;

        for (size_t i = 0; mcp_legacy_versions[i]; i++)
                json_object_array_add(pv, json_object_new_string(mcp_legacy_versions[i]));
        for (size_t i = 0; mcp_modern_versions[i]; i++)
                json_object_array_add(pv, json_object_new_string(mcp_modern_versions[i]));
        json_add_string(st, "daemon_version", PACKAGE_VERSION);
        json_add(st, "protocol_versions", pv);

        o = json_object_new_object();
        json_add_string(o, "path", cfg->bwrap_path);
        json_add_bool(o, "available", runtime_bwrap_version(r) != NULL);
        if (runtime_bwrap_version(r))
                json_add_string(o, "version", runtime_bwrap_version(r));
        json_add(st, "bwrap", o);

        o = json_object_new_object();
        json_add_bool(o, "enabled", !unsandboxed);
        json_add_string(o, "mode", unsandboxed ? "none" : "bwrap");
        json_add_bool(o, "working", !unsandboxed && sandbox_error == NULL);
        if (sandbox_error)
                json_add_string(o, "error", sandbox_error);
        /* A result this young is reused (RUNTIME_SELF_TEST_FRESH_USEC). */
        json_add_int(o, "self_test_age_s", age_s);
        if (unsandboxed) {
                if (asprintf(&warning,
                             "this server runs scripts without any sandbox (unsafe-no-sandbox=yes), for development "
                             "only. Scripts run as %s with access to the host's files and network; only resource "
                             "limits, timeouts and a private temporary work directory remain.",
                             strempty(runtime_user(r))) < 0)
                        warning = NULL;
                json_add_string(o, "warning", strempty(warning));
                json_add_string(o, "bwrap_self_test", self_test_error ?: "passed");
        }
        json_add_bool(o, "network", cfg->network || unsandboxed);
        /* network-allow: the hosts runs reach through the daemon's proxy (empty: none). */
        {
                json_object *a = json_object_new_array();
                for (size_t i = 0; !cfg->network && !unsandboxed && cfg->network_allow && cfg->network_allow[i]; i++)
                        json_object_array_add(a, json_object_new_string(cfg->network_allow[i]));
                json_add(o, "network_allow", a);
        }
        json_add_string(o, "limits", sandbox_limits_mechanism(runtime_cgroups(r)));
        json_add_string(o, "limits_detail", sandbox_limits_mechanism_detail(runtime_cgroups(r)));
        /* The service's own TasksMax= and MemoryMax= against what the caps need (too small: a warning at start). */
        if (runtime_service_limits(r))
                json_add_string(o, "service_limits", runtime_service_limits(r));
        json_add(st, "sandbox", o);
        json_add(st, "data_dirs", data_dirs_report(r, cfg, &data_text));
        /* The files argument: only where the connection can carry open files (not the --stdio fallback). */
        o = json_object_new_object();
        json_add_bool(o, "available", c->call->fds.supported);
        json_add_string(o, "path", "/work/in");
        json_add_int(o, "max_bytes_per_call", (int64_t) cfg->tmpfs_size);
        json_add(st, "user_files", o);
        o = json_object_new_object();
        json_add_int(o, "memory_bytes", (int64_t) cfg->max_memory);
        json_add_int(o, "processes", (int64_t) cfg->max_processes);
        json_add_int(o, "file_size_bytes", (int64_t) (cfg->max_file_size ?: cfg->tmpfs_size));
        json_add_int(o, "open_files", (int64_t) cfg->max_open_files);
        json_add(st, "limits", o);

        o = json_object_new_object();
        json_add_string(o, "path", runtime_uv_path(r) ?: cfg->uv_path);
        json_add_bool(o, "available", runtime_uv_version(r) != NULL && !runtime_uv_refused(r));
        if (runtime_uv_version(r))
                json_add_string(o, "version", runtime_uv_version(r));
        if (runtime_uv_refused(r))
                json_add_string(o, "error", runtime_uv_refused(r));
        json_add(st, "uv", o);

        json_object *pa = json_object_new_array();
        for (size_t i = 0; i < pys->n; i++) {
                json_object *p = json_object_new_object();
                json_add_string(p, "version", pys->items[i]->version);
                json_add_string(p, "executable", pys->items[i]->executable);
                if (runtime_python_installed(r, pys->items[i]))
                        json_add_bool(p, "installed_by_uv", true);
                json_object_array_add(pa, p);
        }
        json_add(st, "pythons", pa);
        json_add_bool(st, "python_downloads", runtime_python_downloads(r));

        json_add_int(st, "default_timeout_seconds", (int64_t) (cfg->default_timeout_usec / USEC_PER_SEC));
        json_add_int(st, "max_timeout_seconds", (int64_t) (cfg->max_timeout_usec / USEC_PER_SEC));
        json_add_int(st, "output_cap_bytes", (int64_t) cfg->output_cap);
        json_add_int(st, "tmpfs_size_bytes", (int64_t) cfg->tmpfs_size);

        o = json_object_new_object();
        /* Not the path: a tool result tells the model nothing of where the store is on the host. */
        json_add_int(o, "warm_environments", envstore_n_ready(store));
        json_add_int(o, "building", envstore_n_building(store));
        if (c->sizes_known) {
                json_add_int(o, "store_bytes", (int64_t) c->store_bytes);
                json_add_int(o, "uv_cache_bytes", (int64_t) c->cache_bytes);
        }
        json_add_int(o, "budget_bytes", (int64_t) cfg->store_max_size);
        json_add_bool(o, "offline", cfg->offline);
        json_add_string(o, "index_url", cfg->index_url && *cfg->index_url ? cfg->index_url : "https://pypi.org/simple");
        json_add(st, "store", o);

        o = json_object_new_object();
        json_add_int(o, "running", runtime_n_running(r));
        json_add_int(o, "queued", runtime_n_queued(r));
        json_add_int(o, "max_running", runtime_max_runs(r));
        json_add_int(o, "yours_running", runtime_n_running_for(r, c->call->uid));
        json_add_int(o, "max_running_per_user", runtime_max_runs_per_user(r));
        json_add_int(o, "yours_queued", runtime_n_queued_for(r, c->call->uid));
        json_add_int(o, "max_queued_per_user", runtime_max_queued_per_user(r));
        json_add_int(o, "max_queued", (int64_t) cfg->max_queue);
        json_add(st, "runs", o);
        /* Sandboxes started ahead: how many wait, how deep each environment's pool is now, what they import. */
        json_add(st, "prestart", execute_python_pool_json(r, c->call->uid));

        if (age_s == 0)
                snprintf(age, sizeof(age), "just now");
        else
                snprintf(age, sizeof(age), "%u s ago", age_s);
        /* First, before anything that could make it look like a sandbox. */
        if (unsandboxed)
                appendf(&text, "No sandbox: %s", strempty(warning));
        appendf(&text, "Daemon: mcp-python-sandboxd %s", PACKAGE_VERSION);
        appendf(&text, "Protocol versions: %s", json_object_to_json_string_ext(pv, JSON_C_TO_STRING_PLAIN));
        if (unsandboxed)
                appendf(&text, "Sandbox: none (unsafe-no-sandbox=yes); bwrap self-test: %s (%s)",
                        self_test_error ?: "passed", age);
        else if (sandbox_error)
                appendf(&text, "Sandbox: %s (self-test %s)", sandbox_error, age);
        else
                appendf(&text, "Sandbox: working (self-test passed %s)", age);
        appendf(&text, "bwrap: %s (%s)", runtime_bwrap_version(r) ?: "NOT AVAILABLE", cfg->bwrap_path);
        if (runtime_uv_refused(r))
                appendf(&text, "uv: REFUSED: %s (%s)", runtime_uv_refused(r), runtime_uv_path(r) ?: cfg->uv_path);
        else
                appendf(&text, "uv: %s (%s)", runtime_uv_version(r) ?: "NOT AVAILABLE",
                        runtime_uv_path(r) ?: cfg->uv_path);
        appendf(&text, "Pythons: %s%s", pys->n ? list : "none found",
                runtime_python_downloads(r) ? " (others are installed when a call asks for them)" : "");
        if (unsandboxed)
                appendf(&text, "Network: the host's (no sandbox)");
        else
                appendf(&text, "Network in sandbox: %s", cfg->network ? "allowed" : "disabled");
        appendf(&text, "Data directories (read-only): %s", data_text ?: "none configured");
        if (c->call->fds.supported)
                appendf(&text, "Your files (the files argument): read-only at /work/in/NAME, up to %" PRIu64
                        " MiB per call", cfg->tmpfs_size >> 20);
        else
                appendf(&text, "Your files (the files argument): not in this session (it runs without the server's "
                        "socket: mcp-python-sandbox fell back to --stdio)");
        if (!unsandboxed && !cfg->network && strv_length(cfg->network_allow) > 0) {
                _cleanup_free_ char *allow = strv_join(cfg->network_allow, " ");
                appendf(&text, "Network allowlist (through the proxy at http://127.0.0.1:3128): %s", strempty(allow));
        }
        appendf(&text, "Default timeout: %" PRIu64 "s", cfg->default_timeout_usec / USEC_PER_SEC);
        appendf(&text, "Max timeout: %" PRIu64 "s", cfg->max_timeout_usec / USEC_PER_SEC);
        appendf(&text, "Max output: %" PRIu64 " bytes (head and tail kept)", cfg->output_cap);
        {
                _cleanup_free_ char *cap = NULL;
                if (unsandboxed)
                        cap = strdup("work dir and /tmp not size-capped (no sandbox)");
                else if (asprintf(&cap, "work dir and /tmp capped at %" PRIu64 " MiB each", cfg->tmpfs_size >> 20) < 0)
                        cap = NULL;
                appendf(&text, "Limits (%s): memory %" PRIu64 " MiB, %" PRIu64 " processes, files up to %" PRIu64
                        " MiB, %" PRIu64 " open files; %s",
                        sandbox_limits_mechanism(runtime_cgroups(r)), cfg->max_memory >> 20, cfg->max_processes,
                        (cfg->max_file_size ?: cfg->tmpfs_size) >> 20, cfg->max_open_files, strempty(cap));
        }
        appendf(&text, "Limits mechanism: %s", sandbox_limits_mechanism_detail(runtime_cgroups(r)));
        if (runtime_service_limits(r))
                appendf(&text, "Service limits: %s", runtime_service_limits(r));
        appendf(&text, "Package index: %s%s", cfg->index_url && *cfg->index_url ? cfg->index_url : "PyPI",
                cfg->offline ? " (offline: cache only)" : "");
        if (c->sizes_known)
                appendf(&text, "Store: %u warm environments, %" PRIu64 " MiB; uv cache %" PRIu64 " MiB",
                        envstore_n_ready(store), c->store_bytes >> 20, c->cache_bytes >> 20);
        else
                appendf(&text, "Store: %u warm environments", envstore_n_ready(store));
        appendf(&text,
                "Runs: %u running (%u yours), %u queued (%u yours); limits: %u running (%u per user), %" PRIu64
                " queued (%u per user)",
                runtime_n_running(r), runtime_n_running_for(r, c->call->uid), runtime_n_queued(r),
                runtime_n_queued_for(r, c->call->uid), runtime_max_runs(r), runtime_max_runs_per_user(r),
                cfg->max_queue, runtime_max_queued_per_user(r));

        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(text ?: ""));
        /* A sandbox that does not work is an error the client should see. */
        tool_call_finish(c->call, content, st, sandbox_error != NULL);
        check_env_free(c);
}

static void step_done(CheckEnv *c) {
        if (--c->pending == 0)
                check_env_finish(c);
}

static void take_sizes(CheckEnv *c, const EnvSizes *sizes) {
        c->sizes_known = sizes->known;
        c->store_bytes = sizes->store_bytes;
        c->cache_bytes = sizes->cache_bytes;
}

static void on_sizes(const EnvSizes *sizes, void *userdata) {
        CheckEnv *c = userdata;

        c->sizes_wait = NULL;
        take_sizes(c, sizes);
        step_done(c);
}

static void on_self_test(void *userdata) {
        CheckEnv *c = userdata;
        c->self_test_wait = NULL;
        step_done(c);
}

static void on_ready(void *userdata) {
        CheckEnv *c = userdata;
        Runtime *r = c->services->runtime;
        EnvStore *store = runtime_envstore(r);
        EnvSizes cached = {};
        int k;

        c->ready_wait = NULL;
        c->pending = 1;
        c->self_test_wait = runtime_self_test(r, on_self_test, c);
        if (c->self_test_wait)
                c->pending++;
        k = envstore_sizes(store, &cached, on_sizes, c, &c->sizes_wait);
        if (k == ENVSTORE_SIZES_CACHED)
                take_sizes(c, &cached);
        else if (k == 0)
                c->pending++;
        step_done(c);
}

static void on_cancel(ToolCall *call, void *userdata) {
        check_env_free(userdata);
}

static int check_environment_call(ToolCall *call, json_object *args) {
        ToolServices *svc = call->server_userdata;
        CheckEnv *c;

        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->call = tool_call_ref(call);
        c->services = svc;
        tool_call_set_cancel(call, on_cancel, c);

        if (runtime_is_ready(svc->runtime)) {
                on_ready(c);
                return 0;
        }
        c->ready_wait = runtime_when_ready(svc->runtime, on_ready, c);
        if (!c->ready_wait) {
                tool_call_set_cancel(call, NULL, NULL);
                check_env_free(c);
                return -ENOMEM;
        }
        return 0;
}

static const char input_schema[] = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}";

const Tool tool_check_environment = {
        .name = "check_environment",
        .title = "Check the sandbox environment",
        .description =
                "Report what this Python sandbox service can do right now: whether the sandbox works (it runs a "
                "self-test), the Python versions available, uv and bubblewrap versions, time and output limits, "
                "whether scripts have network access, the read-only data directories under /data, the package index, the environment cache and how many runs "
                "are running or queued. Takes no arguments and runs no user code. Call it before a first "
                "execute_python to pick a python_version, or when a run fails for reasons outside your script.\n\n"
                "Example: check_environment {}",
        .input_schema = input_schema,
        .read_only_hint = true,
        .destructive_hint = false,
        .idempotent_hint = true,
        .open_world_hint = false,
        .call = check_environment_call,
};
