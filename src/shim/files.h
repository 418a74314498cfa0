/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The shim's one look inside the messages: a tools/call whose arguments hold "files" ([{"path": P, "as": N}]).
 * The shim runs as the user, so it opens each P itself (read-only, a regular file, not a symbolic link) and the
 * line goes to the daemon with {"as": N, "fd": SLOT} in its place and the open files attached (SCM_RIGHTS), in
 * slot order; a file it cannot open becomes {"as": N, "error": WHY}. The daemon never opens a path for a
 * client. See mcp-python-sandbox(1).
 */

#include <stddef.h>

#define SHIM_FILES_MAX 16

/*
 * Look at one line (without its newline). 0: it goes as it is. 1: *ret_line (malloc'ed, newline-terminated,
 * *ret_len bytes) goes instead, with ret_fds[0..*ret_n) (room for SHIM_FILES_MAX; O_CLOEXEC; the caller closes
 * them once sent). -ENOMEM.
 */
int shim_files_rewrite(const char *line, size_t len, char **ret_line, size_t *ret_len, int *ret_fds, size_t *ret_n);
