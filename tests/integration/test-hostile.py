#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Hostile protocol input against one daemon, through raw sockets and the shim.

A 100 MB line, deeply nested JSON, numbers no integer holds, NUL bytes and
invalid UTF-8, duplicate ids in flight, unknown tools and methods, a value of
every wrong JSON type for every parameter of every tool (generated from
tools/list), and clients that vanish at each phase of a run (validate,
prepare, queued, running). After each the daemon still answers; nothing of a
vanished run is left; and over the whole series the daemon's descriptors,
memory, child processes and cache dir do not grow.

The tests share one daemon and run in order; the last one measures the leaks.
Needs $DAEMON, $SHIM, bubblewrap, uv and a pyenv Python >= 3.11.
"""

import json
import os
import re
import socket
import time
import uuid

from mcptest import RssGrowth, at_exit, scratch
from mcptest import (Daemon, UvLog, check, children, eq, fd_count, initialized, main, need_uv, newest_python, rss_kib,
                     sanitized, skip, test, test_pythons)
from mcptest import wait_until, processes_with
from wheels import build_wheel

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
LEGACY = "2025-11-25"
UV_DELAY = 2

_STATE = {}


def sleeper(mark, seconds=600):
    return ("import os, sys\n"
            f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep({seconds})', {mark!r}])\n")


def cache_snapshot(cache):
    top = set(os.listdir(cache))
    envs = set(os.listdir(os.path.join(cache, "envs"))) if os.path.isdir(os.path.join(cache, "envs")) else set()
    return top, envs


def settled_fd_count(pid, quiet=0.5, timeout=15):
    deadline = time.monotonic() + timeout
    last, since = fd_count(pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        n = fd_count(pid)
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return n
    return last


def daemon():
    """The one daemon of this file, warmed up, with its baseline taken."""
    d = _STATE.get("daemon")
    if d is not None:
        check(d.alive(), f"the daemon died: {d.log()}")
        return d
    need_uv()
    py = newest_python()
    wheels = scratch("mcpt-hostile-wheels-")
    for name in ("mcpt-hostile-a", "mcpt-hostile-b"):
        build_wheel(wheels, name, "1.0")
    uv = UvLog(delay=UV_DELAY, delay_on="pip install")
    at_exit(uv.close)
    d = Daemon(args=["--persistent-sandboxes", f"--uv={uv.path}", f"--find-links={wheels}", "--offline", "--max-runs=1",
                     "--tmpfs-size=32M", f"--python-search-path={test_pythons()[py]}"])
    d.uvlog, d.python = uv, py
    at_exit(d.close)
    _STATE["daemon"] = d
    c = d.client()
    c.initialize()
    st = c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}
    if not st.get("sandbox", {}).get("working"):
        skip(f"the sandbox does not work here: {st.get('sandbox')}")
    r = c.call_tool("execute_python", {"script": "print('warm')"}, timeout=60)
    eq(r["structuredContent"]["stdout"], "warm\n", "warm-up run")
    sid = c.call_tool("create_sandbox", {})["structuredContent"]["sandbox_id"]
    c.call_tool("execute_code", {"sandbox_id": sid, "code": "1"})
    c.call_tool("close_sandbox", {"sandbox_id": sid})
    c.result("tools/list")
    c.close()
    wait_until(lambda: not children(d.proc.pid), 10, "the warm-up's processes to go")
    _STATE["baseline"] = {"fds": settled_fd_count(d.proc.pid), "rss": rss_kib(d.proc.pid),
                          "cache": cache_snapshot(d.cache_dir)}
    return d


def client(d=None):
    return initialized((d or daemon()).client())


class Raw:
    """A raw connection to the daemon's socket, speaking bytes."""

    def __init__(self, d, initialize=True):
        self.s = d.raw_connect()
        self.buf = b""
        if initialize:
            self.send({"jsonrpc": "2.0", "id": "init", "method": "initialize",
                       "params": {"protocolVersion": LEGACY, "capabilities": {},
                                  "clientInfo": {"name": "hostile", "version": "1"}}})
            eq(self.read().get("id"), "init", "initialize reply")
            self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send_raw(self, data):
        self.s.sendall(data)

    def send(self, obj):
        self.s.sendall(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    def read(self, timeout=20):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no reply within {timeout}s")
            self.s.settimeout(left)
            try:
                chunk = self.s.recv(1 << 16)
            except socket.timeout:
                continue
            if not chunk:
                raise AssertionError("the daemon closed the connection")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def ping(self, what):
        rid = "ping-" + uuid.uuid4().hex[:8]
        self.send({"jsonrpc": "2.0", "id": rid, "method": "ping"})
        eq(self.read(), {"jsonrpc": "2.0", "id": rid, "result": {}}, f"ping after {what}")

    def close(self):
        self.s.close()


def error_code(reply):
    return reply.get("error", {}).get("code")


def refused(reply):
    """A tools/call refused: a JSON-RPC error or a result with isError."""
    if "error" in reply:
        return True
    return reply.get("result", {}).get("isError") is True


# --- framing and JSON ---------------------------------------------------------------

@test
def hundred_megabyte_line_is_refused_without_growing():
    d = daemon()
    pid = d.proc.pid
    r = Raw(d)
    r.ping("start")
    total = 100 * 1000 * 1000
    head = b'{"jsonrpc":"2.0","id":"big","method":"ping","params":{"pad":"'
    chunk = b"x" * (1 << 20)
    with RssGrowth(pid) as rss:
        r.send_raw(head)
        sent = len(head)
        while sent < total:
            r.send_raw(chunk)
            sent += len(chunk)
        r.send_raw(b'"}}\n')
        time.sleep(0.2)
    reply = r.read(30)
    eq(error_code(reply), INVALID_REQUEST, f"the 100 MB line: {reply}")
    eq(reply["error"].get("data", {}).get("limit"), 16 * 1024 * 1024, "data.limit (the default maximum)")
    r.ping("the 100 MB line")
    if not sanitized(pid):
        check(rss.grew < 40 * 1024, f"the daemon's RSS grew by {rss.grew} KiB while reading a 100 MB line")
    r.close()
    check(d.alive(), "the daemon died")


@test
def nested_huge_nul_and_invalid_utf8():
    d = daemon()
    r = Raw(d)
    deep = 10000
    cases = [
        ("10,000 brackets", b"[" * deep + b"]" * deep, None),
        ("10,000 open braces", b"{" * deep, None),
        ("10,000 nested params", b'{"jsonrpc":"2.0","id":"deep","method":"ping","params":{"a":' + b"[" * deep
         + b"]" * deep + b"}}", "deep"),
        ("raw NUL in the line", b'{"jsonrpc":"2.0","id":"nul","method":"ping"\x00}', None),
        ("only NULs", b"\x00" * 64, None),
        ("invalid UTF-8 in a string", b'{"jsonrpc":"2.0","id":"utf","method":"ping","params":{"x":"\xff\xfe"}}', None),
        ("overlong UTF-8", b'{"jsonrpc":"2.0","id":"ovl","method":"pin\xc0\xa7"}', None),
        ("a lone surrogate", b'{"jsonrpc":"2.0","id":"sur","method":"ping","params":{"x":"\xed\xa0\x80"}}', None),
        ("an escaped lone surrogate", b'{"jsonrpc":"2.0","id":"esc","method":"ping","params":{"x":"\\ud800"}}', None),
        ("a number with 400 digits", b'{"jsonrpc":"2.0","id":"num","method":"ping","params":{"x":1' + b"0" * 400
         + b"}}", None),
    ]
    for what, line, _ in cases:
        r.send_raw(line + b"\n")
        reply = r.read()
        ok = ("error" in reply and error_code(reply) in (PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND,
                                                         INVALID_PARAMS)) or reply.get("result") == {}
        check(ok, f"{what}: {reply}")
        r.ping(what)
    # Huge and odd ids: answered (echoed or refused), never a crash.
    for raw_id in (b"1e400", b"-1e400", str(2 ** 70).encode(), str(-2 ** 70).encode(), b"1.5", b"-0",
                   b"123456789012345678901234567890"):
        r.send_raw(b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"ping"}\n')
        reply = r.read()
        check(reply.get("result") == {} or error_code(reply) == INVALID_REQUEST, f"id {raw_id}: {reply}")
        if "result" in reply:
            check(isinstance(reply.get("id"), (int, float)), f"id {raw_id} echoed as {reply.get('id')!r}")
    r.ping("odd ids")
    # Unknown methods and tools.
    for m in ("tools/destroy", "", "rpc.discover", "../../etc/passwd", "x" * 10000):
        r.send({"jsonrpc": "2.0", "id": "m", "method": m})
        eq(error_code(r.read()), METHOD_NOT_FOUND, f"method {m[:30]!r}")
    for name in ("no_such_tool", "EXECUTE_PYTHON", "", "x" * 5000, "check_environment "):
        r.send({"jsonrpc": "2.0", "id": "t", "method": "tools/call", "params": {"name": name, "arguments": {}}})
        reply = r.read()
        check(refused(reply), f"tool {name[:30]!r}: {reply}")
    r.ping("unknown methods and tools")
    r.close()


@test
def names_with_escaped_nul_are_not_truncated():
    """A JSON string holds NUL as \\u0000: a name with one is another name, never its prefix."""
    d = daemon()
    c = client(d)
    sid = c.call_tool("create_sandbox", {})["structuredContent"]["sandbox_id"]
    problems = []
    for method in ("ping\u0000x", "tools/list\u0000garbage"):
        reply = c.request(method)
        if error_code(reply) != METHOD_NOT_FOUND:
            problems.append(f"method {method!r}: {json.dumps(reply)[:200]}")
    for name in ("check_environment\u0000zzz", "execute_python\u0000"):
        reply = c.request("tools/call", {"name": name, "arguments": {"script": "print(1)"} if "exec" in name else {}})
        if not refused(reply):
            problems.append(f"tool {name!r}: {json.dumps(reply)[:200]}")
    reply = c.request("tools/call", {"name": "execute_code", "arguments": {"sandbox_id": sid + "\u0000x", "code": "1"}})
    if not refused(reply):
        problems.append(f"sandbox_id with \\u0000 suffix: {json.dumps(reply)[:200]}")
    reply = c.request("tools/call", {"name": "validate_script", "arguments": {
        "script": "print(1)", "dependencies": ["mcpt-hostile-a\u0000 ; evil"]}})
    if not refused(reply):
        problems.append(f"dependency with \\u0000: {json.dumps(reply)[:200]}")
    c.call_tool("close_sandbox", {"sandbox_id": sid})
    eq(c.request("ping").get("result"), {}, "ping afterwards")
    c.close()
    check(not problems, "names cut at an escaped NUL: " + "; ".join(problems))


@test
def huge_timeouts_and_nul_scripts_are_refused():
    d = daemon()
    c = client(d)
    mark = "mcpt-hostile-mustnotrun-" + uuid.uuid4().hex
    script = f"print({mark!r})\n"
    for raw in (b"1e400", b"-1e400", str(2 ** 70).encode(), str(-2 ** 70).encode(), b"0", b"-1", b"1.5", b"86401",
                b"1e3"):
        rid = c.new_id()
        c.send_raw(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"execute_python",'
                   b'"arguments":{"script":%s,"timeout_seconds":%s}}}\n' % (rid, json.dumps(script).encode(), raw))
        reply = c.wait_for(rid, timeout=30)
        if raw == b"1e3":    # 1000 is an integer value in JSON terms: accepted or refused, both are fine.
            continue
        check(refused(reply), f"timeout_seconds {raw.decode()}: {json.dumps(reply)[:500]}")
        check(mark not in json.dumps(reply), f"timeout_seconds {raw.decode()}: the script ran")
    for code in ("print('a')\u0000print('b')", "\u0000"):
        r = c.call_tool("execute_python", {"script": code}, timeout=30)
        check(r.get("isError") is True, f"a script with NUL: {c.text(r)}")
    r = c.call_tool("execute_python", {"script": "print('fine')"}, timeout=30)
    eq(r["structuredContent"]["stdout"], "fine\n", "a run afterwards")
    c.close()


@test
def duplicate_id_in_flight_is_refused():
    d = daemon()
    c = client(d)
    mark1 = "mcpt-hostile-dup1-" + uuid.uuid4().hex
    mark2 = "mcpt-hostile-dup2-" + uuid.uuid4().hex
    rid = 4242
    first = ("import subprocess, sys\n"
             f"subprocess.run([sys.executable, '-c', 'import time; time.sleep(2)', {mark1!r}])\nprint('first done')\n")
    c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "execute_python", "arguments": {"script": first}}})
    wait_until(lambda: processes_with(mark1), 15, "the first call's run")
    c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "execute_python", "arguments": {"script": sleeper(mark2, 5)}}})
    dup = c.read_message(10)
    eq(dup.get("id"), rid, f"the reply to the duplicate: {dup}")
    eq(error_code(dup), INVALID_REQUEST, f"the duplicate id: {dup}")
    orig = c.read_message(30)
    eq(orig.get("id"), rid, "the first call's reply")
    eq(orig["result"]["structuredContent"]["stdout"], "first done\n", "the first call ran to its end")
    check(not processes_with(mark2), "the duplicate's script ran")
    c.expect_silence(0.5)
    c.close()


