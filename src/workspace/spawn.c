/* SPDX-License-Identifier: MIT */
/*
 * The long-lived bwrap a persistent sandbox runs in: starting it (the driver, the run's limits, the user's files,
 * the network proxy), stopping it, what it prints on stderr on its way to the log, its exit (and starting it
 * afresh, or giving up on a sandbox that does not start), and its CPU cap.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "sandbox/limits.h"
#include "strv.h"
#include "time-util.h"
#include "utf8.h"
#include "workspace-internal.h"


static void output_flush(Workspace *sb);

void workspace_stop(Workspace *sb) {
        if (sb->proc)
                output_flush(sb);
        sb->io = sd_event_source_disable_unref(sb->io);
        sb->sock = safe_close(sb->sock);
        sb->status_io = sd_event_source_disable_unref(sb->status_io);
        sb->status_fd = safe_close(sb->status_fd);
        sb->status_len = 0;
        sb->init_pid = 0;
        sb->worker_pidfd = safe_close(sb->worker_pidfd);
        sb->worker_pid = 0;
        sb->proc = process_free(sb->proc);   /* kills bwrap and all in it */
        sb->netproxy = net_proxy_free(sb->netproxy);
        sb->ready = false;
        sb->cpu_busy = -1;
        sb->cpu_cap_failed = false;
        driver_input_done(&sb->input);
        free(sb->out);
        sb->out = NULL;
        sb->out_len = sb->out_off = 0;
}

/* ---- what the sandbox prints ------------------------------------------------------ */

/*
 * A sandbox's stderr carries bwrap's complaints and the driver's notes, and anything a cell writes there (through
 * /proc/PID/fd/2 of the driver): none of it may pass for a line of our own. Each line becomes one log call at one
 * priority, escaped (no line breaks, no escape sequences, no leading '<' that could be taken for a priority), cut
 * at OUTPUT_LINE_MAX bytes, at most OUTPUT_LINES_BURST of them a minute.
 */
static void output_dropped_flush(Workspace *sb) {
        if (sb->lines_dropped > 0)
                log_info("Sandbox %.8s… of uid " UID_FMT ": %" PRIu64 " more line%s of its output not logged "
                         "(at most %u a minute).",
                         sb->id, sb->uid, sb->lines_dropped, sb->lines_dropped == 1 ? "" : "s", OUTPUT_LINES_BURST);
        sb->lines_dropped = 0;
}

static void output_line(Workspace *sb) {
        uint64_t now = now_usec();
        _cleanup_free_ char *text = NULL;

        if (now - sb->lines_since_usec >= OUTPUT_LINES_INTERVAL_USEC) {
                output_dropped_flush(sb);
                sb->lines_since_usec = now;
                sb->lines_logged = 0;
        }
        if (sb->lines_logged >= OUTPUT_LINES_BURST)
                sb->lines_dropped++;
        else {
                sb->lines_logged++;
                text = utf8_escape_line(sb->line, sb->line_len);
                if (sb->line_cut > 0)
                        log_info("Sandbox %.8s… of uid " UID_FMT " printed: %s [%" PRIu64 " more bytes]", sb->id,
                                 sb->uid, strempty(text), sb->line_cut);
                else
                        log_info("Sandbox %.8s… of uid " UID_FMT " printed: %s", sb->id, sb->uid, strempty(text));
        }
        sb->line_len = 0;
        sb->line_cut = 0;
}

static void on_stderr(Process *p, const char *data, size_t n, void *userdata) {
        Workspace *sb = userdata;

        while (n > 0) {
                const char *nl = memchr(data, '\n', n);
                size_t len = nl ? (size_t) (nl - data) : n;
                size_t take = MIN(len, OUTPUT_LINE_MAX - sb->line_len);

                memcpy(sb->line + sb->line_len, data, take);
                sb->line_len += take;
                sb->line_cut += len - take;
                if (!nl)
                        break;
                output_line(sb);
                data = nl + 1;
                n -= len + 1;
        }
}

/* The sandbox stopped: what it printed last, even without a line break, and how much was not logged. */
static void output_flush(Workspace *sb) {
        if (sb->line_len > 0 || sb->line_cut > 0)
                output_line(sb);
        output_dropped_flush(sb);
}

