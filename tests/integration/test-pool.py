#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test: pre-started sandboxes (prestart=).

Through the real shim against the real daemon: after a run, a sandbox for
its environment is started ahead (bwrap, Python running the boot code,
waiting for the script on a pipe) and the next run with the default limits
is handed it ("prestarted": true in the result). Its results are those of a
fresh sandbox, byte for byte: output layout, exit codes, tracebacks with the
script's line numbers, __file__, the script's own source, stdin at EOF,
/work/out files. A pre-started sandbox is used once: nothing of one run is
seen by the next. Timeouts count from the hand-over and kill it, as
cancellation does; the pool refills after each use, one deep at an agent's
pace and deeper (up to prestart=) when calls come back to back; a reload and
the daemon's exit stop the waiting sandboxes.

Needs $DAEMON and $SHIM and bubblewrap. Exit status: 0 pass, 1 fail, 77 skip.
"""

import atexit
import os
import re
import shutil
import signal
import time
import uuid

from mcptest import Daemon, check, children, eq, main, processes_with, skip, test
from mcptest import running, wait_until, with_defaults

_STATE = {}


@atexit.register
def _cleanup():
    for d in _STATE.values():
        try:
            d.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def daemon(prestart=1):
    key = f"prestart={prestart}"
    d = _STATE.get(key)
    if d is None or not d.alive():
        d = Daemon("activate", args=(f"--prestart={prestart}",))
        _STATE[key] = d
    return d


def client(prestart=1):
    c = daemon(prestart).client()
    c.initialize()
    return c


def call(c, script, **args):
    r = c.call_tool("execute_python", {"script": script, **args})
    # A lean result leaves fields at their usual values out: read them as those (mcptest.with_defaults).
    return r, with_defaults(r.get("structuredContent") or {}), c.text(r)


def bwraps(pid):
    """The daemon's bwrap children (the sandboxes it runs or keeps waiting)."""
    out = []
    for p in children(pid):
        try:
            with open(f"/proc/{p}/comm") as f:
                if f.read().strip() == "bwrap":
                    with open(f"/proc/{p}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                            out.append(p)
        except OSError:
            pass
    return sorted(out)


def warm(c, d):
    """One run registers the environment; then wait for its sandbox to be started and settled."""
    call(c, "pass\n")
    wait_until(lambda: len(bwraps(d.proc.pid)) >= 1, 10, "a pre-started sandbox")
    time.sleep(0.5)   # let Python reach the point where it waits for the script


def prestarted_call(c, d, script, **args):
    warm(c, d)
    waiting = set(bwraps(d.proc.pid))
    r, st, text = call(c, script, **args)
    if "structuredContent" in r:
        check(st.get("prestarted") is True, f"the run did not use a pre-started sandbox: {st}")
    else:
        # Files came back, so there is no structuredContent to say it: a sandbox that waited is used up.
        wait_until(lambda: waiting - set(bwraps(d.proc.pid)), 10, "a pre-started sandbox to be used")
    return r, st, text


def strip_duration(text):
    return re.sub(r"--- duration_ms: \d+ ---\n", "", text)


SCRIPTS = {
    "hello": "print('hello')\n",
    "traceback": "import sys\nprint('out')\n\ndef f():\n    raise ValueError('boom')\n\nf()\n",
    "exit": "import sys\nprint('bye', file=sys.stderr)\nsys.exit(3)\n",
    "file": "import sys\nprint(__file__, __name__, sys.argv)\nprint(open(__file__).read().splitlines()[0])\n",
    "stdin": "import sys\nprint(repr(sys.stdin.read()))\n",
    "out": "import os\nos.makedirs('/work/out', exist_ok=True)\nopen('/work/out/a.txt', 'w').write('x' * 5)\n"
           "print(sorted(os.listdir('/work')))\n",
    "syntax": "print('a')\nx = (\n",
    "unicode": "print('héllo ✓')\n",
    "end-of-run": "import atexit, threading, time\natexit.register(lambda: print('atexit'))\n"
                  "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\nprint('main')\n",
    "exit-message": "import sys\nsys.exit('goodbye')\n",
    "fork": "import os\npid = os.fork()\nif pid == 0:\n    print('child')\nelse:\n    os.waitpid(pid, 0)\n    print('parent')\n",
}


@test
def warm_run_uses_a_prestarted_sandbox():
    d = daemon()
    c = client()
    r, st, text = prestarted_call(c, d, "print('hi')\n")
    eq(st["stdout"], "hi\n", "stdout")
    eq(st["exit_code"], 0, "exit code")
    check("pre-started sandbox" in d.log(), "the daemon's debug log does not mention the pre-started sandbox")
    c.close()


@test
def results_are_those_of_a_fresh_sandbox():
    fresh = client(prestart=0)
    c = client()
    d = daemon()
    for name, script in SCRIPTS.items():
        _, st0, text0 = call(fresh, script)
        eq(st0.get("prestarted", False), False, f"{name}: prestart=0 used a pre-started sandbox")
        _, st1, text1 = prestarted_call(c, d, script)
        for k in ("exit_code", "signal", "timed_out", "stdout", "stderr", "limit", "failed_phase", "files",
                  "figures", "truncated"):
            eq(st1.get(k), st0.get(k), f"{name}: {k}")
        eq(strip_duration(text1), strip_duration(text0), f"{name}: the text")
    fresh.close()
    c.close()


@test
def a_prestarted_sandbox_is_never_reused():
    d = daemon()
    c = client()
    mark = uuid.uuid4().hex
    script = ("import os\n"
              "seen = sorted(n for n in os.listdir('/tmp') + os.listdir('/work') if n.startswith('mark-'))\n"
              f"open('/tmp/mark-{mark}', 'w').close()\nopen('/work/mark-{mark}', 'w').close()\n"
              "print(seen, os.getpid())\n")
    for _ in range(3):
        _, st, _ = prestarted_call(c, d, script)
        eq(st["stdout"].split(" ")[0], "[]", "files of an earlier run")
    c.close()


@test
def pool_refills_after_use():
    d = daemon()
    c = client()
    warm(c, d)
    # The environment without dependencies keeps the user's own and one for whoever comes first.
    wait_until(lambda: len(bwraps(d.proc.pid)) == 2, 10, "two pre-started sandboxes")
    before = bwraps(d.proc.pid)
    _, st, _ = call(c, "print(1)\n")
    check(st["prestarted"], "the run used a pre-started sandbox")
    # The used sandbox exits and a new one starts; until both have happened the
    # old pid may still be listed (it is on its way out), so wait for a new one.
    def fresh():
        now = bwraps(d.proc.pid)
        return now if len(now) == 2 and set(now) != set(before) else None
    after = wait_until(fresh, 10, "a new pre-started sandbox (the used one must not come back)")
    eq(len(set(before) - set(after)), 1, "pre-started sandboxes gone after one run")
    c.close()


@test
def timeout_counts_from_the_handover_and_kills_it():
    d = daemon()
    c = client()
    warm(c, d)
    time.sleep(1.5)   # longer than the timeout: the wait before the hand-over must not count
    mark = uuid.uuid4().hex
    _, st, text = call(c, f"import time\nprint('{mark}', flush=True)\ntime.sleep(30)\n", timeout_seconds=1)
    check(st["prestarted"], "the run used a pre-started sandbox")
    eq(st["timed_out"], True, "timed_out")
    eq(st["limit"], "timeout", "limit")
    eq(st["stdout"], f"{mark}\n", "stdout before the timeout")
    check(900 <= st["run_ms"] < 5000, f"run_ms {st['run_ms']}: the timeout did not start at the hand-over")
    check("--- timed_out: true ---" in text, text)
    c.close()


@test
def cancellation_kills_it():
    d = daemon()
    c = client()
    warm(c, d)
    waiting = bwraps(d.proc.pid)
    rid = c.new_id()
    c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "execute_python", "arguments": {"script": "import time\ntime.sleep(600)\n"}}})
    time.sleep(0.5)
    check(all(p in children(d.proc.pid) for p in waiting), "the handed-over sandbox is running")
    c.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
    # The user's own was handed over; the one for whoever comes first waits on.
    wait_until(lambda: any(p not in children(d.proc.pid) for p in waiting), 5, "the cancelled sandbox to go")
    c.result("ping", {})
    check(all(m.get("id") != rid for m in c.unclaimed), "a reply for the cancelled request")
    c.close()


