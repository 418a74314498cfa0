#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test of the one scheduler (src/scheduler/): every spawn waits its turn under its cap.

User A (root, this program) floods one connection with pipelined execute_python calls, each with a PEP 723 block
and a dependency of its own (local wheels, offline): each call needs a metadata-reader sandbox and an environment
build. Sampling /proc for the daemon's descendants, the number of uv processes (with the children that prepare a
build's slot) and of metadata readers at once never exceeds max-builds and max-helpers; every call succeeds. User B (uid 65534, through the real shim) sends one
call of the same kind into A's backlog: round robin among users serves it long before A's backlog is through.

check_environment, asked over and over, starts at most one sandbox self-test per 5 s, in the daemon's group.

Set MCP_SCHED_MEASURE=N to print the peaks of a flood of N calls (for a before/after comparison) without caps.

Needs $DAEMON, $SHIM, uv, a Python >= 3.11, root and setpriv (for user B). Exit 77 when nothing can run.
"""

import json
import os
import shutil
import threading
import time

import mcptest
from mcptest import Client, Daemon, UvLog, at_exit, check, eq, initialized, main, req, scratch, test
from wheels import build_wheel

N_FLOOD = 24


def wheel_dir(n):
    d = scratch("mcptest-sched-wheels-")
    for i in range(n):
        build_wheel(d, f"mcpt-flood-{i}", "1.0")
    build_wheel(d, "mcpt-flood-b", "1.0")
    return d


def flood_script(name):
    """A block that needs a metadata reader: an escape (\\u003e is ">") is more than the daemon reads by itself
    (src/pep723/toml-subset.h)."""
    mod = name.replace("-", "_")
    return (f"# /// script\n# dependencies = [\"{name}\"]\n# requires-python = \"\\u003e=3.11\"\n# ///\n"
            f"import {mod}\nprint({mod}.DIST_NAME)\n")


def call(rid, name):
    return req(rid, "tools/call", {"name": "execute_python",
                                   "arguments": {"script": flood_script(name), "timeout_seconds": 120}})


class Sampler:
    """Counts the daemon's descendants that are uv and metadata readers, every few milliseconds."""

    def __init__(self, pid):
        self.pid = pid
        self.uv = self.helpers = self.compiles = 0
        self.slots = 0          # build slots being prepared (emptied, the template copied) in a child, at once
        self.builds = 0         # uv processes and slot preparations together, at once: each is a build's turn
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            uv_groups, helpers, compiles, slots = set(), 0, 0, 0
            for p in mcptest.children(self.pid):
                try:
                    with open(f"/proc/{p}/comm") as f:
                        comm = f.read().strip()
                    with open(f"/proc/{p}/cmdline", "rb") as f:
                        cmd = f.read()
                except OSError:
                    continue
                if not cmd:
                    continue         # a zombie: exited, holds nothing but its pid until the daemon reaps it
                if comm == "mcp-env-slot":
                    slots += 1
                elif comm == "uv":   # uv, or the wrapper that runs it (a script's comm is its name)
                    # by process group: the daemon starts each in a group of its own, and a child the wrapper
                    # forks is "uv" too until it execs sleep
                    try:
                        with open(f"/proc/{p}/stat") as f:
                            uv_groups.add(int(f.read().rsplit(")", 1)[1].split()[2]))
                    except (OSError, IndexError, ValueError):
                        pass
                # the reader's interpreter in its sandbox (bwrap takes its argv from --args, so it is not there)
                elif comm.startswith("python") and b"metadata.toml" in cmd:
                    helpers += 1
                elif comm.startswith("python") and b"compileall" in cmd:
                    compiles += 1
            uv = len(uv_groups)
            self.uv, self.helpers = max(self.uv, uv), max(self.helpers, helpers)
            self.compiles = max(self.compiles, compiles)
            self.slots, self.builds = max(self.slots, slots), max(self.builds, uv + slots)
            time.sleep(0.005)

    def close(self):
        self.stop.set()
        self.thread.join()


