#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""allowed-users / allowed-groups: the daemon asks the kernel who the peer is
(SO_PEERCRED) and disconnects anyone not listed, on top of the socket's mode."""

import json
import os
import shutil
import subprocess

from mcptest import Daemon, SHIM, check, eq, main, skip, test

NOBODY = 65534


def as_nobody(d):
    """A client running as uid/gid 65534 (groups: nogroup only), talking through the shim."""
    if os.getuid() != 0:
        skip("needs root to run a client as another user")
    if not shutil.which("setpriv"):
        skip("setpriv is not installed")
    # Let uid 65534 reach the socket: only the daemon's own check stands in the way.
    os.chmod(d.dir, 0o755)
    os.chmod(d.socket, 0o666)
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "nobody", "version": "1"}}}
    p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                        SHIM, f"--socket={d.socket}", "--no-fallback"],
                       input=json.dumps(hello) + "\n", capture_output=True, text=True, timeout=30)
    return p


@test
def a_user_not_listed_is_disconnected():
    with Daemon(args=["--allowed-users=root"]) as d:
        p = as_nobody(d)
        eq(p.stdout, "", "no reply for a refused peer")
        check("Refusing a connection from uid 65534" in d.log(), d.log())
        # The listed user is served.
        c = d.client()
        eq(c.initialize()["protocolVersion"], "2025-11-25", "root is allowed")
        eq(c.close(), 0)


@test
def a_member_of_a_listed_group_is_served():
    with Daemon(args=["--allowed-users=root", f"--allowed-groups={NOBODY}"]) as d:
        p = as_nobody(d)
        reply = json.loads(p.stdout.splitlines()[0]) if p.stdout else {}
        eq(reply.get("result", {}).get("protocolVersion"), "2025-11-25", f"nobody via its group: {p.stderr}")
        check("Refusing" not in d.log(), d.log())


@test
def empty_lists_let_in_anyone_the_socket_lets_in():
    with Daemon() as d:
        p = as_nobody(d)
        check(p.stdout and "protocolVersion" in p.stdout, f"served: {p.stdout} {p.stderr}")


if __name__ == "__main__":
    main()
