#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test of a run's resource limits and system call filter.

From inside real runs: the denied system calls fail with EPERM (clone3 with
ENOSYS), no capabilities are left, and ordinary Python (threads,
subprocesses, multiprocessing) still works. A memory bomb, a fork bomb, a disk
fill and a CPU hog are each stopped by their limit and reported as that limit;
a call can lower a limit but not raise it.

Each test runs against every daemon this machine allows: the daemon as the
user running the tests and, when that is root, also as an unprivileged user
(65534 through setpriv), because RLIMIT_NPROC does not bind uid 0: a fork bomb
is contained by the unprivileged daemon (or by cgroups) only. The daemons run
inside a pids cgroup of this program's (mcptest.pids_safety_net()), so that a
fork bomb that gets past its limit stops there; without one, a root daemon's
fork bomb is not tried.

Needs $DAEMON, $SHIM, bubblewrap and a Python. Exit 77 when nothing can run.
"""

import json
import os
import platform
import shutil
import subprocess
import tempfile
import time

import mcptest
from mcptest import Daemon, check, eq, main, skip, test, test_pythons, with_defaults

NOBODY = 65534
EPERM, ENOSYS = 1, 38

# --- daemons -----------------------------------------------------------------

_daemons = {}
_cleanup = []


def bwrap_works(uid=None):
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return False
    argv = [bwrap, "--unshare-all", "--unshare-user", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
            "/bin/true"]
    if uid is not None:
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv]
    try:
        return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def system_python():
    """(version, dir) of a python3.N in /usr/bin that anyone may run, for the unprivileged daemon."""
    for name in sorted(os.listdir("/usr/bin"), reverse=True):
        parts = name[len("python"):].split(".")
        if name.startswith("python3.") and len(parts) == 2 and parts[1].isdigit() and int(parts[1]) >= 11:
            return parts[0] + "." + parts[1], "/usr/bin"
    return None, None


class Mode:
    def __init__(self, uid, daemon, python):
        self.uid, self.daemon, self.python = uid, daemon, python
        self.name = f"daemon as uid {uid}"
        self.client = daemon.client()
        self.client.initialize()

    def run(self, script, limits=None, timeout=60, **extra):
        args = {"script": script, "python_version": self.python, **extra}
        if limits is not None:
            args["limits"] = limits
        r = self.client.call_tool("execute_python", args, timeout=timeout)
        # A lean result leaves fields at their usual values out: read them as those (mcptest.with_defaults).
        return r, with_defaults(r["structuredContent"]), self.client.text(r)

    def mechanism(self):
        # A result states the limits in force when the call gave any (an empty set is enough).
        _, st, _ = self.run("pass", limits={})
        return st["limits"]["mechanism"]


# Not the default (1024): the tests see that the setting reaches the run.
OPEN_FILES = 200


def start_native():
    have = test_pythons()
    args = ["--tmpfs-size=32M", f"--max-open-files={OPEN_FILES}"]
    if have:
        version = max(have, key=lambda v: tuple(map(int, v.split("."))))
    else:
        version, bindir = system_python()
        if not version:
            skip("no Python 3.11+ (pyenv, or /usr/bin/python3.N) for the tests")
        args.append(f"--python-search-path={bindir}")
    if not bwrap_works():
        skip("bubblewrap does not work here")
    d = Daemon(args=args)
    _cleanup.append(d.close)
    return Mode(os.geteuid(), d, version)


def start_unprivileged():
    """The real daemon as uid 65534: what RLIMIT_NPROC binds."""
    if os.geteuid() != 0:
        return None
    version, bindir = system_python()
    if not version or not shutil.which("setpriv") or not bwrap_works(NOBODY):
        return None
    base = tempfile.mkdtemp(prefix="mcptest-limits-")
    _cleanup.append(lambda: shutil.rmtree(base, ignore_errors=True))
    cache = os.path.join(base, "cache")
    os.mkdir(cache)
    os.chown(cache, NOBODY, NOBODY)
    os.chmod(base, 0o755)
    wrapper = os.path.join(base, "daemon-as-nobody")
    mcptest.executable(wrapper, f'#!/bin/sh\nexec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups -- '
                                f'\'{mcptest.DAEMON}\' "$@"\n')
    real = mcptest.DAEMON
    mcptest.DAEMON = wrapper
    try:
        d = Daemon(args=["--tmpfs-size=32M", f"--max-open-files={OPEN_FILES}", f"--python-search-path={bindir}"],
                   cache_dir=cache)
    finally:
        mcptest.DAEMON = real
    _cleanup.append(d.close)
    return Mode(NOBODY, d, version)


def modes():
    """Every daemon to test against, started once, inside the safety net where there is one."""
    if "all" not in _daemons:
        mcptest.pids_safety_net()
        found = [start_native()]
        u = start_unprivileged()
        if u:
            found.append(u)
        _daemons["all"] = found
    return _daemons["all"]


def for_each_mode(fn):
    """A test run against each daemon; skipped only when it skips for all of them."""
    def run_all():
        ran, skipped = 0, None
        for m in modes():
            try:
                fn(m)
            except mcptest.Skip as e:
                skipped = e
                print(f"# {fn.__name__}: {m.name}: skipped: {e}", flush=True)
                continue
            except AssertionError as e:
                raise AssertionError(f"[{m.name}] {e}") from None
            ran += 1
            print(f"# {fn.__name__}: {m.name}: ok", flush=True)
        if not ran and skipped:
            raise skipped
    run_all.__name__ = fn.__name__
    return test(run_all)


def expect_limit(m, result, limit, what):
    r, st, text = result
    check(r.get("isError") is True, f"{what}: not an error: {text[-800:]}")
    eq(st.get("limit"), limit, f"{what}: limit (stderr {st['stderr'][-600:]!r}, exit {st['exit_code']})")
    check(f"--- limit: {limit} ---" in text, f"{what}: the text does not name the limit: {text[-600:]}")


# --- the system call filter ---------------------------------------------------

# x86-64 numbers; every call is made so that, allowed, it would be harmless.
SYSCALL_PROBE = r'''
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a) for a in args])
    if r == 0 and nr in (56,):      # a clone that got through: the child leaves at once
        os._exit(0)
    return 0 if r >= 0 else ctypes.get_errno()
out = {
    "ptrace": sc(101, 0, 0, 0, 0),                              # PTRACE_TRACEME
    "process_vm_readv": sc(310, os.getpid(), 0, 0, 0, 0, 0),
    "bpf": sc(321, 0, 0, 0),
    "perf_event_open": sc(298, 0, 0, -1 & 0xffffffff, -1 & 0xffffffff, 0),
    "keyctl": sc(250, 0, -3 & 0xffffffffffffffff, 0),            # KEYCTL_GET_KEYRING_ID session
    "add_key": sc(248, ctypes.addressof(ctypes.create_string_buffer(b"user")), ctypes.addressof(ctypes.create_string_buffer(b"k")), 0, 0, -3 & 0xffffffffffffffff),
    "request_key": sc(249, 0, 0, 0, 0),
    "userfaultfd": sc(323, 0),
    "io_uring_setup": sc(425, 1, ctypes.addressof(ctypes.create_string_buffer(120))),
    "mount": sc(165, 0, 0, 0, 0, 0),
    "umount2": sc(166, 0, 0),
    "pivot_root": sc(155, 0, 0),
    "chroot": sc(161, 0),
    "unshare_user": sc(272, 0x10000000),
    "unshare_ns": sc(272, 0x00020000),
    "setns": sc(308, 0, 0),
    "clone_newuser": sc(56, 0x10000000 | 17, 0, 0, 0, 0),
    "clone_newnet": sc(56, 0x40000000 | 17, 0, 0, 0, 0),
    "clone3": sc(435, 0, 0),
    "personality_addr_no_randomize": sc(135, 0x0040000),
    "fsopen": sc(430, 0, 0), "fsmount": sc(432, 0, 0, 0), "open_tree": sc(428, 0, 0, 0),
    "move_mount": sc(429, 0, 0, 0, 0, 0), "fspick": sc(433, 0, 0, 0), "mount_setattr": sc(442, 0, 0, 0, 0, 0),
    "kexec_load": sc(246, 0, 0, 0, 0), "init_module": sc(175, 0, 0, 0), "finit_module": sc(313, 0, 0, 0),
    "delete_module": sc(176, 0, 0), "reboot": sc(169, 0, 0, 0, 0), "swapon": sc(167, 0, 0), "acct": sc(163, 0),
    "syslog": sc(103, 10, 0, 0), "quotactl": sc(179, 0, 0, 0, 0), "lookup_dcookie": sc(212, 0, 0, 0),
    "name_to_handle_at": sc(303, -100 & 0xffffffffffffffff, 0, 0, 0, 0), "open_by_handle_at": sc(304, 0, 0, 0),
    "vhangup": sc(153), "iopl": sc(172, 0), "ioperm": sc(173, 0, 0, 0), "settimeofday": sc(164, 0, 0),
    "clock_settime": sc(227, 0, 0), "adjtimex": sc(159, ctypes.addressof(ctypes.create_string_buffer(256))),
    "pidfd_getfd": sc(438, 0, 0, 0),
}
try:
    os.unshare(os.CLONE_NEWUSER)
    out["os.unshare"] = 0
except OSError as e:
    out["os.unshare"] = e.errno
except AttributeError:
    out["os.unshare"] = 1
allowed = {"personality_query": sc(135, 0xffffffff), "personality_linux": sc(135, 0),
           "getpid": sc(39)}
status = dict(l.split(":", 1) for l in open("/proc/self/status"))
print(json.dumps({"denied": out, "allowed": allowed,
                  "status": {k: status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Seccomp")}}))
'''


@for_each_mode
def test_seccomp_denies(m):
    if platform.machine() != "x86_64":
        skip("the probe uses x86-64 system call numbers")
    r, st, text = m.run(SYSCALL_PROBE)
    check(not r.get("isError"), f"probe failed: {text[-1500:]}")
    got = json.loads(st["stdout"])
    for name, err in got["denied"].items():
        want = ENOSYS if name == "clone3" else EPERM
        eq(err, want, f"errno of {name}")
    for name, err in got["allowed"].items():
        eq(err, 0, f"errno of {name}")
    s = got["status"]
    eq(s["CapEff"], "0000000000000000", "CapEff")
    eq(s["CapPrm"], "0000000000000000", "CapPrm")
    eq(s["NoNewPrivs"], "1", "NoNewPrivs")
    eq(s["Seccomp"], "2", "Seccomp (filter mode)")


NORMAL = r'''
import concurrent.futures, math, multiprocessing, os, subprocess, sys, tempfile, threading
out = []
t = [threading.Thread(target=out.append, args=(i,)) for i in range(16)]
[x.start() for x in t]; [x.join() for x in t]
assert sorted(out) == list(range(16))
p = subprocess.run([sys.executable, "-c", "print(6*7)"], capture_output=True, text=True, check=True)
assert p.stdout.strip() == "42", p
assert subprocess.run(["/bin/sh", "-c", "echo hi | cat"], capture_output=True, text=True).stdout == "hi\n"
def sq(x):
    return x * x
if __name__ == "__main__":
    with multiprocessing.Pool(2) as pool:
        assert pool.map(sq, range(10)) == [x * x for x in range(10)]
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        assert list(ex.map(sq, range(5))) == [0, 1, 4, 9, 16]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        assert pool.map(sq, [3]) == [9]
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 1000000); f.seek(0); assert len(f.read()) == 1000000
    assert math.isclose(sum(math.sin(i) ** 2 + math.cos(i) ** 2 for i in range(10000)), 10000)
    buf = bytearray(200 * 1024 * 1024)      # well under the memory limit
    print("all good")
'''


@for_each_mode
def test_normal_python_still_works(m):
    r, st, text = m.run(NORMAL, limits={})
    check(not r.get("isError"), f"ordinary Python failed: {text[-2000:]}")
    eq(st["stdout"].strip(), "all good", "stdout")
    eq(st.get("limit"), None, "limit of a run that hit none")
    lim = st["limits"]
    eq(lim["lowered"], [], "lowered")
    check(lim["mechanism"] in ("cgroup", "rlimit"), f"mechanism {lim['mechanism']!r}")
    eq(lim["max_file_size_mb"], 32, "max_file_size_mb (defaults to tmpfs-size)")
    check(lim["memory_mb"] == 2048 and lim["max_processes"] == 256, f"configured defaults: {lim}")


# --- limits --------------------------------------------------------------------

@for_each_mode
def test_memory_bomb(m):
    # Bounded (4 GiB), so that a broken limit fails the test rather than the machine.
    bomb = "keep = []\nfor i in range(256):\n    keep.append(b'x' * (16 << 20))\n"
    res = m.run(bomb, limits={"memory_mb": 256})
    expect_limit(m, res, "memory", "memory bomb")
    # The configured limit holds too: 3 GiB is more than a run gets (as address space: no need to touch it).
    if res[1]["limits"]["mechanism"] == "rlimit":
        res = m.run("x = bytearray(3 << 30)\n")
        expect_limit(m, res, "memory", "3 GiB at the configured limit")


def processes_of(uid):
    n = 0
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        n += int(line.split()[1]) == uid
                        break
        except (OSError, ValueError):
            pass
    return n


def wait_for_few_processes(uid, few=16, timeout=10):
    deadline = time.monotonic() + timeout
    while processes_of(uid) > few and time.monotonic() < deadline:
        time.sleep(0.05)


FORK_BOMB = r'''
import os, time
n = 0
try:
    while n < 2000:     # bounded, so that a broken limit fails the test rather than the machine
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
finally:
    print("forked", n, flush=True)
'''


@for_each_mode
def test_fork_bomb(m):
    if os.geteuid() == 0 and not mcptest.pids_safety_net():
        skip("no pids cgroup to run a fork bomb in as root (the safety net): cgroup v1 pids, or cgroup v2 with "
             "pids at its root, needed")
    if m.uid == 0 and m.mechanism() == "rlimit":
        skip("RLIMIT_NPROC does not bind uid 0 and the daemon has no cgroup for each run: a root daemon without "
             "cgroups cannot contain a fork bomb (the daemon as uid 65534 is tested when setpriv is there)")
    c = m.client
    rid = c.new_id()
    t0 = time.monotonic()
    c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "execute_python", "arguments": {"script": FORK_BOMB, "python_version": m.python}}})
    # The daemon keeps serving someone else meanwhile.
    other = m.daemon.client()
    other.initialize()
    tools = other.result("tools/list")
    check(any(t["name"] == "execute_python" for t in tools["tools"]), "tools/list during the fork bomb")
    reply = c.wait_for(rid, timeout=60)
    check("result" in reply, f"fork bomb: {reply}")
    res = (reply["result"], with_defaults(reply["result"]["structuredContent"]), c.text(reply["result"]))
    expect_limit(m, res, "processes", "fork bomb")
    check(time.monotonic() - t0 < 30, "the fork bomb took too long to stop")
    forked = int(res[1]["stdout"].split()[-1])
    check(0 < forked <= 256, f"forked {forked} processes with max-processes 256")
    # The result comes when the script has ended; its killed children can take a moment longer to go, and
    # RLIMIT_NPROC counts them until then (a cgroup counts a run's own only).
    if res[1]["limits"]["mechanism"] == "rlimit":
        wait_for_few_processes(m.uid)
    # Lower, per call. (RLIMIT_NPROC counts all of the daemon user's processes, bwrap's and those of
    # other runs too: leave room for them.)
    res = m.run(FORK_BOMB, limits={"max_processes": 64})
    expect_limit(m, res, "processes", "fork bomb at max_processes 64")
    check(int(res[1]["stdout"].split()[-1]) < 64, f"max_processes 64: {res[1]['stdout']}")
    # And afterwards runs work again.
    # (The parent waits: a child still running when the script ends is killed with the sandbox.)
    r = other.call_tool("execute_python", {"script": "import os\npid = os.fork()\nif pid:\n    os.waitpid(pid, 0)\n"
                                                     "else:\n    print('ok')\n", "python_version": m.python})
    check(not r.get("isError") and "ok" in r["structuredContent"]["stdout"], f"after the bomb: {other.text(r)}")
    other.close()


DISK_FILL = r'''
import errno
n = 0
try:
    with open("/work/fill", "wb") as f:
        while True:
            f.write(b"\0" * (1 << 20))
            f.flush()
            n += 1
except OSError as e:
    print(n, errno.errorcode[e.errno], flush=True)
    raise
'''


@for_each_mode
def test_disk_fill(m):
    res = m.run(DISK_FILL)
    st = res[1]
    mib, code = st["stdout"].split()
    check(code in ("ENOSPC", "EFBIG"), f"the fill ended with {code}")
    check(int(mib) <= 32, f"wrote {mib} MiB into a 32 MiB tmpfs")
    expect_limit(m, res, "disk_space" if code == "ENOSPC" else "file_size", "disk fill")
    # A lower file size, per call: EFBIG at 4 MiB.
    res = m.run(DISK_FILL, limits={"max_file_size_mb": 4})
    eq(res[1]["stdout"].split(), ["4", "EFBIG"], "fill at max_file_size_mb 4")
    expect_limit(m, res, "file_size", "fill at max_file_size_mb 4")


@for_each_mode
def test_open_files_and_no_core_dumps(m):
    res = m.run("import resource, sys\n"
                "print(*resource.getrlimit(resource.RLIMIT_NOFILE), *resource.getrlimit(resource.RLIMIT_CORE),\n"
                "      flush=True)\n"
                "held = []\n"
                "while len(held) < 100000:\n"
                "    held.append(open('/dev/null'))\n")
    eq(res[1]["stdout"].split(), [str(OPEN_FILES), str(OPEN_FILES), "0", "0"],
       "RLIMIT_NOFILE (max-open-files) and RLIMIT_CORE inside")
    check("Too many open files" in res[1]["stderr"], f"the opens ended with EMFILE: {res[1]['stderr'][-600:]}")
    expect_limit(m, res, "open_files", "opening files without end")


@for_each_mode
def test_cpu_time(m):
    res = m.run("while True:\n    pass\n", limits={"cpu_seconds": 1}, timeout_seconds=20)
    expect_limit(m, res, "cpu_time", "busy loop at cpu_seconds 1")
    check(not res[1]["timed_out"], "stopped by the timeout, not by the CPU limit")
    check(res[1]["run_ms"] < 10000, f"run_ms {res[1]['run_ms']}")


@for_each_mode
def test_call_may_lower_not_raise(m):
    # Lower: 64 MiB is too little for 100 MiB.
    res = m.run("x = b'x' * (100 << 20)\n", limits={"memory_mb": 64})
    expect_limit(m, res, "memory", "100 MiB at memory_mb 64")
    eq(res[1]["limits"]["memory_mb"], 64, "effective memory_mb")
    eq(res[1]["limits"]["lowered"], [], "lowered")
    # Higher: lowered to the configured maximum, and the result says so.
    r, st, text = m.run("import resource; print(resource.getrlimit(resource.RLIMIT_FSIZE)[0] >> 20)",
                        limits={"memory_mb": 10 ** 6, "max_processes": 10 ** 5, "max_file_size_mb": 1 << 20,
                                "cpu_seconds": 86400})
    check(not r.get("isError"), f"raising run failed: {text[-800:]}")
    lim = st["limits"]
    eq(sorted(lim["lowered"]), ["cpu_seconds", "max_file_size_mb", "max_processes", "memory_mb"], "lowered")
    eq((lim["memory_mb"], lim["max_processes"], lim["max_file_size_mb"]), (2048, 256, 32), "effective limits")
    eq(st["stdout"].strip(), "32", "RLIMIT_FSIZE inside, MiB")
    check("--- limits.memory_mb lowered to 2048 (the server's maximum) ---" in text, f"text: {text[-800:]}")
    # Out-of-range values are refused by the schema.
    reply = m.client.request("tools/call", {"name": "execute_python", "arguments": {
        "script": "pass", "limits": {"memory_mb": 0}}})
    check("error" in reply or reply.get("result", {}).get("isError"), f"memory_mb 0 accepted: {reply}")


if __name__ == "__main__":
    try:
        main()
    finally:
        for fn in reversed(_cleanup):
            try:
                fn()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
