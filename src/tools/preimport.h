/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Warm imports: what a waiting sandbox of an environment may import before it is handed a script, and which
 * scripts may be handed one that did. The rule (README.md, "Warm imports"):
 *
 *   A waiting sandbox imports a list L of items (modules, or a module and names from it), in order, before the
 *   script arrives. It is handed only a
 *   script whose leading import statements (the imports before any other statement; a docstring, comments,
 *   blank lines and `from __future__` may come among them) import L first, in that order, and whose text
 *   passes preimport_script_plain_enough(). Importing L is then exactly what the script's first statements
 *   would have done: nothing of the script ran before them, so nothing it sets (the environment, sys.path,
 *   warnings filters, the working directory) can be seen by those imports either way.
 *
 * An item of L is what one statement does first: "import a.b, c" gives two, "a.b" and "c"; "from a.b import x
 * as y, z" gives one, "a.b:x:z" (the module, then the names it takes, in order, each after a ':'), which the
 * waiting sandbox performs as Python's from-import does, binding nothing: __import__("a.b", fromlist=("x", "z"))
 * (which imports a.b.x, a.b.z where a.b has no such attribute), then getattr() of each name in order. A package
 * whose module __getattr__() loads its code on that access (pydantic, scipy) has then done so before the hand-over;
 * when the script's statement runs, it repeats lookups that are done (a module __getattr__ that keeps nothing runs
 * again: README.md says so). Items compare exactly: a sandbox that did
 * "a.b:x:z" goes only to a script whose statement at that place takes the same names in the same order. If an
 * item fails (no such module or name), the sandbox exits unused, as the script would have failed there. "from a
 * import *" gives "a", as "import a"; a relative import ends L (no package for __main__); "from __future__" gives
 * nothing.
 *
 * Modules every interpreter has loaded before any code runs (sys, os, ...) are left out of both lists when they
 * are imported whole ("import os"): importing one again does nothing. A from-item is never left out ("from os
 * import path" is "os:path"): a name it takes may be missing. L is learnt from runs: the leading items of the
 * environment's last run, up to the last whose top-level package (the first component of the module) the run
 * loaded from site-packages (the boot program reports those), at most PREIMPORT_MAX_MODULES items of at most
 * PREIMPORT_MAX_ITEM bytes, PREIMPORT_MAX_LINE joined with commas (the boot program's line of items).
 */

#include <stdbool.h>
#include <stddef.h>

#define PREIMPORT_MAX_MODULES 32
#define PREIMPORT_MAX_NAME 128
#define PREIMPORT_MAX_ITEM 256                  /* "module:name:name": a longer from-statement ends the list */
#define PREIMPORT_MAX_LINE 3072                 /* the items joined with ',' (whole in boot.py's 'P' record) */
#define PREIMPORT_NAMES_SEPARATOR ':'           /* in no name, in no list of items (',', ' ') */

/* The items the script's leading import statements import, in order, each once, the always-loaded modules
 * imported whole left out (a strv; empty when the script starts with anything else). NULL: out of memory. */
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

/* pre (a list a sandbox imported) comes first in script's leading items, in the same order, each the same. */
bool preimport_is_prefix(char *const *pre, char *const *script);

/* What a run teaches: script's leading items up to the last one whose top-level name is in loaded (the
 * top-level packages the run loaded from site-packages, separated by spaces). An empty strv when none is;
 * NULL: out of memory. */
char **preimport_learn(char *const *script, const char *loaded);
