/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "script.h"
#include "strv.h"

struct ScriptAnalysis {
        Runtime *runtime;
        uid_t uid;
        ScriptPlan *plan;
        json_object *dependencies;
        char *python_version;
        WaitEntry *ready_wait;
        TomlRequest *toml;
        RuntimePythonRequest *install;
        bool installed;                 /* a Python was installed for it: no second try */
        char *choose_error;             /* why none of the Pythons there was fit, before the install */
        bool dry_run;
        ScriptProgressFunc progress;
        void *progress_userdata;
        sd_event_source *defer;
        ScriptPlanFunc cb;
        void *userdata;
};

ScriptPlan *script_plan_free(ScriptPlan *p) {
        if (!p)
                return NULL;
        pep723_block_done(&p->block);
        requirement_list_done(&p->requirements);
        free(p->requires_python);
        free(p->python_install);
        envstore_hold_release(p->env_hold);
        free(p->env_path);
        strv_free(p->warnings);
        free(p->error);
        free(p);
        return NULL;
}

static void analysis_free(ScriptAnalysis *a) {
        if (!a)
                return;
        waitq_cancel(a->ready_wait);
        runtime_toml_cancel(a->toml);
        runtime_install_python_cancel(a->install);
        free(a->choose_error);
        sd_event_source_disable_unref(a->defer);
        script_plan_free(a->plan);
        json_object_put(a->dependencies);
        free(a->python_version);
        free(a);
}

static void choose_python(ScriptAnalysis *a);

void script_analysis_set_progress(ScriptAnalysis *a, ScriptProgressFunc f, void *userdata) {
        a->progress = f;
        a->progress_userdata = userdata;
}

void script_analysis_set_dry_run(ScriptAnalysis *a) {
        a->dry_run = true;
}

void script_analysis_cancel(ScriptAnalysis *a) {
        analysis_free(a);
}

static void deliver(ScriptAnalysis *a) {
        ScriptPlan *p = TAKE_PTR(a->plan);
        ScriptPlanFunc cb = a->cb;
        void *ud = a->userdata;

        analysis_free(a);
        cb(p, ud);
}

