#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test: what the model sees of a result, whichever way its client shows results.

Clients differ in what they hand the model: Claude Code, Codex, opencode and
VS Code give it only structuredContent when a result has one (content[],
images included, is dropped); others give it only content[]. The checker
below plays both rules and asserts that either way the model gets the
output, the sentence that explains the outcome, and every figure and file
the result says it includes, for execute_python and execute_code, on every
protocol era the daemon speaks (2024-11-05 to 2025-11-25 by initialize, and
the stateless 2026-07-28).

Through the real shim against the real daemon. Needs $DAEMON and $SHIM,
bubblewrap, uv, a pyenv Python >= 3.11 and pypi.org (matplotlib). Exit status:
0 pass, 1 fail, 77 skip.
"""

import base64
import json
import re

from mcptest import LEGACY, MODERN, Daemon, at_exit, check, eq, main, modern_meta, need_pypi, need_uv, \
    newest_python, test

ERAS = LEGACY + [MODERN]
_STATE = {}


# ---- the checker: the model's view of a result ----------------------------------------------------------------

def model_view(result, rule):
    """What a client hands the model. rule "structured": structuredContent when the result has one, else
    content[] (Claude Code, Codex, opencode, VS Code); rule "content": content[] only.
    Returns {"text": all text the model reads, "images": [PNG bytes], "resources": {uri: bytes or text}}."""
    if rule == "structured" and "structuredContent" in result:
        return {"text": json.dumps(result["structuredContent"], ensure_ascii=False), "images": [], "resources": {}}
    view = {"text": "", "images": [], "resources": {}}
    for b in result.get("content", []):
        if b["type"] == "text":
            view["text"] += b["text"] + "\n"
        elif b["type"] == "image":
            view["images"].append(base64.b64decode(b["data"]))
        elif b["type"] == "resource":
            r = b["resource"]
            view["resources"][r["uri"]] = base64.b64decode(r["blob"]) if "blob" in r else r["text"]
    return view


def claims(result):
    """The figures and files a result says it includes: every line naming one, in content[] and in
    structuredContent (an entry with "included": true)."""
    figures, files = set(), set()
    for b in result.get("content", []):
        if b["type"] != "text":
            continue
        figures |= set(re.findall(r"^(.+) \(\d+x\d+ PNG\)$", b["text"], re.M))   # execute_python
        figures |= set(re.findall(r"^\[image (\S+): PNG", b["text"], re.M))              # execute_code
        files |= set(re.findall(r"^--- file out/(\S+) \(\d+ bytes", b["text"], re.M))
    st = result.get("structuredContent") or {}
    for f in st.get("figures", []):
        if f.get("included"):
            figures.add(f["name"])
    for name in st.get("images", []):
        figures.add(name)
    for f in st.get("files", []):
        if f.get("included", True):
            files.add(f["name"])
    return figures, files


def check_view(result, what, output=(), explanation=(), figures=0, files=None):
    """Under both rules the model sees each output string, each explanation sentence, figures images (PNGs) and
    each file of files ({name: expected content, str or bytes}), and no more figures or files claimed than it sees."""
    files = files or {}
    claimed_figures, claimed_files = claims(result)
    eq(len(claimed_figures), figures, f"{what}: figures the result says it includes ({claimed_figures})")
    eq(claimed_files, set(files), f"{what}: files the result says it includes")
    for rule in ("structured", "content"):
        v = model_view(result, rule)
        where = f"{what}, a client showing {'structuredContent when present' if rule == 'structured' else 'content[] only'}"
        for s in list(output) + list(explanation):
            check(s in v["text"], f"{where}: the model does not see {s!r}; it sees {v['text'][:1500]!r}")
        eq(len(v["images"]), figures, f"{where}: images the model sees")
        for png in v["images"]:
            eq(png[:8], b"\x89PNG\r\n\x1a\n", f"{where}: a PNG")
        for name, want in files.items():
            uri = "file:///work/out/" + name
            if uri in v["resources"]:
                eq(v["resources"][uri], want, f"{where}: {name} as a resource")
            else:
                check(isinstance(want, str) and f"--- file out/{name} " in v["text"] and want in v["text"],
                      f"{where}: the model sees neither the text nor a resource of {name}")


@test
def checker_catches_what_a_client_drops():
    """The checker fails the shape this test guards against: a figure in content[] next to structuredContent."""
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
    bad = {"content": [{"type": "text", "text": "--- stdout ---\nhi\nThe script was stopped.\n"},
                       {"type": "text", "text": "Figure 1 (4x3 PNG)"},
                       {"type": "image", "data": png, "mimeType": "image/png"}],
           "structuredContent": {"stdout": "hi\n", "figures": [{"name": "Figure 1", "included": True}]}}
    try:
        check_view(bad, "bad", output=["hi"], explanation=["The script was stopped."], figures=1)
    except AssertionError as e:
        check("structuredContent when present" in str(e), f"the checker failed for another reason: {e}")
    else:
        raise AssertionError("the checker passed a result whose figure a structuredContent client drops")
    good = dict(bad)
    del good["structuredContent"]
    check_view(good, "good", output=["hi"], explanation=["The script was stopped."], figures=1)


# ---- the daemon, a client per era ------------------------------------------------------------------------------

def daemon():
    if "daemon" not in _STATE:
        need_uv()
        newest_python()
        d = Daemon(args=["--persistent-sandboxes", "--tmpfs-size=64M"])
        at_exit(d.close)
        _STATE["daemon"] = d
    return _STATE["daemon"]


def call(era, name, args, timeout=600):
    """tools/call on a client of this era (initialize for the legacy ones, _meta for the stateless one)."""
    c = _STATE.get(era)
    if c is None:
        c = daemon().client()
        at_exit(lambda: c.proc.poll() is None and c.kill())
        if era != MODERN:
            c.initialize(era)
        _STATE[era] = c
    meta = modern_meta() if era == MODERN else None
    r = c.call_tool(name, args, timeout=timeout, meta=meta)
    if era < "2025-06-18":
        check("structuredContent" not in r, f"{era}: structuredContent predates this version")
    return r


MPL_SCRIPT = """\
import sys
import matplotlib.pyplot as plt
print("figure-run-output")
plt.figure(figsize=(3, 2), dpi=40)
plt.plot([1, 2, 3])
plt.show()
open("/work/out/table.csv", "w").write("a,b\\n1,2\\n")
open("/work/out/blob.bin", "wb").write(bytes(range(16)))
"""


@test
def execute_python_in_every_era():
    need_pypi()
    for era in ERAS:
        r = call(era, "execute_python", {"script": "print('hello-model-view')"})
        check(not r["isError"], f"{era}: {r}")
        check_view(r, f"{era} hello world", output=["hello-model-view"])

        r = call(era, "execute_python", {"script": "import time\nprint('before-the-timeout', flush=True)\n"
                                                   "time.sleep(60)\n", "timeout_seconds": 1})
        check(r["isError"], f"{era}: the timeout is an error")
        check_view(r, f"{era} timeout", output=["before-the-timeout"],
                   explanation=["The script was stopped after 1s, the timeout."])

        r = call(era, "execute_python", {"script": "print('before-the-bomb', flush=True)\nx = b'x' * (400 << 20)\n",
                                         "limits": {"memory_mb": 64}})
        check(r["isError"], f"{era}: running out of memory is an error")
        check_view(r, f"{era} out of memory", output=["before-the-bomb"],
                   explanation=["The script ran out of memory"])

        r = call(era, "execute_python", {"script": "import sys\nprint('bad-exit', file=sys.stderr)\nsys.exit(3)\n"})
        check(r["isError"], f"{era}: exit 3 is an error")
        check_view(r, f"{era} exit 3", output=["bad-exit"])

        r = call(era, "execute_python", {"script": "open('/work/out/notes.txt', 'w').write('note-for-the-model')\n"
                                                   "print('files-run')\n"})
        check(not r["isError"], f"{era}: {r}")
        check_view(r, f"{era} a text file", output=["files-run"], files={"notes.txt": "note-for-the-model"})

        r = call(era, "execute_python", {"script": MPL_SCRIPT, "dependencies": ["matplotlib"],
                                         "timeout_seconds": 120})
        check(not r["isError"], f"{era}: {r}")
        check_view(r, f"{era} a figure and files", output=["figure-run-output"], figures=1,
                   files={"table.csv": "a,b\n1,2\n", "blob.bin": bytes(range(16))})


@test
def execute_code_in_every_era():
    need_pypi()
    r = call("2025-11-25", "create_sandbox", {"dependencies": ["matplotlib"]})
    check(not r["isError"], str(r))
    sid = r["structuredContent"]["sandbox_id"]
    try:
        for era in ERAS:
            r = call(era, "execute_code", {"sandbox_id": sid, "code": "x = 6 * 7\nprint('cell-output')\nx"})
            check(not r["isError"], f"{era}: {r}")
            check_view(r, f"{era} a cell", output=["cell-output", "42"])

            r = call(era, "execute_code", {"sandbox_id": sid, "timeout_seconds": 1,
                                           "code": "import time\nprint('cell-before', flush=True)\ntime.sleep(60)"})
            check(r["isError"], f"{era}: the timeout is an error")
            check_view(r, f"{era} a cell over its time limit", output=["cell-before"],
                       explanation=["The cell was interrupted after 1s, the time limit"])

            r = call(era, "execute_code", {"sandbox_id": sid, "code":
                                           "import os, matplotlib.pyplot as plt\nos.makedirs('/work/out', exist_ok=True)\n"
                                           "plt.figure(figsize=(3, 2), dpi=40); plt.plot([3, 1])\n"
                                           f"open('/work/out/{era}.txt', 'w').write('cell-file')\nprint('cell-figure')"})
            check(not r["isError"], f"{era}: {r}")
            check_view(r, f"{era} a cell's figure and file", output=["cell-figure"], figures=1,
                       files={f"{era}.txt": "cell-file"})
    finally:
        call("2025-11-25", "close_sandbox", {"sandbox_id": sid})


if __name__ == "__main__":
    main()
