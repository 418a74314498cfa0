/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The tool registry's unit: one Tool per module (src/tools/), and the
 * ToolCall a handler receives. A handler may answer at once or much later
 * (after running processes); either way it ends with tool_call_finish().
 *
 * A ToolCall is shared by the session that received it and the handler's
 * work: each holds a reference. When the client cancels or disconnects, the
 * session runs the handler's cancel hook and detaches; a later
 * tool_call_finish() is then a no-op that only drops the work's state.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "charge.h"

typedef struct ToolCall ToolCall;
typedef struct McpSession McpSession;
typedef struct McpBatch McpBatch;

typedef struct Tool {
        const char *name;
        const char *title;
        const char *description;          /* written for the model that reads it */
        const char *input_schema;         /* JSON Schema text, type "object" */
        const char *output_schema;        /* JSON Schema text or NULL */
        bool read_only_hint;
        bool destructive_hint;
        bool idempotent_hint;
        bool open_world_hint;
        /* Returns 0 when the call was taken (it finishes now or later), or
         * -errno for an internal failure (answered with -32603). */
        int (*call)(ToolCall *call, json_object *arguments);
} Tool;

/* File descriptors that came with the message of a call (SCM_RIGHTS, see mcp-python-sandbox(1)), by slot: the
 * "fd" numbers of a "files" argument index them. Borrowed from the connection: valid only while the tool's call
 * function runs; a tool duplicates what it keeps. */
typedef struct ToolFds {
        const int *fds;
        size_t n;
        bool supported;                   /* the connection can carry fds (a socket, not --stdio) */
} ToolFds;

typedef void (*ToolCallCancelFunc)(ToolCall *call, void *userdata);

struct ToolCall {
        unsigned n_ref;
        McpSession *session;              /* NULL once the client is gone or cancelled */
        McpBatch *batch;                  /* the batch the request came in, if any */
        size_t batch_slot;
        ToolCall *calls_next, *calls_prev;

        const Tool *tool;
        json_object *id;
        char *id_key;
        char *version;                    /* protocol version that shapes the result */
        bool modern;
        json_object *progress_token;      /* NULL: the client asked for no progress */
        double last_progress;
        void *server_userdata;            /* the tools' ToolServices (tools/tools.h) */
        uid_t uid;                        /* the peer */
        pid_t pid;
        ToolFds fds;                      /* during the call function only */
        Charge held;                      /* its arguments' bytes, CHARGE_CALL_BYTES, while it is in progress */

        ToolCallCancelFunc cancel;
        void *cancel_userdata;
        bool finished;
};

ToolCall *tool_call_ref(ToolCall *c);
ToolCall *tool_call_unref(ToolCall *c);
static inline void tool_call_unrefp(ToolCall **c) {
        if (*c)
                tool_call_unref(*c);
}

/* The client is still waiting for this call. */
bool tool_call_is_live(const ToolCall *c);
void tool_call_set_cancel(ToolCall *c, ToolCallCancelFunc cancel, void *userdata);
/* Whether the negotiated version has this feature (e.g. "2025-06-18" for structuredContent). For tests (no tool
 * asks yet), as is tool_call_fail(). */
bool tool_call_version_at_least(const ToolCall *c, const char *version);

/*
 * Answer the call. content (an array of content blocks) and structured are
 * stolen; structured is dropped for versions that predate it. Safe to call
 * once the client is gone (then it only frees).
 */
void tool_call_finish(ToolCall *c, json_object *content, json_object *structured, bool is_error);
/* A one-text-block answer (for tests, and mcp.c's own refusals). */
void tool_call_finish_text(ToolCall *c, bool is_error, const char *format, ...) __attribute__((format(printf, 3, 4)));
/* Answer with a JSON-RPC error instead of a result (protocol faults only). */
void tool_call_fail(ToolCall *c, int code, const char *message);
/* notifications/progress, only if the client sent a progressToken; progress must grow. */
void tool_call_progress(ToolCall *c, double progress, double total, const char *message);

/* Content blocks. */
json_object *content_text_new(const char *text);
