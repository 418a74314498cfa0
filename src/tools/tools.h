/* SPDX-License-Identifier: MIT */
#pragma once

/* The registry: every tool the daemon serves, in tools/list order. */

#include <systemd/sd-event.h>

#include "config/config.h"
#include "mcp/tool.h"

typedef struct Runtime Runtime;
typedef struct WorkspaceRegistry WorkspaceRegistry;

/*
 * What the tools are given (McpServer.userdata, so ToolCall.server_userdata): the services below them, never the
 * daemon's manager. The manager owns it and fills it in when it has made them.
 */
typedef struct ToolServices {
        sd_event *event;
        const Config *config;           /* the live configuration (a reload changes it in place) */
        Runtime *runtime;               /* programs, probes, store, scheduler, spawning, the metadata reader */
        WorkspaceRegistry *workspaces;  /* the persistent sandboxes */
} ToolServices;

extern const Tool tool_execute_python;
extern const Tool tool_execute_python_unsandboxed;
extern const Tool tool_validate_script;
extern const Tool tool_check_environment;
extern const Tool tool_create_sandbox;
extern const Tool tool_execute_code;
extern const Tool tool_install_package;
extern const Tool tool_list_installed_packages;
extern const Tool tool_reset_sandbox;
extern const Tool tool_get_sandbox_info;
extern const Tool tool_get_sandbox_status;
extern const Tool tool_close_sandbox;
extern const Tool tool_list_files;
extern const Tool tool_read_file;
extern const Tool tool_write_file;

/* One clause for the descriptions of the tools that run code: where the administrator's data is. */
#define TOOLS_DATA_DIRS_CLAUSE \
        "Data the administrator shares, if any, is read-only under /data/NAME (check_environment lists it); the " \
        "user's own files passed in files are read-only at /work/in/NAME. "

extern const Tool *const tools_all[];
/* Without persistent sandboxes. */
extern const Tool *const tools_one_shot[];
/* With unsafe-no-sandbox=yes. */
extern const Tool *const tools_unsandboxed[];

/* Keep a sandbox started ahead for execute_python runs in this environment (RuntimePrestartFunc). 0;
 * RUNTIME_NO_SANDBOX when the sandbox does not work (nothing started); -errno. */
int execute_python_prestart(Runtime *r, const char *env_path, const char *prefix);
/* check_environment's "prestart": the pool, its depth per environment and the warm imports. */
json_object *execute_python_pool_json(Runtime *r, uid_t uid);
/* Hand the services below the tools the hooks they call back (before runtime_start()). */
void tools_attach(Runtime *r);

/* The tools this configuration offers, in tools/list order. */
const Tool *const *tools_offered(const Config *c);
/* The live configuration in one line, as the run tools' descriptions end ("This server: network off; ..."); data_dirs:
 * the data-dirs entries the sandboxes get (runtime_data_binds()). */
char *tools_live_line(const Config *c, char *const *data_dirs);
/* McpServer.describe_tool: the live configuration into a tool's tools/list entry; userdata is the ToolServices. */
void tools_describe(const Tool *t, json_object *entry, void *userdata);
