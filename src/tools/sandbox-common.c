/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json-util.h"
#include "macro.h"
#include "sandbox-common.h"
#include "time-util.h"
#include "tools.h"

void ws_fail(ToolCall *call, const char *format, ...) {
        _cleanup_free_ char *msg = NULL;
        va_list ap;

        va_start(ap, format);
        if (vasprintf(&msg, format, ap) < 0)
                msg = NULL;
        va_end(ap);
        json_object *st = json_object_new_object();
        json_add_string(st, "error", msg ?: "failed");
        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(msg ?: "failed"));
        tool_call_finish(call, content, st, true);
}

Workspace *ws_lookup(ToolCall *call, json_object *args) {
        const ToolServices *svc = call->server_userdata;
        const char *id = json_get_string(args, "sandbox_id");
        Workspace *sb = workspace_find(svc->workspaces, id, call->uid);

        if (!sb) {
                /* The same answer for an unknown id and another user's: nothing to learn from it. */
                ws_fail(call,
                        "no sandbox with id \"%s\": it may have been closed, or reaped after being idle; create one "
                        "with create_sandbox",
                        strempty(id));
                return NULL;
        }
        workspace_touch(sb);
        return sb;
}

static void on_cancel(ToolCall *call, void *userdata) {
        WsCall *c = userdata;

        if (c->cancelled)
                c->cancelled(c);
        ws_call_free(c);
}

WsCall *ws_call_new(ToolCall *call, Workspace *sb) {
        WsCall *c = calloc(1, sizeof(*c));
        if (!c)
                return NULL;
        c->call = tool_call_ref(call);
        c->sandbox = sb;
        c->t_start = now_usec();
        tool_call_set_cancel(call, on_cancel, c);
        return c;
}

WsCall *ws_call_free(WsCall *c) {
        if (!c)
                return NULL;
        tool_call_set_cancel(c->call, NULL, NULL);
        workspace_op_cancel(c->op);
        workspace_prepare_cancel(c->prepare);
        tool_call_unref(c->call);
        free(c->script);
        free(c);
        return NULL;
}

static void on_reply(Workspace *sb, const WorkspaceOpOutcome *o, void *userdata) {
        WsCall *c = userdata;

        c->op = NULL;
        c->reply(c, o);
        ws_call_free(c);
}

int ws_call_request(WsCall *c, json_object *request, uint64_t timeout_usec, WsReplyFunc reply) {
        c->reply = reply;
        return workspace_request(c->sandbox, request, timeout_usec, on_reply, c, &c->op);
}

int ws_not_started(ToolCall *call, int k) {
        if (k < 0)
                return k;
        ws_fail(call, "%s",
                k == WORKSPACE_CLOSED ? "the sandbox was closed" : "the sandbox could not take the request");
        return 0;
}

const char *ws_outcome_error(const WorkspaceOpOutcome *o) {
        if (o->error)
                return o->error;
        if (!o->reply)
                return "the sandbox gave no answer";
        if (!json_object_get_boolean(json_get(o->reply, "ok", json_type_boolean)))
                return json_get_string(o->reply, "error") ?: "failed";
        return NULL;
}

json_object *ws_summary(Workspace *sb) {
        json_object *st = json_object_new_object(), *pk = json_object_new_array();
        const RequirementList *reqs = workspace_requirements(sb);

        json_add_string(st, "sandbox_id", workspace_id(sb));
        if (workspace_python_version(sb))
                json_add_string(st, "python", workspace_python_version(sb));
        for (size_t i = 0; i < reqs->n; i++)
                json_object_array_add(pk, json_object_new_string(reqs->items[i].canonical));
        json_add(st, "requirements", pk);
        return st;
}

void ws_finish_json(ToolCall *call, json_object *structured, const char *headline, bool is_error) {
        _cleanup_free_ char *text = NULL;
        const char *j = json_object_to_json_string_ext(structured, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);

        if (asprintf(&text, "%s%s%s", strempty(headline), headline ? "\n" : "", j) < 0)
                text = NULL;
        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(text ?: ""));
        tool_call_finish(call, content, structured, is_error);
}
