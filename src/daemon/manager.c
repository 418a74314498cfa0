/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "jsonrpc/jsonrpc.h"
#include "log.h"
#include "macro.h"
#include "strv.h"
#include "manager.h"
#include "runtime/runtime.h"
#include "sandbox/limits.h"
#include "tools/tools.h"
#include "workspace/workspace.h"

#define STOP_GRACE_USEC (3 * USEC_PER_SEC)
#define STATUS_DELAY_USEC (USEC_PER_SEC / 10)
#define ACCEPT_RETRY_USEC (USEC_PER_SEC / 4)

static const char instructions[] =
        "Runs Python scripts in throwaway, locked-down sandboxes (no network unless the administrator "
        "allows it, no access to the user's files). Declare third-party packages inline with a PEP 723 "
        "block (# /// script ... dependencies = [\"requests\"] ... # ///) or the dependencies argument; "
        "environments are cached, so repeated runs with the same packages start fast. Use validate_script "
        "to check metadata without running anything, and check_environment to see what is available.";

/* unsafe-no-sandbox=yes: nothing may suggest a sandbox. */
static const char instructions_unsandboxed[] =
        "A development server: it runs Python scripts WITHOUT a sandbox (unsafe-no-sandbox=yes), as the server's "
        "user, with access to its files and the network; only resource limits, timeouts and a temporary work "
        "directory remain, and persistent sandboxes are not available. Declare third-party packages inline with a "
        "PEP 723 block (# /// script ... dependencies = [\"requests\"] ... # ///) or the dependencies argument. "
        "Use validate_script to check metadata without running anything, and check_environment to see what is "
        "available.";

static const char *manager_instructions(const Manager *m) {
        return m->config->unsafe_no_sandbox ? instructions_unsandboxed : instructions;
}

/* Without the sandbox, execute_python says so and persistent sandboxes are not offered. */
static const Tool *const *manager_tools(const Manager *m) {
        return tools_offered(m->config);
}

static int on_status_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        if (!m->stopping)
                (void) sd_notifyf(false, "STATUS=Serving %u connection%s (%" PRIu64 " since start)%s", m->n_sessions,
                                  m->n_sessions == 1 ? "" : "s", m->total_sessions,
                                  m->config->unsafe_no_sandbox
                                          ? "; scripts run WITHOUT a sandbox (unsafe-no-sandbox=yes)"
                                          : "");
        return 0;
}

/* Coalesced: a burst of connections sends one STATUS=, not one datagram each
 * (sd_notify blocks when the manager's queue is full). */
static void manager_update_status(Manager *m) {
        if (m->stopping)
                return;
        if (!m->status_timer) {
                if (sd_event_add_time_relative(m->event, &m->status_timer, CLOCK_MONOTONIC, STATUS_DELAY_USEC, 0,
                                               on_status_timer, m) < 0)
                        return;
                (void) sd_event_source_set_enabled(m->status_timer, SD_EVENT_ONESHOT);
                return;
        }
        if (sd_event_source_get_enabled(m->status_timer, NULL) > 0)
                return;   /* already due */
        (void) sd_event_source_set_time_relative(m->status_timer, STATUS_DELAY_USEC);
        (void) sd_event_source_set_enabled(m->status_timer, SD_EVENT_ONESHOT);
}

static void manager_set_accepting(Manager *m) {
        /* Over max-connections too: a new client is accepted and refused with an error (on_accept()), so it fails
         * at once instead of hanging in the backlog, where the shim cannot tell it from a slow daemon. */
        bool want = !m->stopping;

        if (want == m->accepting)
                return;
        for (size_t i = 0; i < m->n_listeners; i++)
                (void) sd_event_source_set_enabled(m->listeners[i], want ? SD_EVENT_ON : SD_EVENT_OFF);
        m->accepting = want;
}

