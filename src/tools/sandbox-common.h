/* SPDX-License-Identifier: MIT */
#pragma once

/* What the persistent-sandbox tools share: finding the caller's sandbox, one request in flight, answers. */

#include <json-c/json.h>
#include <stdint.h>

#include "mcp/tool.h"
#include "workspace/workspace.h"

typedef struct WsCall WsCall;
typedef void (*WsReplyFunc)(WsCall *c, const WorkspaceOpOutcome *o);
typedef void (*WsCancelFunc)(WsCall *c);

struct WsCall {
        ToolCall *call;
        Workspace *sandbox;
        WorkspaceOp *op;
        WorkspacePrepare *prepare;
        WsReplyFunc reply;
        WsCancelFunc cancelled;         /* optional: the client cancelled the call or went away */
        char *script;                   /* execute_code's cell, for the run log */
        size_t script_len;
        uint64_t t_start;
        uint64_t timeout_usec;
        bool timeout_clamped;
};

/* The caller's sandbox named by arguments.sandbox_id; else answers the call with an error and returns NULL. */
Workspace *ws_lookup(ToolCall *call, json_object *args);
/* Answer with isError and {"error": message}. */
void ws_fail(ToolCall *call, const char *format, ...) __attribute__((format(printf, 2, 3)));
/* A new WsCall holding a reference to call, with a cancel hook. */
WsCall *ws_call_new(ToolCall *call, Workspace *sb);
WsCall *ws_call_free(WsCall *c);
/* Send request to the sandbox's driver; c->reply runs with the outcome, then c is freed. 0, or what
 * workspace_request() returns when it starts nothing (then c->reply never runs). */
int ws_call_request(WsCall *c, json_object *request, uint64_t timeout_usec, WsReplyFunc reply);
/* What a tool's call returns when starting work on its sandbox gave k, not 0: -errno as it is; a documented
 * outcome (WORKSPACE_CLOSED) is answered with isError, and 0 returned. */
int ws_not_started(ToolCall *call, int k);
/* A driver reply's error (ok: false) or the outcome's, else NULL. */
const char *ws_outcome_error(const WorkspaceOpOutcome *o);
/* {"sandbox_id": ..., "python": ..., "packages": [...]}: the summary most answers carry. */
json_object *ws_summary(Workspace *sb);
/* Text for an answer: JSON pretty-printed. */
void ws_finish_json(ToolCall *call, json_object *structured, const char *headline, bool is_error);
