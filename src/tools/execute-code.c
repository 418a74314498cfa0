/* SPDX-License-Identifier: MIT */
/* execute_code: one cell in a persistent sandbox's interpreter. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hints.h"
#include "json-util.h"
#include "macro.h"
#include "outputs.h"
#include "runlog.h"
#include "sandbox-common.h"
#include "strv.h"
#include "time-util.h"
#include "tools.h"

#define MAX_IMAGES 8
#define MAX_IMAGE_BYTES (4 * 1024 * 1024)


static void section(char **buf, size_t *len, const char *name, const char *text) {
        if (!text || !*text)
                return;
        strextendf_len(buf, len, "--- %s ---\n%s%s", name, text, text[strlen(text) - 1] == '\n' ? "" : "\n");
}

/* The cell's audit record (runlog.h). */
static void cell_log(WsCall *c, const char *verdict, const char *error, int64_t count) {
        RunLog l;

        runlog_begin(&l, c->call, c->script, c->script_len);
        runlog_add(&l, "MCP_VERDICT", "%s", verdict);
        runlog_add(&l, "MCP_SANDBOX_ID", "%s", workspace_id(c->sandbox));
        if (workspace_python_version(c->sandbox))
                runlog_add(&l, "MCP_PYTHON", "%s", workspace_python_version(c->sandbox));
        runlog_add(&l, "MCP_SANDBOXED", "yes");
        if (streq(verdict, "timeout"))
                runlog_add(&l, "MCP_LIMIT", "timeout");
        if (error)
                runlog_add(&l, "MCP_ERROR", "%s", error);
        if (count > 0)
                runlog_add(&l, "MCP_EXECUTION_COUNT", "%" PRId64, count);
        runlog_add(&l, "MCP_DURATION_USEC", "%" PRIu64, now_usec() - c->t_start);
        runlog_add(&l, "MCP_TIMEOUT_USEC", "%" PRIu64, c->timeout_usec);
        runlog_emit(&l, "execute_code in sandbox %s for uid " UID_FMT " (pid " PID_FMT "): %s.",
                    workspace_id(c->sandbox), c->call->uid, c->call->pid, verdict);
}

static void on_cell_cancelled(WsCall *c) {
        cell_log(c, "cancelled", NULL, 0);
}

