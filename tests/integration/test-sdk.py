#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A real MCP client against the real shim: the official Python SDK (`mcp`
from PyPI), in a throwaway venv cached under $TMPDIR, launches the shim as a
stdio server, once with a daemon behind it and once with none (the shim then
falls back to mcp-python-sandboxd --stdio). In each it connects three ways:
the legacy initialize handshake, the SDK's automatic era negotiation (which
must settle on the modern 2026-07-28 revision through server/discover), and
the low-level stdio_client + ClientSession pair; lists the tools, calls
check_environment and checks the result.

The SDK client runs as a subprocess of the venv's python. The test skips only
when the package index cannot be reached (and fails then under
MCP_SANDBOX_REQUIRE_ALL=1). MCP_SDK_VERSION picks the SDK release.
"""

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request

from mcptest import DAEMON, MODERN, SHIM, Daemon, check, default_daemon_args, eq, main, skip, test

SDK_VERSION = os.environ.get("MCP_SDK_VERSION", "2.3.0")
LATEST_LEGACY = "2025-11-25"

CLIENT = r'''
import json
import sys

import anyio
import mcp
from mcp import Client, ClientSession, StdioServerParameters, stdio_client

spec = json.loads(sys.argv[1])
params = StdioServerParameters(command=spec["command"], args=spec["args"], env=spec["env"])


def describe(tools, result):
    return {
        "tools": {t.name: {"input_type": t.input_schema.get("type"), "has_output_schema": t.output_schema is not None}
                  for t in tools.tools},
        "is_error": result.is_error,
        "structured": result.structured_content,
        "text": "".join(getattr(c, "text", "") for c in result.content),
    }


async def high_level(mode):
    async with Client(params, mode=mode) as c:
        tools = await c.list_tools()
        result = await c.call_tool("check_environment", {})
        info = c.server_info
        return dict(describe(tools, result), protocol_version=c.protocol_version,
                    server_name=info.name if info else None)


async def low_level():
    async with stdio_client(params) as streams:
        async with ClientSession(*streams) as s:
            init = await s.initialize()
            tools = await s.list_tools()
            result = await s.call_tool("check_environment", {})
            await s.send_ping()
            # Results without an outputSchema: structured when there is nothing but text, else content[] alone.
            hello = await s.call_tool("execute_python", {"script": "print('sdk-hello')"})
            files = await s.call_tool("execute_python", {"script": "open('/work/out/b.bin', 'wb').write(bytes(8))"})
            runs = {name: {"structured": r.structured_content, "types": [c.type for c in r.content],
                           "is_error": r.is_error} for name, r in (("hello", hello), ("files", files))}
            return dict(describe(tools, result), protocol_version=init.protocol_version,
                        server_name=init.server_info.name, runs=runs)


async def run():
    out = {"sdk": mcp.__name__}
    with anyio.fail_after(60):
        out["legacy"] = await high_level("legacy")
        out["auto"] = await high_level("auto")
        out["session"] = await low_level()
    print(json.dumps(out))


anyio.run(run)
'''


def index_url():
    for k in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"):
        if os.environ.get(k):
            return os.environ[k]
    return "https://pypi.org/simple/"


def index_reachable():
    url = index_url().rstrip("/") + "/mcp/"
    try:
        with urllib.request.urlopen(url, timeout=15) as r:
            return r.status < 500
    except Exception:  # noqa: BLE001 - any failure means "not reachable"
        return False


def run(argv, what):
    r = subprocess.run(argv, capture_output=True, timeout=600)
    if r.returncode != 0:
        if not index_reachable():
            skip(f"the package index ({index_url()}) cannot be reached: {what} failed")
        raise AssertionError(f"{what} failed ({r.returncode}): {r.stderr.decode(errors='replace')[-3000:]}")


def sdk_python():
    """The venv's python with mcp==SDK_VERSION, made once and kept for later runs."""
    base = os.environ.get("TMPDIR") or tempfile.gettempdir()
    venv = os.path.join(base, f"mcp-sdk-venv-{SDK_VERSION}")
    py = os.path.join(venv, "bin", "python")
    ready = os.path.join(venv, ".mcptest-ready")
    with open(venv + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)     # parallel runs build it once
        if os.path.exists(ready):
            return py
        shutil.rmtree(venv, ignore_errors=True)
        uv = shutil.which("uv") or ("/usr/local/bin/uv" if os.access("/usr/local/bin/uv", os.X_OK) else None)
        if uv:
            run([uv, "venv", "-q", "--python", sys.executable, venv], "uv venv")
            run([uv, "pip", "install", "-q", "--python", py, f"mcp=={SDK_VERSION}"], f"uv pip install mcp=={SDK_VERSION}")
        else:
            run([sys.executable, "-m", "venv", venv], "python3 -m venv")
            run([py, "-m", "pip", "install", "-q", f"mcp=={SDK_VERSION}"], f"pip install mcp=={SDK_VERSION}")
        r = subprocess.run([py, "-c", "import mcp, importlib.metadata as m; print(m.version('mcp'))"],
                           capture_output=True, timeout=120)
        eq(r.returncode, 0, f"importing mcp in the venv: {r.stderr.decode(errors='replace')[-2000:]}")
        eq(r.stdout.decode().strip(), SDK_VERSION, "installed SDK version")
        with open(ready, "w") as f:
            f.write(SDK_VERSION + "\n")
        return py