# --- wrong types -----------------------------------------------------------------------

SAMPLES = {"string": "x", "integer": 7, "number": 1.5, "boolean": True, "null": None, "array": [], "object": {}}


def wrong_values(schema):
    types = schema.get("type")
    allowed = set(types if isinstance(types, list) else [types]) if types else set(SAMPLES)
    if "number" in allowed:
        allowed.add("integer")
    out = [(t, v) for t, v in SAMPLES.items() if t not in allowed]
    if "enum" in schema:
        out.append(("enum", "not-one-of-them"))
    if "array" in allowed and "items" in schema:
        for t, v in wrong_values(schema["items"]):
            out.append((f"array of {t}", [v]))
    return out


def valid_value(name, schema, sid):
    if name == "sandbox_id":
        return sid
    t = schema.get("type")
    t = t[0] if isinstance(t, list) else t
    return {"string": "a.txt" if name == "path" else "1", "array": ["mcpt-hostile-a"], "integer": 1,
            "boolean": False, "object": {}}[t]


@test
def wrong_types_for_every_parameter():
    d = daemon()
    c = client(d)
    tools = c.result("tools/list")["tools"]
    sid = c.call_tool("create_sandbox", {})["structuredContent"]["sandbox_id"]
    sent, problems = 0, []

    def one(tool, args, what):
        nonlocal sent
        sent += 1
        reply = c.request("tools/call", {"name": tool, "arguments": args}, timeout=30)
        if "error" in reply:
            if error_code(reply) != INVALID_PARAMS:
                problems.append(f"{what}: error {reply['error']}")
        elif reply["result"].get("isError") is not True:
            problems.append(f"{what}: accepted: {json.dumps(reply['result'])[:300]}")
            st = reply["result"].get("structuredContent") or {}
            if tool == "create_sandbox" and st.get("sandbox_id"):
                c.call_tool("close_sandbox", {"sandbox_id": st["sandbox_id"]})

    for t in tools:
        schema = t["inputSchema"]
        props = schema.get("properties", {})
        base = {k: valid_value(k, props[k], sid) for k in schema.get("required", [])}
        for prop, ps in props.items():
            for wt, v in wrong_values(ps):
                one(t["name"], {**base, prop: v}, f"{t['name']}.{prop} = {wt}")
            for sub, ss in ps.get("properties", {}).items():
                for wt, v in wrong_values(ss):
                    one(t["name"], {**base, prop: {sub: v}}, f"{t['name']}.{prop}.{sub} = {wt}")
        one(t["name"], {**base, "no_such_parameter": 1}, f"{t['name']} with an unknown parameter")
        for wt, v in SAMPLES.items():
            # null arguments count as none (MCP makes them optional): fine where nothing is required.
            if wt != "object" and not (wt == "null" and not schema.get("required")):
                reply = c.request("tools/call", {"name": t["name"], "arguments": v}, timeout=30)
                sent += 1
                if not refused(reply):
                    problems.append(f"{t['name']} arguments = {wt}: accepted")
                    st = reply.get("result", {}).get("structuredContent") or {}
                    if t["name"] == "create_sandbox" and st.get("sandbox_id"):
                        c.call_tool("close_sandbox", {"sandbox_id": st["sandbox_id"]})
    for wt, v in SAMPLES.items():
        if wt != "string":
            reply = c.request("tools/call", {"name": v, "arguments": {}}, timeout=30)
            sent += 1
            if not refused(reply):
                problems.append(f"name = {wt}: accepted")
        if wt not in ("object", "null"):
            reply = c.request("tools/call", v, timeout=30)
            sent += 1
            if error_code(reply) != INVALID_PARAMS:
                problems.append(f"params = {wt}: {reply}")
    check(sent > 100, f"only {sent} wrong-typed calls generated")
    eq(c.request("ping").get("result"), {}, "ping after the wrong types")
    c.call_tool("close_sandbox", {"sandbox_id": sid})
    check(not problems, f"{len(problems)} of {sent} wrong-typed calls not refused with -32602 or isError: "
          + "; ".join(problems[:12]))
    c.close()
    check(d.alive(), "the daemon died")


