/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The audit record of a run: one event per run (execute_python, a persistent sandbox's cell) with structured
 * fields, so that an administrator can ask who ran what and how it ended:
 *
 *     journalctl MESSAGE_ID=3322a7dce43f4645a947f20b87705261 MCP_PEER_UID=1000 MCP_VERDICT=limit
 *
 * When stderr is journald's stream (JOURNAL_STREAM names it, as systemd sets it for the service), the record
 * goes to the journal natively with its fields. Otherwise it is one line on stderr: the message, then the fields
 * as KEY=value, a value with blanks or quotes in double quotes with C escapes (octal for control characters).
 * Records are at priority info: with log-level below that there are none.
 *
 * The fields (every record has the first five; the others when they apply):
 *   MCP_TOOL            the tool that ran it
 *   MCP_PEER_UID        SO_PEERCRED of the connection
 *   MCP_PEER_PID
 *   MCP_SCRIPT_SHA256   of the script or cell as the client sent it
 *   MCP_VERDICT         ok, failed (exit status not 0), killed (by a signal), timeout, limit (MCP_LIMIT says
 *                       which), error (it did not run: MCP_FAILED_PHASE and MCP_ERROR say why), cancelled
 *   MCP_SCRIPT_BYTES, MCP_EXIT_CODE, MCP_SIGNAL, MCP_LIMIT, MCP_FAILED_PHASE, MCP_ERROR, MCP_ENV_KEY,
 *   MCP_PYTHON, MCP_SANDBOX_ID, MCP_EXECUTION_COUNT, MCP_SANDBOXED, MCP_PRESTARTED, MCP_ENV_BUILT,
 *   MCP_PREPARE_USEC, MCP_QUEUE_USEC, MCP_RUN_USEC, MCP_DURATION_USEC, MCP_TIMEOUT_USEC
 */

#include <stddef.h>

#include "macro.h"
#include "mcp/tool.h"

#define RUNLOG_MESSAGE_ID "3322a7dce43f4645a947f20b87705261"

typedef struct RunLog {
        char **fields;   /* "KEY=value" */
} RunLog;

/* Start a record for call, with MCP_TOOL, MCP_PEER_UID, MCP_PEER_PID and the script's hash and size. */
void runlog_begin(RunLog *l, const ToolCall *call, const char *script, size_t script_len);
/* key: upper case letters, digits and '_', as journald wants; a value longer than 1 KiB is cut. */
void runlog_add(RunLog *l, const char *key, const char *format, ...) _printf_(3, 4);
/* Send the record (if the log level lets info through) with a MESSAGE, and free its fields. */
void runlog_emit(RunLog *l, const char *format, ...) _printf_(2, 3);

/* For tests: where the record goes. */
bool runlog_to_journal(void);
