#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The audit record of every run: who called (SO_PEERCRED), the script's
sha256, the environment, the verdict, the limit hit and the durations.

On stderr the record is one line, "<6>MESSAGE KEY=value ..."; when stderr is
journald's stream (JOURNAL_STREAM), it goes to the journal natively. The
journal is faked here: in a private mount namespace, a datagram socket of the
test's stands at /run/systemd/journal/socket, where libsystemd sends to, and
the test decodes journald's native protocol.

Needs $DAEMON, $SHIM, bubblewrap, uv and Python 3.12; the journal test and the
test of another user's record need root.
"""

import hashlib
import os
import shlex
import shutil
import socket
import struct
import threading
import time
import uuid

from mcptest import at_exit, scratch
from mcptest import NOBODY, Daemon, check, eq, main, need_pythons, need_uv, processes_with, skip, test
from mcptest import wait_until
from wheels import build_wheel

MESSAGE_ID = "3322a7dce43f4645a947f20b87705261"
_STATE = {}


def wheel_dir():
    d = _STATE.get("wheels")
    if not d:
        d = scratch("mcptest-runlog-wheels-")
        os.chmod(d, 0o755)
        build_wheel(d, "runlog-tiny", "1.0")
        _STATE["wheels"] = d
    return d


def daemon_args():
    need_pythons("3.12")
    need_uv()
    return [f"--find-links={wheel_dir()}", "--offline", "--persistent-sandboxes"]


def shared_daemon():
    d = _STATE.get("daemon")
    if d is None or not d.alive():
        d = Daemon("activate", args=daemon_args())
        at_exit(d.close)
        _STATE["daemon"] = d
    return d


def client(d):
    c = d.client()
    c.initialize()
    at_exit(lambda: c.proc.poll() is None and c.kill())
    return c


def unique(script):
    """The script with a comment that makes its hash this test's own."""
    return f"# {uuid.uuid4().hex}\n{script}"


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def parse_line(line):
    """A record on stderr: (message, {field: value})."""
    i = line.find(" MCP_TOOL=")
    check(i > 0 and line.startswith("<6>"), f"a record line: {line!r}")
    fields = {}
    for word in shlex.split(line[i + 1:]):
        k, _, v = word.partition("=")
        fields[k] = v.replace("\\n", "\n")
    return line[3:i], fields


def records_on_stderr(d):
    return [parse_line(l) for l in d.log_full().splitlines() if " MCP_TOOL=" in l]


def record_for(d, script, timeout=10):
    """The one stderr record of the run of script."""
    h = sha256(script)

    def find():
        found = [r for r in records_on_stderr(d) if r[1].get("MCP_SCRIPT_SHA256") == h]
        return found or None
    found = wait_until(find, timeout, f"the record of script {h}")
    eq(len(found), 1, f"records of script {h}")
    return found[0]


def check_common(fields, script, c, tool="execute_python"):
    eq(fields.get("MCP_TOOL"), tool, "MCP_TOOL")
    eq(fields.get("MCP_PEER_UID"), str(os.getuid()), "MCP_PEER_UID: the caller's uid")
    eq(fields.get("MCP_PEER_PID"), str(c.proc.pid), "MCP_PEER_PID: the shim's pid, the socket's peer")
    eq(fields.get("MCP_SCRIPT_SHA256"), sha256(script), "MCP_SCRIPT_SHA256")
    eq(fields.get("MCP_SCRIPT_BYTES"), str(len(script.encode())), "MCP_SCRIPT_BYTES")
    for k in ("MCP_DURATION_USEC", "MCP_TIMEOUT_USEC"):
        check(fields.get(k, "").isdigit(), f"{k} is a number: {fields}")


def run(c, script, **args):
    r = c.call_tool("execute_python", {"script": script, "python_version": "3.12", **args})
    return r, r["structuredContent"]


