#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test of execute_python, validate_script and check_environment.

Through the real shim against the real daemon (socket activation, and the
shim's --stdio fallback): the result layout, failures, timeouts that kill the
whole process tree, output floods, PEP 723 dependencies from PyPI and from a
local index of wheels built here, environment reuse without uv, the sandbox's
isolation (proved by refused writes and absent paths), Python selection,
cancellation, progress and the run queue.

Over 800 lines, one file: many short independent tests of one tool family
sharing the local index of wheels and the helpers at the top, built once per
run.

Needs $DAEMON and $SHIM (set by `make check`), bubblewrap, uv and the pyenv
Pythons (tests skip without them); the PyPI tests skip when pypi.org cannot be
reached. Exit status as automake wants it: 0 pass, 1 fail, 77 skip.
"""

import glob
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid

from mcptest import RssGrowth, at_exit, scratch
from mcptest import (Daemon, UvLog, check, children, eq, main, need_pythons, need_pypi, need_uv, skip, stdio_client,
                     test, test_pythons, uv_path)
from mcptest import wait_until, processes_with, with_defaults
from wheels import build_wheel

# --- helpers -----------------------------------------------------------------

_STATE = {}


def shared_daemon(name, args, env=None, packages=True):
    """One daemon per configuration for the whole file (a warm cache is what we test, too).

    Its uv is a wrapper that logs every uv run (d.uvlog); packages=False: uv is
    not needed (scripts without dependencies never run it).
    """
    d = _STATE.get(name)
    if d is not None and d.alive():
        need_sandbox(d)
        return d
    uvlog = UvLog() if packages or uv_path() else None
    if uvlog:
        at_exit(uvlog.close)
    d = Daemon(args=([f"--uv={uvlog.path}"] if uvlog else []) + list(args), env=env)
    d.uvlog = uvlog
    _STATE[name] = d
    at_exit(d.close)
    need_sandbox(d)
    return d


def need_sandbox(d):
    """Skip (exit 77; a failure under MCP_SANDBOX_REQUIRE_ALL=1) where bubblewrap cannot work."""
    if "sandbox_error" not in _STATE:
        c = d.client()
        c.initialize()
        st = c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}
        c.close()
        sb = st.get("sandbox", {})
        _STATE["sandbox_error"] = None if sb.get("working") else sb.get("error", "the sandbox self-test failed")
    if _STATE["sandbox_error"]:
        skip(f"the sandbox does not work on this machine: {_STATE['sandbox_error']}")


HOST_SECRET = "mcpt-host-secret-" + uuid.uuid4().hex


def pypi_daemon():
    """Real PyPI (uv trusts the system CA store)."""
    need_pypi()
    return shared_daemon("pypi", [], env={"MCPT_HOST_SECRET": HOST_SECRET})


def wheel_dir():
    if "wheels" not in _STATE:
        w = scratch("mcptest-wheels-")
        build_wheel(w, "mcpt-alpha", "1.0", requires=["mcpt-beta>=1"], module_source="VALUE = 'alpha'\n")
        build_wheel(w, "mcpt-beta", "1.0")
        build_wheel(w, "mcpt-beta", "2.0")
        for n in ("mcpt-gamma", "mcpt-delta", "mcpt-epsilon"):
            build_wheel(w, n, "1.0")
        _STATE["wheels"] = w
    return _STATE["wheels"]


def local_daemon():
    """Packages only from a directory of wheels built here; no index, no network: deterministic."""
    return shared_daemon("local", [f"--find-links={wheel_dir()}", "--offline"])


def plain_daemon():
    """For scripts without dependencies."""
    return shared_daemon("plain", [], packages=False)


def newest_python():
    have = test_pythons()
    return max(have, key=lambda v: tuple(map(int, v.split(".")))) if have else None


def call(c, tool, args, timeout=180, meta=None):
    r = c.call_tool(tool, args, timeout=timeout, meta=meta)
    st = r.get("structuredContent") or {}
    # The lean result leaves fields at their usual values out (hello_world_layout_and_structured_content checks it).
    return r, with_defaults(st) if tool == "execute_python" else st, c.text(r)


def execute(c, script, timeout=180, **args):
    return call(c, "execute_python", {"script": script, **args}, timeout=timeout)


def succeeded(r, st, text, what="run"):
    check(r.get("isError") is False, f"{what}: isError is {r.get('isError')!r}: {text[:3000]}")
    eq(st.get("exit_code"), 0, f"{what}: exit_code ({text[:3000]})")
    return st["stdout"]


def run_ok(c, script, what="run", **args):
    r, st, text = execute(c, script, **args)
    return succeeded(r, st, text, what), st, text


def run_json(c, script, what="run", **args):
    out, st, text = run_ok(c, script, what, **args)
    try:
        return json.loads(out.strip().splitlines()[-1]), st
    except (ValueError, IndexError):
        raise AssertionError(f"{what}: no JSON on the last line of stdout: {text[:3000]}") from None


def failed(r, st, text, phase, what="call"):
    check(r.get("isError") is True, f"{what}: want isError true, got {r.get('isError')!r}: {text[:2000]}")
    eq(st.get("failed_phase"), phase, f"{what}: failed_phase ({text[:2000]})")
    return text


def sleeper(mark, seconds=600):
    """A script that becomes a process whose command line carries mark, and sleeps."""
    return ("import os, sys\n"
            f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep({seconds})', {mark!r}])\n")


def send_call(c, arguments, meta=None, tool="execute_python"):
    """Send a tools/call without waiting; returns its id."""
    rid = c.new_id()
    params = {"name": tool, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
    return rid


def reply_result(reply, what):
    check("result" in reply, f"{what}: want a result, got {json.dumps(reply)[:1000]}")
    r = reply["result"]
    return r, r.get("structuredContent") or {}, "".join(
        x.get("text", "") for x in r.get("content", []) if x.get("type") == "text")


SUCCESS_LAYOUT = re.compile(r"(--- stdout ---\n(?P<out>(?:.*\n)*?))?(--- stderr ---\n(?P<err>(?:.*\n)*?))?"
                            r"--- exit_code: (?P<code>-?\d+) ---\n--- duration_ms: (?P<ms>\d+) ---\n(?P<rest>(?:.*\n)*)")


def layout(text, what):
    m = SUCCESS_LAYOUT.fullmatch(text)
    check(m, f"{what}: the result text does not have the stdout/stderr/exit_code/duration_ms layout: {text!r}"[:2000])
    return m


# --- results -----------------------------------------------------------------

@test
def hello_world_layout_and_structured_content():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    tools = {t["name"]: t for t in c.result("tools/list")["tools"]}
    r, st, text = execute(c, "print('hello, world')\n")
    m = layout(text, "hello")
    eq(m.group("out"), "hello, world\n", "stdout section")
    check(m.group("err") is None, f"an empty stderr must leave out its section: {text!r}")
    eq(m.group("code"), "0", "exit code line")
    eq(m.group("rest"), "", "nothing after the duration line")
    eq(r.get("isError"), False, "isError")
    eq(st.get("exit_code"), 0, "exit_code")
    eq(st.get("stdout"), "hello, world\n", "structured stdout")
    # Lean: what is at its usual value is left out; every result is read by the model in every conversation.
    st = r["structuredContent"]
    eq(sorted(set(st) - {"prepare_ms"}), ["duration_ms", "environment", "exit_code", "python", "stdout"],
       f"the fields of a hello world (prepare_ms when its environment was built): {st}")
    eq(sorted(st["environment"]), ["key", "warm"], "no requirements: none listed")
    check(len(json.dumps(st, separators=(",", ":"))) <= 200,
          f"a hello world's structuredContent is at most 200 characters: {json.dumps(st)}")
    if newest_python():
        check(str(st.get("python", "")).startswith(newest_python() + "."),
              f"the newest Python is the default: {st.get('python')!r}")
    check(re.fullmatch(r"[0-9a-f]{64}", st.get("environment", {}).get("key", "")), f"environment key: {st}")
    check(isinstance(st.get("duration_ms"), int) and abs(st["duration_ms"] - int(m.group("ms"))) <= 5,
          f"duration_ms {st.get('duration_ms')} vs the text's {m.group('ms')}")
    check("outputSchema" not in tools["execute_python"], "no outputSchema: a result with figures has no "
          "structuredContent")
    c.close()


@test
def exit_code_stderr_and_empty_sections():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    r, st, text = execute(c, "import sys\nprint('before')\nsys.exit(3)\n")
    failed(r, st, text, "run", "exit 3")
    eq(st.get("exit_code"), 3, "exit_code")
    m = layout(text, "exit 3")
    eq(m.group("code"), "3", "exit code line")
    eq(m.group("out"), "before\n", "stdout kept on failure")

    r, st, text = execute(c, "import sys\nsys.stderr.write('oops on stderr\\n')\n")
    succeeded(r, st, text, "stderr only")
    m = layout(text, "stderr only")
    check(m.group("out") is None, f"an empty stdout must leave out its section: {text!r}")
    eq(m.group("err"), "oops on stderr\n", "stderr section")
    eq(st.get("stderr"), "oops on stderr\n", "structured stderr")

    r, st, text = execute(c, "pass\n")
    succeeded(r, st, text, "silent")
    check(text.startswith("--- exit_code: 0 ---\n"), f"no output: only the status lines: {text!r}")
    layout(text, "silent")

    r, st, text = execute(c, "import sys\nprint('out', flush=True)\nprint('err', file=sys.stderr)\nsys.exit(1)\n")
    m = layout(text, "both")
    eq((m.group("out"), m.group("err"), m.group("code")), ("out\n", "err\n", "1"), "both sections, stdout first")
    c.close()


@test
def death_by_signal_is_reported_as_the_signal():
    # As subprocess reports it: exit_code -N and the signal's name, not the 128+N that bwrap exits with.
    d = plain_daemon()
    c = d.client()
    c.initialize()
    r, st, text = execute(c, "import os, signal\nprint('going', flush=True)\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    failed(r, st, text, "run", "SIGSEGV")
    eq((st.get("exit_code"), st.get("signal"), st.get("limit")), (-11, "SIGSEGV", None), "exit_code, signal, limit")
    check("--- exit_code: -11 ---\n" in text and "killed by signal 11" in text, f"the text says so: {text!r}")
    eq(st.get("stdout"), "going\n", "output before the signal is kept")
    # A script that exits with such a status did exit: it is not taken for a signal.
    r, st, text = execute(c, "import sys\nsys.exit(139)\n")
    eq((st.get("exit_code"), st.get("signal")), (139, None), "sys.exit(139)")
    # Nor for a limit: 128 + SIGXCPU is the script's own status here, not the CPU time limit.
    r, st, text = execute(c, "import sys\nsys.exit(152)\n")
    eq((st.get("exit_code"), st.get("signal"), st.get("limit")), (152, None, None), "sys.exit(152)")
    c.close()


@test
def traceback_line_numbers_are_the_scripts():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    script = ("# /// script\n"          # 1
              "# dependencies = []\n"   # 2
              "# ///\n"                 # 3
              "\n"                      # 4
              "x = 1\n"                 # 5
              "\n"                      # 6
              "def f():\n"              # 7
              "    return x / 0\n"      # 8
              "\n"                      # 9
              "f()\n")                  # 10
    r, st, text = execute(c, script)
    failed(r, st, text, "run", "traceback")
    eq(st.get("exit_code"), 1, "exit code of an uncaught exception")
    err = st.get("stderr", "")
    check("ZeroDivisionError" in err, f"the traceback is on stderr: {err!r}")
    check(re.search(r'File "[^"]*", line 8, in f\n', err), f"the error is reported on line 8: {err!r}")
    check(re.search(r'File "[^"]*", line 10, in <module>\n', err), f"the call is reported on line 10: {err!r}")
    check("return x / 0" in err, f"the traceback quotes the source line: {err!r}")
    c.close()


@test
def boot_program_compiled_once_runs_as_its_source():
    """The boot program is compiled once per interpreter, in the sandbox (src/runtime/code.c), and later runs load
    that code from a descriptor of their own: the first run compiles the source itself, the later ones run the
    loader, and a script sees the same process either way (its argv, __main__, the fds it has, exit(), tracebacks,
    exit codes). The descriptor is closed before the script starts."""
    d = shared_daemon("boot", [], packages=False)   # its own: no run before this one
    c = d.client()
    c.initialize()
    probe = ("import json, os, re, sys\n"
             "cmd = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
             "boot = cmd[cmd.index(b'-c') + 1].decode()\n"
             "m = re.search(r'os\\.close\\((\\d+)\\)', boot)\n"
             "closed = None\n"
             "if m:\n"
             "    try:\n"
             "        os.fstat(int(m.group(1)))\n"
             "        closed = False\n"
             "    except OSError:\n"
             "        closed = True\n"
             "print(json.dumps({'loader': 'marshal.loads' in boot, 'closed': closed,\n"
             "                  'fds': len(os.listdir('/proc/self/fd')), 'argv': sys.argv, 'main': __name__,\n"
             "                  'file': __file__, 'exit': callable(exit), 'site': 'site' in sys.modules,\n"
             "                  'path': [p for p in sys.path if 'site-packages' in p]}))\n")
    runs = []
    deadline = time.monotonic() + 60
    while True:
        res, st = run_json(c, probe, "probe")
        runs.append(res)
        if res["loader"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    check(not runs[0]["loader"], f"the first run compiles the source itself: {runs[0]}")
    check(runs[-1]["loader"], f"a later run loads the code its interpreter compiled once: {runs[-1]}")
    eq(runs[-1]["closed"], True, "the code's descriptor is closed before the script runs")
    first, last = dict(runs[0]), dict(runs[-1])
    for x in (first, last):
        del x["loader"], x["closed"]
    eq(last, first, "what the script sees, loader or source")
    check(first["exit"] and first["site"] and first["path"], f"site ran as in any python -I: {first}")

    r, st, text = execute(c, "import sys\n\ndef f():\n    return 1 / 0\n\nf()\n")
    failed(r, st, text, "run", "traceback through the loader")
    err = st.get("stderr", "")
    check(err.startswith("Traceback (most recent call last):\n") and "<string>" not in err,
          f"the traceback starts at the script's frames: {err!r}")
    check(re.search(r'line 4, in f\n', err) and re.search(r'line 6, in <module>\n', err), f"the script's lines: {err!r}")
    r, st, text = execute(c, "raise SystemExit(7)\n")
    eq(st.get("exit_code"), 7, "SystemExit through the loader")
    out, st, text = run_ok(c, "print('hello')\n", "hello through the loader")
    eq(out, "hello\n", "stdout")
    c.close()


@test
def stdin_is_empty():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    script = ("import sys, time, json\n"
              "t = time.monotonic()\n"
              "data = sys.stdin.read()\n"
              "try:\n"
              "    input()\n"
              "    eof = False\n"
              "except EOFError:\n"
              "    eof = True\n"
              "print(json.dumps({'data': data, 'eof': eof, 'seconds': time.monotonic() - t}))\n")
    res, st = run_json(c, script, "stdin", timeout_seconds=10)
    eq(res["data"], "", "what stdin holds")
    eq(res["eof"], True, "input() meets end of file")
    check(res["seconds"] < 2, f"reading stdin returned at once: {res}")
    c.close()



# The end of a run is the bootstrap's, done by hand so that the daemon can answer without waiting for the
# interpreter's teardown (see boot_code in src/tools/execute-python.c). Each script here must end exactly as
# `python -I -u -B script.py` ends on the host: the same exit status, stdout and stderr.
END_OF_RUN_SCRIPTS = {
    "thread": ("import threading, time\n"
               "def late():\n"
               "    time.sleep(0.3)\n"
               "    print('from the thread after the script ended')\n"
               "threading.Thread(target=late).start()\n"
               "print('script done')\n"),
    "pool": ("import time\n"
             "from concurrent.futures import ThreadPoolExecutor\n"
             "ex = ThreadPoolExecutor(2)\n"
             "ex.submit(lambda: (time.sleep(0.3), print('pool task')))\n"),
    "atexit": ("import atexit, sys\n"
               "atexit.register(lambda: print('second handler'))\n"
               "atexit.register(lambda: print('first handler', file=sys.stderr))\n"
               "print('main')\n"),
    "atexit-raises": ("import atexit\n"
                      "def bad():\n"
                      "    raise RuntimeError('in a handler')\n"
                      "atexit.register(bad)\n"
                      "print('main')\n"),
    "buffered-stdout": ("import io, sys\n"
                        "sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, 'w', closefd=False)))\n"
                        "print('held in a buffer until the end')\n"),
    "fork": ("import os\n"
             "pid = os.fork()\n"
             "if pid == 0:\n"
             "    print('child')\n"
             "else:\n"
             "    os.waitpid(pid, 0)\n"
             "    print('parent')\n"),
    "fork-child-fails": ("import os, sys\n"
                         "pid = os.fork()\n"
                         "if pid == 0:\n"
                         "    sys.exit(7)\n"
                         "print('child status', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"),
    "exit-message": "import sys\nprint('x')\nsys.exit('goodbye')\n",
    "exit-none": "import sys\nsys.exit()\n",
    "exit-true": "import sys\nsys.exit(True)\n",
    "exit-256": "import sys\nsys.exit(256)\n",
    "exit-minus-one": "import sys\nsys.exit(-1)\n",
    "exit-huge": "import sys\nsys.exit(1 << 70)\n",
    "exit-in-atexit": "import atexit, sys\natexit.register(lambda: sys.exit(5))\nprint('main')\n",
    "raise-systemexit-list": "raise SystemExit([1, 2])\n",
    "global-finalizer": ("class Bye:\n"
                         "    def __del__(self):\n"
                         "        print('from __del__ at exit')\n"
                         "bye = Bye()\n"
                         "print('main')\n"),
    "finalizer-raises": ("class Bad:\n"
                         "    def __del__(self):\n"
                         "        raise ValueError('in __del__')\n"
                         "bad = Bad()\n"),
}


def host_outcome(script):
    """How the host's Python ends the script: (exit status, stdout, stderr)."""
    d = scratch("mcpt-oracle-")
    path = os.path.join(d, "script.py")
    with open(path, "w") as f:
        f.write(script)
    p = subprocess.run([sys.executable, "-I", "-u", "-B", path], cwd=d,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    # Tracebacks name the script by its path: the sandbox's is /work/script.py.
    return p.returncode, p.stdout.replace(path, "/work/script.py"), p.stderr.replace(path, "/work/script.py")


@test
def end_of_run_is_pythons():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    for name, script in END_OF_RUN_SCRIPTS.items():
        want = host_outcome(script)
        # The same Python as the oracle's, this test's own (the daemon finds it in /usr/bin or pyenv's tree).
        r, st, text = execute(c, script, python_version="%d.%d" % sys.version_info[:2], timeout_seconds=60)
        got = (st.get("exit_code"), st.get("stdout"), st.get("stderr"))
        # A function's repr holds its address.
        got, want = ((g[0], g[1], re.sub(r" at 0x[0-9a-f]+>", ">", g[2])) for g in (got, want))
        if name == "finalizer-raises":
            # Python's teardown has no source lines left for a traceback by then; ours still shows them.
            got, want = ((g[0], g[1], "".join(x for x in g[2].splitlines(True) if not x.startswith("    ")))
                         for g in (got, want))
        eq(got, want, f"{name}: exit status, stdout and stderr as on the host ({text})")
        eq(r.get("isError"), want[0] != 0, f"{name}: isError")
        eq(st.get("signal"), None, f"{name}: signal")
    c.close()


@test
def end_of_run_waits_for_nothing_else():
    """The answer comes when the script is done, not when the sandbox's teardown is: proved by a teardown that
    would take a minute (a finalizer in a reference cycle, which only the interpreter's last garbage collection
    would run) and a process left running, both killed, not waited for."""
    d = plain_daemon()
    c = d.client()
    c.initialize()
    mark = "mcpt-left-running-" + uuid.uuid4().hex
    script = ("import subprocess, sys\n"
              "class SlowToDie:\n"
              "    def __del__(self):\n"
              "        import time\n"
              "        time.sleep(60)\n"
              "cycle = SlowToDie()\n"
              "cycle.me = cycle\n"
              "del cycle\n"
              f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {mark!r}])\n"
              "print('done')\n")
    r, st, text = execute(c, script, timeout_seconds=30)
    eq((st.get("exit_code"), st.get("stdout"), st.get("timed_out")), (0, "done\n", False),
       f"the run ended with the script ({text})")
    check(st.get("duration_ms", 10 ** 9) < 30000, f"not cut off by the 30 s timeout: {st.get('duration_ms')} ms")
    wait_until(lambda: not processes_with(mark), timeout=10, what="the process the script left running to be gone")
    # A forked child that outlives the script is killed with the sandbox, too.
    script = ("import os, time\n"
              "if os.fork() == 0:\n"
              "    time.sleep(600)\n"
              "print('parent done')\n")
    r, st, text = execute(c, script, timeout_seconds=30)
    eq((st.get("exit_code"), st.get("stdout")), (0, "parent done\n"), f"fork and leave ({text})")
    c.close()


