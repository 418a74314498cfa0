#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What a conversation pays for each server, without the full benchmark.

    make bench-model-cost

Measures, as the client receives them (compact JSON): the tools/list result,
paid once per conversation, and a hello world's result, paid on every call,
with its structuredContent apart; for our daemon (default configuration, and
with persistent-sandboxes=yes) and the reference server
(mcp-python-exec-sandbox, the version bench/run.py measures). Prints a table;
with --out, records it as "model_cost" in bench/results/latest.json and
re-writes bench/RESULTS.md from there (bench/run.py measures the same in a
full run). BENCH_SKIP_REFERENCE=1 measures ours only.
"""

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (the benchmark: its Ours, Reference and report)
from mcpclient import Client  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--work", required=True, help="work dir (caches the reference venv and our store)")
    ap.add_argument("--out", default=None, help="bench/ directory whose results/latest.json and RESULTS.md to update")
    ap.add_argument("--uv", default=None)
    args = ap.parse_args()
    if not args.uv:
        args.uv = "/usr/local/bin/uv" if os.access("/usr/local/bin/uv", os.X_OK) else (shutil.which("uv") or "uv")
    args.daemon, args.shim = os.path.abspath(args.daemon), os.path.abspath(args.shim)
    work = os.path.abspath(args.work)
    for d in ("ours", "reference"):
        os.makedirs(os.path.join(work, d), exist_ok=True)

    MC = {}
    try:
        ours = run.Ours(args, os.path.join(work, "ours"))
        cache = os.path.join(work, "ours", "cache-model-cost")
        _, sock = ours.start(cache, "model-cost", ["--prestart=0"])
        c = Client.connect(sock)
        c.initialize()
        MC["ours"] = run.model_cost(c)
        c.close()
        _, sock = ours.start(cache, "model-cost-sandboxes", ["--prestart=0", "--persistent-sandboxes"])
        c = Client.connect(sock)
        c.initialize()
        MC["ours_with_persistent_sandboxes"] = {k: v for k, v in run.model_cost(c).items() if k.startswith("tools")}
        c.close()

        if os.environ.get("BENCH_SKIP_REFERENCE", "") in ("", "0"):
            ref = run.Reference(os.path.join(work, "reference"), args.uv)
            if ref.install():
                ver = (MC["ours"].get("hello_structured") or {}).get("python", "3.11")
                ref.python_version = os.environ.get("BENCH_REF_PYTHON_VERSION") or ".".join(ver.split(".")[:2])
                rc = ref.client()
                rc.initialize()
                MC["reference"] = run.model_cost(rc)
                rc.close()
            else:
                print("the reference cannot run here: " + ref.error, file=sys.stderr)
        else:
            print("BENCH_SKIP_REFERENCE set: the reference was not measured", file=sys.stderr)
    finally:
        for p in run.started:
            run.stop(p)

    for line in run.model_cost_rows(MC):
        print(line)
    sb = MC["ours_with_persistent_sandboxes"]
    print("ours with persistent-sandboxes=yes: %d tools, tools/list %d characters" % (sb["tools"],
                                                                                      sb["tools_list_chars"]))
    print("our hello world's structuredContent: " + json.dumps(MC["ours"].get("hello_structured"),
                                                               separators=(",", ":")))
    if args.out:
        path = os.path.join(args.out, "results", "latest.json")
        R = json.load(open(path))
        if "reference" not in MC and "reference" in (R.get("model_cost") or {}):
            MC["reference"] = R["model_cost"]["reference"]
        R["model_cost"] = MC
        run.render(R, args.out)   # writes latest.json too
    return 0


if __name__ == "__main__":
    sys.exit(main())
