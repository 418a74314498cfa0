/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The "files" argument of execute_python and create_sandbox: the user's own files, made available read-only at
 * /work/in/NAME. The daemon never opens a path for them: the shim, which runs as the user, opens each file and
 * passes the open file descriptor with the message (SCM_RIGHTS), putting {"as": NAME, "fd": SLOT} in the
 * place of {"path": ...}; see mcp-python-sandbox(1). The sandbox gets a copy of the contents (bwrap's
 * --ro-bind-data), made when it starts.
 */

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "mcp/tool.h"
#include "protocol/fdqueue.h"
#include "sandbox/sandbox.h"

#define INPUT_FILES_DIR SANDBOX_WORK_DIR "/in"
#define INPUT_FILES_MAX FDQUEUE_MAX_FDS

typedef struct InputFiles {
        int fds[INPUT_FILES_MAX];       /* our own copies, O_CLOEXEC */
        char *dests[INPUT_FILES_MAX];   /* INPUT_FILES_DIR/NAME */
        uint64_t bytes;                 /* all of them together, when they were taken */
        size_t n;
} InputFiles;

void input_files_done(InputFiles *f);
/*
 * Take the call's "files" (absent: none): each fd checked (a regular file open for reading) and duplicated, each
 * name checked, together at most max_bytes (0: no cap of its own). 0, or -EINVAL with what to tell the model in
 * *ret_error, or -ENOMEM.
 */
int input_files_take(const ToolCall *call, json_object *args, uint64_t max_bytes, InputFiles *ret, char **ret_error);
/* Rewind each fd (bwrap reads from the current offset) and describe it in data[0..n). -errno. */
int input_files_data(const InputFiles *f, SandboxData *data);
/* The input schema's "files" property, for tools that take it. */
#define INPUT_FILES_SCHEMA                                                                                          \
        "\"files\":{\"type\":\"array\",\"maxItems\":16,\"description\":\"Your own files to read, read-only, at "    \
        "/work/in/NAME, without pasting them: "                                                               \
        "[{\\\"path\\\": \\\"/home/me/data.csv\\\", \\\"as\\\": \\\"data.csv\\\"}]. "                     \
        "The path must be absolute; as defaults to the file's name. Only through the mcp-python-sandbox command, "  \
        "which opens each file as the user who runs it.\",\"items\":{\"type\":\"object\",\"properties\":{"        \
        "\"path\":{\"type\":\"string\",\"maxLength\":4096},\"as\":{\"type\":\"string\",\"maxLength\":128},"        \
        "\"fd\":{\"type\":\"integer\",\"description\":\"Set by mcp-python-sandbox, not by you\"},"                \
        "\"error\":{\"type\":\"string\",\"maxLength\":4096,\"description\":\"Set by mcp-python-sandbox\"}},"         \
        "\"additionalProperties\":false}}"
