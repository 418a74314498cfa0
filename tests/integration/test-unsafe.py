#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test of unsafe-no-sandbox, the development switch.

Without the switch a daemon whose bubblewrap is missing fails closed (see
test-failclosed.py). With it, scripts run without any sandbox, as the
daemon's user, in a private temporary work directory that is removed after
the run: on a machine without bubblewrap at all. The TOML reader of script
metadata and the pre-started pool go the same way; timeouts still kill the
run; check_environment says first that there is no sandbox; persistent
sandboxes are refused with an error naming the switch; every result says the
run was not sandboxed. A reload may turn the switch on and off.

Needs $DAEMON and $SHIM and a pyenv Python >= 3.11; the one test of a
sandboxed run needs a working bubblewrap. Exit status: 0 pass, 1 fail, 77 skip.
"""

import os
import re
import signal
import time
import uuid

from mcptest import at_exit, scratch
from mcptest import Daemon, check, children, eq, main, need_pythons, processes_with, skip, test, wait_until

BANNER = "WARNING: this run was not sandboxed: the server runs with unsafe-no-sandbox=yes"
WARNING = "Running scripts WITHOUT a sandbox (unsafe-no-sandbox=yes)"
UNSAFE_ARGS = ["--bwrap=/nonexistent/bwrap", "--unsafe-no-sandbox"]

_STATE = {}


def daemon(name, args):
    """One daemon per configuration for the whole file, with a $TMPDIR of its own (d.tmp)."""
    need_pythons("3.11")
    d = _STATE.get(name)
    if d is None or not d.alive():
        tmp = scratch("mcptest-unsafe-tmp-")
        d = Daemon(args=args, env={"TMPDIR": tmp})
        d.tmp = tmp
        _STATE[name] = d
        at_exit(d.close)
    return d


def full_log(d):
    with open(d.log_path, "rb") as f:
        return f.read().decode(errors="replace")


def run_dirs(d):
    return [p for p in os.listdir(d.tmp) if p.startswith("mcp-python-sandbox-run-")]


def unsafe_daemon():
    """No bubblewrap on this "machine", and the switch on."""
    return daemon("unsafe", UNSAFE_ARGS)


def client(d):
    c = d.client()
    c.initialize()
    at_exit(lambda: c.kill() if c.proc.poll() is None else None)
    return c


def execute(c, script, **args):
    r = c.call_tool("execute_python", {"script": script, **args}, timeout=180)
    return r, r.get("structuredContent") or {}, c.text(r)


def succeeded(r, st, text, what="run"):
    """The run's stdout. A run that writes out/ files has no structuredContent (they come back in content[]):
    then the text says it."""
    check(r.get("isError") is False, f"{what}: isError is {r.get('isError')!r}: {text[:3000]}")
    check("--- exit_code: 0 ---\n" in text, f"{what}: exit_code ({text[:3000]})")
    if st:
        eq(st.get("exit_code"), 0, f"{what}: exit_code ({text[:3000]})")
        return st["stdout"]
    m = re.search(r"^--- stdout ---\n(.*?)^--- (?:stderr|exit_code)", text, re.S | re.M)
    return m.group(1) if m else ""


def facts(stdout):
    """key=value lines the scripts print."""
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


# A script that tells where it ran, reads a host file and writes an output file.
WHERE = ("import os, stat, sys\n"
         "print('cwd=' + os.getcwd())\n"
         "print('file=' + __file__)\n"
         "print('home=' + os.environ['HOME'])\n"
         "print('tmpdir=' + os.environ['TMPDIR'])\n"
         "print('mode=%o' % stat.S_IMODE(os.stat(__file__).st_mode))\n"
         "print('uid=%d' % os.getuid())\n"
         "print('venv=' + os.environ['VIRTUAL_ENV'])\n"
         "print('executable=' + sys.executable)\n"
         "os.makedirs('out', exist_ok=True)\n"
         "open('out/result.txt', 'w').write('written\\n')\n"
         "open(os.path.join(os.environ['TMPDIR'], 'scratch'), 'w').write('x')\n")


def run_dir_of(cwd):
    """The per-run directory: RUN/work is the work directory."""
    check(os.path.basename(cwd) == "work", f"the work directory is RUN/work: {cwd}")
    return os.path.dirname(cwd)


def gone(path, what):
    wait_until(lambda: not os.path.lexists(path), 10, f"{what} ({path}) to be removed")


# --- the switch on -----------------------------------------------------------------

@test
def unsandboxed_run_works_without_bwrap():
    d = unsafe_daemon()
    host = scratch("mcptest-unsafe-host-")
    secret = "mcpt-host-file-" + uuid.uuid4().hex
    with open(os.path.join(host, "secret.txt"), "w") as f:
        f.write(secret)
    c = client(d)
    script = WHERE + f"print('host=' + open({os.path.join(host, 'secret.txt')!r}).read())\nprint('done')\n"
    r, st, text = execute(c, script)
    out = succeeded(r, st, text)
    f = facts(out)
    check(out.endswith("done\n"), f"the script ran to its end: {out!r}")
    eq(f.get("host"), secret, "the host's files are there (no sandbox)")
    cwd = f["cwd"]
    check(cwd != "/work" and not cwd.startswith("/work/"), f"the work directory is not /work: {cwd}")
    run = run_dir_of(cwd)
    eq(os.path.dirname(run), d.tmp, "the run's directory is in the daemon's $TMPDIR")
    check(os.path.basename(run).startswith("mcp-python-sandbox-run-"), f"the run's directory: {run}")
    eq(f["file"], os.path.join(cwd, "script.py"), "__file__: the script in the work directory")
    eq(f["home"], cwd, "HOME is the work directory")
    eq(f["tmpdir"], os.path.join(run, "tmp"), "TMPDIR is the run's own")
    eq(f["mode"], "444", "the script file is read-only, as in the sandbox")
    if os.getuid() == 0:
        # Never as root, not even without a sandbox: a uid of its own from sandbox-uid-range.
        check(2063597568 <= int(f["uid"]) <= 2063663103, f"a root daemon's unsandboxed script ran as uid {f['uid']}")
    else:
        eq(int(f["uid"]), os.getuid(), "the script runs as the daemon's user")
    check(os.path.isdir(f["venv"]) and f["executable"].startswith(f["venv"] + "/"),
          f"the environment is used where it is on the host: {f}")
    # Everything of the run goes with it.
    gone(run, "the run's directory")
    check(WARNING in full_log(d), f"the daemon warns at start-up: {d.log()}")
    d.wait_notify("WITHOUT a sandbox (unsafe-no-sandbox=yes)")
    c.close()


@test
def every_result_says_it_was_not_sandboxed():
    # The banner and "sandboxed": false come from execute_python (runtime_unsandboxed_banner()).
    d = unsafe_daemon()
    c = client(d)
    r, st, text = execute(c, WHERE)
    succeeded(r, st, text)
    first = next((x.get("text", "") for x in r["content"] if x.get("type") == "text"), "")
    check(first.startswith(BANNER), f"the first text content is the banner: {first[:500]!r}")
    check("--- file out/result.txt" in text, f"out/ of the work directory comes back: {text[:2000]!r}")
    check("structuredContent" not in r, "a result with a file has no structuredContent")
    r, st, text = execute(c, "print(1)\n")
    succeeded(r, st, text)
    eq(st.get("sandboxed"), False, "structuredContent.sandboxed")
    check(st.get("sandbox_warning", "").startswith(BANNER), f"structuredContent.sandbox_warning: {st}")
    check(text.startswith(BANNER), f"the banner first: {text[:500]!r}")
    c.close()


@test
def a_daemon_stopped_right_after_runs_leaves_no_run_directory():
    """The answer goes out before the run's process is gone (it is reaped in the background): a daemon that stops
    then still reaps it and removes its directory."""
    d = daemon("unsafe-stop", UNSAFE_ARGS)
    c = client(d)
    for i in range(3):
        r, st, text = execute(c, WHERE + "import time\nclass Slow:\n    def __del__(self):\n        time.sleep(60)\n"
                                         "keep = Slow()\n")
        succeeded(r, st, text, f"run {i}")
    d.stop()
    eq(run_dirs(d), [], "run directories left behind by a daemon stopped right after its runs")
    c.close()


@test
def pep723_metadata_is_read_without_the_sandbox():
    d = unsafe_daemon()
    c = client(d)
    mark = uuid.uuid4().hex
    script = ("# /// script\n"
              f"# # {mark}\n"
              "# requires-python = \"\\u003e=3.11\"\n"   # an escape: tomllib's to read (src/pep723/toml-subset.h)
              "# dependencies = []\n"
              "# ///\n"
              "import sys\n"
              "print('new enough:', sys.version_info >= (3, 11))\n")
    readers = full_log(d).count("Reading a metadata block")
    r, st, text = execute(c, script)
    eq(succeeded(r, st, text, "PEP 723 script"), "new enough: True\n", "stdout")
    check(full_log(d).count("Reading a metadata block") > readers, f"the TOML reader ran: {d.log()}")
    # Its directory is gone, too (this daemon pre-starts nothing: no directory should be left).
    wait_until(lambda: not run_dirs(d), 10, f"no run directory left in {d.tmp}: {run_dirs(d)}")
    c.close()


@test
def check_environment_says_there_is_no_sandbox():
    d = unsafe_daemon()
    c = d.client()
    init = c.initialize()
    check("WITHOUT a sandbox" in init.get("instructions", ""), f"the server's instructions say so: {init}")
    r = c.call_tool("check_environment")
    text = c.text(r)
    sb = r["structuredContent"]["sandbox"]
    eq(r.get("isError"), False, f"scripts can run, so not an error: {text}")
    eq(sb.get("enabled"), False, "sandbox.enabled")
    eq(sb.get("mode"), "none", "sandbox.mode")
    eq(sb.get("working"), False, "sandbox.working")
    check("unsafe-no-sandbox=yes" in sb.get("warning", ""), f"sandbox.warning: {sb}")
    check("bwrap_self_test" in sb and sb["bwrap_self_test"] != "passed", f"bwrap is missing here: {sb}")
    first = text.splitlines()[0]
    check(first.startswith("No sandbox:") and "without any sandbox" in first and "unsafe-no-sandbox=yes" in first,
          f"the text says it first: {text}")
    check("WITHOUT" not in first and "WARNING" not in first, f"in words, not capitals: {first}")
    c.close()


@test
def clients_are_told_before_they_call():
    """The tool list says it: execute_python's description, and no persistent sandboxes offered."""
    d = unsafe_daemon()
    c = client(d)
    tools = {t["name"]: t for t in c.result("tools/list")["tools"]}
    eq(sorted(tools), ["check_environment", "execute_python", "validate_script"], "the tools offered")
    ep = tools["execute_python"]
    check(ep["description"].startswith("DEVELOPMENT SERVER WITHOUT A SANDBOX"), f"the description: {ep['description']}")
    for promise in ("locked-down", "no network", "network off", "no access to the user's files", "/work/out",
                    "Nothing persists"):
        check(promise not in ep["description"], f"it promises {promise!r}: {ep['description']}")
    check("This server: no sandbox, the host's network and files;" in ep["description"], ep["description"])
    r = c.request("tools/call", {"name": "create_sandbox", "arguments": {}})
    check("error" in r and "Unknown tool" in r["error"].get("message", ""), f"create_sandbox is not there: {r}")
    s = c.request("tools/call", {"name": "get_sandbox_status", "arguments": {}})
    check("error" in s, f"get_sandbox_status is not there either: {s}")
    c.close()