static int on_idle(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        if (m->n_sessions == 0 && runtime_is_idle(m->runtime) && !workspace_registry_busy(m->workspaces)) {
                log_info("No connection for %" PRIu64 "s; exiting (the socket stays with systemd).",
                         m->config->exit_idle_usec / USEC_PER_SEC);
                return sd_event_exit(m->event, 0);
        }
        /* Background work still running: look again later. */
        return sd_event_source_set_time_relative(s, m->config->exit_idle_usec) < 0
                       ? 0
                       : sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

static void manager_update_idle(Manager *m) {
        if (m->config->exit_idle_usec == 0 || m->stdio)
                return;
        if (m->n_sessions > 0) {
                if (m->idle_timer)
                        (void) sd_event_source_set_enabled(m->idle_timer, SD_EVENT_OFF);
                return;
        }
        if (!m->idle_timer) {
                if (sd_event_add_time_relative(m->event, &m->idle_timer, CLOCK_MONOTONIC, m->config->exit_idle_usec,
                                               USEC_PER_SEC / 10, on_idle, m) < 0)
                        log_warning("Failed to arm the idle timer; the daemon will not exit when idle.");
                return;
        }
        (void) sd_event_source_set_time_relative(m->idle_timer, m->config->exit_idle_usec);
        (void) sd_event_source_set_enabled(m->idle_timer, SD_EVENT_ONESHOT);
}

static void manager_drop_session(Manager *m, Session *s) {
        if (s->prev)
                s->prev->next = s->next;
        else
                m->sessions = s->next;
        if (s->next)
                s->next->prev = s->prev;
        m->n_sessions--;
        session_free(s);
}

static void on_session_closed(Session *s, void *userdata) {
        Manager *m = userdata;

        log_debug("Connection %" PRIu64 " closed.", s->id);
        manager_drop_session(m, s);

        if (m->stdio || (m->stopping && m->n_sessions == 0)) {
                (void) sd_event_exit(m->event, 0);
                return;
        }
        manager_set_accepting(m);
        manager_update_idle(m);
        manager_update_status(m);
}

static SessionLimits session_limits(Manager *m) {
        const Config *c = m->config;

        if (m->stdio)
                /* One client, the daemon's own user: nobody to share with, and no deadlines. */
                return (SessionLimits) {
                        .max_message_size = c->max_message_size,
                        .output_high_water = 1024 * 1024,
                        .max_reply_buffer = c->max_reply_buffer,
                };
        return (SessionLimits) {
                .max_message_size = c->max_message_size,
                /* Pause well before the bound, so that a reply to a request just read always fits. */
                .output_high_water = MIN((size_t) 1024 * 1024,
                                         c->max_reply_buffer > 0 ? (size_t) c->max_reply_buffer / 2 : SIZE_MAX),
                .max_reply_buffer = c->max_reply_buffer,
                .initialize_timeout_usec = c->initialize_timeout_usec,
                .line_timeout_usec = c->line_timeout_usec,
                .idle_timeout_usec = c->connection_idle_timeout_usec,
                .charges = m->charges,
                .input_waiters = &m->input_waiters,
                .loop_share = runtime_scheduler(m->runtime),
        };
}

static void manager_apply_limits(Manager *m) {
        charge_registry_set_limit(m->charges, CHARGE_CONNECTIONS, m->config->max_connections_per_user, 0);
        charge_registry_set_limit(m->charges, CHARGE_REPLY_BYTES, m->config->max_reply_buffer_per_user, 0);
        charge_registry_set_limit(m->charges, CHARGE_INPUT_BYTES, m->config->max_input_buffer_per_user, 0);
        charge_registry_set_limit(m->charges, CHARGE_CALL_BYTES, m->config->max_call_buffer_per_user, 0);
        m->server.max_elements = (size_t) m->config->max_message_elements;
}

static int manager_add_session(Manager *m, int in_fd, int out_fd, Charge *connection) {
        SessionLimits limits = session_limits(m);
        Session *s;
        int r;

        r = session_new(&s, m->event, ++m->next_session_id, in_fd, out_fd, &m->server, &limits, on_session_closed, m);
        if (r < 0)
                return r;
        if (connection)
                charge_move(&s->connection, connection);
        s->next = m->sessions;
        if (m->sessions)
                m->sessions->prev = s;
        m->sessions = s;
        m->n_sessions++;
        m->total_sessions++;
        log_debug("Connection %" PRIu64 " from uid " UID_FMT " pid " PID_FMT ".", s->id, s->uid, s->pid);

        manager_set_accepting(m);
        manager_update_idle(m);
        manager_update_status(m);
        return 0;
}

static int on_accept_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        /* A floating source: this drops the loop's reference, and sd-event frees it once we return. */
        (void) sd_event_source_set_floating(s, false);
        manager_set_accepting(m);
        return 0;
}

/* Out of fds or memory: the pending connection stays in the backlog and the
 * listener stays readable, so stop polling it for a moment instead of spinning.
 * A connection that closes frees an fd and resumes accepting at once. */
