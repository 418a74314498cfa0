/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The TOML of the PEP 723 blocks people write, read in the daemon: without it, every new block costs a sandbox
 * with an interpreter for tomllib (src/runtime/metadata.h), some 30 ms of a first run.
 *
 * Only a strict subset is read here, and what it reads it reads as tomllib does; anything else is left to tomllib,
 * which then accepts or refuses it. The subset: ASCII text without control characters other than tab and newline;
 * blank lines and comments; at most one `requires-python` (a string) and one `dependencies` (an array of strings,
 * over several lines, with comments and a trailing comma as TOML allows), as bare keys, nothing else. Strings are
 * basic ("...") or literal ('...') on one line, basic ones without escapes. Every shape tests/unit/test-toml-subset.py
 * generates is read the same here and by tomllib, or left to tomllib.
 *
 * What the daemon holds for it is bounded whatever the script's size: a longer text or a longer list goes to tomllib
 * in its sandbox, whose answer the daemon reads up to a cap (1 MiB).
 */

#define TOML_SUBSET_MAX_BYTES (64U * 1024)      /* of the block's text */
#define TOML_SUBSET_MAX_ITEMS 256U              /* dependencies: as many as the dependencies argument may have */

#include <json-c/json.h>

/* 1 and *ret the document (a JSON object, as tomllib's dict); 0 when the text is outside the subset (*ret
 * untouched): ask tomllib; -ENOMEM. */
int toml_subset_parse(const char *text, json_object **ret);
