#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test of the cgroups a daemon running as root creates for its runs.

Without a delegated cgroup v2 subtree, a root daemon makes cgroups itself: on
cgroup v2 below its own cgroup, or in the cgroup v1 pids and memory (and cpu)
hierarchies. Shown here from both sides of the sandbox: every run is in a
cgroup of its own, in each hierarchy, inside the group of its user's runs
(one CPU weight per user), with the run's limits written there; a
fork bomb stops at its run's pids.max and a memory hog, also one that fills a
tmpfs (/tmp, /work, /dev/shm: their pages are charged to the writer's memory
cgroup), at its memory limit, each reported as that limit from the cgroup's
events alone (the scripts leave nothing on stderr to go by); the daemon
answers the next call at once; no run cgroup is left behind, and the daemon's
own cgroups go when it stops. A daemon started in a pids cgroup smaller than
its caps need (the unit's TasksMax=) warns once, naming by how much to raise
it, and check_environment says so; at reload it checks again; in one large
enough it does not warn.

The daemon runs inside a pids cgroup of this program's with pids.max 3000
(mcptest.pids_safety_net()): a fork bomb that got past its run's limit would
stop there, not take the machine.

Needs root, a pids cgroup for the safety net, bubblewrap and a Python 3.11+.
Exit 77 when they or cgroups the daemon can create are missing.
"""

import hashlib
import json
import os
import shutil
import signal
import time
import uuid

import mcptest
from mcptest import Daemon, check, eq, main, skip, test, test_pythons, with_defaults

_STATE = {}

TMPFS_MB = 512


def python_version():
    have = test_pythons()
    if have:
        return max(have, key=lambda v: tuple(map(int, v.split(".")))), []
    for name in sorted(os.listdir("/usr/bin"), reverse=True):
        parts = name[len("python"):].split(".")
        if name.startswith("python3.") and len(parts) == 2 and parts[1].isdigit() and int(parts[1]) >= 11:
            return f"3.{parts[1]}", ["--python-search-path=/usr/bin"]
    skip("no Python 3.11+ (pyenv, or /usr/bin/python3.N) for the tests")


def daemon():
    """The daemon as root, in the safety net, with tmpfs larger than the memory limits used here."""
    if "d" in _STATE:
        return _STATE["d"]
    if os.geteuid() != 0:
        skip("only a daemon running as root creates cgroups itself, and these tests are not root")
    if not shutil.which("bwrap"):
        skip("bubblewrap is not installed")
    net = mcptest.pids_safety_net()
    if not net:
        skip("no pids cgroup for the safety net (cgroup v1 pids, or cgroup v2 with pids at its root): no fork "
             "bomb is run without one")
    version, args = python_version()
    d = Daemon(args=[f"--tmpfs-size={TMPFS_MB}M", *args])
    mcptest.at_exit(d.close)
    c = d.client()
    c.initialize()
    st = c.call_tool("check_environment", {}, timeout=60)["structuredContent"]
    sb = st["sandbox"]
    if not sb.get("working"):
        skip(f"the sandbox does not work here: {sb.get('error', 'self-test failed')}")
    if sb["limits"] != "cgroup":
        skip(f"the daemon gives runs no cgroup of their own here: {sb['limits_detail']}")
    _STATE.update(d=d, client=c, python=version, detail=sb["limits_detail"])
    # Where the daemon makes its cgroups: below its own (this program's), named after its cache directory.
    name = "mcp-python-sandbox-" + hashlib.sha256(d.cache_dir.encode()).hexdigest()[:16]
    mounts, ours = mcptest.cgroup_mounts(), mcptest.own_cgroups()
    used = hierarchies() + (["cpu"] if v1() and ", cpu)" in sb["limits_detail"] else [])
    _STATE["parents"] = {h: mounts[h] + ours[h].rstrip("/") + "/" + name for h in used}
    return d


def client():
    daemon()
    return _STATE["client"]


def v1():
    return _STATE["detail"].startswith("cgroup v1")


def hierarchies():
    """The controllers whose hierarchies hold a run's cgroups: "pids" and "memory" on v1, "" (v2) otherwise."""
    return ["pids", "memory"] if v1() else [""]


def run(script, limits=None, timeout=60):
    args = {"script": script, "python_version": _STATE["python"]}
    if limits:
        args["limits"] = limits
    c = client()
    r = c.call_tool("execute_python", args, timeout=timeout)
    # A lean result leaves fields at their usual values out: read them as those (mcptest.with_defaults).
    return r, with_defaults(r["structuredContent"]), c.text(r)


def start_run(c, script, limits=None):
    rid = c.new_id()
    args = {"script": script, "python_version": _STATE["python"]}
    if limits:
        args["limits"] = limits
    c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "execute_python", "arguments": args}})
    return rid


