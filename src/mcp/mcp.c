/* SPDX-License-Identifier: MIT */
/*
 * One MCP session: the lines and batches it is handed, the lifecycle (initialize, versions, logging level), the tool
 * registry's list and the tool calls with their progress, cancellation and results. Over 800 lines, one file: every
 * part works on the private McpSession and answers through its batches, which a split would have to expose.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "json-util.h"
#include "jsonrpc/jsonrpc.h"
#include "mcp.h"
#include "schema.h"

#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_SERVER_INFO "io.modelcontextprotocol/serverInfo"

const char *const mcp_legacy_versions[] = {
        "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", NULL,
};
const char *const mcp_modern_versions[] = {
        MCP_MODERN_VERSION, NULL,
};

static const char *const log_levels[] = {
        "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency", NULL,
};

struct McpBatch {
        McpBatch *next;
        json_object *replies;
        unsigned pending;      /* tool calls of this batch still running */
        bool dispatched;       /* every element has been looked at */
};

struct McpSession {
        const McpServer *server;
        uid_t uid;
        pid_t pid;
        McpSendFunc send;
        void *userdata;

        const char *version;   /* negotiated by initialize; NULL before */
        bool initialized;      /* notifications/initialized seen */
        bool modern_seen;      /* a valid request with _meta (2026-07-28) came */
        const char *log_level;

        ToolCall *calls;
        unsigned n_calls;
        const ToolFds *line_fds;   /* those of the line being handled; NULL: none */
        McpBatch *batches;
        int error;             /* a failed send ends the session */
};

/* ---- versions ---------------------------------------------------------- */

static const char *version_find(const char *const *list, const char *v) {
        if (!v)
                return NULL;
        for (size_t i = 0; list[i]; i++)
                if (streq(list[i], v))
                        return list[i];
        return NULL;
}

const char *mcp_legacy_version_find(const char *v) {
        return version_find(mcp_legacy_versions, v);
}

const char *mcp_negotiate_legacy(const char *requested) {
        return mcp_legacy_version_find(requested) ?: MCP_LATEST_LEGACY_VERSION;
}

static bool version_at_least(const char *have, const char *want) {
        /* Versions are dates in ISO form, so they sort as strings. */
        return have && strcmp(have, want) >= 0;
}

static json_object *versions_array(bool legacy, bool modern) {
        json_object *a = json_object_new_array();
        if (!a)
                return NULL;
        if (legacy)
                for (size_t i = 0; mcp_legacy_versions[i]; i++)
                        json_object_array_add(a, json_object_new_string(mcp_legacy_versions[i]));
        if (modern)
                for (size_t i = 0; mcp_modern_versions[i]; i++)
                        json_object_array_add(a, json_object_new_string(mcp_modern_versions[i]));
        return a;
}

/* ---- sending ------------------------------------------------------------ */

static void session_send(McpSession *s, json_object *msg) {
        int r;

        if (!msg) {
                s->error = -ENOMEM;
                return;
        }
        if (s->error < 0) {
                json_object_put(msg);
                return;
        }
        r = s->send(msg, s->userdata);
        if (r < 0)
                s->error = r;
}

static void batch_flush(McpSession *s, McpBatch *b) {
        if (!b->dispatched || b->pending > 0)
                return;

        /* Unlink and send; a batch of notifications only gets no reply at all. */
        for (McpBatch **p = &s->batches; *p; p = &(*p)->next)
                if (*p == b) {
                        *p = b->next;
                        break;
                }
        if (json_object_array_length(b->replies) > 0)
                session_send(s, TAKE_PTR(b->replies));
        json_object_put(b->replies);
        free(b);
}

static void session_reply(McpSession *s, McpBatch *b, json_object *reply) {
        if (!reply) {
                s->error = -ENOMEM;
                return;
        }
        if (b)
                json_object_array_add(b->replies, reply);
        else
                session_send(s, reply);
}

static void reply_error(McpSession *s, McpBatch *b, json_object *id, int code, const char *message,
                        json_object *data) {
        session_reply(s, b, jsonrpc_error_new(id, code, message, data));
}

static void reply_errorf(McpSession *s, McpBatch *b, json_object *id, int code, const char *format, ...)
        __attribute__((format(printf, 5, 6)));
