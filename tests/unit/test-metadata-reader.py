#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The metadata reader (src/runtime/metadata-reader.py) as the daemon runs it.

It answers with the block's top-level keys, the values of requires-python and
dependencies exactly as tomllib reads them, and null for every other value: a
large table the daemon does not use must not reach it (metadata.h counts what
an answer costs). TOML errors are answers too.
"""

import json
import os
import subprocess
import sys
import tempfile

try:
    import tomllib
except ImportError:   # Python < 3.11
    print("SKIP: this Python has no tomllib")
    sys.exit(77)

top = os.environ.get("TOP_SRCDIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
reader = os.path.join(top, "src/runtime/metadata-reader.py")
failed = 0


def answer(text):
    with tempfile.NamedTemporaryFile("w", suffix=".toml", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        p = subprocess.run([sys.executable, "-I", "-S", reader, f.name], stdout=subprocess.PIPE, check=True)
    lines = p.stdout.decode().splitlines()
    if len(lines) != 1:
        raise AssertionError("not one line: %r" % p.stdout[:200])
    return lines[0], json.loads(lines[0])


def expect(name, got, want):
    global failed
    if got == want:
        print("ok: %s" % name)
    else:
        failed += 1
        print("FAIL: %s: got %r, want %r" % (name, got, want))


big = ",".join(["1"] * 100000)
block = ('requires-python = ">=3.11"\n'
         'dependencies = ["rich>=13", "numpy ; python_version >= \'3.11\'", "pkg @ https://example.org/p.whl"]\n'
         'unused = [%s]\n'
         '[tool.uv]\nindex-url = "https://example.org/simple"\nsources = { rich = { path = "x" } }\n'
         '[other.deep]\nx = { y = [[1, 2], [3]] }\n' % big)
text, doc = answer(block)
whole = tomllib.loads(block)
expect("the keys are all there", sorted(doc["doc"]), sorted(whole))
expect("requires-python as tomllib reads it", doc["doc"]["requires-python"], whole["requires-python"])
expect("dependencies as tomllib reads them", doc["doc"]["dependencies"], whole["dependencies"])
expect("the other values are null", [doc["doc"][k] for k in ("unused", "tool", "other")], [None, None, None])
expect("a large table costs nothing", len(text) < 300, True)

_, doc = answer('dependencies = ["a"]\ndependencies = ["b"]\n')
expect("a TOML error is an answer", sorted(doc), ["error"])
_, doc = answer("requires-python = 3\n")
expect("a value of the wrong type is passed on for the daemon to refuse", doc, {"doc": {"requires-python": 3}})

sys.exit(1 if failed else 0)