@test
def end_of_run_loses_no_output():
    """All that the script wrote before it ended is in the answer: a last burst larger than a pipe holds, on both
    streams; a file in /work/out its global still holds open, unflushed, comes back whole."""
    d = plain_daemon()
    c = d.client()
    c.initialize()
    n = 300000
    script = ("import os, sys\n"
              "f = open('/work/out/held.txt', 'w')\n"
              "f.write('held by a global, never closed')\n"
              f"sys.stderr.write('e' * {n - 4} + 'END\\n')\n"
              f"sys.stdout.write('o' * {n - 4} + 'END\\n')\n")
    # The file comes back in content[], so the result has no structuredContent (clients that show it would drop
    # the file): the bursts are checked on a run without it.
    r, st, text = execute(c, script, timeout_seconds=60)
    check("--- exit_code: 0 ---" in text, f"exit ({text[:2000]})")
    check("structuredContent" not in r, "a result with a file has no structuredContent")
    check("--- file out/held.txt (30 bytes) ---\nheld by a global, never closed\n" in text,
          f"the file held open comes back whole, flushed when its global went: {text[-2000:]}")
    r, st, text = execute(c, script.replace("'/work/out/held.txt'", "'/tmp/held.txt'"), timeout_seconds=60)
    eq(st.get("exit_code"), 0, f"exit ({text[:2000]})")
    tr = st.get("truncated", {})
    eq((tr.get("stdout_bytes_total"), tr.get("stderr_bytes_total")), (n, n), "every byte written was read")
    check(st["stdout"].endswith("oooEND\n") and st["stderr"].endswith("eeeEND\n"),
          f"the last bytes are there: {st['stdout'][-40:]!r} {st['stderr'][-40:]!r}")
    # stdout that cannot be flushed at the end: exit status 120, as Python's.
    script = "import sys\nsys.stdout = open('/dev/full', 'w')\nprint('lost')\n"
    want = host_outcome(script)
    r, st, text = execute(c, script, python_version="%d.%d" % sys.version_info[:2])
    eq((st.get("exit_code"), st.get("stdout")), want[:2], f"stdout on a full device ({text})")
    check("No space left on device" in st.get("stderr", ""), f"the flush error is shown: {text}")
    c.close()


