#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A persistent sandbox that abuses its socket to the daemon, or leaves work
running, takes no more than its share.

- A cell that sends the daemon hellos in a loop (from the interpreter, on the
  driver's socket) breaks the protocol at the second one: the sandbox is
  started afresh, the cell's answer says why, the daemon logs it once, and
  another user's ping stays fast meanwhile.
- A cell that sends a 64 MiB message is refused at the cap (about 15 MiB
  with the default output cap) and the daemon's RSS stays low.
- A persistent sandbox runs in a cgroup of its own (seen from the host in
  /proc/PID/cgroup), and a busy loop a cell leaves in the background gets
  little CPU while the sandbox is idle (its cgroup's CPU cap); where the
  daemon has no cgroups (tests/security/test-unprivileged.sh runs this as an
  unprivileged daemon), RLIMIT_CPU ends it at max-cpu-time.

Needs $DAEMON, $SHIM, bubblewrap, uv and a pyenv Python >= 3.11; the cgroup
test needs a daemon with cgroups (root here), the RLIMIT_CPU one a daemon
without. Exit 77 when they are missing.
"""

import os
import pwd
import statistics
import time

import mcptest

from mcptest import BACKGROUND, at_exit, check, children, cpu_share, cpu_ticks, eq, main, newest_python, own_cgroups
from mcptest import pids_safety_net, running
from mcptest import rss_kib, sandbox_daemon, sanitized, skip, test, wait_until, RssGrowth

# The cell's way to the daemon: the driver's socket, which the interpreter (forked from it) holds at the number
# on its command line (python -c DRIVER FD).
HELLO_LOOP = r"""
import os, sys, time
fd = int(sys.argv[-1])
sent, end = 0, time.monotonic() + 8
while time.monotonic() < end:
    os.write(fd, b'H{"hello": 2, "python": "3.0.0"}')
    sent += 1
print("sent", sent)
"""

HUGE = r"""
import os, sys
fd = int(sys.argv[-1])
piece = b"x" * 65535
os.write(fd, b'C{"ok": true, "stdout": "')
for i in range(64 * 1024 * 1024 // len(piece)):
    os.write(fd, b"C" + piece)
os.write(fd, b'E"}')
print("sent")
"""

def start(args=()):
    return sandbox_daemon(["--persistent-sandboxes", *args])


def create(c):
    r = c.call_tool("create_sandbox", {"python_version": newest_python()}, timeout=180)
    check(not r.get("isError"), f"create_sandbox: {c.text(r)}")
    return r["structuredContent"]["sandbox_id"]


def other_user(d):
    """A client of another uid where this is root, else one more of ours."""
    if os.geteuid() == 0:
        return d.nobody_client()
    o = d.client()
    o.initialize()
    at_exit(lambda: o.proc.poll() is None and o.kill())
    return o


def still_works(c, sid):
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": "6 * 7"}, timeout=120)
    eq((r.get("isError"), (r.get("structuredContent") or {}).get("result")), (False, "42"),
       f"the sandbox afterwards: {c.text(r)}")


def log_lines(d, needle):
    with open(d.log_path, "rb") as f:
        return [line for line in f.read().split(b"\n") if needle.encode() in line]


@test
def hellos_in_a_loop_are_refused_and_slow_no_one():
    d, c = start()
    sid = create(c)
    other = other_user(d)
    rid = c.new_id()
    c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "execute_code", "arguments": {"sandbox_id": sid, "code": HELLO_LOOP,
                                                             "timeout_seconds": 30}}})
    # Another user's pings while the loop would run.
    times, end = [], time.monotonic() + 4
    while time.monotonic() < end:
        t0 = time.monotonic()
        eq(other.request("ping").get("result"), {}, "ping")
        times.append(time.monotonic() - t0)
        time.sleep(0.05)
    median = statistics.median(times)
    print(f"# another user's ping: median {median * 1000:.2f} ms of {len(times)}")
    check(median < 0.05, f"another user's ping took {median * 1000:.1f} ms (median of {len(times)})")
    res = c.wait_for(rid, timeout=60).get("result") or {}
    text = c.text(res)
    check(res.get("isError") and "broke the protocol" in text and "hello" in text,
          f"the cell that sent hellos in a loop: {text[:500]}")
    # One hello accepted (the interpreter's own), the second one the end: logged once, nothing per record.
    broke = [line for line in log_lines(d, "broke the protocol") if line.startswith(b"<4>Sandbox ")]
    eq(len(broke), 1, f"log lines about the broken protocol: {broke[:5]}")
    mentions = log_lines(d, f"Sandbox {sid[:8]}")
    check(len(mentions) < 30, f"{len(mentions)} log lines about the sandbox: {mentions[:5]}")
    still_works(c, sid)
    other.close()
    c.close()


@test
def a_64_mib_message_is_refused_and_memory_stays_low():
    d, c = start()
    sid = create(c)
    pid = d.proc.pid
    before = rss_kib(pid)
    with RssGrowth(pid) as g:
        r = c.call_tool("execute_code", {"sandbox_id": sid, "code": HUGE, "timeout_seconds": 60}, timeout=120)
    text = c.text(r)
    check(r.get("isError") and "broke the protocol" in text and "too long" in text,
          f"the cell that sent 64 MiB: {text[:500]}")
    print(f"# the daemon's RSS grew by {g.grew} KiB")
    if not sanitized(pid):
        check(g.grew < 40 * 1024, f"the daemon's RSS grew by {g.grew} KiB (from {before} KiB)")
    still_works(c, sid)
    c.close()


@test
def a_sandbox_has_a_cgroup_that_caps_what_a_cell_leaves_running():
    if not pids_safety_net():
        skip("no pids cgroup to put the test under (the safety net); the daemon has no cgroups either")
    d, c = start()
    st = c.call_tool("check_environment", {}).get("structuredContent") or {}
    mechanism = str((st.get("sandbox") or {}).get("limits", ""))
    if "cgroup" not in mechanism:
        skip(f"the daemon has no cgroups here ({mechanism or 'rlimits'}): RLIMIT_CPU is the bound")
    sid = create(c)
    daemon_pid = d.proc.pid
    ours = own_cgroups(daemon_pid)

    # The sandbox's processes: bwrap and all below it, each in a cgroup other than the daemon's. What the daemon
    # runs on the host for builds (uv: the first call on a Python readies its build slot) is not one of them.
    def in_bwrap(p):
        for _ in range(32):
            try:
                with open(f"/proc/{p}/comm") as f:
                    if f.read().strip() == "bwrap":
                        return True
                with open(f"/proc/{p}/stat") as f:
                    p = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                return False
            if p == daemon_pid or p <= 1:
                return False
        return False

    sandbox = wait_until(lambda: [p for p in children(daemon_pid) if in_bwrap(p)], 10, "the sandbox's processes")
    for p in sandbox:
        try:
            theirs = own_cgroups(p)
        except OSError:
            continue
        for controller in ("memory", "pids", "cpu") if "pids" in ours else ("",):
            check(theirs.get(controller) != ours.get(controller),
                  f"pid {p} of the sandbox shares the daemon's {controller or 'cgroup'} cgroup: {theirs}")

    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": BACKGROUND}, timeout=60)
    eq((r.get("isError"), (r.get("structuredContent") or {}).get("result")), (False, "'started'"), c.text(r))
    time.sleep(0.5)
    pids = [p for p in children(daemon_pid) if in_bwrap(p)]
    share = cpu_share(pids, 4)
    print(f"# the idle sandbox with a busy loop in it: {share:.1%} of a CPU")
    check(share < 0.2, f"the idle sandbox used {share:.0%} of a CPU (a busy loop a cell left running)")
    # A cell still gets the CPU it needs.
    t0 = time.monotonic()
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": "sum(range(3_000_000))"}, timeout=60)
    eq((r.get("isError"), (r.get("structuredContent") or {}).get("result")), (False, str(sum(range(3_000_000)))),
       c.text(r))
    check(time.monotonic() - t0 < 10, f"a short cell took {time.monotonic() - t0:.1f}s")
    c.close()


@test
def without_cgroups_rlimit_cpu_ends_what_a_cell_leaves_running():
    pids_safety_net()
    # Rlimits are what an unprivileged daemon has on a host where only root may make cgroups: as root, start the
    # daemon as the tests' service user (scripts/test.sh makes it), which gets no cgroups of its own here.
    user = mcptest.DAEMON_USER
    if os.geteuid() == 0 and not user:
        user = os.environ.get("MCP_TEST_SERVICE_USER", "mcp-sandbox-test")
        try:
            pwd.getpwnam(user)
        except KeyError:
            skip(f"no user {user} to run an unprivileged daemon as (scripts/test.sh makes it)")
    saved, mcptest.DAEMON_USER = mcptest.DAEMON_USER, user
    try:
        d, c = start(["--max-cpu-time=3s"])
    finally:
        mcptest.DAEMON_USER = saved
    st = c.call_tool("check_environment", {}).get("structuredContent") or {}
    mechanism = str((st.get("sandbox") or {}).get("limits", ""))
    if "cgroup" in mechanism:
        skip("the daemon has cgroups here: the sandbox's CPU cap binds (the test above)")
    sid = create(c)
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": BACKGROUND}, timeout=60)
    eq((r.get("isError"), (r.get("structuredContent") or {}).get("result")), (False, "'started'"), c.text(r))
    # The busy loop runs until its RLIMIT_CPU (3 s, SIGKILL 5 s later at the hard limit) ends it. Told by the CPU
    # time each process of the sandbox has used, not by its share of a CPU: that depends on the machine's load.
    hz = os.sysconf("SC_CLK_TCK")
    used, first = {}, {}
    # Generous: on a loaded machine 3 s of CPU take a long time to use up.
    deadline = time.monotonic() + 300
    busy = None
    while time.monotonic() < deadline:
        for p in children(d.proc.pid):
            t = cpu_ticks([p])
            if t:
                used[p] = max(used.get(p, 0), t)
                first.setdefault(p, t)
        # The loop is the process that keeps gaining CPU time while the sandbox is idle.
        if busy is None:
            busy = next((p for p, t in used.items() if t - first[p] >= hz // 2), None)
        elif not running(busy):
            break
        time.sleep(0.1)
    check(busy is not None, f"the busy loop a cell left never ran: CPU ticks of the sandbox's processes {used}")
    check(not running(busy),
          f"a busy loop a cell left still runs after {used[busy] / hz:.1f} s of CPU, past max-cpu-time (3 s)")
    print(f"# the busy loop ended after {used[busy] / hz:.1f} s of CPU")
    check(used[busy] <= 9 * hz, f"the busy loop used {used[busy] / hz:.1f} s of CPU: more than its hard limit")
    still_works(c, sid)
    c.close()


if __name__ == "__main__":
    main()
