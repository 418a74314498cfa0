#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test of the daemon, mcp-python-sandboxd, through the real shim.

Start modes (LISTEN_FDS, systemd-socket-activate, --listen, the shim's --stdio
fallback), both protocol eras, version negotiation, JSON-RPC error codes on
the wire, framing limits, concurrency and hostile clients, the daemon's
lifecycle (sd_notify, signals, idle exit, --listen safety, connection limit)
and what the shim does with the daemon behind it.

Over 800 lines, one file: many short independent tests of one program, the
daemon, sharing the helpers at the top; `make check` runs it as one test.

Needs $DAEMON and $SHIM (set by `make check`). Exit status as automake wants
it: 0 pass, 1 fail, 77 skip.
"""

import json
import os
import resource
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time

from mcptest import (DAEMON, LEGACY, MODERN, SHIM, Client, Daemon, check, children, default_daemon_args, eq,
                     fd_count, main, modern_meta, rss_kib, skip, stdio_client, test)
from mcptest import LATEST_LEGACY, RssGrowth, cpu_ticks_of, init_lines, line, req, sanitized, wait_until

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
UNSUPPORTED_VERSION = -32022


# --- helpers -----------------------------------------------------------------



def err_code(reply, code, what=""):
    """reply is a JSON-RPC error with this code; returns the error object."""
    check(isinstance(reply, dict) and "error" in reply, f"{what}: want error {code}, got {reply!r}"[:600])
    check("result" not in reply, f"{what}: an error reply must not carry a result: {reply!r}"[:600])
    # JSON-RPC 2.0: a reply always has "id", null when the request's could not be read.
    check("id" in reply, f"{what}: an error reply without \"id\": {reply!r}"[:600])
    eq(reply["error"].get("code"), code, f"{what}: error code (message {reply['error'].get('message')!r})")
    check(isinstance(reply["error"].get("message"), str) and reply["error"]["message"],
          f"{what}: the error has no message")
    return reply["error"]


def no_id(reply, what):
    """An error for a message whose id could not be read carries "id": null (the MCP schemas and SDKs need the key)."""
    check("id" in reply and reply["id"] is None, f"{what}: want \"id\": null, got {reply!r}"[:400])


def settled_fd_count(pid, quiet=0.5, timeout=15):
    """The daemon's fd count once it has stayed the same for `quiet` seconds and no child runs."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        n = fd_count(pid)
        if n != last or children(pid):
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return n
        time.sleep(0.05)
    raise AssertionError(f"the daemon's fd count did not settle within {timeout}s")


