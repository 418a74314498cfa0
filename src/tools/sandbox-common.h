/* SPDX-License-Identifier: MIT */
#pragma once

/* What the persistent-sandbox tools share: finding the caller's sandbox, one request in flight, answers. */

#include <json-c/json.h>
#include <stdint.h>

#include "mcp/tool.h"
#include "workspace/workspace.h"

typedef struct SbCall SbCall;
typedef void (*SbReplyFunc)(SbCall *c, const WorkspaceOpOutcome *o);
typedef void (*SbCancelFunc)(SbCall *c);

struct SbCall {
        ToolCall *call;
        Workspace *sandbox;
        WorkspaceOp *op;
        WorkspacePrepare *prepare;
        SbReplyFunc reply;
        SbCancelFunc cancelled;         /* optional: the client cancelled the call or went away */
        char *script;                   /* execute_code's cell, for the run log */
        size_t script_len;
        uint64_t t_start;
        uint64_t timeout_usec;
        bool timeout_clamped;
};

/* The caller's sandbox named by arguments.sandbox_id; else answers the call with an error and returns NULL. */
Workspace *sb_lookup(ToolCall *call, json_object *args);
/* Answer with isError and {"error": message}. */
void sb_fail(ToolCall *call, const char *format, ...) __attribute__((format(printf, 2, 3)));
/* A new SbCall holding a reference to call, with a cancel hook. */
SbCall *sb_call_new(ToolCall *call, Workspace *sb);
SbCall *sb_call_free(SbCall *c);
/* Send request to the sandbox's driver; c->reply runs with the outcome, then c is freed. 0, or what
 * workspace_request() returns when it starts nothing (then c->reply never runs). */
int sb_call_request(SbCall *c, json_object *request, uint64_t timeout_usec, SbReplyFunc reply);
/* What a tool's call returns when starting work on its sandbox gave k, not 0: -errno as it is; a documented
 * outcome (WORKSPACE_CLOSED) is answered with isError, and 0 returned. */
int sb_not_started(ToolCall *call, int k);
/* A driver reply's error (ok: false) or the outcome's, else NULL. */
const char *sb_outcome_error(const WorkspaceOpOutcome *o);
/* {"sandbox_id": ..., "python": ..., "packages": [...]}: the summary most answers carry. */
json_object *sb_summary(Workspace *sb);
/* Text for an answer: JSON pretty-printed. */
void sb_finish_json(ToolCall *call, json_object *structured, const char *headline, bool is_error);
