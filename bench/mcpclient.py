# SPDX-License-Identifier: MIT
"""A small, stdlib-only MCP client for the benchmark.

It speaks newline-delimited JSON-RPC 2.0 (the MCP stdio framing) over any
pair of byte streams: a child process's stdin/stdout, or a connected Unix
socket. The same code drives our service and the reference server, so
whatever it costs, it costs both the same.
"""

import json
import os
import select
import socket
import subprocess
import time

PROTOCOL_VERSION = "2025-06-18"


class MCPError(Exception):
    pass


class Client:
    """One MCP session over a read fd and a write fd."""

    def __init__(self, rfd, wfd, proc=None, sock=None, name="client"):
        self.rfd = rfd
        self.wfd = wfd
        self.proc = proc
        self.sock = sock
        self.name = name
        self.buf = b""
        self.next_id = 1

    # -- construction -----------------------------------------------------
    @classmethod
    def spawn(cls, argv, env=None, stderr=None, cwd=None):
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr if stderr is not None else subprocess.DEVNULL,
                                env=env, cwd=cwd, bufsize=0)
        return cls(proc.stdout.fileno(), proc.stdin.fileno(), proc=proc, name=argv[0])

    @classmethod
    def connect(cls, path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        return cls(s.fileno(), s.fileno(), sock=s, name=path)

    # -- framing ----------------------------------------------------------
    def send(self, msg):
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            n = os.write(self.wfd, view)
            view = view[n:]

    def _read_line(self, deadline):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 1:]
                return line
            left = deadline - time.monotonic()
            if left <= 0:
                raise MCPError("%s: timed out waiting for a reply" % self.name)
            r, _, _ = select.select([self.rfd], [], [], left)
            if not r:
                continue
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                raise MCPError("%s: connection closed" % self.name)
            self.buf += chunk

    def start_request(self, method, params=None):
        """Send a request; return its id (wait_reply() collects the answer)."""
        rid = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return rid

    def request(self, method, params=None, timeout=600.0):
        return self.wait_reply(self.start_request(method, params), method, timeout)

    def wait_reply(self, rid, method="request", timeout=600.0):
        deadline = time.monotonic() + timeout
        while True:
            line = self._read_line(deadline)
            if not line.strip():
                continue
            try:
                reply = json.loads(line)
            except ValueError:
                # Not MCP: a server that writes junk to stdout. Skip it.
                continue
            if reply.get("id") != rid or "method" in reply:
                continue  # notifications, server requests
            if "error" in reply:
                raise MCPError("%s: %s failed: %s" % (self.name, method, reply["error"]))
            return reply.get("result")

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    # -- MCP --------------------------------------------------------------
    INITIALIZE_PARAMS = {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "mcp-python-sandbox-bench", "version": "1"},
    }

    def initialize(self, timeout=120.0):
        res = self.request("initialize", self.INITIALIZE_PARAMS, timeout=timeout)
        self.notify("notifications/initialized")
        return res

    def call_tool(self, name, arguments, timeout=600.0):
        return self.request("tools/call", {"name": name, "arguments": arguments}, timeout=timeout)

    def execute_python(self, script, dependencies=None, timeout=600.0, timeout_seconds=None):
        args = {"script": script}
        if dependencies:
            args["dependencies"] = dependencies
        if timeout_seconds is not None:
            args["timeout_seconds"] = timeout_seconds
        return self.call_tool("execute_python", args, timeout=timeout)

    def close(self, wait=10.0):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            try:
                self.proc.stdout.close()
            except OSError:
                pass


def result_text(result):
    """The text of a CallToolResult, all text blocks joined."""
    if not isinstance(result, dict):
        return ""
    return "\n".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


def result_ok(result, expect=None):
    """Did the run succeed (and print expect)? Works for both servers' formats."""
    if not isinstance(result, dict) or result.get("isError"):
        return False
    text = result_text(result)
    if "exit_code: " in text and "exit_code: 0" not in text:
        return False  # the reference never sets isError; its text says the exit code
    sc = result.get("structuredContent")
    if isinstance(sc, dict) and sc.get("exit_code") not in (None, 0):
        return False
    return expect is None or expect in text
