/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The Python programs the runtime runs in the sandbox, each written in the .py file of its name beside this one and
 * turned into the C file of that name by src/tools/embed-python.py (make does it; tests/unit/test-embedded.py
 * fails when a C file is not what its .py makes).
 */

/* metadata-reader.py: a PEP 723 block's TOML (the file argv[1]) as one JSON line, {"doc": ...} or {"error": ...}. */
extern const char metadata_reader_code[];
/* font-list.py: matplotlib's font list, made in the sandbox's /tmp: its file name, a newline, then the file. */
extern const char font_list_code[];
