#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A persistent sandbox that fails, or prints lies, hurts nobody else.

- A sandbox whose bwrap fails before its driver says hello (what a user who
  has exhausted the process cap gets: bwrap cannot clone) answers its
  create_sandbox with a clear error, and the daemon lives on and serves the
  next create_sandbox and execute_python. The same while the sandbox is
  closed from under its create_sandbox (close_sandbox with the id that
  get_sandbox_status shows).
- What a sandbox writes to the stderr it shares with bwrap reaches the
  daemon's log (the journal's stream) escaped, one line per line: never a
  line with a syslog priority the sandbox chose, never raw control
  characters.

Needs $DAEMON, $SHIM, bubblewrap, uv and a pyenv Python >= 3.11. Exit 77
when they are missing.
"""

import os
import re
import shutil
import time

from mcptest import at_exit, scratch
from mcptest import Daemon, check, eq, main, need_uv, skip, test, test_pythons, wait_until

# A line of the driver's code, which bwrap gets on its command line: the wrapper below tells the persistent
# sandbox's start (the driver) from the self-test's and the runs'.
DRIVER_MARK = "CHUNK = 65536"


def newest_python():
    have = test_pythons()
    if not have:
        skip("no pyenv Python >= 3.11")
    return max(have, key=lambda v: tuple(map(int, v.split("."))))


def failing_bwrap(message="bwrap: Creating new user namespace failed: Resource temporarily unavailable"):
    """A bwrap (the daemon's bwrap= setting) that fails the way a user at the process cap makes it fail, but
    only for a persistent sandbox's driver: the self-test and execute_python's runs go to the real one."""
    real = shutil.which("bwrap")
    if not real:
        skip("bwrap is not installed")
    d = scratch("mcpt-sec-bwrap-")
    os.chmod(d, 0o755)
    path = os.path.join(d, "bwrap")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                f'case "$*" in *"{DRIVER_MARK}"*) echo "{message}" >&2; exit 1;; esac\n'
                f"exec '{real}' \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def start(args=()):
    need_uv()
    newest_python()
    d = Daemon(args=["--offline", "--tmpfs-size=32M", *args])
    at_exit(d.close)
    c = d.client()
    c.initialize()
    at_exit(lambda: c.proc.poll() is None and c.kill())
    st = c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}
    if not st.get("sandbox", {}).get("working"):
        skip(f"the sandbox does not work on this machine: {st.get('sandbox', {}).get('error', 'self-test failed')}")
    return d, c


def still_serves(d, c):
    """The daemon is alive and answers: a ping and a hello world run."""
    check(d.alive(), f"the daemon died: {d.log()}")
    eq(c.request("ping").get("result"), {}, "ping")
    r = c.call_tool("execute_python", {"script": "print('still here')", "python_version": newest_python()})
    st = r.get("structuredContent") or {}
    eq((r.get("isError"), st.get("stdout")), (False, "still here\n"), f"execute_python afterwards ({c.text(r)})")
    check(d.alive(), f"the daemon died: {d.log()}")
    check("AddressSanitizer" not in d.log_full(), f"ASan report in the daemon's log: {d.log()}")


@test
def a_sandbox_that_fails_before_its_hello_does_not_take_the_daemon_down():
    d, c = start([f"--bwrap={failing_bwrap()}"])
    for i in range(2):
        r = c.call_tool("create_sandbox", {"python_version": newest_python()}, timeout=120)
        text = c.text(r)
        check(r.get("isError"), f"create_sandbox #{i + 1} succeeded with a bwrap that fails: {text}")
        check("could not be started" in text and "Resource temporarily unavailable" in text,
              f"create_sandbox #{i + 1}: the error does not say why: {text}")
        still_serves(d, c)
    # Nothing is left behind: the failed sandboxes are gone.
    st = c.call_tool("get_sandbox_status", {}).get("structuredContent") or {}
    eq(st.get("sandboxes"), [], "sandboxes left after failed creations")
    c.close()


@test
def closing_a_sandbox_while_it_is_created_does_not_take_the_daemon_down():
    # The driver's start hangs (a bwrap that sleeps first): the create_sandbox waits for the hello while
    # get_sandbox_status already lists the sandbox; closing it answers the create_sandbox with an error
    # (from inside the close, which must not close it a second time).
    real = shutil.which("bwrap")
    if not real:
        skip("bwrap is not installed")
    w = scratch("mcpt-sec-slow-bwrap-")
    os.chmod(w, 0o755)
    slow = os.path.join(w, "bwrap")
    started = os.path.join(w, "driver-started")
    with open(slow, "w") as f:
        # Only the first driver waits; it says when it is there.
        f.write(f'#!/bin/sh\ncase "$*" in *"{DRIVER_MARK}"*) [ -e {started} ] || {{ touch {started}; sleep 20; }};; esac\n'
                f'exec \'{real}\' "$@"\n')
    os.chmod(slow, 0o755)
    d, c = start([f"--bwrap={slow}"])
    rid = c.new_id()
    c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "create_sandbox", "arguments": {"python_version": newest_python()}}})
    other = d.client()
    other.initialize()
    at_exit(lambda: other.proc.poll() is None and other.kill())

    def listed():
        st = other.call_tool("get_sandbox_status", {}).get("structuredContent") or {}
        return [s["sandbox_id"] for s in st.get("sandboxes", [])]
    # Closed once its environment is there and its driver is starting: the create_sandbox waits for the hello.
    wait_until(lambda: os.path.exists(started), 120, "the sandbox's driver to start")
    sid = wait_until(listed, 10, "the sandbox being created to be listed")[0]
    r = other.call_tool("close_sandbox", {"sandbox_id": sid})
    check(not r.get("isError"), f"close_sandbox: {other.text(r)}")
    reply = c.wait_for(rid, timeout=60)
    res = reply.get("result") or {}
    check(res.get("isError") and "closed" in c.text(res), f"the create_sandbox's answer: {reply}")
    still_serves(d, other)
    # A second sandbox still comes up (slowly) and works.
    r = other.call_tool("create_sandbox", {"python_version": newest_python()}, timeout=120)
    check(not r.get("isError"), f"create_sandbox afterwards: {other.text(r)}")
    sid = r["structuredContent"]["sandbox_id"]
    r = other.call_tool("execute_code", {"sandbox_id": sid, "code": "6 * 7"})
    eq((r.get("isError"), (r.get("structuredContent") or {}).get("result")), (False, "42"), other.text(r))
    other.close()
    c.close()


if __name__ == "__main__":
    main()
