/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * MCP over JSON-RPC, both eras: the initialize handshake of 2024-11-05 to
 * 2025-11-25 (connection-scoped), and the stateless 2026-07-28 revision
 * (per-request _meta). One McpSession per connection; it consumes decoded
 * lines and emits messages through a callback, so it knows nothing of fds or
 * event loops.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "jsonrpc/jsonrpc.h"
#include "tool.h"

#define MCP_MODERN_VERSION "2026-07-28"
#define MCP_LATEST_LEGACY_VERSION "2025-11-25"

extern const char *const mcp_legacy_versions[];   /* NULL-terminated, oldest first */
extern const char *const mcp_modern_versions[];

/* The tools' schemas, parsed once (they are compiled in) for a server and its sessions: the tool registry's owner
 * makes one and frees it after the sessions. */
typedef struct McpSchemaCache McpSchemaCache;
int mcp_schema_cache_new(McpSchemaCache **ret);
McpSchemaCache *mcp_schema_cache_free(McpSchemaCache *c);
/* For tests: how many schemas it holds (each parsed once). */
size_t mcp_schema_cache_size(const McpSchemaCache *c);

typedef struct McpServer {
        const char *name;
        const char *version;
        const char *instructions;
        const Tool *const *tools;          /* NULL-terminated, in list order */
        size_t page_size;                  /* tools per tools/list page */
        unsigned max_calls;                /* tool calls in flight per session */
        int max_depth;                     /* JSON nesting limit */
        size_t max_elements;               /* JSON values per message; 0: no limit */
        unsigned tools_ttl_ms;
        void *userdata;                    /* handed to tool handlers */
        /* Optional: adapt a tool's tools/list entry (its own copy of inputSchema) to the live configuration. */
        void (*describe_tool)(const Tool *t, json_object *entry, void *userdata);
        McpSchemaCache *schemas;           /* NULL: each schema parsed where it is used */
        ChargeRegistry *charges;           /* the calls in progress charged here to the peer (CHARGE_CALL_BYTES);
                                            * NULL: nowhere */
} McpServer;

/* Queue one outgoing message; steals msg. Returns 0 or -errno (the session then ends). */
typedef int (*McpSendFunc)(json_object *msg, void *userdata);

int mcp_session_new(McpSession **ret, const McpServer *server, uid_t uid, pid_t pid,
                    McpSendFunc send, void *userdata);
/* Cancels every call still running and frees. */
McpSession *mcp_session_free(McpSession *s);
static inline void mcp_session_freep(McpSession **s) {
        if (*s)
                mcp_session_free(*s);
}

/* One framed line. Returns 0, or -errno when the session cannot go on. */
int mcp_session_handle_line(McpSession *s, const char *line, size_t len);
/* The same, with the file descriptors that came with the line (borrowed: the caller closes them after). */
int mcp_session_handle_line_fds(McpSession *s, const char *line, size_t len, const ToolFds *fds);
/* A long line, parsed by the caller a slice at a time (jsonrpc_parser_step()) with this session's depth and element
 * limits: the parser, which borrows the line. */
int mcp_session_parser_new(McpSession *s, const char *line, size_t len, JsonrpcParser **ret);
/* Once the parser is done: the line answered as mcp_session_handle_line_fds() answers it whole. */
int mcp_session_handle_parsed_fds(McpSession *s, JsonrpcParser *p, const ToolFds *fds);
/* A line over the size limit was dropped. */
int mcp_session_handle_oversize(McpSession *s, size_t limit);
/* A line over the element budget (max-message-elements) was dropped, perhaps before it ended; the budget (0: none). */
int mcp_session_handle_too_many_elements(McpSession *s);
size_t mcp_session_max_elements(const McpSession *s);
void mcp_session_cancel_all(McpSession *s);
unsigned mcp_session_n_calls(const McpSession *s);
/* A session was started: initialize answered, or a valid request of the stateless era seen. */
bool mcp_session_is_established(const McpSession *s);
/* For tests: the negotiated legacy version, or NULL before initialize. */
const char *mcp_session_version(const McpSession *s);
/* The tool list changed (a reload): tell an initialized legacy session (notifications/tools/list_changed). */
void mcp_session_tools_changed(McpSession *s);

/* For tests, as is the next: is this one of ours? Returns the canonical static string or NULL. */
const char *mcp_legacy_version_find(const char *v);
/* The version initialize answers with: the one requested if ours, else the newest. */
const char *mcp_negotiate_legacy(const char *requested);
