/* SPDX-License-Identifier: MIT */
/*
 * The driver's wire: the records it sends over the socket pair (a hello, checked against who sent it and the
 * sandbox's pid 1 that bwrap reports on its status fd; messages, which answer the request in progress) and the
 * messages we send it, with the cap on their size.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "driver-input.h"
#include "fs-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "protocol/limits.h"
#include "time-util.h"
#include "workspace-internal.h"


static int pidfd_open_(pid_t pid) {
        return (int) syscall(SYS_pidfd_open, pid, 0);
}

int workspace_pidfd_signal(int fd, int sig) {
        return syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) < 0 ? -errno : 0;
}

/*
 * The sandbox broke the protocol (a second hello, a record or message the driver never sends): say so once, read
 * nothing more from it, and stop it; on_bwrap_exit() starts it afresh and tells whoever waits why.
 */
static void protocol_error(Workspace *sb, const char *what) {
        if (sb->protocol_error)
                return;
        log_warning("Sandbox %.8s… of uid " UID_FMT " broke the protocol (%s): starting it afresh.", sb->id, sb->uid,
                    what);
        sb->protocol_error = what;
        sb->ready = false;
        if (sb->io)
                (void) sd_event_source_set_enabled(sb->io, SD_EVENT_OFF);
        process_kill(sb->proc);
}

static bool pidfd_exited(int fd) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        return poll(&p, 1, 0) != 0;
}

/* ---- bwrap's report ------------------------------------------------------------- */

static void status_line(Workspace *sb, const char *line) {
        _cleanup_json_ json_object *j = json_tokener_parse(line);
        int64_t pid = 0;

        if (j && json_get_int64(j, "child-pid", &pid) && pid > 1 && sb->init_pid == 0) {
                sb->init_pid = (pid_t) pid;
                /* Records wait for this (see workspace_on_io()). */
                if (sb->io && !sb->protocol_error)
                        (void) sd_event_source_set_enabled(sb->io, SD_EVENT_ON);
                /* Its cgroups exist now: from the idle cap it started with to what it does (starting: busy). */
                workspace_cpu_update(sb);
        }
}

/* Read what bwrap reported so far, a line at a time: it writes, the sandbox cannot (bwrap keeps the fd from it). */
static void status_read(Workspace *sb) {
        for (;;) {
                ssize_t n = read(sb->status_fd, sb->status_line + sb->status_len,
                                 sizeof(sb->status_line) - 1 - sb->status_len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        if (n == 0 || errno != EAGAIN)
                                sb->status_io = sd_event_source_disable_unref(sb->status_io);
                        return;
                }
                sb->status_len += (size_t) n;
                sb->status_line[sb->status_len] = 0;
                for (char *nl; (nl = strchr(sb->status_line, '\n'));) {
                        *nl = 0;
                        status_line(sb, sb->status_line);
                        sb->status_len -= (size_t) (nl + 1 - sb->status_line);
                        memmove(sb->status_line, nl + 1, sb->status_len + 1);
                }
                if (sb->status_len == sizeof(sb->status_line) - 1)
                        sb->status_len = 0;     /* not bwrap's: too long a line */
        }
}

int workspace_on_status(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        status_read(userdata);
        return 0;
}

/* ---- the driver's records --------------------------------------------------------- */

/*
 * A hello: a fresh interpreter (the driver forks one at the start and after one died) is ready. Only one of the
 * driver's children may say it (sender, from the kernel: SCM_CREDENTIALS, not what the record claims), the
 * driver being the child of the sandbox's pid 1, and only once: while the interpreter that said hello lives,
 * another hello breaks the protocol.
 */