@test
def depth_follows_the_call_rate():
    """One sandbox waits at an agent's pace; calls back to back make the pool deeper, never past prestart=."""
    d = daemon(prestart=3)
    c = client(prestart=3)
    warm(c, d)
    def depths():
        pool = c.call_tool("check_environment", {}).get("structuredContent", {}).get("prestart", {})
        return pool, [e["depth"] for e in pool.get("environments", [])]
    for _ in range(3):
        time.sleep(1.0)
        call(c, "print(1)\n")
    eq(depths()[1], [1], "depth at an agent's pace")
    most = 0
    for _ in range(30):
        _, st, _ = call(c, "print(1)\n")
        eq(st["exit_code"], 0, "exit code")
        most = max(most, len(bwraps(d.proc.pid)))
    # The user's own, at most prestart=; the one for whoever comes first (the bare environment's); the run; and one
    # on its way out.
    check(most <= 3 + 1 + 2, f"at most prestart= waiting, plus the shared one, the run and one on its way out: {most}")
    pool, deep = depths()
    check(deep and 2 <= max(deep) <= 3, f"the pool grew with the burst, up to prestart=: {pool}")
    eq(pool.get("max_per_environment"), 3, "max_per_environment")
    wait_until(lambda: len(bwraps(d.proc.pid)) == max(deep) + 1, 15, "the deeper pool filled (and the shared one)")
    c.close()


