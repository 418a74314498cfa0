/* SPDX-License-Identifier: MIT */
/*
 * list_files, read_file, write_file: carried out by the driver inside the
 * sandbox (as the sandbox's user, within its mounts), so the daemon never
 * opens a path the sandbox's code could have redirected.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "strv.h"
#include "sandbox-common.h"
#include "tools.h"

#define FILE_OP_TIMEOUT_USEC (20 * USEC_PER_SEC)

static void on_list(WsCall *c, const WorkspaceOpOutcome *o) {
        const char *e = ws_outcome_error(o);
        if (e)
                return ws_fail(c->call, "%s", e);

        json_object *st = json_object_new_object();
        json_object *entries = json_get(o->reply, "entries", json_type_array);
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        size_t n = entries ? json_object_array_length(entries) : 0;

        json_add_string(st, "sandbox_id", workspace_id(c->sandbox));
        json_add(st, "entries", json_object_get(entries) ?: json_object_new_array());
        json_add_bool(st, "truncated", json_object_get_boolean(json_get(o->reply, "truncated", json_type_boolean)));
        int k = strextendf_len(&text, &len, "%zu entr%s in /work%s\n", n, n == 1 ? "y" : "ies",
                               json_object_get_boolean(json_get(o->reply, "truncated", json_type_boolean)) ?
                               " (truncated)" : "");
        for (size_t i = 0; k >= 0 && i < n; i++) {
                json_object *x = json_object_array_get_idx(entries, i);
                int64_t size = 0;
                (void) json_get_int64(x, "size", &size);
                k = strextendf_len(&text, &len, "%-9s %10lld  %s%s%s\n", strempty(json_get_string(x, "type")),
                                   (long long) size, strempty(json_get_string(x, "path")),
                                   json_get_string(x, "target") ? " -> " : "", strempty(json_get_string(x, "target")));
        }
        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(text ?: ""));
        tool_call_finish(c->call, content, st, false);
}

static void on_read(WsCall *c, const WorkspaceOpOutcome *o) {
        const char *e = ws_outcome_error(o);
        if (e)
                return ws_fail(c->call, "%s", e);

        json_object *st = json_object_new_object();
        const char *content_s = strempty(json_get_string(o->reply, "content"));
        int64_t size = 0, offset = 0, file_size = 0;
        bool eof = json_object_get_boolean(json_get(o->reply, "eof", json_type_boolean));

        (void) json_get_int64(o->reply, "size", &size);
        (void) json_get_int64(o->reply, "offset", &offset);
        (void) json_get_int64(o->reply, "file_size", &file_size);
        json_add_string(st, "sandbox_id", workspace_id(c->sandbox));
        json_add_string(st, "encoding", strempty(json_get_string(o->reply, "encoding")));
        json_add_int(st, "size", size);
        json_add_int(st, "offset", offset);
        json_add_int(st, "file_size", file_size);
        json_add_bool(st, "eof", eof);
        json_add_string(st, "content", content_s);
        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(content_s));
        /* A piece of a file says which, and where the rest begins. */
        if (offset > 0 || !eof) {
                _cleanup_free_ char *where = NULL;
                if (asprintf(&where, "(bytes %lld to %lld of %lld%s%lld)", (long long) offset,
                             (long long) (offset + size), (long long) file_size,
                             eof ? ": the end; the file begins at offset " : "; the rest from offset ",
                             eof ? 0LL : (long long) (offset + size)) >= 0)
                        json_object_array_add(content, content_text_new(where));
        }
        tool_call_finish(c->call, content, st, false);
}

static void on_write(WsCall *c, const WorkspaceOpOutcome *o) {
        const char *e = ws_outcome_error(o);
        if (e)
                return ws_fail(c->call, "%s", e);

        json_object *st = json_object_new_object();
        int64_t size = 0;
        _cleanup_free_ char *text = NULL;
        (void) json_get_int64(o->reply, "size", &size);
        json_add_string(st, "sandbox_id", workspace_id(c->sandbox));
        json_add_string(st, "path", strempty(json_get_string(o->reply, "path")));
        json_add_int(st, "size", size);
        if (asprintf(&text, "Wrote %lld bytes to /work/%s.", (long long) size,
                     strempty(json_get_string(o->reply, "path"))) < 0)
                text = NULL;
        json_object *content = json_object_new_array();
        json_object_array_add(content, content_text_new(text ?: "written"));
        tool_call_finish(c->call, content, st, false);
}

