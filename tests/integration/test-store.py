#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The environment store: warm-up, garbage collection, uv cache pruning,
builds that fail or are interrupted, and a store that survives restarts.

Packages come from wheels this test builds (--find-links, --offline), so
every case is deterministic; uv is a wrapper that logs what it is asked.
"""

import base64
import glob
import os
import shutil
import signal
import subprocess
import time

from mcptest import at_exit, scratch, skip
from mcptest import Daemon, UvLog, check, eq, main, need_pythons, test
from mcptest import RssGrowth, processes_with, sanitized, wait_until
from wheels import build_wheel

WHEELS = scratch("mcptest-store-wheels-")
for name in ("mcpt-store-a", "mcpt-store-b", "mcpt-store-c", "mcpt-store-slow"):
    build_wheel(WHEELS, name, "1.0")
# Two wheels with a file of the same path (shared.py in site-packages), each its own content.
build_wheel(WHEELS, "mcpt-store-over-a", "1.0", extra_files=[("mcpt_shared.py", b"WHO = 'a'\n")])
build_wheel(WHEELS, "mcpt-store-over-b", "1.0", extra_files=[("mcpt_shared.py", b"WHO = 'b, a longer file'\n")])



def build_dirs(cache):
    """The work directories of builds: a build with packages works in a slot (.slot-*), a bare one in .build-*."""
    return glob.glob(os.path.join(cache, "envs", ".build-*")) + glob.glob(os.path.join(cache, "envs", ".slot-*"))

def store_daemon(cache, uvlog, *args):
    need_pythons("3.11")
    return Daemon(cache_dir=cache, args=[f"--uv={uvlog.path}", f"--find-links={WHEELS}", "--offline", *args])


def run(c, deps, script="print('ok')"):
    r = c.call_tool("execute_python", {"script": script, "dependencies": deps}, timeout=120)
    return r, r.get("structuredContent", {})


def envs(cache):
    d = os.path.join(cache, "envs")
    # Built environments only: builds in progress are dot-directories.
    return sorted(n for n in os.listdir(d) if not n.startswith(".")) if os.path.isdir(d) else []


def age_env(cache, key, days):
    """Pretend an environment was last used days ago (the store orders by the marker's mtime)."""
    marker = os.path.join(cache, "envs", key, ".mcp-python-sandbox-env.json")
    t = time.time() - days * 86400
    os.utime(marker, (t, t))


@test
def warmup_prepares_in_background_without_delaying_ready():
    cache = scratch("mcptest-store-")
    uvlog = UvLog(delay=3)   # every uv run takes 3 s more
    t0 = time.monotonic()
    with store_daemon(cache, uvlog, "--warmup=mcpt-store-a") as d:
        d.wait_notify("READY=1", timeout=10)
        ready_after = time.monotonic() - t0
        check(ready_after < 2.5, f"READY=1 came {ready_after:.1f}s after start: the warm-up delayed it")
        # Nobody asked for anything, yet the environment gets built.
        wait_until(lambda: uvlog.installs() and len(envs(cache)) == 1, 60, "the warm-up build")
        check("mcpt-store-a" in uvlog.installs()[0], uvlog.installs())
        c = d.client()
        c.initialize()
        v = c.call_tool("validate_script", {"script": "import mcpt_store_a", "dependencies": ["mcpt-store-a"]})
        eq(v["structuredContent"]["warm"], True, "warm after warm-up")
        before = len(uvlog.lines())
        r, st = run(c, ["mcpt-store-a"], "import mcpt_store_a; print('imported')")
        check(not r["isError"], c.text(r))
        eq(st["environment"]["warm"], True, "the run used the warmed environment")
        eq(len(uvlog.lines()), before, "no uv process for a warm run")
        c.close()
    uvlog.close()
    shutil.rmtree(cache, ignore_errors=True)


@test
def store_survives_restart_and_failed_builds_leave_nothing():
    cache = scratch("mcptest-store-")
    uvlog = UvLog()
    with store_daemon(cache, uvlog) as d:
        c = d.client()
        c.initialize()
        r, st = run(c, ["mcpt-store-b"])
        check(not r["isError"], c.text(r))
        key = st["environment"]["key"]
        r, st = run(c, ["mcpt-store-missing-package"])
        check(r["isError"], "a package that does not exist must fail")
        eq(st["failed_phase"], "prepare", "phase")
        c.close()
    # Only the good environment, and no half-built directory.
    eq(envs(cache), [key], "store after one good and one failed build")
    eq(build_dirs(cache), [], "leftover build directories")

    with store_daemon(cache, uvlog) as d:
        c = d.client()
        c.initialize()
        # Not counting the version probe at start-up, which may come before or after this point.
        work = lambda: [x for x in uvlog.lines() if x.strip() != "--version"]  # noqa: E731
        before = len(work())
        r, st = run(c, ["mcpt-store-b"])
        check(not r["isError"], c.text(r))
        eq(st["environment"]["warm"], True, "warm across a restart")
        eq(len(work()), before, "no uv process after a restart")
        c.close()
    uvlog.close()
    shutil.rmtree(cache, ignore_errors=True)


@test
def bytecode_is_compiled_after_the_environment_is_in_place():
    """The build does not wait for bytecode: uv installs without compiling, the run goes, and the daemon compiles
    the environment's bytecode on the side; a compile cut short is taken up again at the next start."""
    cache = scratch("mcptest-store-")
    uvlog = UvLog()
    with store_daemon(cache, uvlog) as d:
        c = d.client()
        c.initialize()
        r, st = run(c, ["mcpt-store-c"], "import mcpt_store_c; print(mcpt_store_c.__version__)")
        check(not r["isError"], c.text(r))
        eq(st["stdout"], "1.0\n", "the package imports")
        installs = [x for x in uvlog.lines() if " install " in f" {x} "]
        check(installs and not any("compile" in x.lower() for x in installs), f"uv compiles nothing: {installs}")
        env = os.path.join(cache, "envs", st["environment"]["key"])
        marker = os.path.join(env, ".mcp-python-sandbox-compiled")
        wait_until(lambda: os.path.exists(marker), 60, "the environment's bytecode to be compiled")
        pattern = os.path.join(env, "lib", "python3.*", "site-packages", "mcpt_store_c", "__pycache__", "*.pyc")
        check(glob.glob(pattern), f"the package's bytecode is there: {pattern}")
        # And runs see it (the sandbox itself writes none).
        r, st = run(c, ["mcpt-store-c"], "import os, mcpt_store_c; print(os.path.exists(mcpt_store_c.__cached__))")
        eq((r["isError"], st["stdout"]), (False, "True\n"), "the bytecode, seen from the sandbox")
        c.close()
    # A compile that did not finish: the marker is missing at the next start.
    os.unlink(marker)
    for pyc in glob.glob(pattern):
        os.unlink(pyc)
    with store_daemon(cache, uvlog) as d:
        wait_until(lambda: os.path.exists(marker), 60, "the compile to be taken up again after a restart")
        check(glob.glob(pattern), "compiled again")
    uvlog.close()


@test
def builds_reuse_one_slot_and_uv_venv_runs_once_per_python():
    """A build works in a slot, the same path each time, so uv's interpreter cache applies (no new entry in it:
    uv did not start the interpreter to learn about it again), and copies what `uv venv` made the first time."""
    cache = scratch("mcptest-store-")
    uvlog = UvLog()

    def interpreters():
        return sorted(glob.glob(os.path.join(cache, "uv", "interpreter-v*", "*", "*")))  # one per path queried

    with store_daemon(cache, uvlog) as d:
        c = d.client()
        c.initialize()
        for dep in ("mcpt-store-a", "mcpt-store-b", "mcpt-store-c"):
            r, st = run(c, [dep], f"import {dep.replace('-', '_')}; print('imported')")
            check(not r["isError"], c.text(r))
            eq(st.get("stdout"), "imported\n", f"{dep}: the run")
            if dep == "mcpt-store-a":
                known = interpreters()
                check(known, "uv's interpreter cache has entries after the first build")
        eq(interpreters(), known, "no interpreter queried anew by the second and third builds")
        venvs = [line for line in uvlog.lines() if line.startswith("venv")]
        eq(len(venvs), 1, f"uv venv ran once, for the first build: {uvlog.lines()}")
        pythons = {line.split("--python ")[1].split()[0] for line in uvlog.installs()}
        eq(len(pythons), 1, f"every install into the same slot: {pythons}")
        check("/.slot-" in pythons.pop(), "the slot")
        eq(build_dirs(cache), [], "the slot is gone once the environment is in place")
        # Each environment is whole and its own.
        r, st = run(c, ["mcpt-store-b"], "import importlib.util as u; print(u.find_spec('mcpt_store_a') is None)")
        eq(st.get("stdout"), "True\n", "nothing of another build in an environment")
        c.close()
    uvlog.close()


@test
def the_first_call_on_a_python_readies_its_build_slot():
    """A bare environment's first call starts, in the background, what the first build with packages would
    otherwise pay for: uv venv for the template, and uv's interpreter cache for the slot (uv pip freeze)."""
    cache = scratch("mcptest-store-")
    uvlog = UvLog()

    def interpreters():
        return sorted(glob.glob(os.path.join(cache, "uv", "interpreter-v*", "*", "*")))

    with store_daemon(cache, uvlog) as d:
        c = d.client()
        c.initialize()
        r, st = run(c, [], "print('hello')")
        check(not r["isError"], c.text(r))
        wait_until(lambda: glob.glob(os.path.join(cache, "envs", ".venv-*")) and not build_dirs(cache), 60,
                   "the template, and the slot free again")
        eq([line.split()[:2] for line in uvlog.lines() if line != "--version"],
           [["venv", "--no-config"], ["pip", "freeze"]], "uv venv, then uv pip freeze on the slot")
        known = interpreters()
        n = len(uvlog.lines())
        r, st = run(c, ["mcpt-store-a"], "import mcpt_store_a; print('imported')")
        eq(st.get("stdout"), "imported\n", f"the run ({c.text(r)})")
        eq([line.split()[:2] for line in uvlog.lines()[n:]], [["pip", "install"]], "one uv process for the build")
        eq(interpreters(), known, "no interpreter queried by the first build")
        c.close()
    uvlog.close()


def pyc_source(pyc):
    """The source a .pyc in __pycache__ belongs to, and whether its header (mtime, size) matches that file."""
    src = os.path.join(os.path.dirname(os.path.dirname(pyc)), os.path.basename(pyc).split(".")[0] + ".py")
    with open(pyc, "rb") as f:
        head = f.read(16)
    st = os.stat(src)
    flags = int.from_bytes(head[4:8], "little")
    return src, flags == 0 and int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF and \
        int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF


@test
def shared_bytecode_is_each_wheels_own():
    """The bytecode of an environment goes into uv's cache only for sources that are that wheel's own files: two
    wheels with a file of the same path, installed together (one wins in the environment), and every .pyc in the
    cache belongs to the file beside it (its header's mtime and size are that file's), none to the other wheel's."""
    cache = scratch("mcptest-store-")
    uvlog = UvLog()
    with store_daemon(cache, uvlog) as d:
        c = d.client()
        c.initialize()
        r, st = run(c, ["mcpt-store-over-a", "mcpt-store-over-b"], "import mcpt_shared; print(mcpt_shared.WHO)")
        check(not r["isError"], c.text(r))
        key = st["environment"]["key"]
        wait_until(lambda: os.path.exists(os.path.join(cache, "envs", key, ".mcp-python-sandbox-compiled")), 60,
                   "the compile")
        r, st = run(c, ["mcpt-store-a"], "import mcpt_store_a; print('ok')")
        wait_until(lambda: os.path.exists(os.path.join(cache, "envs", st["environment"]["key"],
                                                       ".mcp-python-sandbox-compiled")), 60, "the second compile")
        c.close()
    pycs = glob.glob(os.path.join(cache, "uv", "archive-v*", "*", "**", "__pycache__", "*.pyc"), recursive=True)
    check(any("mcpt_store_a" in p for p in pycs), f"bytecode shared through the cache: {pycs}")
    # The file of the same path: its bytecode in the one wheel whose file the environment has, not the other's.
    env_src = glob.glob(os.path.join(cache, "envs", key, "lib", "python*", "site-packages", "mcpt_shared.py"))
    shared = [p for p in pycs if os.path.basename(p).startswith("mcpt_shared.")]
    eq(len(shared), 1, f"the bytecode of mcpt_shared.py in one wheel: {shared}")
    eq(os.stat(pyc_source(shared[0])[0]).st_ino, os.stat(env_src[0]).st_ino, "the wheel whose file it is")
    for p in pycs:
        src, ok = pyc_source(p)
        check(ok, f"{p} is not the bytecode of {src}")
    uvlog.close()


@test
def interrupted_build_leaves_nothing_behind():
    cache = scratch("mcptest-store-")
    slow = UvLog(delay=30, delay_on="pip install")
    d = store_daemon(cache, slow)
    try:
        c = d.client()
        c.initialize()
        c.send({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                "params": {"name": "execute_python",
                           "arguments": {"script": "print(1)", "dependencies": ["mcpt-store-slow"]}}})
        wait_until(lambda: build_dirs(cache), 30, "a build directory")
        # The daemon dies hard in the middle of the build.
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
        c.kill()
        check(build_dirs(cache), "the interrupted build left its directory")
    finally:
        d.close()
    fast = UvLog()
    with store_daemon(cache, fast) as d:
        c = d.client()
        c.initialize()
        # Start-up removes what the interrupted build left; nothing half-built is ever used.
        c.call_tool("check_environment")
        eq(build_dirs(cache), [], "leftovers after restart")
        eq(envs(cache), [], "no environment from the interrupted build")
        r, st = run(c, ["mcpt-store-slow"], "import mcpt_store_slow; print('fine')")
        check(not r["isError"], c.text(r))
        eq(st["environment"]["warm"], False, "built anew")
        c.close()
    slow.close()
    fast.close()
    shutil.rmtree(cache, ignore_errors=True)


@test
def calls_waiting_for_one_build_run_in_the_order_they_came():
    cache = scratch("mcptest-store-")
    slow = UvLog(delay=2, delay_on="pip install")
    marks = [f"mcpt-store-order-{i}-{os.getpid()}" for i in range(3)]
    with store_daemon(cache, slow, "--max-runs=1") as d:
        c = d.client()
        c.initialize()
        rids = []
        for m in marks:
            rid = c.new_id()
            script = ("import os, sys\n"
                      f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', {m!r}])\n")
            c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                    "params": {"name": "execute_python",
                               "arguments": {"script": script, "dependencies": ["mcpt-store-b"]}}})
            rids.append(rid)
            time.sleep(0.1)
        # One slot: the first call runs, and each cancelled run lets the next in line in.
        for i, m in enumerate(marks):
            running = wait_until(lambda: [k for k, mk in enumerate(marks) if processes_with(mk)], 60,
                                 f"run {i} to start")
            eq(running, [i], "the runs going, by the order their calls came in")
            c.notify("notifications/cancelled", {"requestId": rids[i], "reason": "test"})
            wait_until(lambda: not processes_with(m), 10, f"run {i} to end")
        eq(len(slow.installs()), 1, "one build for the three calls")
        c.close()
    slow.close()
    shutil.rmtree(cache, ignore_errors=True)