static void on_hello(Workspace *sb, pid_t sender) {
        pid_t driver;

        if (sb->worker_pidfd >= 0 && !pidfd_exited(sb->worker_pidfd))
                return protocol_error(sb, "a second hello while its interpreter runs");
        driver = sender > 0 ? proc_ppid(sender) : -1;
        if (driver <= 1 || proc_ppid(driver) != sb->init_pid)
                return protocol_error(sb, "a hello from a process that is not a fresh interpreter");
        sb->worker_pidfd = safe_close(sb->worker_pidfd);
        sb->worker_pidfd = pidfd_open_(sender);
        /* Opened after the check: make sure it is still the one. */
        if (sb->worker_pidfd >= 0 && proc_ppid(sender) != driver)
                sb->worker_pidfd = safe_close(sb->worker_pidfd);
        if (sb->worker_pidfd < 0)
                return protocol_error(sb, "a hello from a process that is gone");
        sb->worker_pid = sender;
        sb->said_hello = true;
        sb->ready = true;
        sb->fast_deaths = 0;

        WorkspaceOp *op = sb->ops;
        if (op && op->kind == OP_REQUEST && op->phase != PHASE_QUEUED) {
                /* A fresh worker while a request was out: the old one was killed or died. */
                WorkspaceOpOutcome o = {
                        .timed_out = op->timed_out,
                        .restarted = true,
                        .error = op->timed_out ? "the time limit was reached and the interpreter did not stop when "
                                                 "interrupted, so it was killed and started afresh"
                                               : "the interpreter died (it may have run out of memory or exited) "
                                                 "and was started afresh",
                };
                workspace_op_finish(op, &o);
        } else if (op && op->kind == OP_RESTART && op->phase == PHASE_STARTING) {
                if (op->snapshot) {
                        op->phase = PHASE_RESTORE;
                        json_object *req = json_object_new_object();
                        json_add_string(req, "op", "restore");
                        json_add(req, "tar", TAKE_PTR(op->snapshot));
                        json_object_put(op->request);
                        op->request = req;
                        /* sent by dispatch() below */
                } else {
                        WorkspaceOpOutcome o = { .reset = !op->keep_files };
                        workspace_op_finish(op, &o);
                }
        }
        workspace_schedule_dispatch(sb);
}

int workspace_send_pending(Workspace *sb) {
        while (sb->out && sb->out_off < sb->out_len) {
                size_t n = MIN(sb->out_len - sb->out_off, (size_t) DRIVER_RECORD_MAX - 1);
                char kind = sb->out_off + n >= sb->out_len ? 'E' : 'C';
                struct iovec iov[2] = { { &kind, 1 }, { sb->out + sb->out_off, n } };
                struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
                ssize_t k = sendmsg(sb->sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return sd_event_source_set_io_events(sb->io, EPOLLIN | EPOLLOUT);
                        return -errno;
                }
                sb->out_off += n;
        }
        free(sb->out);
        sb->out = NULL;
        sb->out_len = sb->out_off = 0;
        return sd_event_source_set_io_events(sb->io, EPOLLIN);
}

static void on_message(Workspace *sb, json_object *msg) {
        WorkspaceOp *op = sb->ops;

        if (!op || (op->phase != PHASE_SENT && op->phase != PHASE_INTERRUPTING && op->phase != PHASE_SNAPSHOT &&
                    op->phase != PHASE_RESTORE))
                return;   /* nobody asked: ignore it */
        if (op->kind == OP_REQUEST) {
                WorkspaceOpOutcome o = {
                        .reply = msg,
                        .timed_out = op->timed_out,
                        .interrupted = op->phase == PHASE_INTERRUPTING,
                };
                return workspace_op_finish(op, &o);
        }
        if (op->phase == PHASE_SNAPSHOT) {
                json_object *tar = json_get(msg, "tar", json_type_string);
                if (!tar) {
                        const char *e = json_get_string(msg, "error");
                        _cleanup_free_ char *m = NULL;
                        if (asprintf(&m, "the work directory could not be carried over: %s", strempty(e)) < 0)
                                m = NULL;
                        WorkspaceOpOutcome o = { .error = m ?: "the work directory could not be carried over" };
                        /* Nothing changed: the old environment stays. */
                        return workspace_op_finish(op, &o);
                }
                op->snapshot = json_object_get(tar);
                op->phase = PHASE_STARTING;
                workspace_stop(sb);
                workspace_switch_env(sb);
                int k = workspace_spawn(sb);
                if (k != 0) {
                        WorkspaceOpOutcome o = { .error = "the sandbox could not be started again", .reset = true };
                        return workspace_op_finish(op, &o);
                }
                return;
        }
        if (op->phase == PHASE_RESTORE) {
                WorkspaceOpOutcome o = {
                        .error = json_object_get_boolean(json_get(msg, "ok", json_type_boolean))
                                         ? NULL
                                         : "the work directory could not be put back",
                };
                workspace_op_finish(op, &o);
        }
}

/*
 * What a callback of the sandbox cost the loop (since cpu0, the thread's CPU time when it began), charged to its
 * user; then its sources take the priority the scheduler gives that user now: a sandbox flooding the daemon with
 * messages is read after everyone else's ready events, in every moment they leave.
 */
