/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * PEP 723 inline script metadata: finds the "# /// script" block of a script
 * and returns its TOML text. The TOML itself is parsed elsewhere.
 *
 * Read as the PEP's reference regex and uv read it: a block opens with a line
 * that is exactly "# /// TYPE" (TYPE: ASCII letters, digits, hyphens) at
 * column 0, continues with lines that are "#" alone or "# " + text, and is
 * closed by the last line of that run of comment lines that is exactly
 * "# ///"; comment lines after it ("# Run with: uv run x.py") are outside the
 * block. CRLF line endings are accepted. Blocks of other types are skipped.
 * Two deliberate differences from the regex: an empty block ("# /// script"
 * directly followed by "# ///") is a block, as the PEP's text and uv have it;
 * and a "# /// script" block that is not closed, or a line that is
 * "# /// script" but for indentation or trailing blanks, is an error, as uv
 * has it, where the regex silently ignores the block. Where uv parts from the
 * regex, the regex wins: uv reads only the first "# /// script" of the text
 * (even mid-line, or inside a block of another type), and misses a second
 * block whose closing line is followed by a comment line
 * (tests/integration/test-pep723-uv.py lists each case).
 */

#include <stdbool.h>
#include <stddef.h>

typedef struct Pep723Block {
        char *toml;             /* content lines with "# "/"#" stripped, each ending in "\n";
                                 * "" for an empty block, NULL if the script has no block */
        unsigned start_line;    /* 1-based line of "# /// script", 0 if no block */
        unsigned end_line;      /* 1-based line of the closing "# ///" */
} Pep723Block;

/*
 * Returns 0 (also when there is no block: ret->toml == NULL), -EINVAL with
 * a one-sentence reason naming the fix in *ret_error (if ret_error is not
 * NULL) for two script blocks, an unclosed or mis-written script block or a
 * NUL byte in the script, or -ENOMEM. *ret is only written on success.
 */
int pep723_extract(const char *script, size_t len, Pep723Block *ret, char **ret_error);

void pep723_block_done(Pep723Block *b);
