/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * NDJSON framing: one JSON-RPC message per line, as MCP's stdio transport
 * defines it, on stdio and on the Unix socket alike.
 *
 * Bytes go in with framing_reserve()/framing_commit() (read straight into the
 * reader's memory), lines come out with framing_next(). A line longer than the
 * limit is never held in memory: it is reported once as FRAMING_OVERSIZE and
 * the rest of it is dropped as it arrives.
 */

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

enum {
        FRAMING_NEED_MORE = 0,
        FRAMING_LINE = 1,
        FRAMING_OVERSIZE = 2,
};

typedef struct Framing {
        Buf buf;
        size_t max_line;
        size_t scanned;     /* bytes after buf.start known to hold no newline */
        bool discarding;    /* inside a line that went over the limit */
} Framing;

void framing_init(Framing *f, size_t max_line);
void framing_done(Framing *f);
int framing_reserve(Framing *f, size_t n, char **ret);
void framing_commit(Framing *f, size_t n);
/* framing_reserve() and framing_commit() of a copy of p (for tests). */
int framing_feed(Framing *f, const void *p, size_t n);
/*
 * Returns FRAMING_LINE with the line (without "\n" or "\r\n", NUL-terminated
 * in place; valid until the next call), FRAMING_OVERSIZE once per line over
 * the limit, or FRAMING_NEED_MORE.
 */
int framing_next(Framing *f, char **ret_line, size_t *ret_len);
/* At end of input: a last line without a newline, if any (same returns). */
int framing_finish(Framing *f, char **ret_line, size_t *ret_len);
/* Drop the line being received: the bytes held (which must hold no complete line: framing_next() said
 * FRAMING_NEED_MORE) and the rest of it as it arrives, up to its newline, as for a line over the limit. */
void framing_discard_line(Framing *f);
/* Bytes held for a line not complete yet. */
size_t framing_pending(const Framing *f);