static void on_cell(WsCall *c, const WorkspaceOpOutcome *o) {
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        json_object *r = o->reply;
        json_object *st = json_object_new_object(), *content = json_object_new_array(), *names = json_object_new_array();
        const char *error = o->error ?: (r && !json_object_get_boolean(json_get(r, "ok", json_type_boolean))
                                                 ? json_get_string(r, "error") ?: "failed"
                                                 : NULL);
        const char *exc = json_get_string(r, "error");
        bool ok_reply = r && json_object_get_boolean(json_get(r, "ok", json_type_boolean));
        int64_t count = 0, timeout_s = (int64_t) (c->timeout_usec / USEC_PER_SEC);
        bool is_error;

        if (ok_reply)
                exc = json_get_string(r, "error");   /* the cell's exception, a traceback */
        else
                exc = NULL;
        (void) json_get_int64(r, "execution_count", &count);

        if (ok_reply) {
                section(&text, &len, "stdout", json_get_string(r, "stdout"));
                section(&text, &len, "stderr", json_get_string(r, "stderr"));
                if (json_get_string(r, "result"))
                        strextendf_len(&text, &len, "--- result ---\nOut[%" PRId64 "]: %s\n", count, json_get_string(r, "result"));
                section(&text, &len, "error", exc);
        } else if (error)
                section(&text, &len, "error", error);

        /* What explains the outcome, in sentences: in the text, and as structuredContent's "message", for clients
         * that show the model only one of the two. */
        _cleanup_free_ char *message = NULL;
        size_t mlen = 0;
        if (o->timed_out) {
                if (o->interrupted)
                        strextendf_len(&message, &mlen,
                               "The cell was interrupted after %" PRId64 "s, the time limit (KeyboardInterrupt). "
                               "Variables and files are kept.\n",
                               timeout_s);
                else if (o->restarted)
                        strextendf_len(&message, &mlen,
                               "The cell did not stop when interrupted after %" PRId64 "s, so the interpreter was "
                               "restarted: all variables and imports are lost; files in /work are kept.\n",
                               timeout_s);
                else if (o->reset)
                        strextendf_len(&message, &mlen,
                               "The cell could not be stopped after %" PRId64 "s, so the sandbox was started afresh: "
                               "variables and files in /work are lost.\n",
                               timeout_s);
        } else if (o->restarted)
                strextendf_len(&message, &mlen, "The interpreter was restarted: all variables and imports are lost; "
                                    "files in /work are kept.\n");
        else if (o->reset)
                strextendf_len(&message, &mlen,
                               "The sandbox was started afresh: variables and files in /work are lost.\n");
        if (c->timeout_clamped)
                strextendf_len(&message, &mlen,
                               "The time limit asked for was lowered to %" PRId64 "s, the server's maximum.\n",
                               timeout_s);
        /* A sentence naming the fix for a module that is not installed (hints.h): in the message, which both
         * kinds of client show. */
        _cleanup_free_ char *hint = exc ? hint_for_run(exc, !workspace_network(c->sandbox),
                                                        workspace_requirements(c->sandbox), true)
                                        : NULL;
        if (hint)
                strextendf_len(&message, &mlen, "%s\n", hint);
        if (message)
                strextendf_len(&text, &len, "%s", message);
        if (c->timeout_clamped)
                strextendf_len(&text, &len, "--- timeout_clamped: %" PRId64 "s (the server's maximum) ---\n", timeout_s);
        strextendf_len(&text, &len, "--- execution_count: %" PRId64 " ---\n--- duration_ms: %" PRIu64 " ---\n", count,
               (now_usec() - c->t_start) / USEC_PER_MSEC);
        /* network-allow: the hosts the proxy refused since the last call (one line of text, one list). */
        _cleanup_strv_free_ char **refused = workspace_network_refused_take(c->sandbox);
        if (refused && refused[0]) {
                json_object *a = json_object_new_array();
                for (size_t i = 0; refused[i]; i++)
                        json_object_array_add(a, json_object_new_string(refused[i]));
                json_add(st, "network_refused", a);
                if (refused[0]) {
                        _cleanup_free_ char *list = strv_join(refused, " ");
                        strextendf_len(&text, &len,
                                       "--- network_refused: %s (not in the administrator's network allowlist, "
                                       "network-allow) ---\n", strempty(list));
                }
        }

        json_object_array_add(content, content_text_new(text ?: ""));

        /* Figures: a text line naming each (some clients drop images), then the image. */
        json_object *images = json_get(r, "images", json_type_array);
        for (size_t i = 0; images && i < json_object_array_length(images) && i < MAX_IMAGES * 2; i++) {
                json_object *img = json_object_array_get_idx(images, i);
                const char *name = json_get_string(img, "name") ?: "figure.png";
                const char *data = json_get_string(img, "data");
                _cleanup_free_ char *line = NULL;
                int64_t bytes = 0;

                (void) json_get_int64(img, "bytes", &bytes);
                if (!data || strlen(data) > (size_t) MAX_IMAGE_BYTES / 3 * 4 + 4) {
                        if (asprintf(&line, "[image %s %s]", name,
                                     json_get_string(img, "error") ?: "not returned") >= 0)
                                json_object_array_add(content, content_text_new(line));
                        continue;
                }
                if (asprintf(&line, "[image %s: PNG, %" PRId64 " bytes, follows]", name, bytes) >= 0)
                        json_object_array_add(content, content_text_new(line));
                json_object *b = json_object_new_object();
                json_add_string(b, "type", "image");
                json_add_string(b, "data", data);
                json_add_string(b, "mimeType", "image/png");
                json_object_array_add(content, b);
                json_object_array_add(names, json_object_new_string(name));
        }

        /* Files new or changed in /work/out during the cell: inline text or resources, capped like execute_python's. */
        _cleanup_(outputs_freep) Outputs *outputs = NULL;
        json_object *files = json_get(r, "files", json_type_array);
        if (outputs_new(&outputs) >= 0) {
                for (size_t i = 0; files && i < json_object_array_length(files); i++) {
                        json_object *f = json_object_array_get_idx(files, i);
                        const char *name = json_get_string(f, "name");
                        int64_t bytes = 0;

                        if (!name || !*name || !json_get_int64(f, "bytes", &bytes) || bytes < 0)
                                continue;
                        outputs_add_base64(outputs, OUTPUT_FILE, name, (uint64_t) bytes, json_get_string(f, "data"));
                }
                outputs_append_content(outputs, content);
        }

        /* Lean: what is at its usual value (no error, not timed out, state kept, nothing written) is left out. */
        bool interrupted = o->interrupted || json_object_get_boolean(json_get(r, "interrupted", json_type_boolean));
        json_add_string(st, "sandbox_id", workspace_id(c->sandbox));
        json_add_int(st, "execution_count", count);
        json_add_string(st, "stdout", strempty(json_get_string(r, "stdout")));
        if (!streq(strempty(json_get_string(r, "stderr")), ""))
                json_add_string(st, "stderr", json_get_string(r, "stderr"));
        if (json_get_string(r, "result"))
                json_add_string(st, "result", json_get_string(r, "result"));
        if (exc || error)
                json_add_string(st, "error", exc ?: error);
        if (message) {
                if (mlen > 0 && message[mlen - 1] == '\n')
                        message[--mlen] = 0;
                json_add_string(st, "message", message);
        }
        if (o->timed_out) {
                json_add_bool(st, "timed_out", true);
                json_add_int(st, "timeout_seconds", timeout_s);
        }
        if (interrupted)
                json_add_bool(st, "interrupted", true);
        if (o->restarted || o->reset)
                json_add_bool(st, "state_lost", true);
        if (o->reset)
                json_add_bool(st, "files_lost", true);
        json_object *file_list = outputs_files_json(outputs);
        if (json_object_array_length(file_list) > 0)
                json_add(st, "files", file_list);
        else
                json_object_put(file_list);
        if (hint)
                json_add_string(st, "hint", hint);
        json_add_int(st, "duration_ms", (int64_t) ((now_usec() - c->t_start) / USEC_PER_MSEC));
        /* Figures and files reach the model only in content[]: then there is no structuredContent (outputs.h). */
        if (json_object_array_length(names) > 0 || outputs_n_included(outputs) > 0) {
                json_object_put(st);
                st = NULL;
        }
        json_object_put(names);
        is_error = exc || error || o->timed_out;
        cell_log(c, o->timed_out ? "timeout" : error ? "error" : exc ? "failed" : "ok", error, count);
        tool_call_finish(c->call, content, st, is_error);
}