@test
def each_verdict_is_recorded_with_its_fields():
    d = shared_daemon()
    c = client(d)
    cases = [
        # script, arguments, verdict, exit code, signal, limit
        ("print('hi')\n", {}, "ok", "0", None, None),
        ("import sys\nsys.exit(3)\n", {}, "failed", "3", None, None),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", {}, "killed", "-9", "SIGKILL", None),
        ("import time\ntime.sleep(30)\n", {"timeout_seconds": 1}, "timeout", "-9", "SIGKILL", "timeout"),
        # MemoryError under RLIMIT_AS; with a cgroup, the OOM killer's SIGKILL.
        ("x = b'x' * (300 << 20)\n", {"limits": {"memory_mb": 100}}, "limit", "1", None, "memory"),
    ]
    for body, args, verdict, code, sig, limit in cases:
        script = unique(body)
        r, st = run(c, script, **args)
        if limit == "memory" and st["limits"]["mechanism"] == "cgroup":
            code, sig = "-9", "SIGKILL"
        msg, f = record_for(d, script)
        check_common(f, script, c)
        what = f"record of {body!r}"
        eq(f.get("MCP_VERDICT"), verdict, f"{what}: MCP_VERDICT")
        eq(f.get("MCP_EXIT_CODE"), code, f"{what}: MCP_EXIT_CODE")
        eq(str(st["exit_code"]), code, f"{what}: the result's exit code")
        eq(st.get("signal"), sig, f"{what}: the result's signal")
        eq(f.get("MCP_SIGNAL"), sig, f"{what}: MCP_SIGNAL")
        eq(f.get("MCP_LIMIT"), limit, f"{what}: MCP_LIMIT")
        eq(st.get("limit"), limit, f"{what}: the result's limit")
        eq(f.get("MCP_ENV_KEY"), st["environment"]["key"], f"{what}: MCP_ENV_KEY")
        eq(f.get("MCP_PYTHON"), st["python"], f"{what}: MCP_PYTHON")
        eq(f.get("MCP_SANDBOXED"), "yes", f"{what}: MCP_SANDBOXED")
        eq(f.get("MCP_FAILED_PHASE"), None, f"{what}: MCP_FAILED_PHASE")
        for k in ("MCP_PREPARE_USEC", "MCP_QUEUE_USEC", "MCP_RUN_USEC"):
            check(f.get(k, "").isdigit(), f"{what}: {k} is a number: {f}")
        check(int(f["MCP_RUN_USEC"]) <= int(f["MCP_DURATION_USEC"]), f"{what}: run time within the duration: {f}")
        # The result names the timeout only when it was hit (or lowered); else it is the default, 30 s.
        eq(f["MCP_TIMEOUT_USEC"], str(st.get("timeout_seconds", args.get("timeout_seconds", 30)) * 1000000),
           f"{what}: MCP_TIMEOUT_USEC")
        check(f"uid {os.getuid()}" in msg and verdict in msg, f"{what}: the message says who and how: {msg!r}")
    c.close()


@test
def a_run_that_did_not_run_says_why():
    d = shared_daemon()
    c = client(d)
    script = unique("# /// script\n# dependencies = [1]\n# ///\nprint('never')\n")
    r, st = run(c, script)
    check(r.get("isError"), "invalid metadata is an error")
    _, f = record_for(d, script)
    check_common(f, script, c)
    eq(f.get("MCP_VERDICT"), "error", "MCP_VERDICT")
    eq(f.get("MCP_FAILED_PHASE"), "validate", "MCP_FAILED_PHASE")
    eq(f.get("MCP_ERROR"), st["error"], "MCP_ERROR: the error the caller got")
    eq(f.get("MCP_EXIT_CODE"), None, "no exit code for a script that never ran")

    # A requirement nothing provides fails in the prepare phase, with uv's reason.
    script = unique("# /// script\n# dependencies = ['runlog-absent']\n# ///\n")
    r, st = run(c, script)
    _, f = record_for(d, script, timeout=60)
    eq((f.get("MCP_VERDICT"), f.get("MCP_FAILED_PHASE")), ("error", "prepare"), "a dependency that cannot be found")
    check("runlog-absent" in f.get("MCP_ERROR", ""), f"MCP_ERROR names the requirement: {f}")
    c.close()


@test
def the_environment_a_run_used_is_named():
    d = shared_daemon()
    c = client(d)
    first = unique("# /// script\n# dependencies = ['runlog-tiny']\n# ///\nimport runlog_tiny\n")
    r, st = run(c, first)
    check(not r.get("isError"), f"run with a dependency: {c.text(r)}")
    _, f = record_for(d, first)
    eq(f.get("MCP_ENV_KEY"), st["environment"]["key"], "MCP_ENV_KEY")
    eq(f.get("MCP_ENV_BUILT"), "yes", "the first run built its environment")
    second = unique("# /// script\n# dependencies = ['runlog-tiny']\n# ///\nimport runlog_tiny\n")
    r, st2 = run(c, second)
    _, f2 = record_for(d, second)
    eq(f2.get("MCP_ENV_KEY"), f["MCP_ENV_KEY"], "the same requirements, the same environment")
    eq(f2.get("MCP_ENV_BUILT"), "no", "the second run found it ready")
    check(int(f2["MCP_PREPARE_USEC"]) < int(f["MCP_PREPARE_USEC"]),
          f"preparing a warm environment took less than building it: {f2['MCP_PREPARE_USEC']} {f['MCP_PREPARE_USEC']}")
    c.close()