@test
def buffered_output_arrives_whole_and_in_order():
    """stdout is block-buffered (as in any Python writing to a pipe), yet nothing is lost or reordered: what other
    programs and forked children write to the same stdout comes where the script's order puts it; output before
    os._exit(), os.abort(), an uncaught exception, a signal the script sends itself, and a timeout is all there;
    each stream keeps its order when the two are interleaved. Both in a pre-started sandbox and a sandbox of its own."""
    for d in (plain_daemon(), shared_daemon("noprestart", ["--prestart=0"], packages=False)):
        c = d.client()
        c.initialize()
        # Other writers of the same pipe: a program started three ways, and a forked child.
        script = ("import os, subprocess, sys\n"
                  "print('one')\n"
                  "subprocess.run(['/bin/echo', 'two'])\n"
                  "print('three')\n"
                  "os.system('echo four')\n"
                  "print('five')\n"
                  "os.waitpid(os.posix_spawn('/bin/echo', ['echo', 'six'], os.environ), 0)\n"
                  "print('seven')\n"
                  "pid = os.fork()\n"
                  "if pid == 0:\n"
                  "    print('eight')\n"
                  "    os._exit(0)\n"
                  "os.waitpid(pid, 0)\n"
                  "print('nine')\n")
        out, st, text = run_ok(c, script, "other writers")
        eq(out, "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\n", f"the order of other writers ({text})")
        # Interleaved streams: each whole and in its order.
        n = 1000   # within the output cap
        script = (f"import sys\nfor i in range({n}):\n    print(i)\n    print(-i, file=sys.stderr)\n")
        out, st, text = run_ok(c, script, "interleaved")
        check(out == "".join(f"{i}\n" for i in range(n)), f"stdout whole and in order: ...{out[-200:]!r}")
        check(st.get("stderr") == "".join(f"{-i}\n" for i in range(n)),
              f"stderr whole and in order: ...{st.get('stderr', '')[-200:]!r}")
        # Ways to end that skip Python's own flush, or go through the boot code's.
        for end, want_code, want_sig in (("os._exit(3)", 3, None), ("raise ValueError('boom')", 1, None),
                                         ("os.abort()", -6, "SIGABRT"),
                                         ("os.kill(os.getpid(), signal.SIGKILL)", -9, "SIGKILL")):
            script = f"import os, signal\nprint('before the end')\n{end}\n"
            r, st, text = execute(c, script, timeout_seconds=30)
            eq((st.get("stdout"), st.get("exit_code"), st.get("signal")), ("before the end\n", want_code, want_sig),
               f"output before {end} ({text})")
        # A timeout: the daemon asks the run to flush (SIGWINCH), then kills it. Busy in Python, and asleep. (5 s: on
        # a loaded machine a sandbox may take a while to start; what is asserted is the output, not the time.)
        for body in ("while True:\n    pass\n", "import time\ntime.sleep(600)\n"):
            script = "print('started')\nprint('x' * 100)\n" + body
            r, st, text = execute(c, script, timeout_seconds=5)
            eq((st.get("timed_out"), st.get("signal")), (True, "SIGKILL"), f"timed out ({text})")
            eq(st.get("stdout"), "started\n" + "x" * 100 + "\n", f"output before the timeout ({body!r})")
        # A script that handles SIGWINCH itself still ends at its timeout.
        script = ("import signal, time\nsignal.signal(signal.SIGWINCH, lambda *a: print('winch'))\n"
                  "print('started', flush=True)\ntime.sleep(600)\n")
        r, st, text = execute(c, script, timeout_seconds=2)
        eq((st.get("timed_out"), st.get("signal")), (True, "SIGKILL"), f"timed out with a handler ({text})")
        check(st.get("stdout", "").startswith("started\n"), f"its output ({text})")
        c.close()