static void manager_pause_accepting(Manager *m) {
        for (size_t i = 0; i < m->n_listeners; i++)
                (void) sd_event_source_set_enabled(m->listeners[i], SD_EVENT_OFF);
        m->accepting = false;
        if (sd_event_add_time_relative(m->event, NULL, CLOCK_MONOTONIC, ACCEPT_RETRY_USEC, 0, on_accept_retry, m) < 0)
                manager_set_accepting(m);
}

static bool uid_listed(const Config *c, uid_t uid) {
        for (size_t i = 0; i < c->n_allowed_uids; i++)
                if (c->allowed_uids[i] == uid)
                        return true;
        return false;
}

static bool gid_listed(const Config *c, gid_t gid) {
        for (size_t i = 0; i < c->n_allowed_gids; i++)
                if (c->allowed_gids[i] == gid)
                        return true;
        return false;
}

/*
 * allowed-users / allowed-groups: who the kernel says the peer is (SO_PEERCRED, and SO_PEERGROUPS for its
 * supplementary groups as they were when it connected), against the ids the configuration's names were resolved
 * to when it was read. No NSS lookup here: it may block on a network directory, and this is the event loop.
 */
static bool peer_allowed(Manager *m, int fd, uid_t *ret_uid) {
        const Config *c = m->config;
        struct ucred cred = {};
        socklen_t l = sizeof(cred);
        gid_t groups[64], *list = groups;
        _cleanup_free_ gid_t *big = NULL;
        bool ok = false;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &l) < 0)
                return false;
        *ret_uid = cred.uid;
        if (!config_access_restricted(c))
                return true;
        if (uid_listed(c, cred.uid) || gid_listed(c, cred.gid))
                return true;
        if (c->n_allowed_gids == 0)
                return false;

        l = sizeof(groups);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &l) < 0) {
                if (errno != ERANGE || l == 0)
                        return false;
                big = malloc(l);
                if (!big || getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, big, &l) < 0)
                        return false;
                list = big;
        }
        for (size_t i = 0; i < l / sizeof(gid_t) && !ok; i++)
                ok = gid_listed(c, list[i]);
        return ok;
}

/* Over max-connections-per-user or max-connections: one error line, so the client fails now
 * instead of waiting, then close. The socket is new: its buffer takes the line. */
static void refuse_over_quota(Manager *m, int fd, uid_t uid, bool global) {
        char line[512];
        int n;

        if (global)
                n = snprintf(line, sizeof(line),
                             "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":\"Too many "
                             "connections: the server holds %u, the most it serves at once (max-connections=%" PRIu64
                             "); try again later\",\"data\":{\"limit\":%" PRIu64 ",\"setting\":\"max-connections\"}}}\n",
                             JSONRPC_SERVER_LIMIT, m->n_sessions, m->config->max_connections,
                             m->config->max_connections);
        else
                n = snprintf(line, sizeof(line),
                             "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":\"Too many "
                             "connections: uid " UID_FMT " already holds %" PRIu64 " (max-connections-per-user=%" PRIu64
                             "); close one and try again\",\"data\":{\"limit\":%" PRIu64
                             ",\"setting\":\"max-connections-per-user\"}}}\n",
                             JSONRPC_SERVER_LIMIT, uid, charge_registry_used(m->charges, uid, CHARGE_CONNECTIONS),
                             m->config->max_connections_per_user, m->config->max_connections_per_user);
        if (n > 0 && (size_t) n < sizeof(line))
                (void) send(fd, line, (size_t) n, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void) shutdown(fd, SHUT_WR);
        safe_close(fd);
}

