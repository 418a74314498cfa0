/* SPDX-License-Identifier: MIT */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "runtime/runtime.h"
#include "strv.h"
#include "tools.h"

/* One-shot execution, and persistent sandboxes: the two groups an administrator offers (persistent-sandboxes). */
const Tool *const tools_all[] = {
        &tool_execute_python,
        &tool_validate_script,
        &tool_check_environment,
        &tool_create_sandbox,
        &tool_execute_code,
        &tool_install_package,
        &tool_list_installed_packages,
        &tool_reset_sandbox,
        &tool_get_sandbox_info,
        &tool_get_sandbox_status,
        &tool_close_sandbox,
        &tool_list_files,
        &tool_read_file,
        &tool_write_file,
        NULL,
};

const Tool *const tools_one_shot[] = {
        &tool_execute_python,
        &tool_validate_script,
        &tool_check_environment,
        NULL,
};

/* unsafe-no-sandbox=yes: what runs without the sandbox, described as such; no persistent sandboxes. */
const Tool *const tools_unsandboxed[] = {
        &tool_execute_python_unsandboxed,
        &tool_validate_script,
        &tool_check_environment,
        NULL,
};

void tools_attach(Runtime *r) {
        runtime_set_prestart(r, execute_python_prestart);
}

const Tool *const *tools_offered(const Config *c) {
        if (c->unsafe_no_sandbox)
                return tools_unsandboxed;
        if (c->persistent_sandboxes && c->max_sandboxes > 0)
                return tools_all;
        return tools_one_shot;
}

static void size_text(uint64_t n, char buf[static 32]) {
        if (n >= 1024 * 1024 * 1024 && n % (1024 * 1024 * 1024) == 0)
                snprintf(buf, 32, "%" PRIu64 " GiB", n / (1024 * 1024 * 1024));
        else if (n >= 1024 * 1024)
                snprintf(buf, 32, "%" PRIu64 " MiB", n / (1024 * 1024));
        else
                snprintf(buf, 32, "%" PRIu64 " KiB", (n + 1023) / 1024);
}

char *tools_live_line(const Config *c, char *const *data_dirs) {
        char memory[32], tmpfs[32], output[32], where[192];
        char *s = NULL;

        size_text(c->max_memory, memory);
        size_text(c->tmpfs_size, tmpfs);
        size_text(c->output_cap / 2, output);   /* per stream: execute_output_caps() in execute-prestart.c */
        /* Without the sandbox there is neither a network policy nor a size-capped /work: the host's are used. */
        if (c->unsafe_no_sandbox)
                snprintf(where, sizeof(where), "no sandbox, the host's network and files");
        else
                snprintf(where, sizeof(where), "network %s; /work and /tmp %s each",
                         c->network                              ? "on"
                         : c->network_allow && c->network_allow[0] ? "only to listed hosts, through HTTP_PROXY "
                                                                     "(check_environment lists them)"
                                                                   : "off",
                         tmpfs);
        if (asprintf(&s,
                     "This server: %s; timeout %" PRIu64 " s by default, %" PRIu64 " s at most; memory %s; "
                     "output: %s per stream kept (beginning and end); %s.",
                     where, c->default_timeout_usec / USEC_PER_SEC,
                     c->max_timeout_usec / USEC_PER_SEC, c->max_memory > 0 ? memory : "not capped", output,
                     c->offline            ? "only packages already in its cache"
                     : c->allow_source_builds ? "packages from wheels or built from source"
                                              : "packages from wheels only (no source builds)") < 0)
                return NULL;
        /* The administrator's data directories the sandboxes get, by the names a script uses (one they cannot read
         * is not mounted: check_environment says why). */
        for (size_t i = 0; data_dirs && data_dirs[i]; i++) {
                const char *eq = strchr(data_dirs[i], '=');
                if (!eq)
                        continue;
                if (strextendf(&s, "%s/data/%.*s", i == 0 ? " Data, read-only: " : ", ", (int) (eq - data_dirs[i]),
                               data_dirs[i]) < 0)
                        return mfree(s);
        }
        if (data_dirs && data_dirs[0] && strextendf(&s, ".") < 0)
                return mfree(s);
        return s;
}

static void set_maximum(json_object *props, const char *name, uint64_t max) {
        json_object *p = json_get(props, name, json_type_object);

        if (p && max > 0)
                json_add_int(p, "maximum", (int64_t) MIN(max, (uint64_t) INT64_MAX));
}

void tools_describe(const Tool *t, json_object *entry, void *userdata) {
        const ToolServices *svc = userdata;
        const Config *c = svc->config;
        json_object *props = json_get(json_get(entry, "inputSchema", json_type_object), "properties", json_type_object);
        _cleanup_free_ char *line = NULL, *description = NULL;

        if (!streq(t->name, "execute_python") && !streq(t->name, "execute_code"))
                return;

        /* The timeout as this server has it: the schema's maximum is the configured one, not 86400; the default
         * is in the description's last line. */
        set_maximum(props, "timeout_seconds", c->max_timeout_usec / USEC_PER_SEC);
        json_object *limits = json_get(json_get(props, "limits", json_type_object), "properties", json_type_object);
        if (limits) {
                uint64_t cpu = c->max_cpu_time_usec ?: c->max_timeout_usec + 10 * USEC_PER_SEC;
                set_maximum(limits, "memory_mb", c->max_memory / (1024 * 1024));
                set_maximum(limits, "max_processes", c->max_processes);
                set_maximum(limits, "max_file_size_mb", (c->max_file_size ?: c->tmpfs_size) / (1024 * 1024));
                set_maximum(limits, "cpu_seconds", cpu / USEC_PER_SEC);
        }

        /* Which Pythons there are, once the start-up probes have found them, and whether others can be had. */
        json_object *pv = json_get(props, "python_version", json_type_object);
        if (pv && svc->runtime && runtime_is_ready(svc->runtime)) {
                _cleanup_free_ char *list = pythons_list(runtime_pythons(svc->runtime)), *d = NULL;
                if (asprintf(&d, "%s Here: %s%s.", strempty(json_get_string(pv, "description")),
                             list && *list ? list : "none",
                             runtime_python_downloads(svc->runtime) ? "; others are installed when asked for" : "") >= 0)
                        json_add_string(pv, "description", d);
        }

        line = tools_live_line(c, runtime_data_binds(svc->runtime));
        if (line && asprintf(&description, "%s\n%s", t->description, line) >= 0)
                json_add_string(entry, "description", description);
}