static int file_call(ToolCall *call, json_object *args, const char *op, WsReplyFunc reply) {
        Workspace *sb = ws_lookup(call, args);
        if (!sb)
                return 0;

        const char *enc = json_get_string(args, "encoding");
        if (enc && !streq(enc, "text") && !streq(enc, "base64")) {
                ws_fail(call, "encoding must be \"text\" or \"base64\"");
                return 0;
        }
        _cleanup_json_ json_object *req = json_object_new_object();
        json_add_string(req, "op", op);
        json_add_string(req, "path", json_get_string(args, "path") ?: ".");
        json_add_string(req, "encoding", enc ?: "text");
        json_add_int(req, "max_bytes", WORKSPACE_FILE_MAX);
        if (json_get(args, "recursive", json_type_boolean))
                json_add_bool(req, "recursive", json_object_get_boolean(json_get(args, "recursive", json_type_boolean)));
        if (streq(op, "read_file")) {
                json_object *off = json_object_object_get(args, "offset");
                json_object *len = json_object_object_get(args, "length");
                int64_t v;

                if (off) {
                        if (!json_object_is_type(off, json_type_int) || (v = json_object_get_int64(off)) < 0) {
                                ws_fail(call, "offset must be a whole number of bytes, 0 or more");
                                return 0;
                        }
                        json_add_int(req, "offset", v);
                }
                if (len) {
                        if (!json_object_is_type(len, json_type_int) || (v = json_object_get_int64(len)) < 1 ||
                            v > WORKSPACE_FILE_MAX) {
                                ws_fail(call, "length must be a whole number of bytes from 1 to %d",
                                        WORKSPACE_FILE_MAX);
                                return 0;
                        }
                        json_add_int(req, "length", v);
                }
        }
        if (json_get(args, "append", json_type_boolean))
                json_add_bool(req, "append", json_object_get_boolean(json_get(args, "append", json_type_boolean)));
        if (json_get_string(args, "content")) {
                size_t n = strlen(json_get_string(args, "content"));
                if (n > (size_t) WORKSPACE_FILE_MAX / 3 * 4 + 8) {
                        ws_fail(call, "the content is larger than write_file's cap of %d bytes", WORKSPACE_FILE_MAX);
                        return 0;
                }
                json_add_string(req, "content", json_get_string(args, "content"));
        }

        WsCall *c = ws_call_new(call, sb);
        if (!c)
                return -ENOMEM;
        int k = ws_call_request(c, req, FILE_OP_TIMEOUT_USEC, reply);
        if (k != 0) {
                ws_call_free(c);
                return ws_not_started(call, k);
        }
        return 0;
}

static int list_files_call(ToolCall *call, json_object *args) {
        return file_call(call, args, "list_files", on_list);
}
static int read_file_call(ToolCall *call, json_object *args) {
        return file_call(call, args, "read_file", on_read);
}
static int write_file_call(ToolCall *call, json_object *args) {
        return file_call(call, args, "write_file", on_write);
}

static const char list_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"sandbox_id\":{\"type\":\"string\",\"maxLength\":64},"
        "\"path\":{\"type\":\"string\",\"maxLength\":4096,\"description\":\"A directory relative to /work "
        "(default: /work itself)\"},"
        "\"recursive\":{\"type\":\"boolean\"}"
        "},\"required\":[\"sandbox_id\"],\"additionalProperties\":false}";

static const char read_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"sandbox_id\":{\"type\":\"string\",\"maxLength\":64},"
        "\"path\":{\"type\":\"string\",\"maxLength\":4096,\"description\":\"Relative to /work\"},"
        "\"encoding\":{\"type\":\"string\",\"enum\":[\"text\",\"base64\"],\"description\":\"text (UTF-8, the "
        "default) or base64 for binary files\"},"
        "\"offset\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"Where to start, in bytes (default 0)\"},"
        "\"length\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1048576,\"description\":\"How many bytes "
        "to read at most (default: all, up to 1 MiB)\"}"
        "},\"required\":[\"sandbox_id\",\"path\"],\"additionalProperties\":false}";

static const char write_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"sandbox_id\":{\"type\":\"string\",\"maxLength\":64},"
        "\"path\":{\"type\":\"string\",\"maxLength\":4096,\"description\":\"Relative to /work; missing "
        "directories are created\"},"
        "\"content\":{\"type\":\"string\"},"
        "\"encoding\":{\"type\":\"string\",\"enum\":[\"text\",\"base64\"]},"
        "\"append\":{\"type\":\"boolean\"}"
        "},\"required\":[\"sandbox_id\",\"path\",\"content\"],\"additionalProperties\":false}";

const Tool tool_list_files = {
        .name = "list_files",
        .title = "List files in a sandbox",
        .description = "List the files in a persistent sandbox's work directory /work (or a directory in it), with "
                       "types and sizes.",
        .input_schema = list_schema,
        .read_only_hint = true,
        .idempotent_hint = true,
        .call = list_files_call,
};

const Tool tool_read_file = {
        .name = "read_file",
        .title = "Read a file from a sandbox",
        .description = "Read a file from a persistent sandbox's work directory /work, as UTF-8 text or base64 "
                       "(encoding \"base64\" for binary files). At most 1 MiB at a time: read a larger file, such "
                       "as one a cell wrote to /work/out, in pieces with offset and length (bytes); the result "
                       "gives file_size and eof. Paths are relative to /work; '..' and links leading out of it are "
                       "refused.",
        .input_schema = read_schema,
        .read_only_hint = true,
        .idempotent_hint = true,
        .call = read_file_call,
};

const Tool tool_write_file = {
        .name = "write_file",
        .title = "Write a file into a sandbox",
        .description = "Write a file into a persistent sandbox's work directory /work, from text or base64 "
                       "(encoding \"base64\"). At most 1 MiB. Paths are relative to /work; '..' and links leading "
                       "out of it are refused.",
        .input_schema = write_schema,
        .destructive_hint = true,
        .idempotent_hint = true,
        .call = write_file_call,
};
