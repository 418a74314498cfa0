#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A daemon started as root never runs a sandbox as host root.

Each run gets a host uid of its own from sandbox-uid-range: two runs at once
have two uids, neither 0, and neither can signal the other; a fork bomb stops
at its own run's process cap while the daemon keeps answering; and the
self-test refuses to run scripts when the kernel's settings would be writable
from inside the sandbox.

The fork bomb runs under a safety net: this test moves itself, and so the
daemon and everything it starts, into a pids cgroup with a cap of its own
before anything else, so that a regression fails the test instead of taking
the machine down.

Needs root, $DAEMON, $SHIM, bubblewrap and a Python >= 3.11; exit 77 without.
"""

import os
import pwd
import subprocess
import stat
import time

from mcptest import Daemon, at_exit, check, eq, initialized, main, newest_python, pids_safety_net, scratch, skip, test
from mcptest import wait_until
import mcptest

DEFAULT_RANGE = (2063597568, 2063663103)
_STATE = {}


def need_root():
    if os.geteuid() != 0:
        skip("needs root: this is what a root daemon does")


def daemon():
    d = _STATE.get("daemon")
    if d is not None and d.alive():
        return d
    if not pids_safety_net():
        skip("no pids cgroup to run a fork bomb in as root (the safety net)")
    newest_python()
    d = Daemon(args=["--tmpfs-size=32M", "--max-runs=4", "--max-processes=64"])
    at_exit(d.close)
    _STATE["daemon"] = d
    return d


def client(d=None):
    return initialized((d or daemon()).client())


def host_uid(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Uid:"))


def sandbox_processes(d):
    """{pid: (host uid, sandbox, comm)} of the daemon's descendants below bwrap, where sandbox is the pid
    of the bwrap the daemon started (a sandbox started ahead, with a uid of its own, is another)."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            pid, names, top = int(p), [], None
            up = pid
            for _ in range(64):
                with open(f"/proc/{up}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                if parent == d.proc.pid:
                    top = up
                    break
                up = parent
                with open(f"/proc/{up}/comm") as f:
                    names.append(f.read().strip())
                if up <= 1:
                    break
            if top is not None and top != pid and "bwrap" in names:
                with open(f"/proc/{pid}/comm") as f:
                    out[pid] = (host_uid(pid), top, f.read().strip())
        except (OSError, ValueError, StopIteration):
            continue
    return out


def run_named(d, name):
    """{pid: host uid} of the sandbox whose script named one of its processes name, or {}."""
    procs = sandbox_processes(d)
    tops = {top for _, top, comm in procs.values() if comm == name}
    return {pid: uid for pid, (uid, top, _) in procs.items() if top in tops}


def name_self(name):
    """Script lines that give the script's python a name (comm) the test finds it by, among the daemon's
    other sandboxes: those started ahead, with uids of their own, and the bytecode compiles."""
    return f"with open('/proc/self/comm', 'w') as f:\n    f.write({name!r})\n"


def send_call(c, args):
    rid = c.new_id()
    c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "execute_python", "arguments": args}})
    return rid