static void reply_errorf(McpSession *s, McpBatch *b, json_object *id, int code, const char *format, ...) {
        char buf[1024];
        va_list ap;

        va_start(ap, format);
        (void) vsnprintf(buf, sizeof(buf), format, ap);
        va_end(ap);
        reply_error(s, b, id, code, buf, NULL);
}

/* Decorate a result for the era it answers. */
static json_object *shape_result(McpSession *s, json_object *result, bool modern, bool cacheable) {
        if (!result || !modern)
                return result;

        json_object *meta = json_object_new_object(), *info = json_object_new_object();
        json_add_string(info, "name", s->server->name);
        json_add_string(info, "version", s->server->version);
        json_add(meta, META_SERVER_INFO, info);
        json_add_string(result, "resultType", "complete");
        json_add(result, "_meta", meta);
        if (cacheable) {
                json_add_int(result, "ttlMs", s->server->tools_ttl_ms);
                json_add_string(result, "cacheScope", "public");
        }
        return result;
}

static void reply_result(McpSession *s, McpBatch *b, json_object *id, json_object *result, bool modern,
                         bool cacheable) {
        session_reply(s, b, jsonrpc_result_new(id, shape_result(s, result, modern, cacheable)));
}

/* ---- tools ------------------------------------------------------------- */

struct McpSchemaCache {
        struct {
                const char *text;       /* compiled in: known by its address */
                json_object *parsed;
        } *items;
        size_t n;
};

int mcp_schema_cache_new(McpSchemaCache **ret) {
        McpSchemaCache *c = calloc(1, sizeof(*c));

        if (!c)
                return -ENOMEM;
        *ret = c;
        return 0;
}

McpSchemaCache *mcp_schema_cache_free(McpSchemaCache *c) {
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n; i++)
                json_object_put(c->items[i].parsed);
        free(c->items);
        free(c);
        return NULL;
}

size_t mcp_schema_cache_size(const McpSchemaCache *c) {
        return c ? c->n : 0;
}

/* A reference to the schema text parsed: the server's cache's, where it has one (and memory to keep it in). */
static json_object *tool_schema(const McpServer *server, const char *text) {
        McpSchemaCache *c = server->schemas;
        json_object *parsed;

        for (size_t i = 0; c && i < c->n; i++)
                if (c->items[i].text == text)
                        return json_object_get(c->items[i].parsed);
        parsed = json_parse_static(text);
        if (!c || !parsed)
                return parsed;
        typeof(c->items) a = realloc(c->items, (c->n + 1) * sizeof(*a));
        if (!a)
                return parsed;
        c->items = a;
        c->items[c->n++] = (typeof(*a)) { .text = text, .parsed = parsed };
        return json_object_get(parsed);
}

/* Annotations are hints with defaults (readOnly false, destructive true, idempotent false, openWorld true): only
 * what differs from them goes out, and the title only to 2025-03-26, which has no top-level one. */
static json_object *annotations_json(const Tool *t, const char *version) {
        json_object *a = json_object_new_object();

        if (!version_at_least(version, "2025-06-18") && t->title)
                json_add_string(a, "title", t->title);
        if (t->read_only_hint)
                json_add_bool(a, "readOnlyHint", true);
        else {
                if (!t->destructive_hint)
                        json_add_bool(a, "destructiveHint", false);
                if (t->idempotent_hint)
                        json_add_bool(a, "idempotentHint", true);
        }
        if (!t->open_world_hint)
                json_add_bool(a, "openWorldHint", false);
        if (json_object_object_length(a) == 0) {
                json_object_put(a);
                return NULL;
        }
        return a;
}

static json_object *tool_to_json(const McpServer *server, const Tool *t, const char *version) {
        json_object *o = json_object_new_object(), *input = NULL;

        json_add_string(o, "name", t->name);
        if (version_at_least(version, "2025-06-18") && t->title)
                json_add_string(o, "title", t->title);
        json_add_string(o, "description", t->description);
        /* The live configuration goes into a copy: the compiled-in schema stays what calls are checked against. */
        if (server->describe_tool) {
                _cleanup_json_ json_object *schema = tool_schema(server, t->input_schema);
                if (json_object_deep_copy(schema, &input, NULL) < 0)
                        input = NULL;
        } else
                input = tool_schema(server, t->input_schema);
        json_add(o, "inputSchema", input);
        if (version_at_least(version, "2025-06-18") && t->output_schema)
                json_add(o, "outputSchema", tool_schema(server, t->output_schema));
        if (version_at_least(version, "2025-03-26")) {
                json_object *a = annotations_json(t, version);
                if (a)
                        json_add(o, "annotations", a);
        }
        if (server->describe_tool && input)
                server->describe_tool(t, o, server->userdata);
        return o;
}