@test
def cancelled_runs_are_recorded_waiting_or_running():
    with Daemon("activate", args=[*daemon_args(), "--max-runs=1"]) as d:
        c = client(d)
        marks = ["mcpt-runlog-" + uuid.uuid4().hex for _ in range(2)]
        scripts = [unique("import os, sys\n"
                          f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', {m!r}])\n")
                   for m in marks]
        rids = []
        for i, script in enumerate(scripts):
            rid = c.new_id()
            c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                    "params": {"name": "execute_python", "arguments": {"script": script, "python_version": "3.12"}}})
            rids.append(rid)
            if i == 0:
                wait_until(lambda: processes_with(marks[0]), 30, "the first run")
        # The second waits for the only slot, from before the queue shows it for at least the sleep.
        wait_until(lambda: c.call_tool("check_environment", {}, timeout=60)["structuredContent"]["runs"]["queued"] == 1,
                   30, "the second run in the queue")
        time.sleep(0.5)
        check(not processes_with(marks[1]), "the second run started beside the first with max-runs=1")
        # The waiting one first, then the running one.
        waited = {}
        for rid, script, phase in ((rids[1], scripts[1], "queue"), (rids[0], scripts[0], "run")):
            c.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
            _, f = record_for(d, script)
            check_common(f, script, c)
            eq((f.get("MCP_VERDICT"), f.get("MCP_FAILED_PHASE")), ("cancelled", phase), "verdict and phase")
            check(f.get("MCP_QUEUE_USEC", "").isdigit(), f"MCP_QUEUE_USEC: {f}")
            waited[phase] = int(f["MCP_QUEUE_USEC"])
        check(waited["queue"] >= 500000, f"the second run's wait is counted: {waited}")   # at least the sleep
        check(waited["run"] < waited["queue"], f"the first run did not wait as long: {waited}")
        wait_until(lambda: not any(processes_with(m) for m in marks), 5, "the cancelled runs to end")
        c.close()


@test
def cells_of_a_persistent_sandbox_are_recorded():
    d = shared_daemon()
    c = client(d)
    r = c.call_tool("create_sandbox", {"python_version": "3.12"}, timeout=120)
    check(not r.get("isError"), f"create_sandbox: {c.text(r)}")
    sid = r["structuredContent"]["sandbox_id"]
    for code, verdict in ((unique("x = 6 * 7\nprint(x)\n"), "ok"), (unique("1 / 0\n"), "failed")):
        c.call_tool("execute_code", {"sandbox_id": sid, "code": code}, timeout=60)
        _, f = record_for(d, code)
        check_common(f, code, c, tool="execute_code")
        eq(f.get("MCP_VERDICT"), verdict, f"MCP_VERDICT of {code!r}")
        eq(f.get("MCP_SANDBOX_ID"), sid, "MCP_SANDBOX_ID")
    c.call_tool("close_sandbox", {"sandbox_id": sid})
    c.close()


@test
def another_users_runs_carry_their_uid():
    d = shared_daemon()
    c = d.nobody_client()
    script = unique("print('as nobody')\n")
    r, _ = run(c, script)
    check(not r.get("isError"), c.text(r))
    msg, f = record_for(d, script)
    eq(f.get("MCP_PEER_UID"), str(NOBODY), "MCP_PEER_UID of a client running as nobody")
    eq(f.get("MCP_PEER_PID"), str(c.proc.pid), "MCP_PEER_PID")
    check(f"uid {NOBODY}" in msg, msg)
    c.close()


@test
def nothing_is_recorded_below_the_log_level():
    with Daemon("activate", args=[*daemon_args(), "--log-level=notice"]) as d:
        c = d.client()
        c.initialize()
        script = unique("print('quiet')\n")
        r, _ = run(c, script)
        check(not r.get("isError"), c.text(r))
        c.close()
        check(" MCP_TOOL=" not in d.log_full(), f"a record at log-level=notice: {d.log_full()[-2000:]}")