static int on_accept(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        Manager *m = userdata;
        Charge connection = CHARGE_NULL;
        int cfd, r;

        cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
                if (IN_SET_ERRNO(errno, EMFILE, ENFILE, ENOMEM) || errno == ENOBUFS) {
                        log_warning_errno(errno, "Failed to accept a connection: %m; trying again shortly "
                                                 "(see LimitNOFILE= and max-connections=).");
                        manager_pause_accepting(m);
                } else if (!IN_SET_ERRNO(errno, EAGAIN, EINTR, ECONNABORTED))
                        log_warning_errno(errno, "Failed to accept a connection: %m");
                return 0;
        }
        uid_t uid = (uid_t) -1;
        if (!peer_allowed(m, cfd, &uid)) {
                log_notice("Refusing a connection from uid " UID_FMT ": not in allowed-users or allowed-groups.", uid);
                safe_close(cfd);
                return 0;
        }
        bool global = m->n_sessions >= m->config->max_connections;
        r = global ? CHARGE_QUOTA : charge_take(m->charges, &connection, uid, CHARGE_CONNECTIONS, 1);
        if (r == CHARGE_QUOTA) {
                uint64_t now = 0;

                /* A client looping on connect must not flood the journal. */
                (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
                if (m->refusal_logged_usec == 0 || now >= m->refusal_logged_usec + USEC_PER_SEC) {
                        if (global)
                                log_notice("Refusing a connection from uid " UID_FMT ": the server holds "
                                           "max-connections=%" PRIu64 " already.",
                                           uid, m->config->max_connections);
                        else
                                log_notice("Refusing a connection from uid " UID_FMT ": it holds "
                                           "max-connections-per-user=%" PRIu64 " already.",
                                           uid, m->config->max_connections_per_user);
                        m->refusal_logged_usec = now;
                }
                refuse_over_quota(m, cfd, uid, global);
                return 0;
        }
        if (r < 0) {
                log_warning_errno(r, "Failed to set up a connection: %m");
                safe_close(cfd);
                return 0;
        }
        r = manager_add_session(m, cfd, cfd, &connection);
        charge_release(&connection);   /* still ours if the session was not made */
        if (r < 0)
                log_warning_errno(r, "Failed to set up a connection: %m");
        return 0;
}

static int add_listener(Manager *m, int fd) {
        sd_event_source **l, *s;
        int r;

        (void) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        r = sd_event_add_io(m->event, &s, fd, EPOLLIN, on_accept, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_io_fd_own(s, true);
        l = realloc(m->listeners, (m->n_listeners + 1) * sizeof(*l));
        if (!l) {
                sd_event_source_disable_unref(s);
                return -ENOMEM;
        }
        m->listeners = l;
        m->listeners[m->n_listeners++] = s;
        m->accepting = true;
        return 0;
}

static int listen_on_path(Manager *m, const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_close_ int fd = -EBADF;
        struct stat st;
        mode_t old;
        int r;

        if (strlen(path) >= sizeof(sa.sun_path))
                return log_error_errno(ENAMETOOLONG, "Socket path %s is too long.", path);
        strcpy(sa.sun_path, path);

        if (lstat(path, &st) >= 0) {
                _cleanup_close_ int probe = -EBADF;

                if (!S_ISSOCK(st.st_mode))
                        return log_error_errno(EEXIST, "%s exists and is not a socket; refusing to replace it.", path);
                probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (probe < 0)
                        return log_error_errno(errno, "Failed to create a socket: %m");
                if (connect(probe, (struct sockaddr *) &sa, sizeof(sa)) >= 0)
                        return log_error_errno(EADDRINUSE, "Another daemon is already listening on %s.", path);
                if (errno != ECONNREFUSED)
                        return log_error_errno(errno, "Failed to check the existing socket %s: %m", path);
                log_info("Replacing the stale socket %s.", path);
                if (unlink(path) < 0)
                        return log_error_errno(errno, "Failed to remove the stale socket %s: %m", path);
        } else if (errno != ENOENT)
                return log_error_errno(errno, "Failed to check %s: %m", path);

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return log_error_errno(errno, "Failed to create a socket: %m");

        /* Owner and group may connect, nobody else: the same as the socket unit's SocketMode=0660. */
        old = umask(0117);
        r = bind(fd, (struct sockaddr *) &sa, sizeof(sa));
        umask(old);
        if (r < 0)
                return log_error_errno(errno, "Failed to bind %s: %m", path);
        m->created_socket = strdup(path);
        if (listen(fd, SOMAXCONN) < 0)
                return log_error_errno(errno, "Failed to listen on %s: %m", path);

        r = add_listener(m, fd);
        if (r < 0)
                return log_error_errno(r, "Failed to watch %s: %m", path);
        TAKE_FD(fd);
        log_info("Listening on %s.", path);
        return 0;
}

int manager_listen(Manager *m) {
        char **names = NULL;
        int n, r;

        if (m->config->stdio) {
                m->stdio = true;
                r = manager_add_session(m, STDIN_FILENO, STDOUT_FILENO, NULL);
                if (r < 0)
                        return log_error_errno(r, "Failed to serve stdin/stdout: %m");
                return 0;
        }

        if (m->config->listen_path)
                return listen_on_path(m, m->config->listen_path);

        n = sd_listen_fds_with_names(true, &names);
        if (n < 0)
                return log_error_errno(n, "Failed to get sockets from systemd: %m");
        if (n == 0)
                return log_error_errno(EINVAL,
                                       "No socket to serve: start me through mcp-python-sandboxd.socket, or give "
                                       "--listen=PATH or --stdio.");
        for (int i = 0; i < n; i++) {
                int fd = SD_LISTEN_FDS_START + i;

                if (sd_is_socket(fd, AF_UNIX, SOCK_STREAM, 1) <= 0) {
                        log_warning("Ignoring socket %s (fd %d): not a listening Unix stream socket.",
                                    names && names[i] ? names[i] : "?", fd);
                        safe_close(fd);
                        continue;
                }
                r = add_listener(m, fd);
                if (r < 0)
                        return log_error_errno(r, "Failed to watch the socket from systemd: %m");
                log_debug("Serving socket %s from systemd.", names && names[i] ? names[i] : "?");
        }
        for (int i = 0; names && names[i]; i++)
                free(names[i]);
        free(names);
        if (m->n_listeners == 0)
                return log_error_errno(EINVAL, "None of the sockets from systemd can be served.");
        return 0;
}

static int on_stop_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        log_info("Stopping now; %u connection%s still had work in flight.", m->n_sessions,
                 m->n_sessions == 1 ? "" : "s");
        return sd_event_exit(m->event, 0);
}