@test
def uv_crashing_in_a_build_fails_only_that_call():
    """uv dies by a signal while it installs one requirement set: that call fails with a clear error, a call
    building another set at the same time succeeds, nothing half-built is left, and the daemon goes on."""
    cache = scratch("mcptest-store-")
    uvlog = UvLog()
    crashing = os.path.join(scratch("mcptest-uvcrash-"), "uv")
    with open(crashing, "w") as f:
        f.write("#!/bin/sh\n"
                'case "$*" in *"pip install"*mcpt-store-a*) sleep 0.5; kill -SEGV $$;; esac\n'
                f"exec '{uvlog.path}' \"$@\"\n")
    os.chmod(crashing, 0o755)
    with Daemon(cache_dir=cache, args=[f"--uv={crashing}", f"--find-links={WHEELS}", "--offline"]) as d:
        need_pythons("3.11")
        bad, good = d.client(), d.client()
        bad.initialize()
        good.initialize()
        bad.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "execute_python", "arguments": {"script": "print(1)",
                                                                     "dependencies": ["mcpt-store-a"]}}})
        r, st = run(good, ["mcpt-store-b"], "import mcpt_store_b; print('fine')")
        eq((r["isError"], st["stdout"]), (False, "fine\n"), "the other call, built meanwhile")
        reply = bad.wait_for(1, timeout=120)["result"]
        text = bad.text(reply)
        eq((reply["isError"], reply["structuredContent"]["failed_phase"]), (True, "prepare"), text)
        check("crashed" in text and "SIGSEGV" in text, f"the error says the installer crashed: {text}")
        eq(build_dirs(cache), [], "half-built directories")
        built = [open(os.path.join(cache, "envs", e, ".mcp-python-sandbox-env.json")).read() for e in envs(cache)]
        check(any("mcpt-store-b" in x for x in built) and not any("mcpt-store-a" in x for x in built),
              f"only the good environment: {built}")
        r, st = run(good, [], "print('still serving')")
        eq(st.get("stdout"), "still serving\n", "the daemon goes on")
        bad.close()
        good.close()
    uvlog.close()