@test
def timeout_kills_an_unsandboxed_run():
    d = unsafe_daemon()
    c = client(d)
    mark = "mcpt-unsafe-timeout-" + uuid.uuid4().hex
    script = ("import os, subprocess, sys, time\n"
              "print('cwd=' + os.getcwd(), flush=True)\n"
              f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {mark!r}])\n"
              f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', {mark!r}])\n")
    t0 = time.monotonic()
    r, st, text = execute(c, script, timeout_seconds=1)
    elapsed = time.monotonic() - t0
    check(r.get("isError") is True, f"a timed-out run is an error: {text[:2000]}")
    eq(st.get("timed_out"), True, "timed_out")
    check(elapsed < 10, f"the call returned after {elapsed:.1f}s, want about 1s")
    wait_until(lambda: not processes_with(mark), 5, "the run's processes to be gone")
    gone(run_dir_of(facts(st.get("stdout", ""))["cwd"]), "the timed-out run's directory")
    c.close()


@test
def prestarted_runs_go_without_the_sandbox_too():
    d = daemon("unsafe-prestart", [*UNSAFE_ARGS, "--prestart=1"])
    c = client(d)
    succeeded(*execute(c, "pass\n"), "the run that registers the environment")

    def waiting():
        # A pre-started process waits for its script: its run directory is there, the script file not yet (a run
        # that was just answered may still be exiting, with both).
        found = []
        for p in children(d.proc.pid):
            args = [a for a in _cmdline(p).split(b"\0") if b"mcp-python-sandbox-run-" in a]
            if args:
                script = args[0].decode()
                if os.path.isdir(os.path.dirname(script)) and not os.path.exists(script):
                    found.append(p)
        return found
    # Two wait after that run: one for whoever comes first and one for this user (which a run takes first).
    pids = wait_until(lambda: len(waiting()) >= 2 and waiting(), 15, "the two pre-started processes")
    waiting_scripts = {next(a for a in _cmdline(p).split(b"\0") if b"mcp-python-sandbox-run-" in a).decode()
                       for p in pids}
    # Without the out/ file: a result with one has no structuredContent, which says "prestarted".
    r, st, text = execute(c, WHERE.replace("open('out/result.txt', 'w').write('written\\n')\n", ""))
    f = facts(succeeded(r, st, text, "pre-started run"))
    eq(st.get("prestarted"), True, f"the run was handed the pre-started process: {st}")
    check(f["file"] in waiting_scripts,
          f"the script went where a pre-started process waited for it: {f['file']} not in {waiting_scripts}")
    eq(f["mode"], "444", "the script file is read-only")
    gone(run_dir_of(f["cwd"]), "the pre-started run's directory")
    # A reload stops the one waiting now, and its directory goes.
    nxt = wait_until(waiting, 15, "the next pre-started process")[0]
    nxt_dir = run_dir_of(os.path.dirname(
        next(a for a in _cmdline(nxt).split(b"\0") if b"mcp-python-sandbox-run-" in a).decode()))
    d.proc.send_signal(signal.SIGHUP)
    gone(nxt_dir, "the flushed pre-started process's directory")
    c.close()


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


