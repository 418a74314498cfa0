/* SPDX-License-Identifier: MIT */
/*
 * Environments of a persistent sandbox: the requirements analysed and resolved like a script's, the environment
 * taken from the store or built, then the sandbox started on it (the first time) or restarted on it with /work
 * carried over (install_package).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "workspace-internal.h"


static void prepare_free(WorkspacePrepare *p) {
        if (!p)
                return;
        if (p->sandbox && p->sandbox->prepare == p)
                p->sandbox->prepare = NULL;
        script_analysis_cancel(p->analysis);
        envstore_waiter_cancel(p->env_waiter);
        workspace_op_cancel(p->restart);
        sd_event_source_disable_unref(p->defer);
        script_plan_free(p->plan);
        free(p->error);
        free(p);
}

void workspace_prepare_cancel(WorkspacePrepare *p) {
        prepare_free(p);
}

static void prepare_done(WorkspacePrepare *p, const char *error) {
        _cleanup_(workspace_unrefp) Workspace *sb = workspace_ref(p->sandbox);
        WorkspacePreparedFunc cb = p->cb;
        void *ud = p->userdata;
        _cleanup_free_ char *e = error ? strdup(error) : NULL;

        p->restart = NULL;
        prepare_free(p);
        if (cb)
                cb(sb, error ? (e ?: "failed") : NULL, ud);
}

static void on_restarted(Workspace *sb, const WorkspaceOpOutcome *o, void *userdata) {
        WorkspacePrepare *p = userdata;
        p->restart = NULL;
        prepare_done(p, o->error);
}

static void use_env(WorkspacePrepare *p, const char *path) {
        Workspace *sb = p->sandbox;
        ScriptPlan *plan = p->plan;

        if (!sb->started) {
                sb->python = plan->python;
                sb->base_env = strdup(path);
                sb->env = strdup(path);
                sb->base_hold = envstore_hold(runtime_envstore(sb->registry->runtime), path);
                sb->base_reqs = plan->requirements;
                plan->requirements = (RequirementList) {};
                for (size_t i = 0; i < sb->base_reqs.n; i++)
                        if (requirement_list_append(&sb->reqs, sb->base_reqs.items[i].canonical, NULL) < 0)
                                return prepare_done(p, "out of memory");
                if (!sb->base_env || !sb->env)
                        return prepare_done(p, "out of memory");
                int k = workspace_spawn(sb);
                if (k == WORKSPACE_NO_SANDBOX)
                        return prepare_done(p, runtime_self_test_error(sb->registry->runtime));
                if (k != 0)
                        return prepare_done(p, "the sandbox could not be started");
                return prepare_done(p, NULL);
        }

        if (streq(path, sb->env))
                return prepare_done(p, NULL);   /* nothing new */
        free(sb->next_env);
        sb->next_env = strdup(path);
        envstore_hold_release(sb->next_hold);
        sb->next_hold = envstore_hold(runtime_envstore(sb->registry->runtime), path);
        requirement_list_done(&sb->next_reqs);
        sb->next_reqs = plan->requirements;
        plan->requirements = (RequirementList) {};
        WorkspaceOp *op = calloc(1, sizeof(*op));
        if (!op || !sb->next_env) {
                free(op);
                return prepare_done(p, "out of memory");
        }
        *op = (WorkspaceOp) { .kind = OP_RESTART, .keep_files = true, .cb = on_restarted, .userdata = p };
        p->restart = op;
        (void) workspace_op_queue(sb, op, NULL);
}

static void on_env_ready(const EnvResult *res, void *userdata) {
        WorkspacePrepare *p = userdata;
        _cleanup_free_ char *m = NULL;

        p->env_waiter = NULL;
        if (res->error < 0) {
                if (asprintf(&m, "installing the packages failed:\n%s", strempty(res->message)) < 0)
                        m = NULL;
                return prepare_done(p, m ?: "installing the packages failed");
        }
        use_env(p, res->path);
}

static void on_plan(ScriptPlan *plan, void *userdata) {
        WorkspacePrepare *p = userdata;
        Workspace *sb = p->sandbox;
        EnvStore *store = runtime_envstore(sb->registry->runtime);
        _cleanup_free_ char *path = NULL;

        p->analysis = NULL;
        p->plan = plan;
        if (plan->error)
                return prepare_done(p, plan->error);
        if (runtime_self_test_error(sb->registry->runtime))
                return prepare_done(p, runtime_self_test_error(sb->registry->runtime));
        if (p->sandbox->started && plan->python != p->sandbox->python)
                return prepare_done(p, "the sandbox's Python is no longer available");
        path = TAKE_PTR(plan->env_path);
        if (path)
                return use_env(p, path);
        int k = envstore_prepare(store, p->sandbox->uid, plan->key, plan->python, &plan->requirements, on_env_ready, p, &p->env_waiter);
        if (k != 0)   /* an error, or ENVSTORE_SLOTS_FULL */
                prepare_done(p, "the environment could not be prepared");
}

int workspace_prepare(Workspace *sb, json_object *requirements, const char *python_version, WorkspacePreparedFunc cb,
                      void *userdata, WorkspacePrepare **ret) {
        WorkspacePrepare *p;
        int k;

        if (sb->closed)
                return WORKSPACE_CLOSED;
        if (sb->prepare)
                return WORKSPACE_BUSY;
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        *p = (WorkspacePrepare) { .sandbox = sb, .cb = cb, .userdata = userdata };
        k = script_analyze(sb->registry->runtime, sb->uid, "", 0, requirements,
                           sb->started ? sb->python->version : python_version, on_plan, p, &p->analysis);
        if (k < 0) {
                free(p);
                return k;
        }
        sb->prepare = p;
        if (ret)
                *ret = p;
        return 0;
}