# --- timeouts ----------------------------------------------------------------

@test
def timeout_kills_the_whole_tree():
    d = plain_daemon()
    mark = "mcpt-timeout-" + uuid.uuid4().hex
    script = ("import os, sys, time\n"
              f"MARK = {mark!r}\n"
              "def sleeper():\n"
              "    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', MARK])\n"
              "for i in range(3):\n"
              "    if os.fork() == 0:\n"
              "        sleeper()\n"
              "if os.fork() == 0:\n"           # a grandchild in a session of its own, orphaned
              "    os.setsid()\n"
              "    if os.fork() == 0:\n"
              "        sleeper()\n"
              "    os._exit(0)\n"
              "print('children started', flush=True)\n"
              "time.sleep(600)\n")
    c = d.client()
    c.initialize()
    t0 = time.monotonic()
    rid = send_call(c, {"script": script, "timeout_seconds": 2})
    wait_until(lambda: len(processes_with(mark)) == 4, 10, "the run's four sleeping processes")
    reply = c.wait_for(rid, timeout=60)
    elapsed = time.monotonic() - t0
    r, st, text = reply_result(reply, "timeout")
    failed(r, st, text, "run", "timeout")
    eq(st.get("timed_out"), True, "timed_out")
    eq(st.get("exit_code"), -9, "exit_code")
    eq(st.get("signal"), "SIGKILL", "signal")
    eq(st.get("timeout_seconds"), 2, "timeout_seconds")
    check("--- timed_out: true ---\n" in text, f"the text says it timed out: {text!r}")
    check("--- exit_code: -9 ---\n" in text, f"exit code line: {text!r}")
    eq(st.get("stdout"), "children started\n", "output before the timeout is kept")
    check(1.8 <= elapsed <= 8, f"the call returned after {elapsed:.1f}s, want about 2s")
    # Gone by the time the result is out (allow the kernel a moment to reap a pid namespace).
    time.sleep(0.3)
    left = processes_with(mark)
    check(not left, f"processes of the timed-out run survive: {left}")
    busy = [p for p in children(d.proc.pid) if _cmdline(p).startswith("bwrap") or "/work/script.py" in _cmdline(p)]
    check(not busy, f"sandbox processes left under the daemon: {[(p, _cmdline(p)) for p in busy]}")
    c.close()


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@test
def timeout_above_the_maximum_is_clamped():
    with Daemon(args=["--max-timeout=2"]) as d:
        need_sandbox(d)
        c = d.client()
        c.initialize()
        t0 = time.monotonic()
        r, st, text = execute(c, "import time\nprint('start', flush=True)\ntime.sleep(30)\n", timeout_seconds=3600)
        elapsed = time.monotonic() - t0
        failed(r, st, text, "run", "clamped")
        eq(st.get("timeout_clamped"), True, "timeout_clamped")
        eq(st.get("timeout_seconds"), 2, "timeout_seconds (the server's maximum)")
        eq(st.get("timed_out"), True, "timed_out (the clamp is enforced)")
        check("--- timeout_clamped: 2s" in text, f"the text says the timeout was lowered: {text!r}")
        check(elapsed < 10, f"the run was stopped at the maximum, after {elapsed:.1f}s")
        # Within the maximum: no clamp.
        r, st, text = execute(c, "print(1)\n", timeout_seconds=2)
        succeeded(r, st, text, "within the maximum")
        eq((st.get("timeout_clamped"), st.get("timeout_seconds")), (False, None), "timeout within the maximum: "
           "neither said (the default is in the tool's description)")
        check("timeout_clamped" not in text, f"no clamp line when nothing was clamped: {text!r}")
        c.close()


# --- output ------------------------------------------------------------------

@test
def output_flood_is_capped_and_memory_stays_bounded():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    run_ok(c, "print('warm up')\n")
    mib = 200
    script = ("import sys\n"
              "block = (b'x' * 1023 + b'\\n') * 1024\n"
              f"for i in range({mib}):\n"
              "    sys.stdout.buffer.write(block)\n"
              "sys.stdout.buffer.flush()\n"
              "print('LAST LINE OF THE FLOOD', flush=True)\n")
    with RssGrowth(d.proc.pid) as rss:
        r, st, text = execute(c, script, timeout_seconds=60)
    succeeded(r, st, text, "flood")
    tr = st.get("truncated", {})
    total = mib * 1024 * 1024 + len("LAST LINE OF THE FLOOD\n")
    eq(tr.get("stdout_bytes_total"), total, "stdout_bytes_total")
    check(tr.get("stdout_bytes_omitted", 0) > total - 64 * 1024, f"almost all of it is omitted: {tr}")
    check(len(text) < 64 * 1024, f"the result text is {len(text)} bytes")
    check(re.search(r"\[\.\.\. (\d+) bytes omitted \.\.\.\]", text), f"the cut is stated in the text: {text[:300]!r}")
    n = int(re.search(r"\[\.\.\. (\d+) bytes omitted \.\.\.\]", text).group(1))
    eq(n, tr["stdout_bytes_omitted"], "the omitted count in the text")
    check(st["stdout"].endswith("LAST LINE OF THE FLOOD\n"), f"the tail is kept: {st['stdout'][-200:]!r}")
    check(st["stdout"].startswith("xxxx"), "the head is kept")
    check(text.rstrip().split("\n")[0] == "--- stdout ---", "layout")
    check(rss.grew < 30 * 1024, f"the daemon's RSS grew by {rss.grew} KiB while a script wrote {mib} MiB")
    c.close()


@test
def output_cap_is_per_stream_and_cut_at_lines():
    """output-cap (24K by default) is split between stdout and stderr: 12 KiB each, a quarter from the head
    and the rest from the tail, as the documentation says. 20 KB on stdout alone is therefore cut, and the
    cut falls between lines (99-byte lines: 3 KiB and 9 KiB both end mid-line)."""
    d = plain_daemon()
    c = d.client()
    c.initialize()
    script = ("for i in range(200):\n"
              "    print(f'line {i:04d} '.ljust(98, '.'))\n")
    r, st, text = execute(c, script, timeout_seconds=60)
    succeeded(r, st, text, "200 lines")
    tr = st.get("truncated", {})
    eq(tr.get("stdout_bytes_total"), 200 * 99, "stdout_bytes_total")
    out = st["stdout"]
    m = re.search(r"\[\.\.\. (\d+) bytes omitted \.\.\.\]\n", out)
    check(m, f"20 KB on stdout alone is cut (12 KiB per stream): {out[:200]!r}")
    head, tail = out[:m.start()], out[m.end():]
    for part, what in ((head, "head"), (tail, "tail")):
        lines = part.split("\n")
        eq(lines[-1], "", f"the {what} ends with a whole line")
        bad = [ln for ln in lines[:-1] if not re.fullmatch(r"line \d{4} \.{88}", ln)]
        check(not bad, f"partial lines in the {what}: {bad[:3]}")
    check(3 * 1024 - 99 <= len(head) <= 3 * 1024, f"head {len(head)} bytes: a quarter of 12 KiB, whole lines")
    check(9 * 1024 - 99 <= len(tail) <= 9 * 1024, f"tail {len(tail)} bytes: three quarters of 12 KiB, whole lines")
    eq(int(m.group(1)), 200 * 99 - len(head) - len(tail), "omitted bytes in the marker")
    eq(tr.get("stdout_bytes_omitted"), int(m.group(1)), "stdout_bytes_omitted")
    check(tail.endswith("line 0199 " + "." * 88 + "\n"), "the last line is kept")
    c.close()


# --- dependencies ------------------------------------------------------------

SIX_VERSION = "import six, json\nprint(json.dumps({'six': six.__version__}))\n"


@test
def dependencies_inline_parameter_merged_and_parameter_wins():
    d = pypi_daemon()
    c = d.client()
    c.initialize()
    inline = "# /// script\n# dependencies = [\"six==1.16.0\"]\n# ///\n"
    res, st = run_json(c, inline + SIX_VERSION, "inline")
    eq(res["six"], "1.16.0", "six from the inline block")
    eq(st["environment"]["requirements"], ["six==1.16.0"], "requirements")

    res, st = run_json(c, SIX_VERSION, "parameter", dependencies=["six==1.17.0"])
    eq(res["six"], "1.17.0", "six from the dependencies parameter")

    both = ("import six, idna, json\n"
            "print(json.dumps({'six': six.__version__, 'idna': idna.__version__}))\n")
    res, st = run_json(c, inline + both, "merged", dependencies=["idna==3.10"])
    eq(res, {"six": "1.16.0", "idna": "3.10"}, "inline and parameter packages both installed")
    eq(sorted(st["environment"]["requirements"]), ["idna==3.10", "six==1.16.0"], "merged requirements")

    res, st = run_json(c, inline + SIX_VERSION, "parameter wins", dependencies=["six==1.17.0"])
    eq(res["six"], "1.17.0", "for the same package the parameter wins")
    eq(st["environment"]["requirements"], ["six==1.17.0"], "requirements after the merge")
    c.close()