@test
def a_full_disk_during_a_build_is_a_clear_error():
    """The cache directory fills up while uv installs: a clear error, nothing half-built left, and once there is
    room again the same requirements build."""
    if os.geteuid() != 0:
        skip("mounting a small file system for the cache needs root")
    need_pythons("3.11")
    cache = scratch("mcptest-store-full-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", cache]).returncode != 0:
        skip("could not mount a tmpfs")
    at_exit(lambda: subprocess.run(["umount", "-l", cache]))
    wheels = scratch("mcptest-store-big-")
    # Random bytes do not compress: the wheel and what uv unpacks of it take ~8 MB, more than there is.
    blob = base64.b64encode(os.urandom(6 * 1024 * 1024)).decode()
    build_wheel(wheels, "mcpt-store-big", "1.0", module_source=f"BLOB = {blob!r}\n")
    uvlog = UvLog()
    with Daemon(cache_dir=cache, args=[f"--uv={uvlog.path}", f"--find-links={wheels}", "--offline"]) as d:
        c = d.client()
        c.initialize()
        r, st = run(c, ["mcpt-store-big"], "import mcpt_store_big; print(len(mcpt_store_big.BLOB))")
        text = c.text(r)
        eq((r["isError"], st.get("failed_phase")), (True, "prepare"), text)
        check("No space left on device" in text, f"the error says why: {text}")
        eq(build_dirs(cache), [], "half-built directories")
        check(all("mcpt" not in open(os.path.join(cache, "envs", e, ".mcp-python-sandbox-env.json")).read()
                  for e in envs(cache)), f"no environment with the package: {envs(cache)}")
        # Room again: the same call builds.
        eq(subprocess.run(["mount", "-o", "remount,size=64m", cache]).returncode, 0, "remount")
        r, st = run(c, ["mcpt-store-big"], "import mcpt_store_big; print(len(mcpt_store_big.BLOB))")
        eq(r["isError"], False, c.text(r))
        c.close()
    uvlog.close()


