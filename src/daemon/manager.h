/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Manager: the daemon's one object. It owns the event loop, the listening
 * sockets, the sessions, and the services tools use (environment store,
 * run scheduler). Sessions come and go; the manager decides when to exit.
 */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "charge.h"
#include "config/config.h"
#include "executor/process.h"
#include "mcp/mcp.h"
#include "sandbox/limits.h"
#include "session/session.h"
#include "tools/tools.h"

typedef struct Runtime Runtime;
typedef struct WorkspaceRegistry WorkspaceRegistry;

typedef struct Manager {
        sd_event *event;
        Config *config;
        McpServer server;
        McpSchemaCache *schemas;   /* the tools' schemas parsed, for the server's sessions */

        sd_event_source **listeners;
        size_t n_listeners;
        bool accepting;
        char *created_socket;      /* --listen: unlinked at exit */

        Session *sessions;
        unsigned n_sessions;
        ChargeRegistry *charges;   /* connections and queued reply bytes, per peer uid: the scheduler's */
        WaitQueue input_waiters;   /* connections waiting for a parse of their user to end (SessionLimits) */
        uint64_t refusal_logged_usec;      /* refusals over a quota are logged once a second at most */
        uint64_t next_session_id;
        uint64_t total_sessions;

        sd_event_source *idle_timer;
        sd_event_source *stop_timer;
        sd_event_source *status_timer;
        bool stopping;
        bool stdio;
        uint64_t start_usec;

        Reaper *reaper;            /* what outlives the processes: detached ones, busy cgroups, background cgroups */
        SandboxCgroups *cgroups;   /* the limits mechanism: the cgroups runs get, and the groups of runs */
        Runtime *runtime;          /* script execution services (src/runtime/runtime.c) */
        WorkspaceRegistry *workspaces;     /* the persistent sandboxes */
        ToolServices services;     /* what the tools get (McpServer.userdata): the above, not the manager */

        /* For SIGHUP: how the configuration was made. */
        int argc;
        char **argv;
        const char *config_file;
} Manager;

int manager_new(Manager **ret, Config *config);
Manager *manager_free(Manager *m);
static inline void manager_freep(Manager **m) {
        if (*m)
                manager_free(*m);
}
/* Set up listening sockets (systemd's, --listen) or the stdio session. */
int manager_listen(Manager *m);
int manager_run(Manager *m);