static void workspace_loop_account(Workspace *sb, uint64_t cpu0) {
        int p;

        if (!sb->loop.user)
                return;
        p = sb->loop_priority;
        if (scheduler_loop_account(&sb->loop, thread_cpu_usec() - cpu0, now_usec(), &p))
                log_debug("Sandbox %.8s… of uid " UID_FMT ": %s.", sb->id, sb->uid,
                          p > sb->loop_priority ? "its user is over its share of the event loop; read after the others"
                                                : "its user is back within its share of the event loop");
        sb->loop_priority = p;
        /* Sources made anew at a restart start at the normal priority: set them each time (a no-op if equal). */
        if (sb->io)
                (void) sd_event_source_set_priority(sb->io, p);
        if (sb->status_io)
                (void) sd_event_source_set_priority(sb->status_io, p);
}

static int on_io(sd_event_source *s, int fd, uint32_t revents, Workspace *sb);

int workspace_on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        _cleanup_(workspace_unrefp) Workspace *sb = workspace_ref(userdata);
        uint64_t cpu0 = thread_cpu_usec();

        (void) on_io(s, fd, revents, sb);
        workspace_loop_account(sb, cpu0);
        return 0;
}

static int on_io(sd_event_source *s, int fd, uint32_t revents, Workspace *sb) {
        char rec[DRIVER_RECORD_MAX + 1];        /* one more: a longer record is not the driver's */
        union {
                struct cmsghdr hdr;
                uint8_t buf[CMSG_SPACE(sizeof(struct ucred))];
        } control;

        if (revents & EPOLLOUT) {
                if (workspace_send_pending(sb) < 0)
                        log_debug("Sandbox %.8s…: sending failed.", sb->id);
        }
        if (!(revents & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                return 0;
        /* A hello is checked against the sandbox's pid 1, which bwrap reports: until it has, records wait. */
        if (sb->init_pid == 0 && sb->status_fd >= 0)
                status_read(sb);
        if (sb->init_pid == 0) {
                (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
                return 0;
        }
        /* A few records at a time (each parsed as it comes): a long reply shares the loop with everyone else. */
        for (int i = 0; i < 16 && sb->sock >= 0 && !sb->protocol_error; i++) {
                struct iovec iov = { rec, sizeof(rec) };
                struct msghdr mh = {
                        .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = &control,
                        .msg_controllen = sizeof(control),
                };
                pid_t sender = 0;
                ssize_t n = recvmsg(sb->sock, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return 0;
                        n = 0;
                }
                if (n == 0) {
                        /* Everyone in the sandbox closed it: bwrap's exit will tell the rest. */
                        sb->io = sd_event_source_disable_unref(sb->io);
                        return 0;
                }
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
                            c->cmsg_len == CMSG_LEN(sizeof(struct ucred))) {
                                struct ucred uc;
                                memcpy(&uc, CMSG_DATA(c), sizeof(uc));
                                sender = uc.pid;
                        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                                /* Nothing of ours: close what a cell sent along. */
                                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                                for (size_t f = 0; f < k; f++) {
                                        int x;
                                        memcpy(&x, CMSG_DATA(c) + f * sizeof(int), sizeof(int));
                                        (void) safe_close(x);
                                }
                        }
                _cleanup_json_ json_object *j = NULL;
                switch (driver_input_feed(&sb->input, rec, (size_t) n, &j)) {
                case DRIVER_RECORD_HELLO:
                        on_hello(sb, sender);
                        break;
                case DRIVER_RECORD_MESSAGE:
                        on_message(sb, j);
                        break;
                case DRIVER_RECORD_INVALID:
                        protocol_error(sb, sb->input.max > 0 && (size_t) n <= DRIVER_RECORD_MAX &&
                                                           (rec[0] == 'C' || rec[0] == 'E')
                                                   ? "a message that is too long, of too many values or not a "
                                                     "JSON object"
                                                   : "a record the driver does not send");
                        break;
                case DRIVER_RECORD_NONE:
                        break;
                }
        }
        return 0;
}

/*
 * The largest message the driver may send us, which it keeps to (an answer that would be longer becomes an error
 * saying so): execute_code's reply, the largest there is. Its text (stdout, stderr, the result, a traceback) is cut
 * to half the output cap each, which json.dumps(ensure_ascii) writes as at most 12 bytes a character (a surrogate
 * pair of \uXXXX escapes); its figures and files are OUTPUTS_MAX_TOTAL bytes in all, base64; the rest (names,
 * sizes, a listing) gets 1 MiB. A read_file reply (WORKSPACE_FILE_MAX bytes, at most 6 JSON bytes each) fits as well.
 * With the default output cap: about 15 MiB, where the message is held once and parsed once.
 */
size_t workspace_message_max(const Config *c) {
        uint64_t m = 24 * c->output_cap + (OUTPUTS_MAX_TOTAL + 2) / 3 * 4 + (1 << 20);
        return (size_t) MIN(m, (uint64_t) DRIVER_MESSAGE_MAX);
}