# --- the journal -----------------------------------------------------------------


class FakeJournal:
    """A datagram socket that takes journald's native protocol: KEY=value lines, or KEY, a newline, a 64-bit
    little-endian length and the value, for values with newlines."""

    def __init__(self):
        self.dir = scratch("mcptest-journal-")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(os.path.join(self.dir, "socket"))
        self.sock.settimeout(0.1)
        self.entries = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        at_exit(self.close)

    @staticmethod
    def decode(data):
        fields = {}
        i = 0
        while i < len(data):
            nl = data.index(b"\n", i)
            line = data[i:nl]
            if b"=" in line:
                k, _, v = line.partition(b"=")
                i = nl + 1
            else:
                k = line
                (n,) = struct.unpack("<Q", data[nl + 1:nl + 9])
                v = data[nl + 9:nl + 9 + n]
                check(data[nl + 9 + n:nl + 10 + n] == b"\n", "a binary field ends with a newline")
                i = nl + 10 + n
            fields[k.decode()] = v.decode(errors="replace")
        return fields

    def _read(self):
        while not self._stop.is_set():
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 1 << 20, 4)
            except TimeoutError:
                continue
            except OSError:
                return
            if fds:   # a large entry comes as a memfd
                with os.fdopen(fds[0], "rb") as f:
                    data = f.read()
            self.entries.append(self.decode(data))

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()


@test
def records_go_to_the_journal_with_their_fields():
    if os.getuid() != 0:
        skip("needs root for a private mount namespace with a journal socket of the test's")
    if not shutil.which("unshare"):
        skip("unshare is not installed")
    args = daemon_args()
    j = FakeJournal()
    # The daemon in a mount namespace of its own, /run/systemd/journal there the test's directory. /run/systemd
    # may not exist (no systemd): then a tmpfs on /run makes room.
    wrapper = os.path.join(scratch("mcptest-journal-wrap-"), "in-ns")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nset -e\n"
                "if [ ! -d /run/systemd/journal ]; then\n"
                "  if [ -d /run/systemd ]; then mount -t tmpfs tmpfs /run/systemd; else mount -t tmpfs tmpfs /run; fi\n"
                "  mkdir -p /run/systemd/journal\n"
                "fi\n"
                f"mount --bind {shlex.quote(j.dir)} /run/systemd/journal\n"
                'exec "$@"\n')
    os.chmod(wrapper, 0o755)
    with Daemon("listen", args=args, wrap=["unshare", "--mount", "--propagation=private", wrapper],
                journal_stream=True) as d:
        c = d.client()
        c.initialize()
        script = unique("import sys\nsys.exit(5)\n")
        r, st = run(c, script)
        bad = unique("# /// script\n# dependencies = [1]\n# ///\n")
        run(c, bad)
        h = sha256(script)
        e = wait_until(lambda: next((e for e in j.entries if e.get("MCP_SCRIPT_SHA256") == h), None), 10,
                       "the run's journal entry")
        eq(e.get("MESSAGE_ID"), MESSAGE_ID, "MESSAGE_ID")
        eq(e.get("PRIORITY"), "6", "PRIORITY: info")
        eq(e.get("SYSLOG_IDENTIFIER"), "mcp-python-sandboxd", "SYSLOG_IDENTIFIER")
        check("exit code 5" in e.get("MESSAGE", ""), f"MESSAGE: {e}")
        check_common(e, script, c)
        eq((e.get("MCP_VERDICT"), e.get("MCP_EXIT_CODE")), ("failed", "5"), "verdict and exit code")
        eq(e.get("MCP_ENV_KEY"), st["environment"]["key"], "MCP_ENV_KEY")
        # A value with newlines and quotes arrives whole.
        hb = sha256(bad)
        e = wait_until(lambda: next((e for e in j.entries if e.get("MCP_SCRIPT_SHA256") == hb), None), 10,
                       "the failed call's journal entry")
        eq(e.get("MCP_VERDICT"), "error", "MCP_VERDICT of invalid metadata")
        check(e.get("MCP_ERROR"), f"MCP_ERROR: {e}")
        c.close()
        # In the journal, not also on stderr: the daemon would log every run twice.
        check(" MCP_TOOL=" not in d.log_full(), f"a record on stderr too: {d.log_full()[-2000:]}")


if __name__ == "__main__":
    main()
