#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An MCP client for tests/systemd/vm-test.sh: runs the packaged shim, makes
the calls named on the command line in one session, one after the other, and
prints each reply on a line of its own as JSON ({"result": ...} or
{"error": ...}). Exit status 0 when every call got a reply, 2 when the shim
or the session failed (its message on stderr and as {"fail": ...}).

    vm-client.py [--shim PATH] TOOL=JSON-ARGUMENTS...
    vm-client.py 'execute_python={"script": "print(1)"}'

@SB@ in the arguments is the sandbox_id of the last reply that had one.
--sleep-after N keeps the session open N seconds after the last reply;
--no-fallback is passed to the shim.
"""

import json
import subprocess
import sys
import time


def main():
    args = sys.argv[1:]
    shim = "mcp-python-sandbox"
    sleep_after = 0
    shim_args = []
    while args and args[0].startswith("--"):
        if args[0] == "--shim":
            shim = args[1]
            args = args[2:]
        elif args[0] == "--no-fallback":
            shim_args.append(args[0])
            args = args[1:]
        elif args[0] == "--sleep-after":
            sleep_after = float(args[1])
            args = args[2:]
        else:
            print(f"vm-client: unknown option {args[0]}", file=sys.stderr)
            return 2
    p = subprocess.Popen([shim] + shim_args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def send(msg):
        p.stdin.write(json.dumps(msg) + "\n")
        p.stdin.flush()

    def wait(rid):
        for line in p.stdout:
            m = json.loads(line)
            if m.get("id") == rid:
                return m
        return None

    def fail(what):
        print(json.dumps({"fail": what}), flush=True)
        print(f"vm-client: {what}", file=sys.stderr)
        return 2

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "vm-client", "version": "1"}}})
    except BrokenPipeError:
        return fail("the shim exited")
    init = wait(1)
    if init is None:
        return fail("the connection closed before initialize was answered")
    if "error" in init:
        print(json.dumps({"error": init["error"]}), flush=True)
        return 2
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    sandbox_id = ""
    for i, call in enumerate(args):
        tool, _, arguments = call.partition("=")
        arguments = arguments.replace("@SB@", sandbox_id)
        rid = 10 + i
        send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
              "params": {"name": tool, "arguments": json.loads(arguments or "{}")}})
        r = wait(rid)
        if r is None:
            return fail(f"the connection closed before {tool} was answered")
        print(json.dumps({k: r[k] for k in ("result", "error") if k in r}), flush=True)
        sandbox_id = (r.get("result", {}).get("structuredContent") or {}).get("sandbox_id", sandbox_id)
    time.sleep(sleep_after)
    p.stdin.close()
    p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