static void on_bwrap_exit(Process *p, void *userdata) {
        _cleanup_(workspace_unrefp) Workspace *sb = workspace_ref(userdata);
        _cleanup_free_ char *err = capture_text(&p->err, NULL);
        bool said_hello = sb->said_hello;
        bool fast = now_usec() - sb->spawned_usec < 5 * USEC_PER_SEC;
        const char *broke = sb->protocol_error;
        _cleanup_free_ char *why = NULL;

        output_flush(sb);
        log_info("Sandbox %.8s… of uid " UID_FMT " stopped (exit %d).", sb->id, sb->uid, p->exit_code);
        /* What it said, for the sandbox's user (see below): without the line break at its end. */
        for (size_t l = err ? strlen(err) : 0; l > 0 && strchr("\n\r\t ", err[l - 1]); l--)
                err[l - 1] = 0;
        sb->proc = NULL;
        process_free(p);
        workspace_stop(sb);

        if (!said_hello || fast)
                sb->fast_deaths++;
        if (sb->fast_deaths >= MAX_FAST_DEATHS || (!said_hello && err && *err)) {
                free(sb->broken);
                if (asprintf(&sb->broken, "the sandbox does not start: %s", err && *err ? err : "no reason given") <
                    0)
                        sb->broken = NULL;
                workspace_fail_all(sb, sb->broken ?: "the sandbox does not start");
                return;
        }

        WorkspaceOp *op = sb->ops;
        if (op && op->phase != PHASE_QUEUED && !(op->kind == OP_RESTART && op->phase == PHASE_STARTING)) {
                if (broke && asprintf(&why, "the sandbox broke the protocol with the service (%s), so it was "
                                            "stopped and started afresh: variables and files in /work are lost",
                                      broke) < 0)
                        why = NULL;
                WorkspaceOpOutcome o = {
                        .timed_out = op->timed_out,
                        .reset = true,
                        .error = why ?: "the sandbox stopped and was started afresh: variables and files in /work "
                                        "are lost",
                };
                workspace_op_finish(op, &o);
                if (sb->closed)
                        return;
        }
        if (workspace_spawn(sb) != 0)
                workspace_fail_all(sb, "the sandbox could not be started again");
}

/*
 * The sandbox's CPU cap: a run's (cpu-quota=, or none) while we wait for it (starting, a request out), else
 * IDLE_CPU_QUOTA, so that what a cell leaves running bounds no one else. Only with a cgroup of its own, which a
 * sandbox gets only with the cpu controller (see workspace_spawn()).
 */
void workspace_cpu_update(Workspace *sb) {
        uint64_t quota = sb->registry->config->cpu_quota;
        int busy = !sb->ready || sb->ops || sb->prepare;
        int k;

        /* The child that starts bwrap makes the sandbox's cgroups (at the idle cap): they are there once bwrap has
         * reported its child's pid. */
        if (!sb->proc || !sb->proc->cgroups || sb->init_pid == 0 || busy == sb->cpu_busy)
                return;
        if (!busy)
                quota = quota > 0 ? MIN(quota, (uint64_t) IDLE_CPU_QUOTA) : IDLE_CPU_QUOTA;
        k = sandbox_cgroup_set_cpu_quota(sb->proc->cgroups, quota);
        if (k < 0) {
                /* Tried again at the next change; said once per start. */
                if (!sb->cpu_cap_failed)
                        log_warning_errno(k, "Sandbox %.8s…: could not set its CPU cap: %m", sb->id);
                sb->cpu_cap_failed = true;
                return;
        }
        sb->cpu_busy = busy;
}

void workspace_set_data(Workspace *sb, int *fds, char **dests, size_t n) {
        assert(n <= WORKSPACE_MAX_DATA && sb->n_data == 0);
        memcpy(sb->data_fds, fds, n * sizeof(int));
        memcpy(sb->data_dests, dests, n * sizeof(char *));
        sb->n_data = n;
}

