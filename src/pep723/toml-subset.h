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
 */

#include <json-c/json.h>

/* 1 and *ret the document (a JSON object, as tomllib's dict); 0 when the text is outside the subset (*ret
 * untouched): ask tomllib; -ENOMEM. */
int toml_subset_parse(const char *text, json_object **ret);
