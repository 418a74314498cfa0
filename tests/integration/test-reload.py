#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""SIGHUP reloads the configuration file: what can change while running
takes effect for the next call, a broken file changes nothing, and a
setting read only at start-up says it needs a restart."""

import os
import signal
import tempfile
import time

from mcptest import Daemon, check, eq, main, modern_meta, need_pythons, test


def wait_log(d, text, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in d.log():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the daemon's log: {d.log()}")


@test
def sighup_applies_reloadable_settings():
    need_pythons("3.11")
    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    conf.write("[Daemon]\ndefault-timeout = 30\n")
    conf.close()
    try:
        with Daemon(args=[f"--config={conf.name}"]) as d:
            c = d.client()
            c.initialize()
            r = c.call_tool("execute_python", {"script": "import time; time.sleep(3); print('slept')"})
            check(not r["isError"] and "slept" in c.text(r), c.text(r))

            with open(conf.name, "w") as f:
                f.write("[Daemon]\ndefault-timeout = 1\npython-versions = 3.11\n")
            d.proc.send_signal(signal.SIGHUP)
            wait_log(d, "Reloaded: ")
            check("default-timeout changed" in d.log(), d.log())
            check("python-versions changed, but takes effect only after a restart" in d.log(), d.log())

            # The same call on the same connection now meets the new default.
            t0 = time.monotonic()
            r = c.call_tool("execute_python", {"script": "import time; time.sleep(3); print('slept')"})
            eq(r["structuredContent"]["timed_out"], True, "timed out under the reloaded default")
            eq(r["structuredContent"]["timeout_seconds"], 1, "timeout_seconds")
            check(time.monotonic() - t0 < 2.8, "it did not wait for the old default")

            # A broken file changes nothing, and the daemon keeps serving.
            with open(conf.name, "w") as f:
                f.write("[Daemon]\ndefault-timeout = 10\nno-such-setting = 1\n")
            d.proc.send_signal(signal.SIGHUP)
            wait_log(d, "keeping the running one")
            check("no-such-setting" in d.log(), "the error names the key")
            r = c.call_tool("execute_python", {"script": "import time; time.sleep(3)"})
            eq(r["structuredContent"]["timeout_seconds"], 1, "still the last good value")
            check(d.alive(), "the daemon is still running")
            eq(c.close(), 0)
    finally:
        os.unlink(conf.name)


def tool_list(c, modern=False):
    r = c.result("tools/list", {"_meta": modern_meta()} if modern else None)
    return {t["name"]: t for t in r["tools"]}


@test
def tool_list_states_the_live_configuration_and_follows_a_reload():
    """The run tools' descriptions and schemas say how this server is set up; a reload that changes that, or the
    tools offered, is announced to initialized clients (notifications/tools/list_changed), and only then."""
    need_pythons("3.11")
    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    conf.write("[Daemon]\nnetwork = no\nmax-timeout = 300\nmax-memory = 512M\noutput-cap = 16K\n")
    conf.close()
    try:
        with Daemon(args=[f"--config={conf.name}"]) as d:
            c = d.client()
            init = c.initialize()
            eq(init["capabilities"]["tools"], {"listChanged": True}, "tools capability")
            for modern in (False, True):
                tools = tool_list(c, modern)
                eq(sorted(tools), ["check_environment", "execute_python", "validate_script"],
                   "one-shot tools only by default")
                ep = tools["execute_python"]
                # The whole line: every part of it is the live configuration.
                eq(ep["description"].splitlines()[-1],
                   "This server: network off; /work and /tmp 128 MiB each; timeout 30 s by default, 300 s at most; "
                   "memory 512 MiB; output: 8 KiB per stream kept (beginning and end); packages from wheels only "
                   "(no source builds).", "the live line")
                eq(ep["inputSchema"]["properties"]["timeout_seconds"]["maximum"], 300, "the timeout's maximum")
            c.expect_silence(0.5)

            with open(conf.name, "w") as f:
                f.write("[Daemon]\nnetwork = yes\nmax-timeout = 60\npersistent-sandboxes = yes\n"
                        "allow-source-builds = yes\nmax-memory = 2G\noutput-cap = 64K\ntmpfs-size = 64M\n")
            d.proc.send_signal(signal.SIGHUP)
            wait_log(d, "Reloaded: ")
            eq(c.read_message(10), {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
               "the reload is announced")
            tools = tool_list(c)
            check("create_sandbox" in tools and "execute_code" in tools, f"persistent sandboxes: {sorted(tools)}")
            for name in ("execute_python", "execute_code"):
                t = tools[name]
                eq(t["description"].splitlines()[-1],
                   "This server: network on; /work and /tmp 64 MiB each; timeout 30 s by default, 60 s at most; "
                   "memory 2 GiB; output: 32 KiB per stream kept (beginning and end); packages from wheels or "
                   "built from source.", f"{name}: the live line")
                eq(t["inputSchema"]["properties"]["timeout_seconds"]["maximum"], 60, f"{name}: the timeout's maximum")

            # max-sandboxes = 0 withdraws them, whatever persistent-sandboxes says.
            with open(conf.name, "w") as f:
                f.write("[Daemon]\nnetwork = yes\nmax-timeout = 60\npersistent-sandboxes = yes\n"
                        "allow-source-builds = yes\nmax-memory = 2G\noutput-cap = 64K\ntmpfs-size = 64M\nmax-sandboxes = 0\n")
            d.proc.send_signal(signal.SIGHUP)
            wait_log(d, "Reloaded: 1 setting changed")
            eq(c.read_message(10).get("method"), "notifications/tools/list_changed", "announced again")
            eq(sorted(tool_list(c)), ["check_environment", "execute_python", "validate_script"],
               "no persistent-sandbox tools with max-sandboxes = 0")

            # A change the tool list does not show: no announcement.
            n = d.log().count("Reloaded: ")
            with open(conf.name, "w") as f:
                f.write("[Daemon]\nnetwork = yes\nmax-timeout = 60\npersistent-sandboxes = yes\n"
                        "allow-source-builds = yes\nmax-memory = 2G\noutput-cap = 64K\ntmpfs-size = 64M\nmax-sandboxes = 0\nmax-queue = 7\n")
            d.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while d.log().count("Reloaded: ") == n and time.monotonic() < deadline:
                time.sleep(0.05)
            c.expect_silence(1)
            eq(c.close(), 0)
    finally:
        os.unlink(conf.name)


if __name__ == "__main__":
    main()
