/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * One plain sentence that names the fix for a failure, for the model to read:
 * from a run's stderr (a module the script did not declare, a network the
 * administrator turned off) or from uv's reason for a failed install (a
 * package published only as source, an import name given as a package).
 * Pure functions of their inputs: the result builder decides where the
 * sentence goes. Each returns a new string, or NULL when it has nothing to
 * say (or is out of memory: a hint is never worth failing a reply for).
 */

#include <stdbool.h>

#include "pep723/pep508.h"

/* The distribution that provides a top-level module whose name differs from it ("sklearn" -> "scikit-learn"),
 * or NULL. For tests: the table behind the hints. */
const char *hint_distribution_for_module(const char *module);

/* After a failed run: stderr (or the traceback) as the model sees it; network_off: the administrator turned the
 * sandbox's network off (false when unknown: nothing is said about it); the run's requirements (may be NULL);
 * persistent: an execute_code cell, whose packages come from install_package rather than the script. */
char *hint_for_run(const char *stderr_text, bool network_off, const RequirementList *requirements, bool persistent);

/* After a failed install: uv's condensed message, the requirements, and whether source builds are allowed. */
char *hint_for_install(const char *uv_message, const RequirementList *requirements, bool source_builds);
