/* SPDX-License-Identifier: MIT */
/*
 * The requests of a persistent sandbox and their state machine: one at a time in a queue, each sent to the driver
 * when it is ready (a cell with a run slot), timed (interrupt, then kill the interpreter, then the sandbox),
 * answered once; restarts that switch environments (carrying /work over) or reset the sandbox.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "time-util.h"
#include "workspace-internal.h"


/* A restart is under way: the environment it switches to becomes the current one. */
void workspace_switch_env(Workspace *sb) {
        if (!sb->next_env)
                return;
        free(sb->env);
        sb->env = TAKE_PTR(sb->next_env);
        envstore_hold_release(sb->env_hold);
        sb->env_hold = TAKE_PTR(sb->next_hold);
        requirement_list_done(&sb->reqs);
        sb->reqs = sb->next_reqs;
        sb->next_reqs = (RequirementList) {};
}

static void op_free(WorkspaceOp *op) {
        json_object_put(op->request);
        json_object_put(op->snapshot);
        free(op);
}

static void op_unlink(WorkspaceOp *op) {
        Workspace *sb = op->sandbox;
        for (WorkspaceOp **p = &sb->ops; *p; p = &(*p)->next)
                if (*p == op) {
                        *p = op->next;
                        break;
                }
}

void workspace_op_finish(WorkspaceOp *op, const WorkspaceOpOutcome *o) {
        _cleanup_(workspace_unrefp) Workspace *sb = workspace_ref(op->sandbox);
        bool was_head = sb->ops == op;
        WorkspaceReplyFunc cb = op->cb;
        void *ud = op->userdata;

        op_unlink(op);
        if (was_head && sb->op_timer)
                (void) sd_event_source_set_enabled(sb->op_timer, SD_EVENT_OFF);
        if (was_head) {
                scheduler_release(&sb->run_slot);   /* the cell is over, or waits no more */
                scheduler_release(&sb->carry);
        }
        sb->used_usec = now_usec();
        op_free(op);
        if (cb)
                cb(sb, o, ud);
        workspace_schedule_dispatch(sb);
}

static int on_op_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Workspace *sb = userdata;
        WorkspaceOp *op = sb->ops;

        if (!op)
                return 0;
        switch (op->phase) {
        case PHASE_SENT:
                op->timed_out = true;
                if (sb->out || sb->worker_pidfd < 0 || workspace_pidfd_signal(sb->worker_pidfd, SIGINT) < 0) {
                        /* Not even the request got through, or no way to reach the interpreter: start afresh. */
                        process_kill(sb->proc);
                        return 0;
                }
                log_debug("Sandbox %.8s…: time is up; interrupting.", sb->id);
                op->phase = PHASE_INTERRUPTING;
                (void) sd_event_source_set_time_relative(s, INTERRUPT_GRACE_USEC);
                return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        case PHASE_INTERRUPTING:
                log_debug("Sandbox %.8s…: the interrupt did not stop it; killing the interpreter.", sb->id);
                op->phase = PHASE_KILLING;
                sb->ready = false;
                if (workspace_pidfd_signal(sb->worker_pidfd, SIGKILL) < 0) {
                        process_kill(sb->proc);
                        return 0;
                }
                (void) sd_event_source_set_time_relative(s, RESTART_WAIT_USEC);
                return sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        default:
                /* No fresh interpreter came, or a restart hangs: start the whole sandbox afresh. */
                op->timed_out = op->kind == OP_REQUEST;
                process_kill(sb->proc);
                return 0;
        }
}

static int arm_op_timer(Workspace *sb, uint64_t usec) {
        if (sb->closed)
                return WORKSPACE_CLOSED;
        if (!sb->op_timer)
                return sd_event_add_time_relative(sb->registry->event, &sb->op_timer, CLOCK_MONOTONIC, usec,
                                                  USEC_PER_SEC / 50, on_op_timer, sb);
        (void) sd_event_source_set_time_relative(sb->op_timer, usec);
        return sd_event_source_set_enabled(sb->op_timer, SD_EVENT_ONESHOT);
}