# --- clients that vanish --------------------------------------------------------------

@test
def client_vanishing_at_each_phase_leaves_nothing():
    d = daemon()
    marks = {ph: f"mcpt-hostile-{ph}-" + uuid.uuid4().hex for ph in ("validate", "prepare", "queued", "running")}
    installs = len(d.uvlog.installs())
    # Validate: gone the moment the call is sent (a cold environment: the build would follow).
    cv = client(d)
    cv.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "execute_python", "arguments": {
        "script": sleeper(marks["validate"]), "dependencies": ["mcpt-hostile-a"]}}})
    cv.kill()
    # Prepare: gone while uv installs (the wrapper sleeps first).
    cp = client(d)
    cp.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "execute_python", "arguments": {
        "script": sleeper(marks["prepare"]), "dependencies": ["mcpt-hostile-b"]}}})
    wait_until(lambda: any("mcpt-hostile-b" in x for x in d.uvlog.installs(installs)), 20, "uv installing")
    cp.kill()
    # Queued: --max-runs=1 and a blocker that ends by its timeout.
    blocker_mark = "mcpt-hostile-blocker-" + uuid.uuid4().hex
    cb = client(d)
    brid = cb.new_id()
    cb.send({"jsonrpc": "2.0", "id": brid, "method": "tools/call", "params": {"name": "execute_python", "arguments": {
        "script": sleeper(blocker_mark), "timeout_seconds": 3}}})
    wait_until(lambda: processes_with(blocker_mark), 15, "the blocker")
    cq = client(d)
    cq.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "execute_python", "arguments": {
        "script": sleeper(marks["queued"])}}})
    time.sleep(0.3)
    cq.kill()
    reply = cb.wait_for(brid, timeout=30)
    eq(reply["result"]["structuredContent"]["timed_out"], True, "the blocker ended by its timeout")
    cb.close()
    # Running.
    cr = client(d)
    cr.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "execute_python", "arguments": {
        "script": sleeper(marks["running"])}}})
    wait_until(lambda: processes_with(marks["running"]), 15, "the run")
    cr.kill()
    wait_until(lambda: not processes_with(marks["running"]), 5, "the running run to end with its client")
    # The builds go on for the cache; none of the vanished runs may start when they are done.
    deadline = time.monotonic() + UV_DELAY + 3
    while time.monotonic() < deadline:
        seen = {ph: p for ph, m in marks.items() if (p := processes_with(m))}
        check(not seen, f"runs of vanished clients started: {seen}")
        time.sleep(0.05)
    wait_until(lambda: not children(d.proc.pid), 20, "the daemon to have no child process (builds finished)")
    check(not any(processes_with(m) for m in marks.values()), "a vanished client's run started after the builds")
    c = client(d)
    r = c.call_tool("execute_python", {"script": "print('next')"}, timeout=30)
    eq(r["structuredContent"]["stdout"], "next\n", "the next client is served")
    c.close()


# --- leaks -------------------------------------------------------------------------------

@test
def no_leaks_after_the_hostile_series():
    d = daemon()
    base = _STATE["baseline"]
    pid = d.proc.pid
    wait_until(lambda: not children(pid), 15, f"no child process of the idle daemon (now {children(pid)})")
    d.wait_notify("Serving 0 connections")
    fds = settled_fd_count(pid)
    eq(fds, base["fds"], f"the daemon's fd count (baseline {base['fds']}): {sorted(os.listdir(f'/proc/{pid}/fd'))}")
    rss = rss_kib(pid)
    if not sanitized(pid):
        check(rss - base["rss"] < 20 * 1024, f"the daemon's RSS grew from {base['rss']} to {rss} KiB")
    top, envs = cache_snapshot(d.cache_dir)
    eq(sorted(top - base["cache"][0]), [], "new entries in the cache dir")
    new_envs = sorted(envs - base["cache"][1])
    odd = [e for e in new_envs if not re.fullmatch(r"[0-9a-f]{64}", e)]
    eq(odd, [], f"new entries in the store that are not built environments ({new_envs})")
    check(d.alive(), "the daemon died")


if __name__ == "__main__":
    main()
