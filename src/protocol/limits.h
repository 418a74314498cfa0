/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Caps on what one run hands back besides its text: the figures and files, whether from execute_python's
 * sandbox (tools/outputs.h reads its stream) or from a persistent sandbox's driver (whose largest message they
 * bound, workspace/). Whatever the sandbox sends, no more than this is kept.
 */

#define OUTPUTS_MAX_FIGURES 8
#define OUTPUTS_MAX_FILES 16
#define OUTPUTS_MAX_BYTES (4 * 1024 * 1024)            /* one figure or file */
#define OUTPUTS_MAX_TOTAL (10 * 1024 * 1024)           /* all of them */