@test
def a_metadata_block_seen_before_costs_no_process():
    cache = scratch("mcptest-store-")
    uvlog = UvLog()
    # An escape (\\u003e is ">"): a block for tomllib, not one the daemon reads by itself (src/pep723/toml-subset.h).
    block = "# /// script\n# dependencies = ['mcpt-store-a']\n# requires-python = \"\\u003e=3.11\"\n# ///\n"
    with store_daemon(cache, uvlog) as d:
        c = d.client()
        c.initialize()
        for i in range(3):
            v = c.call_tool("validate_script", {"script": block + f"print({i})"})
            check(not v["isError"], c.text(v))
            eq(v["structuredContent"]["dependencies"], ["mcpt-store-a"], "dependencies read from the block")
        r, _ = run(c, [], block + "import mcpt_store_a\nprint('ran')")
        check(not r["isError"] and "ran" in c.text(r), c.text(r))
        reads = d.log().count("Reading a metadata block")
        eq(reads, 1, "sandboxed TOML reads for one block used four times")
        # A block as people write it is read in the daemon: no reader at all, the same dependencies.
        common = "# /// script\n# dependencies = [\n#   'mcpt-store-a',  # the one\n# ]\n# ///\n"
        v = c.call_tool("validate_script", {"script": common + "print('x')"})
        check(not v["isError"], c.text(v))
        eq(v["structuredContent"]["dependencies"], ["mcpt-store-a"], "dependencies read from the common block")
        eq(d.log().count("Reading a metadata block"), 1, "sandboxed TOML reads after a common block")
        check(d.log().count("in the daemon.") >= 1, f"the daemon read the common block itself: {d.log()[-2000:]}")
        c.close()
    uvlog.close()
    shutil.rmtree(cache, ignore_errors=True)


