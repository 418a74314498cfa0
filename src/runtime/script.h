/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * From a script and a call's arguments to a plan: the PEP 723 block read and
 * checked, the requirements sanitized and merged, the interpreter chosen, the
 * environment key and whether it is warm. Shared by execute_python and
 * validate_script; runs no code from the request (TOML is read by the
 * interpreter's tomllib inside the sandbox, as data).
 */

#include <json-c/json.h>
#include <stdbool.h>

#include "runtime/runtime.h"
#include "pep723/pep508.h"
#include "pep723/pep723.h"

typedef struct ScriptPlan {
        Pep723Block block;
        RequirementList requirements;   /* merged, sorted by name */
        size_t n_inline, n_param;
        char *requires_python;
        char **warnings;
        const Python *python;           /* NULL only in a dry run that would install one: */
        char *python_install;           /* what it would have uv install ("3.12", ">=3.12") */
        char key[65];
        bool warm;
        char *env_path;                 /* the built environment when warm (looked up once) */
        EnvHold *env_hold;              /* the store keeps it while the plan lives */
        char *error;                    /* set when the script or arguments are invalid */
} ScriptPlan;

typedef struct ScriptAnalysis ScriptAnalysis;
/* The plan is handed over: the callee owns it (script_plan_free). */
typedef void (*ScriptPlanFunc)(ScriptPlan *plan, void *userdata);

/* uid: whose call it is; the metadata reader it may need is charged to it (scheduler.h). */
int script_analyze(Runtime *r, uid_t uid, const char *script, size_t len, json_object *dependencies, const char *python_version,
                   ScriptPlanFunc cb, void *userdata, ScriptAnalysis **ret);
void script_analysis_cancel(ScriptAnalysis *a);
/* What the analysis is busy with when that takes a while (installing a Python), for the call's progress. */
typedef void (*ScriptProgressFunc)(const char *what, void *userdata);
void script_analysis_set_progress(ScriptAnalysis *a, ScriptProgressFunc f, void *userdata);
/* Say what would be installed (plan->python_install) instead of installing it (validate_script). */
void script_analysis_set_dry_run(ScriptAnalysis *a);
ScriptPlan *script_plan_free(ScriptPlan *p);
static inline void script_plan_freep(ScriptPlan **p) {
        if (*p)
                script_plan_free(*p);
}