static int execute_code_call(ToolCall *call, json_object *args) {
        Workspace *sb = ws_lookup(call, args);
        int64_t want = 0;

        if (!sb)
                return 0;
        const char *code = json_get_string(args, "code");
        WsCall *c = ws_call_new(call, sb);
        if (!c)
                return -ENOMEM;
        c->script_len = strlen(strempty(code));
        c->script = strndup(strempty(code), c->script_len);
        if (!c->script) {
                ws_call_free(c);
                return -ENOMEM;
        }
        c->cancelled = on_cell_cancelled;
        c->timeout_usec = workspace_default_timeout_usec(sb);
        if (json_get_int64(args, "timeout_seconds", &want)) {
                uint64_t w = (uint64_t) MAX(want, (int64_t) 1) * USEC_PER_SEC;
                c->timeout_clamped = w > workspace_max_timeout_usec(sb);
                c->timeout_usec = MIN(w, workspace_max_timeout_usec(sb));
        }

        _cleanup_json_ json_object *req = json_object_new_object();
        json_add_string(req, "op", "exec");
        json_add_string(req, "code", c->script);
        json_add_int(req, "out_cap", (int64_t) workspace_output_cap(sb));
        json_add_int(req, "max_images", MAX_IMAGES);
        json_add_int(req, "max_image_bytes", MAX_IMAGE_BYTES);
        json_add_int(req, "max_files", OUTPUTS_MAX_FILES);
        json_add_int(req, "max_file_bytes", OUTPUTS_MAX_BYTES);
        json_add_int(req, "max_files_total", OUTPUTS_MAX_TOTAL);
        int k = ws_call_request(c, req, c->timeout_usec, on_cell);
        if (k != 0) {
                ws_call_free(c);
                return ws_not_started(call, k);
        }
        return 0;
}

static const char input_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"sandbox_id\":{\"type\":\"string\",\"maxLength\":64,\"description\":\"From create_sandbox\"},"
        "\"code\":{\"type\":\"string\",\"description\":\"Python statements. Like a notebook cell: the value of a final "
        "expression is shown; variables and imports stay for the next call.\"},"
        "\"timeout_seconds\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":86400,\"description\":\"Seconds. "
        "When they are up the cell is interrupted (KeyboardInterrupt) and the state is kept; a cell that does not "
        "stop is killed with the interpreter's state.\"}"
        "},\"required\":[\"sandbox_id\",\"code\"],\"additionalProperties\":false}";

const Tool tool_execute_code = {
        .name = "execute_code",
        .title = "Run code in a persistent sandbox",
        .description =
                "Run Python code in a sandbox made by create_sandbox, like a notebook cell: variables, functions and "
                "imports persist between calls, the value of the last expression is shown, stdout and stderr are "
                "captured, and matplotlib figures left open are returned as PNG images. Files the cell writes or changes "
                "in /work/out/ come back too (create the directory first: os.makedirs(\"/work/out\", "
                "exist_ok=True)): small text files inline, others as embedded resources (at most 16 files, 4 MiB "
                "each, 10 MiB in all; read larger ones in pieces with read_file's offset and length). The "
                "working directory is /work (private, persists with the "
                "sandbox). No network access unless the administrator allows it. "
                "Install packages with install_package, not pip.",
        .input_schema = input_schema,
        .open_world_hint = false,
        .call = execute_code_call,
};