@test
def large_metadata_blocks_cost_the_daemon_no_memory():
    # Each block is new (the cache keeps answers by hash) and goes to the sandboxed reader (a key the daemon does
    # not read by itself). Before the reader sent only what the daemon uses, each such block of 200 000 values
    # cost some 14 MB, kept in the cache: 56 MB for these four.
    cache = scratch("mcptest-store-")
    uvlog = UvLog()
    ones = ",".join(["1"] * 200000)
    with store_daemon(cache, uvlog) as d:
        c = d.client()
        c.initialize()
        c.call_tool("validate_script", {"script": "# /// script\n# x = 1\n# ///\nprint(0)"})
        with RssGrowth(d.proc.pid) as g:
            for i in range(4):
                block = f"# /// script\n# dependencies = ['mcpt-store-a']\n# unused{i} = [{ones}]\n# ///\n"
                v = c.call_tool("validate_script", {"script": block + "print(1)"})
                check(not v["isError"], c.text(v)[:400])
                eq(v["structuredContent"]["dependencies"], ["mcpt-store-a"], "dependencies beside a large table")
                check(f'unknown key "unused{i}"' in c.text(v), c.text(v)[:400])
            # Thousands of dependencies are refused by their number, before the daemon parses them.
            many = ",".join(f"'p{n}'" for n in range(20000))
            v = c.call_tool("validate_script", {"script": f"# /// script\n# dependencies = [{many}]\n# ///\n"})
            check(v["isError"] and "at most 4096 values" in c.text(v), c.text(v)[:400])
            # And a string of 900 KB by its length: sixteen of them, kept, would be 14 MB.
            for i in range(16):
                long = f"{i}" + "x" * 900000
                v = c.call_tool("validate_script", {"script": f'# /// script\n# requires-python = "{long}"\n# ///\n'})
                check(v["isError"] and "256 KiB" in c.text(v), c.text(v)[:400])
        print(f"# the daemon's RSS grew by {g.grew} KiB over 21 large blocks", flush=True)
        # Under ASan its quarantine and shadow are not the daemon's memory.
        if not sanitized(d.proc.pid):
            check(g.grew < 8 * 1024, f"the daemon's RSS grew by {g.grew} KiB over 21 large blocks")
        eq(d.log().count("Reading a metadata block"), 22, "sandboxed TOML reads (the first block too)")
        c.close()
    uvlog.close()
    shutil.rmtree(cache, ignore_errors=True)