@test
def one_users_burst_deepens_only_their_own_pool():
    """The depth follows each user's own call rate: user A's calls back to back keep more of A's sandboxes
    waiting, and user B's one call after that leaves one of B's waiting, not as many as A's. (With one depth per
    environment, B's refill started A's depth of sandboxes, charged to B.)"""
    if os.geteuid() != 0:
        skip("needs root, to be user A beside user B (uid 65534)")
    d = Daemon("activate", args=("--prestart=3",))
    try:
        a = d.client()
        a.initialize()
        warm(a, d)
        for _ in range(30):
            _, st, _ = call(a, "print(1)\n")
            eq(st["exit_code"], 0, "exit code")
        pool = a.call_tool("check_environment", {}).get("structuredContent", {}).get("prestart", {})
        deep = max([e["depth"] for e in pool.get("environments", [])] or [0])
        check(deep >= 2, f"A's burst made the pool deeper: {pool}")
        # A's, and the one for whoever comes first.
        wait_until(lambda: len(bwraps(d.proc.pid)) == deep + 1, 15, "A's deeper pool filled (and the shared one)")
        b = d.nobody_client()
        _, st, text = call(b, "print('B')\n")
        eq(st.get("stdout"), "B\n", text)
        # A's, the shared one back, and one of B's.
        wait_until(lambda: len(bwraps(d.proc.pid)) >= deep + 2, 15, "B's sandbox and the shared one")
        time.sleep(2)
        eq(len(bwraps(d.proc.pid)), deep + 2, f"sandboxes waiting after B's one call (A's depth {deep})")
        b.close()
        a.close()
    finally:
        d.close()


@test
def lowered_limits_get_a_fresh_sandbox():
    d = daemon()
    c = client()
    warm(c, d)
    _, st, _ = call(c, "print(1)\n", limits={"memory_mb": 1024})
    eq(st.get("prestarted", False), False, "a run with its own limits (said only when true)")
    eq(st["stdout"], "1\n", "stdout")
    c.close()