def read(path):
    with open(path) as f:
        return f.read().strip()


def run_dirs():
    """The run cgroups there are now below the daemon's own, in each hierarchy: {path, ...}."""
    found = set()
    for parent in _STATE["parents"].values():
        # In the groups of runs: one per user (uid-N), one for the daemon's own work.
        try:
            groups = [os.path.join(parent, n) for n in os.listdir(parent) if n.startswith("uid-") or n == "daemon"]
        except FileNotFoundError:
            continue
        for g in groups:
            try:
                # Not the one of builds, which lives as long as the daemon.
                found.update(os.path.join(g, n) for n in os.listdir(g)
                             if n.startswith("run-") and not n.endswith("-background"))
            except FileNotFoundError:
                pass
    return found


# A run that shows where it is from inside, then waits with a child the test finds from outside by its
# command line (sleep's argument, unique to the run).
WHERE = r'''
import json, os, subprocess
inside = {}
for line in open("/proc/self/cgroup"):
    _, controllers, path = line.rstrip("\n").split(":", 2)
    for c in controllers.split(",") if controllers else [""]:
        inside[c] = path
print(json.dumps({"cgroup": inside, "cgroupns": os.readlink("/proc/self/ns/cgroup")}), flush=True)
subprocess.run(["/bin/sleep", "MARK"])
'''


@test
def each_run_has_cgroups_of_its_own():
    d = daemon()
    detail = _STATE["detail"]
    if v1():
        check(detail.startswith("cgroup v1 (pids, memory") and "created by the daemon as root" in detail,
              f"limits_detail: {detail}")
    else:
        check("cgroup v2" in detail, f"limits_detail: {detail}")

    # Two runs at once, on two connections.
    clients, marks, rids = [], [], []
    for _ in range(2):
        c = d.client()
        c.initialize()
        mark = f"4.{uuid.uuid4().int % 10 ** 9:09d}"
        clients.append(c)
        marks.append(mark)
        rids.append(start_run(c, WHERE.replace("MARK", mark)))
    mounts = mcptest.cgroup_mounts()
    parents = _STATE["parents"]
    seen = []
    for mark in marks:
        pids = mcptest.wait_until(lambda: mcptest.processes_with(f"sleep\0{mark}"), 20, f"the run's sleep {mark}")
        seen.append(mcptest.own_cgroups(pids[0]))

    names = []
    for where in seen:
        run_names = set()
        for h in parents:
            path = where[h]
            parent, name = os.path.split(mounts[h] + path)
            check(name.startswith(f"run-{d.proc.pid}-"), f"{h or 'v2'}: the run's cgroup {path}")
            # In the daemon's cgroup, below its own (this program's: in the safety net for pids), in the group of
            # the user's runs (this program's: root's), which has a user's CPU weight.
            eq(parent, os.path.join(parents[h], "uid-0"), f"{h or 'v2'}: the cgroup the run's is in")
            for weight, want in (("cpu.shares", "1024"), ("cpu.weight", "100")):
                if os.path.exists(os.path.join(parent, weight)):
                    eq(read(os.path.join(parent, weight)), want, f"{parent}/{weight}")
            run_names.add(name)
            full = mounts[h] + path
            # The run's limits, written there (the configured defaults: 2048 MiB, 256 processes).
            if h in ("pids", ""):
                eq(read(os.path.join(full, "pids.max")), "256", f"{full}/pids.max")
            if h == "memory":
                eq(int(read(os.path.join(full, "memory.limit_in_bytes"))), 2048 << 20, f"{full} memory limit")
                if os.path.exists(os.path.join(full, "memory.memsw.limit_in_bytes")):
                    eq(int(read(os.path.join(full, "memory.memsw.limit_in_bytes"))), 2048 << 20,
                       f"{full} memory+swap limit")
            if h == "":
                eq(read(os.path.join(full, "memory.max")), str(2048 << 20), f"{full}/memory.max")
        eq(len(run_names), 1, f"the same run cgroup in each hierarchy: {where}")
        names.append(run_names.pop())
    check(names[0] != names[1], f"two runs, one cgroup: {names}")

    for c, rid in zip(clients, rids):
        reply = c.wait_for(rid, timeout=60)
        st = with_defaults(reply["result"]["structuredContent"])
        check(not reply["result"].get("isError"), f"the run failed: {c.text(reply['result'])[-800:]}")
        inside = json.loads(st["stdout"].splitlines()[0])
        # From inside: the hierarchies are there, and the run sits at the root of a cgroup namespace of its
        # own (bwrap unshares it), which is its run cgroup; or, without that namespace, at the run's path.
        for h in hierarchies():
            p = inside["cgroup"].get(h)
            check(p == "/" or os.path.basename(p or "").startswith("run-"),
                  f"{h or 'v2'} from inside: {inside['cgroup']}")
        check(inside["cgroupns"] != os.readlink("/proc/self/ns/cgroup") or
              any(os.path.basename(inside["cgroup"][h]).startswith("run-") for h in hierarchies()),
              f"the run is in the host's cgroup namespace at the host's cgroup: {inside}")
        c.close()
    mcptest.wait_until(lambda: not run_dirs(), 5, f"the runs' cgroups to go: {run_dirs()}")


