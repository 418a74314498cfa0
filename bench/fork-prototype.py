#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Prototype, measured: a run forked from a pre-started interpreter, with fresh namespaces per run.

Issue 18 asks whether a per-run fork from a pre-started parent can keep every isolation property, and what it
would save against a sandbox started per run (bubblewrap, then Python). This program answers with numbers; it is
not the daemon's code and serves no client.

    make bench-fork-prototype         # or, as root:
    python3 bench/fork-prototype.py [--runs N] [--python PATH] [--env DIR] [--etc DIR]

It runs as root, as the daemon does, and builds the parent ("zygote") the way bubblewrap builds a sandbox, by hand:

  - a user namespace whose uid_map root writes with *several* lines: inside uid 0 is host uid BASE (the zygote),
    inside uids 1..64 are host uids BASE+1..BASE+64 (one per run: runs never share a host uid);
  - its own mount and pid namespaces; a tmpfs root with /usr, the environment and /etc bound read-only, /dev
    nodes, a /proc of its own; pivot_root, the old root detached;
  - then `python -I -S -c ZYGOTE`: an interpreter that starts once, holds the capabilities of its user namespace
    (never host ones), and runs nothing but the loop below.

For each run the zygote forks; the child unshares mount, pid, network, IPC and UTS namespaces, forks pid 1 of its
own pid namespace, which makes its own /tmp and /work (tmpfs) and /proc, re-binds /proc/sys read-only, drops to the
run's uid (1..64: the kernel clears every capability then), sets no_new_privs, loads a seccomp filter denying what
ours denies (mount, unshare, setns, ptrace, bpf, keyctl, ...), enters the run's cgroups through descriptors the
root parent opened, and only then runs the script. Each run also checks, from inside, what isolation it got; the
checks are printed and any failure is an exit status of 1.

Compared, back to back, N runs each, as machine-wide CPU per run (from /proc/stat) and wall time per run:
  fork      the zygote forks and the child runs the script (no isolation between runs: the floor)
  isolated  fork + fresh namespaces + mounts + uid + no_new_privs + seccomp
  +cgroups  isolated, plus a pids/memory/cpu cgroup per run, made and removed by the root parent
  bwrap     what a sandbox per run costs today: bubblewrap with our policy's options, then python -I -S