@test
def unused_environments_are_collected_by_age_and_budget():
    cache = scratch("mcptest-store-")
    uvlog = UvLog()
    with store_daemon(cache, uvlog, "--store-max-age=1d") as d:
        c = d.client()
        c.initialize()
        _, a = run(c, ["mcpt-store-a"])
        _, b = run(c, ["mcpt-store-b"])
        age_env(cache, a["environment"]["key"], 3)
        # The next build collects what is past the age limit, and nothing else (in a child, soon after).
        _, cc = run(c, ["mcpt-store-c"])
        want = sorted([b["environment"]["key"], cc["environment"]["key"]])
        wait_until(lambda: envs(cache) == want, 30, "the age collection")
        time.sleep(0.5)
        eq(envs(cache), want, "after age collection")
        r, again = run(c, ["mcpt-store-a"])
        check(not r["isError"], c.text(r))
        eq(again["environment"]["warm"], False, "a collected environment is rebuilt")
        c.close()

    with store_daemon(cache, uvlog, "--store-max-size=1", "--store-max-age=0") as d:
        c = d.client()
        c.initialize()
        keys = envs(cache)
        for k in keys:
            age_env(cache, k, 2)
        # Over the budget: the least recently used go, the one just built stays.
        r, st = run(c, ["mcpt-store-a", "mcpt-store-b"])
        check(not r["isError"], c.text(r))
        wait_until(lambda: envs(cache) == [st["environment"]["key"]], 30, "the budget collection")
        c.close()
    uvlog.close()
    shutil.rmtree(cache, ignore_errors=True)