@test
def nonexistent_package_fails_in_prepare():
    d = pypi_daemon()
    c = d.client()
    c.initialize()
    name = "mcpt-no-such-package-" + uuid.uuid4().hex[:12]
    r, st, text = execute(c, "print('must not run')\n", dependencies=[name])
    failed(r, st, text, "prepare", "nonexistent package")
    check(name in text, f"the text names the requirement: {text!r}")
    check(re.search(r"not found|no versions|unsatisfiable", text), f"the text gives uv's reason: {text!r}")
    check(len(text.splitlines()) < 15, f"a few lines, not uv's whole output: {len(text.splitlines())} lines")
    check("must not run" not in text and st.get("stdout", "") == "", "the script did not run")
    eq(st.get("exit_code", "absent"), None, "exit_code of a run that never started")
    c.close()


@test
def warm_environment_is_reused_without_uv():
    d = pypi_daemon()
    c = d.client()
    c.initialize()
    deps = ["six>=1.15,<2"]   # a requirement set no other test uses: the first run is cold
    n0 = len(d.uvlog.lines())
    res, st1 = run_json(c, SIX_VERSION, "cold", dependencies=deps)
    eq(st1["environment"]["warm"], False, "the first run builds the environment")
    check(len(d.uvlog.installs(n0)) == 1, f"the cold run installed with uv: {d.uvlog.lines()[n0:]}")
    n1 = len(d.uvlog.lines())
    res, st2 = run_json(c, SIX_VERSION, "warm", dependencies=deps)
    eq(st2["environment"]["warm"], True, "the second run finds it warm")
    eq(st2["environment"]["key"], st1["environment"]["key"], "same environment key")
    eq(d.uvlog.lines()[n1:], [], "uv invocations during the warm run")
    # Another client, another connection: still warm, still no uv.
    c2 = d.client()
    c2.initialize()
    res, st3 = run_json(c2, SIX_VERSION, "warm, second client", dependencies=deps)
    eq((st3["environment"]["warm"], st3["environment"]["key"]), (True, st1["environment"]["key"]), "warm again")
    eq(d.uvlog.lines()[n1:], [], "uv invocations during the warm runs")
    c2.close()
    c.close()


@test
def offline_first_when_the_cache_has_every_name_online_on_a_miss():
    """A build resolves from uv's cache alone (--offline) when the cache has a fresh index page for every name
    asked for; when that is not enough it is the same install online, transparently; a page older than PyPI's
    max-age (600 s) or a name never fetched means online at once."""
    need_pypi()
    uvlog = UvLog()
    at_exit(uvlog.close)
    d = Daemon(args=[f"--uv={uvlog.path}"])
    at_exit(d.close)
    need_sandbox(d)
    c = d.client()
    c.initialize()
    version = "import humanize, importlib.metadata as m; print(m.version('humanize'))"

    def installs(deps, want_version=None):
        n = len(uvlog.lines())
        out, st, text = run_ok(c, version, f"with {deps}", dependencies=deps)
        eq(st["environment"]["warm"], False, f"{deps}: a new environment")
        if want_version:
            eq(out, want_version + "\n", f"{deps}: the version installed")
        return ["--offline" in line.split() for line in uvlog.installs(n)]

    eq(installs(["humanize"]), [False], "empty cache: online")
    eq(installs(["humanize>=1"]), [True], "every name fresh in the cache: offline, and that was enough")
    # The page is fresh, the wheel of this older version was never downloaded: offline fails, online follows.
    eq(installs(["humanize==4.9.0"], "4.9.0"), [True, False], "a miss: offline, then online")
    eq(installs(["humanize==4.9.0", "six"]), [False], "a name never fetched: online at once")
    pages = glob.glob(os.path.join(d.cache_dir, "uv", "simple-v*", "pypi", "humanize.rkyv"))
    check(pages, "the cached index page of humanize")
    old = time.time() - 11 * 60
    for page in pages:
        os.utime(page, (old, old))
    eq(installs(["humanize>=2"]), [False], "a page older than 600 s: online")
    c.close()


@test
def bytecode_is_compiled_once_per_wheel_and_shared_by_later_environments():
    """The bytecode compiled for an environment (in the sandbox) is linked into the unpacked wheels of uv's cache
    its files came from, so a later environment with the same wheel has it from its first run on: the .pyc files
    are there before any compile of that environment, the very files (same inode) as in the cache, and are used."""
    need_pypi()
    d = Daemon(args=[])
    at_exit(d.close)
    need_sandbox(d)
    c = d.client()
    c.initialize()
    envs = os.path.join(d.cache_dir, "envs")

    def compiled(key):
        return os.path.exists(os.path.join(envs, key, ".mcp-python-sandbox-compiled"))

    out, st, text = run_ok(c, "import humanize; print('ok')", "first", dependencies=["humanize"])
    first = st["environment"]["key"]
    wait_until(lambda: compiled(first), 120, "the bytecode compile of the first environment")
    shared = glob.glob(os.path.join(d.cache_dir, "uv", "archive-v*", "*", "humanize", "__pycache__", "*.pyc"))
    check(shared, "the .pyc files are in the unpacked wheel in uv's cache")
    # A new environment, the same wheel: its bytecode before its own compile, and the run imports from it.
    script = ("import humanize, os, sys\n"
              "print(os.path.exists(humanize.__cached__), humanize.__spec__.cached == humanize.__cached__)\n")
    out, st, text = run_ok(c, script, "second", dependencies=["humanize>=0.1"])
    second = st["environment"]["key"]
    check(second != first, "a new environment")
    eq(out, "True True\n", "the first run of the new environment finds the module's bytecode")
    pyc = glob.glob(os.path.join(envs, second, "lib", "python*", "site-packages", "humanize", "__pycache__", "*.pyc"))
    check(pyc, "the new environment has the .pyc files")
    inodes = {os.stat(p).st_ino for p in shared}
    check(all(os.stat(p).st_ino in inodes for p in pyc), "the very files of the cache (hard links)")
    c.close()


@test
def local_wheel_index_install():
    d = local_daemon()
    c = d.client()
    c.initialize()
    script = ("# /// script\n# dependencies = [\"mcpt-alpha\"]\n# ///\n"
              "import json, mcpt_alpha, mcpt_beta\n"
              "print(json.dumps([mcpt_alpha.__version__, mcpt_alpha.VALUE, mcpt_beta.__version__]))\n")
    res, st = run_json(c, script, "local index")
    eq(res, ["1.0", "alpha", "2.0"], "alpha and its dependency beta (newest) from the local wheels")
    res, st = run_json(c, script, "pinned", dependencies=["mcpt-beta==1.0"])
    eq(res, ["1.0", "alpha", "1.0"], "the dependencies parameter pins beta")
    eq(sorted(st["environment"]["requirements"]), ["mcpt-alpha", "mcpt-beta==1.0"], "requirements")
    r, st, text = execute(c, "print(1)\n", dependencies=["mcpt-beta==9.9"])
    failed(r, st, text, "prepare", "a version the index does not have")
    check("mcpt-beta" in text and len(text.splitlines()) < 15, f"a short reason naming it: {text!r}")
    c.close()


@test
def ten_concurrent_cold_runs_build_once():
    d = local_daemon()
    n0 = len(d.uvlog.lines())
    clients = [d.client() for _ in range(10)]
    for c in clients:
        c.initialize()
    script = "import json, mcpt_gamma\nprint(json.dumps(mcpt_gamma.__version__))\n"
    ids = [send_call(c, {"script": script, "dependencies": ["mcpt-gamma"]}) for c in clients]
    keys = set()
    for c, rid in zip(clients, ids):
        r, st, text = reply_result(c.wait_for(rid, timeout=120), "concurrent")
        out = succeeded(r, st, text, "concurrent run")
        eq(out, '"1.0"\n', "stdout")
        keys.add(st["environment"]["key"])
        c.close()
    eq(len(keys), 1, "one environment for all ten")
    new = d.uvlog.lines()[n0:]
    installs = [x for x in new if x.startswith("pip install")]
    venvs = [x for x in new if x.startswith("venv")]
    # uv venv only for the first build on this Python: later ones copy what it made.
    check(len(installs) == 1 and len(venvs) <= 1, f"want at most one uv venv and one uv pip install, got: {new}")
    check("mcpt-gamma" in installs[0], f"the install names the package: {installs[0]}")


