/* SPDX-License-Identifier: MIT */
/* create_sandbox, close_sandbox, reset_sandbox, get_sandbox_info, get_sandbox_status. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "sandbox-common.h"
#include "input-files.h"
#include "time-util.h"
#include "tools.h"

#define INFO_TIMEOUT_USEC (10 * USEC_PER_SEC)

/* ---- create_sandbox ------------------------------------------------------------ */

static void on_started(WsCall *c, const WorkspaceOpOutcome *o);

static void on_created(Workspace *sb, const char *error, void *userdata) {
        WsCall *c = userdata;

        c->prepare = NULL;
        if (!sb) {
                ws_fail(c->call, "%s", strempty(error));
                ws_call_free(c);
                return;
        }
        if (error) {
                ws_fail(c->call, "the sandbox could not be created: %s", error);
                ws_call_free(c);
                workspace_close(sb);
                return;
        }
        /* Answer once the interpreter is up and says so. */
        _cleanup_json_ json_object *req = json_object_new_object();
        json_add_string(req, "op", "info");
        int k = ws_call_request(c, req, 30 * USEC_PER_SEC, on_started);
        if (k != 0) {
                ws_fail(c->call, "%s", k == WORKSPACE_CLOSED ? "the sandbox was closed" : "out of memory");
                ws_call_free(c);
                workspace_close(sb);
        }
}

static void on_started(WsCall *c, const WorkspaceOpOutcome *o) {
        Workspace *sb = c->sandbox;
        const char *e = ws_outcome_error(o);

        if (e) {
                ws_fail(c->call, "the sandbox could not be started: %s", e);
                tool_call_set_cancel(c->call, NULL, NULL);
                /* c is freed by our caller; the sandbox goes now. */
                c->sandbox = NULL;
                workspace_close(sb);
                return;
        }
        json_object *st = ws_summary(sb);
        json_add_int(st, "expires_in_seconds", (int64_t) (workspace_expires_in_usec(sb) / USEC_PER_SEC));
        json_add_int(st, "prepare_ms", (int64_t) ((now_usec() - c->t_start) / USEC_PER_MSEC));
        _cleanup_free_ char *head = NULL;
        if (asprintf(&head,
                     "Sandbox %s created (Python %s). Run code in it with execute_code; variables, imports and files "
                     "in /work persist between calls.",
                     workspace_id(sb), strempty(workspace_python_version(sb))) < 0)
                head = NULL;
        ws_finish_json(c->call, st, head, false);
}

static void on_create_cancel(ToolCall *call, void *userdata) {
        WsCall *c = userdata;
        Workspace *sb = c->sandbox;

        /* Nobody will learn its id: it must not linger. */
        ws_call_free(c);
        workspace_close(sb);
}

static int create_call(ToolCall *call, json_object *args) {
        ToolServices *svc = call->server_userdata;
        Workspace *sb;
        int64_t ttl = 0;
        int k;

        (void) json_get_int64(args, "ttl_seconds", &ttl);
        if (ttl < 0)
                ttl = 0;
        k = workspace_new(svc->workspaces, call->uid, (uint64_t) ttl * USEC_PER_SEC, &sb);
        if (k == WORKSPACE_USER_QUOTA) {
                ws_fail(call,
                        "you have %" PRIu64 " sandboxes open, the most allowed per user (max-sandboxes-per-user): close "
                        "one with close_sandbox (get_sandbox_status lists them)",
                        svc->config->max_sandboxes_per_user);
                return 0;
        }
        if (k == WORKSPACE_TOTAL_QUOTA) {
                ws_fail(call, "the server has the most sandboxes it allows open (max-sandboxes=%" PRIu64 "); try again later",
                        svc->config->max_sandboxes);
                return 0;
        }
        if (k == WORKSPACE_UNSANDBOXED) {
                ws_fail(call,
                        "persistent sandboxes need the sandbox; this server runs with unsafe-no-sandbox=yes "
                        "(development only), so it has none: use execute_python, or turn unsafe-no-sandbox off");
                return 0;
        }
        if (k < 0)
                return k;

        {
                _cleanup_free_ char *error = NULL;
                InputFiles files;
                k = input_files_take(call, args, svc->config->tmpfs_size, &files, &error);
                if (k < 0) {
                        workspace_close(sb);
                        if (k != -EINVAL)
                                return k;
                        ws_fail(call, "%s", strempty(error));
                        return 0;
                }
                workspace_set_data(sb, files.fds, files.dests, files.n);
        }

        WsCall *c = ws_call_new(call, sb);
        if (!c) {
                workspace_close(sb);
                return -ENOMEM;
        }
        tool_call_set_cancel(call, on_create_cancel, c);
        k = workspace_prepare(sb, json_get(args, "dependencies", json_type_array),
                              json_get_string(args, "python_version"), on_created, c, &c->prepare);
        if (k != 0) {
                ws_call_free(c);
                workspace_close(sb);
                return ws_not_started(call, k);
        }
        return 0;
}

