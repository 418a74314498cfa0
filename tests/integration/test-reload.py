#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""SIGHUP reloads the configuration file: what can change while running
takes effect for the next call, a broken file changes nothing, and a
setting read only at start-up says it needs a restart."""

import os
import signal
import tempfile
import time

from mcptest import Daemon, check, eq, main, need_pythons, test


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


if __name__ == "__main__":
    main()
