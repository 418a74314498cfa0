# SPDX-License-Identifier: MIT
"""What the unit tests of the PEP 723 reading share: the build's pep723-dump (tests/unit/pep723-dump.c) on a list
of scripts, and the end of a test's report."""

import json
import os
import subprocess


def dump(scripts):
    """pep723-dump's answer for each script: {"toml", "start", "end", "subset"}, {"toml": None} or {"error"}."""
    program = os.path.join(os.path.dirname(os.environ.get("DAEMON", "./x")), "pep723-dump")
    out = subprocess.run([program], input=json.dumps(scripts).encode(), stdout=subprocess.PIPE, check=True).stdout
    results = json.loads(out)
    assert len(results) == len(scripts)
    return results


def report(failures):
    """Print the first failures and their number; the exit status."""
    for f in failures[:30]:
        print("FAIL:", f)
    if failures:
        print(f"{len(failures)} failures")
        return 1
    return 0