# --- the switch off ------------------------------------------------------------------

@test
def without_the_switch_a_missing_bwrap_fails_closed():
    d = daemon("closed", ["--bwrap=/nonexistent/bwrap"])
    c = client(d)
    marker = os.path.join(scratch("mcptest-unsafe-closed-"), "ran")
    r, st, text = execute(c, f"open({marker!r}, 'w').write('ran')\nprint('ran')\n")
    check(r.get("isError") is True, f"no sandbox, no run: {text}")
    check("bwrap" in text, f"the error names bwrap: {text}")
    check(not os.path.exists(marker), "the script ran on the host")
    check(st.get("sandboxed") is not False, f"nothing ran unsandboxed: {st}")
    check(WARNING not in full_log(d), "no warning about a switch that is off")
    c.close()


@test
def a_reload_turns_the_switch_on_and_off():
    need_pythons("3.11")
    conf = os.path.join(scratch("mcptest-unsafe-conf-"), "mcp-python-sandboxd.conf")
    open(conf, "w").close()
    with Daemon(args=["--bwrap=/nonexistent/bwrap", f"--config={conf}", "--persistent-sandboxes"]) as d:
        c = client(d)
        r, st, text = execute(c, "print('hi')\n")
        check(r.get("isError") is True, f"off: no run: {text}")

        with open(conf, "w") as f:
            f.write("unsafe-no-sandbox = yes\n")
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: WARNING in full_log(d), 10, "the warning after the reload")
        d.wait_notify("WITHOUT a sandbox")
        r, st, text = execute(c, "import os\nprint(os.getcwd())\n")
        out = succeeded(r, st, text, "after turning it on")
        check(out.strip() != "/work", f"ran without the sandbox: {out!r}")
        names = [t["name"] for t in c.result("tools/list")["tools"]]
        check("create_sandbox" not in names, f"the tool list follows the switch: {names}")

        with open(conf, "w") as f:
            f.write("unsafe-no-sandbox = no\n")
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "unsafe-no-sandbox turned off" in full_log(d), 10, "the reload turning it off")
        # bwrap is still missing.
        r, st, text = execute(c, "print('hi')\n")
        check(r.get("isError") is True and "bwrap" in text, f"off again: fails closed: {text}")
        env = c.call_tool("check_environment")
        eq(env["structuredContent"]["sandbox"].get("enabled"), True, "sandbox.enabled")
        c.close()