static int send_request(Workspace *sb, json_object *req) {
        size_t len;
        const char *s;

        /* The answer's cap, which the driver keeps to. */
        sb->input.max = streq_ptr(json_get_string(req, "op"), "snapshot") ? SNAPSHOT_MESSAGE_MAX
                                                                         : workspace_message_max(sb->registry->config);
        json_add_int(req, "max_message", (int64_t) sb->input.max);
        s = json_to_line(req, &len);

        free(sb->out);
        sb->out = malloc(len ?: 1);
        if (!sb->out)
                return -ENOMEM;
        memcpy(sb->out, s, len);
        sb->out_len = len;
        sb->out_off = 0;
        return workspace_send_pending(sb);
}

/* A run slot or a carry's turn came. */
static void on_run_slot(SchedTicket *t, void *userdata) {
        workspace_schedule_dispatch(userdata);   /* through the loop: this runs inside another run's release */
}

/* A cell: code to run, which holds a run slot while it runs. */
static bool op_is_cell(const WorkspaceOp *op) {
        return op && op->kind == OP_REQUEST && streq_ptr(json_get_string(op->request, "op"), "exec");
}

static void dispatch(Workspace *sb) {
        WorkspaceOp *op = sb->ops;
        int k;

        /* A run slot is the head cell's, a carry's turn the head restart's: one cancelled while it waited for
         * either leaves it to nobody, to be given back here. */
        if (!op_is_cell(op))
                scheduler_release(&sb->run_slot);
        if (!op || !(op->kind == OP_RESTART && op->keep_files))
                scheduler_release(&sb->carry);
        if (!op)
                return;
        if (sb->broken) {
                workspace_fail_all(sb, sb->broken);
                return;
        }
        if (!sb->proc) {
                if (sb->started && workspace_spawn(sb) != 0)
                        workspace_fail_all(sb, "the sandbox could not be started");
                if (!sb->proc)
                        return;
        }
        if (op->phase == PHASE_RESTORE && sb->ready && !sb->out) {
                k = send_request(sb, op->request);
                (void) arm_op_timer(sb, INTERNAL_TIMEOUT_USEC);
                if (k < 0) {
                        WorkspaceOpOutcome o = { .error = "the work directory could not be put back" };
                        workspace_op_finish(op, &o);
                }
                return;
        }
        if (op->phase != PHASE_QUEUED || !sb->ready)
                return;

        if (op->kind == OP_RESTART) {
                /* Its snapshot passes through the daemon: one carry at a time (SCHED_CARRY), in turn. */
                if (op->keep_files && !sched_ticket_held(&sb->carry)) {
                        if (sched_ticket_waiting(&sb->carry))
                                return;
                        k = scheduler_acquire(runtime_scheduler(sb->registry->runtime), &sb->carry, SCHED_CARRY,
                                              sb->uid, on_run_slot, sb);
                        if (k == SCHEDULER_QUEUED)
                                return;
                        if (k != 0) {
                                WorkspaceOpOutcome o = { .error = "out of memory" };
                                workspace_op_finish(op, &o);
                                return;
                        }
                }
                if (op->keep_files) {
                        _cleanup_json_ json_object *req = json_object_new_object();
                        json_add_string(req, "op", "snapshot");
                        json_add_int(req, "max_bytes", SNAPSHOT_MAX);
                        op->phase = PHASE_SNAPSHOT;
                        k = send_request(sb, req);
                } else {
                        op->phase = PHASE_STARTING;
                        workspace_stop(sb);
                        workspace_switch_env(sb);
                        k = workspace_spawn(sb);
                }
                (void) arm_op_timer(sb, INTERNAL_TIMEOUT_USEC);
                if (k != 0) {
                        WorkspaceOpOutcome o = { .error = "the sandbox could not be restarted", .reset = true };
                        workspace_op_finish(op, &o);
                }
                return;
        }

        /* A cell runs code as a run does: it holds a run slot (max-runs, max-runs-per-user) while it runs, and
         * waits its turn in the same queue. */
        if (op_is_cell(op) && !sched_ticket_held(&sb->run_slot)) {
                if (sched_ticket_waiting(&sb->run_slot))
                        return;
                k = runtime_acquire_slot(sb->registry->runtime, &sb->run_slot, sb->uid, on_run_slot, sb);
                if (k == SCHEDULER_QUEUED)
                        return;
                if (k != 0) {
                        _cleanup_free_ char *unread = NULL;
                        const char *why = "out of memory";

                        if (k == SCHEDULER_REPLIES_UNREAD)
                                why = unread = runtime_replies_unread_message(sb->registry->runtime, sb->uid);
                        else if (k == SCHEDULER_USER_QUEUE_FULL)
                                why = "you have the most runs waiting that one user may have (max-queue, shared as "
                                      "max-runs-per-user); try again when one has finished";
                        else if (k == SCHEDULER_QUEUE_FULL)
                                why = "the server is busy: its run queue is full (max-queue); try again in a little "
                                      "while";
                        WorkspaceOpOutcome o = { .error = why ?: "out of memory" };
                        workspace_op_finish(op, &o);
                        return;
                }
        }

        op->phase = PHASE_SENT;
        k = send_request(sb, op->request);
        (void) arm_op_timer(sb, op->timeout_usec);
        if (k < 0) {
                WorkspaceOpOutcome o = { .error = "the request could not be sent to the sandbox" };
                workspace_op_finish(op, &o);
        }
}