@test
def concurrent_runs_have_host_uids_of_their_own_and_cannot_signal_each_other():
    d = daemon()
    a, b = client(d), client(d)
    # The bare environment built, so that both runs below start at once.
    r = a.call_tool("execute_python", {"script": "print(1)", "python_version": newest_python()}, timeout=60)
    check(not r.get("isError"), a.text(r))
    rid_a = send_call(a, {"script": name_self("run-a") + "import time\ntime.sleep(6)\nprint('A finished')",
                          "timeout_seconds": 30, "python_version": newest_python()})
    # A's python, on the host, as bwrap's descendant.
    procs = wait_until(lambda: run_named(d, "run-a"), 20, "run A's sandbox")
    uid_a = set(procs.values())
    eq(len(uid_a), 1, f"host uids of run A's processes {procs}")
    uid_a = uid_a.pop()
    check(uid_a != 0, "run A's processes are host root")
    check(DEFAULT_RANGE[0] <= uid_a <= DEFAULT_RANGE[1], f"run A's uid {uid_a} is not from sandbox-uid-range")
    pid_a = next(pid for pid, (_, _, comm) in sandbox_processes(d).items() if comm == "run-a")

    # B, at the same time: another uid; it cannot reach A by pid (nor anything else with kill(-1)).
    script_b = (
        name_self("run-b") + "import os, signal, errno, time\n"
        "time.sleep(1)\n"
        f"try:\n    os.kill({pid_a}, signal.SIGKILL)\n    print('KILLED')\n"
        "except OSError as e:\n    print('kill', errno.errorcode[e.errno])\n"
        "try:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError as e:\n    print('kill -1', errno.errorcode[e.errno])\n"
        "time.sleep(1.5)\nprint('B finished')\n")
    rid_b = send_call(b, {"script": script_b, "timeout_seconds": 30, "python_version": newest_python()})
    procs_b = wait_until(lambda: run_named(d, "run-b"), 20, "run B's sandbox")
    seen = set(procs_b.values())
    eq(len(seen), 1, f"host uids of run B's processes {procs_b}")
    uid_b = seen.pop()
    check(uid_b not in (0, uid_a), f"run B's uid {uid_b}")
    check(DEFAULT_RANGE[0] <= uid_b <= DEFAULT_RANGE[1], f"run B's uid {uid_b} is not from sandbox-uid-range")
    check(pid_a in sandbox_processes(d), f"run A's python {pid_a} is gone while B runs")

    rb = b.wait_for(rid_b, timeout=60)["result"]
    out_b = rb["structuredContent"]["stdout"]
    check("KILLED" not in out_b and "kill ESRCH" in out_b, f"run B reached run A: {out_b!r}")
    check("B finished" in out_b, f"run B: {b.text(rb)}")
    ra = a.wait_for(rid_a, timeout=60)["result"]
    eq(ra["structuredContent"].get("exit_code"), 0, f"run A's exit code: {a.text(ra)}")
    eq(ra["structuredContent"].get("stdout"), "A finished\n", "run A's output")
    # Nothing of either run is left on the host once they are done.
    wait_until(lambda: not (set(procs) | set(procs_b)) & set(sandbox_processes(d)), 15, "the runs' processes to go")


@test
def a_fork_bomb_stops_at_its_own_runs_cap_and_the_daemon_keeps_answering():
    d = daemon()
    bomber, other = client(d), client(d)
    # At its cap the bomb stays a while, its processes with it: a bomb that ended before the test looked at /proc
    # would leave nothing to find.
    bomb = (name_self("bomb") + "import os, time\nn = 0\ntry:\n    while n < 5000:\n        if os.fork() == 0:\n"
            "            time.sleep(60)\n            os._exit(0)\n        n += 1\nfinally:\n    time.sleep(5)\n"
            "    print('forked', n)\n")
    rid = send_call(bomber, {"script": bomb, "timeout_seconds": 30, "python_version": newest_python()})
    tops = wait_until(lambda: {top for _, top, comm in sandbox_processes(d).values() if comm == "bomb"}, 20,
                      "the bomb's sandbox")
    # Once the bomb has hit its cap, another user's call is answered within a few seconds.
    time.sleep(2)
    t0 = time.monotonic()
    r = other.call_tool("execute_python", {"script": "print('still here')", "python_version": newest_python()}, timeout=30)
    took = time.monotonic() - t0
    eq((r.get("structuredContent") or {}).get("stdout"), "still here\n", f"the other call: {other.text(r)}")
    check(took < 10, f"the other call took {took:.1f}s beside the fork bomb")
    res = bomber.wait_for(rid, timeout=60)["result"]
    st = res["structuredContent"]
    forked = int(st["stdout"].split()[-1]) if st.get("stdout", "").startswith("forked") else None
    check(forked is not None and forked < 64, f"the bomb forked {forked} times, past its cap of 64: {bomber.text(res)}")
    eq(st.get("limit"), "processes", f"the limit the bomb hit: {bomber.text(res)}")
    check(d.alive(), "the daemon died")
    wait_until(lambda: not any(os.path.exists(f"/proc/{top}") for top in tops)
               and not tops & {top for _, top, _ in sandbox_processes(d).values()}, 20, "the bomb's processes to be gone")