static void manager_reload(Manager *m) {
        _cleanup_(config_done) Config fresh;
        const char *file = NULL;
        bool check = false;
        int n;

        log_info("SIGHUP: reloading %s.", m->config_file);
        config_init(&fresh);
        if (config_load(&fresh, m->config_file) < 0 ||
            config_parse_argv(&fresh, m->argc, m->argv, &file, &check) != 0 || config_resolve_access(&fresh) < 0 ||
            config_verify(&fresh) < 0) {
                log_error("The configuration has errors (above); keeping the running one.");
                return;
        }
        const Tool *const *old_tools = m->server.tools;
        _cleanup_free_ char *old_line = tools_live_line(m->config, runtime_data_binds(m->runtime));
        n = config_apply_reload(m->config, &fresh);
        log_set_max_level(m->config->log_level);
        manager_apply_limits(m);
        manager_set_accepting(m);
        log_info("Reloaded: %d setting%s changed.", n, n == 1 ? "" : "s");
        /* The sandbox may work now, or not any more. */
        runtime_reload(m->runtime);
        /* The caps may have outgrown the unit's TasksMax= and MemoryMax=. */
        (void) runtime_check_service_limits(m->runtime);
        m->server.instructions = manager_instructions(m);
        m->server.tools = manager_tools(m);
        /* Tools come and go, and their descriptions state the configuration: tell the clients when either changed. */
        _cleanup_free_ char *new_line = tools_live_line(m->config, runtime_data_binds(m->runtime));
        if (old_tools != m->server.tools || !old_line || !new_line || !streq(old_line, new_line))
                for (Session *x = m->sessions; x; x = x->next)
                        if (x->mcp)
                                mcp_session_tools_changed(x->mcp);
        /* It says whether scripts run without the sandbox. */
        manager_update_status(m);
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Manager *m = userdata;

        if (si->ssi_signo == SIGHUP) {
                manager_reload(m);
                return 0;
        }
        if (m->stopping)
                return sd_event_exit(m->event, 0);   /* second signal: now */

        log_info("Received %s; stopping.", strsignal((int) si->ssi_signo));
        m->stopping = true;
        (void) sd_notify(false, "STOPPING=1\nSTATUS=Stopping");
        manager_set_accepting(m);
        for (Session *x = m->sessions, *next; x; x = next) {
                next = x->next;
                session_stop(x);
        }
        if (m->n_sessions == 0)
                return sd_event_exit(m->event, 0);
        /* Give in-flight calls a moment to answer and replies to go out. */
        return sd_event_add_time_relative(m->event, &m->stop_timer, CLOCK_MONOTONIC, STOP_GRACE_USEC, 0,
                                          on_stop_timer, m);
}