@test
def a_run_started_in_the_sandbox_stays_sandboxed_across_a_reload():
    """A reload that turns the switch on while a sandboxed run goes on: that run's result still says sandboxed."""
    need_pythons("3.11")
    conf = os.path.join(scratch("mcptest-unsafe-conf-"), "mcp-python-sandboxd.conf")
    open(conf, "w").close()
    with Daemon(args=[f"--config={conf}"]) as d:
        c = client(d)
        env = c.call_tool("check_environment")
        if not env["structuredContent"]["sandbox"].get("working"):
            skip("the sandbox does not work on this machine")
        rid = c.new_id()
        c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                "params": {"name": "execute_python",
                           "arguments": {"script": "import os, time\ntime.sleep(3)\nprint(os.getcwd())\n"}}})
        # Its Python is running (its environment may take a while to build on a busy machine): the switch comes after.
        wait_until(lambda: any(b"/work/script.py" in _cmdline(p) for p in children(d.proc.pid)), 30,
                   "the run's Python")
        with open(conf, "w") as f:
            f.write("unsafe-no-sandbox = yes\n")
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: WARNING in full_log(d), 10, "the warning after the reload")
        reply = c.wait_for(rid, timeout=60)
        st = reply["result"]["structuredContent"]
        # A sandboxed run's result leaves "sandboxed" out (it says so only when false).
        eq((st.get("stdout"), st.get("sandboxed", True)), ("/work\n", True), "the run that started in the sandbox")
        check(BANNER not in c.text(reply["result"]), "no banner on it")
        r, st, text = execute(c, "import os\nprint(os.getcwd())\n")
        eq(st.get("sandboxed"), False, f"the next run goes without: {text}")
        c.close()


@test
def sandboxed_runs_say_so():
    # "sandboxed": true comes from execute_python.
    d = daemon("sandboxed", [])
    c = client(d)
    env = c.call_tool("check_environment")
    sb = env["structuredContent"]["sandbox"]
    if not sb.get("working"):
        skip(f"the sandbox does not work on this machine: {sb.get('error')}")
    eq(sb.get("enabled"), True, "sandbox.enabled")
    eq(sb.get("mode"), "bwrap", "sandbox.mode")
    check("warning" not in sb, f"no warning: {sb}")
    check(not c.text(env).startswith("No sandbox"), c.text(env))
    r, st, text = execute(c, "import os\nprint(os.getcwd())\n")
    eq(succeeded(r, st, text), "/work\n", "in the sandbox")
    check(BANNER not in text, f"no banner: {text}")
    # Lean: said only when false.
    check("sandboxed" not in st and "sandbox_warning" not in st, f"structuredContent of a sandboxed run: {st}")
    c.close()


if __name__ == "__main__":
    main()