# Stopped by the run's pids.max; quiet about it: only the cgroup's events can say which limit it was.
FORK_BOMB = r'''
import os, sys, time
n = 0
while n < 2000:     # bounded, so that a broken limit fails the test rather than the machine
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print("forked", n, flush=True)
os._exit(3)
'''


@test
def fork_bomb_stops_at_its_pids_max():
    d = daemon()
    for limit, most in ((None, 256), (64, 64)):
        t0 = time.monotonic()
        r, st, text = run(FORK_BOMB, limits={"max_processes": limit} if limit else None)
        check(r.get("isError"), f"the bomb succeeded: {text[-600:]}")
        eq(st.get("limit"), "processes", f"limit (stdout {st['stdout']!r}, stderr {st['stderr'][-300:]!r})")
        eq(st.get("stderr", ""), "", "stderr (the limit is known from pids.events)")
        forked = int(st["stdout"].split()[-1])
        check(0 < forked < most, f"forked {forked} with max_processes {most}")
        check(time.monotonic() - t0 < 20, "the fork bomb took too long to stop")
        # The daemon answers the next call within a few seconds.
        t0 = time.monotonic()
        r, st, text = run("print('next')", timeout=10)
        check(not r.get("isError") and st["stdout"] == "next\n", f"the next call: {text[-600:]}")
        check(time.monotonic() - t0 < 5, f"the next call took {time.monotonic() - t0:.1f}s")
    check(d.alive(), "the daemon died")
    # Nothing of the bombs is left: no process below the daemon, no run cgroup.
    mcptest.wait_until(lambda: not mcptest.children(d.proc.pid), 10, "the bombs' processes to go")
    mcptest.wait_until(lambda: not run_dirs(), 5, f"the runs' cgroups to go: {run_dirs()}")


# A fork bomb that swallows EAGAIN and keeps trying: it runs into its timeout, but the limit it kept hitting is
# the process limit, which pids.events counted. Bounded by the timeout, and it sleeps between tries.
STUBBORN_BOMB = r'''
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        time.sleep(0.01)
        continue
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
'''


