/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/manager.h"
#include "daemon/runtime.h"
#include "executor/process.h"
#include "json-util.h"
#include "macro.h"
#include "mcp/mcp.h"
#include "strv.h"
#include "tools.h"

/* The facts are gathered live, by running the programs, each time the tool is called. */

enum { PROBE_BWRAP, PROBE_UV, _PROBE_MAX };

typedef struct CheckEnv {
        ToolCall *call;
        Manager *manager;
        Process *probes[_PROBE_MAX];
        char *results[_PROBE_MAX];     /* first line of stdout, or an error */
        bool ok[_PROBE_MAX];
        unsigned pending;
} CheckEnv;

static CheckEnv *check_env_free(CheckEnv *c) {
        for (size_t i = 0; i < _PROBE_MAX; i++) {
                process_free(c->probes[i]);
                free(c->results[i]);
        }
        tool_call_unref(c->call);
        free(c);
        return NULL;
}

static char *first_line(const Capture *cap) {
        _cleanup_free_ char *t = capture_text(cap, NULL);
        if (!t)
                return NULL;
        t[strcspn(t, "\n")] = 0;
        return strdup(t);
}

static void append_line(char **s, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void append_line(char **s, const char *format, ...) {
        char *line = NULL, *n = NULL;
        va_list ap;

        va_start(ap, format);
        if (vasprintf(&line, format, ap) < 0)
                line = NULL;
        va_end(ap);
        if (line && asprintf(&n, "%s%s\n", strempty(*s), line) >= 0) {
                free(*s);
                *s = n;
        }
        free(line);
}

static void check_env_finish(CheckEnv *c) {
        Config *cfg = c->manager->config;
        const char *uv = runtime_uv_path(c->manager->runtime);
        _cleanup_free_ char *text = NULL;
        json_object *st = json_object_new_object(), *pv = json_object_new_array();

        for (size_t i = 0; mcp_legacy_versions[i]; i++)
                json_object_array_add(pv, json_object_new_string(mcp_legacy_versions[i]));
        for (size_t i = 0; mcp_modern_versions[i]; i++)
                json_object_array_add(pv, json_object_new_string(mcp_modern_versions[i]));

        json_add_string(st, "daemon_version", PACKAGE_VERSION);
        json_add(st, "protocol_versions", pv);

        json_object *b = json_object_new_object();
        json_add_string(b, "path", cfg->bwrap_path);
        json_add_bool(b, "available", c->ok[PROBE_BWRAP]);
        json_add_string(b, c->ok[PROBE_BWRAP] ? "version" : "error", c->results[PROBE_BWRAP]);
        json_add(st, "bwrap", b);

        json_object *u = json_object_new_object();
        json_add_string(u, "path", uv ?: cfg->uv_path);
        json_add_bool(u, "available", c->ok[PROBE_UV]);
        json_add_string(u, c->ok[PROBE_UV] ? "version" : "error", c->results[PROBE_UV]);
        json_add(st, "uv", u);

        append_line(&text, "mcp-python-sandboxd %s", PACKAGE_VERSION);
        append_line(&text, "protocol versions: %s", json_object_to_json_string_ext(pv, JSON_C_TO_STRING_PLAIN));
        append_line(&text, "bwrap: %s (%s)", c->ok[PROBE_BWRAP] ? c->results[PROBE_BWRAP] : "NOT AVAILABLE",
                    c->ok[PROBE_BWRAP] ? cfg->bwrap_path : strempty(c->results[PROBE_BWRAP]));
        append_line(&text, "uv: %s (%s)", c->ok[PROBE_UV] ? c->results[PROBE_UV] : "NOT AVAILABLE",
                    c->ok[PROBE_UV] ? uv : strempty(c->results[PROBE_UV]));

        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(text ?: ""));
        tool_call_finish(c->call, content, st, false);
        check_env_free(c);
}

static void on_probe_done(Process *p, void *userdata) {
        CheckEnv *c = userdata;

        for (size_t i = 0; i < _PROBE_MAX; i++) {
                if (c->probes[i] != p)
                        continue;
                if (p->exit_code == 0 && !p->signal) {
                        c->ok[i] = true;
                        c->results[i] = first_line(&p->out);
                } else {
                        c->results[i] = first_line(p->err.total > 0 ? &p->err : &p->out);
                }
        }
        if (--c->pending == 0)
                check_env_finish(c);
}

static void on_cancel(ToolCall *call, void *userdata) {
        check_env_free(userdata);
}

static int spawn_probe(CheckEnv *c, size_t i, const char *path, const char *arg) {
        char *argv[] = { (char *) path, (char *) arg, NULL };
        char *env[] = { (char *) "PATH=/usr/local/bin:/usr/bin:/bin", (char *) "LANG=C.UTF-8", NULL };
        ProcessOptions o = {
                .argv = argv,
                .env = env,
                .stdin_fd = -EBADF,
                .timeout_usec = 10 * USEC_PER_SEC,
                .head_max = 4096,
                .tail_max = 0,
        };
        int r;

        if (!path) {
                c->results[i] = strdup("not found");
                return 0;
        }
        r = process_spawn(c->manager->event, &o, on_probe_done, c, &c->probes[i]);
        if (r < 0) {
                if (asprintf(&c->results[i], "cannot start: %s", strerror(-r)) < 0)
                        c->results[i] = NULL;
                return 0;
        }
        c->pending++;
        return 0;
}

static int check_environment_call(ToolCall *call, json_object *args) {
        Manager *m = call->server_userdata;
        CheckEnv *c;

        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->call = tool_call_ref(call);
        c->manager = m;

        spawn_probe(c, PROBE_BWRAP, m->config->bwrap_path, "--version");
        spawn_probe(c, PROBE_UV, runtime_uv_path(m->runtime), "--version");

        if (c->pending == 0) {
                check_env_finish(c);
                return 0;
        }
        tool_call_set_cancel(call, on_cancel, c);
        return 0;
}

static const char input_schema[] = "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}";

static const char output_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"daemon_version\":{\"type\":\"string\"},"
        "\"protocol_versions\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
        "\"bwrap\":{\"type\":\"object\"},"
        "\"uv\":{\"type\":\"object\"}"
        "},\"required\":[\"daemon_version\",\"protocol_versions\",\"bwrap\",\"uv\"]}";

const Tool tool_check_environment = {
        .name = "check_environment",
        .title = "Check the sandbox environment",
        .description =
                "Report what this Python sandbox service can do right now: daemon, uv and bubblewrap versions, "
                "protocol versions, and whether the sandbox works. Takes no arguments and runs no user code. "
                "Call it when execute_python fails for reasons that are not in your script, or to learn what is "
                "available before you start.\n\nExample: check_environment {}",
        .input_schema = input_schema,
        .output_schema = output_schema,
        .read_only_hint = true,
        .destructive_hint = false,
        .idempotent_hint = true,
        .open_world_hint = false,
        .call = check_environment_call,
};