def wait_connectable(path, proc, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(f"the daemon exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise AssertionError(f"nobody listens on {path} after {timeout}s")
            time.sleep(0.02)
        finally:
            s.close()


def daemon_argv(cache_dir, *args):
    return [DAEMON, f"--cache-dir={cache_dir}", "--log-level=debug", *default_daemon_args(), *args]


def daemon_env():
    env = dict(os.environ)
    for k in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"):
        env.pop(k, None)
    return env


def run_daemon(*args, timeout=15):
    """Run the daemon to completion (for options that make it exit)."""
    if not DAEMON or not os.path.exists(DAEMON):
        skip("DAEMON is not set to the built daemon")
    with tempfile.TemporaryDirectory(prefix="mcptest-cache-") as cache:
        os.chmod(cache, 0o711)   # a root daemon's sandbox uids pass through it
        return subprocess.run(daemon_argv(cache, *args), stdin=subprocess.DEVNULL, capture_output=True,
                              env=daemon_env(), timeout=timeout)


def tool_names(result):
    return [t["name"] for t in result["tools"]]


def check_environment_result(result, what, structured=True):
    eq(result.get("isError"), False, f"{what}: isError")
    text = "".join(c.get("text", "") for c in result["content"] if c.get("type") == "text")
    check("mcp-python-sandboxd" in text, f"{what}: the text does not name the daemon: {text[:300]!r}")
    if structured:
        sc = result.get("structuredContent")
        check(isinstance(sc, dict), f"{what}: no structuredContent: {result!r}"[:600])
        check(isinstance(sc.get("daemon_version"), str) and sc["daemon_version"], f"{what}: daemon_version")
        for v in [*LEGACY, MODERN]:
            check(v in sc["protocol_versions"], f"{what}: protocol_versions lacks {v}: {sc['protocol_versions']}")
        for k in ("bwrap", "uv"):
            check(isinstance(sc.get(k), dict) and isinstance(sc[k].get("available"), bool),
                  f"{what}: {k} facts missing: {sc.get(k)!r}")
    else:
        check("structuredContent" not in result, f"{what}: structuredContent in a pre-2025-06-18 result")


def check_modern_shape(result, what, cacheable):
    eq(result.get("resultType"), "complete", f"{what}: resultType")
    info = result.get("_meta", {}).get("io.modelcontextprotocol/serverInfo", {})
    eq(info.get("name"), "mcp-python-sandbox", f"{what}: _meta serverInfo name")
    if cacheable:
        ttl = result.get("ttlMs")
        check(isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0, f"{what}: ttlMs {ttl!r}")
        check(result.get("cacheScope") in ("public", "private"), f"{what}: cacheScope {result.get('cacheScope')!r}")
    else:
        check("ttlMs" not in result and "cacheScope" not in result, f"{what}: cache hints on a tools/call result")


def exercise_legacy(c, what):
    init = c.initialize(LATEST_LEGACY)
    eq(init["protocolVersion"], LATEST_LEGACY, f"{what}: negotiated version")
    eq(init["serverInfo"]["name"], "mcp-python-sandbox", f"{what}: serverInfo.name")
    check("tools" in init["capabilities"], f"{what}: no tools capability: {init['capabilities']}")
    check("resultType" not in init, f"{what}: a legacy result carries resultType")
    tools = c.result("tools/list")
    check("check_environment" in tool_names(tools), f"{what}: tools/list: {tool_names(tools)}")
    for t in tools["tools"]:
        eq(t["inputSchema"].get("type"), "object", f"{what}: {t['name']} inputSchema type")
    check("ttlMs" not in tools and "resultType" not in tools, f"{what}: legacy tools/list has modern fields")
    check_environment_result(c.call_tool("check_environment"), f"{what}: check_environment")
    r = c.request("ping")
    eq(r.get("result"), {}, f"{what}: ping")


def exercise_modern(c, what):
    """A fresh connection, no initialize at all: every request carries its own _meta."""
    d = c.result("server/discover", {"_meta": modern_meta()})
    eq(d.get("supportedVersions"), [MODERN], f"{what}: supportedVersions")
    check("tools" in d.get("capabilities", {}), f"{what}: discover capabilities {d.get('capabilities')}")
    check_modern_shape(d, f"{what}: server/discover", cacheable=True)
    tools = c.result("tools/list", {"_meta": modern_meta()})
    check_modern_shape(tools, f"{what}: tools/list", cacheable=True)
    check("check_environment" in tool_names(tools), f"{what}: modern tools/list: {tool_names(tools)}")
    r = c.call_tool("check_environment", meta=modern_meta())
    check_modern_shape(r, f"{what}: tools/call", cacheable=False)
    check_environment_result(r, f"{what}: modern check_environment")


def exercise(new_client, what):
    c = new_client()
    exercise_legacy(c, what)
    eq(c.close(), 0, f"{what}: shim exit status after stdin EOF (legacy)")
    c = new_client()
    exercise_modern(c, what)
    eq(c.close(), 0, f"{what}: shim exit status after stdin EOF (modern)")


def send_all_then_eof(c, data):
    c.send_raw(data)
    c.proc.stdin.close()


def send_in_background(c, data, eof=False):
    """Write while the caller reads: a client that writes a lot before it reads can fill every buffer."""
    t = threading.Thread(target=send_all_then_eof if eof else c.send_raw, args=(c, data) if eof else (data,))
    t.start()
    return t


# --- start modes -------------------------------------------------------------

@test
def start_mode_listen_fds():
    with Daemon("activate") as d:
        exercise(d.client, "LISTEN_FDS")
        check(d.alive(), "the daemon died")
        eq(d.stop(), 0, "exit status after SIGTERM")


@test
def start_mode_systemd_socket_activate():
    with Daemon("systemd-socket-activate") as d:
        exercise(d.client, "systemd-socket-activate")
        check(d.alive(), "the daemon died")
        eq(d.stop(), 0, "exit status after SIGTERM")


@test
def start_mode_listen():
    with Daemon("listen") as d:
        exercise(d.client, "--listen")
        eq(d.stop(), 0, "exit status after SIGTERM")
        check(not os.path.exists(d.socket), "the daemon left its --listen socket behind")


@test
def start_mode_shim_stdio_fallback():
    exercise(stdio_client, "shim --stdio fallback")
    # The fallback says on stderr which mode it is in; stdout stays MCP only.
    c = stdio_client()
    c.initialize()
    eq(c.close(), 0, "fallback exit status")
    check("--stdio" in c.stderr(), f"the shim did not say on stderr that it runs --stdio: {c.stderr()[-500:]!r}")


# --- version negotiation -------------------------------------------------------

@test
def default_tool_list_is_lean():
    """Every conversation pays for the tool list: at most 5,000 characters by default (the Python reference server's
    is 3,694), in every era; annotations only where they differ from the protocol's defaults; no outputSchema."""
    defaults = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True}
    with Daemon() as d:
        for v in LEGACY + [MODERN]:
            c = d.client()
            if v != MODERN:
                c.initialize(v)
            r = c.result("tools/list", {"_meta": modern_meta()} if v == MODERN else None)
            size = len(json.dumps(r, separators=(",", ":"), ensure_ascii=False))
            check(size <= 5000, f"{v}: tools/list is {size} characters")
            eq([t["name"] for t in r["tools"]], ["execute_python", "validate_script", "check_environment"],
               f"{v}: one-shot tools by default")
            for t in r["tools"]:
                check("outputSchema" not in t, f"{v}: {t['name']} declares an outputSchema")
                a = t.get("annotations", {})
                same = [k for k, x in defaults.items() if a.get(k, not x) == x]
                eq(same, [], f"{v}: {t['name']}: annotations at their default value")
                if v >= "2025-06-18":
                    check("title" not in a, f"{v}: {t['name']}: annotations.title beside the tool's title")
            eq(c.close(), 0, "shim exit status")


@test
def legacy_versions_echoed_with_their_shapes():
    with Daemon() as d:
        for v in LEGACY:
            c = d.client()
            init = c.initialize(v)
            eq(init["protocolVersion"], v, "negotiated version")
            tools = c.result("tools/list")["tools"]
            t = next(t for t in tools if t["name"] == "check_environment")
            has = {k: k in t for k in ("title", "outputSchema", "annotations")}
            if v == "2024-11-05":
                eq(has, {"title": False, "outputSchema": False, "annotations": False}, f"{v} tool fields")
                check("title" not in init["serverInfo"], f"{v}: serverInfo.title")
            elif v == "2025-03-26":
                eq(has, {"title": False, "outputSchema": False, "annotations": True}, f"{v} tool fields")
            else:
                # No outputSchema: it would make structuredContent obligatory, and a result with figures or
                # files goes without it (clients that show structuredContent drop content[]).
                eq(has, {"title": True, "outputSchema": False, "annotations": True}, f"{v} tool fields")
                eq(t["annotations"].get("readOnlyHint"), True, f"{v}: readOnlyHint")
            eq(init["capabilities"]["tools"], {"listChanged": True}, f"{v}: tools capability")
            check_environment_result(c.call_tool("check_environment"), f"{v} check_environment",
                                     structured=v >= "2025-06-18")
            eq(c.close(), 0, "shim exit status")


@test
def unknown_version_gets_latest_legacy():
    with Daemon() as d:
        for v in ("2099-01-01", "1.0", MODERN, "2024-10-07"):
            c = d.client()
            err_code(c.request("initialize", {"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
                     INVALID_PARAMS, "initialize without protocolVersion")
            r = c.result("initialize", {"protocolVersion": v, "capabilities": {},
                                        "clientInfo": {"name": "t", "version": "1"}})
            eq(r["protocolVersion"], LATEST_LEGACY, f"answer to {v}")
            eq(c.close(), 0, "shim exit status")


@test
def second_initialize_refused():
    """One handshake per connection: a second initialize does not renegotiate what the first agreed."""
    with Daemon() as d:
        c = d.client()
        eq(c.initialize("2025-03-26")["protocolVersion"], "2025-03-26", "first initialize")
        e = err_code(c.request("initialize", {"protocolVersion": LATEST_LEGACY, "capabilities": {},
                                              "clientInfo": {"name": "t", "version": "1"}}),
                     INVALID_REQUEST, "second initialize")
        check("already initialized" in e["message"], f"message: {e['message']!r}")
        # The first agreement stands: 2025-03-26 tools carry no title.
        tools = c.result("tools/list")["tools"]
        check(all("title" not in t for t in tools), "the refused initialize changed the session's version")
        c.close()


@test
def request_before_initialize():
    with Daemon() as d:
        c = d.client()
        for method, params in (("tools/list", None), ("tools/call", {"name": "check_environment"}),
                               ("server/discover", {})):
            e = err_code(c.request(method, params), INVALID_PARAMS, f"{method} before initialize")
            supported = e.get("data", {}).get("supported", [])
            for v in LEGACY:
                check(v in supported, f"{method}: the error does not name {v}: {e}")
        eq(c.request("ping").get("result"), {}, "ping before initialize")
        eq(c.initialize()["protocolVersion"], LATEST_LEGACY, "initialize after the refusals")
        check("check_environment" in tool_names(c.result("tools/list")), "tools/list after initialize")
        c.close()


@test
def modern_version_errors():
    with Daemon() as d:
        c = d.client()
        for v in ("2099-01-01", LATEST_LEGACY):
            e = err_code(c.request("tools/list", {"_meta": modern_meta(v)}), UNSUPPORTED_VERSION, f"_meta version {v}")
            eq(e.get("data", {}).get("supported"), [MODERN], "data.supported")
            eq(e.get("data", {}).get("requested"), v, "data.requested")
        e = err_code(c.request("server/discover", {"_meta": modern_meta("1999-01-01")}), UNSUPPORTED_VERSION,
                     "server/discover at an unknown version")
        eq(e["data"]["supported"], [MODERN], "discover data.supported")

        meta = modern_meta()
        del meta["io.modelcontextprotocol/clientCapabilities"]
        err_code(c.request("tools/list", {"_meta": meta}), INVALID_PARAMS, "missing clientCapabilities")
        err_code(c.request("server/discover", {"_meta": meta}), INVALID_PARAMS, "discover without clientCapabilities")
        meta = modern_meta(**{"io.modelcontextprotocol/clientCapabilities": []})
        err_code(c.request("tools/list", {"_meta": meta}), INVALID_PARAMS, "clientCapabilities not an object")
        meta = modern_meta(**{"io.modelcontextprotocol/protocolVersion": 20260728})
        err_code(c.request("tools/list", {"_meta": meta}), INVALID_PARAMS, "protocolVersion not a string")
        # ping does not exist in the modern era.
        err_code(c.request("ping", {"_meta": modern_meta()}), METHOD_NOT_FOUND, "modern ping")
        err_code(c.request("resources/list", {"_meta": modern_meta()}), METHOD_NOT_FOUND, "modern resources/list")
        c.close()


@test
def initialize_after_discover_on_one_connection():
    with Daemon() as d:
        c = d.client()
        disc = c.result("server/discover", {"_meta": modern_meta()})
        eq(disc["supportedVersions"], [MODERN], "discover")
        init = c.initialize("2025-06-18")
        eq(init["protocolVersion"], "2025-06-18", "initialize after server/discover")
        # Both eras keep working on the same connection.
        legacy = c.result("tools/list")
        check("resultType" not in legacy, "legacy tools/list after discover has resultType")
        modern = c.result("tools/list", {"_meta": modern_meta()})
        check_modern_shape(modern, "modern tools/list after initialize", cacheable=True)
        eq(c.request("ping").get("result"), {}, "legacy ping")
        c.close()


# --- error codes over the wire ---------------------------------------------------

@test
def parse_errors():
    with Daemon() as d:
        c = d.client()
        c.initialize()
        cases = {
            "garbage": b"hello, daemon\n",
            "truncated JSON": b'{"jsonrpc":"2.0","id":7,"method":"ping"\n',
            "invalid UTF-8": b'{"jsonrpc":"2.0","id":8,"method":"ping","params":{"x":"\xff\xfe"}}\n',
            "NUL byte": b'{"jsonrpc":"2.0","id":10,"method":"ping"\x00}\n',
            "NUL in a string": b'{"jsonrpc":"2.0","id":11,"method":"pi\x00ng"}\n',
            "two values": b'{"jsonrpc":"2.0","id":12,"method":"ping"} {}\n',
            # json-c reads these as numbers; JSON has no such numbers.
            "NaN": b'{"jsonrpc":"2.0","id":13,"method":"ping","params":{"x":NaN}}\n',
            "Infinity": b'{"jsonrpc":"2.0","id":14,"method":"ping","params":{"x":Infinity}}\n',
            "-Infinity": b'{"jsonrpc":"2.0","id":15,"method":"ping","params":{"x":[-Infinity]}}\n',
        }
        for what, data in cases.items():
            c.send_raw(data)
            r = c.read_message(10)
            err_code(r, PARSE_ERROR, what)
            no_id(r, what)
            # The connection survives: the next request is answered, and is the next message.
            c.send(req(f"after {what}", "ping"))
            eq(c.read_message(10), {"jsonrpc": "2.0", "id": f"after {what}", "result": {}}, f"ping after {what}")
        c.close()


@test
def invalid_requests():
    with Daemon() as d:
        c = d.client()
        # A batch before initialize, then on a 2025-11-25 session: not allowed.
        c.send_raw(line([req(1, "ping")]))
        err_code(c.read_message(10), INVALID_REQUEST, "batch before initialize")
        c.initialize()
        cases = {
            "null id": b'{"jsonrpc":"2.0","id":null,"method":"ping"}\n',
            "number": b"42\n",
            "string": b'"ping"\n',
            "true": b"true\n",
            "array on a 2025-11-25 session": line([req(2, "ping"), req(3, "ping")]),
            "empty array": b"[]\n",
            "no jsonrpc": b'{"id":4,"method":"ping"}\n',
            "jsonrpc 1.0": b'{"jsonrpc":"1.0","id":5,"method":"ping"}\n',
            "method not a string": b'{"jsonrpc":"2.0","id":6,"method":17}\n',
            "no method": b'{"jsonrpc":"2.0","id":7}\n',
            "float id": b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}\n',
            "object id": b'{"jsonrpc":"2.0","id":{},"method":"ping"}\n',
        }
        for what, data in cases.items():
            c.send_raw(data)
            r = c.read_message(10)
            check(not isinstance(r, list), f"{what}: got a batch reply")
            err_code(r, INVALID_REQUEST, what)
            if what in ("null id", "number", "string", "true", "empty array", "float id", "object id"):
                no_id(r, what)
        # A request with a good id gets its id back on the error.
        c.send_raw(b'{"jsonrpc":"1.0","id":"x-1","method":"ping"}\n')
        eq(c.read_message(10).get("id"), "x-1", "id echoed on -32600")
        c.send(req("alive", "ping"))
        eq(c.read_message(10).get("id"), "alive", "ping after the invalid requests")
        c.close()


@test
def method_and_params_errors():
    with Daemon() as d:
        c = d.client()
        c.initialize()
        r = c.request("no/such/method", {}, rid="m-1")
        err_code(r, METHOD_NOT_FOUND, "unknown method")
        eq(r["id"], "m-1", "id echoed on -32601")
        err_code(c.request("prompts/list"), METHOD_NOT_FOUND, "prompts/list (not advertised)")
        err_code(c.request("tools/call", {"name": "no_such_tool", "arguments": {}}), INVALID_PARAMS, "unknown tool")
        err_code(c.request("tools/call", {"arguments": {}}), INVALID_PARAMS, "tools/call without a name")
        for bad in ([], "x", 3, True):
            err_code(c.request("tools/call", {"name": "check_environment", "arguments": bad}), INVALID_PARAMS,
                     f"arguments {bad!r}")
        c.send_raw(b'{"jsonrpc":"2.0","id":77,"method":"tools/list","params":[1]}\n')
        r = c.read_message(10)
        err_code(r, INVALID_PARAMS, "params an array")
        eq(r["id"], 77, "id echoed on -32602")
        err_code(c.request("tools/list", {"cursor": "not-a-cursor"}), INVALID_PARAMS, "bad cursor")
        # A tool argument error is for the model: a result with isError, not a protocol error.
        r = c.call_tool("check_environment", {"unexpected": 1})
        eq(r.get("isError"), True, "unknown argument gives isError")
        c.close()


@test
def notifications_never_answered():
    with Daemon() as d:
        c = d.client()
        # Before initialize too: a notification never gets a reply.
        c.send_raw(b'{"jsonrpc":"2.0","method":"notifications/whatever"}\n')
        c.initialize()
        notifications = [
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "method": "notifications/unknown", "params": {"x": 1}},
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 12345}},
            {"jsonrpc": "2.0", "method": "notifications/cancelled"},
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": [1, 2]},
            {"jsonrpc": "2.0", "method": "tools/list"},
            {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "no_such_tool"}},
            {"jsonrpc": "2.0", "method": "ping", "params": {"_meta": modern_meta("1999-01-01")}},
            {"jsonrpc": "2.0", "id": 5, "result": {}},                      # a response: no reply either
            {"jsonrpc": "2.0", "id": 6, "error": {"code": 1, "message": "x"}},
        ]
        c.send_raw(b"".join(line(n) for n in notifications))
        c.expect_silence(0.7)
        # And the next message is the reply to the next request, nothing in between.
        c.send(req("after", "ping"))
        eq(c.read_message(10), {"jsonrpc": "2.0", "id": "after", "result": {}}, "first message after notifications")
        c.close()