static const char create_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"python_version\":{\"type\":[\"string\",\"null\"],\"maxLength\":32,\"description\":\"e.g. \\\"3.12\\\"; "
        "default: the newest available\"},"
        "\"dependencies\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":1024},\"maxItems\":256,"
        "\"description\":\"PEP 508 requirements to install, e.g. [\\\"numpy\\\", \\\"pandas<3\\\"]\"},"
        "\"ttl_seconds\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":86400,\"description\":\"Close the sandbox "
        "this long after creation even if in use (default: only when idle)\"},"
        INPUT_FILES_SCHEMA
        "},\"additionalProperties\":false}";

const Tool tool_create_sandbox = {
        .name = "create_sandbox",
        .title = "Create a persistent Python sandbox",
        .description =
                "Create a persistent sandbox: a long-lived Python interpreter in the same locked-down environment as "
                "execute_python (no network unless allowed, no access to the user's files), whose variables, "
                "imports and files in its work directory /work survive between execute_code calls. Returns a "
                "sandbox_id for execute_code, install_package, read_file, write_file, list_files, reset_sandbox and "
                "close_sandbox. Sandboxes are closed when idle for a while; close it when done. "
                TOOLS_DATA_DIRS_CLAUSE,
        .input_schema = create_schema,
        .open_world_hint = true,
        .call = create_call,
};

/* ---- close_sandbox ----------------------------------------------------------------- */

static const char id_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"sandbox_id\":{\"type\":\"string\",\"maxLength\":64,\"description\":\"From create_sandbox\"}"
        "},\"required\":[\"sandbox_id\"],\"additionalProperties\":false}";

static int close_call(ToolCall *call, json_object *args) {
        Workspace *sb = ws_lookup(call, args);
        if (!sb)
                return 0;
        json_object *st = json_object_new_object();
        json_add_string(st, "sandbox_id", workspace_id(sb));
        json_add_bool(st, "closed", true);
        workspace_close(sb);
        ws_finish_json(call, st, "Sandbox closed: its interpreter and files are gone.", false);
        return 0;
}

const Tool tool_close_sandbox = {
        .name = "close_sandbox",
        .title = "Close a persistent sandbox",
        .description = "Close a sandbox made by create_sandbox: its interpreter stops and its files are deleted.",
        .input_schema = id_schema,
        .destructive_hint = true,
        .idempotent_hint = true,
        .call = close_call,
};

/* ---- reset_sandbox ----------------------------------------------------------------- */

static void on_reset(Workspace *sb, const WorkspaceOpOutcome *o, void *userdata) {
        WsCall *c = userdata;

        c->op = NULL;
        if (o->error) {
                ws_fail(c->call, "the reset failed: %s", o->error);
        } else {
                json_object *st = ws_summary(sb);
                json_add_bool(st, "reset", true);
                ws_finish_json(c->call, st,
                               "Sandbox reset: a fresh interpreter, an empty /work and the packages it was created "
                               "with.",
                               false);
        }
        ws_call_free(c);
}

static int reset_call(ToolCall *call, json_object *args) {
        Workspace *sb = ws_lookup(call, args);
        if (!sb)
                return 0;
        WsCall *c = ws_call_new(call, sb);
        if (!c)
                return -ENOMEM;
        int k = workspace_reset(sb, on_reset, c, &c->op);
        if (k != 0) {
                ws_call_free(c);
                return ws_not_started(call, k);
        }
        return 0;
}

const Tool tool_reset_sandbox = {
        .name = "reset_sandbox",
        .title = "Reset a persistent sandbox",
        .description = "Start a sandbox afresh: variables, imports and files in /work are dropped and the packages "
                       "go back to those it was created with. The sandbox_id stays the same.",
        .input_schema = id_schema,
        .destructive_hint = true,
        .idempotent_hint = true,
        .call = reset_call,
};

/* ---- get_sandbox_info ---------------------------------------------------------------- */