@test
def stubborn_fork_bomb_is_reported_as_the_process_limit():
    daemon()
    args = {"script": STUBBORN_BOMB, "python_version": _STATE["python"], "timeout_seconds": 3,
            "limits": {"max_processes": 32}}
    c = client()
    r = c.call_tool("execute_python", args, timeout=60)
    st, text = r["structuredContent"], c.text(r)
    check(r.get("isError"), f"the bomb succeeded: {text[-600:]}")
    eq(st.get("timed_out"), True, f"timed_out ({text[-600:]})")
    eq(st.get("limit"), "processes", f"limit ({text[-600:]})")
    check("--- limit: processes ---" in text, f"the text names the limit: {text[-600:]}")
    # A run that only times out still says timeout.
    args = {"script": "import time\ntime.sleep(30)", "python_version": _STATE["python"], "timeout_seconds": 2}
    r = c.call_tool("execute_python", args, timeout=60)
    st = r["structuredContent"]
    eq((st.get("timed_out"), st.get("limit")), (True, "timeout"), "a plain timeout")
    mcptest.wait_until(lambda: not run_dirs(), 10, f"the runs' cgroups to go: {run_dirs()}")


# Memory that only the memory cgroup can see the end of: kills leave no traceback, so the limit said comes from
# the cgroup's OOM events. Each prints how far it got.
HEAP = r'''
keep = []
for i in range(64):          # 1 GiB at most
    keep.append(b"x" * (16 << 20))
    print(len(keep) * 16, flush=True)
'''

FILL = r'''
import os
fd = os.open("PATH", os.O_WRONLY | os.O_CREAT, 0o600)
chunk = b"y" * (1 << 20)
for i in range(400):         # 400 MiB at most: less than the tmpfs holds
    os.write(fd, chunk)
    if i % 16 == 15:
        print(i + 1, flush=True)
print("wrote all", flush=True)
'''


@test
def memory_hog_and_tmpfs_fill_stop_at_the_memory_limit():
    daemon()
    r, st, text = run(HEAP, limits={"memory_mb": 128})
    eq(st.get("limit"), "memory", f"heap: limit ({text[-600:]})")
    eq(st.get("signal"), "SIGKILL", "heap: killed")
    got = int(st["stdout"].split()[-1]) if st["stdout"].strip() else 0
    check(got < 160, f"heap: got to {got} MiB with memory_mb 128")

    for path in ("/tmp/fill", "/work/fill", "/dev/shm/fill"):
        # With room: 400 MiB fit in the tmpfs and in 1 GiB of memory.
        r, st, text = run(FILL.replace("PATH", path), limits={"memory_mb": 1024})
        check(not r.get("isError") and "wrote all" in st["stdout"], f"{path} with room: {text[-600:]}")
        # At 128 MiB: the tmpfs pages the run writes count as its memory.
        r, st, text = run(FILL.replace("PATH", path), limits={"memory_mb": 128})
        eq(st.get("limit"), "memory", f"{path}: limit ({text[-600:]})")
        check("wrote all" not in st["stdout"], f"{path}: the fill went through: {st['stdout'][-200:]}")
        got = int(st["stdout"].split()[-1]) if st["stdout"].strip() else 0
        check(got <= 128, f"{path}: wrote {got} MiB with memory_mb 128")
    r, st, text = run("print('next')", timeout=10)
    check(not r.get("isError"), f"the next call: {text[-600:]}")
    mcptest.wait_until(lambda: not run_dirs(), 5, f"the runs' cgroups to go: {run_dirs()}")


@test
def builds_go_into_the_daemons_group():
    """uv, installing a call's dependencies, runs in the daemon's group of runs (at a quarter of a user's CPU
    weight), not beside the users' groups: background work gets less CPU than a user's runs."""
    daemon()
    from wheels import build_wheel
    wheels = mcptest.scratch("mcpt-cg-wheels-")
    build_wheel(wheels, "cgbuild", "1.0")
    uv = mcptest.UvLog(delay=5, delay_on="pip install")
    mcptest.at_exit(uv.close)
    version, args = python_version()
    d = Daemon(args=[f"--uv={uv.path}", f"--find-links={wheels}", "--offline", *args])
    mcptest.at_exit(d.close)
    c = d.client()
    c.initialize()
    name = "mcp-python-sandbox-" + hashlib.sha256(d.cache_dir.encode()).hexdigest()[:16]
    rid = start_run(c, "# /// script\n# dependencies = [\"cgbuild\"]\n# ///\nimport cgbuild\nprint('ok')\n")
    pids = mcptest.wait_until(lambda: mcptest.processes_with(uv.path + "\0pip\0install"), 60, "uv pip install")
    where = mcptest.own_cgroups(pids[0])
    used = hierarchies() + (["cpu"] if v1() and ", cpu)" in _STATE["detail"] else [])
    mounts = mcptest.cgroup_mounts()
    for h in used:
        check(where[h].endswith(f"/{name}/daemon/run-{d.proc.pid}-background"), f"{h or 'v2'}: uv is in {where[h]}")
    if "cpu" in used:
        eq(read(mounts["cpu"] + os.path.dirname(where["cpu"]) + "/cpu.shares"), "256", "the daemon's group's weight")
    reply = c.wait_for(rid, timeout=120)
    check(not reply["result"].get("isError"), c.text(reply["result"])[-600:])
    c.close()
    d.close()


