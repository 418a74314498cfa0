/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Warm imports: what a waiting sandbox of an environment may import before it is handed a script, and which
 * scripts may be handed one that did. The rule (README.md, "Warm imports"):
 *
 *   A waiting sandbox imports a list L of modules, in order, before the script arrives. It is handed only a
 *   script whose leading import statements (the imports before any other statement; a docstring, comments,
 *   blank lines and `from __future__` may come among them) import L first, in that order, and whose text
 *   passes preimport_script_plain_enough(). Importing L is then exactly what the script's first statements
 *   would have done: nothing of the script ran before them, so nothing it sets (the environment, sys.path,
 *   warnings filters, the working directory) can be seen by those imports either way.
 *
 * Modules every interpreter has loaded before any code runs (sys, os, ...) are left out of both lists:
 * importing one again does nothing. L is learnt from runs: the leading modules of the environment's last run,
 * up to the last whose top-level package the run loaded from site-packages (the boot program reports those),
 * at most PREIMPORT_MAX_MODULES.
 */

#include <stdbool.h>
#include <stddef.h>

#define PREIMPORT_MAX_MODULES 32
#define PREIMPORT_MAX_NAME 128

/* The modules the script's leading import statements import, in order, each once, the always-loaded ones left
 * out (a strv; empty when the script starts with anything else). NULL: out of memory. */
char **preimport_leading_modules(const char *script, size_t len);

/* False when the script names something through which it could tell what was imported ahead (sys.modules,
 * sys.path, the import machinery, frames, getattr/vars/globals/eval, warnings, signal, faulthandler, atexit)
 * or change what an import does (the environment, the working directory), or when Python could read its text
 * otherwise than preimport_leading_modules() does: text that is not UTF-8, a character beyond ASCII that could
 * be part of a name (only symbols such as ±, °, —, “”, →, ✓ and emoji may be there: outside comments and strings
 * they are syntax errors; a UTF-8 BOM at the start aside), a NUL, a form feed, a carriage return not followed by
 * a newline, or an encoding declaration (PEP 263, on either of the first two lines) naming anything but UTF-8,
 * ASCII or Latin-1 (only UTF-8 with text beyond ASCII). It is then handed no sandbox
 * that imported anything. Conservative: the text anywhere, comments and strings included. */
bool preimport_script_plain_enough(const char *script, size_t len);

/* pre (a list a sandbox imported) comes first in script's leading modules, in the same order. */
bool preimport_is_prefix(char *const *pre, char *const *script);

/* What a run teaches: script's leading modules up to the last one whose top-level name is in loaded (the
 * top-level packages the run loaded from site-packages, separated by spaces). An empty strv when none is;
 * NULL: out of memory. */
char **preimport_learn(char *const *script, const char *loaded);
