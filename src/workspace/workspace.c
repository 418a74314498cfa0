/* SPDX-License-Identifier: MIT */
/*
 * Persistent sandboxes: the Workspace object (its references), the registry and its quotas, idle and time-to-live
 * reaping, closing, and the facts the tools read. The rest of the module is in ops.c, spawn.c, wire.c and prepare.c
 * (see workspace-internal.h).
 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "fs-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "time-util.h"
#include "workspace-internal.h"

static void reap_arm(Workspace *sb);

Workspace *workspace_ref(Workspace *sb) {
        if (sb)
                sb->n_ref++;
        return sb;
}

Workspace *workspace_unref(Workspace *sb) {
        if (!sb)
                return NULL;
        assert(sb->n_ref > 0);
        if (--sb->n_ref > 0)
                return NULL;
        /* Only workspace_close() drops the registry's reference: the process and the event sources are gone. */
        assert(sb->closed && !sb->proc && !sb->io && !sb->defer && !sb->ops && !sb->prepare);
        requirement_list_done(&sb->base_reqs);
        requirement_list_done(&sb->reqs);
        requirement_list_done(&sb->next_reqs);
        envstore_hold_release(sb->base_hold);
        envstore_hold_release(sb->env_hold);
        envstore_hold_release(sb->next_hold);
        free(sb->base_env);
        for (size_t i = 0; i < sb->n_data; i++) {
                safe_close(sb->data_fds[i]);
                free(sb->data_dests[i]);
        }
        free(sb->env);
        free(sb->next_env);
        free(sb->broken);
        free(sb);
        return NULL;
}

/* ---- registry ------------------------------------------------------------ */

int workspace_registry_new(WorkspaceRegistry **ret, Runtime *r) {
        WorkspaceRegistry *reg = calloc(1, sizeof(*reg));

        if (!reg)
                return -ENOMEM;
        reg->event = sd_event_ref(runtime_event(r));
        reg->config = runtime_config(r);
        reg->runtime = r;
        reg->spawn = runtime_spawn_in_bwrap;
        *ret = reg;
        return 0;
}

WorkspaceRegistry *workspace_registry_free(WorkspaceRegistry *reg) {
        if (!reg)
                return NULL;
        while (reg->list)
                workspace_close(reg->list);
        sd_event_unref(reg->event);
        free(reg);
        return NULL;
}

bool workspace_registry_busy(const WorkspaceRegistry *reg) {
        return reg && reg->n > 0;
}

unsigned workspace_registry_count(const WorkspaceRegistry *reg, uid_t uid) {
        unsigned n = 0;
        for (Workspace *sb = reg->list; sb; sb = sb->next)
                n += sb->uid == uid;
        return n;
}

void workspace_registry_foreach(WorkspaceRegistry *reg, uid_t uid, void (*cb)(Workspace *sb, void *userdata),
                                void *userdata) {
        for (Workspace *sb = reg->list, *next; sb; sb = next) {
                next = sb->next;
                if (sb->uid == uid)
                        cb(sb, userdata);
        }
}

Workspace *workspace_find(WorkspaceRegistry *reg, const char *id, uid_t uid) {
        if (!id || strlen(id) != WORKSPACE_ID_LEN)
                return NULL;
        for (Workspace *sb = reg->list; sb; sb = sb->next)
                /* Another user's sandbox does not exist for this caller. */
                if (sb->uid == uid && streq(sb->id, id))
                        return sb;
        return NULL;
}

static int on_reap(sd_event_source *s, uint64_t usec, void *userdata) {
        Workspace *sb = userdata;
        const Config *c = sb->registry->config;
        uint64_t now = now_usec();
        bool expired = sb->ttl_usec > 0 && now >= sb->created_usec + sb->ttl_usec;

        if (!expired && (sb->ops || sb->prepare)) {
                /* Busy: working counts as use. */
                sb->used_usec = now;
                reap_arm(sb);
                return 0;
        }
        if (!expired && now < sb->used_usec + c->sandbox_idle_timeout_usec) {
                reap_arm(sb);
                return 0;
        }
        log_info("Closing sandbox %.8s… of uid " UID_FMT ": %s.", sb->id, sb->uid,
                 expired ? "its time to live is over" : "idle for too long");
        workspace_close(sb);
        return 0;
}