int workspace_spawn(Workspace *sb) {
        Runtime *r = sb->registry->runtime;
        const Config *c = sb->registry->config;
        _cleanup_free_ char *python = NULL;
        _cleanup_close_ int theirs = -EBADF, status_theirs = -EBADF;
        SandboxLimits limits;
        int pair[2], status[2];
        char fdstr[16];
        int k;

        if (sb->closed)
                return WORKSPACE_CLOSED;
        /* Always in bwrap, also when runs go without it (unsafe-no-sandbox): what the self-test found decides. */
        if (runtime_self_test_error(r))
                return WORKSPACE_NO_SANDBOX;
        /*
         * The runs' limits and system call filter, in a cgroup of its own like a run's, with memory, processes and
         * the CPU bound for the sandbox as a whole. The CPU is capped rather than counted (this interpreter lives
         * on; each cell's time limit bounds it): created at the idle cap, so that without the cpu controller there
         * is no cgroup but rlimits, where RLIMIT_CPU bounds each process's CPU time instead.
         */
        sandbox_limits_from_config(c, &limits);
        limits.cpu_quota = IDLE_CPU_QUOTA;
        limits.cpu_usec_without_cgroup = true;
        limits.owner = sb->uid;         /* its CPU comes out of its owner's share, as that user's runs' does */
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                return -errno;
        sb->sock = pair[0];
        theirs = pair[1];
        (void) fcntl(sb->sock, F_SETFL, O_NONBLOCK);
        /* Who sent each record, from the kernel: a hello is believed only from a fresh interpreter. */
        if (setsockopt(sb->sock, SOL_SOCKET, SO_PASSCRED, &(int) { 1 }, sizeof(int)) < 0 ||
            pipe2(status, O_CLOEXEC) < 0) {
                k = -errno;
                sb->sock = safe_close(sb->sock);
                return k;
        }
        sb->status_fd = status[0];
        status_theirs = status[1];
        (void) fcntl(sb->status_fd, F_SETFL, O_NONBLOCK);
        sb->input.max = workspace_message_max(c);

        if (asprintf(&python, "%s/bin/python", sb->env) < 0) {
                workspace_stop(sb);
                return -ENOMEM;
        }
        snprintf(fdstr, sizeof(fdstr), "%d", theirs);
        char *command[] = { python, (char *) "-I", (char *) "-u", (char *) "-c", (char *) workspace_driver_code, fdstr,
                            NULL };
        char *ro[] = { (char *) sb->python->prefix, NULL };
        /* The user's files, copied in afresh from the start at each start (bwrap reads from the offset). */
        SandboxData data[WORKSPACE_MAX_DATA];
        for (size_t i = 0; i < sb->n_data; i++) {
                if (lseek(sb->data_fds[i], 0, SEEK_SET) < 0) {
                        k = -errno;
                        workspace_stop(sb);
                        return k;
                }
                data[i] = (SandboxData) { .fd = sb->data_fds[i], .dest = sb->data_dests[i] };
        }
        /* network-allow: the driver behind the bridge, which hands the daemon's proxy its listening socket. */
        _cleanup_strv_free_ char **wrapped = NULL;
        _cleanup_close_ int net_fd = -EBADF;
        k = runtime_network_wrap(r, sb->uid, command, &sb->netproxy, &net_fd, &wrapped);
        if (k < 0) {
                workspace_stop(sb);
                return k;
        }
        int fds[] = { theirs, net_fd };
        /* The same sandbox as execute_python's runs (network, tmpfs size, read-only system). */
        sb->network = runtime_sandbox_policy(r).network;
        k = sb->registry->spawn(r, sb->env, streq(sb->python->prefix, "/usr") ? NULL : ro, data, sb->n_data,
                                   fds, net_fd >= 0 ? 2 : 1, status_theirs, wrapped ?: command, 0, &limits, 8192,
                                   8192, on_bwrap_exit, sb, &sb->proc);
        if (k < 0) {
                workspace_stop(sb);
                return k;
        }
        process_set_stderr_func(sb->proc, on_stderr, sb);
        k = sd_event_add_io(sb->registry->event, &sb->io, sb->sock, EPOLLIN, workspace_on_io, sb);
        if (k >= 0)
                k = sd_event_add_io(sb->registry->event, &sb->status_io, sb->status_fd, EPOLLIN, workspace_on_status,
                                    sb);
        if (k < 0) {
                workspace_stop(sb);
                return k;
        }
        sb->spawned_usec = now_usec();
        sb->said_hello = false;
        sb->protocol_error = NULL;
        sb->started = true;
        log_debug("Sandbox %.8s… of uid " UID_FMT " started (bwrap pid %d%s).", sb->id, sb->uid, sb->proc->pid,
                  sb->proc->cgroups ? ", in a cgroup of its own" : "");
        return 0;
}
