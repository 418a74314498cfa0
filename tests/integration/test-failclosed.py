#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fail closed: when bubblewrap is missing or cannot make namespaces, no
script runs — execution tools say why and how to fix it — while the other
tools keep working. There is no unsandboxed fallback."""

import os

from mcptest import executable, scratch
from mcptest import Daemon, check, eq, main, need_pythons, test

MARKER = "/tmp/mcptest-failclosed-ran"


def fake_bwrap(message, code=1):
    """A bwrap that fails the way a host without user namespaces makes it fail."""
    d = scratch("mcptest-fakebwrap-")
    path = os.path.join(d, "bwrap")
    executable(path, "#!/bin/sh\n"
               '[ "$1" = --version ] && { echo "bubblewrap 0.8.0"; exit 0; }\n'
               f"echo 'bwrap: {message}' >&2\nexit {code}\n")
    return path


def check_refuses(d, *fix_words):
    c = d.client()
    c.initialize()
    script = f"open('{MARKER}', 'w').write('ran')\nprint('ran')"
    r = c.call_tool("execute_python", {"script": script})
    text = c.text(r)
    check(r["isError"], f"a run without a working sandbox must fail: {text}")
    check("exit_code" not in r["structuredContent"], f"no exit code, nothing ran: {r['structuredContent']}")
    check("ran\n" not in text, "the script's output must not appear")
    check(not os.path.exists(MARKER), "the script ran on the host")
    for w in fix_words:
        check(w in text, f"the error should say {w!r}: {text}")

    # The other tools keep working, and say what is wrong.
    env = c.call_tool("check_environment")
    eq(env["structuredContent"]["sandbox"]["working"], False, "check_environment sees the broken sandbox")
    check(env["isError"], "check_environment flags it")
    v = c.call_tool("validate_script", {"script": "print(1)"})
    check(not v["isError"] and c.text(v).startswith("VALID"), c.text(v))
    eq(c.result("ping"), {}, "ping")
    tools = {t["name"] for t in c.result("tools/list")["tools"]}
    check("execute_python" in tools, tools)

    # Persistent sandboxes refuse too.
    s = c.call_tool("create_sandbox", {})
    check(s["isError"], f"create_sandbox without a sandbox: {c.text(s)}")
    eq(c.close(), 0)


@test
def missing_bwrap_refuses_runs_and_names_the_fix():
    need_pythons("3.11")
    with Daemon(args=["--bwrap=/nonexistent/bwrap", "--persistent-sandboxes"]) as d:
        check_refuses(d, "bubblewrap", "apt install bubblewrap")
        check("Refusing to run scripts" in d.log(), d.log())


@test
def no_user_namespaces_refuses_runs_and_names_the_fix():
    need_pythons("3.11")
    bwrap = fake_bwrap("setting up uid map: Permission denied")
    with Daemon(args=[f"--bwrap={bwrap}", "--persistent-sandboxes"]) as d:
        check_refuses(d, "kernel.apparmor_restrict_unprivileged_userns", "RestrictNamespaces")


if __name__ == "__main__":
    main()