@test
def batches_on_2025_03_26():
    with Daemon() as d:
        c = d.client()
        eq(c.initialize("2025-03-26")["protocolVersion"], "2025-03-26", "negotiated")
        batch = [
            req("b1", "ping"),
            req("b2", "tools/list"),
            {"jsonrpc": "2.0", "method": "notifications/whatever"},
            req("b3", "tools/call", {"name": "check_environment", "arguments": {}}),
            req("b4", "no/such/method"),
            42,
        ]
        c.send_raw(line(batch))
        r = c.read_message(30)
        check(isinstance(r, list), f"batch reply is not an array: {r!r}"[:300])
        eq(len(r), 5, "replies in the batch (the notification gets none)")
        by_id = {m.get("id"): m for m in r}
        eq(by_id["b1"].get("result"), {}, "b1 ping")
        check("check_environment" in tool_names(by_id["b2"]["result"]), "b2 tools/list")
        check_environment_result(by_id["b3"]["result"], "b3 check_environment", structured=False)
        err_code(by_id["b4"], METHOD_NOT_FOUND, "b4")
        err_code(by_id[None], INVALID_REQUEST, "non-object element")

        c.send_raw(line([{"jsonrpc": "2.0", "method": "notifications/a"}, {"jsonrpc": "2.0", "method": "n/b"}]))
        c.expect_silence(0.5)
        c.send_raw(b"[]\n")
        r = c.read_message(10)
        check(isinstance(r, dict), f"empty batch answered with {r!r}")
        err_code(r, INVALID_REQUEST, "empty batch")
        c.send_raw(line([req("i1", "initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                                  "clientInfo": {"name": "t", "version": "1"}})]))
        r = c.read_message(10)
        check(isinstance(r, list) and len(r) == 1, f"initialize in a batch: {r!r}")
        err_code(r[0], INVALID_REQUEST, "initialize in a batch")
        eq(r[0]["id"], "i1", "id of the refused initialize")
        c.close()


# --- framing -----------------------------------------------------------------

@test
def oversize_line_is_refused_and_connection_survives():
    with Daemon(args=["--max-message-size=1M"]) as d:
        c = d.client()
        c.initialize()
        big = line(req("big", "tools/list", {"pad": "x" * (2 * 1024 * 1024)}))
        check(len(big) > 2 * 1024 * 1024, "the big message is not big")
        c.send(req("before", "ping"))
        eq(c.read_message(10).get("id"), "before", "ping before")
        c.send_raw(big)
        r = c.read_message(20)
        e = err_code(r, INVALID_REQUEST, "oversize line")
        no_id(r, "oversize line")
        eq(e.get("data", {}).get("limit"), 1024 * 1024, "data.limit")
        c.send(req("after", "ping"))
        eq(c.read_message(10), {"jsonrpc": "2.0", "id": "after", "result": {}},
           "the next request after the oversize line (and no second error)")
        # Just under the limit is fine.
        r = c.request("ping", {"pad": "y" * (1024 * 1024 - 200)})
        eq(r.get("result"), {}, "a message just under the limit")
        check(d.alive(), "the daemon died")
        c.close()


@test
def ten_thousand_pipelined_pings():
    with Daemon() as d:
        c = d.client()
        c.initialize()
        n = 10000
        writer = send_in_background(c, b"".join(line(req(i, "ping")) for i in range(n)))
        seen = []
        for _ in range(n):
            m = c.read_message(30)
            eq(m.get("result"), {}, "ping result")
            seen.append(m["id"])
        writer.join()
        eq(seen, list(range(n)), "every ping answered, in order")
        c.expect_silence(0.2)
        c.close()


@test
def message_split_across_small_writes():
    with Daemon() as d:
        c = d.client()
        c.initialize()
        data = line(req("split", "tools/call", {"name": "check_environment", "arguments": {}}))
        for i in range(0, len(data), 3):
            c.send_raw(data[i:i + 3])
            time.sleep(0.01)
        r = c.wait_for("split", 20)
        check_environment_result(r["result"], "split tools/call")
        # Straight to the socket too, so no pump can join the pieces.
        s = d.raw_connect()
        s.settimeout(10)
        data = line(req(1, "ping")) + line(req(2, "ping"))
        for i in range(len(data)):
            s.sendall(data[i:i + 1])
            if i % 4 == 0:
                time.sleep(0.005)
        got = b""
        while got.count(b"\n") < 2:
            chunk = s.recv(4096)
            check(chunk, "the daemon closed the connection")
            got += chunk
        eq([json.loads(x)["id"] for x in got.splitlines()], [1, 2], "byte-by-byte pings")
        s.close()
        c.close()


# --- concurrency -------------------------------------------------------------

@test
def fifty_concurrent_clients():
    with Daemon() as d:
        clients = [d.client() for _ in range(50)]
        for i, c in enumerate(clients):
            c.send(req(f"init-{i}", "initialize", {"protocolVersion": LEGACY[i % 4], "capabilities": {},
                                                   "clientInfo": {"name": f"c{i}", "version": "1"}}))
        for i, c in enumerate(clients):
            eq(c.wait_for(f"init-{i}", 30)["result"]["protocolVersion"], LEGACY[i % 4], f"client {i} initialize")
            c.notify("notifications/initialized")
        d.wait_notify("Serving 50 connections")
        for i, c in enumerate(clients):
            c.send(req(f"env-{i}", "tools/call", {"name": "check_environment", "arguments": {}}))
        for i, c in enumerate(clients):
            r = c.wait_for(f"env-{i}", 60)
            check_environment_result(r["result"], f"client {i}", structured=LEGACY[i % 4] >= "2025-06-18")
        for i, c in enumerate(clients):
            eq(c.close(), 0, f"client {i} shim exit status")
        d.wait_notify("Serving 0 connections (50 since start)")
        check(d.alive(), "the daemon died")


@test
def a_hundred_clients_running_scripts():
    """100 clients at once, each running scripts back to back for a few seconds: every call ends in a result or
    in the queue-full error, none hangs; afterwards no descriptor, process or memory is left over."""
    n, seconds = 100, 5
    # All 100 are one user: the per-user cap at max-runs, so that the queue, not the user's share of it, is what
    # turns calls away ("busy").
    with Daemon(args=["--max-connections=128", "--max-connections-per-user=128", "--max-runs=2",
                      "--max-runs-per-user=2", "--max-queue=32"]) as d:
        pid = d.proc.pid
        w = d.client()
        w.initialize()
        r = w.call_tool("execute_python", {"script": "print('warm')"}, timeout=120)
        if r.get("isError"):
            skip(f"scripts cannot run on this machine: {w.text(r)[:300]}")
        w.close()
        wait_until(lambda: not children(pid), 10, "the warm-up's processes to go")
        fds, rss = fd_count(pid), rss_kib(pid)
        clients = [d.client() for _ in range(n)]
        outcomes = {"ok": 0, "busy": 0}
        other = []
        lock = threading.Lock()

        def work(c):
            c.initialize()
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                r = c.call_tool("execute_python", {"script": "print('hi')"}, timeout=120)
                st = r.get("structuredContent") or {}
                with lock:
                    if not r.get("isError") and st.get("stdout") == "hi\n":
                        outcomes["ok"] += 1
                    elif r.get("isError") and "busy" in c.text(r):
                        outcomes["busy"] += 1
                    else:
                        other.append(c.text(r)[:300])

        with RssGrowth(pid) as growth:
            threads = [threading.Thread(target=work, args=(c,)) for c in clients]
            for t in threads:
                t.start()
            for t in threads:
                t.join(180)
        check(not any(t.is_alive() for t in threads), "a client hung")
        eq(other, [], "calls that ended neither in a result nor in the queue-full error")
        check(outcomes["ok"] > 0, f"no run completed: {outcomes}")
        print(f"# {n} clients, {seconds} s: {outcomes['ok']} runs, {outcomes['busy']} refused as busy; "
              f"daemon RSS {rss} KiB before, peak {growth.peak} KiB", flush=True)
        for c in clients:
            eq(c.close(), 0, "shim exit status")
        wait_until(lambda: not children(pid), 15, "every sandbox to be gone")
        wait_until(lambda: fd_count(pid) <= fds, 10, f"the daemon's descriptors back to {fds}")
        if not sanitized(pid):
            check(growth.grew < 20 * 1024, f"the daemon's RSS grew by {growth.grew} KiB under the load")
        check(d.alive(), "the daemon died")


def ping_latency(c, n=10):
    worst = 0.0
    for _ in range(n):
        t0 = time.monotonic()
        eq(c.request("ping", timeout=10).get("result"), {}, "good client ping")
        worst = max(worst, time.monotonic() - t0)
    return worst


@test
def hostile_clients_beside_a_good_one():
    with Daemon() as d:
        pid = d.proc.pid
        # Warm up (anything opened lazily on the first connection), then take the baseline.
        w = d.client()
        w.initialize()
        w.call_tool("check_environment")
        w.close()
        d.wait_notify("Serving 0 connections (1 since start)")
        baseline = settled_fd_count(pid)
        rss0 = rss_kib(pid)

        good = d.client()
        good.initialize()
        hostile = []

        # 1. Garbage: random bytes with newlines, never reading the -32700 replies.
        g = d.raw_connect()
        g.setblocking(False)
        junk = os.urandom(256 * 1024).replace(b"\n", b"\x01")
        junk = b"\n".join(junk[i:i + 100] for i in range(0, len(junk), 100)) + b"\n"
        try:
            g.send(junk)
        except BlockingIOError:
            pass
        hostile.append(g)

        # 2. Half a message, then nothing.
        h = d.raw_connect()
        h.sendall(b'{"jsonrpc":"2.0","id":1,"method":"tools/li')
        hostile.append(h)

        # 3. Many requests, never reading a reply: the daemon must stop reading, not buffer without end.
        q = d.raw_connect()
        q.sendall(line(req("init", "initialize", {"protocolVersion": LATEST_LEGACY, "capabilities": {},
                                                  "clientInfo": {"name": "hog", "version": "1"}})))
        q.setblocking(False)
        chunk = b"".join(line(req(i, "tools/list")) for i in range(2000))     # ~1.5 KiB of reply each
        accepted, stalled_since = 0, None
        while accepted < 256 * 1024 * 1024:
            try:
                accepted += q.send(chunk)
                stalled_since = None
            except (BrokenPipeError, ConnectionResetError):
                raise AssertionError(f"the daemon kept reading ({accepted} bytes) until it dropped the client, "
                                     "instead of pausing while replies wait")
            except BlockingIOError:
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > 1.0:
                    break
                time.sleep(0.02)
        check(accepted < 8 * 1024 * 1024,
              f"the daemon took {accepted} bytes of requests from a client that reads no replies")
        hostile.append(q)

        # 4. A line that never ends (larger than any limit).
        big = d.raw_connect()
        big.setblocking(False)
        try:
            for _ in range(64):
                big.send(b"[" * 65536)
        except BlockingIOError:
            pass
        hostile.append(big)

        # 5. Disconnect in the middle of a message.
        for _ in range(5):
            x = d.raw_connect()
            x.sendall(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"check_')
            x.close()

        # The good client keeps working. The bound is for a daemon stuck on the hostile ones (a blocking read, a
        # parse of the endless line); it is wide because CI runs this beside a virtual machine on two CPUs. How
        # fast a neighbour's calls stay is measured in bench/noisy.py, not asserted here.
        worst = ping_latency(good, 20)
        check(worst < 3.0, f"a ping took {worst:.3f}s beside hostile clients")
        check_environment_result(good.call_tool("check_environment", timeout=20), "good client beside hostile ones")
        check(d.alive(), "the daemon died")
        rss = rss_kib(pid)
        # Under ASan its quarantine and shadow grow with what is freed: not the daemon's memory.
        if not sanitized(pid):
            check(rss - rss0 < 32 * 1024, f"the daemon grew from {rss0} to {rss} KiB")

        for s in hostile:
            s.close()
        eq(good.request("ping").get("result"), {}, "good client after hostile clients left")
        eq(good.close(), 0, "good client shim exit status")
        wait_until(lambda: fd_count(pid) == baseline, 10,
                   f"the daemon's fd count to return to {baseline} (now {fd_count(pid)})")
        d.wait_notify("Serving 0 connections")
        check(d.alive(), "the daemon died")
        eq(d.stop(), 0, "exit status after SIGTERM")


@test
def reader_that_never_reads_and_then_hangs_up():
    """A client that never reads and then vanishes: its connection and queue are freed."""
    with Daemon() as d:
        pid = d.proc.pid
        baseline = settled_fd_count(pid)
        for _ in range(3):
            q = d.raw_connect()
            q.setblocking(False)
            chunk = b"".join(line(req(i, "tools/list")) for i in range(1000))
            try:
                for _ in range(200):
                    q.send(chunk)
            except BlockingIOError:
                pass
            q.close()
        wait_until(lambda: fd_count(pid) == baseline, 10, f"fd count back to {baseline} (now {fd_count(pid)})")
        c = d.client()
        c.initialize()
        eq(c.request("ping").get("result"), {}, "ping afterwards")
        c.close()


@test
def client_vanishes_with_calls_in_flight():
    with Daemon() as d:
        pid = d.proc.pid
        baseline = settled_fd_count(pid)
        init = line(req("i", "initialize", {"protocolVersion": LATEST_LEGACY, "capabilities": {},
                                            "clientInfo": {"name": "gone", "version": "1"}}))
        for i in range(20):
            s = d.raw_connect()
            s.sendall(init + b"".join(line(req(k, "tools/call", {"name": "check_environment", "arguments": {}}))
                                      for k in range(5)))
            if i % 2:
                s.shutdown(socket.SHUT_WR)   # half-close first: the calls still run, nobody reads the answers
            s.close()
        wait_until(lambda: fd_count(pid) == baseline and not children(pid), 15,
                   f"fd count back to {baseline} and no child left (now {fd_count(pid)}, {children(pid)})")
        c = d.client()
        c.initialize()
        check_environment_result(c.call_tool("check_environment"), "after the vanished clients")
        c.close()
        check(d.alive(), "the daemon died")


# --- daemon lifecycle --------------------------------------------------------

@test
def sd_notify_ready_status_stopping():
    with Daemon() as d:
        d.wait_notify("READY=1")
        c = d.client()
        c.initialize()
        d.wait_notify("STATUS=Serving 1 connection")
        c2 = d.client()
        c2.initialize()
        d.wait_notify("STATUS=Serving 2 connections")
        c.close()
        c2.close()
        d.wait_notify("STATUS=Serving 0 connections (2 since start)")
        check(not any("STOPPING=1" in m for m in d.messages()), "STOPPING=1 before any signal")
        eq(d.stop(signal.SIGTERM), 0, "exit status after SIGTERM")
        d.wait_notify("STOPPING=1")
        msgs = d.messages()
        ready = next(i for i, m in enumerate(msgs) if "READY=1" in m)
        stopping = [i for i, m in enumerate(msgs) if "STOPPING=1" in m]
        check(stopping and stopping[0] > ready, f"no STOPPING=1 after READY=1: {msgs}")


@test
def sigterm_with_a_client_connected():
    with Daemon() as d:
        c = d.client()
        c.initialize()
        d.wait_notify("Serving 1 connection")
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        try:
            rc = d.proc.wait(5)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the daemon did not exit within 5s of SIGTERM with a client connected: {d.log()}")
        eq(rc, 0, "exit status")
        check(time.monotonic() - t0 < 5, "slow exit")
        d.wait_notify("STOPPING=1")
        # The shim sees the daemon go and exits on its own: the session ended normally.
        try:
            rc = c.proc.wait(5)
        except subprocess.TimeoutExpired:
            c.kill()
            raise AssertionError("the shim did not exit after the daemon went away")
        c.close()
        eq(rc, 0, f"shim exit status when the daemon stopped ({c.stderr().strip()})")


@test
def stdio_mode_with_regular_files():
    """--stdio with stdin and stdout regular files (not pollable): every request answered, then exit 0."""
    if not DAEMON or not os.path.exists(DAEMON):
        skip("DAEMON is not set to the built daemon")
    with tempfile.TemporaryDirectory(prefix="mcptest-files-") as d:
        os.chmod(d, 0o711)   # a root daemon's sandbox uids pass through it
        requests = (init_lines("2025-06-18", rid=1)
                    + line(req(2, "tools/call", {"name": "check_environment", "arguments": {}}))
                    + b"".join(line(req(i, "ping")) for i in range(3, 1003))
                    + b'{"jsonrpc":"2.0","id":"last","method":"ping"}')    # no newline at the end
        with open(os.path.join(d, "in"), "wb") as f:
            f.write(requests)
        with open(os.path.join(d, "in"), "rb") as fin, open(os.path.join(d, "out"), "wb") as fout:
            r = subprocess.run(daemon_argv(os.path.join(d, "cache"), "--stdio"), stdin=fin, stdout=fout,
                               stderr=subprocess.PIPE, env=daemon_env(), timeout=30)
        eq(r.returncode, 0, f"exit status ({r.stderr.decode(errors='replace')[-1000:]})")
        with open(os.path.join(d, "out"), "rb") as f:
            replies = [json.loads(x) for x in f.read().splitlines()]
        ids = sorted((m["id"] for m in replies), key=str)
        eq(ids, sorted([1, 2, *range(3, 1003), "last"], key=str), "replies")
        by_id = {m["id"]: m for m in replies}
        check_environment_result(by_id[2]["result"], "check_environment over files")


@test
def exit_idle_time_without_connections():
    t0 = time.monotonic()
    with Daemon("listen", args=["--exit-idle-time=1"]) as d:
        try:
            rc = d.proc.wait(10)
        except subprocess.TimeoutExpired:
            raise AssertionError("the daemon did not exit when idle")
        took = time.monotonic() - t0
        eq(rc, 0, "exit status")
        check(0.8 <= took < 4, f"idle exit after {took:.2f}s, want about 1s")
        check(not os.path.exists(d.socket), "the socket was left behind")


@test
def exit_idle_time_not_while_connected():
    with Daemon("listen", args=["--exit-idle-time=1"]) as d:
        c = d.client()
        c.initialize()
        time.sleep(2.5)
        check(d.alive(), "the daemon exited with a client connected")
        eq(c.request("ping").get("result"), {}, "ping after 2.5s")
        t0 = time.monotonic()
        eq(c.close(), 0, "shim exit status")
        try:
            rc = d.proc.wait(10)
        except subprocess.TimeoutExpired:
            raise AssertionError("the daemon did not exit once the client left")
        took = time.monotonic() - t0
        eq(rc, 0, "exit status")
        check(0.5 <= took < 4, f"idle exit {took:.2f}s after the last client, want about 1s")


@test
def listen_replaces_a_stale_socket():
    if not DAEMON or not SHIM:
        skip("SHIM and DAEMON must point to the built programs")
    with tempfile.TemporaryDirectory(prefix="mcptest-stale-") as d:
        path = os.path.join(d, "mcp.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.close()      # the file stays; nobody listens
        check(stat.S_ISSOCK(os.lstat(path).st_mode), "no stale socket made")
        with open(os.path.join(d, "daemon.log"), "w+b") as log:
            p = subprocess.Popen(daemon_argv(os.path.join(d, "cache"), f"--listen={path}"), env=daemon_env(),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
            try:
                wait_connectable(path, p)
                c = Client([SHIM, f"--socket={path}", "--no-fallback"])
                eq(c.initialize()["protocolVersion"], LATEST_LEGACY, "initialize over the replaced socket")
                eq(c.close(), 0, "shim exit status")
                p.terminate()
                eq(p.wait(10), 0, "exit status")
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            log.seek(0)
            check(b"stale" in log.read(), "the daemon did not say it replaced a stale socket")


@test
def listen_refuses_to_clobber_a_regular_file():
    with tempfile.TemporaryDirectory(prefix="mcptest-file-") as d:
        path = os.path.join(d, "precious.txt")
        with open(path, "w") as f:
            f.write("do not touch\n")
        r = run_daemon(f"--listen={path}")
        check(r.returncode != 0, "the daemon accepted a regular file as its socket")
        with open(path) as f:
            eq(f.read(), "do not touch\n", "the file's content")
        check(stat.S_ISREG(os.lstat(path).st_mode), "the file is no longer a regular file")
        check(path in r.stderr.decode(), f"the message does not name {path}: {r.stderr.decode()!r}")


@test
def listen_refuses_when_another_daemon_listens():
    with Daemon("listen") as d:
        ino = os.lstat(d.socket).st_ino
        r = run_daemon(f"--listen={d.socket}")
        check(r.returncode != 0, "a second daemon took over a live socket")
        check(d.socket in r.stderr.decode(), f"the message does not name the socket: {r.stderr.decode()!r}")
        eq(os.lstat(d.socket).st_ino, ino, "the socket file was replaced")
        c = d.client()
        eq(c.initialize()["protocolVersion"], LATEST_LEGACY, "the first daemon still serves")
        c.close()


@test
def listen_socket_mode_0660():
    with Daemon("listen") as d:
        st = os.lstat(d.socket)
        check(stat.S_ISSOCK(st.st_mode), "not a socket")
        eq(oct(st.st_mode & 0o777), oct(0o660), "socket mode")
    # The daemon's umask does not loosen or tighten it.
    old = os.umask(0)
    try:
        with Daemon("listen") as d:
            eq(oct(os.lstat(d.socket).st_mode & 0o777), oct(0o660), "socket mode under umask 0")
    finally:
        os.umask(old)


@test
def max_connections_refuses_the_third_client_at_once():
    """With max-connections full, a new client is not left hanging in the backlog (the kernel accepts, so the shim
    would never fall back): it gets one JSON-RPC error naming the cap, then EOF; once a slot is free, it is served."""
    with Daemon(args=["--max-connections=2"]) as d:
        c1, c2 = d.client(), d.client()
        c1.initialize()
        c2.initialize()
        s = d.raw_connect()
        s.settimeout(10)
        data = b""
        while True:
            chunk = s.recv(4096)     # on a daemon that leaves it in the backlog: times out
            if not chunk:
                break
            data += chunk
        s.close()
        msg = json.loads(data.decode().splitlines()[0])
        eq(msg.get("id"), None, "the refusal's id")
        err = msg.get("error") or {}
        check("max-connections=2" in err.get("message", ""), f"the refusal does not name the cap: {msg}")
        eq((err.get("data") or {}).get("setting"), "max-connections", "the refusal's setting")
        # Through the shim too: it fails at once with the error, instead of waiting.
        c3 = d.client()
        c3.send(req("third", "initialize", {"protocolVersion": LATEST_LEGACY, "capabilities": {},
                                            "clientInfo": {"name": "third", "version": "1"}}))
        r = c3.read_message(10)
        check("max-connections" in json.dumps(r), f"the third client's answer does not name the cap: {r}")
        eq(c3.proc.wait(10) is not None, True, "the third shim ended")
        eq(c2.request("ping").get("result"), {}, "second client ping")
        c1.close()
        c4 = d.client()
        eq(c4.request("ping").get("result"), {}, "a client is served once the first leaves")
        c2.close()
        c4.close()
        check("max-connections=2" in d.log(), "the daemon did not log that it refused at the cap")


@test
def out_of_file_descriptors_does_not_spin():
    """accept() failing with EMFILE must not turn into a busy loop; serving resumes when fds free up."""
    with Daemon() as d:
        pid = d.proc.pid
        base = settled_fd_count(pid)
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (base + 4, hard))
        try:
            socks = [d.raw_connect() for _ in range(12)]     # 4 accepted, the rest wait in the backlog
            wait_until(lambda: fd_count(pid) >= base + 4, 5, "the daemon to use up its fds")
            time.sleep(0.3)
            t0 = cpu_ticks_of(pid)
            time.sleep(1.0)
            used = cpu_ticks_of(pid) - t0
            hz = os.sysconf("SC_CLK_TCK")
            check(used < hz // 4, f"the daemon used {used}/{hz} CPU ticks in 1s while out of fds")
            n = d.log().count("accept")
            check(n < 40, f"{n} log lines about accept() failures (the last 4000 characters of the log)")
            for s in socks[:4]:
                s.close()
            # The connections that waited in the backlog are served once fds are free again.
            for s in socks[4:8]:
                s.settimeout(10)
                s.sendall(line(req("p", "ping")))
                eq(json.loads(s.recv(4096)).get("id"), "p", "ping from a client that waited in the backlog")
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        for s in socks[4:]:
            s.close()
        c = d.client()
        eq(c.initialize()["protocolVersion"], LATEST_LEGACY, "a new client after the fd shortage")
        c.close()
        check(d.alive(), "the daemon died")


@test
def help_version_and_bad_options():
    r = run_daemon("--help")
    eq(r.returncode, 0, "--help exit status")
    out = r.stdout.decode()
    check("Usage" in out and "--listen" in out and "--stdio" in out, f"--help output: {out[:300]!r}")
    r = run_daemon("--version")
    eq(r.returncode, 0, "--version exit status")
    check(any(ch.isdigit() for ch in r.stdout.decode()), f"--version output: {r.stdout!r}")
    r = run_daemon("--no-such-option")
    check(r.returncode != 0, "an unknown option was accepted")
    check("no-such-option" in r.stderr.decode(), f"the message does not name the option: {r.stderr!r}")
    r = run_daemon("--max-connections=lots")
    check(r.returncode != 0, "a bad number was accepted")
    check(r.stderr.strip(), "no message for a bad number")
    # A configuration file named on the command line must be there: a typo is not the defaults.
    with tempfile.TemporaryDirectory(prefix="mcptest-conf-") as d:
        missing = os.path.join(d, "typo.conf")
        for extra in (["--check-config"], ["--stdio"]):
            r = run_daemon(f"--config={missing}", *extra)
            check(r.returncode != 0, f"{extra}: a missing --config file was accepted")
            check(missing in r.stderr.decode() and "No such file" in r.stderr.decode(),
                  f"{extra}: the message does not name the file: {r.stderr!r}")
        present = os.path.join(d, "empty.conf")
        open(present, "w").close()
        r = run_daemon(f"--config={present}", "--check-config")
        eq(r.returncode, 0, f"an empty --config file: {r.stderr!r}")


# --- the shim against the real daemon ------------------------------------------

@test
def shim_stdin_eof_still_delivers_replies():
    with Daemon() as d:
        c = d.client()
        data = (init_lines(rid=1)
                + line(req(2, "tools/list"))
                + line(req(3, "logging/setLevel", {"level": "warning"}))
                + line(req(4, "ping")))
        send_all_then_eof(c, data)
        got = {}
        for _ in range(4):
            m = c.read_message(20)
            got[m["id"]] = m
        # Everything read before EOF is answered; EOF ends the session (a tool call still running
        # then is stopped: stdin_eof_stops_runs_* in test-execute.py).
        eq(sorted(got), [1, 2, 3, 4], "replies after stdin EOF")
        eq(got[3].get("result"), {}, "logging/setLevel sent just before EOF")
        try:
            extra = c.read_line(10)
        except EOFError:
            extra = None      # the shim closed stdout after the last reply, as it should
        check(extra is None, f"more output after the last reply: {extra!r}")
        eq(c.proc.wait(10), 0, "shim exit status")
        c.close()


@test
def shim_stdin_eof_after_many_requests():
    """Far more replies than fit in the pipes when stdin ends: none may be lost."""
    with Daemon() as d:
        c = d.client()
        n = 3000
        data = line(req(0, "initialize", {"protocolVersion": LATEST_LEGACY, "capabilities": {},
                                          "clientInfo": {"name": "t", "version": "1"}}))
        data += b"".join(line(req(i, "tools/list")) for i in range(1, n + 1))
        t = send_in_background(c, data, eof=True)
        time.sleep(1.0)      # let the replies pile up before we read any
        ids = []
        try:
            while True:
                ids.append(c.read_message(20)["id"])
        except EOFError:
            pass
        t.join()
        eq(len(ids), n + 1, "replies received")
        eq(ids, list(range(n + 1)), "replies in order")
        eq(c.proc.wait(10), 0, "shim exit status")
        c.close()


@test
def last_line_without_newline_is_answered():
    """A client that ends its input without a final newline still gets the last request answered."""
    for what, new_client in (("--stdio", stdio_client), ("shim", None)):
        with Daemon() as d:
            c = new_client() if new_client else d.client()
            data = (line(req(1, "initialize", {"protocolVersion": LATEST_LEGACY, "capabilities": {},
                                               "clientInfo": {"name": "t", "version": "1"}}))
                    + json.dumps(req("last", "ping")).encode())
            send_all_then_eof(c, data)
            eq(c.read_message(20).get("id"), 1, f"{what}: initialize")
            eq(c.read_message(20), {"jsonrpc": "2.0", "id": "last", "result": {}}, f"{what}: the unterminated ping")
            eq(c.proc.wait(10), 0, f"{what}: exit status")
            c.close()


def all_stdout_lines_are_jsonrpc(c, what):
    c.send_raw(b"garbage\n\xff\xfe\n")
    c.send(req(1, "initialize", {"protocolVersion": LATEST_LEGACY, "capabilities": {},
                                 "clientInfo": {"name": "t", "version": "1"}}))
    c.send(req(2, "tools/call", {"name": "check_environment", "arguments": {}}))
    c.send(req(3, "no/such"))
    c.send(req(4, "tools/list", {"_meta": modern_meta()}))
    out = b""
    # Six replies (the end of input would stop check_environment: it is sent once they are in), then nothing.
    for _ in range(6):
        out += c.read_line(30) + b"\n"
    c.proc.stdin.close()
    try:
        while True:
            out += c.read_line(10) + b"\n"
    except EOFError:
        pass
    out += c.buf
    eq(c.proc.wait(10), 0, f"{what}: shim exit status")
    lines = out.split(b"\n")
    eq(lines[-1], b"", f"{what}: stdout does not end with a newline")
    lines = lines[:-1]
    eq(len(lines), 6, f"{what}: lines on stdout ({out[:500]!r})")
    for ln in lines:
        try:
            m = json.loads(ln)
        except ValueError:
            raise AssertionError(f"{what}: not JSON on stdout: {ln[:200]!r}")
        check(isinstance(m, dict) and m.get("jsonrpc") == "2.0", f"{what}: not a JSON-RPC message: {ln[:200]!r}")
    c.close()


@test
def shim_stdout_carries_only_jsonrpc():
    with Daemon() as d:
        all_stdout_lines_are_jsonrpc(d.client(), "through the daemon")
    all_stdout_lines_are_jsonrpc(stdio_client(), "--stdio fallback")


if __name__ == "__main__":
    main()