FAKE_BWRAP = r'''#!/usr/bin/python3
# bwrap, but /proc/sys/kernel/core_pattern inside is a writable file (as a broken sandbox would leave it).
import os, sys
real, extra = sys.argv[1], ["--bind", sys.argv[2], "/proc/sys/kernel/core_pattern"]
args = sys.argv[3:]
def splice(a):
    # Last among the options (after the sandbox's own covers of /proc), before the command.
    i = a.index("--") if "--" in a else len(a)
    return a[:i] + extra + a[i:]
if "--args" in args:
    i = args.index("--args")
    fd = int(args[i + 1])
    data = b""
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            break
        data += b
    inner = [x.decode() for x in data.split(b"\0")[:-1]]
    r, w = os.pipe()
    os.write(w, b"".join(x.encode() + b"\0" for x in splice(inner)))
    os.close(w)
    os.dup2(r, fd)
    args[i + 1] = str(fd)
else:
    args = splice(args)
os.execv(real, [real] + args)
'''


@test
def the_self_test_refuses_a_sandbox_whose_kernel_settings_are_writable():
    need_root()
    newest_python()
    base = scratch("mcptest-fakebwrap-")
    os.chmod(base, 0o755)
    target = os.path.join(base, "core_pattern")
    with open(target, "w") as f:
        f.write("core\n")
    os.chmod(target, 0o666)
    wrapper = os.path.join(base, "bwrap")
    mcptest.executable(wrapper, FAKE_BWRAP.replace("sys.argv[1]", repr("/usr/bin/bwrap"))
                       .replace("sys.argv[2]", repr(target)).replace("args = sys.argv[3:]", "args = sys.argv[1:]"))
    with Daemon(args=[f"--bwrap={wrapper}"]) as d:
        c = d.client()
        c.initialize()
        marker = os.path.join(base, "ran")
        r = c.call_tool("execute_python", {"script": f"open({marker!r}, 'w')\nprint('ran')",
                                           "python_version": newest_python()}, timeout=60)
        text = c.text(r)
        check(r.get("isError") is True, f"a script ran in the broken sandbox: {text}")
        check("/proc/sys/kernel/core_pattern is writable from inside the sandbox" in text, text)
        check("fix:" in text, f"the error gives no fix: {text}")
        check("Refusing to run scripts" in d.log(), d.log())
        c.close()
    # The self-test only asked: the file is as it was.
    with open(target) as f:
        eq(f.read(), "core\n", "the stand-in core_pattern")
    check(stat.S_IMODE(os.stat(target).st_mode) == 0o666, "mode of the stand-in")


def daemon_refuses(args, *words):
    """Start a root daemon with args; it must exit with an error that holds words, having served nothing."""
    base = scratch("mcptest-root-refuse-")
    sock = os.path.join(base, "mcp.sock")
    p = subprocess.run([mcptest.DAEMON, f"--listen={sock}", "--prestart=0", *args], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    check(p.returncode != 0, f"the daemon started: {p.stderr[-2000:]}")
    for w in words:
        check(w in p.stderr, f"the daemon's refusal does not say {w!r}: {p.stderr[-2000:]}")
    check(not os.path.exists(sock), "the daemon made its socket")


@test
def a_uid_range_that_holds_an_account_is_refused():
    """Sandboxes of a uid an account has could be signalled, traced or written to by that account."""
    need_root()
    pw = pwd.getpwnam("daemon") if "daemon" in {p.pw_name for p in pwd.getpwall()} else pwd.getpwall()[1]
    lo = max(1, pw.pw_uid - 8)
    daemon_refuses([f"--cache-dir={scratch('mcptest-root-range-')}/cache", f"--sandbox-uid-range={lo}-{lo + 40}"],
                   "sandbox-uid-range", "choose a range no account uses")


@test
def a_root_daemon_refuses_a_cache_below_another_users_directory():
    """As root the daemon works on the store by path: a user who owns a directory on the way could swap in links."""
    need_root()
    base = scratch("mcptest-root-cache-")
    os.chmod(base, 0o755)
    theirs = os.path.join(base, "theirs")
    os.mkdir(theirs)
    os.chown(theirs, 65534, 65534)
    daemon_refuses([f"--cache-dir={theirs}/cache"], "another user owns or may write")
    # A world-writable directory without the sticky bit, likewise.
    open_dir = os.path.join(base, "open")
    os.mkdir(open_dir)
    os.chmod(open_dir, 0o777)
    daemon_refuses([f"--cache-dir={open_dir}/cache"], "another user owns or may write")


if __name__ == "__main__":
    main()