def daemon(n, caps, venv_files=0):
    mcptest.need_uv()
    mcptest.newest_python()
    mcptest.pids_safety_net()
    # Each install takes a second, as over a network: builds overlap as they would in the field.
    uv = UvLog(delay=1, delay_on="pip install", venv_files=venv_files)
    at_exit(uv.close)
    d = Daemon(args=[f"--uv={uv.path}", f"--find-links={wheel_dir(n)}", "--offline", "--tmpfs-size=32M",
                     "--max-calls-per-connection=128", "--max-queue=256", *caps])
    at_exit(d.close)
    c = initialized(d.client())
    st = c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}
    if not st.get("sandbox", {}).get("working"):
        mcptest.skip(f"the sandbox does not work here: {st.get('sandbox', {}).get('error', 'self-test failed')}")
    return d, c


def flood(c, n, first_id=1000):
    for i in range(n):
        c.send(call(first_id + i, f"mcpt-flood-{i}"))


def check_flood_answered(c, indices):
    """Each flood call of indices (sent with id 1000 + i) succeeds and prints its package's name."""
    for i in indices:
        r = c.wait_for(1000 + i, 300)
        res = r.get("result") or {}
        check(not res.get("isError"), f"call {i} failed: {json.dumps(r)[:800]}")
        check(f"mcpt-flood-{i}" in c.text(res), f"call {i}'s output: {c.text(res)[:300]}")


def answered_by_now(c):
    """How many answers c has been sent by now; they are kept for c.wait_for()."""
    done = 0
    while True:
        try:
            m = c.read_message(0.05)
        except TimeoutError:
            return done
        if isinstance(m, dict) and "id" in m:
            c.unclaimed.append(m)
            done += 1


@test
def flood_never_exceeds_build_and_helper_caps():
    d, c = daemon(N_FLOOD, ["--max-builds=2", "--max-builds-per-user=2", "--max-helpers=2",
                            "--max-helpers-per-user=2", "--max-compiles=1"])
    s = Sampler(d.proc.pid)
    try:
        flood(c, N_FLOOD)
        check_flood_answered(c, range(N_FLOOD))
    finally:
        s.close()
    print(f"# peak: {s.uv} uv processes, {s.helpers} metadata readers, {s.compiles} compiles at once", flush=True)
    check(s.helpers >= 1 and s.uv >= 1, "the sampler saw no uv or reader at all: it measures nothing")
    check(s.uv <= 2, f"{s.uv} uv processes at once, over max-builds=2")
    check(s.helpers <= 2, f"{s.helpers} metadata readers at once, over max-helpers=2")
    check(s.compiles <= 1, f"{s.compiles} bytecode compiles at once, over max-compiles=1")


@test
def slot_preparation_counts_against_max_builds():
    """A build's slot is emptied and the template copied in a child of its own (mcp-env-slot), in the build's turn:
    with max-builds=2, those children and the uv processes together never exceed 2 at once. What `uv venv` makes is
    padded with thousands of files, so that each copy of the template lasts long enough to be seen. A first build
    alone makes the template, which the flood's builds then copy."""
    n = 7
    d, c = daemon(n, ["--max-builds=2", "--max-builds-per-user=2"], venv_files=1500)
    r = c.call_tool("execute_python", call(0, "mcpt-flood-0")["params"]["arguments"], timeout=120)
    check(not r.get("isError") and "mcpt-flood-0" in c.text(r), f"the first build: {json.dumps(r)[:800]}")
    s = Sampler(d.proc.pid)
    try:
        for i in range(1, n):
            c.send(call(1000 + i, f"mcpt-flood-{i}"))
        check_flood_answered(c, range(1, n))
    finally:
        s.close()
    print(f"# peak: {s.slots} slot preparations, {s.builds} builds (uv or preparation) at once", flush=True)
    check(s.slots >= 1, "the sampler saw no slot preparation at all: it measures nothing")
    check(s.builds <= 2, f"{s.builds} uv processes and slot preparations at once, over max-builds=2")