def run_client(py, spec, what):
    with tempfile.NamedTemporaryFile("w", prefix="mcptest-sdk-", suffix=".py", delete=False) as f:
        f.write(CLIENT)
        script = f.name
    try:
        r = subprocess.run([py, script, json.dumps(spec)], capture_output=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    finally:
        os.unlink(script)
    err = r.stderr.decode(errors="replace")
    eq(r.returncode, 0, f"{what}: the SDK client failed: {err[-4000:]}")
    try:
        return json.loads(r.stdout.decode().strip().splitlines()[-1]), err
    except (ValueError, IndexError):
        raise AssertionError(f"{what}: no result from the SDK client: {r.stdout[-1000:]!r} {err[-2000:]}")


def check_run(out, what, version, structured):
    eq(out["protocol_version"], version, f"{what}: negotiated version")
    eq(out["server_name"], "mcp-python-sandbox", f"{what}: server name")
    check("check_environment" in out["tools"], f"{what}: tools: {sorted(out['tools'])}")
    eq(out["tools"]["check_environment"]["input_type"], "object", f"{what}: inputSchema type")
    eq(out["tools"]["check_environment"]["has_output_schema"], False, f"{what}: no outputSchema")
    eq(out["is_error"], False, f"{what}: isError")
    check("mcp-python-sandboxd" in out["text"], f"{what}: text {out['text'][:300]!r}")
    sc = out["structured"]
    check(isinstance(sc, dict), f"{what}: no structuredContent")
    check(MODERN in sc["protocol_versions"] and LATEST_LEGACY in sc["protocol_versions"],
          f"{what}: protocol_versions {sc['protocol_versions']}")
    check(isinstance(sc["bwrap"].get("available"), bool) and isinstance(sc["uv"].get("available"), bool),
          f"{what}: bwrap/uv facts {sc}")


def check_all(out, what):
    check_run(out["legacy"], f"{what}, legacy", LATEST_LEGACY, True)
    check_run(out["auto"], f"{what}, auto", MODERN, True)
    check_run(out["session"], f"{what}, ClientSession", LATEST_LEGACY, True)
    runs = out["session"]["runs"]
    eq((runs["hello"]["is_error"], (runs["hello"]["structured"] or {}).get("stdout")), (False, "sdk-hello\n"),
       f"{what}: a hello world's structuredContent through the SDK")
    eq((runs["files"]["is_error"], runs["files"]["structured"], runs["files"]["types"]),
       (False, None, ["text", "text", "resource"]), f"{what}: a run with a file: content[] only, the file a resource")


def need_programs():
    if not SHIM or not os.path.exists(SHIM) or not DAEMON or not os.path.exists(DAEMON):
        skip("SHIM and DAEMON must point to the built programs")


@test
def sdk_through_the_daemon():
    need_programs()
    py = sdk_python()
    with Daemon() as d:
        spec = {"command": SHIM, "args": [f"--socket={d.socket}", "--no-fallback"], "env": {}}
        out, err = run_client(py, spec, "through the daemon")
        check_all(out, "through the daemon")
        # Three sessions, each its own connection, all closed again.
        d.wait_notify("Serving 0 connections (3 since start)")
        check(d.alive(), "the daemon died")
        eq(d.stop(), 0, "daemon exit status")


@test
def sdk_with_the_stdio_fallback():
    need_programs()
    py = sdk_python()
    run_dir = tempfile.mkdtemp(prefix="mcptest-sdk-stdio-")
    os.chmod(run_dir, 0o711)   # a root daemon's sandbox uids pass through it to the cache
    try:
        wrapper = os.path.join(run_dir, "mcp-python-sandboxd")
        with open(wrapper, "w") as f:
            extra = " ".join("'" + a.replace("'", "'\\''") + "'" for a in default_daemon_args())
            f.write(f"#!/bin/sh\nexec '{DAEMON}' \"$@\" {extra}\n")
        os.chmod(wrapper, 0o755)
        spec = {"command": SHIM, "args": [], "env": {
            "MCP_PYTHON_SANDBOXD": wrapper,
            "XDG_RUNTIME_DIR": run_dir,
            "XDG_CACHE_HOME": os.path.join(run_dir, "cache"),
        }}
        out, err = run_client(py, spec, "--stdio fallback")
        check_all(out, "--stdio fallback")
        # The shim says on stderr (which the SDK passes through) that it fell back.
        check("--stdio" in err, f"the shim did not say it runs the daemon on stdio: {err[-1000:]!r}")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