"""

import argparse
import ctypes
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (the benchmark: machine_busy())

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
BASE_UID = 3500000
CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_NAME = "mcp-fork-prototype"

# What the run's seccomp filter denies (x86_64 numbers), as src/sandbox/seccomp.c denies them by name.
DENIED = [101, 310, 311, 438, 312, 321, 298, 323, 425, 426, 427, 250, 248, 249, 300, 154, 165, 166, 155, 161, 429,
          428, 430, 432, 431, 433, 442, 272, 308, 304, 303, 175, 313, 176, 246, 320, 169, 167, 168, 163, 179, 103,
          153, 172, 173, 164, 227, 305, 159, 170, 171]

# The zygote's own program. Its child does everything below before any of the script runs.
ZYGOTE = r'''
import ctypes, os, signal, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
NS = %(ns)d
def ck(r, what):
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, what + ": " + os.strerror(e))
def mount(src, dst, fs, flags, data=None):
    ck(libc.mount(src.encode(), dst.encode(), fs.encode() if fs else None, flags, data.encode() if data else None), "mount " + dst)
def bpf(denied):
    # x86_64 only; the denied calls EPERM; clone3 ENOSYS (its flags are out of the filter's sight: glibc falls back
    # to clone); clone EPERM when its flags (the low word of the first argument) ask for a namespace.
    ins = [(0x20, 0, 0, 4), (0x15, 1, 0, 0xc000003e), (0x06, 0, 0, 0x80000000), (0x20, 0, 0, 0)]
    for nr in denied:
        ins += [(0x15, 0, 1, nr), (0x06, 0, 0, 0x00050000 | 1)]
    ins += [(0x15, 0, 1, 435), (0x06, 0, 0, 0x00050000 | 38),
            (0x15, 0, 3, 56), (0x20, 0, 0, 16), (0x45, 0, 1, NS | 0x02000000 | 0x10000000),
            (0x06, 0, 0, 0x00050000 | 1)]
    ins.append((0x06, 0, 0, 0x7fff0000))
    return b"".join(struct.pack("=HBBI", *i) for i in ins), len(ins)
FILTER, FILTER_N = bpf(%(denied)r)
filt = ctypes.create_string_buffer(FILTER, len(FILTER))
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
prog = Prog(FILTER_N, ctypes.addressof(filt))
ctl = socket.socket(fileno=3)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
def run(mode, k, fds):
    out, status = fds[0], fds[1]
    for fd in fds[2:]:
        os.write(fd, b"0")       # into the run's cgroups first, through what the root parent opened
    if mode != "fork":
        ck(libc.unshare(NS), "unshare")
        if os.fork():
            os._exit(0)          # pid 1 of the new pid namespace goes on; this one is reaped by the zygote
        mount("none", "/", None, %(rec_private)d)
        mount("tmpfs", "/tmp", "tmpfs", %(nosuid_nodev)d, "size=64m,mode=0755,uid=%%d,gid=%%d" %% (k, k))
        mount("tmpfs", "/work", "tmpfs", %(nosuid_nodev)d, "size=64m,mode=0755,uid=%%d,gid=%%d" %% (k, k))
        mount("proc", "/proc", "proc", %(nosuid_nodev)d | %(noexec)d)
        mount("/proc/sys", "/proc/sys", None, %(bind_rec)d)
        mount("none", "/proc/sys", None, %(ro_remount)d)
        os.setgroups([])
        os.setresgid(k, k, k)
        os.setresuid(k, k, k)    # every capability goes with uid 0
        ck(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")
        ck(libc.prctl(22, 2, ctypes.byref(prog), 0, 0), "seccomp")
    for fd in fds[2:]:
        os.close(fd)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    ctl.close()
    sys.stdout = open(1, "w", closefd=False)
    return status
while True:
    try:
        msg, fds, _, _ = socket.recv_fds(ctl, 65536, 8)
    except (EOFError, OSError):
        break
    if not msg:
        break
    mode, k, script = msg.decode().split(" ", 2)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            st = run(mode, int(k), fds)
            g = {"__name__": "__main__"}
            exec(compile(script, "/work/script.py", "exec"), g)
            sys.stdout.flush()
            os.write(st, b"X0")
        except BaseException as e:
            try:
                import traceback
                os.write(2, ("run failed: " + traceback.format_exc()).encode())
                os.write(fds[1], b"X1")
            except BaseException:
                pass
        os._exit(0)
    for fd in fds:
        os.close(fd)
'''

# What each isolated run checks from inside, and prints: a failure makes the line start with FAIL.
CHECK = r'''
import os, socket, ctypes
k = os.getuid()
uid_map = [l.split() for l in open("/proc/self/uid_map")]
host = next(int(h) + k - int(i) for i, h, n in uid_map if int(i) <= k < int(i) + int(n))
ok = []
ok.append(("pid 1 of its own pid namespace, alone in /proc", os.getpid() == 1 and
           [p for p in os.listdir("/proc") if p.isdigit()] == ["1"]))
ok.append(("/tmp and /work empty (fresh)", os.listdir("/tmp") == [] and os.listdir("/work") == []))
open("/tmp/left-by-%d" % k, "w").write("x")
ok.append(("only loopback", [n for _, n in socket.if_nameindex()] == ["lo"]))
capeff = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
ok.append(("no capabilities", int(capeff, 16) == 0))
libc = ctypes.CDLL(None, use_errno=True)
ok.append(("unshare(CLONE_NEWUSER) refused", libc.unshare(0x10000000) != 0))
ok.append(("clone(CLONE_NEWUSER) refused", libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0) < 0))
groups = {c: l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup") for c in l.split(":")[1].split(",")}
ok.append(("in its own pids, memory and cpu cgroups",
           all(groups.get(c, "").endswith("/mcp-fork-prototype/run-%d" % k) for c in ("pids", "memory", "cpu"))))
for path in ("/", "/usr", "/etc", "/proc/sys"):
    ok.append((path + " mounted read-only", bool(os.statvfs(path).f_flag & os.ST_RDONLY)))
print("host uid %d;" % host, "; ".join(("" if v else "FAIL ") + n for n, v in ok))
'''

HELLO = "print('hello')\n"


def die(msg):
    print("fork-prototype: " + msg, file=sys.stderr)
    sys.exit(1)


def machine_cpu():
    """Seconds of CPU all processes took so far, from /proc/stat."""
    return run.machine_busy()[0] / os.sysconf("SC_CLK_TCK")


def write(path, data):
    with open(path, "w") as f:
        f.write(data)


def start_zygote(python, env_dir, etc_dir):
    """Fork the zygote's builder; as root, write its maps; it execs the zygote's interpreter. Returns (pid, ctl)."""
    libc = ctypes.CDLL(None, use_errno=True)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    r, w = os.pipe()
    r2, w2 = os.pipe()
    root = tempfile.mkdtemp(prefix="fork-prototype-root-")   # a mount point only: the zygote's tmpfs goes on it
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(w2)
            if libc.unshare(CLONE_NEWUSER) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
            os.write(w, b"1")
            os.read(r2, 1)                      # the maps are written
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            if libc.unshare(CLONE_NEWNS | CLONE_NEWPID) != 0:
                raise OSError(ctypes.get_errno(), "unshare(NEWNS|NEWPID)")
            if os.fork():
                ours.close()                    # the zygote alone holds its end, and sees EOF when we close ours
                theirs.close()
                os._exit(os.waitstatus_to_exitcode(os.wait()[1]))   # the zygote is pid 1 of its pid namespace

            def mount(src, dst, fs, flags, data=None):
                if libc.mount(src.encode(), dst.encode(), fs.encode() if fs else None, flags,
                              data.encode() if data else None) != 0:
                    raise OSError(ctypes.get_errno(), "mount " + dst)

            def ro_bind(src, dst):
                os.makedirs(dst, exist_ok=True)
                mount(src, dst, None, MS_BIND | MS_REC)
                mount("none", dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)

            mount("none", "/", None, MS_REC | MS_PRIVATE)
            mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
            ro_bind("/usr", root + "/usr")
            for name in ("bin", "sbin", "lib", "lib64"):
                os.symlink("usr/" + name, root + "/" + name)
            for d in ("proc", "tmp", "work", "dev", "oldroot"):
                os.makedirs(root + "/" + d)
            mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID, "mode=0755")
            for n in ("null", "zero", "full", "random", "urandom"):
                open(root + "/dev/" + n, "w").close()
                mount("/dev/" + n, root + "/dev/" + n, None, MS_BIND)
            ro_bind(etc_dir, root + "/etc")
            if env_dir:
                ro_bind(env_dir, root + "/venv")
            os.chdir(root)
            if libc.syscall(155, b".", b"oldroot") != 0:     # pivot_root
                raise OSError(ctypes.get_errno(), "pivot_root")
            if libc.umount2(b"/oldroot", MNT_DETACH) != 0:
                raise OSError(ctypes.get_errno(), "umount oldroot")
            os.rmdir("/oldroot")
            os.chdir("/")
            mount("none", "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
            os.dup2(theirs.fileno(), 3)
            code = ZYGOTE % {"ns": CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS,
                             "denied": DENIED, "rec_private": MS_REC | MS_PRIVATE,
                             "nosuid_nodev": MS_NOSUID | MS_NODEV, "noexec": MS_NOEXEC,
                             "bind_rec": MS_BIND | MS_REC,
                             "ro_remount": MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC}
            os.execve(python, [python, "-I", "-S", "-c", code], {"PATH": "/usr/bin"})
        except BaseException as e:
            print("fork-prototype: the zygote: %r" % (e,), file=sys.stderr)
        os._exit(127)
    os.close(w)
    os.close(r2)
    if os.read(r, 1) != b"1":
        die("the zygote's builder failed")
    # Root writes several lines: uid 0 inside is the zygote's host uid, 1..64 one host uid per run.
    maps = "0 %d 1\n1 %d 64\n" % (BASE_UID, BASE_UID + 1)
    write("/proc/%d/uid_map" % pid, maps)
    write("/proc/%d/gid_map" % pid, maps)
    os.write(w2, b"1")
    os.close(w2)
    os.close(r)
    theirs.close()
    return pid, ours, root


def run_zygote(ctl, mode, k, script, cgroups=None):
    """One run: hand the zygote the script and the run's pipes; wait for its end-of-run record."""
    out_r, out_w = os.pipe()
    st_r, st_w = os.pipe()
    fds = [out_w, st_w]
    dirs = []
    if cgroups:
        for ctrl, limits in cgroups:
            d = "%s/%s/%s/run-%d" % (CGROUP_ROOT, ctrl, CGROUP_NAME, k)
            os.mkdir(d)
            for name, value in limits:
                write(d + "/" + name, value)
            fds.append(os.open(d + "/cgroup.procs", os.O_WRONLY))
            dirs.append(d)
    socket.send_fds(ctl, [("%s %d %s" % (mode, k, script)).encode()], fds)
    for fd in fds:
        os.close(fd)
    out = read_to_end(out_r)          # first: the run may write more than a pipe holds before its status
    status = read_to_end(st_r)
    remove_run_cgroups(dirs)
    return status, out