@test
def another_users_call_is_served_within_one_turnover():
    d, c = daemon(N_FLOOD, ["--max-builds=1", "--max-helpers=1"])
    b = Client(d.nobody_argv())
    at_exit(lambda: b.proc.poll() is None and b.kill())
    b.initialize()
    flood(c, N_FLOOD)
    # B's call arrives behind all of A's; A's backlog must not hold it.
    time.sleep(0.2)
    b.send(call("b", "mcpt-flood-b"))
    r = b.wait_for("b", 300)
    res = r.get("result") or {}
    check(not res.get("isError"), f"B's call failed: {json.dumps(r)[:800]}")
    check("mcpt-flood-b" in b.text(res), f"B's output: {b.text(res)[:300]}")
    # How far A got meanwhile: what A has been answered by now.
    done = answered_by_now(c)
    print(f"# B was served when A had {done} of {N_FLOOD} answers", flush=True)
    # Round robin: B's reader and build each wait at most one turn of A's; in arrival order it would be last.
    check(done <= N_FLOOD // 2, f"B waited for {done} of A's {N_FLOOD} calls: not served in turn")
    for i in range(N_FLOOD):
        r = c.wait_for(1000 + i, 300)
        check(not (r.get("result") or {}).get("isError"), f"A's call {i} failed: {json.dumps(r)[:600]}")


@test
def another_users_run_is_not_queued_behind_a_backlog():
    """Run slots are handed out round robin among the uids that wait: with max-runs=1, B's call sent behind six of
    A's runs is started at the next slot that comes free, not after all of A's (as oldest-first would)."""
    d, c = mcptest.sandbox_daemon(["--max-runs=1", "--max-queue=32"])
    b = Client(d.nobody_argv())
    at_exit(lambda: b.proc.poll() is None and b.kill())
    b.initialize()
    slow = "import time\ntime.sleep(1)\nprint('a')\n"
    c.call_tool("execute_python", {"script": slow})     # the bare environment is built
    for i in range(6):
        c.send(req(f"a{i}", "tools/call", {"name": "execute_python", "arguments": {"script": slow}}))
    time.sleep(0.3)
    b.send(req("b", "tools/call", {"name": "execute_python", "arguments": {"script": "print('b')"}}))
    res = b.wait_for("b", 120).get("result") or {}
    check(not res.get("isError") and "b" in b.text(res), f"B's call: {json.dumps(res)[:500]}")
    done = answered_by_now(c)
    print(f"# B was served when A had {done} of 6 answers", flush=True)
    check(done <= 2, f"B's run waited for {done} of A's 6 runs: not served in turn")
    for i in range(6):
        check(not (c.wait_for(f"a{i}", 60).get("result") or {}).get("isError"), f"A's run {i} failed")


@test
def a_running_cell_holds_a_run_slot():
    """Persistent sandboxes count against the same caps as runs: with max-runs=1, a running execute_code cell
    holds the one slot, so an execute_python call waits for it; a second sandbox of the same user is refused
    with an error that names max-sandboxes-per-user."""
    mcptest.need_uv()
    mcptest.newest_python()
    d, c = mcptest.sandbox_daemon(["--max-runs=1", "--max-sandboxes-per-user=1"])
    r = c.call_tool("create_sandbox", {})
    check(not r.get("isError"), f"create_sandbox failed: {c.text(r)}")
    sid = r["structuredContent"]["sandbox_id"]
    r = c.call_tool("create_sandbox", {})
    check(r.get("isError") and "max-sandboxes-per-user" in c.text(r),
          f"a second sandbox over max-sandboxes-per-user=1: {c.text(r)[:300]}")
    c.call_tool("execute_code", {"sandbox_id": sid, "code": "x = 1"})   # the interpreter is up
    c.send(req("cell", "tools/call", {"name": "execute_code",
                                      "arguments": {"sandbox_id": sid, "code": "import time\ntime.sleep(3)\nprint('cell')"}}))
    time.sleep(0.5)
    c.send(req("run", "tools/call", {"name": "execute_python", "arguments": {"script": "print('run')"}}))
    first = None
    while first is None:
        m = c.read_message(60)
        if isinstance(m, dict) and m.get("id") in ("cell", "run"):
            first = m["id"]
            c.unclaimed.append(m)
    eq(first, "cell", "the call answered first (the run must wait for the cell's slot)")
    for rid in ("cell", "run"):
        res = c.wait_for(rid, 60).get("result") or {}
        check(not res.get("isError"), f"{rid} failed: {json.dumps(res)[:500]}")


def recording_bwrap():
    """A bwrap that writes one line per sandbox started (its /proc/self/cgroup, lines joined by ";") to a log, then
    execs the real one; `--version` probes are not logged. Returns (its path, the log's path)."""
    real = shutil.which("bwrap")
    if not real:
        mcptest.skip("bubblewrap is not installed")
    base = scratch("mcptest-sched-bwrap-")
    os.chmod(base, 0o755)
    log = os.path.join(base, "started")
    open(log, "w").close()
    os.chmod(log, 0o666)
    wrapper = os.path.join(base, "bwrap")
    mcptest.executable(wrapper, f"#!/bin/sh\n[ \"$1\" = --version ] || tr '\\n' ';' < /proc/self/cgroup >> {log}; "
                                f"echo >> {log}\nexec {real} \"$@\"\n")
    return wrapper, log


def started(log):
    with open(log) as f:
        return [line for line in f.read().split("\n") if line]


@test
def check_environment_starts_one_self_test_per_window():
    """check_environment runs the sandbox self-test again, but a result younger than the window (5 s) is reused:
    A's sixty pipelined calls, round after round, start no sandbox of their own beyond one per window, where each
    round used to start one. The test a call does start is the daemon's background work, as the one at start is:
    its cgroup is in the daemon's group (a quarter of a user's CPU weight), never in the caller's."""
    wrapper, log = recording_bwrap()
    d = Daemon(args=[f"--bwrap={wrapper}", "--prestart=0", "--offline"])
    at_exit(d.close)
    c = initialized(d.client())
    sb = (c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}).get("sandbox", {})
    if not sb.get("working"):
        mcptest.skip(f"the sandbox does not work here: {sb.get('error', 'self-test failed')}")
    first = len(started(log))
    check(first >= 1, "no self-test was started at all")
    t0 = time.monotonic()
    rounds = 0
    while time.monotonic() - t0 < 1.5:
        rids = [c.new_id() for _ in range(60)]
        for rid in rids:
            c.send(req(rid, "tools/call", {"name": "check_environment", "arguments": {}}))
        for rid in rids:
            res = c.wait_for(rid, 60).get("result") or {}
            check(res.get("structuredContent", {}).get("sandbox", {}).get("working") is True,
                  f"check_environment: {json.dumps(res)[:400]}")
        rounds += 1
    elapsed = time.monotonic() - t0
    more = len(started(log)) - first
    print(f"# {rounds} rounds of 60 check_environment calls in {elapsed:.1f} s started {more} sandboxes", flush=True)
    check(rounds >= 5, f"only {rounds} rounds in {elapsed:.1f} s")
    check(more <= 1 + int(elapsed // 5), f"{rounds} rounds in {elapsed:.1f} s started {more} self-tests")
    r = c.call_tool("check_environment", {}, timeout=60)
    age = r["structuredContent"]["sandbox"].get("self_test_age_s")
    check(isinstance(age, int) and age >= 1 and f"passed {age} s ago" in c.text(r),
          f"a reused result does not say how old it is: {age!r}, {c.text(r)[:300]}")
    # Once the window is over, B's call starts one, in the daemon's group of every hierarchy that has groups.
    time.sleep(5.5)
    b = d.nobody_client()
    before = len(started(log))
    r = b.call_tool("check_environment", {}, timeout=60)
    check("self-test passed just now" in b.text(r), f"B's check_environment: {b.text(r)[:300]}")
    new = started(log)[before:]
    eq(len(new), 1, f"sandboxes B's check_environment started: {new}")
    if "/uid-" in new[0] or "/daemon" in new[0]:    # a daemon that gives sandboxes cgroups (root, here)
        check("/daemon/" in new[0] and "/uid-" not in new[0], f"B's self-test is not the daemon's: {new[0]}")
    else:
        print(f"# no cgroups here: the self-test's group is not seen ({new[0][:200]})", flush=True)


def measure():
    n = int(os.environ["MCP_SCHED_MEASURE"])
    d, c = daemon(n, [])
    s = Sampler(d.proc.pid)
    t0 = time.monotonic()
    flood(c, n)
    failed = 0
    for i in range(n):
        r = c.wait_for(1000 + i, 600)
        failed += bool((r.get("result") or {}).get("isError") or "error" in r)
    s.close()
    print(f"{n} calls in {time.monotonic() - t0:.1f}s, {failed} failed; peak {s.uv} uv processes, "
          f"{s.helpers} metadata readers, {s.compiles} compiles at once")


if __name__ == "__main__":
    if os.environ.get("MCP_SCHED_MEASURE"):
        measure()
    else:
        main()