@test
def one_users_burst_leaves_another_user_a_prestarted_sandbox():
    """Sandboxes started ahead are kept per user, plus one for whoever comes first: user A's runs, two at once
    that stay, take A's own and the shared one, which goes back at once; user B's hello world, sent meanwhile,
    still gets a pre-started sandbox. (With one sandbox for everybody, A's first run took it and B's started
    cold.)"""
    if os.geteuid() != 0:
        skip("needs root, to be user A beside user B (uid 65534)")
    d = Daemon("activate", args=("--prestart=1", "--max-runs=4"))
    try:
        a = d.client()
        a.initialize()
        call(a, "pass\n")
        wait_until(lambda: len(bwraps(d.proc.pid)) >= 2, 10, "A's sandbox and the shared one started ahead")
        time.sleep(0.5)
        marks = ["mcpt-pool-" + uuid.uuid4().hex for _ in range(2)]
        rids = []
        for m in marks:
            rid = a.new_id()
            script = ("import os, sys\n"
                      f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', {m!r}])\n")
            a.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                    "params": {"name": "execute_python", "arguments": {"script": script}}})
            rids.append(rid)
        wait_until(lambda: all(processes_with(m) for m in marks), 30, "A's two runs")
        # A's two runs and the shared one back, started (the daemon hands over none still on its way into its
        # cgroups: then B's would be a fresh one).
        wait_until(lambda: len(bwraps(d.proc.pid)) >= 3, 30, "the shared sandbox started again")
        b = d.nobody_client()
        r, st, text = call(b, "print('B')\n")
        eq(st.get("stdout"), "B\n", text)
        check(st.get("prestarted") is True, f"B's run did not get a pre-started sandbox beside A's burst: {st}")
        b.close()
        for rid in rids:
            a.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
        wait_until(lambda: not any(processes_with(m) for m in marks), 10, "A's runs to end")
        a.close()
    finally:
        d.close()


@test
def prestart_zero_starts_nothing():
    d = daemon(prestart=0)
    c = client(prestart=0)
    call(c, "pass\n")
    time.sleep(0.5)
    eq(bwraps(d.proc.pid), [], "sandboxes started ahead with prestart=0")
    c.close()


@test
def reload_stops_the_waiting_sandboxes():
    d = daemon()
    c = client()
    warm(c, d)
    before = bwraps(d.proc.pid)
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: not set(before) & set(bwraps(d.proc.pid)), 5, "the waiting sandboxes to stop")
    _, st, _ = call(c, "print(2)\n")
    eq(st["stdout"], "2\n", "a run after the reload")
    c.close()


@test
def bare_environment_is_started_ahead_at_start_up():
    cache = daemon().cache_dir
    call(client(), "pass\n")   # the bare environment exists in this cache now
    d = Daemon("activate", args=("--prestart=1",), cache_dir=cache)
    try:
        wait_until(lambda: bwraps(d.proc.pid), 10, "a sandbox started ahead without any call")
        time.sleep(0.5)
        c = d.client()
        c.initialize()
        _, st, _ = call(c, "print('first')\n")
        eq(st["prestarted"], True, "the first call after start-up")
        eq(st["stdout"], "first\n", "stdout")
        c.close()
    finally:
        d.close()


@test
def collected_environment_stops_its_sandboxes():
    d = Daemon("activate", args=("--prestart=1",))
    try:
        c = d.client()
        c.initialize()
        _, st, _ = call(c, "pass\n")
        wait_until(lambda: bwraps(d.proc.pid), 10, "a pre-started sandbox")
        shutil.rmtree(os.path.join(d.cache_dir, "envs", st["environment"]["key"]))
        wait_until(lambda: not bwraps(d.proc.pid), 10, "the sandbox of the removed environment to stop")
        c.close()
    finally:
        d.close()


@test
def no_sandbox_survives_the_daemon():
    d = Daemon("activate", args=("--prestart=2",))
    try:
        c = d.client()
        c.initialize()
        call(c, "pass\n")
        pids = wait_until(lambda: len(bwraps(d.proc.pid)) >= 2 and bwraps(d.proc.pid), 10, "two sandboxes")
        tree = children(d.proc.pid)
        c.close()
        eq(d.stop(signal.SIGTERM), 0, "the daemon's exit status")

        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and [p for p in tree if running(p)]:
            time.sleep(0.05)
        left = [p for p in tree if running(p)]
        eq(left, [], f"processes of the daemon (bwrap {pids}) still alive after it exited")
    finally:
        d.close()


if __name__ == "__main__":
    main()
