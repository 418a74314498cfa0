/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The interpreters runs may use: found by probing python3.N executables in
 * the configured directories, filtered by the allowed versions, and chosen
 * per call from python_version and the script's requires-python.
 */

#include <stdbool.h>
#include <stddef.h>

#include "pep723/pep440.h"

typedef struct Python {
        char *executable;       /* canonical path (sys.executable, resolved) */
        char *prefix;           /* sys.base_prefix: bound read-only into the sandbox */
        char *version;          /* "3.12.1" */
        Pep440Version parsed;
} Python;

typedef struct Pythons {
        Python **items;         /* sorted, newest first; each lives until pythons_done() or pythons_filter()
                                 * drops it, wherever the list grows */
        size_t n;
} Pythons;

void pythons_done(Pythons *p);
/*
 * Add an interpreter from the one-line JSON its probe printed
 * ({"version": ..., "executable": ..., "prefix": ...}). Duplicates (the same
 * executable) are dropped. Returns 1 if added, 0 if a duplicate, -errno.
 */
int pythons_add_probe(Pythons *p, const char *json_line);
/* Add an interpreter known without running it (one installed by uv). The same returns as pythons_add_probe(). */
int pythons_add(Pythons *p, const char *version, const char *executable, const char *prefix);
/* Keep only versions that one of the allowed prefixes ("3.12", "3.12.1") matches; empty: all. */
void pythons_filter(Pythons *p, char *const *allowed);
/* Does "3.12" / "3.12.1" / "3" match this interpreter's version? */
bool python_version_matches(const Python *py, const char *want);
/*
 * Choose the newest interpreter matching want (may be NULL) and requires-python
 * (may be NULL). NULL with a message listing what there is when none fits.
 */
const Python *pythons_choose(const Pythons *p, const char *want, const char *requires_python, char **ret_error);
/* "3.13.0, 3.12.1, 3.11.7" — malloc'd. */
char *pythons_list(const Pythons *p);

/*
 * python-search-path expanded, in its order: "~/" at the start of an entry is home (the entry is left out when home
 * is NULL); an entry with a "*" is the directories the pattern matches, sorted, but for those with a "+" in their
 * path (uv's "+freethreaded" and "+debug" builds are not the one calls ask for). NULL when out of memory.
 */
char **pythons_search_dirs(char *const *search_path, const char *home);
/*
 * The interpreters to probe in dirs, in the order found: in each directory, python3 and python3.N, by name; each as
 * its canonical path, once (links to one binary are one candidate), and only those we may execute. A directory
 * that cannot be read is left out. Whether one is trusted enough to run is the caller's to decide. -ENOMEM only.
 */
int pythons_candidates(char *const *dirs, char ***ret);
/* The probe each candidate runs: prints one JSON line. */
extern const char python_probe_code[];