static void handle_tools_list(McpSession *s, McpBatch *b, json_object *id, json_object *params,
                              const char *version, bool modern) {
        size_t n = 0, offset = 0, page = s->server->page_size ?: 100;
        json_object *cursor = NULL;

        while (s->server->tools[n])
                n++;

        if (params && json_object_object_get_ex(params, "cursor", &cursor) && cursor) {
                const char *c;
                char *end;

                if (!json_object_is_type(cursor, json_type_string))
                        return reply_error(s, b, id, JSONRPC_INVALID_PARAMS, "Invalid params: cursor must be a string", NULL);
                c = json_object_get_string(cursor);
                if (*c) {
                        errno = 0;
                        unsigned long long v = strtoull(c, &end, 10);
                        if (errno || *end || c[0] < '0' || c[0] > '9' || v > n)
                                return reply_error(s, b, id, JSONRPC_INVALID_PARAMS, "Invalid cursor", NULL);
                        offset = (size_t) v;
                }
        }

        json_object *result = json_object_new_object(), *tools = json_object_new_array();
        for (size_t i = offset; i < n && i < offset + page; i++)
                json_object_array_add(tools, tool_to_json(s->server, s->server->tools[i], version));
        json_add(result, "tools", tools);
        if (offset + page < n) {
                char c[32];
                snprintf(c, sizeof(c), "%zu", offset + page);
                json_add_string(result, "nextCursor", c);
        }
        reply_result(s, b, id, result, modern, true);
}

static ToolCall *session_find_call(McpSession *s, const char *key) {
        for (ToolCall *c = s->calls; c; c = c->calls_next)
                if (streq(c->id_key, key))
                        return c;
        return NULL;
}

static void session_unlink_call(McpSession *s, ToolCall *c) {
        if (c->calls_prev)
                c->calls_prev->calls_next = c->calls_next;
        else
                s->calls = c->calls_next;
        if (c->calls_next)
                c->calls_next->calls_prev = c->calls_prev;
        c->calls_next = c->calls_prev = NULL;
        s->n_calls--;
        charge_release(&c->held);
}

ToolCall *tool_call_ref(ToolCall *c) {
        if (c)
                c->n_ref++;
        return c;
}

ToolCall *tool_call_unref(ToolCall *c) {
        if (!c || --c->n_ref > 0)
                return NULL;
        charge_release(&c->held);
        json_object_put(c->id);
        json_object_put(c->progress_token);
        free(c->id_key);
        free(c->version);
        free(c);
        return NULL;
}

bool tool_call_is_live(const ToolCall *c) {
        return c->session && !c->finished;
}

void tool_call_set_cancel(ToolCall *c, ToolCallCancelFunc cancel, void *userdata) {
        c->cancel = cancel;
        c->cancel_userdata = userdata;
}

bool tool_call_version_at_least(const ToolCall *c, const char *version) {
        return version_at_least(c->version, version);
}

/* The session lets go of the call; returns whether the reply may still be sent. */
static void call_detach(McpSession *s, ToolCall *c) {
        McpBatch *b = TAKE_PTR(c->batch);

        session_unlink_call(s, c);
        c->session = NULL;
        if (b) {
                b->pending--;
                batch_flush(s, b);
        }
        tool_call_unref(c);
}

json_object *content_text_new(const char *text) {
        json_object *o = json_object_new_object();
        json_add_string(o, "type", "text");
        json_add_string(o, "text", text);
        return o;
}

void tool_call_finish(ToolCall *c, json_object *content, json_object *structured, bool is_error) {
        _cleanup_json_ json_object *ct = content, *st = structured;
        McpSession *s = c->session;

        if (c->finished || !s)
                return;
        c->finished = true;

        /* Clients that show structuredContent when there is one hand the model nothing else: not the images,
         * not the resources. A result with such blocks goes without it, so every client shows content[]. */
        for (size_t i = 0; st && ct && i < json_object_array_length(ct); i++)
                if (!streq(strempty(json_get_string(json_object_array_get_idx(ct, i), "type")), "text"))
                        st = (json_object_put(st), NULL);

        json_object *result = json_object_new_object();
        json_add(result, "content", TAKE_PTR(ct) ?: json_object_new_array());
        if (st && tool_call_version_at_least(c, "2025-06-18"))
                json_add(result, "structuredContent", TAKE_PTR(st));
        json_add_bool(result, "isError", is_error);

        /* The reply goes where the request came from: the session, or its batch. */
        McpBatch *b = c->batch;
        reply_result(s, b, c->id, result, c->modern, false);
        call_detach(s, c);
}