# --- isolation ---------------------------------------------------------------

ISOLATION_PROBE = r"""
import errno, json, os, socket, sys, sysconfig
import six

def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def write(path):
    def fn():
        with open(path, "w") as f:
            f.write("x")
    return fn

def append(path):
    def fn():
        with open(path, "a") as f:
            f.write("# poisoned\n")
    return fn

def connect(addr):
    def fn():
        s = socket.create_connection(addr, timeout=3)
        s.close()
    return fn

def connect_unix(path):
    def fn():
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
    return fn

CACHE, SOCKET, HOST_TMP, PORT = __PARAMS__
site = sysconfig.get_paths()["purelib"]
# Outside /work and /tmp: the system, the environment, the interpreter, and the
# directories bubblewrap makes on its root to mount things on.
outside = ["/usr/evil", "/usr/bin/evil", "/evil", "/etc/evil", os.path.join(site, "evil.py"),
           os.path.join(sys.prefix, "evil"), os.path.join(sys.base_prefix, "evil")]
parent = os.path.dirname(sys.base_prefix)
while parent != "/":
    outside.append(os.path.join(parent, "evil"))
    parent = os.path.dirname(parent)
res = {
    "uid": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()],
    "prefix": sys.prefix,
    "outside": {p: attempt(write(p)) for p in outside},
    "six_append": attempt(append(six.__file__)),
    "etc_passwd_append": attempt(append("/etc/passwd")),
    "work_write": attempt(write("/work/ok")),
    "tmp_write": attempt(write("/tmp/ok")),
    "cwd": os.getcwd(),
    "uv_cache_exists": os.path.exists(os.path.join(CACHE, "uv")),
    "envs_listing": sorted(os.listdir(os.path.join(CACHE, "envs"))) if os.path.isdir(os.path.join(CACHE, "envs")) else None,
    "cache_listing": sorted(os.listdir(CACHE)) if os.path.isdir(CACHE) else None,
    "socket_exists": os.path.exists(SOCKET),
    "host_tmp_file_exists": os.path.exists(HOST_TMP),
    "tcp_localhost": attempt(connect(("127.0.0.1", PORT))),
    "tcp_internet": attempt(connect(("1.1.1.1", 53))),
    "secret_in_env": any("mcpt-host-secret" in v for v in os.environ.values()),
    "pids": len([p for p in os.listdir("/proc") if p.isdigit()]),
}
print(json.dumps(res))
"""


@test
def isolation_negative_evidence():
    d = pypi_daemon()
    c = d.client()
    c.initialize()
    host_tmp = os.path.join("/tmp", "mcpt-host-file-" + uuid.uuid4().hex)
    open(host_tmp, "w").close()
    at_exit(lambda: os.unlink(host_tmp))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    run_ok(c, "print('another environment in the store')\n")
    script = ISOLATION_PROBE.replace(
        "__PARAMS__", repr((d.cache_dir, d.socket, host_tmp, port)))
    try:
        res, st = run_json(c, script, "isolation probe", dependencies=["six==1.17.0"], timeout_seconds=20)
    finally:
        listener.close()
    key = st["environment"]["key"]
    env_dir = os.path.join(d.cache_dir, "envs", key)
    host_envs = sorted(x for x in os.listdir(os.path.join(d.cache_dir, "envs")) if not x.startswith("."))
    check(os.path.isdir(os.path.join(d.cache_dir, "uv")), "the daemon's uv cache exists on the host")
    check(len(host_envs) >= 2, f"the store holds other environments on the host: {host_envs}")

    problems = []

    def want(cond, message):
        if not cond:
            problems.append(message)

    want(res["uid"] == [65534] * 4, f"uid, euid, gid, egid: {res['uid']}")
    # The environment at /venv, wherever the store keeps it on the host.
    want(res["prefix"] == "/venv", f"sys.prefix {res['prefix']} is not /venv")
    for path, e in res["outside"].items():
        want(e in ("EROFS", "EACCES"), f"writing {path}: {e}, want EROFS or EACCES")
    # Read-only twice over: the mount (EROFS) and, on disk, the file's mode (EACCES for a sandbox uid of its own).
    want(res["six_append"] in ("EROFS", "EACCES"),
         f"appending to six.py in the environment: {res['six_append']}, want EROFS or EACCES")
    want(res["etc_passwd_append"] in ("EROFS", "EACCES"), f"appending to /etc/passwd: {res['etc_passwd_append']}")
    want((res["work_write"], res["tmp_write"], res["cwd"]) == ("ok", "ok", "/work"),
         f"/work and /tmp must be writable, /work the cwd: {res['work_write']}, {res['tmp_write']}, {res['cwd']}")
    want(res["uv_cache_exists"] is False, "the uv cache is in the sandbox")
    want(res["envs_listing"] in ([key], None), f"other environments of the store are visible: {res['envs_listing']}")
    want(res["cache_listing"] in (["envs"], None), f"more of the cache dir is visible: {res['cache_listing']}")
    want(res["socket_exists"] is False, "the daemon's socket is in the sandbox")
    want(res["host_tmp_file_exists"] is False, "the host's /tmp is in the sandbox")
    want(res["tcp_localhost"] in ("ECONNREFUSED", "ENETUNREACH"),
         f"the host's 127.0.0.1:{port} is reachable: {res['tcp_localhost']}")
    want(res["tcp_internet"] in ("ENETUNREACH", "EHOSTUNREACH", "ECONNREFUSED"),
         f"the internet is reachable: {res['tcp_internet']}")
    want(res["secret_in_env"] is False, "the daemon's environment variables leak into the script's")
    want(res["pids"] <= 5, f"{res['pids']} processes visible: not a private pid namespace")
    check(not problems, "isolation: " + "; ".join(problems))
    # The environment on the host is untouched.
    check(not os.path.exists(os.path.join(env_dir, "evil")), "a file appeared in the environment")
    c.close()


@test
def runs_do_not_see_each_others_files():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    name = "mcpt-left-" + uuid.uuid4().hex
    script = ("import json, os\n"
              f"paths = ['/work/{name}', '/tmp/{name}', '/work/sub/{name}']\n"
              "before = [os.path.exists(p) for p in paths]\n"
              "os.makedirs('/work/sub', exist_ok=True)\n"
              "for p in paths:\n"
              "    open(p, 'w').write('x')\n"
              "print(json.dumps({'before': before, 'after': [os.path.exists(p) for p in paths]}))\n")
    res, _ = run_json(c, script, "first run")
    eq(res, {"before": [False] * 3, "after": [True] * 3}, "the first run writes its files")
    res, _ = run_json(c, script, "second run")
    eq(res["before"], [False] * 3, "the second run sees none of the first run's files")
    check(not os.path.exists(f"/tmp/{name}"), "the run's /tmp file landed in the host's /tmp")
    c.close()


# --- Pythons -----------------------------------------------------------------

VERSION_PROBE = "import sys, json\nprint(json.dumps(list(sys.version_info[:2])))\n"


@test
def python_version_selects_the_interpreter():
    have = need_pythons("3.11", "3.12", "3.13")
    d = plain_daemon()
    c = d.client()
    c.initialize()
    for v in ("3.11", "3.12", "3.13"):
        res, st = run_json(c, VERSION_PROBE, f"python {v}", python_version=v)
        eq(res, [int(x) for x in v.split(".")], f"sys.version_info for python_version {v}")
        check(st["python"].startswith(v + "."), f"structured python {st['python']!r}")
    res, st = run_json(c, "# /// script\n# requires-python = \">=3.13\"\n# ///\n" + VERSION_PROBE, "req >=3.13")
    eq(res, [3, 13], "requires-python >=3.13")
    res, st = run_json(c, "# /// script\n# requires-python = \"<3.12\"\n# ///\n" + VERSION_PROBE, "req <3.12")
    eq(res, [3, 11], "requires-python <3.12 picks 3.11, not the newest")
    for what, script, args in (
            ("requires-python >=4", "# /// script\n# requires-python = \">=4\"\n# ///\nprint(1)\n", {}),
            ("python_version 2.7", "print(1)\n", {"python_version": "2.7"})):
        r, st, text = execute(c, script, **args)
        failed(r, st, text, "validate", what)
        for minor in have:
            if minor in ("3.11", "3.12", "3.13"):
                check(re.search(re.escape(minor) + r"(\.\d+)?", text), f"{what}: the message lists {minor}: {text!r}")
        check("print(1)" not in st.get("stdout", ""), "nothing ran")
    c.close()


# --- PEP 723 rules ---------------------------------------------------------------