static json_object *host_facts(Workspace *sb) {
        json_object *st = ws_summary(sb);
        int64_t kib = workspace_memory_kib(sb);

        json_add_string(st, "state", workspace_state(sb));
        json_add_int(st, "age_seconds", (int64_t) (workspace_age_usec(sb) / USEC_PER_SEC));
        json_add_int(st, "idle_seconds", (int64_t) (workspace_idle_usec(sb) / USEC_PER_SEC));
        json_add_int(st, "expires_in_seconds", (int64_t) (workspace_expires_in_usec(sb) / USEC_PER_SEC));
        if (kib >= 0)
                json_add_int(st, "memory_kib", kib);
        else
                json_add(st, "memory_kib", json_object_new_null());
        json_add(st, "installed", workspace_installed_packages(sb));
        return st;
}

static void on_info(WsCall *c, const WorkspaceOpOutcome *o) {
        json_object *st = host_facts(c->sandbox);
        const char *e = ws_outcome_error(o);

        if (!e) {
                json_object *r = o->reply, *v;
                static const char *const keys[] = { "files", "bytes", "execution_count", "variables", "modules" };
                for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                        if (json_object_object_get_ex(r, keys[i], &v))
                                json_add(st, keys[i] == keys[0] ? "work_files" : keys[i] == keys[1] ? "work_bytes" : keys[i],
                                         json_object_get(v));
        } else
                json_add_string(st, "note", e);
        ws_finish_json(c->call, st, NULL, false);
}

static int info_call(ToolCall *call, json_object *args) {
        Workspace *sb = ws_lookup(call, args);
        if (!sb)
                return 0;
        if (workspace_is_busy(sb)) {
                /* Do not wait behind a running cell: what the host knows is enough. */
                json_object *st = host_facts(sb);
                json_add_string(st, "note", "the sandbox is busy; files and variables are not listed");
                ws_finish_json(call, st, NULL, false);
                return 0;
        }
        WsCall *c = ws_call_new(call, sb);
        if (!c)
                return -ENOMEM;
        _cleanup_json_ json_object *req = json_object_new_object();
        json_add_string(req, "op", "info");
        int k = ws_call_request(c, req, INFO_TIMEOUT_USEC, on_info);
        if (k != 0) {
                ws_call_free(c);
                return ws_not_started(call, k);
        }
        return 0;
}

const Tool tool_get_sandbox_info = {
        .name = "get_sandbox_info",
        .title = "Describe a persistent sandbox",
        .description = "A sandbox's Python, requested and installed packages, files in /work (count and bytes), "
                       "defined variables and imported modules, the interpreter's memory use (KiB), its age, idle "
                       "time and when it will be closed.",
        .input_schema = id_schema,
        .read_only_hint = true,
        .idempotent_hint = true,
        .call = info_call,
};

/* ---- get_sandbox_status ---------------------------------------------------------------- */

static void add_one(Workspace *sb, void *userdata) {
        json_object *a = userdata, *o = ws_summary(sb);
        int64_t kib = workspace_memory_kib(sb);

        json_add_string(o, "state", workspace_state(sb));
        json_add_int(o, "age_seconds", (int64_t) (workspace_age_usec(sb) / USEC_PER_SEC));
        json_add_int(o, "idle_seconds", (int64_t) (workspace_idle_usec(sb) / USEC_PER_SEC));
        json_add_int(o, "expires_in_seconds", (int64_t) (workspace_expires_in_usec(sb) / USEC_PER_SEC));
        if (kib >= 0)
                json_add_int(o, "memory_kib", kib);
        json_object_array_add(a, o);
}

static int status_call(ToolCall *call, json_object *args) {
        ToolServices *svc = call->server_userdata;
        json_object *st = json_object_new_object(), *list = json_object_new_array();
        _cleanup_free_ char *head = NULL;

        workspace_registry_foreach(svc->workspaces, call->uid, add_one, list);
        size_t n = json_object_array_length(list);
        json_add(st, "sandboxes", list);
        json_add_int(st, "max_per_user", (int64_t) svc->config->max_sandboxes_per_user);
        json_add_int(st, "idle_timeout_seconds", (int64_t) (svc->config->sandbox_idle_timeout_usec / USEC_PER_SEC));
        if (asprintf(&head, "%zu sandbox%s open.", n, n == 1 ? "" : "es") < 0)
                head = NULL;
        ws_finish_json(call, st, head, false);
        return 0;
}

static const char status_schema[] = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}";

const Tool tool_get_sandbox_status = {
        .name = "get_sandbox_status",
        .title = "List your persistent sandboxes",
        .description = "List the caller's open sandboxes with their state, Python, packages, age and idle time.",
        .input_schema = status_schema,
        .read_only_hint = true,
        .idempotent_hint = true,
        .call = status_call,
};
