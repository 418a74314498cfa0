/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "runtime/script.h"
#include "strv.h"
#include "tools.h"

typedef struct Validation {
        ToolCall *call;
        ScriptAnalysis *analysis;
} Validation;

static void validation_free(Validation *v) {
        script_analysis_cancel(v->analysis);
        tool_call_unref(v->call);
        free(v);
}


static void on_plan(ScriptPlan *plan, void *userdata) {
        Validation *v = userdata;
        _cleanup_(script_plan_freep) ScriptPlan *p = plan;
        _cleanup_free_ char *text = NULL;
        json_object *st = json_object_new_object(), *deps = json_object_new_array(),
                    *warnings = json_object_new_array();

        v->analysis = NULL;
        for (size_t i = 0; p->warnings && p->warnings[i]; i++)
                json_object_array_add(warnings, json_object_new_string(p->warnings[i]));

        if (p->error) {
                strextendf(&text, "INVALID: %s\n", p->error);
                json_add_bool(st, "valid", false);
                json_add_string(st, "error", p->error);
        } else {
                strextendf(&text, "VALID\n");
                if (p->requires_python)
                        strextendf(&text, "requires-python: %s\n", p->requires_python);
                if (p->requirements.n == 0)
                        strextendf(&text, "dependencies: none\n");
                else
                        strextendf(&text, "dependencies (%zu):\n", p->requirements.n);
                for (size_t i = 0; i < p->requirements.n; i++) {
                        strextendf(&text, "  - %s\n", p->requirements.items[i].canonical);
                        json_object_array_add(deps, json_object_new_string(p->requirements.items[i].canonical));
                }
                json_add_bool(st, "valid", true);
                if (p->python) {
                        strextendf(&text, "python: %s\n", p->python->version);
                        strextendf(&text, "environment: %s\n",
                                p->warm ? "warm (already prepared: the run starts at once)"
                                        : "not prepared yet (the first run installs the dependencies)");
                        json_add_string(st, "python", p->python->version);
                        json_add_string(st, "environment_key", p->key);
                        json_add_bool(st, "warm", p->warm);
                } else {
                        strextendf(&text, "python: %s, not installed here yet (the first run installs it)\n",
                                   p->python_install);
                        json_add_string(st, "python_install", p->python_install);
                        json_add_bool(st, "warm", false);
                }
        }
        for (size_t i = 0; p->warnings && p->warnings[i]; i++)
                strextendf(&text, "warning: %s\n", p->warnings[i]);

        if (p->requires_python)
                json_add_string(st, "requires_python", p->requires_python);
        else
                json_add(st, "requires_python", json_object_new_null());
        json_add(st, "dependencies", deps);
        json_add(st, "warnings", warnings);

        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(text ?: ""));
        tool_call_finish(v->call, content, st, p->error != NULL);
        validation_free(v);
}

static void on_cancel(ToolCall *call, void *userdata) {
        validation_free(userdata);
}

static int validate_script_call(ToolCall *call, json_object *args) {
        ToolServices *svc = call->server_userdata;
        json_object *script = json_get(args, "script", json_type_string);
        Validation *v;
        int k;

        v = calloc(1, sizeof(*v));
        if (!v)
                return -ENOMEM;
        v->call = tool_call_ref(call);
        k = script_analyze(svc->runtime, v->call->uid, json_object_get_string(script), (size_t) json_object_get_string_len(script),
                           json_get(args, "dependencies", json_type_array), json_get_string(args, "python_version"),
                           on_plan, v, &v->analysis);
        if (k < 0) {
                validation_free(v);
                return k;
        }
        script_analysis_set_dry_run(v->analysis);
        tool_call_set_cancel(call, on_cancel, v);
        return 0;
}

static const char input_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"script\":{\"type\":\"string\",\"description\":\"The Python script whose metadata to check.\"},"
        "\"dependencies\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":1024},\"maxItems\":256,"
        "\"description\":\"Extra PEP 508 requirements, as for execute_python.\"},"
        "\"python_version\":{\"type\":[\"string\",\"null\"],\"maxLength\":32,\"description\":\"Python to check "
        "against, as for execute_python.\"}"
        "},\"required\":[\"script\"],\"additionalProperties\":false}";

const Tool tool_validate_script = {
        .name = "validate_script",
        .title = "Check a script's dependencies without running it",
        .description =
                "Check a Python script's PEP 723 metadata and the dependencies argument without running any code: "
                "the block syntax, the TOML, each requirement (PEP 508), requires-python against the Pythons this "
                "server has, and whether the environment is already prepared (then execute_python starts at "
                "once). Answers VALID with the merged dependency list, or INVALID: <reason>.\n\n"
                "Example: {\"script\": \"# /// script\\n# dependencies = [\\\"pandas>=2\\\"]\\n# ///\\nimport "
                "pandas\"}",
        .input_schema = input_schema,
        .read_only_hint = true,
        .destructive_hint = false,
        .idempotent_hint = true,
        .open_world_hint = false,
        .call = validate_script_call,
};