void tool_call_finish_text(ToolCall *c, bool is_error, const char *format, ...) {
        char *text = NULL;
        va_list ap;

        va_start(ap, format);
        if (vasprintf(&text, format, ap) < 0)
                text = NULL;
        va_end(ap);

        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(text ?: "out of memory"));
        free(text);
        tool_call_finish(c, content, NULL, is_error);
}

void tool_call_fail(ToolCall *c, int code, const char *message) {
        McpSession *s = c->session;

        if (c->finished || !s)
                return;
        c->finished = true;
        reply_error(s, c->batch, c->id, code, message, NULL);
        call_detach(s, c);
}

void tool_call_progress(ToolCall *c, double progress, double total, const char *message) {
        if (!tool_call_is_live(c) || !c->progress_token || progress <= c->last_progress)
                return;
        c->last_progress = progress;

        json_object *p = json_object_new_object();
        json_add(p, "progressToken", json_object_get(c->progress_token));
        json_add(p, "progress", json_object_new_double(progress));
        if (total > 0)
                json_add(p, "total", json_object_new_double(total));
        if (message && tool_call_version_at_least(c, "2025-03-26"))
                json_add_string(p, "message", message);
        session_send(c->session, jsonrpc_notification_new("notifications/progress", p));
}

/* What a call's arguments make the daemon hold while it runs, about: the tools keep what they are given (a script,
 * a file's content), in copies of their own. Strings by their length, and a little for every value. Bounded in
 * depth by the parse (max_depth). */
static uint64_t arguments_cost(json_object *v) {
        const uint64_t value = 32;
        uint64_t sum = value;

        switch (json_object_get_type(v)) {
        case json_type_string:
                return value + (uint64_t) json_object_get_string_len(v);
        case json_type_array:
                for (size_t i = 0; i < json_object_array_length(v); i++)
                        sum += arguments_cost(json_object_array_get_idx(v, i));
                return sum;
        case json_type_object: {
                json_object_object_foreach(v, key, val)
                        sum += value + strlen(key) + arguments_cost(val);
                return sum;
        }
        default:
                return value;
        }
}