static void reap_arm(Workspace *sb) {
        const Config *c = sb->registry->config;
        uint64_t when = UINT64_MAX;

        if (sb->closed)
                return;
        if (c->sandbox_idle_timeout_usec > 0)
                when = sb->used_usec + c->sandbox_idle_timeout_usec;
        if (sb->ttl_usec > 0)
                when = MIN(when, sb->created_usec + sb->ttl_usec);
        if (when == UINT64_MAX) {
                if (sb->reap_timer)
                        (void) sd_event_source_set_enabled(sb->reap_timer, SD_EVENT_OFF);
                return;
        }
        if (!sb->reap_timer) {
                if (sd_event_add_time(sb->registry->event, &sb->reap_timer, CLOCK_MONOTONIC, when, USEC_PER_SEC / 10,
                                      on_reap, sb) < 0)
                        log_warning("No reaping timer for sandbox %.8s…; it lives until closed.", sb->id);
                return;
        }
        (void) sd_event_source_set_time(sb->reap_timer, when);
        (void) sd_event_source_set_enabled(sb->reap_timer, SD_EVENT_ONESHOT);
}

void workspace_touch(Workspace *sb) {
        sb->used_usec = now_usec();
        /* Tell the store the environment is in use, so its collection (least recently used first) spares it. */
        if (sb->env) {
                char marker[PATH_MAX];
                snprintf(marker, sizeof(marker), "%s/.mcp-python-sandbox-env.json", sb->env);
                (void) utimensat(AT_FDCWD, marker, NULL, 0);
        }
}

int workspace_new(WorkspaceRegistry *reg, uid_t uid, uint64_t ttl_usec, Workspace **ret) {
        Runtime *r = reg->runtime;
        const Config *c = reg->config;
        uint8_t raw[WORKSPACE_ID_LEN / 2];
        Workspace *sb;
        int k;

        /* The driver and the file tools hold on to /work and a sandbox around it: without one, no persistent
         * sandbox. Those started before a reload turned unsafe-no-sandbox on stay sandboxed. */
        if (runtime_unsandboxed(r))
                return WORKSPACE_UNSANDBOXED;
        /* 0 turns persistent sandboxes off (for everybody, or per user), as it always did. */
        if (c->max_sandboxes_per_user == 0)
                return WORKSPACE_USER_QUOTA;
        if (c->max_sandboxes == 0)
                return WORKSPACE_TOTAL_QUOTA;
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t) sizeof(raw))
                return -EIO;

        sb = calloc(1, sizeof(*sb));
        if (!sb)
                return -ENOMEM;
        /* An open sandbox holds its place in the scheduler: max-sandboxes-per-user and max-sandboxes. */
        Scheduler *sched = runtime_scheduler(r);
        k = scheduler_try_acquire(sched, &sb->place, SCHED_WORKSPACE, uid);
        if (k != 0) {
                free(sb);
                if (k < 0)
                        return k;
                return scheduler_held_by(sched, SCHED_WORKSPACE, uid) >= c->max_sandboxes_per_user
                               ? WORKSPACE_USER_QUOTA
                               : WORKSPACE_TOTAL_QUOTA;
        }
        k = scheduler_loop_join(sched, &sb->loop, uid);
        if (k < 0) {
                scheduler_release(&sb->place);
                free(sb);
                return k;
        }
        sb->n_ref = 1;          /* the registry's */
        sb->registry = reg;
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(sb->id + 2 * i, 3, "%02x", raw[i]);
        sb->uid = uid;
        sb->sock = -EBADF;
        sb->status_fd = -EBADF;
        sb->worker_pidfd = -EBADF;
        sb->cpu_busy = -1;
        sb->created_usec = sb->used_usec = now_usec();
        sb->ttl_usec = MIN(ttl_usec, WORKSPACE_MAX_TTL_USEC);

        sb->next = sb->registry->list;
        if (sb->registry->list)
                sb->registry->list->prev = sb;
        sb->registry->list = sb;
        sb->registry->n++;
        reap_arm(sb);
        *ret = sb;
        return 0;
}

void workspace_fail_all(Workspace *sb, const char *error) {
        _unused_ _cleanup_(workspace_unrefp) Workspace *ref = workspace_ref(sb);

        while (sb->ops) {
                WorkspaceOpOutcome o = { .error = error };
                workspace_op_finish(sb->ops, &o);
        }
}

void workspace_close(Workspace *sb) {
        if (!sb || sb->closed)
                return;

        /* The callbacks below may close it again (a no-op now) or free what refers to it: hold it until the end. */
        _unused_ _cleanup_(workspace_unrefp) Workspace *ref = workspace_ref(sb);
        sb->closed = true;
        if (sb->prev)
                sb->prev->next = sb->next;
        else
                sb->registry->list = sb->next;
        if (sb->next)
                sb->next->prev = sb->prev;
        sb->next = sb->prev = NULL;
        sb->registry->n--;

        if (sb->prepare) {
                WorkspacePrepare *p = TAKE_PTR(sb->prepare);
                WorkspacePreparedFunc cb = p->cb;
                void *ud = p->userdata;
                p->cb = NULL;
                workspace_prepare_cancel(p);
                if (cb)
                        cb(NULL, "the sandbox was closed", ud);
        }
        workspace_fail_all(sb, "the sandbox was closed");
        workspace_stop(sb);
        sb->reap_timer = sd_event_source_disable_unref(sb->reap_timer);
        sb->op_timer = sd_event_source_disable_unref(sb->op_timer);
        sb->defer = sd_event_source_disable_unref(sb->defer);
        scheduler_release(&sb->run_slot);
        scheduler_release(&sb->carry);
        scheduler_release(&sb->place);
        scheduler_loop_leave(&sb->loop);
        workspace_unref(sb);    /* the registry's */
}

