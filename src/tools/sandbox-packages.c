/* SPDX-License-Identifier: MIT */
/* install_package and list_installed_packages. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "pep723/pep508.h"
#include "sandbox-common.h"
#include "tools.h"

static void on_installed(Workspace *sb, const char *error, void *userdata) {
        WsCall *c = userdata;

        c->prepare = NULL;
        if (!sb || error) {
                ws_fail(c->call, "%s", error ?: "the sandbox was closed");
        } else {
                json_object *st = ws_summary(sb);
                json_add(st, "installed", workspace_installed_packages(sb));
                json_add_bool(st, "state_lost", true);
                json_add_bool(st, "files_kept", true);
                ws_finish_json(c->call, st,
                               "Packages installed. The interpreter was restarted on the new environment: variables "
                               "and imports are gone (run your setup code again); files in /work are kept.",
                               false);
        }
        ws_call_free(c);
}

static int install_call(ToolCall *call, json_object *args) {
        Workspace *sb = ws_lookup(call, args);
        json_object *pk = json_get(args, "packages", json_type_array);
        _cleanup_json_ json_object *all = json_object_new_array();
        const RequirementList *have;

        if (!sb)
                return 0;
        /* The environment's requirements = what it has + the new ones (for the same name the new one wins). */
        have = workspace_requirements(sb);
        for (size_t i = 0; i < have->n; i++)
                json_object_array_add(all, json_object_new_string(have->items[i].canonical));
        for (size_t i = 0; pk && i < json_object_array_length(pk); i++)
                json_object_array_add(all, json_object_get(json_object_array_get_idx(pk, i)));

        WsCall *c = ws_call_new(call, sb);
        if (!c)
                return -ENOMEM;
        int k = workspace_prepare(sb, all, NULL, on_installed, c, &c->prepare);
        if (k == WORKSPACE_BUSY) {
                ws_call_free(c);
                ws_fail(call, "another install into this sandbox is under way; try again when it is done");
                return 0;
        }
        if (k != 0) {
                ws_call_free(c);
                return ws_not_started(call, k);
        }
        return 0;
}

static const char install_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"sandbox_id\":{\"type\":\"string\",\"maxLength\":64},"
        "\"packages\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1024},"
        "\"minItems\":1,\"maxItems\":64,\"description\":\"PEP 508 requirements, e.g. [\\\"requests\\\", "
        "\\\"scipy>=1.11\\\"]\"}"
        "},\"required\":[\"sandbox_id\",\"packages\"],\"additionalProperties\":false}";

const Tool tool_install_package = {
        .name = "install_package",
        .title = "Install packages into a persistent sandbox",
        .description =
                "Add packages to a sandbox's environment (resolved and installed by the server from the package "
                "index, never by pip inside the sandbox). The interpreter is restarted on the new environment: "
                "variables and imports are lost, files in /work are kept. Prefer passing dependencies to "
                "create_sandbox when you know them up front.",
        .input_schema = install_schema,
        .open_world_hint = true,
        .call = install_call,
};

static int list_installed_call(ToolCall *call, json_object *args) {
        Workspace *sb = ws_lookup(call, args);
        if (!sb)
                return 0;
        json_object *st = ws_summary(sb);
        json_object *inst = workspace_installed_packages(sb);
        _cleanup_free_ char *head = NULL;
        if (asprintf(&head, "%d distributions installed.", json_object_object_length(inst)) < 0)
                head = NULL;
        json_add(st, "installed", inst);
        ws_finish_json(call, st, head, false);
        return 0;
}

static const char id_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"sandbox_id\":{\"type\":\"string\",\"maxLength\":64}"
        "},\"required\":[\"sandbox_id\"],\"additionalProperties\":false}";

const Tool tool_list_installed_packages = {
        .name = "list_installed_packages",
        .title = "List a sandbox's packages",
        .description = "The distributions installed in a sandbox's environment, name and version, and the "
                       "requirements it was built from.",
        .input_schema = id_schema,
        .read_only_hint = true,
        .idempotent_hint = true,
        .call = list_installed_call,
};
