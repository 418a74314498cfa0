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

from mcptest import at_exit, scratch
from mcptest import check, eq, main, newest_python, sandbox_daemon, skip, test, wait_until

# A line of the driver's code, which bwrap gets on its command line: the wrapper below tells the persistent
# sandbox's start (the driver) from the self-test's and the runs'.
DRIVER_MARK = "CHUNK = 65536"


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
    return sandbox_daemon(["--persistent-sandboxes", *args])


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
    os.chmod(w, 0o777)   # the wrapper runs as the sandbox's uid, which says here when the driver starts
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


# What a cell writes to the stderr it shares with bwrap (the driver's, through /proc), then the driver killed, so that
# bwrap exits and the daemon says why.
FORGE = r"""
import os, sys
print("<0>FORGED-OWN-STDERR", file=sys.stderr)
fd = os.open("/proc/%d/fd/2" % os.getppid(), os.O_WRONLY)
os.write(fd, b"<0>FORGED-EMERG\n<3>FORGED-ERR\nplain\\back\n\x1b[31mFORGED-RED\x1b[0m\nFORGED-CR\rHIDDEN\n")
os.write(fd, b"\xc2\x9b2JFORGED-C1 \xff\xfe FORGED-BAD-UTF8 caf\xc3\xa9\n")
os.write(fd, b"FORGED-LONG " + b"L" * 5000 + b"\n")
os.write(fd, b"<1>FORGED-NO-NEWLINE")
os.close(fd)
os.kill(os.getppid(), 9)
import time
time.sleep(30)   # bwrap ends with the driver, this with it
"""
FLOOD = r"""
import os
fd = os.open("/proc/%d/fd/2" % os.getppid(), os.O_WRONLY)
for i in range(200):
    os.write(fd, b"FORGED-FLOOD %d\n" % i)
os.kill(os.getppid(), 9)
import time
time.sleep(30)   # bwrap ends with the driver, this with it
"""


def log_is_clean(d):
    """No line of the daemon's log starts with what a sandbox wrote, none holds a raw control character; each line
    of the sandbox's is one line of ours, at one priority. Returns the log's lines."""
    with open(d.log_path, "rb") as f:
        lines = f.read().split(b"\n")
    for line in lines:
        check(not re.match(rb"<[0-7]>(FORGED|plain)", line), f"a forged log line: {line!r}")
        check(not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]", line),
              f"a control character in the log: {line[:300]!r}")
    ours = [line for line in lines if b"printed: " in line]
    check(all(line.startswith(b"<6>Sandbox ") for line in ours), f"the sandbox's lines: {ours[:5]}")
    return lines


@test
def what_a_sandbox_prints_cannot_forge_log_lines():
    d, c = start()
    r = c.call_tool("create_sandbox", {"python_version": newest_python()}, timeout=120)
    check(not r.get("isError"), f"create_sandbox: {c.text(r)}")
    sid = r["structuredContent"]["sandbox_id"]
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": FORGE})
    if d.uid == 0:
        # A root daemon runs the sandbox as a uid of its own, and its stderr is a pipe of root's (0600): the cell
        # cannot even open it again through /proc. The forgeries are tried with the daemon as an unprivileged
        # user (tests/security/test-unprivileged.sh), where it can.
        check(r.get("isError") and "PermissionError" in c.text(r) and "/fd/2" in c.text(r),
              f"the cell opened the driver's stderr under a root daemon: {c.text(r)}")
        log_is_clean(d)
        c.close()
        return
    check(r.get("isError") and "started afresh" in c.text(r), f"the cell that kills the driver: {c.text(r)}")
    wait_until(lambda: " stopped (exit " in d.log_full(), 10, "the daemon's word of the sandbox's end")
    lines = log_is_clean(d)
    text = b"\n".join(lines).decode("utf-8", "replace")
    for want in ("printed: \\x3c0>FORGED-EMERG", "printed: \\x3c3>FORGED-ERR", "printed: plain\\x5cback",
                 "printed: \\x1b[31mFORGED-RED\\x1b[0m", "printed: FORGED-CR\\x0dHIDDEN",
                 "printed: \\xc2\\x9b2JFORGED-C1 \\xff\\xfe FORGED-BAD-UTF8 caf\u00e9",
                 "printed: \\x3c1>FORGED-NO-NEWLINE"):
        check(want in text, f"{want!r} is not in the daemon's log: {d.log()}")
    # The cell's own stderr is its answer's, not the log's.
    check("FORGED-OWN-STDERR" not in text, "the cell's own stderr reached the log")
    # A long line is cut.
    long = [line for line in lines if b"FORGED-LONG" in line]
    eq(len(long), 1, "the long line")
    check(len(long[0]) < 600 and re.search(rb"\[4\d\d\d more bytes\]$", long[0]), f"the long line: {long[0][:80]!r}...")

    # The sandbox still works; a flood of lines is counted rather than logged.
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": "6 * 7"})
    eq((r.get("isError"), (r.get("structuredContent") or {}).get("result")), (False, "42"), c.text(r))
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": FLOOD})
    check(r.get("isError") and "started afresh" in c.text(r), f"the flooding cell: {c.text(r)}")
    wait_until(lambda: "of its output not logged" in d.log_full(), 10, "word of the lines not logged")
    c.close()
    d.stop()
    lines = log_is_clean(d)
    flood = [line for line in lines if b"FORGED-FLOOD" in line]
    check(0 < len(flood) < 50, f"{len(flood)} of the 200 flood lines logged")
    check(any(re.search(rb"1\d\d more lines of its output not logged", line) for line in lines),
          f"no word of the lines not logged: {d.log()}")

if __name__ == "__main__":
    main()
