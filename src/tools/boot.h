/* SPDX-License-Identifier: MIT */
#pragma once

/* The Python program execute_python's sandbox runs the script with: src/tools/boot.py, which says how. */
extern const char boot_code[];
