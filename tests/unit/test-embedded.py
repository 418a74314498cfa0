#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The C files made from embedded Python are what their .py files make now, and the .py files compile.

A change to src/tools/boot.py (or src/workspace/driver.py) that was not followed by make (which rewrites
src/tools/boot.c, src/workspace/driver.c) fails here, before a daemon runs the old program."""
import os
import subprocess
import sys

top = os.environ.get("TOP_SRCDIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
embed = os.path.join(top, "src/tools/embed-python.py")
EMBEDDED = [
    ("boot_code", "src/tools/boot.py", "src/tools/boot.c", ["outputs.h", "boot.h"]),
    ("metadata_reader_code", "src/runtime/metadata-reader.py", "src/runtime/metadata-reader.c", ["programs.h"]),
    ("font_list_code", "src/runtime/font-list.py", "src/runtime/font-list.c", ["programs.h"]),
    ("workspace_driver_code", "src/workspace/driver.py", "src/workspace/driver.c", ["workspace.h"]),
]
failed = 0
for symbol, py, c, headers in EMBEDDED:
    with open(os.path.join(top, py), encoding="utf-8") as f:
        compile(f.read(), py, "exec")
    r = subprocess.run([sys.executable, embed, "--check", symbol, os.path.join(top, py), os.path.join(top, c)] + headers)
    if r.returncode != 0:
        failed += 1
    else:
        print("ok: %s is current" % c)

# The check can fail: a program one line longer is not what the file holds.
import tempfile
with tempfile.TemporaryDirectory() as d:
    src = os.path.join(top, EMBEDDED[0][1])
    changed = os.path.join(d, "boot.py")
    with open(src, encoding="utf-8") as f, open(changed, "w", encoding="utf-8") as g:
        g.write(f.read() + "pass\n")
    r = subprocess.run([sys.executable, embed, "--check", "boot_code", changed, os.path.join(top, EMBEDDED[0][2]),
                        "outputs.h", "boot.h"], stderr=subprocess.DEVNULL)
    if r.returncode != 1:
        print("FAIL: --check did not notice a changed program")
        failed += 1
sys.exit(1 if failed else 0)