BUSY = r'''
import os, time
os.fork()
end = time.monotonic() + 5
while time.monotonic() < end:
    pass
'''


@test
def a_busy_users_group_weighs_less_until_it_is_quiet():
    """The groups' CPU weights follow their recent use (cpu-share.h): while root's run keeps two CPUs busy, root's
    group (uid-0) weighs a fraction of a user's default weight; some seconds after the run ended it is back at the
    default, and the daemon's group, which did nothing, kept its own all along."""
    d = daemon()
    parents = _STATE["parents"]
    h = "cpu" if "cpu" in parents else "" if "" in parents else None
    if h is None:
        skip("no cpu hierarchy among the daemon's cgroups: nothing shares the CPUs by weight")
    weight = "cpu.shares" if h == "cpu" else "cpu.weight"
    full = {"uid-0": "1024" if h == "cpu" else "100", "daemon": "256" if h == "cpu" else "25"}
    group = lambda g: os.path.join(parents[h], g, weight)

    def weight_of(g):
        try:
            return int(read(group(g)))
        except FileNotFoundError:       # the group is made at its first run
            return None
    c = d.client()
    c.initialize()
    rid = start_run(c, BUSY)
    mcptest.wait_until(lambda: os.path.isdir(os.path.dirname(group("uid-0"))), 10, "root's group of runs")
    if weight_of("uid-0") is None:
        c.wait_for(rid, timeout=60)
        skip(f"no {weight} in {os.path.dirname(group('uid-0'))}: the cpu controller is not enabled there")
    low = mcptest.wait_until(lambda: (lambda w: w if w is not None and w < int(full["uid-0"]) else None)(
        weight_of("uid-0")), 10, f"{group('uid-0')} below {full['uid-0']} while the run is busy")
    check(low <= int(full["uid-0"]) // 2, f"a busy group's weight: {low}")
    eq(read(group("daemon")), full["daemon"], "the idle daemon's group's weight")
    reply = c.wait_for(rid, timeout=60)
    check(not reply["result"].get("isError"), c.text(reply["result"])[-600:])
    mcptest.wait_until(lambda: weight_of("uid-0") == int(full["uid-0"]), 30,
                       f"{group('uid-0')} back at {full['uid-0']} once the run ended")
    c.close()


def cpu_cap(pid):
    """The CFS cap of pid's cgroup in the cpu hierarchy as a fraction of a CPU, None for no cap; False when pid
    is gone or its cgroup has no cap files."""
    mounts = mcptest.cgroup_mounts()
    try:
        own = mcptest.own_cgroups(pid)
    except OSError:
        return False
    try:
        if "cpu" in own and "cpu" in mounts:
            d = mounts["cpu"] + own["cpu"]
            quota, period = int(read(d + "/cpu.cfs_quota_us")), int(read(d + "/cpu.cfs_period_us"))
            return None if quota < 0 else quota / period
        if "" in own and "" in mounts:
            quota, period = read(mounts[""] + own[""] + "/cpu.max").split()
            return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    return False


@test
def a_persistent_sandbox_started_again_runs_its_cells_uncapped():
    """A persistent sandbox waits at the idle CPU cap (5% of a CPU: what a cell left running may use) and runs its
    cells without one. Started again (reset_sandbox, as install_package does) with a cell queued behind the
    restart, the new sandbox must leave the idle cap it is created at: the daemon used to try before the child
    that starts bwrap had made its cgroups, fail (a warning in the log) and count the cap as set, so the driver's
    start and every cell until the sandbox next went idle ran at 5% of a CPU."""
    daemon()
    version, args = python_version()
    d = Daemon(args=["--persistent-sandboxes", "--offline", "--prestart=0", "--tmpfs-size=64M", *args])
    mcptest.at_exit(d.close)
    c = d.client()
    c.initialize()
    r = c.call_tool("create_sandbox", {"python_version": version}, timeout=180)
    check(not r.get("isError"), f"create_sandbox: {c.text(r)}")
    sid = r["structuredContent"]["sandbox_id"]

    def bwraps():
        """The outer bwrap of the sandbox's driver (python -I -u -c DRIVER), not a bytecode compile's."""
        found = []
        for p in mcptest.children(d.proc.pid):
            try:
                with open(f"/proc/{p}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    argv = f.read()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == d.proc.pid and argv.split(b"\0")[0].endswith(b"bwrap") and b"\0-I\0-u\0-c\0" in argv:
                found.append(p)
        return found

    first = mcptest.wait_until(lambda: bwraps()[:1], 10, "the sandbox's bwrap")[0]
    cap = mcptest.wait_until(lambda: cpu_cap(first) or None, 10, "the idle cap of the waiting sandbox")
    check(abs(cap - 0.05) < 0.001, f"the waiting sandbox's cap: {cap}")

    reset = c.new_id()
    c.send({"jsonrpc": "2.0", "id": reset, "method": "tools/call",
            "params": {"name": "reset_sandbox", "arguments": {"sandbox_id": sid}}})
    cell = c.new_id()
    c.send({"jsonrpc": "2.0", "id": cell, "method": "tools/call",
            "params": {"name": "execute_code", "arguments": {"sandbox_id": sid, "code": "import time\ntime.sleep(4)"}}})
    second = mcptest.wait_until(lambda: [p for p in bwraps() if p != first][:1], 20, "the new sandbox's bwrap")[0]
    mcptest.wait_until(lambda: cpu_cap(second) is None, 8,
                       "no CPU cap on the sandbox started again while its queued cell runs")
    for rid in (reset, cell):
        r = c.wait_for(rid, timeout=60)["result"]
        check(not r.get("isError"), f"{c.text(r)[:400]}")
    mcptest.wait_until(lambda: cpu_cap(second) == 0.05, 10, "the idle cap again once the cell is over")
    check("could not set its CPU cap" not in d.log(), f"the log: {d.log()[-1000:]}")
    c.close()
    d.close()


def shared_sandbox(d, name):
    """A bwrap of the sandbox started ahead for whoever comes first (its Python waits for /work/script.py), once it
    is in the daemon's group in every hierarchy: its child has entered them all and execed bwrap (the daemon hands
    over none before, job_accept()). Not another sandbox of the daemon's own, such as the one that compiles the
    boot program; under load, the sandboxes started ahead may still wait to enter their cgroups then."""
    for p in mcptest.children(d.proc.pid):
        try:
            where = mcptest.own_cgroups(p)
            with open(f"/proc/{p}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if (comm == "bwrap" and b"/work/script.py" in argv and
                    all(f"/{name}/daemon/run-" in where[h] for h in hierarchies())):
                return p
        except (OSError, KeyError):
            pass
    return None


@test
def shared_prestarted_sandbox_moves_to_its_users_group_before_the_script():
    """The sandbox started ahead for whoever comes first waits in the daemon's group; the user who takes it gets
    it in their own group (uid-N) before the script starts: the script and a child it forks at once are there, in
    every hierarchy, and nothing of the run is left in the daemon's group."""
    daemon()
    version, args = python_version()
    d = Daemon(args=["--prestart=1", *args])
    mcptest.at_exit(d.close)
    name = "mcp-python-sandbox-" + hashlib.sha256(d.cache_dir.encode()).hexdigest()[:16]
    # A first hello world (root's) leaves the shared one waiting for whoever comes next.
    a = d.client()
    a.initialize()
    r = a.call_tool("execute_python", {"script": "pass\n", "python_version": version}, timeout=60)
    check(not r.get("isError"), a.text(r)[-600:])
    a.close()
    mcptest.wait_until(lambda: shared_sandbox(d, name), 30, "the shared sandbox waiting in the daemon's group")
    b = d.nobody_client()
    mark = "mcpt-cg-shared-" + uuid.uuid4().hex
    script = ("import os, sys, time\n"
              "if os.fork() == 0:\n"
              f"    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', {mark!r}])\n"
              "time.sleep(8)\n"
              "print('done')\n")
    rid = b.new_id()
    b.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "execute_python", "arguments": {"script": script, "python_version": version}}})
    child = mcptest.wait_until(lambda: mcptest.processes_with(mark), 30, "the child the script forked")[0]
    where = mcptest.own_cgroups(child)
    for h in hierarchies():
        check(f"/{name}/uid-{mcptest.NOBODY}/run-" in where[h], f"{h or 'v2'}: the forked child is in {where[h]}")
    reply = b.wait_for(rid, timeout=60)
    st = with_defaults(reply["result"]["structuredContent"])
    eq(st.get("stdout"), "done\n", b.text(reply["result"])[-600:])
    check(st.get("prestarted") is True, f"the run did not take the shared pre-started sandbox: {st}")
    b.close()
    d.close()