@test
def uv_cache_is_pruned_once_builds_go_quiet():
    cache = scratch("mcptest-store-")
    uvlog = UvLog()
    with store_daemon(cache, uvlog, "--uv-prune-delay=1s") as d:
        c = d.client()
        c.initialize()
        r, _ = run(c, ["mcpt-store-c"])
        check(not r["isError"], c.text(r))
        wait_until(lambda: any(line.startswith("cache prune") for line in uvlog.lines()), 20, "uv cache prune")
        check("Pruned the uv cache" in d.log() or "uv cache prune failed" not in d.log(), d.log())
        # The environment keeps working after the prune (it does not depend on the cache).
        r, st = run(c, ["mcpt-store-c"], "import mcpt_store_c; print('still here')")
        check(not r["isError"] and "still here" in c.text(r), c.text(r))
        eq(st["environment"]["warm"], True, "still warm")
        c.close()
    uvlog.close()
    shutil.rmtree(cache, ignore_errors=True)


@test
def an_offline_install_that_fails_part_way_leaves_nothing_for_the_online_retry():
    """The offline-first install fails after putting a file in the slot that replaces bin/python (a wheel's data
    file can): the online retry starts from an emptied slot and a fresh copy of the template, so uv never starts
    that file on the host, and the build succeeds."""
    need_pythons("3.11")
    cache = scratch("mcptest-store-retry-")
    # A page of uv's index cache, fresh, for the name asked for: the build resolves offline first.
    pages = os.path.join(cache, "uv", "simple-v99", "pypi")
    os.makedirs(pages)
    open(os.path.join(pages, "mcpt-store-c.rkyv"), "w").close()
    os.chmod(os.path.join(cache, "uv"), 0o700)
    host = scratch("mcptest-store-host-")
    marker = os.path.join(host, "ran-on-the-host")
    failed = os.path.join(host, "offline-failed")
    uvlog = UvLog()
    wrapper = os.path.join(scratch("mcptest-uvpartway-"), "uv")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\n"
                'py=; prev=; for a in "$@"; do [ "$prev" = --python ] && py="$a"; prev="$a"; done\n'
                'case "$*" in\n'
                '"pip install"*--offline*)\n'
                # Part-way: the slot's interpreter replaced by what a package brought, then a failure.
                '  real=$(readlink -f "$py"); rm -f "$py"\n'
                f'  printf \'#!/bin/sh\\ntouch %s\\nexec %s "$@"\\n\' \'{marker}\' "$real" > "$py"\n'
                f'  chmod 755 "$py"; touch \'{failed}\'; echo "error: not in the cache" >&2; exit 1;;\n'
                # Online: from the local wheels all the same.
                f'"pip install"*) exec \'{uvlog.path}\' "$@" --no-index --find-links \'{WHEELS}\';;\n'
                "esac\n"
                f"exec '{uvlog.path}' \"$@\"\n")
    os.chmod(wrapper, 0o755)
    with Daemon(cache_dir=cache, args=[f"--uv={wrapper}"]) as d:
        c = d.client()
        c.initialize()
        # The first build makes the template; the second copies it, and resolves offline first.
        r, st = run(c, ["mcpt-store-a"], "import mcpt_store_a; print('imported')")
        eq((r["isError"], st.get("stdout")), (False, "imported\n"), c.text(r))
        os.utime(os.path.join(pages, "mcpt-store-c.rkyv"))
        r, st = run(c, ["mcpt-store-c"], "import mcpt_store_c; print('imported')")
        installs = uvlog.installs()
        check(os.path.exists(failed), "the offline install was tried (and failed part-way)")
        check(not os.path.exists(marker), "uv started a file a failed install left in the slot, on the host")
        check(any("mcpt-store-c" in line for line in installs), f"the online retry ran: {installs}")
        eq((r["isError"], st.get("stdout")), (False, "imported\n"), c.text(r))
        eq(build_dirs(cache), [], "slots left behind")
        c.close()
    uvlog.close()


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(WHEELS, ignore_errors=True)