static int on_defer(sd_event_source *s, void *userdata) {
        _cleanup_(workspace_unrefp) Workspace *sb = workspace_ref(userdata);

        dispatch(sb);
        workspace_cpu_update(sb);
        return 0;
}

void workspace_schedule_dispatch(Workspace *sb) {
        if (sb->closed)
                return;
        if (!sb->defer) {
                if (sd_event_add_defer(sb->registry->event, &sb->defer, on_defer, sb) < 0)
                        return;
        }
        (void) sd_event_source_set_enabled(sb->defer, SD_EVENT_ONESHOT);
}

int workspace_op_queue(Workspace *sb, WorkspaceOp *op, WorkspaceOp **ret) {
        WorkspaceOp **p = &sb->ops;

        op->sandbox = sb;
        while (*p)
                p = &(*p)->next;
        *p = op;
        sb->used_usec = now_usec();
        workspace_schedule_dispatch(sb);
        if (ret)
                *ret = op;
        return 0;
}

int workspace_request(Workspace *sb, json_object *request, uint64_t timeout_usec, WorkspaceReplyFunc cb, void *userdata,
                      WorkspaceOp **ret) {
        if (sb->closed)
                return WORKSPACE_CLOSED;
        WorkspaceOp *op = calloc(1, sizeof(*op));
        if (!op)
                return -ENOMEM;
        *op = (WorkspaceOp) {
                .kind = OP_REQUEST,
                .request = json_object_get(request),
                .timeout_usec = timeout_usec ?: INTERNAL_TIMEOUT_USEC,
                .cb = cb,
                .userdata = userdata,
        };
        return workspace_op_queue(sb, op, ret);
}

int workspace_reset(Workspace *sb, WorkspaceReplyFunc cb, void *userdata, WorkspaceOp **ret) {
        RequirementList reqs = {};

        if (sb->closed)
                return WORKSPACE_CLOSED;
        WorkspaceOp *op = calloc(1, sizeof(*op));
        if (!op)
                return -ENOMEM;
        /* All of the base requirements or no reset: a restart on fewer would be another environment. */
        for (size_t i = 0; i < sb->base_reqs.n; i++)
                if (requirement_list_append(&reqs, sb->base_reqs.items[i].canonical, NULL) < 0) {
                        requirement_list_done(&reqs);
                        free(op);
                        return -ENOMEM;
                }
        free(sb->next_env);
        sb->next_env = strdup(sb->base_env);
        sb->next_hold = envstore_hold_release(sb->next_hold);   /* the base one is held as long as the sandbox */
        requirement_list_done(&sb->next_reqs);
        sb->next_reqs = reqs;
        *op = (WorkspaceOp) { .kind = OP_RESTART, .keep_files = false, .cb = cb, .userdata = userdata };
        return workspace_op_queue(sb, op, ret);
}

void workspace_op_cancel(WorkspaceOp *op) {
        if (!op)
                return;
        op->cb = NULL;
        if (op->phase == PHASE_QUEUED) {
                Workspace *sb = op->sandbox;
                op_unlink(op);
                op_free(op);
                workspace_schedule_dispatch(sb);    /* what it waited for goes back, or to the next */
                return;
        }
        /* Running: stop the cell now, as a timeout would (the state is kept if it stops). */
        if (op->kind == OP_REQUEST && op->phase == PHASE_SENT && op->sandbox->op_timer)
                (void) arm_op_timer(op->sandbox, 1);
}