@test
def shared_sandbox_that_cannot_move_is_not_used():
    """A shared sandbox started ahead that cannot move into its taker's group is not used: the call runs in a
    fresh sandbox instead (it ran on in the daemon's group, on the daemon's share of the CPUs). The move is made
    to fail on cgroup v1's cpu hierarchy, where a cgroup's CPU quota may not exceed its parent's: the taker's group
    gets a quota below the runs' --cpu-quota. (cgroup v2 has no such check: there, nothing to do here.)"""
    daemon()
    if not (v1() and ", cpu)" in _STATE["detail"]):
        print("# the daemon has no cgroup v1 cpu hierarchy here: no way to make the move fail", flush=True)
        return
    version, args = python_version()
    d = Daemon(args=["--prestart=1", "--cpu-quota=50", *args])
    mcptest.at_exit(d.close)
    name = "mcp-python-sandbox-" + hashlib.sha256(d.cache_dir.encode()).hexdigest()[:16]
    a = d.client()
    a.initialize()
    r = a.call_tool("execute_python", {"script": "pass\n", "python_version": version}, timeout=60)
    check(not r.get("isError"), a.text(r)[-600:])
    a.close()

    pid = mcptest.wait_until(lambda: shared_sandbox(d, name), 30, "the shared sandbox waiting in the daemon's group")
    where = mcptest.own_cgroups(pid)["cpu"]
    top = mcptest.cgroup_mounts()["cpu"] + os.path.dirname(os.path.dirname(where))
    group = os.path.join(top, f"uid-{mcptest.NOBODY}")
    os.makedirs(group, exist_ok=True)
    with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as f:
        f.write("10000")   # 10% of a CPU: a run's 50% cannot be set below it
    b = d.nobody_client()
    r = b.call_tool("execute_python", {"script": "print('B')\n", "python_version": version}, timeout=60)
    st = with_defaults(r["structuredContent"])
    eq(st.get("stdout"), "B\n", b.text(r)[-600:])
    check(st.get("prestarted") is not True, f"the run used the shared sandbox that stayed in the daemon's group: {st}")
    check("Failed to move a sandbox started ahead" in d.log_full(), "the move did not fail: nothing shown here")
    # The fresh one's cgroups cannot be made there either: its child (which makes them) says so in the daemon's
    # log and runs it under rlimits.
    check("falling back to rlimits for this run" in d.log_full(), f"no fallback logged: {d.log_full()[-1500:]}")
    b.close()
    d.close()


