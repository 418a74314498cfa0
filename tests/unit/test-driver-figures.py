#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The persistent sandbox's driver (src/workspace/driver.py) names at most 80 open figures in a cell's answer.

A cell that leaves thousands of figures open must get an answer, not a restarted sandbox: the daemon refuses a
driver message of more than DRIVER_MESSAGE_MAX_VALUES JSON values (src/workspace/driver-input.h), and 3300
figures, one entry each, came to more. Worker.figures() is run here against a stand-in for matplotlib.pyplot
with 5000 figures open: the first 8 are images, at most 80 are named, and all are closed.
"""

import io
import json
import os
import sys
import types

top = os.environ.get("TOP_SRCDIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
with open(os.path.join(top, "src/workspace/driver.py"), encoding="utf-8") as f:
    source = f.read()
# The module ends by serving its socket: everything but that.
body, _, tail = source.rpartition("\nmain()")
assert tail.strip() == "", "driver.py no longer ends with main()"
ns = {"__name__": "driver"}
exec(compile(body, "driver.py", "exec"), ns)

closed = []
plt = types.ModuleType("matplotlib.pyplot")
plt.get_fignums = lambda: list(range(1, 5001))


class Figure:
    def savefig(self, buf, format=None):
        buf.write(b"\x89PNG fake")


plt.figure = lambda num: Figure()
plt.close = closed.append
sys.modules["matplotlib.pyplot"] = plt

worker = object.__new__(ns["Worker"])
worker.io = io
images, used = worker.figures(8, 4 << 20, 10 << 20)
values = json.dumps({"images": images}).count(",") + 1

failed = 0
for what, ok in (("at most 80 named", len(images) <= 80),
                 ("the first 8 are images", all("data" in e for e in images[:8]) and used == 8 * 9),
                 ("the rest say why not", all("error" in e for e in images[8:])),
                 ("all closed", closed == ["all"]),
                 ("far under the daemon's 16384 values", values < 2000)):
    print(("ok: " if ok else "FAIL: ") + what)
    failed += not ok
sys.exit(1 if failed else 0)