@test
def pep723_rules_end_to_end():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    marker = "BODY-RAN-" + uuid.uuid4().hex

    two = ("# /// script\n# dependencies = []\n# ///\n"
           "# /// script\n# dependencies = []\n# ///\n"
           f"print({marker!r})\n")
    r, st, text = execute(c, two)
    failed(r, st, text, "validate", "two blocks")
    check(marker not in text, "the body of an invalid script ran")
    r, st, text = call(c, "validate_script", {"script": two})
    check(r.get("isError") is True and text.startswith("INVALID: "), f"two blocks: {text!r}")
    eq(st.get("valid"), False, "valid")

    tool = ("# /// script\n# dependencies = []\n# [tool.uv]\n# index-url = \"http://evil.example/simple\"\n# ///\n"
            f"print({marker!r})\n")
    r, st, text = execute(c, tool)
    failed(r, st, text, "validate", "[tool] table")
    check("[tool]" in text, f"the message names the [tool] table: {text!r}")
    check(marker not in text, "the body ran")
    r, st, text = call(c, "validate_script", {"script": tool})
    check(text.startswith("INVALID: ") and "[tool]" in text, f"validate_script on [tool]: {text!r}")

    url = "six @ https://files.pythonhosted.org/packages/six-1.17.0-py2.py3-none-any.whl"
    direct = f"# /// script\n# dependencies = [\"{url}\"]\n# ///\nprint({marker!r})\n"
    r, st, text = execute(c, direct)
    failed(r, st, text, "validate", "direct reference inline")
    check("direct reference" in text and marker not in text, f"inline direct reference: {text!r}")
    r, st, text = execute(c, f"print({marker!r})\n", dependencies=[url])
    failed(r, st, text, "validate", "direct reference parameter")
    check("direct reference" in text, f"parameter direct reference: {text!r}")
    for spec in ("git+https://github.com/benjaminp/six", "./six", "file:///tmp/six.whl"):
        r, st, text = execute(c, "print(1)\n", dependencies=[spec])
        failed(r, st, text, "validate", f"dependency {spec!r}")

    # An unclosed block is refused in the validate phase, as uv refuses it: never run without it.
    unclosed = ("# /// script\n# dependencies = [\"mcpt-not-installed-anywhere\"]\n"
                f"print({marker!r})\n")
    reason = ("the '# /// script' metadata block on line 1 is not closed: line 3 ends it because it does not start "
              "with '#'; start every line of the block with '# ' (or a bare '#', for an empty line) and end it with "
              "a line that is exactly '# ///'")
    r, st, text = execute(c, unclosed)
    failed(r, st, text, "validate", "unclosed block")
    check(reason in text and marker not in text, f"the reason, and the body did not run: {text!r}")
    r, st, text = call(c, "validate_script", {"script": unclosed})
    check(r.get("isError") is True and text.startswith("INVALID: ") and reason in text,
          f"validate_script on an unclosed block: {text!r}")
    eq(st.get("valid"), False, "valid")
    c.close()


# --- validate_script ---------------------------------------------------------

@test
def validate_script_layout_warmth_and_no_user_code():
    d = local_daemon()
    c = d.client()
    c.initialize()
    tools = {t["name"]: t for t in c.result("tools/list")["tools"]}
    host_marker = "/tmp/mcpt-validate-ran-" + uuid.uuid4().hex
    body = (f"open({host_marker!r}, 'w').write('ran')\n"
            "print('BODY RAN')\n"
            "import time\ntime.sleep(20)\n")
    script = ("# /// script\n# requires-python = \">=3.11\"\n"
              "# dependencies = [\"mcpt-delta\", \"mcpt-beta<2\"]\n# ///\n" + body)
    n0 = len(d.uvlog.lines())
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for p in children(d.proc.pid):
                if "/work/script.py" in _cmdline(p):
                    seen.append(_cmdline(p))
            time.sleep(0.005)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        r, st, text = call(c, "validate_script", {"script": script})
        elapsed = time.monotonic() - t0
    finally:
        stop.set()
        t.join()
    eq(r.get("isError"), False, f"isError ({text})")
    lines = text.splitlines()
    eq(lines[:5], ["VALID", "requires-python: >=3.11", "dependencies (2):", "  - mcpt-beta<2", "  - mcpt-delta"],
       "VALID layout")
    check(re.fullmatch(r"python: 3\.\d+\.\d+", lines[5]) and lines[5][8:].startswith(str(newest_python())),
          f"python line: {lines[5:6]}")
    check(re.fullmatch(r"environment: not prepared yet.*", lines[6]), f"environment line: {lines[6:7]}")
    eq(st.get("valid"), True, "valid")
    eq(st.get("warm"), False, "warm before any run")
    eq(st.get("requires_python"), ">=3.11", "requires_python")
    eq(sorted(st.get("dependencies", [])), ["mcpt-beta<2", "mcpt-delta"], "dependencies")
    check(elapsed < 5, f"validate_script took {elapsed:.1f}s: did it run the 20 s body?")
    check("BODY RAN" not in text and "stdout" not in st, "validate_script output shows the body ran")
    check(not os.path.exists(host_marker), "the body created its marker file")
    eq(seen, [], "sandbox runs of the script during validate_script")
    eq(d.uvlog.lines()[n0:], [], "uv runs during validate_script")

    # Prepare it with a run (a short body), then it is warm, with the same key.
    short = script.replace(body, "import mcpt_delta\nprint(mcpt_delta.__version__)\n")
    out, est, _ = run_ok(c, short, "run")
    eq(out, "1.0\n", "the run")
    eq(est["environment"]["key"], st["environment_key"], "validate_script's key is the run's")
    r, st2, text = call(c, "validate_script", {"script": script})
    eq(st2.get("warm"), True, "warm after the run")
    check(re.search(r"^environment: warm", text, re.M), f"the text says warm: {text!r}")

    r, st_none, text = call(c, "validate_script", {"script": "print('x')\n"})
    eq(text.splitlines()[:2], ["VALID", "dependencies: none"], "no metadata: no requires-python line, no dependencies")

    r, st, text = call(c, "validate_script", {"script": "print('x')\n", "dependencies": ["not a requirement!"]})
    check(r.get("isError") is True and text.startswith("INVALID: ") and "not a requirement" in text,
          f"a bad requirement: {text!r}")
    eq((st.get("valid"), bool(st.get("error"))), (False, True), "valid and error")
    c.close()
    eq(st_none.get("requires_python", "absent"), None, "requires_python of a script without one (a JSON null)")


# --- cancellation and disconnects ----------------------------------------------

@test
def cancellation_kills_the_run_and_sends_no_reply():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    mark = "mcpt-cancel-" + uuid.uuid4().hex
    rid = send_call(c, {"script": sleeper(mark), "timeout_seconds": 60})
    wait_until(lambda: processes_with(mark), 15, "the sleeping run")
    c.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
    c.expect_silence(1.0)
    wait_until(lambda: not processes_with(mark), 3, "the cancelled run to end")
    # The connection still works and never gets the cancelled request's reply.
    c.result("ping", {})
    check(all(m.get("id") != rid for m in c.unclaimed), f"a reply for the cancelled request: {c.unclaimed}")
    out, st, _ = run_ok(c, "print('after')\n")
    eq(out, "after\n", "a run after the cancellation")
    check(all(m.get("id") != rid for m in c.unclaimed), f"a reply for the cancelled request: {c.unclaimed}")
    c.close()


@test
def client_disconnect_kills_the_run():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    mark = "mcpt-disconnect-" + uuid.uuid4().hex
    send_call(c, {"script": sleeper(mark), "timeout_seconds": 60})
    wait_until(lambda: processes_with(mark), 15, "the sleeping run")
    c.kill()
    wait_until(lambda: not processes_with(mark), 5, "the run to end after the client went away")
    check(d.alive(), "the daemon survives")
    c2 = d.client()
    c2.initialize()
    out, _, _ = run_ok(c2, "print('next')\n")
    eq(out, "next\n", "the next client's run")
    c2.close()


