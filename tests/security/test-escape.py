#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Escape attempts from inside the sandbox, each refused with negative evidence.

Scripts run through execute_python and, where it matters, as cells of a
persistent sandbox (execute_code). Every probe prints a JSON report and then a
marker after its attempts, and the test checks both: a probe that did not run
(no sandbox, a crash) never passes. Refusals are shown by errno, by absence
(ENOENT, an empty listing), by a host-side listener that saw nothing, or by
processes that are gone from the host's /proc.

Covered: host secrets (/etc/shadow, files under /root and /home), writes
outside /work and /tmp, remounting read-only mounts, the uv cache and the
environment store, tampering with an environment's site-packages, the daemon's
and the host's Unix sockets (path and abstract), other runs' processes and
files, signalling and tracing the daemon, the network, socket families other
than AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (AF_VSOCK, AF_PACKET, ...),
capabilities and ids, a read-only /proc/sys (and /proc/sysrq-trigger,
/proc/irq, /proc/bus) under a root and an unprivileged daemon, bwrap's
command line (the policy, the cache's paths) seen from inside, timeouts,
processes that outlive their session (client gone, sandbox closed, daemon
stopped), and bombs beside a client that keeps being served.

Over 800 lines, one file: many short independent probes sharing the daemon
setup, the probe runner and its report-and-marker check; one file is one
list of escape attempts to review.

Needs $DAEMON, $SHIM, bubblewrap, uv and a pyenv Python >= 3.11. Exit 77 when
they are missing.
"""

import errno
import hashlib
import json
import os
import shutil
import signal
import socket
import time
import uuid

import mcptest
from mcptest import at_exit, scratch
from mcptest import Daemon, check, children, eq, initialized, main, need_uv, newest_python, skip, test
from mcptest import wait_until, processes_with
from wheels import build_wheel

PROBE_OK = "PROBE-COMPLETED-" + uuid.uuid4().hex[:8]

_STATE = {}


def wheel_dir():
    if "wheels" not in _STATE:
        w = scratch("mcpt-sec-wheels-")
        os.chmod(w, 0o755)
        build_wheel(w, "mcpt-sec", "1.0", module_source="SECRET_VALUE = 'original'\n")
        build_wheel(w, "mcpt-sec-other", "1.0")
        _STATE["wheels"] = w
    return _STATE["wheels"]


def sandbox_works(d):
    c = d.client()
    c.initialize()
    st = c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}
    c.close()
    sb = st.get("sandbox", {})
    if not sb.get("working"):
        skip(f"the sandbox does not work on this machine: {sb.get('error', 'self-test failed')}")


def daemon():
    """The shared daemon: root (the test user), local wheels only, offline."""
    d = _STATE.get("daemon")
    if d is not None and d.alive():
        return d
    need_uv()
    newest_python()
    d = Daemon(args=[f"--find-links={wheel_dir()}", "--offline", "--tmpfs-size=32M", "--max-runs=4",
                     "--persistent-sandboxes"])
    at_exit(d.close)
    _STATE["daemon"] = d
    sandbox_works(d)
    return d


def client(d=None):
    return initialized((d or daemon()).client())


def shared_client():
    c = _STATE.get("client")
    if c is None or c.proc.poll() is not None:
        c = client()
        _STATE["client"] = c
    return c


def sandbox_id():
    """One persistent sandbox of the shared client, for the execute_code variants."""
    if "sid" not in _STATE:
        c = shared_client()
        r = c.call_tool("create_sandbox", {"python_version": newest_python()}, timeout=120)
        check(not r.get("isError"), f"create_sandbox: {c.text(r)}")
        _STATE["sid"] = r["structuredContent"]["sandbox_id"]
    return _STATE["sid"]


PRELUDE = r'''
import ctypes, errno, json, os, signal, socket, subprocess, sys, sysconfig, time
def attempt(fn, *a):
    try:
        fn(*a)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def write(path):
    with open(path, "a") as f:
        f.write("x")
def done(res):
    print(json.dumps(res))
    print(MARK, flush=True)
'''


def probe(body, params=(), via="run", c=None, **args):
    """Run PRELUDE + body (via execute_python, or as a cell: via="cell"); returns its JSON report."""
    c = c or shared_client()
    code = PRELUDE + f"MARK = {PROBE_OK!r}\nP = {params!r}\n" + body
    if via == "run":
        r = c.call_tool("execute_python", {"script": code, "timeout_seconds": 30,
                                           "python_version": newest_python(), **args}, timeout=120)
        st = r.get("structuredContent") or {}
        check(r.get("isError") is False and st.get("exit_code") == 0,
              f"[{via}] the probe did not complete: {c.text(r)[-3000:]}")
    else:
        r = c.call_tool("execute_code", {"sandbox_id": sandbox_id(), "code": code, "timeout_seconds": 30},
                        timeout=120)
        st = r.get("structuredContent") or {}
        check(not r.get("isError"), f"[{via}] the probe did not complete: {c.text(r)[-3000:]}")
    lines = st.get("stdout", "").splitlines()
    check(len(lines) >= 2 and lines[-1] == PROBE_OK, f"[{via}] no completion marker: {c.text(r)[-3000:]}")
    res = json.loads(lines[-2])
    res["_st"] = st
    return res


def both(fn):
    """Run fn(via) through execute_python and as a persistent sandbox's cell."""
    for via in ("run", "cell"):
        try:
            fn(via)
        except AssertionError as e:
            raise AssertionError(f"[{via}] {e}") from None


def stubborn(mark, seconds=600):
    """Python source: a process (new session, SIGTERM ignored) whose command line carries mark."""
    return ("subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(%d)', %r], start_new_session=True, "
            "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n" % (seconds, mark))


def send_call(c, arguments, tool="execute_python"):
    rid = c.new_id()
    c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
    return rid


# --- host files ------------------------------------------------------------------

SECRETS = r'''
res = {"shadow": attempt(lambda: open("/etc/shadow").read())}
for i, path in enumerate(P[0]):
    res[f"secret{i}"] = attempt(lambda: open(path).read())
    res[f"secretdir{i}"] = attempt(os.listdir, os.path.dirname(path))
    parent = os.path.dirname(os.path.dirname(path))
    try:
        res[f"parent{i}"] = sorted(os.listdir(parent))
    except OSError as e:
        res[f"parent{i}"] = errno.errorcode[e.errno]
done(res)
'''


@test
def host_secrets_are_not_visible():
    daemon()
    check(os.path.exists("/etc/shadow"), "the host has an /etc/shadow to hide")
    secrets = []
    for parent in ("/root", "/home"):
        if os.path.isdir(parent):
            d = scratch("mcpt-sec-home-", parent)
            p = os.path.join(d, "secret.txt")
            with open(p, "w") as f:
                f.write("host secret " + uuid.uuid4().hex)
            secrets.append(p)
    check(secrets, "no /root or /home to put a secret in")

    def one(via):
        res = probe(SECRETS, (secrets,), via)
        check(res["shadow"] in ("ENOENT", "EACCES"), f"/etc/shadow: {res['shadow']}")
        for i, p in enumerate(secrets):
            eq(res[f"secret{i}"], "ENOENT", f"reading {p}")
            eq(res[f"secretdir{i}"], "ENOENT", f"listing {os.path.dirname(p)}")
            name = os.path.basename(os.path.dirname(p))
            check(isinstance(res[f"parent{i}"], str) or name not in res[f"parent{i}"],
                  f"{name} is listed in {os.path.dirname(os.path.dirname(p))}: {res[f'parent{i}']}")
    both(one)


# --- writes and mounts -----------------------------------------------------------

WRITES = r'''
site = sysconfig.get_paths()["purelib"]
targets = ["/evil", "/usr/evil", "/usr/lib/evil", "/etc/evil", "/etc/passwd", "/var/evil", "/var/tmp/evil",
           "/proc/evil", os.path.join(site, "evil.py"), os.path.join(sys.prefix, "evil"),
           os.path.join(sys.base_prefix, "evil"), sys.executable]
res = {"writes": {t: attempt(write, t) for t in targets},
       "mkdir": {t: attempt(os.mkdir, t + "-dir") for t in ["/evil", "/usr/evil", "/etc/evil", site + "/evil"]},
       "work": attempt(write, "/work/ok"), "tmp": attempt(write, "/tmp/ok"), "shm": attempt(write, "/dev/shm/ok")}
done(res)
'''


@test
def writes_outside_work_and_tmp_are_refused():
    def one(via):
        res = probe(WRITES, (), via)
        refusals = ("EROFS", "EACCES", "ENOENT", "ETXTBSY")
        bad = {t: e for t, e in {**res["writes"], **res["mkdir"]}.items() if e not in refusals}
        check(not bad, f"writes outside /work and /tmp not refused: {bad}")
        eq((res["work"], res["tmp"], res["shm"]), ("ok", "ok", "ok"), "/work, /tmp and /dev/shm are writable")
    both(one)
    check(not os.path.exists("/usr/evil") and not os.path.exists("/evil"), "a file landed on the host")


REMOUNT = r'''
libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096
def mount(src, dst, fstype, flags):
    if libc.mount(src, dst, fstype, ctypes.c_ulong(flags), None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
res = {
    "remount_usr": attempt(mount, b"none", b"/usr", None, MS_REMOUNT),
    "remount_usr_bind": attempt(mount, b"none", b"/usr", None, MS_REMOUNT | MS_BIND),
    "remount_root": attempt(mount, b"none", b"/", None, MS_REMOUNT | MS_BIND),
    "remount_env": attempt(mount, b"none", sys.prefix.encode(), None, MS_REMOUNT | MS_BIND),
    "tmpfs_on_etc": attempt(mount, b"tmpfs", b"/etc", b"tmpfs", 0),
    "bind_work_on_usr": attempt(mount, b"/work", b"/usr/lib", None, MS_BIND),
}
def umount(path):
    if libc.umount2(path, 2) != 0:
        raise OSError(ctypes.get_errno(), "umount2")
res["umount_tmp"] = attempt(umount, b"/tmp")
res["usr_after"] = attempt(write, "/usr/evil")
done(res)
'''


@test
def remounting_read_only_mounts_is_refused():
    def one(via):
        res = probe(REMOUNT, (), via)
        for k in ("remount_usr", "remount_usr_bind", "remount_root", "remount_env", "tmpfs_on_etc",
                  "bind_work_on_usr", "umount_tmp"):
            eq(res[k], "EPERM", k)
        eq(res["usr_after"], "EROFS", "writing /usr after the remount attempts")
    both(one)


DEV_FILL = r'''
total, err = 0, None
try:
    for i in range(4):
        with open(f"/dev/mcpt-fill{i}", "wb") as f:
            for j in range(16):
                f.write(b"\0" * (1 << 20))
                f.flush()
                total += 1
except OSError as e:
    err = errno.errorcode.get(e.errno, str(e.errno))
for i in range(4):
    attempt(os.unlink, f"/dev/mcpt-fill{i}")
done({"mib": total, "err": err})
'''


@test
def dev_is_not_an_unbounded_writable_filesystem():
    # The writable places are /work, /tmp and /dev/shm, each capped by --tmpfs-size (32M here). /dev is
    # bwrap's own tmpfs: it must be read-only or as capped, or a run fills the host's memory through it.
    def one(via):
        res = probe(DEV_FILL, (), via)
        check(res["mib"] <= 32, f"wrote {res['mib']} MiB into /dev (then {res['err']}), more than --tmpfs-size=32M")
        check(res["err"] in ("EROFS", "EACCES", "ENOSPC"), f"the fill of /dev ended with {res['err']}")
    both(one)


# --- the store ---------------------------------------------------------------------

STORE = r'''
cache, others = P
res = {"stat": {p: attempt(os.stat, p) for p in others}, "prefix": os.path.realpath(sys.prefix)}
for name, p in (("cache", cache), ("envs", os.path.join(cache, "envs"))):
    try:
        res[name] = sorted(os.listdir(p))
    except OSError as e:
        res[name] = errno.errorcode[e.errno]
res.update({"uv_write": attempt(write, os.path.join(cache, "uv", "evil")),
            "envs_write": attempt(write, os.path.join(cache, "envs", "evil")),
            "cache_write": attempt(write, os.path.join(cache, "evil"))})
done(res)
'''


@test
def uv_cache_and_environment_store_are_not_visible():
    d = daemon()
    c = shared_client()
    # Two environments in the store besides the probe's own.
    r = c.call_tool("execute_python", {"script": "import mcpt_sec_other", "dependencies": ["mcpt-sec-other"],
                                       "python_version": newest_python()}, timeout=120)
    check(not r.get("isError"), f"building another environment: {c.text(r)}")
    other_key = r["structuredContent"]["environment"]["key"]
    envs = os.path.join(d.cache_dir, "envs")
    check(os.path.isdir(os.path.join(d.cache_dir, "uv")), "the uv cache exists on the host")
    check(os.path.isdir(os.path.join(envs, other_key)), "the other environment exists on the host")
    others = [os.path.join(d.cache_dir, "uv"), os.path.join(envs, other_key), wheel_dir(), d.log_path, d.socket]

    def one(via):
        res = probe(STORE, (d.cache_dir, others), via, dependencies=["mcpt-sec"] if via == "run" else [])
        if via == "run":
            del res["_st"]["environment"]["requirements"]
        bad = {p: e for p, e in res["stat"].items() if e != "ENOENT"}
        check(not bad, f"host paths of the store visible: {bad}")
        # These may succeed when the cache dir lies under /tmp (as here): then they land in the run's private
        # /tmp. What counts is that nothing reaches the host's store.
        for k, sub in (("uv_write", "uv/evil"), ("envs_write", "envs/evil"), ("cache_write", "evil")):
            check(res[k] in ("ok", "ENOENT", "EROFS", "EACCES"), f"{k}: {res[k]}")
            check(not os.path.exists(os.path.join(d.cache_dir, sub)), f"{k} reached the host's {sub}")
        check(res["cache"] in ("ENOENT", ["envs"]), f"the cache dir shows more than the own environment: "
              f"{res['cache']}")
        own = os.path.basename(res["prefix"])
        check(res["envs"] == "ENOENT" or res["envs"] == [own],
              f"the store lists other environments: {res['envs']} (own {own})")
    both(one)


TAMPER = r'''
import hashlib, mcpt_sec
path = mcpt_sec.__file__
pkg = os.path.dirname(path)
site = os.path.dirname(pkg)
h = lambda: hashlib.sha256(open(path, "rb").read()).hexdigest()
before = h()
res = {"file": path, "hash": before, "value": mcpt_sec.SECRET_VALUE}
if P[0]:
    res["attempts"] = {
        "append": attempt(write, path),
        "truncate": attempt(os.truncate, path, 0),
        "unlink": attempt(os.unlink, path),
        "rename": attempt(os.rename, path, path + ".bak"),
        "chmod": attempt(os.chmod, path, 0o777),
        "utime": attempt(os.utime, path, (0, 0)),
        "new_module": attempt(write, os.path.join(site, "sitecustomize.py")),
        "pth": attempt(write, os.path.join(site, "evil.pth")),
        "pkg_file": attempt(write, os.path.join(pkg, "evil.py")),
        "rmtree_dist": attempt(os.rename, pkg, pkg + "-gone"),
    }
    res["hash_after"] = h()
done(res)
'''


@test
def site_packages_cannot_be_modified_for_later_runs():
    d = daemon()
    first = probe(TAMPER, (True,), dependencies=["mcpt-sec==1.0"])
    bad = {k: e for k, e in first["attempts"].items() if e not in ("EROFS", "EACCES")}
    check(not bad, f"changes to site-packages not refused: {bad}")
    eq(first["hash_after"], first["hash"], "the module's hash inside, after the attempts")
    second = probe(TAMPER, (False,), dependencies=["mcpt-sec==1.0"])
    eq(second["_st"]["environment"]["key"], first["_st"]["environment"]["key"], "the same environment")
    eq(second["_st"]["environment"]["warm"], True, "the second run reuses the environment")
    eq((second["hash"], second["value"]), (first["hash"], "original"), "the module in a later run")
    key = first["_st"]["environment"]["key"]
    host = os.path.join(d.cache_dir, "envs", key)
    found = []
    for root, _, files in os.walk(host):
        for f in files:
            if f in ("sitecustomize.py", "evil.pth", "evil.py") or f.endswith(".bak"):
                found.append(os.path.join(root, f))
    check(not found, f"files planted in the environment on the host: {found}")
    inside = first["file"]
    check(inside.startswith("/venv/"), f"the module's path inside is not below /venv: {inside}")
    with open(os.path.join(host, inside[len("/venv/"):]), "rb") as f:
        eq(hashlib.sha256(f.read()).hexdigest(), first["hash"], "the module's hash on the host")


# --- sockets -----------------------------------------------------------------------

SOCKETS = r'''
def unix(addr):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(addr)
    finally:
        s.close()
res = {"daemon": attempt(unix, P[0]), "host_path": attempt(unix, P[1]),
       "abstract": attempt(unix, "\0" + P[2]),
       "known": {p: attempt(unix, p) for p in P[3]},
       "daemon_exists": os.path.exists(P[0])}
done(res)
'''


@test
def daemon_and_host_unix_sockets_are_unreachable():
    d = daemon()
    tmp = scratch("mcpt-sec-sock-")
    os.chmod(tmp, 0o755)
    path_srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = os.path.join(tmp, "host.sock")
    path_srv.bind(path)
    os.chmod(path, 0o777)
    path_srv.listen(8)
    abstract_name = "mcpt-sec-abstract-" + uuid.uuid4().hex
    abs_srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abs_srv.bind("\0" + abstract_name)
    abs_srv.listen(8)
    at_exit(path_srv.close)
    at_exit(abs_srv.close)
    known = [p for p in ("/run/systemd/private", "/run/dbus/system_bus_socket", "/var/run/docker.sock",
                         "/run/containerd/containerd.sock", "/tmp/.X11-unix/X0", "/run/systemd/notify",
                         "/run/systemd/journal/stdout") if os.path.exists(p)]

    # Sanity: the host servers do accept from the host.
    probe_conn = socket.socket(socket.AF_UNIX)
    probe_conn.connect("\0" + abstract_name)
    abs_srv.accept()[0].close()
    probe_conn.close()

    def one(via):
        res = probe(SOCKETS, (d.socket, path, abstract_name, known), via)
        eq(res["daemon"], "ENOENT", "connecting to the daemon's socket")
        eq(res["daemon_exists"], False, "the daemon's socket exists")
        eq(res["host_path"], "ENOENT", "connecting to a host path socket")
        eq(res["abstract"], "ECONNREFUSED", "connecting to a host abstract socket")
        bad = {p: e for p, e in res["known"].items() if e != "ENOENT"}
        check(not bad, f"host sockets reachable: {bad}")
        for srv, what in ((path_srv, "path"), (abs_srv, "abstract")):
            srv.setblocking(False)
            try:
                conn, _ = srv.accept()
                conn.close()
                raise AssertionError(f"the host's {what} socket server got a connection from the sandbox")
            except BlockingIOError:
                pass
    both(one)


# --- other runs --------------------------------------------------------------------

OTHERS = r'''
mark = P[0]
seen, pids = [], []
for p in os.listdir("/proc"):
    if p.isdigit():
        pids.append(int(p))
        try:
            if mark.encode() in open(f"/proc/{p}/cmdline", "rb").read():
                seen.append(int(p))
        except OSError:
            pass
res = {"seen": seen, "pids": sorted(pids), "me": os.getpid(),
       "tmp": [n for n in os.listdir("/tmp") if mark in n], "work": [n for n in os.walk("/work") if mark in str(n)],
       "shm": [n for n in os.listdir("/dev/shm") if mark in n],
       "marker_file": attempt(os.stat, "/tmp/" + mark)}
done(res)
'''


@test
def runs_do_not_see_each_others_processes_or_files():
    daemon()
    mark = "mcpt-sec-other-" + uuid.uuid4().hex
    a = client()
    script_a = ("import os, sys\n"
                f"M = {mark!r}\n"
                "for d in ('/tmp', '/work', '/dev/shm'):\n"
                "    open(os.path.join(d, M), 'w').write('here')\n"
                "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', M])\n")
    rid = send_call(a, {"script": script_a, "timeout_seconds": 60})
    wait_until(lambda: processes_with(mark), 20, "run A's marked process")

    def one(via):
        res = probe(OTHERS, (mark,), via)
        eq(res["seen"], [], "processes of run A visible")
        eq((res["tmp"], res["work"], res["shm"], res["marker_file"]), ([], [], [], "ENOENT"), "run A's files visible")
        check(len(res["pids"]) <= 6 and res["me"] in res["pids"], f"a private pid namespace: {res['pids']}")
    both(one)
    check(processes_with(mark), "run A was still running during the probes")
    check(all(m.get("id") != rid for m in a.unclaimed), "run A ended early")
    a.kill()
    wait_until(lambda: not processes_with(mark), 5, "run A to end with its client")


KILLER = r'''
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
pid = P[0]
def ptrace_attach():
    ctypes.set_errno(0)
    if libc.ptrace(ctypes.c_long(16), ctypes.c_long(pid), None, None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
def pidfd():
    os.close(os.pidfd_open(pid))
res = {"visible": os.path.exists(f"/proc/{pid}"), "kill0": attempt(os.kill, pid, 0),
       "sigkill": attempt(os.kill, pid, signal.SIGKILL), "sigterm_group": attempt(os.killpg, pid, signal.SIGTERM),
       "ptrace": attempt(ptrace_attach), "pidfd": attempt(pidfd),
       "ppid_chain_ok": os.getppid() < 10}
done(res)
'''


@test
def daemon_cannot_be_signalled_or_traced():
    d = daemon()
    pid = d.proc.pid
    check(pid > 10, f"the daemon's pid {pid} could collide with a sandbox pid")

    def one(via):
        res = probe(KILLER, (pid,), via)
        eq(res["visible"], False, "the daemon's pid in the sandbox's /proc")
        eq(res["kill0"], "ESRCH", "kill(daemon, 0)")
        eq(res["sigkill"], "ESRCH", "kill(daemon, SIGKILL)")
        eq(res["sigterm_group"], "ESRCH", "killpg(daemon, SIGTERM)")
        eq(res["ptrace"], "EPERM", "ptrace(PTRACE_ATTACH, daemon)")
        eq(res["pidfd"], "ESRCH", "pidfd_open(daemon)")
    both(one)
    time.sleep(0.2)
    check(d.alive(), "the daemon died")
    eq(shared_client().request("ping").get("result"), {}, "ping after the attempts")


# --- network -----------------------------------------------------------------------

NETWORK = r'''
def tcp(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    s.close()
def udp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"hello from the sandbox", ("127.0.0.1", port))
    s.close()
def dns():
    try:
        socket.getaddrinfo("pypi.org", 443)
        return "resolved"
    except socket.gaierror as e:
        return f"gaierror {e.errno}"
def ifaces():
    with open("/proc/net/dev") as f:
        return sorted(l.split(":")[0].strip() for l in f.readlines()[2:])
res = {"tcp": attempt(tcp, P[0]), "udp": attempt(udp, P[1]),
       "tcp_public": attempt(lambda: socket.create_connection(("1.1.1.1", 53), timeout=3).close()),
       "dns": dns(), "if_nameindex": sorted(n for _, n in socket.if_nameindex()), "proc_net_dev": ifaces(),
       "resolv_conf": os.path.exists("/etc/resolv.conf")}
done(res)
'''


@test
def network_is_off():
    daemon()
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    at_exit(tcp.close)
    at_exit(udp.close)

    def one(via):
        res = probe(NETWORK, (tcp.getsockname()[1], udp.getsockname()[1]), via)
        check(res["tcp"] in ("ENETUNREACH", "ECONNREFUSED"), f"TCP to the host's 127.0.0.1: {res['tcp']}")
        check(res["tcp_public"] in ("ENETUNREACH", "EHOSTUNREACH", "ECONNREFUSED"),
              f"TCP to 1.1.1.1: {res['tcp_public']}")
        check(res["dns"].startswith("gaierror"), f"DNS: {res['dns']}")
        eq(res["if_nameindex"], ["lo"], "network interfaces")
        eq(res["proc_net_dev"], ["lo"], "interfaces in /proc/net/dev")
        eq(res["resolv_conf"], False, "/etc/resolv.conf without network")
        for what, f in (("TCP accept", tcp.accept), ("UDP recv", lambda: udp.recvfrom(100))):
            try:
                got = f()
                raise AssertionError(f"the host server got something: {what}: {got!r}")
            except BlockingIOError:
                pass
    both(one)


# Socket families beyond the four a Python program needs (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK) reach past
# network=no: AF_VSOCK talks to the hypervisor's services, AF_PACKET and AF_XDP to the device, AF_ALG, AF_KEY,
# AF_TIPC, AF_RDS, ... to large, rarely exercised kernel code. The filter refuses them with EAFNOSUPPORT.
# Each denied family with a type (and protocol) it would otherwise accept, where there is one.
DENIED_FAMILIES = {
    "AF_UNSPEC": (0, 1, 0), "AF_AX25": (3, 5, 0), "AF_IPX": (4, 2, 0), "AF_APPLETALK": (5, 2, 0),
    "AF_NETROM": (6, 5, 0), "AF_BRIDGE": (7, 2, 0), "AF_ATMPVC": (8, 2, 0), "AF_X25": (9, 5, 0),
    "AF_ROSE": (11, 5, 0), "AF_DECnet": (12, 5, 0), "AF_NETBEUI": (13, 2, 0), "AF_SECURITY": (14, 2, 0),
    "AF_KEY": (15, 3, 2), "AF_PACKET": (17, 3, 0), "AF_ASH": (18, 2, 0), "AF_ECONET": (19, 2, 0),
    "AF_ATMSVC": (20, 2, 0), "AF_RDS": (21, 5, 0), "AF_SNA": (22, 1, 0), "AF_IRDA": (23, 1, 0),
    "AF_PPPOX": (24, 5, 0), "AF_WANPIPE": (25, 3, 0), "AF_LLC": (26, 2, 0), "AF_IB": (27, 1, 0),
    "AF_MPLS": (28, 2, 0), "AF_CAN": (29, 3, 1), "AF_TIPC": (30, 4, 0), "AF_BLUETOOTH": (31, 3, 1),
    "AF_IUCV": (32, 1, 0), "AF_RXRPC": (33, 2, 2), "AF_ISDN": (34, 3, 0), "AF_PHONET": (35, 2, 0),
    "AF_IEEE802154": (36, 2, 0), "AF_CAIF": (37, 5, 0), "AF_ALG": (38, 5, 0), "AF_NFC": (39, 5, 0),
    "AF_VSOCK": (40, 1, 0), "AF_KCM": (41, 2, 0), "AF_QIPCRTR": (42, 2, 0), "AF_SMC": (43, 1, 0),
    "AF_XDP": (44, 3, 0), "AF_MCTP": (45, 2, 0), "46": (46, 1, 0), "47": (47, 1, 0), "64": (64, 1, 0),
    "255": (255, 1, 0), "0x7fffffff": (0x7fffffff, 1, 0), "-1": (-1, 1, 0),
}

FAMILIES = r'''
libc = ctypes.CDLL(None, use_errno=True)
def failed():
    e = ctypes.get_errno()
    raise OSError(e, os.strerror(e))
def sock(family, type_, proto=0):
    fd = libc.socket(family, type_, proto)
    if fd < 0:
        failed()
    os.close(fd)
def pair(family, type_):
    fds = (ctypes.c_int * 2)()
    if libc.socketpair(family, type_, 0, fds) != 0:
        failed()
    os.close(fds[0])
    os.close(fds[1])
TYPES = (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_RDM, socket.SOCK_SEQPACKET)
denied = P[0]
tries = {"natural": {name: attempt(sock, *ftp) for name, ftp in denied.items()},
         "types": {f"{name}/{t}": attempt(sock, ftp[0], t) for name, ftp in denied.items() for t in TYPES},
         "pair": {f"{name}/{t}": attempt(pair, ftp[0], t) for name, ftp in denied.items() for t in TYPES}}
# Only what was not refused as it must be (the output is capped), and how many were tried.
res = {what: {k: e for k, e in t.items() if e != "EAFNOSUPPORT"} for what, t in tries.items()}
res["tried"] = {what: len(t) for what, t in tries.items()}
U, I, I6, N = socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK
res["allowed"] = {
    "unix/stream": attempt(sock, U, socket.SOCK_STREAM), "unix/dgram": attempt(sock, U, socket.SOCK_DGRAM),
    "unix/seqpacket": attempt(sock, U, socket.SOCK_SEQPACKET),
    "inet/stream": attempt(sock, I, socket.SOCK_STREAM), "inet/dgram": attempt(sock, I, socket.SOCK_DGRAM),
    "inet6/stream": attempt(sock, I6, socket.SOCK_STREAM), "inet6/dgram": attempt(sock, I6, socket.SOCK_DGRAM),
    "netlink/route": attempt(sock, N, socket.SOCK_RAW, 0), "netlink/dgram": attempt(sock, N, socket.SOCK_DGRAM, 0),
    "pair unix/stream": attempt(pair, U, socket.SOCK_STREAM), "pair unix/dgram": attempt(pair, U, socket.SOCK_DGRAM),
    "pair unix/seqpacket": attempt(pair, U, socket.SOCK_SEQPACKET),
    "python": attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close()),
}
# Netlink itself only for NETLINK_ROUTE: audit (9), uevents (15), xfrm (6), netfilter (12), generic (16), ...
res["netlink_other"] = {p: attempt(sock, N, socket.SOCK_RAW, p) for p in (1, 2, 4, 5, 6, 7, 9, 10, 12, 15, 16)}
done(res)
'''


def host_socket(family, type_, proto):
    try:
        socket.socket(family, type_, proto).close()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


@test
def only_unix_inet_inet6_and_netlink_sockets():
    # What this kernel offers the test's user outside: where it creates the socket (or says EPERM), the
    # EAFNOSUPPORT inside is the filter's, not a missing module's.
    host = {name: host_socket(*ftp) for name, ftp in DENIED_FAMILIES.items() if 0 <= ftp[0] < 64}
    print(f"# on the host: {sorted(n for n, e in host.items() if e != 'EAFNOSUPPORT')} not EAFNOSUPPORT", flush=True)

    def one(via):
        res = probe(FAMILIES, (DENIED_FAMILIES,), via)
        eq(res["tried"], {"natural": len(DENIED_FAMILIES), "types": 5 * len(DENIED_FAMILIES),
                          "pair": 5 * len(DENIED_FAMILIES)}, "attempts")
        for what in ("natural", "types", "pair"):
            check(not res[what], f"{what}: denied families not refused with EAFNOSUPPORT: {res[what]}")
        bad = {k: e for k, e in res["allowed"].items() if e != "ok"}
        check(not bad, f"allowed families refused: {bad}")
        bad = {k: e for k, e in res["netlink_other"].items() if e != "EPROTONOSUPPORT"}
        check(not bad, f"netlink protocols other than NETLINK_ROUTE not refused with EPROTONOSUPPORT: {bad}")
    both(one)


# --- capabilities ------------------------------------------------------------------

CAPS = r'''
st = dict(l.split(":", 1) for l in open("/proc/self/status"))
keys = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Uid", "Gid", "Groups")
res = {k: st[k].split() for k in keys}
res["ids"] = [os.getresuid(), os.getresgid(), os.getgroups()]
libc = ctypes.CDLL(None, use_errno=True)
res["setuid0"] = attempt(os.setuid, 0)
res["setgid0"] = attempt(os.setgid, 0)
res["chown"] = attempt(lambda: (open("/work/f", "w").close(), os.chown("/work/f", 0, 0)))
res["su_exists"] = [p for p in ("/usr/bin/sudo", "/usr/bin/su") if os.path.exists(p)]
done(res)
'''


@test
def no_capabilities_and_nobody_ids():
    def one(via):
        res = probe(CAPS, (), via)
        zero = ["0000000000000000"]
        for k in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
            eq(res[k], zero, k)
        # bwrap --cap-drop ALL in a user namespace also clears the bounding set.
        eq(res["CapBnd"], zero, "CapBnd")
        eq(res["NoNewPrivs"], ["1"], "NoNewPrivs")
        eq(res["Uid"], ["65534"] * 4, "Uid (real, effective, saved, fs)")
        eq(res["Gid"], ["65534"] * 4, "Gid (real, effective, saved, fs)")
        eq(res["ids"][:2], [[65534] * 3, [65534] * 3], "getresuid, getresgid")
        check(res["ids"][2] in ([], [65534]), f"supplementary groups: {res['ids'][2]}")
        # EINVAL: uid 0 is not even mapped in the sandbox's user namespace.
        for k in ("setuid0", "setgid0", "chown"):
            check(res[k] in ("EPERM", "EINVAL"), f"{k}: {res[k]}")
    both(one)


# --- /proc ---------------------------------------------------------------------------

# With a root daemon the sandbox's user is the host's root, and /proc/sys is the host's kernel settings:
# kernel.core_pattern set to a pipe runs a program as root on the host at the next crash. bwrap 0.8 covers
# /proc/sys only where access(W_OK) says it could be written, which it never says for the directory itself.
PROC_COVERED = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")

PROC = r'''
def writable(path):
    # Asked without opening: the kernel's answer for a write, and no file descriptor that could write.
    try:
        return "ok" if os.access(path, os.W_OK) else "EACCES"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def open_for_writing(path):
    # Only where access() already refused: an open that must fail too. Never written, never truncated.
    if writable(path) == "ok":
        return "not tried: writable"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    os.close(fd)
    return "ok"
mounts = {}
for line in open("/proc/self/mountinfo"):
    f = line.split()
    mounts[f[4]] = f[5].split(",")   # the last mount on a mount point is the one seen
covered = {p: (mounts.get(p), os.path.exists(p)) for p in P[0]}
below = {m: o for m, o in mounts.items() if m.startswith("/proc/sys/")}
files = []
for root, dirs, names in os.walk("/proc/sys"):
    files += [os.path.join(root, n) for n in names]
files += [os.path.join(r, n) for d in ("/proc/irq", "/proc/bus") for r, _, ns in os.walk(d) for n in ns]
res = {"core_pattern": {"access": writable("/proc/sys/kernel/core_pattern"),
                        "open": open_for_writing("/proc/sys/kernel/core_pattern")},
       "sysrq": writable("/proc/sysrq-trigger"),
       "covered": covered, "below": below, "n_files": len(files),
       "writable": [p for p in files if writable(p) not in ("EROFS", "EACCES", "ENOENT")][:20]}
done(res)
'''


def check_proc(res):
    cp = res["core_pattern"]
    check(cp["access"] in ("EROFS", "EACCES"), f"/proc/sys/kernel/core_pattern is writable: {cp}")
    check(cp["open"] in ("EROFS", "EACCES"), f"opening /proc/sys/kernel/core_pattern for writing: {cp['open']}")
    check(res["sysrq"] in ("EROFS", "EACCES", "ENOENT"), f"/proc/sysrq-trigger: {res['sysrq']}")
    for path, (opts, exists) in res["covered"].items():
        if path == "/proc/sysrq-trigger" and not exists and not os.path.exists(path):
            continue   # this kernel has none (CONFIG_MAGIC_SYSRQ off)
        check(opts is not None, f"{path} is not a mount point of its own inside (mountinfo)")
        check("ro" in opts, f"{path} is mounted {','.join(opts)} inside, not ro")
    bad = {m: o for m, o in res["below"].items() if "ro" not in o}
    check(not bad, f"mounts below /proc/sys not read-only: {bad}")
    check(res["n_files"] > 100, f"only {res['n_files']} files seen below /proc/sys, /proc/irq and /proc/bus")
    check(not res["writable"], f"writable inside: {res['writable'][:20]}")


@test
def proc_sys_and_friends_are_read_only():
    def one(via):
        check_proc(probe(PROC, (PROC_COVERED,), via))
    both(one)


@test
def proc_sys_is_read_only_under_an_unprivileged_daemon_too():
    # The same policy must still start when bwrap runs without privileges (and then binds nothing it may not).
    d = bomb_daemon()
    if d.uid == 0:
        skip("no way to run the daemon unprivileged here (setpriv, /usr/bin/python3.11)")
    c = d.client()
    c.initialize()
    at_exit(lambda: c.proc.poll() is None and c.kill())
    check_proc(probe(PROC, (PROC_COVERED,), c=c, python_version=d.python))
    c.close()


# --- bwrap's command line ---------------------------------------------------------------

# bwrap's command line is the whole policy: the cache directory (its sandbox-etc), every bound path, the
# environment's variables. It reaches bwrap through a file descriptor (--args); pid 1 of the sandbox, a copy of
# bwrap, shows only that and the command, which is the run's own (its /proc/self/cmdline). The run sees its
# environment at /venv, so no process inside shows the store's path or the environment's key anywhere.
ARGV = r'''
cache, key = P
def read(p, what):
    try:
        with open(f"/proc/{p}/{what}", "rb") as f:
            return f.read()
    except OSError:
        return None
own_cmdline = read("self", "cmdline").split(b"\0")[:-1]
own_environ = set(read("self", "environ").split(b"\0")[:-1])
pid1 = read(1, "cmdline").split(b"\0")[:-1]
res = {"key": key, "prefix": sys.prefix, "pid1": [a.decode(errors="replace")[:200] for a in pid1[:4]],
       "pid1_rest_is_own": pid1[4:] == own_cmdline, "read": [], "leaks": {}, "fds": {}}
secrets = (cache.encode(), key.encode(), os.path.join(cache, "sandbox-etc").encode(), b"--ro-bind", b"--setenv",
           b"--seccomp")
for p in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
    for what in ("cmdline", "environ"):
        data = read(p, what)
        if data is None:
            continue
        res["read"].append(f"{p}/{what}")
        # Its own command line and environment too: the run sees its environment at /venv, not in the store.
        items = data.split(b"\0")
        found = [s.decode() for s in secrets if any(s in i for i in items)]
        if found:
            res["leaks"][f"{p}/{what}"] = found
    try:
        for fd in os.listdir(f"/proc/{p}/fd"):
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("/memfd:"):
                res["fds"][f"{p}/{fd}"] = link
    except OSError:
        pass
done(res)
'''


@test
def bwrap_command_line_is_not_visible_inside():
    d = daemon()

    # The key of the environment the probes run in (the bare one of this Python), from a result.
    r = shared_client().call_tool("execute_python", {"script": "print(1)", "python_version": newest_python()},
                                  timeout=120)
    key = (r.get("structuredContent") or {}).get("environment", {}).get("key", "")
    check(len(key) == 64, f"the environment's key: {key!r}")

    def one(via):
        res = probe(ARGV, (d.cache_dir, key), via)
        eq(res["prefix"], "/venv", "sys.prefix inside")
        check({"1/cmdline", "1/environ"} <= set(res["read"]), f"pid 1's cmdline and environ not read: {res['read']}")
        pid1 = res["pid1"]
        check(len(pid1) >= 4 and os.path.basename(pid1[0]) == "bwrap" and pid1[1] == "--args" and pid1[2].isdigit()
              and pid1[3] == "--", f"pid 1's command line: {pid1[:12]}")
        check(res["pid1_rest_is_own"], "pid 1's command line after bwrap --args N -- is not the run's own")
        check(not res["leaks"], f"the cache dir, key or bwrap options visible in: {res['leaks']}")
        check(not res["fds"], f"memfds of the daemon's (bwrap's arguments, the filter) open inside: {res['fds']}")
    both(one)


# --- run lifetime ------------------------------------------------------------------

@test
def timeout_kills_a_busy_loop_and_its_stubborn_child():
    daemon()
    c = client()
    mark = "mcpt-sec-timeout-" + uuid.uuid4().hex
    script = ("import signal, subprocess, sys\n" + stubborn(mark) +
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
              "print('looping', flush=True)\nwhile True:\n    pass\n")
    t0 = time.monotonic()
    rid = send_call(c, {"script": script, "timeout_seconds": 2})
    wait_until(lambda: processes_with(mark), 15, "the stubborn child")
    reply = c.wait_for(rid, timeout=60)
    st = reply["result"]["structuredContent"]
    eq((reply["result"]["isError"], st["timed_out"], st["stdout"]), (True, True, "looping\n"), "timed out")
    check(time.monotonic() - t0 < 10, "the timeout took too long")
    wait_until(lambda: not processes_with(mark), 3, "no process of the timed-out run")
    c.close()


@test
def no_process_outlives_client_or_closed_sandbox():
    d = daemon()
    # 1. The client goes away (the shim is killed) during a run with a stubborn child.
    c = client()
    mark = "mcpt-sec-gone-" + uuid.uuid4().hex
    send_call(c, {"script": "import subprocess, sys, time\n" + stubborn(mark) +
                  "print('started', flush=True)\ntime.sleep(600)\n", "timeout_seconds": 600})
    wait_until(lambda: processes_with(mark), 15, "the run's stubborn child")
    c.kill()
    wait_until(lambda: not processes_with(mark), 5, "the run's processes to go after the client")
    # 2. A persistent sandbox with a stubborn background process, closed.
    c = client()
    r = c.call_tool("create_sandbox", {"python_version": newest_python()})
    check(not r.get("isError"), c.text(r))
    sid = r["structuredContent"]["sandbox_id"]
    mark2 = "mcpt-sec-sbx-" + uuid.uuid4().hex
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": "import subprocess, sys\n" + stubborn(mark2) + "'ok'"})
    check(not r.get("isError") and r["structuredContent"]["result"] == "'ok'", c.text(r))
    wait_until(lambda: processes_with(mark2), 10, "the sandbox's stubborn process")
    r = c.call_tool("close_sandbox", {"sandbox_id": sid})
    check(not r.get("isError"), c.text(r))
    wait_until(lambda: not processes_with(mark2), 5, "the sandbox's processes to go after close_sandbox")
    c.close()
    check(d.alive(), "the daemon died")


@test
def no_process_outlives_the_daemon():
    need_uv()
    d = Daemon(args=["--tmpfs-size=32M", "--persistent-sandboxes"])
    at_exit(d.close)
    sandbox_works(d)
    c = d.client()
    c.initialize()
    run_mark = "mcpt-sec-stop-run-" + uuid.uuid4().hex
    sbx_mark = "mcpt-sec-stop-sbx-" + uuid.uuid4().hex
    r = c.call_tool("create_sandbox", {"python_version": newest_python()})
    check(not r.get("isError"), c.text(r))
    sid = r["structuredContent"]["sandbox_id"]
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": "import subprocess, sys\n" + stubborn(sbx_mark) + "1"})
    check(not r.get("isError"), c.text(r))
    send_call(c, {"script": "import subprocess, sys, time\n" + stubborn(run_mark) + "time.sleep(600)\n",
                  "timeout_seconds": 600})
    wait_until(lambda: processes_with(run_mark) and processes_with(sbx_mark), 15, "the run's and sandbox's processes")
    pid = d.proc.pid
    eq(d.stop(signal.SIGTERM, timeout=15), 0, "the daemon's exit status after SIGTERM")
    wait_until(lambda: not processes_with(run_mark) and not processes_with(sbx_mark), 5,
               "the run's and the sandbox's processes to go with the daemon")
    check(not os.path.exists(f"/proc/{pid}"), "the daemon is gone")
    c.kill()


# --- bombs beside a good client --------------------------------------------------------

NOBODY = 65534


def bomb_daemon():
    """The daemon as uid 65534 where possible (the caller puts it under a pids cgroup safety net)."""
    base = scratch("mcpt-sec-bombs-")
    os.chmod(base, 0o755)
    cache = os.path.join(base, "cache")
    os.mkdir(cache)
    args = ["--tmpfs-size=32M", "--max-runs=8"]
    if os.geteuid() == 0 and not mcptest.DAEMON_USER and shutil.which("setpriv") and \
            os.access("/usr/bin/python3.11", os.X_OK):
        os.chown(cache, NOBODY, NOBODY)
        wrapper = os.path.join(base, "daemon-as-nobody")
        mcptest.executable(wrapper, f"#!/bin/sh\nexec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups -- "
                                    f"'{mcptest.DAEMON}' \"$@\"\n")
        real = mcptest.DAEMON
        mcptest.DAEMON = wrapper
        try:
            d = Daemon(args=[*args, "--python-search-path=/usr/bin"], cache_dir=cache)
        finally:
            mcptest.DAEMON = real
        d.python, d.uid = "3.11", NOBODY
    else:
        d = Daemon(args=args, cache_dir=cache)
        d.python = newest_python()   # d.uid: the daemon's (MCP_TEST_DAEMON_USER's, or ours)
    at_exit(d.close)
    sandbox_works(d)
    return d


BOMBS = {
    "fork": ("import os, time\nn = 0\ntry:\n    while n < 2000:\n        if os.fork() == 0:\n"
             "            time.sleep(30)\n            os._exit(0)\n        n += 1\nfinally:\n    print('forked', n)\n",
             {"max_processes": 64}, "processes"),
    "memory": ("keep = []\nfor i in range(256):\n    keep.append(b'x' * (16 << 20))\n", {"memory_mb": 256}, "memory"),
    "disk": ("with open('/work/fill', 'wb') as f:\n    while True:\n"
             "        f.write(b'\\0' * (1 << 20))\n        f.flush()\n",
             None, None),
    "flood": ("import sys\nb = (b'y' * 1023 + b'\\n') * 1024\nfor i in range(150):\n    sys.stdout.buffer.write(b)\n"
              "print('FLOOD END', flush=True)\n", None, None),
}


@test
def bombs_beside_a_client_that_keeps_being_served():
    # The bombs' daemon in a pids cgroup of ours: a fork bomb that gets past its limit stops there.
    if os.geteuid() == 0 and not mcptest.pids_safety_net():
        skip("no pids cgroup to run a fork bomb in as root (the safety net)")
    d = bomb_daemon()
    if d.uid == 0:
        print("# the daemon runs as root: RLIMIT_NPROC does not bind, the fork bomb relies on cgroups", flush=True)
    bombers = {}
    for name, (script, limits, _) in BOMBS.items():
        c = d.client()
        c.initialize()
        args = {"script": script, "python_version": d.python, "timeout_seconds": 40}
        if limits:
            args["limits"] = limits
        bombers[name] = (c, send_call(c, args))
    good = d.client()
    good.initialize()
    served, worst = 0, 0.0
    deadline = time.monotonic() + 8
    failures = []
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        r = good.call_tool("execute_python", {"script": "print('hello world')", "python_version": d.python},
                           timeout=30)
        worst = max(worst, time.monotonic() - t0)
        st = r.get("structuredContent") or {}
        if r.get("isError") or st.get("stdout") != "hello world\n":
            failures.append(good.text(r)[-600:])
        served += 1
    results = {}
    for name, (c, rid) in bombers.items():
        reply = c.wait_for(rid, timeout=60)
        check("result" in reply, f"{name} bomb: {reply}")
        results[name] = reply["result"]
        c.close()
    check(not failures, f"{len(failures)} of {served} hello-world runs failed beside the bombs: {failures[:2]}")
    check(served >= 3, f"only {served} hello-world runs answered in 8 s beside the bombs (worst {worst:.1f}s)")
    for name, (_, _, limit) in BOMBS.items():
        st = results[name]["structuredContent"]
        if name == "fork" and d.uid == 0 and st["limits"]["mechanism"] == "rlimit":
            continue
        if limit:
            eq(st.get("limit"), limit, f"{name} bomb's limit")
    eq(results["disk"]["structuredContent"].get("limit") in ("disk_space", "file_size"), True, "disk fill's limit")
    check(results["flood"]["structuredContent"]["stdout"].endswith("FLOOD END\n"), "flood's tail")
    check(d.alive(), "the daemon died")
    eq(good.request("ping").get("result"), {}, "ping afterwards")
    good.close()
    wait_until(lambda: not [p for p in children(d.proc.pid)], 15, "the bombs' processes to be gone")


if __name__ == "__main__":
    main()