static void handle_tools_call(McpSession *s, McpBatch *b, json_object *id, json_object *params,
                              const char *version, bool modern) {
        _cleanup_(tool_call_unrefp) ToolCall *hold = NULL;
        _cleanup_free_ char *key = NULL, *error = NULL;
        _cleanup_json_ json_object *schema = NULL;
        json_object *args = NULL, *meta, *token = NULL;
        const Tool *tool = NULL;
        const char *name;
        int r;

        name = json_get_string(params, "name");
        if (!name)
                return reply_error(s, b, id, JSONRPC_INVALID_PARAMS, "Invalid params: \"name\" (a string) is required", NULL);
        for (size_t i = 0; s->server->tools[i]; i++)
                if (streq(s->server->tools[i]->name, name))
                        tool = s->server->tools[i];
        if (!tool)
                return reply_errorf(s, b, id, JSONRPC_INVALID_PARAMS, "Unknown tool: %s", name);

        if (json_object_object_get_ex(params, "arguments", &args) && args &&
            !json_object_is_type(args, json_type_object))
                return reply_error(s, b, id, JSONRPC_INVALID_PARAMS, "Invalid params: \"arguments\" must be an object", NULL);

        key = jsonrpc_id_key(id);
        if (!key)
                return reply_error(s, b, id, JSONRPC_INTERNAL_ERROR, "Internal error: out of memory", NULL);
        if (session_find_call(s, key))
                return reply_error(s, b, id, JSONRPC_INVALID_REQUEST,
                                   "Invalid request: a request with this id is still running", NULL);

        meta = json_get(params, "_meta", json_type_object);
        if (meta && json_object_object_get_ex(meta, "progressToken", &token) && !jsonrpc_id_valid(token))
                token = NULL;

        _cleanup_json_ json_object *empty = args ? NULL : json_object_new_object();
        if (!args)
                args = empty;

        ToolCall *c = calloc(1, sizeof(*c));
        if (!c)
                return reply_error(s, b, id, JSONRPC_INTERNAL_ERROR, "Internal error: out of memory", NULL);
        *c = (ToolCall) {
                .n_ref = 1,
                .session = s,
                .tool = tool,
                .id = json_object_get(id),
                .id_key = TAKE_PTR(key),
                .version = strdup(version),
                .modern = modern,
                .progress_token = json_object_get(token),
                .last_progress = -INFINITY,   /* the first report may be 0 */
                .server_userdata = s->server->userdata,
                .uid = s->uid,
                .pid = s->pid,
                .fds = s->line_fds ? *s->line_fds : (ToolFds) {},
        };
        c->calls_next = s->calls;
        if (s->calls)
                s->calls->calls_prev = c;
        s->calls = c;
        s->n_calls++;
        if (b) {
                c->batch = b;
                b->pending++;
        }
        hold = tool_call_ref(c);

        if (s->n_calls > s->server->max_calls)
                return tool_call_finish_text(c, true,
                                             "Too many tool calls are running on this connection (the limit is %u). "
                                             "Wait for one to finish, then try again.",
                                             s->server->max_calls);
        if (s->server->charges) {
                uint64_t cost = arguments_cost(args), limit;

                r = charge_take(s->server->charges, &c->held, s->uid, CHARGE_CALL_BYTES, cost);
                limit = charge_registry_limit(s->server->charges, CHARGE_CALL_BYTES);
                if (r == CHARGE_QUOTA && cost > limit)
                        /* Alone over the limit: waiting would not help. */
                        return tool_call_finish_text(c, true,
                                                     "This call's script and arguments are larger than this service "
                                                     "allows one user's calls in progress to hold "
                                                     "(max-call-buffer-per-user, %" PRIu64 " KiB). Send less: "
                                                     "a smaller script, or the data in a file.",
                                                     limit / 1024);
                if (r == CHARGE_QUOTA)
                        return tool_call_finish_text(c, true,
                                                     "The tool calls in progress on your connections hold more bytes "
                                                     "of scripts and arguments than this service allows one user "
                                                     "(max-call-buffer-per-user, %" PRIu64 " KiB). Wait for one to "
                                                     "finish, then try again.",
                                                     limit / 1024);
                if (r < 0)
                        return tool_call_fail(c, JSONRPC_INTERNAL_ERROR, "Internal error: out of memory");
        }

        /* Argument errors are for the model to fix: a result with isError, not a protocol error. */
        schema = tool_schema(s->server, tool->input_schema);
        if (schema_validate(schema, args, &error) < 0)
                return tool_call_finish_text(c, true, "Invalid arguments for %s: %s.", tool->name,
                                             error ?: "out of memory");

        r = tool->call(c, args);
        c->fds = (ToolFds) { .supported = c->fds.supported };
        if (r < 0 && !c->finished) {
                char m[256];
                snprintf(m, sizeof(m), "Internal error in %s: %s", tool->name, strerror(-r));
                tool_call_fail(c, JSONRPC_INTERNAL_ERROR, m);
        }
}

/* ---- lifecycle --------------------------------------------------------- */

static json_object *server_capabilities(bool legacy) {
        json_object *caps = json_object_new_object(), *tools = json_object_new_object();
        /* A reload may change the list: legacy sessions hear of it. The stateless era re-reads it after ttlMs. */
        if (legacy)
                json_add_bool(tools, "listChanged", true);
        json_add(caps, "tools", tools);
        if (legacy)
                json_add(caps, "logging", json_object_new_object());
        return caps;
}

static void handle_initialize(McpSession *s, McpBatch *b, json_object *id, json_object *params) {
        const char *requested = json_get_string(params, "protocolVersion");

        if (!requested)
                return reply_error(s, b, id, JSONRPC_INVALID_PARAMS,
                                   "Invalid params: initialize needs \"protocolVersion\" (a string)", NULL);
        /* One handshake per connection: the version and capabilities agreed stay what they were. */
        if (s->version)
                return reply_errorf(s, b, id, JSONRPC_INVALID_REQUEST,
                                    "Invalid request: this connection is already initialized (protocol version %s); "
                                    "a new session needs a new connection",
                                    s->version);

        s->version = mcp_negotiate_legacy(requested);

        json_object *result = json_object_new_object(), *info = json_object_new_object();
        json_add_string(result, "protocolVersion", s->version);
        json_add(result, "capabilities", server_capabilities(true));
        json_add_string(info, "name", s->server->name);
        if (version_at_least(s->version, "2025-06-18"))
                json_add_string(info, "title", "Python sandbox");
        json_add_string(info, "version", s->server->version);
        json_add(result, "serverInfo", info);
        if (s->server->instructions)
                json_add_string(result, "instructions", s->server->instructions);
        reply_result(s, b, id, result, false, false);
}