def read_to_end(fd):
    """What fd gives until every writer has closed it; then fd is closed."""
    data = b""
    while True:
        b = os.read(fd, 65536)
        if not b:
            break
        data += b
    os.close(fd)
    return data


def remove_run_cgroups(dirs):
    """rmdir each, once the run's last process has left it."""
    for d in dirs:
        while True:
            try:
                os.rmdir(d)
                break
            except OSError:
                time.sleep(0.0002)   # the run's last process is still leaving


def bwrap_argv(python, env_dir, etc_dir, script_fd):
    a = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534",
         "--cap-drop", "ALL", "--new-session", "--die-with-parent", "--clearenv", "--setenv", "PATH", "/usr/bin",
         "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib64"):
        a += ["--symlink", "usr/" + name, "/" + name]
    a += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev", "--ro-bind", etc_dir, "/etc",
          "--size", "67108864", "--perms", "0755", "--tmpfs", "/tmp",
          "--size", "67108864", "--perms", "0755", "--tmpfs", "/work"]
    if env_dir:
        a += ["--ro-bind", env_dir, "/venv"]
    a += ["--ro-bind-data", str(script_fd), "/work/script.py", "--remount-ro", "/", "--chdir", "/work",
          python, "-I", "-S", "/work/script.py"]
    return a


