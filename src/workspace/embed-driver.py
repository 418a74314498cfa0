#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write src/workspace/driver.c from src/workspace/driver.py (run after editing the driver)."""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "driver.py")) as f:
    src = f.read()
# Comments and blank lines need not travel: the string is passed on bwrap's command line.
lines = [l for l in src.splitlines() if l.strip() and not l.lstrip().startswith("#")]
out = ["/* SPDX-License-Identifier: MIT */",
       "/* Generated from driver.py by embed-driver.py: edit driver.py, then run embed-driver.py. */",
       '#include "workspace.h"', "", "const char workspace_driver_code[] ="]
for l in lines:
    esc = l.replace("\\", "\\\\").replace('"', '\\"')
    out.append('        "%s\\n"' % esc)
out[-1] += ";"
with open(os.path.join(here, "driver.c"), "w") as f:
    f.write("\n".join(out) + "\n")