static void handle_discover(McpSession *s, McpBatch *b, json_object *id) {
        json_object *result = json_object_new_object();
        json_add(result, "supportedVersions", versions_array(false, true));
        json_add(result, "capabilities", server_capabilities(false));
        if (s->server->instructions)
                json_add_string(result, "instructions", s->server->instructions);
        reply_result(s, b, id, result, true, true);
}

static void handle_set_level(McpSession *s, McpBatch *b, json_object *id, json_object *params) {
        const char *level = json_get_string(params, "level");
        const char *found = level ? version_find(log_levels, level) : NULL;

        if (!found)
                return reply_error(s, b, id, JSONRPC_INVALID_PARAMS,
                                   "Invalid params: \"level\" must be one of debug, info, notice, warning, error, "
                                   "critical, alert, emergency",
                                   NULL);
        s->log_level = found;
        reply_result(s, b, id, json_object_new_object(), false, false);
}

static void handle_modern(McpSession *s, McpBatch *b, const JsonrpcMessage *m, json_object *meta) {
        json_object *v = NULL, *caps = NULL;

        json_object_object_get_ex(meta, META_VERSION, &v);
        if (!v || !json_object_is_type(v, json_type_string))
                return reply_error(s, b, m->id, JSONRPC_INVALID_PARAMS,
                                   "Invalid params: _meta \"" META_VERSION "\" must be a string", NULL);
        if (!json_object_object_get_ex(meta, META_CAPS, &caps) || !json_object_is_type(caps, json_type_object))
                return reply_error(s, b, m->id, JSONRPC_INVALID_PARAMS,
                                   "Invalid params: _meta \"" META_CAPS "\" (an object) is required", NULL);

        const char *version = version_find(mcp_modern_versions, json_object_get_string(v));
        if (!version) {
                json_object *data = json_object_new_object();
                json_add(data, "supported", versions_array(false, true));
                json_add_string(data, "requested", json_object_get_string(v));
                return reply_error(s, b, m->id, MCP_ERROR_UNSUPPORTED_VERSION, "Unsupported protocol version", data);
        }

        /* A stateless request is its own session: it counts as having started one. */
        s->modern_seen = true;

        if (streq(m->method, "server/discover"))
                return handle_discover(s, b, m->id);
        if (streq(m->method, "tools/list"))
                return handle_tools_list(s, b, m->id, m->params, version, true);
        if (streq(m->method, "tools/call"))
                return handle_tools_call(s, b, m->id, m->params, version, true);
        if (streq(m->method, "ping") || streq(m->method, "logging/setLevel"))
                return reply_errorf(s, b, m->id, JSONRPC_METHOD_NOT_FOUND,
                                    "Method not found: %s does not exist in protocol version %s", m->method, version);
        reply_errorf(s, b, m->id, JSONRPC_METHOD_NOT_FOUND, "Method not found: %s", m->method);
}