def run_bwrap(python, env_dir, etc_dir, script):
    r, w = os.pipe()
    os.write(w, script.encode())
    os.close(w)
    p = subprocess.run(bwrap_argv(python, env_dir, etc_dir, r), pass_fds=(r,), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    os.close(r)
    return (b"X%d" % p.returncode), p.stdout


def measure(name, n, one):
    one()                        # warm
    times = []
    c0, t0 = machine_cpu(), time.monotonic()
    for _ in range(n):
        a = time.monotonic()
        status, out = one()
        times.append((time.monotonic() - a) * 1000)
        if status != b"X0" or out != b"hello\n":
            die("%s: a run failed: status %r, output %r" % (name, status, out[:300]))
    wall, cpu = time.monotonic() - t0, machine_cpu() - c0
    times.sort()
    return {"name": name, "p50": times[len(times) // 2], "p95": times[int(len(times) * 0.95)],
            "wall": wall / n * 1000, "cpu": cpu / n * 1000}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=300, help="runs per variant (default 300)")
    ap.add_argument("--env", default="", help="an environment directory to bind at /venv, as a run has one")
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter, under /usr (default /usr/bin/python3)")
    ap.add_argument("--etc", default="/etc", help="the directory bound at /etc (ours: the store's sandbox-etc)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        die("run me as root: the prototype writes a user namespace's uid_map with several lines, as only root may")

    python = os.path.realpath(args.python)
    if not python.startswith("/usr/"):
        die("%s: the interpreter must be under /usr, the only host tree a run sees" % python)
    pid, ctl, root = start_zygote(python, args.env, args.etc)
    ctrls = [("pids", [("pids.max", "64")]), ("memory", [("memory.limit_in_bytes", str(512 << 20))]),
             ("cpu", [("cpu.shares", "1024")])]
    made = []
    for ctrl, _ in ctrls:
        d = "%s/%s/%s" % (CGROUP_ROOT, ctrl, CGROUP_NAME)
        if os.path.isdir("%s/%s" % (CGROUP_ROOT, ctrl)):
            os.makedirs(d, exist_ok=True)
            made.append(d)
    ctrls = [c for c in ctrls if os.path.isdir("%s/%s/%s" % (CGROUP_ROOT, c[0], CGROUP_NAME))]
    try:
        # What isolation a run gets, checked from inside, twice: the second run must see nothing of the first.
        failed = False
        for k in (1, 2):
            status, out = run_zygote(ctl, "isolated", k, CHECK, ctrls)
            line = out.decode(errors="replace").strip()
            print("isolated run %d: %s" % (k, line))
            failed |= status != b"X0" or "FAIL" in line or not line.startswith("host uid %d;" % (BASE_UID + k))
        counter = iter(range(10 ** 9))
        rows = [measure("fork (no isolation: the floor)", args.runs,
                        lambda: run_zygote(ctl, "fork", 1 + next(counter) % 64, HELLO)),
                measure("isolated (fresh namespaces, uid, seccomp)", args.runs,
                        lambda: run_zygote(ctl, "isolated", 1 + next(counter) % 64, HELLO)),
                measure("isolated + a cgroup per run (pids, memory, cpu)", args.runs,
                        lambda: run_zygote(ctl, "isolated", 1 + next(counter) % 64, HELLO, ctrls)),
                measure("bwrap + python -I -S per run (today)", args.runs,
                        lambda: run_bwrap(python, args.env, args.etc, HELLO))]
    finally:
        ctl.close()
        os.waitpid(pid, 0)
        os.rmdir(root)
        for d in made:
            try:
                os.rmdir(d)
            except OSError:
                pass
    print("\n%d runs each, back to back, hello world; machine CPU from /proc/stat (all processes)\n" % args.runs)
    print("| variant | p50 (ms) | p95 (ms) | wall per run (ms) | machine CPU per run (ms) |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print("| %s | %.2f | %.2f | %.2f | %.2f |" % (r["name"], r["p50"], r["p95"], r["wall"], r["cpu"]))
    if failed:
        die("an isolation check failed (above)")


if __name__ == "__main__":
    main()
