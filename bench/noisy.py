#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Noisy-neighbour benchmark: what one user's abuse costs another user.

    make bench-noisy                # full run (about six minutes)
    BENCH_QUICK=1 make bench-noisy  # smoke run (about two minutes)

A real daemon runs as root (sandboxes as leased uids) with --listen, its
socket open to every local user. User A is this program on raw connections
made as uid 64055 (BENCH_A_UID, a uid of no account); user B is uid 65534
through the real shim (setpriv), running hello world at an agent's pace. First B runs alone (the quiet baseline), then
once beside each abuse of issue 14 that A can do from outside the daemon,
then alone again. Per phase it prints B's success rate and p50/p99 latency,
the daemon's peak RSS (VmRSS sampled every 50 ms, VmHWM reset per phase) and
what A's abuse made the daemon hold (processes, store bytes, log lines).

Goals (issue 14): B's p99 within 2x of quiet, every B call succeeds, the
daemon's RSS below 64 MiB throughout. Each is printed PASS or MISS; nothing
here fails on a timing. Everything runs in a pids cgroup of its own (the
integration harness's safety net): abuses that can exhaust processes are not
run without one.

Over 800 lines, one file: each abuse is a short phase of the same run, sharing
the daemon, user B's paced client and the samplers; one program is what
`make bench-noisy` runs and what a reader follows from top to bottom.

Environment knobs:
  BENCH_QUICK=1           fewer B calls per phase, fewer environments
  BENCH_B_CALLS=20        B's calls per phase
  BENCH_B_PACE=0.5        seconds B waits between its calls
  BENCH_ONLY=a,b          run only these abuses (names as printed)
  BENCH_KEEP=1            keep the work directory (the daemon's log, with each call's
                          audit record: MCP_PREPARE_USEC, MCP_QUEUE_USEC, ...)
"""

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", "tests", "integration"))
from mcpclient import Client, MCPError, result_ok  # noqa: E402
import mcptest  # noqa: E402  (the pids safety net, the test Pythons)
from wheels import build_wheel  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
B_CALLS = int(os.environ.get("BENCH_B_CALLS") or (8 if QUICK else 20))
B_PACE = float(os.environ.get("BENCH_B_PACE") or 0.5)
KEEP = os.environ.get("BENCH_KEEP", "") not in ("", "0")
ONLY = [x for x in os.environ.get("BENCH_ONLY", "").split(",") if x]
MIB = 1 << 20
NOBODY = 65534          # user B
A_UID = int(os.environ.get("BENCH_A_UID") or 64055)    # user A: a uid of no account, nor of the sandboxes' range
STORE_BUDGET = 64 * MIB
MAX_MEMORY = 256 * MIB
BIG_ENVS = 10 if QUICK else 16
BIG_BYTES = 8 * MIB
HELLO = "print('hello')"

# Cells and scripts of user A.
SLEEPERS = r"""
import os, time
n = 1
for i in range(251):
    try:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        n += 1
    except OSError:
        break
print(n, flush=True)
time.sleep(600)
"""

MEMORY4 = r"""
import os, time
for i in range(3):
    if os.fork() == 0:
        break
try:
    hog = b"\x01" * (200 << 20)
except MemoryError:
    pass
time.sleep(600)
"""

HELLO_LOOP = r"""
import os, sys, time
fd = int(sys.argv[-1])
end = time.monotonic() + 8
while time.monotonic() < end:
    os.write(fd, b'H{"hello": 2, "python": "3.0.0"}')
"""

HUGE = r"""
import os, sys
fd = int(sys.argv[-1])
piece = b"x" * 65535
os.write(fd, b'C{"ok": true, "stdout": "')
for i in range(64 * 1024 * 1024 // len(piece)):
    os.write(fd, b"C" + piece)
os.write(fd, b'E"}')
"""

def connect_as(uid, path, timeout=5):
    """A connection to path made by uid (the peer credentials the daemon sees are taken at connect()): a child
    process drops to uid, connects and hands the socket back."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ours.close()
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            s.connect(path)
            socket.send_fds(theirs, [b"s"], [s.fileno()])
            code = 0
        finally:
            os._exit(code)
    theirs.close()
    try:
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
    finally:
        ours.close()
        os.waitpid(pid, 0)
    if not fds:
        raise ConnectionRefusedError(f"uid {uid} could not connect to {path}")
    s = socket.socket(fileno=fds[0])
    s.setblocking(True)
    return s


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


# ---- watching the daemon ----------------------------------------------------

def status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for ln in f:
                if ln.startswith(key + ":"):
                    return int(ln.split()[1])
    except OSError:
        pass
    return 0


def rss_of(pids):
    return sum(status_kib(p, "VmRSS") for p in pids)


class Watch:
    """Samples the daemon: VmRSS every 50 ms, its processes every 250 ms (count by name, total, their RSS)."""

    def __init__(self, pid):
        self.pid = pid
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.all_time_rss = 0
        self.reset()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def reset(self):
        with self.lock:
            self.peak_rss = 0
            self.peak = {"uv": 0, "du": 0, "bwrap": 0, "procs": 0}
            self.peak_child_rss = 0
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")    # VmHWM back to VmRSS
        except OSError:
            pass

    def run(self):
        n = 0
        while not self.stop.wait(0.05):
            rss = status_kib(self.pid, "VmRSS")
            with self.lock:
                self.peak_rss = max(self.peak_rss, rss)
                self.all_time_rss = max(self.all_time_rss, rss)
            n += 1
            if n % 5:
                continue
            table = mcptest.proc_table()
            kids = mcptest.descendants(self.pid, table)
            counts = {"uv": 0, "du": 0, "bwrap": 0, "procs": len(kids)}
            for k in kids:
                comm = table[k][1]
                if comm in counts:
                    counts[comm] += 1
            child_rss = rss_of(kids)
            with self.lock:
                for k, v in counts.items():
                    self.peak[k] = max(self.peak[k], v)
                self.peak_child_rss = max(self.peak_child_rss, child_rss)

    def snapshot(self):
        with self.lock:
            return {"peak_rss_kib": self.peak_rss, "hwm_kib": status_kib(self.pid, "VmHWM"),
                    "peak_processes": dict(self.peak), "peak_children_rss_kib": self.peak_child_rss}


# ---- user B ----------------------------------------------------------------

class UserB:
    """Hello world through the shim as uid 65534, one call at a time, at an agent's pace.

    B's client is a process of its own (this program with --user-b): in this one, user A's threads parse
    64 MiB replies and build 16 MiB lines while holding the GIL, which would be measured as B's latency.
    Each call's time is taken in that process; the daemon's own duration_ms of the call comes with it."""

    def __init__(self, shim, sock):
        self.argv = [sys.executable, os.path.abspath(__file__), "--user-b", "--shim", shim, "--socket", sock]
        self.p = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def call(self):
        """(ok, seconds, error text, daemon ms or None)."""
        self.p.stdin.write("call\n")
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit("user B's client process died")
        r = json.loads(line)
        return r["ok"], r["seconds"], r["error"], r["daemon_ms"]

    def run(self, n, pace, until=None, cap=300):
        """n calls, and more until the event until is set (cap seconds at most)."""
        out, end = [], time.monotonic() + cap
        while len(out) < n or (until is not None and not until.is_set() and time.monotonic() < end):
            out.append(self.call())
            time.sleep(pace)
        return out

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()


def user_b_main(shim, sock):
    """The --user-b process: a call per "call" line on stdin, a JSON line of its outcome on stdout."""
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
            shim, "--socket=" + sock, "--no-fallback", "-q"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"}
    c = None
    for line in sys.stdin:
        if line.strip() != "call":
            continue
        t0, daemon_ms = time.monotonic(), None
        try:
            if c is None:
                c = Client.spawn(argv, env=env)
                c.initialize(timeout=60)
            r = c.execute_python(HELLO, timeout=120)
            ok = result_ok(r, "hello")
            err = "" if ok else json.dumps(r)[:200]
            daemon_ms = (r.get("structuredContent") or {}).get("duration_ms")
        except (MCPError, OSError, ValueError) as e:
            ok, err = False, str(e)[:200]
            if c:
                try:
                    c.close(wait=5)
                except Exception:  # noqa: BLE001 - best effort
                    pass
                c = None
        print(json.dumps({"ok": ok, "seconds": time.monotonic() - t0, "error": err, "daemon_ms": daemon_ms}),
              flush=True)
    if c:
        c.close(wait=5)


# ---- user A ----------------------------------------------------------------

class Abuse:
    """One abuse: start() sets it going (threads of its own), stop() ends it and returns notes."""

    name = ""
    what = ""
    needs_pids_net = False
    run_to_end = False      # B goes on calling until the abuse has done all it does (at most 5 minutes)

    def __init__(self, bench):
        self.b = bench
        self.halt = threading.Event()
        self.threads = []
        self.notes = {}
        self.done = threading.Event()

    def spawn(self, fn, *args):
        t = threading.Thread(target=self.guard, args=(fn, *args), daemon=True)
        t.start()
        self.threads.append(t)

    def guard(self, fn, *args):
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - an abuse that fails is reported, not fatal
            if not self.halt.is_set():
                self.notes.setdefault("errors", []).append(f"{type(e).__name__}: {str(e)[:160]}")
        finally:
            self.done.set()

    def start(self):
        self.spawn(self.body)

    def body(self):
        raise NotImplementedError

    def stop(self):
        self.halt.set()
        self.cleanup()
        for t in self.threads:
            t.join(30)
        return self.notes

    def cleanup(self):
        pass

    def client(self):
        s = connect_as(A_UID, self.b.sock)
        c = Client(s.fileno(), s.fileno(), sock=s, name="user A")
        c.initialize(timeout=120)
        return c

    def until_halt(self, c, rid, timeout=600):
        """Wait for the reply to rid, giving up when the abuse is halted (the caller closes c)."""
        deadline = time.monotonic() + timeout
        while not self.halt.is_set() and time.monotonic() < deadline:
            try:
                return c.wait_reply(rid, timeout=0.5)
            except MCPError as e:
                if "timed out" not in str(e):
                    raise
        return None


    def collect(self, c, rids, timeout=600):
        """Replies to pipelined requests, in whatever order they come: {id: reply}, until all came or the abuse
        is halted."""
        want, got = set(rids), {}
        deadline = time.monotonic() + timeout
        while want - set(got) and not self.halt.is_set() and time.monotonic() < deadline:
            try:
                raw = c._read_line(time.monotonic() + 0.5)
            except MCPError as e:
                if "timed out" in str(e):
                    continue
                raise
            try:
                m = json.loads(raw)
            except ValueError:
                continue
            if isinstance(m, dict) and m.get("id") in want:
                got[m["id"]] = m
        return got


class RunLoop(Abuse):
    """A script run over and over, each run until it ends or the abuse stops (its connection is closed then)."""

    script = ""
    conns = []

    def body(self):
        c = self.client()
        self.conns.append(c)
        runs = 0
        while not self.halt.is_set():
            rid = c.start_request("tools/call", {"name": "execute_python", "arguments": {
                "script": self.script, "timeout_seconds": 120}})
            r = self.until_halt(c, rid)
            runs += 1
            self.notes["runs"] = runs
            if r is not None:
                st = r.get("structuredContent") or {}
                self.notes["run_ended"] = st.get("limit") or st.get("signal") or st.get("exit_code")

    def start(self):
        self.conns = []
        super().start()

    def cleanup(self):
        for c in self.conns:
            c.close()


class Sleepers(RunLoop):
    name = "252-sleepers"
    what = "252 sleeping processes in one run"
    needs_pids_net = True
    script = SLEEPERS


class Memory4(RunLoop):
    name = "4x-memory"
    what = f"4 processes x 200 MiB in a run (max-memory={MAX_MEMORY // MIB}M)"
    needs_pids_net = True
    script = MEMORY4


class Deps60(Abuse):
    name = "60-deps"
    what = "60 pipelined calls, distinct PEP 723 blocks"
    needs_pids_net = True
    run_to_end = True

    def body(self):
        c = self.client()
        self.c = c
        nonce = random.randrange(1 << 30)
        rids = []
        for i in range(60):
            script = (f"# /// script\n# dependencies = [\"noisy{i}!=0.{nonce}\"]\n# ///\n"
                      f"import noisy{i}\nprint(noisy{i}.__version__)\n")
            rids.append(c.start_request("tools/call", {"name": "execute_python", "arguments": {"script": script}}))
        got = self.collect(c, rids)
        ok = sum(1 for m in got.values() if result_ok(m.get("result")))
        self.notes.update(ok=ok, refused_or_failed=len(got) - ok, unanswered=len(rids) - len(got))
        bad = [m for m in got.values() if not result_ok(m.get("result"))]
        if bad:
            self.notes["first_failure"] = json.dumps(bad[0].get("error") or bad[0].get("result"))[:150]

    def cleanup(self):
        self.c.close()


class StoreFill(Abuse):
    name = "store-fill"
    what = f"{BIG_ENVS} distinct {BIG_BYTES // MIB} MiB environments (store-max-size={STORE_BUDGET // MIB}M)"
    run_to_end = True

    def body(self):
        c = self.client()
        self.c = c
        self.log0 = self.b.log_text_size()
        for i in range(BIG_ENVS):
            if self.halt.is_set():
                break
            script = f"# /// script\n# dependencies = [\"big{i}\"]\n# ///\nimport big{i}\n"
            rid = c.start_request("tools/call", {"name": "execute_python", "arguments": {"script": script}})
            r = self.until_halt(c, rid)
            if r is not None and not result_ok(r):
                self.notes["failed"] = self.notes.get("failed", 0) + 1
            self.notes["built"] = i + 1

    def cleanup(self):
        self.c.close()
        # Environments used seconds ago may not go yet (the store's grace after a lookup): how long the store
        # takes to come back under its budget, polled up to 60 s.
        t0 = time.monotonic()
        time.sleep(2)
        while True:
            usage = self.b.store_usage()
            if usage.get("store+uv_cache_mib", 0) <= STORE_BUDGET / MIB or time.monotonic() - t0 > 60:
                break
            time.sleep(2)
        usage["under_budget_after_s"] = round(time.monotonic() - t0) if usage.get(
            "store+uv_cache_mib", 0) <= STORE_BUDGET / MIB else "no (60 s)"
        self.notes.update(usage)
        with open(self.b.log, "rb") as f:
            f.seek(getattr(self, "log0", 0))
            logged = f.read()
        self.notes["envs_removed"] = logged.count(b"Removed environment")
        self.notes["logged_over_budget"] = logged.count(b"over its budget")


class SandboxLoop(Abuse):
    """A persistent sandbox of A's and a cell run in it over and over."""

    cell = ""

    def body(self):
        c = self.client()
        self.c = c
        r = c.call_tool("create_sandbox", {}, timeout=180)
        sid = (r.get("structuredContent") or {}).get("sandbox_id")
        if not sid:
            raise MCPError("create_sandbox: " + json.dumps(r)[:200])
        self.sid = sid
        cells = 0
        while not self.halt.is_set():
            rid = c.start_request("tools/call", {"name": "execute_code", "arguments": {
                "sandbox_id": sid, "code": self.cell, "timeout_seconds": 60}})
            r = self.until_halt(c, rid)
            if r is None:
                break
            cells += 1
            self.notes["cells"] = cells
            self.after_cell()

    def after_cell(self):
        pass

    def cleanup(self):
        self.c.close()
        # A persistent sandbox outlives its connection: close it, or it goes on into the next phase.
        sid = getattr(self, "sid", None)
        if sid:
            c = self.client()
            c.call_tool("close_sandbox", {"sandbox_id": sid}, timeout=60)
            c.close()


class HelloLoop(SandboxLoop):
    name = "hello-loop"
    what = "persistent-sandbox cell sending hello records in a loop"
    cell = HELLO_LOOP


class HugeReply(SandboxLoop):
    name = "64mib-reply"
    what = "persistent-sandbox cell sending one 64 MiB message"
    cell = HUGE


class Background(SandboxLoop):
    name = "background"
    what = "busy loop left in the background by a persistent-sandbox cell"
    cell = mcptest.BACKGROUND
    needs_pids_net = True

    def after_cell(self):
        # One cell; then measure what the idle sandbox burns.
        pids = mcptest.children(self.b.pid)
        hz = os.sysconf("SC_CLK_TCK")
        t0, c0 = time.monotonic(), mcptest.cpu_ticks(pids)
        self.halt.wait(5)
        pids = mcptest.children(self.b.pid)
        self.notes["idle_sandbox_cpu"] = f"{(mcptest.cpu_ticks(pids) - c0) / hz / (time.monotonic() - t0):.0%}"
        self.halt.wait()


class Unread(Abuse):
    name = "unread-replies"
    what = "16 connections sending tools/list batches, never reading"

    def body(self):
        batch = b"[" + b",".join(mcptest.line(mcptest.req(i, "tools/list"))[:-1] for i in range(20000)) + b"]\n"
        self.socks = []
        for _ in range(16):
            s = connect_as(A_UID, self.b.sock)
            s.sendall(mcptest.init_lines("2025-06-18", name="noisy-a"))
            s.setblocking(False)
            self.socks.append([s, 0])
        dropped = 0
        while not self.halt.is_set():
            busy = False
            for e in self.socks:
                s, sent = e
                if s is None:
                    continue
                try:
                    n = s.send(batch[sent % len(batch):])
                    e[1] += n
                    busy = True
                except BlockingIOError:
                    pass
                except OSError:
                    s.close()
                    e[0] = None
                    dropped += 1
            if not busy:
                self.halt.wait(0.05)
        self.notes["sent_mib"] = sum(e[1] for e in self.socks) // MIB
        self.notes["dropped"] = dropped

    def cleanup(self):
        for e in getattr(self, "socks", []):
            if e[0] is not None:
                e[0].close()


class UnreadLarge(Abuse):
    name = "16-unread-10mb"
    what = "16 connections, each one execute_python leaving 10 MB of files in /work/out, never reading"

    SCRIPT = ("import os\nos.makedirs('/work/out', exist_ok=True)\n"
              "for k in range(3):\n    open(f'/work/out/f{k}.bin', 'wb').write(os.urandom(3_400_000))\n")

    def body(self):
        self.socks = []
        for _ in range(16):
            s = connect_as(A_UID, self.b.sock)
            s.sendall(mcptest.init_lines("2025-06-18", name="noisy-a"))
            s.sendall(mcptest.line(mcptest.req(1, "tools/call", {"name": "execute_python",
                                                                 "arguments": {"script": self.SCRIPT}})))
            self.socks.append(s)
        self.halt.wait()
        # How many replies had begun to arrive (the initialize reply is one line; a second one, or part of it).
        begun = 0
        for s in self.socks:
            try:
                data = s.recv(1 << 16, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except OSError:
                continue
            begun += data.count(b"\n") >= 2 or (b"\n" in data and not data.endswith(b"\n"))
        self.notes["answers_begun"] = begun

    def cleanup(self):
        pass

    def stop(self):
        notes = super().stop()
        for s in getattr(self, "socks", []):
            s.close()
        return notes


class IdleConns(Abuse):
    name = "300-idle"
    what = "300 idle connections, half with a 1 MiB half-sent line, reopened when dropped"

    def body(self):
        self.socks = {}
        opened = refused = 0
        half = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"y" * MIB
        while not self.halt.is_set():
            for i in range(300):
                s = self.socks.get(i)
                if s is not None:
                    try:
                        if s.recv(4096, socket.MSG_DONTWAIT) == b"":
                            raise ConnectionResetError
                        refused += 1            # an error line: refused over a cap
                        raise ConnectionResetError
                    except BlockingIOError:
                        continue
                    except OSError:
                        s.close()
                        self.socks.pop(i)
                try:
                    s = connect_as(A_UID, self.b.sock, timeout=1)
                except OSError:
                    continue
                s.setblocking(False)
                try:
                    if i % 2:
                        s.send(half)
                except OSError:
                    s.close()
                    continue
                self.socks[i] = s
                opened += 1
            self.halt.wait(1)
        self.notes.update(opened=opened, refused=refused)

    def cleanup(self):
        time.sleep(0.1)
        for s in list(getattr(self, "socks", {}).values()):
            s.close()


class TinyJson(Abuse):
    name = "16mib-tiny-json"
    what = "requests of ~16 MiB of tiny JSON values, one after another"

    def body(self):
        n = (self.b.max_message - 4096) // 2
        head = b'{"jsonrpc":"2.0","id":"huge","method":"tools/call","params":{"name":"validate_script",' \
               b'"arguments":{"script":"print(1)","dependencies":[0'
        payload = head + b",0" * (n - 1) + b"]}}}\n"
        sent = 0
        answers = {}
        while not self.halt.is_set():
            s = connect_as(A_UID, self.b.sock)
            s.sendall(mcptest.init_lines("2025-06-18", name="noisy-a"))
            s.sendall(payload)
            sent += 1
            s.settimeout(60)
            buf = b""
            try:
                while buf.count(b"\n") < 2:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
            except OSError:
                pass
            s.close()
            last = buf.split(b"\n")[1] if buf.count(b"\n") >= 2 else b"(closed)"
            key = re.sub(rb"[0-9]+", b"N", last)[:120].decode(errors="replace")
            answers[key] = answers.get(key, 0) + 1
        self.notes.update(requests=sent, answers=answers)


class LongLines(Abuse):
    name = "16mib-lines"
    what = "requests of ~16 MiB (a ping with one long string), one after another on two connections"

    def body(self):
        for _ in range(2):
            self.spawn(self.flood)
        self.halt.wait()

    def flood(self):
        payload = b'{"jsonrpc":"2.0","id":"long","method":"ping","params":{"x":"' + \
            b"y" * (self.b.max_message - 4096) + b'"}}\n'
        while not self.halt.is_set():
            s = connect_as(A_UID, self.b.sock)
            s.sendall(mcptest.init_lines("2025-06-18", name="noisy-a"))
            s.settimeout(60)
            lines, sent = 0, 0
            try:
                while not self.halt.is_set():
                    s.sendall(payload)
                    sent += 1
                    while lines < 1 + sent:     # the initialize reply, then one a request
                        chunk = s.recv(65536)
                        if not chunk:
                            raise ConnectionResetError
                        lines += chunk.count(b"\n")
                    self.notes["requests"] = self.notes.get("requests", 0) + 1
            except OSError:
                # Closed over max-input-buffer-per-user (both lines at once): again, on a new connection.
                self.notes["closed"] = self.notes.get("closed", 0) + 1
            finally:
                s.close()


class CheckEnv(Abuse):
    name = "60-check-env"
    what = "60 pipelined check_environment calls, over and over"
    needs_pids_net = True

    def body(self):
        c = self.client()
        self.c = c
        rounds = 0
        while not self.halt.is_set():
            rids = [c.start_request("tools/call", {"name": "check_environment", "arguments": {}}) for _ in range(60)]
            if len(self.collect(c, rids)) == len(rids):
                rounds += 1
                self.notes["rounds"] = rounds

    def cleanup(self):
        self.c.close()


ABUSES = [Sleepers, Deps60, HelloLoop, HugeReply, Unread, UnreadLarge, IdleConns, TinyJson, LongLines, StoreFill,
          CheckEnv, Background, Memory4]


# ---- the bench -------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.work = tempfile.mkdtemp(prefix="noisy-", dir=args.work)
        os.chmod(self.work, 0o755)        # B (uid 65534) reaches the socket; sandbox uids the cache
        self.cache = os.path.join(self.work, "cache")
        self.wheels = os.path.join(self.work, "wheels")
        self.sock = os.path.join(self.work, "mcp.sock")
        self.log = os.path.join(self.work, "daemon.log")
        self.proc = None
        self.pid = None
        self.max_message = 16 * MIB

    def make_wheels(self):
        for i in range(60):
            build_wheel(self.wheels, f"noisy{i}", "1.0")
        rnd = random.Random(14)
        for i in range(BIG_ENVS):
            blob = rnd.randbytes(BIG_BYTES)
            build_wheel(self.wheels, f"big{i}", "1.0", extra_files=[(f"big{i}/blob.bin", blob)])

    def daemon_argv(self):
        conf = os.path.join(self.work, "empty.conf")
        open(conf, "w").close()
        argv = [self.args.daemon, "--config=" + conf, "--cache-dir=" + self.cache, "--log-level=info",
                "--find-links=" + self.wheels, "--offline", f"--store-max-size={STORE_BUDGET}",
                f"--max-memory={MAX_MEMORY}", "--persistent-sandboxes"]
        pythons = mcptest.test_pythons()
        if pythons:
            argv.append("--python-search-path=" + " ".join(pythons[m] for m in sorted(pythons)))
        if self.args.uv:
            argv.append("--uv=" + self.args.uv)
        return argv

    def start(self):
        argv = self.daemon_argv()
        out = subprocess.run(argv + ["--check-config"], capture_output=True, text=True)
        m = re.search(r"^max-message-size = (\d+)", out.stdout, re.M)
        if m:
            self.max_message = int(m.group(1))
        self.config = out.stdout
        self.logf = open(self.log, "wb")
        self.proc = subprocess.Popen(argv + ["--listen=" + self.sock], stdin=subprocess.DEVNULL,
                                     stdout=self.logf, stderr=self.logf)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 30
        while True:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.sock)
                s.close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the daemon did not start: " + open(self.log).read()[-2000:])
                time.sleep(0.05)
        os.chmod(self.sock, 0o666)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_lines(self):
        try:
            with open(self.log, "rb") as f:
                return f.read().count(b"\n")
        except OSError:
            return 0

    def log_text_size(self):
        try:
            return os.path.getsize(self.log)
        except OSError:
            return 0

    def store_usage(self):
        try:
            c = Client.connect(self.sock)
            c.initialize(timeout=60)
            st = (c.call_tool("check_environment", {}, timeout=120).get("structuredContent") or {}).get("store", {})
            c.close()
        except (MCPError, OSError) as e:
            return {"store": f"unknown ({e})"}
        used = (st.get("store_bytes") or 0) + (st.get("uv_cache_bytes") or 0)
        try:
            envs = len([n for n in os.listdir(os.path.join(self.cache, "envs")) if not n.startswith(".")])
        except OSError:
            envs = "?"
        return {"store+uv_cache_mib": round(used / MIB, 1), "uv_cache_mib": round((st.get("uv_cache_bytes") or 0) / MIB, 1),
                "budget_mib": STORE_BUDGET // MIB, "environments_left": envs}


def daemon_cpu(pid):
    """Seconds of CPU the daemon's process itself has used (user + system)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase(bench, watch, b, abuse_cls):
    """B's calls beside one abuse (or alone, abuse_cls None); a result row."""
    abuse = abuse_cls(bench) if abuse_cls else None
    watch.reset()
    log0 = bench.log_lines()
    cpu0, t0 = daemon_cpu(bench.pid), time.monotonic()
    if abuse:
        abuse.start()
        time.sleep(2)   # let it ramp up
    calls = b.run(B_CALLS, B_PACE, abuse.done if abuse and abuse.run_to_end else None)
    notes = abuse.stop() if abuse else {}
    snap = watch.snapshot()
    snap["log_lines"] = bench.log_lines() - log0
    # The daemon's own CPU (its event loop: children not counted), less noisy than B's latency on a busy machine.
    cpu = daemon_cpu(bench.pid) - cpu0
    notes["daemon_cpu"] = f"{cpu / (time.monotonic() - t0):.0%}"
    a_calls = notes.get("cells") or notes.get("requests") or 60 * notes.get("rounds", 0)
    if a_calls:
        notes["daemon_ms_per_a_call"] = round(1000 * cpu / a_calls, 1)
    lat = [t for ok, t, _, _ in calls if ok]
    errs = [e for ok, _, e, _ in calls if not ok]
    daemon_ms = [d for ok, _, _, d in calls if ok and d is not None]
    return {"name": abuse.name if abuse else "quiet", "what": abuse.what if abuse else "B alone",
            "calls": len(calls), "ok": len(lat), "latencies": lat, "p50": pct(lat, 50), "p99": pct(lat, 99),
            "daemon_ms": daemon_ms,
            "errors": errs[:3], "notes": notes, **snap, "daemon_alive": bench.proc.poll() is None}


def fmt_row(r, quiet_p99):
    ratio = r["p99"] / quiet_p99 if quiet_p99 and r["ok"] else float("nan")
    dms = pct(r.get("daemon_ms") or [], 99)
    return (f"| {r['name']} | {r['ok']}/{r['calls']} | {r['p50'] * 1000:.0f} | {r['p99'] * 1000:.0f} | "
            f"{ratio:.1f}x | {dms:.0f} | {max(r['peak_rss_kib'], r['hwm_kib']) / 1024:.1f} | "
            f"{r['peak_children_rss_kib'] // 1024} | "
            f"{r['peak_processes']['procs']}/{r['peak_processes']['uv']}/{r['peak_processes']['du']} | "
            f"{r['log_lines']} | "
            f"{notes_text(r)} |")


def notes_text(r):
    n = dict(r["notes"])
    parts = [f"{k}={v}" for k, v in n.items()]
    if r["errors"]:
        parts.append("B: " + r["errors"][0][:100])
    if not r["daemon_alive"]:
        parts.append("DAEMON DIED")
    return "; ".join(parts).replace("|", "/") or "-"


def git_commit():
    try:
        out = subprocess.run(["git", "-C", HERE, "describe", "--always", "--dirty"], capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def machine():
    cpus = os.cpu_count()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    with open("/proc/meminfo") as f:
        total = int(f.readline().split()[1]) // 1024
    try:
        with open("/etc/debian_version") as f:
            deb = "Debian " + f.read().strip()
    except OSError:
        deb = platform.system()
    return f"{deb}, kernel {platform.release()}, {cpus} CPUs, {total} MiB RAM, load average {load} at the start"


def quiet_p99(rows):
    """The quiet reference: B alone, before and after the abuses together."""
    lat = [t for r in rows if r["name"].startswith("quiet") for t in r["latencies"]]
    return pct(lat, 99)


def report(rows, commit, mach, cgroups, skipped):
    quiet = {"p99": quiet_p99(rows)}
    lines = [
        "## Noisy neighbour",
        "",
        f"`make bench-noisy` ({'BENCH_QUICK=1, ' if QUICK else ''}{B_CALLS} B calls per phase, {B_PACE} s apart), "
        f"measured on commit `{commit}`.",
        f"Machine: {mach}; shared with other jobs, so timings are noisy. Daemon as root, {cgroups}; defaults but "
        f"`--offline --find-links` (local wheels), `--store-max-size={STORE_BUDGET // MIB}M`, "
        f"`--max-memory={MAX_MEMORY // MIB}M`.",
        f"User A (uid {A_UID}, no account) abuses on raw connections; user B (uid 65534) runs `print('hello')` "
        "through the shim. "
        "Latency in ms, timed by B's client (a process of its own); p99 compared with B alone before and after "
        "the abuses, pooled; daemon p99: the same calls' `duration_ms` as the daemon reports it (from the "
        "tool call's start to the run's end), so the rest is parsing, the reply and the round trip through the shim. Daemon MiB: its peak "
        "(VmRSS every 50 ms, and VmHWM reset per phase); children MiB: the peak sum of VmRSS of all its "
        "descendants (sandboxes, pool, builds; shared pages count once per process); procs: its descendants at the peak (all/uv/du); log lines: "
        "what it logged (info) during the phase.",
        "",
        "| A's abuse | B ok | B p50 | B p99 | p99 vs quiet | daemon p99 | daemon MiB | children MiB | procs all/uv/du | "
        "log lines | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(fmt_row(r, quiet["p99"]))
    for name in skipped:
        lines.append(f"| {name} | not run: no pids cgroup for the safety net | | | | | | | | | |")
    peak = max(max(r["peak_rss_kib"], r["hwm_kib"]) for r in rows) / 1024
    all_ok = all(r["ok"] == r["calls"] for r in rows)
    worst = max((r["p99"] / quiet["p99"] for r in rows[1:] if r["ok"]), default=float("nan"))
    misses = [r["name"] for r in rows[1:] if not r["ok"] or r["p99"] > 2 * quiet["p99"]]
    lines += [
        "",
        "Goals (issue 14):",
        "",
        f"- B's p99 within 2x of quiet: {'PASS' if not misses else 'MISS'} (worst {worst:.1f}x"
        f"{'; over: ' + ', '.join(misses) if misses else ''})",
        f"- every B call succeeds: {'PASS' if all_ok else 'MISS'} "
        f"({sum(r['ok'] for r in rows)}/{sum(r['calls'] for r in rows)})",
        f"- daemon RSS < 64 MiB throughout: {'PASS' if peak < 64 else 'MISS'} (peak {peak:.1f} MiB)",
        "",
    ]
    return "\n".join(lines)


def write_results(path, section):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        text = "# Benchmark results\n"
    m = re.search(r"^## Noisy neighbour\n.*?(?=^## |\Z)", text, re.M | re.S)
    if m:
        text = text[:m.start()] + section + "\n" + text[m.end():]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text.rstrip("\n") + "\n")


def main():
    if "--user-b" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--user-b", action="store_true")
        ap.add_argument("--shim", required=True)
        ap.add_argument("--socket", required=True)
        a = ap.parse_args()
        return user_b_main(a.shim, a.socket)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", help="directory of RESULTS.md and results/ (default: print only)")
    ap.add_argument("--uv", default=shutil.which("uv"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench-noisy runs the daemon as root and user B as uid 65534: run it as root")
    for tool in ("setpriv", "bwrap"):
        if not shutil.which(tool):
            raise SystemExit(f"bench-noisy needs {tool}")
    os.makedirs(args.work, exist_ok=True)
    os.chmod(args.work, 0o755)
    mach = machine()
    net = mcptest.pids_safety_net(max_pids=4000)
    cgroups = f"in a pids cgroup (pids.max 4000, {net})" if net else "WITHOUT a pids safety net"
    bench = Bench(args)
    print(f"# work dir {bench.work}; building wheels", flush=True)
    bench.make_wheels()
    bench.start()
    watch = Watch(bench.pid)
    b = UserB(args.shim, bench.sock)
    rows, skipped = [], []
    try:
        # Warm up: the bare environment and B's session, not measured.
        for _ in range(5):
            b.call()
            time.sleep(B_PACE)
        chosen = [a for a in ABUSES if not ONLY or a.name in ONLY]
        for cls in [None, *chosen, None]:
            if cls and cls.needs_pids_net and not net:
                skipped.append(cls.name)
                continue
            print(f"# {cls.name if cls else 'quiet'}: {cls.what if cls else 'B alone'}", flush=True)
            r = phase(bench, watch, b, cls)
            if not cls and rows:
                r["name"] = "quiet (after)"
            rows.append(r)
            print("  " + fmt_row(r, quiet_p99(rows)), flush=True)
            if bench.proc.poll() is not None:
                print("# the daemon died; log tail:\n" + open(bench.log, errors="replace").read()[-3000:])
                break
            time.sleep(1)
    finally:
        b.close()
        watch.stop.set()
        bench.stop()
    commit = git_commit()
    section = report(rows, commit, mach, "sandboxes as leased uids, cgroups per run (v1)" if net else cgroups,
                     skipped)
    print()
    print(section)
    if args.out:
        os.makedirs(os.path.join(args.out, "results"), exist_ok=True)
        with open(os.path.join(args.out, "results", "noisy.json"), "w") as f:
            json.dump({"commit": commit, "machine": mach, "quick": QUICK, "b_calls": B_CALLS, "rows": rows}, f,
                      indent=1, default=str)
        write_results(os.path.join(args.out, "RESULTS.md"), section)
    if KEEP:
        print(f"# kept {bench.work} (the daemon's log: {bench.log})")
    else:
        shutil.rmtree(bench.work, ignore_errors=True)


if __name__ == "__main__":
    main()