static void handle_request(McpSession *s, McpBatch *b, const JsonrpcMessage *m) {
        json_object *meta = json_get(m->params, "_meta", json_type_object);

        if (m->method_has_nul)
                return reply_error(s, b, m->id, JSONRPC_METHOD_NOT_FOUND,
                                   "Method not found: the name contains a NUL character", NULL);

        /* initialize is the legacy handshake whatever else the request carries. */
        if (streq(m->method, "initialize")) {
                if (b)
                        return reply_error(s, b, m->id, JSONRPC_INVALID_REQUEST,
                                           "Invalid request: initialize must not be part of a batch", NULL);
                return handle_initialize(s, b, m->id, m->params);
        }

        if (meta && json_object_object_get_ex(meta, META_VERSION, NULL))
                return handle_modern(s, b, m, meta);

        if (streq(m->method, "ping"))
                return reply_result(s, b, m->id, json_object_new_object(), false, false);

        if (!s->version || streq(m->method, "server/discover")) {
                json_object *data = json_object_new_object();
                json_add(data, "supported", versions_array(true, true));
                return reply_error(s, b, m->id, JSONRPC_INVALID_PARAMS,
                                   streq(m->method, "server/discover")
                                           ? "Invalid params: server/discover needs params._meta with \"" META_VERSION
                                             "\" and \"" META_CAPS "\""
                                           : "Invalid params: send initialize first, or give params._meta \"" META_VERSION
                                             "\" (2026-07-28)",
                                   data);
        }

        if (streq(m->method, "tools/list"))
                return handle_tools_list(s, b, m->id, m->params, s->version, false);
        if (streq(m->method, "tools/call"))
                return handle_tools_call(s, b, m->id, m->params, s->version, false);
        if (streq(m->method, "logging/setLevel"))
                return handle_set_level(s, b, m->id, m->params);

        reply_errorf(s, b, m->id, JSONRPC_METHOD_NOT_FOUND, "Method not found: %s", m->method);
}

static void cancel_call(McpSession *s, ToolCall *c) {
        _cleanup_(tool_call_unrefp) ToolCall *hold = tool_call_ref(c);

        c->finished = true;
        if (c->cancel)
                c->cancel(c, c->cancel_userdata);
        /* No reply for a cancelled request; a batch closes without it. */
        call_detach(s, c);
}

static void handle_notification(McpSession *s, const JsonrpcMessage *m) {
        if (m->method_has_nul)
                return;
        if (streq(m->method, "notifications/initialized")) {
                s->initialized = true;
                return;
        }
        if (streq(m->method, "notifications/cancelled")) {
                json_object *rid = NULL;
                _cleanup_free_ char *key = NULL;
                ToolCall *c;

                if (!m->params || !json_object_object_get_ex(m->params, "requestId", &rid))
                        return;
                key = jsonrpc_id_key(rid);
                if (!key || !(c = session_find_call(s, key)))
                        return;   /* unknown or finished: ignore, as the spec asks */
                cancel_call(s, c);
        }
        /* Every other notification is ignored; a notification never gets a reply. */
}

static void handle_message(McpSession *s, McpBatch *b, json_object *msg) {
        JsonrpcMessage m;

        jsonrpc_classify(msg, &m);
        switch (m.kind) {
        case JSONRPC_INVALID:
                return reply_error(s, b, m.id, m.error_code, m.error_message, NULL);
        case JSONRPC_RESPONSE:
                return;
        case JSONRPC_NOTIFICATION:
                if (m.error_code == 0)
                        handle_notification(s, &m);
                return;
        case JSONRPC_REQUEST:
                return handle_request(s, b, &m);
        }
}

static void handle_batch(McpSession *s, json_object *array) {
        size_t n = json_object_array_length(array);

        if (!s->version || !streq(s->version, "2025-03-26"))
                return reply_error(s, NULL, NULL, JSONRPC_INVALID_REQUEST,
                                   "Invalid request: JSON-RPC batches are accepted only on a 2025-03-26 session", NULL);
        if (n == 0)
                return reply_error(s, NULL, NULL, JSONRPC_INVALID_REQUEST, "Invalid request: empty batch", NULL);
        /* Its replies go out as one message, held until the last is in: as many as calls may be in flight. */
        if (n > s->server->max_calls) {
                json_object *data = json_object_new_object();
                json_add_int(data, "limit", (int64_t) s->server->max_calls);
                return reply_error(s, NULL, NULL, JSONRPC_INVALID_REQUEST,
                                   "Invalid request: the batch holds more messages than the limit "
                                   "(max-calls-per-connection)",
                                   data);
        }

        McpBatch *b = calloc(1, sizeof(*b));
        if (!b) {
                s->error = -ENOMEM;
                return;
        }
        b->replies = json_object_new_array();
        b->next = s->batches;
        s->batches = b;

        for (size_t i = 0; i < n; i++)
                handle_message(s, b, json_object_array_get_idx(array, i));

        b->dispatched = true;
        batch_flush(s, b);
}

/* ---- session ----------------------------------------------------------- */

int mcp_session_new(McpSession **ret, const McpServer *server, uid_t uid, pid_t pid, McpSendFunc send,
                    void *userdata) {
        McpSession *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        *s = (McpSession) {
                .server = server,
                .uid = uid,
                .pid = pid,
                .send = send,
                .userdata = userdata,
        };
        *ret = s;
        return 0;
}