/* ---- facts ---------------------------------------------------------------------- */

char **workspace_network_refused_take(Workspace *sb) {
        return sb->netproxy ? net_proxy_refused_take(sb->netproxy) : NULL;
}

const char *workspace_id(const Workspace *sb) {
        return sb->id;
}
const char *workspace_python_version(const Workspace *sb) {
        return sb->python ? sb->python->version : NULL;
}
const char *workspace_env_path(const Workspace *sb) {
        return sb->env;
}
const RequirementList *workspace_requirements(const Workspace *sb) {
        return &sb->reqs;
}
bool workspace_network(const Workspace *sb) {
        return sb->network;
}
bool workspace_is_busy(const Workspace *sb) {
        return sb->ops != NULL || sb->prepare != NULL;
}
const char *workspace_state(const Workspace *sb) {
        if (sb->broken)
                return "broken";
        if (!sb->started || !sb->ready)
                return "starting";
        return sb->ops ? "busy" : "idle";
}
uint64_t workspace_age_usec(const Workspace *sb) {
        return now_usec() - sb->created_usec;
}
uint64_t workspace_idle_usec(const Workspace *sb) {
        return sb->ops ? 0 : now_usec() - sb->used_usec;
}
uint64_t workspace_expires_in_usec(const Workspace *sb) {
        const Config *c = sb->registry->config;
        uint64_t now = now_usec(), when = UINT64_MAX;

        if (c->sandbox_idle_timeout_usec > 0)
                when = sb->used_usec + c->sandbox_idle_timeout_usec;
        if (sb->ttl_usec > 0)
                when = MIN(when, sb->created_usec + sb->ttl_usec);
        return when == UINT64_MAX ? 0 : when > now ? when - now : 0;
}
uint64_t workspace_output_cap(const Workspace *sb) {
        return sb->registry->config->output_cap;
}
uint64_t workspace_default_timeout_usec(const Workspace *sb) {
        return sb->registry->config->default_timeout_usec;
}
uint64_t workspace_max_timeout_usec(const Workspace *sb) {
        return sb->registry->config->max_timeout_usec;
}

int64_t workspace_memory_kib(const Workspace *sb) {
        _cleanup_free_ char *s = NULL;
        char p[64];
        pid_t pid = -1;
        int k;

        if (sb->worker_pidfd < 0 || workspace_pidfd_signal(sb->worker_pidfd, 0) < 0 || !sb->proc)
                return -ESRCH;
        /* The pid behind our pidfd, from its fdinfo: no guessing. */
        snprintf(p, sizeof(p), "/proc/self/fdinfo/%d", sb->worker_pidfd);
        if (read_small_file(p, 4096, &s) < 0)
                return -ESRCH;
        char *l = strstr(s, "Pid:");
        if (!l || (pid = (pid_t) strtol(l + 4, NULL, 10)) <= 0)
                return -ESRCH;
        free(s);
        s = NULL;
        snprintf(p, sizeof(p), "/proc/%d/status", pid);
        k = read_small_file(p, 16384, &s);
        if (k < 0)
                return k;
        l = strstr(s, "\nVmRSS:");
        if (!l)
                return -ENODATA;
        return strtoll(l + 7, NULL, 10);
}

json_object *workspace_installed_packages(const Workspace *sb) {
        json_object *o = json_object_new_object();
        _cleanup_free_ char *lib = NULL;
        DIR *d;
        struct dirent *de;

        if (!sb->env || asprintf(&lib, "%s/lib", sb->env) < 0)
                return o;
        d = opendir(lib);
        while (d && (de = readdir(d))) {
                if (!startswith(de->d_name, "python"))
                        continue;
                _cleanup_free_ char *sp = NULL;
                if (asprintf(&sp, "%s/%s/site-packages", lib, de->d_name) < 0)
                        continue;
                DIR *s = opendir(sp);
                struct dirent *e;
                while (s && (e = readdir(s))) {
                        size_t n = strlen(e->d_name);
                        if (n < 11 || !streq(e->d_name + n - 10, ".dist-info"))
                                continue;
                        _cleanup_free_ char *base = strndup(e->d_name, n - 10);
                        char *dash = base ? strchr(base, '-') : NULL;
                        if (!dash)
                                continue;
                        *dash = 0;
                        json_add_string(o, base, dash + 1);
                }
                if (s)
                        closedir(s);
        }
        if (d)
                closedir(d);
        return o;
}