@test
def no_cgroup_is_left_when_the_daemon_stops():
    d = daemon()
    parents = _STATE["parents"].values()
    check(all(os.path.isdir(p) for p in parents), f"the daemon's cgroups while it runs: {parents}")
    # A run still going when the daemon is told to stop.
    c = d.client()
    c.initialize()
    start_run(c, "import time\ntime.sleep(60)\n")
    mcptest.wait_until(lambda: run_dirs(), 20, "the run's cgroup")
    eq(d.stop(), 0, "the daemon's exit status")
    c.kill()
    left = [p for p in parents if os.path.exists(p)]
    eq(left, [], "the daemon's cgroups after it stopped")
    _STATE.pop("d", None)


def pids_group(pids_max):
    """A pids cgroup of this test's, below this program's own, with pids.max; a command prefix that starts a
    program in it. Skips where there is none to be made (cgroup v1 pids, or v2 with pids at its root)."""
    if os.geteuid() != 0:
        skip("needs root to make a pids cgroup")
    mounts, ours = mcptest.cgroup_mounts(), mcptest.own_cgroups()
    if "pids" in mounts and "pids" in ours:
        home = mounts["pids"] + ours["pids"].rstrip("/")
    elif "" in mounts and "" in ours:
        home = mounts[""] + ours[""].rstrip("/")
        try:
            with open(os.path.join(home, "cgroup.subtree_control")) as f:
                if "pids" not in f.read().split():
                    skip("the pids controller is not enabled below this program's cgroup")
        except OSError:
            skip("this program's cgroup v2 cannot have children here")
    else:
        skip("no pids cgroup hierarchy")
    group = os.path.join(home, f"mcptest-tasksmax-{os.getpid()}-{pids_max}")
    os.mkdir(group)
    mcptest.at_exit(lambda: os.rmdir(group))
    with open(os.path.join(group, "pids.max"), "w") as f:
        f.write(str(pids_max))
    return ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh"]