static void fail(ScriptAnalysis *a, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void fail(ScriptAnalysis *a, const char *format, ...) {
        va_list ap;

        free(a->plan->error);
        va_start(ap, format);
        if (vasprintf(&a->plan->error, format, ap) < 0)
                a->plan->error = strdup("invalid script");
        va_end(ap);
        deliver(a);
}

static void on_python_install(const char *error, void *userdata) {
        ScriptAnalysis *a = userdata;

        a->install = NULL;
        a->installed = true;
        if (error)
                return fail(a, "%s. uv could not install it (python-downloads is on):\n%s",
                            a->choose_error ?: "no suitable Python", error);
        choose_python(a);
}

/* Have uv install the Python the call asks for (what, e.g. "3.12" or ">=3.12"). */
static int install_python(ScriptAnalysis *a, const char *what, const char *label) {
        int r;

        r = runtime_install_python(a->runtime, a->uid, what, on_python_install, a, &a->install);
        if (r < 0)
                return r;
        if (a->progress) {
                _cleanup_free_ char *m = NULL;
                if (asprintf(&m, "installing Python %s", label) >= 0)
                        a->progress(m, a->progress_userdata);
        }
        return 0;
}

static void choose_python(ScriptAnalysis *a) {
        ScriptPlan *p = a->plan;
        Runtime *r = a->runtime;
        _cleanup_free_ char *err = NULL;
        const char *want = a->python_version ?: p->requires_python;

        p->python = pythons_choose(runtime_pythons(r), a->python_version, p->requires_python, &err);
        if (!p->python && want && !a->installed) {
                if (!runtime_python_downloads(r))
                        return fail(a, "%s. The administrator has not let this service install other Pythons "
                                    "(python-downloads); ask for one of those available",
                                    err ?: "no suitable Python");
                if (a->dry_run) {
                        p->python_install = strdup(want);
                        if (!p->python_install)
                                return fail(a, "out of memory");
                        return deliver(a);
                }
                a->choose_error = TAKE_PTR(err);
                int k = install_python(a, want, want);
                if (k == -EINVAL)
                        return fail(a, "%s; \"%s\" is no version this service can install",
                                    a->choose_error ?: "no suitable Python", want);
                if (k < 0)
                        return fail(a, "%s; installing one failed: %s", a->choose_error ?: "no suitable Python",
                                    strerror(-k));
                return;
        }
        if (!p->python)
                return fail(a, "%s", err ?: "no suitable Python");
        /* One of ours whose files the store collected since: the same version again, at the same place. */
        if (runtime_python_installed(r, p->python) && access(p->python->executable, X_OK) < 0 && !a->installed) {
                int k = install_python(a, p->python->version, p->python->version);
                if (k < 0)
                        return fail(a, "Python %s was removed from the store, and installing it again failed: %s",
                                    p->python->version, strerror(-k));
                return;
        }

        envstore_key(runtime_envstore(r), p->python, &p->requirements, p->key);
        p->env_path = envstore_lookup(runtime_envstore(r), p->key);
        p->env_hold = envstore_hold(runtime_envstore(r), p->env_path);
        p->warm = p->env_path != NULL;
        deliver(a);
}

static void finish_plan(ScriptAnalysis *a, RequirementList *inline_reqs) {
        ScriptPlan *p = a->plan;
        _cleanup_(requirement_list_done) RequirementList params = {};
        _cleanup_free_ char *err = NULL;

        for (size_t i = 0; a->dependencies && i < json_object_array_length(a->dependencies); i++) {
                const char *spec = json_object_get_string(json_object_array_get_idx(a->dependencies, i));
                if (requirement_list_append(&params, spec, &err) < 0)
                        return fail(a, "dependencies[%zu]: %s", i, err ?: "invalid requirement");
        }
        p->n_inline = inline_reqs->n;
        p->n_param = params.n;
        /* For the same package, the dependencies argument wins over the inline list. */
        if (requirement_list_merge(inline_reqs, &params, &p->requirements) < 0)
                return fail(a, "out of memory");

        choose_python(a);
}

static void on_toml(json_object *doc, const char *error, void *userdata) {
        ScriptAnalysis *a = userdata;
        ScriptPlan *p = a->plan;
        _cleanup_(requirement_list_done) RequirementList inline_reqs = {};
        _cleanup_free_ char *err = NULL;
        json_object *v;

        a->toml = NULL;
        if (error)
                return fail(a, "the '# /// script' block (line %u) could not be read as TOML: %s", p->block.start_line, error);

        json_object_object_foreach(doc, key, val) {
                (void) val;
                if (streq(key, "dependencies") || streq(key, "requires-python"))
                        continue;
                if (streq(key, "tool")) {
                        if (!runtime_config(a->runtime)->allow_tool_table)
                                return fail(a,
                                            "the script metadata has a [tool] table, which this service refuses: "
                                            "[tool.uv] could redirect the package index, the cache and the sources. "
                                            "Remove the [tool] table");
                        strv_extend(&p->warnings, "the [tool] table in the script metadata is ignored");
                        continue;
                }
                strv_extendf(&p->warnings, "unknown key \"%s\" in the script metadata is ignored", key);
        }

        if (json_object_object_get_ex(doc, "requires-python", &v)) {
                if (!json_object_is_type(v, json_type_string))
                        return fail(a, "requires-python in the script metadata must be a string");
                p->requires_python = strdup(json_object_get_string(v));
        }

        if (json_object_object_get_ex(doc, "dependencies", &v)) {
                if (!json_object_is_type(v, json_type_array))
                        return fail(a, "dependencies in the script metadata must be a list of strings");
                for (size_t i = 0; i < json_object_array_length(v); i++) {
                        json_object *e = json_object_array_get_idx(v, i);
                        if (!json_object_is_type(e, json_type_string))
                                return fail(a, "dependencies in the script metadata must be a list of strings");
                        if (requirement_list_append(&inline_reqs, json_object_get_string(e), &err) < 0)
                                return fail(a, "script metadata, dependency %zu: %s", i + 1, err ?: "invalid");
                }
        }
        finish_plan(a, &inline_reqs);
}

static void analyze(ScriptAnalysis *a) {
        ScriptPlan *p = a->plan;
        int r;

        if (!p->block.toml) {
                RequirementList none = {};
                return finish_plan(a, &none);
        }
        r = runtime_parse_toml(a->runtime, a->uid, p->block.toml, on_toml, a, &a->toml);
        if (r < 0)
                fail(a, "the script metadata could not be read: %s", strerror(-r));
}

static void on_ready(void *userdata) {
        ScriptAnalysis *a = userdata;
        a->ready_wait = NULL;
        analyze(a);
}

static int on_start(sd_event_source *s, void *userdata) {
        ScriptAnalysis *a = userdata;

        a->defer = sd_event_source_disable_unref(a->defer);
        if (a->plan->error)
                deliver(a);
        else if (!runtime_is_ready(a->runtime)) {
                a->ready_wait = runtime_when_ready(a->runtime, on_ready, a);
                if (!a->ready_wait)
                        fail(a, "out of memory");
        } else
                analyze(a);
        return 0;
}

int script_analyze(Runtime *r, uid_t uid, const char *script, size_t len, json_object *dependencies, const char *python_version,
                   ScriptPlanFunc cb, void *userdata, ScriptAnalysis **ret) {
        ScriptAnalysis *a;
        _cleanup_free_ char *err = NULL;
        int k;

        a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        a->runtime = r;
        a->uid = uid;
        a->cb = cb;
        a->userdata = userdata;
        a->plan = calloc(1, sizeof(ScriptPlan));
        a->dependencies = json_object_get(dependencies);
        a->python_version = python_version ? strdup(python_version) : NULL;
        if (!a->plan || !(a->plan->warnings = strv_new())) {
                analysis_free(a);
                return -ENOMEM;
        }

        if (pep723_extract(script, len, &a->plan->block, &err) < 0)
                a->plan->error = strdup(err ?: "the script metadata is invalid");

        /* The callback never runs from inside this call: the work starts from the loop. */
        k = sd_event_add_defer(runtime_event(r), &a->defer, on_start, a);
        if (k < 0) {
                analysis_free(a);
                return k;
        }
        *ret = a;
        return 0;
}