int manager_new(Manager **ret, Config *config) {
        _cleanup_(manager_freep) Manager *m = NULL;
        int r;

        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->config = config;

        r = sd_event_default(&m->event);
        if (r < 0)
                return r;
        r = sd_event_set_watchdog(m->event, true);
        if (r < 0)
                return r;
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &m->start_usec);

        r = sd_event_add_signal(m->event, NULL, SIGTERM, on_signal, m);
        if (r >= 0)
                r = sd_event_add_signal(m->event, NULL, SIGINT, on_signal, m);
        if (r >= 0)
                r = sd_event_add_signal(m->event, NULL, SIGHUP, on_signal, m);
        if (r < 0)
                return r;

        r = reaper_new(&m->reaper);
        if (r < 0)
                return r;
        /* The cgroups a root daemon creates are named after its cache: its own, also after a restart. */
        r = sandbox_cgroups_new(&m->cgroups, config->cache_dir);
        if (r < 0)
                return r;
        /* Before the first child: under systemd the daemon moves what is in its cgroup into a leaf of its own to
         * enable the controllers, which a child forking meanwhile can defeat. */
        if (sandbox_cgroup_probe(m->cgroups) > 0) {
                /* Builds and Python installs (spawned with a nice value) go into the daemon's group of runs, at a
                 * quarter of a user's CPU weight, for as long as the daemon runs. */
                /* Named with the pid as every run's cgroup is: another daemon on the same cache has its own, and
                 * removes only what is its own or a dead daemon's (sandbox_cgroup_remove_stale()). */
                char **bg = NULL, name[64];
                snprintf(name, sizeof(name), "run-%d-background", (int) getpid());
                if (sandbox_cgroup_new_run_cgroups(m->cgroups, name,
                                                   &(SandboxLimits) { .owner = SANDBOX_OWNER_DAEMON }, &bg) >= 0)
                        reaper_set_background_cgroups(m->reaper, bg);
                /* A user whose runs are light goes ahead of one who keeps the CPUs busy (cpu-share.h). */
                (void) sandbox_cgroups_share_cpus(m->cgroups, m->event);
        }
        r = runtime_new(&m->runtime, m->event, m->config, m->reaper, m->cgroups);
        if (r < 0)
                return r;
        (void) runtime_check_service_limits(m->runtime);
        r = workspace_registry_new(&m->workspaces, m->runtime);
        if (r < 0)
                return r;
        m->services = (ToolServices) {
                .event = m->event,
                .config = m->config,
                .runtime = m->runtime,
                .workspaces = m->workspaces,
        };
        tools_attach(m->runtime);

        /* Connections and their bytes are charged in the scheduler's one account, with every spawn. */
        m->charges = scheduler_charges(runtime_scheduler(m->runtime));

        r = mcp_schema_cache_new(&m->schemas);
        if (r < 0)
                return r;
        m->server = (McpServer) {
                .name = "mcp-python-sandbox",
                .version = PACKAGE_VERSION,
                .instructions = manager_instructions(m),
                .tools = manager_tools(m),
                .page_size = 50,
                .max_calls = (unsigned) MIN(config->max_calls_per_connection, 100000u),
                .max_depth = 64,
                .tools_ttl_ms = 300000,
                .userdata = &m->services,
                .describe_tool = tools_describe,
                .schemas = m->schemas,
                .charges = m->charges,
        };
        manager_apply_limits(m);

        *ret = TAKE_PTR(m);
        return 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        while (m->sessions)
                manager_drop_session(m, m->sessions);
        waitq_clear(&m->input_waiters);
        m->schemas = mcp_schema_cache_free(m->schemas);
        m->workspaces = workspace_registry_free(m->workspaces);
        runtime_free(m->runtime);
        m->reaper = reaper_free(m->reaper);
        /* The runs are gone: so go their cgroups, and those the daemon created to hold them. */
        m->cgroups = sandbox_cgroups_free(m->cgroups);
        for (size_t i = 0; i < m->n_listeners; i++)
                sd_event_source_disable_unref(m->listeners[i]);
        free(m->listeners);
        if (m->created_socket) {
                (void) unlink(m->created_socket);
                free(m->created_socket);
        }
        sd_event_source_disable_unref(m->idle_timer);
        sd_event_source_disable_unref(m->status_timer);
        sd_event_source_disable_unref(m->stop_timer);
        sd_event_unref(m->event);
        free(m);
        return NULL;
}

int manager_run(Manager *m) {
        int r;

        runtime_start(m->runtime);
        (void) sd_notify(false, "READY=1");
        manager_update_status(m);
        manager_update_idle(m);

        r = sd_event_loop(m->event);
        (void) sd_notify(false, "STOPPING=1");
        return r;
}