def stdin_eof_ends_the_session(c, what):
    """A client closes stdin while a run sleeps (how MCP clients end a stdio session): the run is
    stopped, no reply comes for it, and the process exits without waiting for the run's timeout."""
    mark = "mcpt-eof-" + uuid.uuid4().hex
    rid = send_call(c, {"script": sleeper(mark), "timeout_seconds": 120})
    wait_until(lambda: processes_with(mark), 30, f"{what}: the sleeping run")
    c.send({"jsonrpc": "2.0", "id": "last-ping", "method": "ping"})
    eq(c.wait_for("last-ping", 10).get("result"), {}, f"{what}: ping before EOF")
    c.proc.stdin.close()
    # Well inside the run's 120 s timeout: the session does not wait for the run.
    try:
        rc = c.proc.wait(30)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{what}: still running 30 s after stdin EOF (the run's timeout is 120 s)")
    eq(rc, 0, f"{what}: exit status after stdin EOF")
    rest = []
    try:
        while True:
            rest.append(c.read_message(5))
    except EOFError:
        pass
    check(all(m.get("id") != rid for m in rest + c.unclaimed), f"{what}: a reply for the stopped run: {rest}")
    wait_until(lambda: not processes_with(mark), 5, f"{what}: the run's processes to go")


@test
def stdin_eof_stops_runs_through_the_shim():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    stdin_eof_ends_the_session(c, "shim and daemon")
    check(d.alive(), "the daemon survives")


@test
def stdin_eof_stops_runs_in_stdio_mode():
    c = stdio_client()
    at_exit(lambda: c.proc.poll() is None and c.kill())
    c.initialize()
    r = c.call_tool("check_environment", {}, timeout=60)
    if not (r.get("structuredContent") or {}).get("sandbox", {}).get("working"):
        skip("the sandbox does not work on this machine")
    stdin_eof_ends_the_session(c, "--stdio")


@test
def stdio_mode_keeps_the_clients_stderr_quiet():
    """--stdio logs to the MCP client's stderr: at the default level, not a line per run (nor per start-up
    fact); --log-level=info brings them back, so the check below can see them when they are there."""
    saved = os.environ.get("MCP_TEST_DAEMON_ARGS")
    seen = {}
    for level in (None, "info"):
        if level:
            os.environ["MCP_TEST_DAEMON_ARGS"] = (saved or "") + "\x1f--log-level=" + level
        try:
            c = stdio_client()
        finally:
            if saved is None:
                os.environ.pop("MCP_TEST_DAEMON_ARGS", None)
            else:
                os.environ["MCP_TEST_DAEMON_ARGS"] = saved
        at_exit(lambda c=c: c.proc.poll() is None and c.kill())
        c.initialize()
        for i in range(2):
            r = c.call_tool("execute_python", {"script": f"print({i})\n"}, timeout=120)
            check(not r.get("isError"), f"run {i}: {c.text(r)[:500]}")
        eq(c.close(), 0, "exit status")
        seen[level] = [ln for ln in c.stderr().splitlines() if not ln.startswith("mcp-python-sandbox: ")]
    check(not seen[None], f"--stdio wrote to the client's stderr at the default level: {seen[None][:5]}")
    runs = [ln for ln in seen["info"] if "execute_python for uid" in ln]
    eq(len(runs), 2, f"run lines with --log-level=info (stderr: {seen['info'][:8]})")


# --- progress ----------------------------------------------------------------

@test
def progress_notifications_only_with_a_token():
    d = plain_daemon()
    a = d.client()
    b = d.client()
    a.initialize()
    b.initialize()
    script = "import time\ntime.sleep(5)\nprint('done')\n"
    ra = send_call(a, {"script": script, "timeout_seconds": 20}, meta={"progressToken": "t1"})
    rb = send_call(b, {"script": script, "timeout_seconds": 20})
    r, st, text = reply_result(a.wait_for(ra, timeout=60), "with a token")
    succeeded(r, st, text, "with a token")
    r, st, text = reply_result(b.wait_for(rb, timeout=60), "without a token")
    succeeded(r, st, text, "without a token")
    prog = [m for m in a.notifications if m.get("method") == "notifications/progress"]
    check(len(prog) >= 1, f"no progress notifications: {a.notifications}")
    for m in prog:
        eq(m["params"].get("progressToken"), "t1", "progressToken")
    values = [m["params"]["progress"] for m in prog]
    check(all(x < y for x, y in zip(values, values[1:])), f"progress values must increase: {values}")
    check(len(prog) >= 2, f"a 5 s run gets progress while it runs, not only at the start: {values}")
    eq([m for m in b.notifications if m.get("method") == "notifications/progress"], [],
       "progress notifications without a token")
    a.close()
    b.close()


# --- queue -------------------------------------------------------------------

@test
def full_queue_refuses_with_busy():
    with Daemon(args=["--max-runs=1", "--max-queue=1"]) as d:
        need_sandbox(d)
        c = d.client()
        c.initialize()
        run_ok(c, "print('warm')\n")   # the bare environment exists: the three calls race only for slots
        clients = [d.client() for _ in range(3)]
        for x in clients:
            x.initialize()
        script = "import time\ntime.sleep(3)\nprint('slept')\n"
        t0 = time.monotonic()
        ids = [send_call(x, {"script": script, "timeout_seconds": 20}) for x in clients]
        replies = [None] * 3

        def wait(i):
            try:
                replies[i] = (clients[i].wait_for(ids[i], timeout=60), time.monotonic() - t0)
            except Exception as e:  # noqa: BLE001 - reported below
                replies[i] = (e, time.monotonic() - t0)

        threads = [threading.Thread(target=wait, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        busy, ok = [], []
        for reply, took in replies:
            if isinstance(reply, Exception):
                raise AssertionError(f"no reply: {reply}")
            r, st, text = reply_result(reply, "queued")
            if r.get("isError") and "busy" in text:
                busy.append((took, st, text))
            elif not r.get("isError") and st.get("stdout") == "slept\n":
                ok.append(took)
            else:
                raise AssertionError(f"neither busy nor a success: {text!r}")
        eq((len(busy), len(ok)), (1, 2), "busy refusals and successes")
        took, st, text = busy[0]
        check(took < 2, f"the busy refusal came after {took:.1f}s, not at once")
        eq(st.get("failed_phase"), "run", "failed_phase of the refusal")
        check(max(ok) >= 5.5, f"the second run waited for the first (finished after {max(ok):.1f}s)")
        for x in clients + [c]:
            x.close()


# --- check_environment -------------------------------------------------------

@test
def check_environment_after_runs():
    d = plain_daemon()
    c = d.client()
    c.initialize()
    run_ok(c, "print(1)\n")
    if test_pythons():
        run_ok(c, "print(2)\n", python_version=min(test_pythons()))
    r, st, text = call(c, "check_environment", {})
    eq(r.get("isError"), False, f"isError ({text})")
    lines = text.splitlines()
    check(lines and re.fullmatch(r"Daemon: mcp-python-sandboxd \S+", lines[0]), f"first line: {text!r}")
    eq(st.get("bwrap", {}).get("available"), True, f"bwrap available ({text})")
    check(st["bwrap"].get("version", "") and st["bwrap"]["version"] in text, f"bwrap version: {st.get('bwrap')}")
    eq(st.get("sandbox", {}).get("working"), True, f"the sandbox self-test ({text})")
    eq(st["sandbox"].get("network"), False, "network policy")
    check(re.search(r"^Network in sandbox: disabled$", text, re.M), f"the text states the network policy: {text!r}")
    uv = st.get("uv", {})
    eq(uv.get("available"), True, f"uv available ({text})")
    if uv_path():
        real = subprocess.run([uv_path(), "--version"], capture_output=True, text=True).stdout.split()[1]
        eq(uv.get("version"), real, "uv version")
        check(re.search(r"^uv: " + re.escape(real) + r" ", text, re.M), f"the text gives uv's version: {text!r}")
    versions = [p.get("version", "") for p in st.get("pythons", [])]
    for minor in test_pythons():
        check(any(v.startswith(minor + ".") for v in versions), f"Python {minor} in pythons: {versions}")
        check(re.search(r"^Pythons: .*\b" + re.escape(minor) + r"\.\d+", text, re.M), f"text lists {minor}: {text!r}")
    n_envs = len([x for x in os.listdir(os.path.join(d.cache_dir, "envs")) if not x.startswith(".")])
    check(n_envs >= 1, "the runs left environments in the store")
    eq(st.get("store", {}).get("warm_environments"), n_envs, "warm_environments (the store on the host)")
    check(re.search(r"^Store: %d warm environments" % n_envs, text, re.M), f"the text counts them: {text!r}")
    eq((st.get("runs", {}).get("running"), st["runs"].get("queued")), (0, 0), "runs in flight after the runs ended")
    eq((st.get("default_timeout_seconds"), st.get("max_timeout_seconds")), (30, 300), "the timeouts (defaults)")
    c.close()


# --- the shim's stdio fallback -----------------------------------------------

@test
def stdio_fallback_runs_scripts():
    need_uv()
    need_pythons("3.12")
    plain_daemon()   # skips where the sandbox cannot work
    cache = scratch("mcptest-stdio-cache-")
    c = stdio_client(cache_dir=cache)
    c.initialize()
    r, st, text = execute(c, "print('hello via stdio')\n")
    m = layout(text, "stdio hello")
    eq(m.group("out"), "hello via stdio\n", "stdout")
    eq(r.get("isError"), False, "isError")
    res, st = run_json(c, VERSION_PROBE, "stdio python 3.12", python_version="3.12")
    eq(res, [3, 12], "python_version through the fallback")
    r, st, text = execute(c, "import sys\nsys.exit(4)\n")
    failed(r, st, text, "run", "stdio exit 4")
    eq(st.get("exit_code"), 4, "exit code")
    r, st, text = call(c, "validate_script", {"script": "# /// script\n# dependencies = [\"six\"]\n# ///\n"})
    check(text.startswith("VALID\n") and "  - six\n" in text, f"validate_script through the fallback: {text!r}")
    eq(c.close(), 0, "the shim's exit status")


if __name__ == "__main__":
    main()
