/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * PEP 723 inline script metadata: finds the "# /// script" block of a script
 * and returns its TOML text. The TOML itself is parsed elsewhere.
 *
 * Rules (PyPA "Inline script metadata"): a block opens with a line that is
 * exactly "# /// TYPE" (TYPE: ASCII letters, digits, hyphens), continues with
 * lines that are "#" alone or "# " + text, and is closed by the last "# ///"
 * line of that run of comment lines, i.e. a "# ///" followed by a line that
 * is not a content line (or by the end of the script). Only lines starting
 * at column 0 count; CRLF line endings are accepted. Blocks of other types
 * are skipped, an unclosed block is ignored (and reported through
 * Pep723Block.unclosed), two "script" blocks are an error.
 */

#include <stdbool.h>
#include <stddef.h>

typedef struct Pep723Block {
        char *toml;             /* content lines with "# "/"#" stripped, each ending in "\n";
                                 * "" for an empty block, NULL if the script has no block */
        unsigned start_line;    /* 1-based line of "# /// script", 0 if no block */
        unsigned end_line;      /* 1-based line of the closing "# ///" */
        bool unclosed;          /* a "# /// script" without a closing line was ignored: warn */
        unsigned unclosed_line; /* 1-based line of the first such opening line */
        unsigned unclosed_close_line; /* its last "# ///" line, followed by more "#" lines; 0 if none */
} Pep723Block;

/*
 * Returns 0 (also when there is no block: ret->toml == NULL), -EINVAL with
 * a message in *ret_error (if ret_error is not NULL) for two script blocks
 * or a NUL byte in the script, or -ENOMEM. *ret is only written on success.
 */
int pep723_extract(const char *script, size_t len, Pep723Block *ret, char **ret_error);

/* A one-sentence warning about an ignored unclosed block in *ret, or NULL if there is none. */
int pep723_block_warning(const Pep723Block *b, char **ret);

void pep723_block_done(Pep723Block *b);