# (max-runs 4 + max-sandboxes 10) x max-processes 100 + 768 for the daemon; in a file, which a reload reads again
# (the command line's settings would stay).
CAPS = "[Daemon]\nmax-runs = 4\nmax-sandboxes = 10\nmax-processes = 100\npersistent-sandboxes = yes\n"
NEED = (4 + 10) * 100 + 768
SHORT = "The service's own limits are below what the configuration's caps let it hold"


def caps_file(text):
    path = os.path.join(mcptest.scratch("mcptest-tasksmax-"), "d.conf")
    with open(path, "w") as f:
        f.write(text)
    return path


def service_limits(d):
    c = d.client()
    c.initialize()
    st = c.call_tool("check_environment", {}, timeout=60)
    c.close()
    return st["structuredContent"]["sandbox"].get("service_limits", ""), c.text(st)


@test
def a_service_cgroup_too_small_for_the_caps_is_reported():
    # The daemon's cgroup (the unit's TasksMax=, here a pids.max of ours) holds 1000 processes; the caps need more.
    conf = caps_file(CAPS)
    d = Daemon(args=[f"--config={conf}"], wrap=pids_group(1000))
    mcptest.at_exit(d.close)
    field, text = service_limits(d)
    eq(field, f"too small: TasksMax= 1000, {NEED} needed", "check_environment's sandbox.service_limits")
    check(f"Service limits: too small: TasksMax= 1000, {NEED} needed" in text, text)
    log = d.log()
    eq(log.count(SHORT), 1, f"warnings in the log: {log[-3000:]}")
    check(f"TasksMax= (pids.max) is 1000, and (max-runs 4 + max-sandboxes 10) x max-processes 100 + 768 for the "
          f"daemon is {NEED}: raise it by {NEED - 1000} (systemctl edit mcp-python-sandboxd.service)" in log,
          log[-3000:])
    # A reload checks again: with caps that fit, the field says so and no new warning comes.
    with open(conf, "w") as f:
        f.write(CAPS.replace("max-sandboxes = 10", "max-sandboxes = 0").replace("= 100", "= 10"))
    d.proc.send_signal(signal.SIGHUP)
    mcptest.wait_until(lambda: "Reloaded: " in d.log(), what="the reload")
    field, _ = service_limits(d)
    check(field.startswith(f"enough: TasksMax= 1000, {4 * 10 + 768} needed"), field)
    eq(d.log().count(SHORT), 1, "warnings after a reload to caps that fit")
    d.close()


@test
def a_service_cgroup_large_enough_for_the_caps_is_not_reported():
    d = Daemon(args=[f"--config={caps_file(CAPS)}"], wrap=pids_group(NEED + 100))
    mcptest.at_exit(d.close)
    field, _ = service_limits(d)
    check(field.startswith(f"enough: TasksMax= {NEED + 100}, {NEED} needed; MemoryMax= "), field)
    check(SHORT not in d.log(), d.log()[-3000:])
    d.close()


if __name__ == "__main__":
    main()