void mcp_session_cancel_all(McpSession *s) {
        while (s->calls)
                cancel_call(s, s->calls);
}

McpSession *mcp_session_free(McpSession *s) {
        if (!s)
                return NULL;
        /* Nothing more may be sent: the connection is going away. */
        s->error = -ECONNRESET;
        mcp_session_cancel_all(s);
        while (s->batches) {
                McpBatch *b = s->batches;
                s->batches = b->next;
                json_object_put(b->replies);
                free(b);
        }
        free(s);
        return NULL;
}

unsigned mcp_session_n_calls(const McpSession *s) {
        return s->n_calls;
}

bool mcp_session_is_established(const McpSession *s) {
        return s->version || s->modern_seen;
}

const char *mcp_session_version(const McpSession *s) {
        return s->version;
}

void mcp_session_tools_changed(McpSession *s) {
        /* Only a session that finished the handshake: notifications before initialized are not allowed. */
        if (!s->version || !s->initialized)
                return;
        session_send(s, jsonrpc_notification_new("notifications/tools/list_changed", NULL));
}

/* A line's value (stolen), or NULL and the reason it is none. */
static int handle_parsed(McpSession *s, json_object *value, const char *reason) {
        _cleanup_json_ json_object *msg = value;

        if (!msg)
                reply_error(s, NULL, NULL, JSONRPC_PARSE_ERROR, reason, NULL);
        else if (json_object_is_type(msg, json_type_array))
                handle_batch(s, msg);
        else
                handle_message(s, NULL, msg);

        return s->error;
}

int mcp_session_handle_line_fds(McpSession *s, const char *line, size_t len, const ToolFds *fds) {
        int r;

        s->line_fds = fds;
        r = mcp_session_handle_line(s, line, len);
        s->line_fds = NULL;
        return r;
}

int mcp_session_handle_line(McpSession *s, const char *line, size_t len) {
        _cleanup_json_ json_object *msg = NULL;
        const char *reason = NULL;

        /* Blank lines between messages are harmless. */
        size_t i = 0;
        while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
                i++;
        if (i == len)
                return s->error;

        if (s->server->max_elements > 0 &&
            jsonrpc_count_elements(line, len, s->server->max_elements) > s->server->max_elements)
                return mcp_session_handle_too_many_elements(s);

        msg = jsonrpc_parse(line, len, s->server->max_depth, &reason);
        return handle_parsed(s, TAKE_PTR(msg), reason);
}

int mcp_session_parser_new(McpSession *s, const char *line, size_t len, JsonrpcParser **ret) {
        return jsonrpc_parser_new(ret, line, len, s->server->max_depth, s->server->max_elements);
}

int mcp_session_handle_parsed_fds(McpSession *s, JsonrpcParser *p, const ToolFds *fds) {
        _cleanup_json_ json_object *msg = NULL;
        const char *reason = NULL;
        int r;

        /* In the order mcp_session_handle_line() decides: a blank line, too many values, then the parse. */
        if (jsonrpc_parser_blank(p))
                return s->error;
        if (jsonrpc_parser_too_many_elements(p))
                return mcp_session_handle_too_many_elements(s);
        msg = jsonrpc_parser_finish(p, &reason);
        s->line_fds = fds;
        r = handle_parsed(s, TAKE_PTR(msg), reason);
        s->line_fds = NULL;
        return r;
}

size_t mcp_session_max_elements(const McpSession *s) {
        return s->server->max_elements;
}

int mcp_session_handle_too_many_elements(McpSession *s) {
        json_object *data = json_object_new_object();
        json_add_int(data, "limit", (int64_t) s->server->max_elements);
        reply_error(s, NULL, NULL, JSONRPC_INVALID_REQUEST,
                    "Invalid request: the message holds more JSON values than the limit "
                    "(max-message-elements) and was discarded",
                    data);
        return s->error;
}

int mcp_session_handle_oversize(McpSession *s, size_t limit) {
        json_object *data = json_object_new_object();
        json_add_int(data, "limit", (int64_t) limit);
        reply_error(s, NULL, NULL, JSONRPC_INVALID_REQUEST,
                    "Invalid request: the message is larger than the limit and was discarded", data);
        return s->error;
}
