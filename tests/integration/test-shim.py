#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test of the stdio shim, mcp-python-sandbox.

The daemon is faked: a Unix-socket server in a thread of this process, and a
small sh script standing in for "mcp-python-sandboxd --stdio". Needs only the
shim binary, named by $SHIM. When run as root and unshare(1) works, every shim
runs in a private mount namespace with a tmpfs over the run-state directory,
so the system socket is one this test controls (and the host's is never used).

Exit status as automake wants it: 0 pass, 1 fail, 77 skip.
"""

import grp
import json
import os
import random
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

SHIM = os.environ.get("SHIM", "")
TIMEOUT = 60
NOBODY = 65534


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, why):
    if not cond:
        raise Failure(why)


def excerpt(b, n=300):
    r = repr(b)
    return r if len(r) <= n else r[:n] + "..."


class FakeDaemon:
    """Listens on PATH and runs handler(conn) for each connection, one at a time."""

    def __init__(self, path, handler):
        self.path = path
        self.handler = handler
        self.connections = 0
        self.errors = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                try:
                    self.handler(conn)
                except OSError as e:
                    self.errors.append(repr(e))

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)   # wakes accept()
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def recv_all(conn):
    data = bytearray()
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return bytes(data)
        data += chunk


def send_in_pieces(conn, data, rng):
    """Send in uneven pieces so that lines arrive split across writes."""
    i = 0
    while i < len(data):
        n = rng.choice((1, 7, 100, 4096, 65536 + 3))
        conn.sendall(data[i:i + n])
        i += n


def echo_handler(conn):
    """Echo everything back; at end of input say bye and close."""
    rng = random.Random(1)
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        send_in_pieces(conn, chunk, rng)
    conn.sendall(b"bye\n")


def name_handler(name):
    """Say who we are, then wait for the client to finish and close."""
    def handler(conn):
        conn.sendall(name.encode() + b"\n")
        recv_all(conn)
    return handler


def stale_socket(path):
    """A socket file with nobody listening: bound, then closed."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()


def run_shim(ctx, args, env, chunks=(), keep_stdin_open=False, as_user=None, close_stdout=False):
    """Run the shim, feed it chunks, collect stdout/stderr. Returns (rc, out, err)."""
    argv = list(ctx.prefix)
    if as_user is not None:
        uid, gid = as_user
        argv += ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups"]
    argv += [SHIM] + list(args)

    p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    out, err = bytearray(), bytearray()

    def reader(f, buf):
        while True:
            b = f.read1(65536) if hasattr(f, "read1") else f.read(65536)
            if not b:
                return
            buf += b

    def writer():
        try:
            for c in chunks:
                p.stdin.write(c)
                p.stdin.flush()
            if not keep_stdin_open:
                p.stdin.close()
        except BrokenPipeError:
            pass

    threads = [threading.Thread(target=reader, args=(p.stderr, err), daemon=True),
               threading.Thread(target=writer, daemon=True)]
    if close_stdout:
        p.stdout.close()
    else:
        threads.append(threading.Thread(target=reader, args=(p.stdout, out), daemon=True))
    for t in threads:
        t.start()
    try:
        rc = p.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise Failure("shim still running after %d s; stderr: %s" % (TIMEOUT, excerpt(bytes(err))))
    for t in threads:
        t.join(10)
    try:
        p.stdin.close()
    except BrokenPipeError:
        pass
    return rc, bytes(out), err.decode(errors="replace")


def split_randomly(data, rng):
    chunks, i = [], 0
    while i < len(data):
        n = rng.randint(1, 20000)
        chunks.append(data[i:i + n])
        i += n
    return chunks


class Context:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="test-shim.")
        os.chmod(self.tmp, 0o755)    # the uid 65534 case walks through it
        self.n = 0
        self.system_socket = None
        self.prefix = []
        self.isolated = False

        rc = subprocess.run([SHIM, "--help"], capture_output=True, timeout=TIMEOUT)
        m = re.search(r"^\s*3\. (\S+) \(system service\)", rc.stdout.decode(), re.M)
        if not m:
            raise Failure("--help does not name the system socket")
        self.system_socket = m.group(1)

        # The system socket's directory, made ours in a private mount namespace.
        self.system_dir = self.mkdir("system")
        rundir = os.path.dirname(os.path.dirname(self.system_socket))
        script = ('mount -t tmpfs -o mode=0755 tmpfs "$1" && mkdir "$1/mcp-python-sandbox" && '
                  'mount --bind "$2" "$1/mcp-python-sandbox" && shift 2 && exec "$@"')
        prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                  rundir, self.system_dir]
        if (os.geteuid() == 0 and os.path.isdir(rundir) and shutil.which("unshare")
            and not self.tmp.startswith(rundir.rstrip("/") + "/")
            and not os.path.realpath(SHIM).startswith(rundir.rstrip("/") + "/")):
            r = subprocess.run(prefix + ["true"], capture_output=True, timeout=TIMEOUT)
            if r.returncode == 0:
                self.prefix = prefix
                self.isolated = True

        self.fake_daemon = os.path.join(self.tmp, "fake-mcp-python-sandboxd")
        with open(self.fake_daemon, "w") as f:
            f.write('#!/bin/sh\n'
                    '# Stands in for mcp-python-sandboxd --stdio: records argv and fds, echoes stdin.\n'
                    'printf "%s\\n" "$0" "$@" > "$FAKE_RECORD/argv"\n'
                    'ls /proc/self/fd > "$FAKE_RECORD/fds"\n'
                    'exec cat\n')
        os.chmod(self.fake_daemon, 0o755)

    def mkdir(self, name, mode=0o755):
        self.n += 1
        d = os.path.join(self.tmp, "%02d-%s" % (self.n, name))
        os.mkdir(d)
        os.chmod(d, mode)
        return d

    def env(self, **kw):
        """A clean environment: nothing points at a real daemon or a real cache."""
        e = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self.mkdir("home"),
            "XDG_RUNTIME_DIR": self.mkdir("runtime"),
            "XDG_CACHE_HOME": self.mkdir("cache"),
            "MCP_PYTHON_SANDBOXD": self.fake_daemon,
            "FAKE_RECORD": self.mkdir("record", 0o777),
        }
        for k, v in kw.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return e

    def need_no_system_socket(self):
        if not self.isolated and os.path.exists(self.system_socket):
            raise Skip("%s exists on this machine and cannot be hidden (needs root and unshare)"
                       % self.system_socket)

    def need_isolation(self):
        if not self.isolated:
            raise Skip("needs root and unshare --mount to stand in for %s" % self.system_socket)

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def user_socket(env):
    d = os.path.join(env["XDG_RUNTIME_DIR"], "mcp-python-sandbox")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, "mcp.sock")


# ---- cases ---------------------------------------------------------------------

def case_help_version_usage(ctx):
    r = subprocess.run([SHIM, "--help"], capture_output=True, timeout=TIMEOUT)
    check(r.returncode == 0, "--help exited %d" % r.returncode)
    for word in ("--socket", "--no-fallback", "--quiet", "MCP_PYTHON_SANDBOX_SOCKET",
                 "MCP_PYTHON_SANDBOXD", "XDG_RUNTIME_DIR", "64", "69", "74", "77"):
        check(word in r.stdout.decode(), "--help does not mention %s" % word)

    r = subprocess.run([SHIM, "--version"], capture_output=True, timeout=TIMEOUT)
    check(r.returncode == 0 and re.fullmatch(rb"mcp-python-sandbox \S+\n", r.stdout),
          "--version: exit %d, %s" % (r.returncode, excerpt(r.stdout)))

    for args in (["--bogus"], ["extra-argument"], ["--socket="], ["--socket"]):
        r = subprocess.run([SHIM] + args, capture_output=True, timeout=TIMEOUT,
                           stdin=subprocess.DEVNULL)
        check(r.returncode == 64, "%s exited %d, not 64" % (args, r.returncode))
        check(r.stdout == b"", "%s wrote to stdout" % args)
        check(r.stderr != b"", "%s said nothing on stderr" % args)


def case_pump_many_lines(ctx):
    rng = random.Random(42)
    lines = []
    for i in range(3000):
        lines.append(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"x":"%s"}}\n'
                     % (i, b"y" * rng.randint(0, 3000)))
    lines.insert(1500, b'{"big":"' + b"z" * (1 << 20) + b'"}\n')     # a 1 MiB line
    data = b"".join(lines)

    path = os.path.join(ctx.mkdir("sock"), "echo.sock")
    with FakeDaemon(path, echo_handler) as d:
        rc, out, err = run_shim(ctx, ["--socket", path], ctx.env(), split_randomly(data, rng))
    check(d.errors == [], "fake daemon: %s" % d.errors)
    check(rc == 0, "exit %d; stderr: %s" % (rc, err))
    check(len(out) == len(data) + 4, "got %d bytes back, sent %d" % (len(out), len(data)))
    check(out == data + b"bye\n", "stdout differs from the daemon's bytes")
    check(err == "mcp-python-sandbox: connected to %s\n" % path, "stderr: %r" % err)


def case_half_close(ctx):
    seen = {}
    late = [b'{"jsonrpc":"2.0","id":1,"result":{}}\n',
            b'{"jsonrpc":"2.0","id":2,"result":{"text":"' + b"r" * 300000 + b'"}}\n']

    def handler(conn):
        seen["request"] = recv_all(conn)     # returns only at the shim's SHUT_WR
        seen["eof"] = True
        time.sleep(0.2)                      # the shim must wait for us
        for line in late:
            conn.sendall(line)
            time.sleep(0.05)

    path = os.path.join(ctx.mkdir("sock"), "half.sock")
    request = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n'
    with FakeDaemon(path, handler) as d:
        rc, out, err = run_shim(ctx, ["-q", "--socket=" + path], ctx.env(), [request[:10], request[10:]])
    check(d.errors == [], "fake daemon: %s" % d.errors)
    check(seen.get("eof") and seen.get("request") == request,
          "daemon got %s before EOF" % excerpt(seen.get("request")))
    check(rc == 0, "exit %d; stderr: %s" % (rc, err))
    check(out == b"".join(late), "stdout: %s" % excerpt(out))
    check(err == "", "-q, yet stderr: %r" % err)


def case_daemon_closes_first(ctx):
    reply = b'{"jsonrpc":"2.0","id":7,"result":{}}\n\x00\xff no newline at the end'

    def handler(conn):
        buf = b""
        while b"\n" not in buf:
            buf += conn.recv(4096)
        conn.sendall(reply)      # and close, with the client's stdin still open

    path = os.path.join(ctx.mkdir("sock"), "close.sock")
    with FakeDaemon(path, handler) as d:
        rc, out, err = run_shim(ctx, ["--socket", path], ctx.env(),
                                [b'{"id":7}\n', b'{"id":8}\n' * 1000], keep_stdin_open=True)
    check(rc == 0, "exit %d; stderr: %s" % (rc, err))
    check(out == reply, "stdout: %s" % excerpt(out))


def case_discovery_order(ctx):
    sockdir = ctx.mkdir("sock")
    a, b = os.path.join(sockdir, "a.sock"), os.path.join(sockdir, "b.sock")
    env = ctx.env()
    c = user_socket(env)
    daemons = [FakeDaemon(a, name_handler("A")), FakeDaemon(b, name_handler("B")),
               FakeDaemon(c, name_handler("C"))]
    try:
        tests = [
                (["--socket", a], dict(MCP_PYTHON_SANDBOX_SOCKET=b), "A", a),
                (["--socket=" + a], dict(MCP_PYTHON_SANDBOX_SOCKET=b), "A", a),
                ([], dict(MCP_PYTHON_SANDBOX_SOCKET=b), "B", b),
                ([], dict(MCP_PYTHON_SANDBOX_SOCKET=""), "C", c),
                ([], {}, "C", c),
        ]
        for args, extra, name, path in tests:
            rc, out, err = run_shim(ctx, args, dict(env, **extra))
            what = "%s %s" % (args, extra)
            check(rc == 0, "%s: exit %d; stderr: %s" % (what, rc, err))
            check(out == name.encode() + b"\n", "%s: expected %s, got %s" % (what, name, excerpt(out)))
            check("connected to %s\n" % path in err, "%s: stderr: %r" % (what, err))
    finally:
        for d in daemons:
            d.close()


def case_explicit_socket_only(ctx):
    env = ctx.env()
    sockdir = ctx.mkdir("sock")
    missing = os.path.join(sockdir, "missing.sock")
    stale = os.path.join(sockdir, "stale.sock")
    stale_socket(stale)
    with FakeDaemon(user_socket(env), name_handler("C")) as d:
        for path in (missing, stale):
            for args, extra in ((["--socket", path], {}),
                                ([], dict(MCP_PYTHON_SANDBOX_SOCKET=path))):
                # With or without --no-fallback: a named socket that does not answer is an error, as the man
                # page says, not a private daemon with default settings.
                for more in (["--no-fallback"], []):
                    what = "%s %s %s" % (args + more, extra, path)
                    rc, out, err = run_shim(ctx, args + more, dict(env, **extra), [b"hi\n"])
                    check(rc == 69, "%s: exit %d, not 69" % (what, rc))
                    check(out == b"", "%s: stdout: %s" % (what, excerpt(out)))
                    check("cannot connect to %s" % path in err, "%s: stderr: %r" % (what, err))
                    check("serving this session" not in err, "%s: it fell back: %r" % (what, err))
                    check(not os.path.exists(os.path.join(env["FAKE_RECORD"], "argv")), "%s: the fallback ran" % what)
        check(d.connections == 0, "the shim tried the user socket after the explicit one")


def case_system_socket_last(ctx):
    ctx.need_isolation()
    sysd = FakeDaemon(os.path.join(ctx.system_dir, "mcp.sock"), name_handler("S"))
    try:
        env = ctx.env()      # no user socket: ENOENT, skipped
        rc, out, err = run_shim(ctx, [], env)
        check(rc == 0 and out == b"S\n", "missing user socket: exit %d, %s; %r" % (rc, excerpt(out), err))
        check("connected to %s\n" % ctx.system_socket in err, "stderr: %r" % err)

        env = ctx.env()      # a stale user socket: ECONNREFUSED, skipped
        stale_socket(user_socket(env))
        rc, out, err = run_shim(ctx, [], env)
        check(rc == 0 and out == b"S\n", "stale user socket: exit %d, %s; %r" % (rc, excerpt(out), err))

        env = ctx.env(XDG_RUNTIME_DIR=None)
        rc, out, err = run_shim(ctx, [], env)
        check(rc == 0 and out == b"S\n", "no XDG_RUNTIME_DIR: exit %d, %s; %r" % (rc, excerpt(out), err))
    finally:
        sysd.close()


def read_record(env):
    with open(os.path.join(env["FAKE_RECORD"], "argv")) as f:
        argv = f.read().splitlines()
    with open(os.path.join(env["FAKE_RECORD"], "fds")) as f:
        fds = set(f.read().split())
    return argv, fds


def check_fallback(ctx, env, cache, rc, out, err, data):
    check(rc == 0, "exit %d; stderr: %s" % (rc, err))
    check(out == data, "stdout is not the fake daemon's echo: %s" % excerpt(out))
    argv, fds = read_record(env)
    check(argv == [ctx.fake_daemon, "--stdio", "--cache-dir=" + cache], "daemon argv: %s" % argv)
    # 0-2 are handed over, one more is ls's own directory fd: anything else leaked.
    check({"0", "1", "2"} <= fds and len(fds) <= 4, "fds the daemon inherited: %s" % sorted(fds))
    st = os.stat(cache)
    check(stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o711,   # searchable only: a root daemon's sandbox uids pass
          "cache %s mode %o" % (cache, st.st_mode))


def case_fallback_exec(ctx):
    ctx.need_no_system_socket()
    data = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(500))

    env = ctx.env()
    cache = os.path.join(env["XDG_CACHE_HOME"], "mcp-python-sandbox")
    rc, out, err = run_shim(ctx, [], env, [data])
    check_fallback(ctx, env, cache, rc, out, err, data)
    user = os.path.join(env["XDG_RUNTIME_DIR"], "mcp-python-sandbox", "mcp.sock")
    mode = (r"^mcp-python-sandbox: no daemon socket answered \(tried: .*%s.*\); "
            r"serving this session with %s --stdio \(cache: %s\)$"
            % (re.escape(user), re.escape(ctx.fake_daemon), re.escape(cache)))
    check(re.search(mode, err, re.M), "mode line: %r" % err)

    # No XDG_CACHE_HOME: ~/.cache, parents created; -q: nothing on stderr.
    env = ctx.env(XDG_CACHE_HOME=None)
    cache = os.path.join(env["HOME"], ".cache", "mcp-python-sandbox")
    rc, out, err = run_shim(ctx, ["-q"], env, [data])
    check_fallback(ctx, env, cache, rc, out, err, data)
    check(err == "", "-q, yet stderr: %r" % err)

    # Root whose home others cannot search (the usual 0700 /root): a root daemon's sandbox uids could not reach a
    # cache there, so the cache goes where --help says.
    if os.getuid() == 0:
        env = ctx.env(XDG_CACHE_HOME=None)
        os.chmod(env["HOME"], 0o700)
        _, help_out, _ = run_shim(ctx, ["--help"], env)
        m = re.search(r"for root, when others cannot search its home: (/\S+)\)", help_out.decode())
        check(m, "--help does not name root's cache: %r" % help_out)
        cache = m.group(1)
        existed = os.path.exists(cache)
        try:
            rc, out, err = run_shim(ctx, ["-q"], env, [data])
            check_fallback(ctx, env, cache, rc, out, err, data)
        finally:
            if not existed and os.path.isdir(cache):
                os.rmdir(cache)


def case_stale_socket_skipped(ctx):
    ctx.need_no_system_socket()
    env = ctx.env()
    path = user_socket(env)
    stale_socket(path)
    rc, out, err = run_shim(ctx, [], env, [b"hello\n"])
    check(rc == 0 and out == b"hello\n", "exit %d, stdout %s; stderr %r" % (rc, excerpt(out), err))
    check("%s (Connection refused)" % path in err, "stale socket not listed as refused: %r" % err)
    check("cannot connect" not in err, "a skipped candidate was reported as an error: %r" % err)

    rc, out, err = run_shim(ctx, ["--no-fallback", "--socket", path], env)
    check(rc == 69, "stale --socket with --no-fallback: exit %d" % rc)


def case_no_fallback_nothing_listening(ctx):
    ctx.need_no_system_socket()
    env = ctx.env()
    rc, out, err = run_shim(ctx, ["--no-fallback"], env)
    check(rc == 69, "exit %d, not 69" % rc)
    check(out == b"", "stdout: %s" % excerpt(out))
    user = os.path.join(env["XDG_RUNTIME_DIR"], "mcp-python-sandbox", "mcp.sock")
    for s in ("no mcp-python-sandbox daemon is listening", user, ctx.system_socket,
              "sudo systemctl enable --now mcp-python-sandboxd.socket",
              "systemctl --user enable --now mcp-python-sandboxd.socket", "drop --no-fallback"):
        check(s in err, "stderr lacks %r: %r" % (s, err))
    check(not os.path.exists(os.path.join(env["FAKE_RECORD"], "argv")), "the fallback ran anyway")


def case_exec_failure(ctx):
    ctx.need_no_system_socket()
    missing = os.path.join(ctx.tmp, "no-such-daemon")
    rc, out, err = run_shim(ctx, [], ctx.env(MCP_PYTHON_SANDBOXD=missing))
    check(rc == 69, "exit %d, not 69" % rc)
    check(out == b"", "stdout: %s" % excerpt(out))
    check("the daemon binary %s could not be started: No such file or directory" % missing in err,
          "stderr: %r" % err)


def case_permission_denied(ctx):
    if os.geteuid() != 0:
        raise Skip("needs root to run the shim as uid %d" % NOBODY)
    if not shutil.which("setpriv"):
        raise Skip("setpriv(1) not found")
    nobody = (NOBODY, NOBODY)
    r = subprocess.run(ctx.prefix + ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                                     "--clear-groups", SHIM, "--version"], capture_output=True)
    if r.returncode != 0:
        raise Skip("uid %d cannot run %s: %s" % (NOBODY, SHIM, r.stderr.decode().strip()))

    # A group neither root nor nobody belongs to, as mcp-sandbox would be.
    groups = [g for g in grp.getgrall() if g.gr_gid not in (0, NOBODY)]
    if not groups:
        raise Skip("no spare group to own the socket")
    group = groups[0]

    path = os.path.join(ctx.mkdir("sock"), "mcp.sock")
    with FakeDaemon(path, echo_handler) as d:
        os.chown(path, 0, group.gr_gid)
        os.chmod(path, 0o660)

        env = ctx.env()
        for k in ("XDG_CACHE_HOME", "FAKE_RECORD"):
            os.chown(env[k], NOBODY, NOBODY)
        rc, out, err = run_shim(ctx, ["--socket", path, "--no-fallback"], env, as_user=nobody)
        check(rc == 77, "exit %d, not 77; stderr %r" % (rc, err))
        check(out == b"", "stdout: %s" % excerpt(out))
        want = ("mcp-python-sandbox: permission denied on %s: add yourself to the group that owns it "
                "(sudo usermod -aG %s $USER, then log in again)\n" % (path, group.gr_name))
        check(err == want, "stderr: %r" % err)

        # Without --no-fallback: the same advice, and still no private daemon, as the socket was named.
        rc, out, err = run_shim(ctx, ["--socket", path], env, [b"hi\n"], as_user=nobody)
        check(rc == 77 and out == b"", "explicit socket, no --no-fallback: exit %d, stdout %s; %r"
              % (rc, excerpt(out), err))
        check(want in err and "serving this session with" not in err, "stderr: %r" % err)
        check(not os.path.exists(os.path.join(env["FAKE_RECORD"], "argv")), "the fallback ran")

        # A socket of group root: joining root's group is no advice to give.
        os.chown(path, 0, 0)
        rc, out, err = run_shim(ctx, ["--socket", path, "--no-fallback"], env, as_user=nobody)
        check(rc == 77, "group root: exit %d, not 77" % rc)
        check("usermod -aG root" not in err and "usermod -aG mcp-sandbox" in err, "group root: stderr %r" % err)
        os.chown(path, 0, group.gr_gid)

        # In the group already, but the mode keeps everyone out.
        os.chmod(path, 0)
        rc, out, err = run_shim(ctx, ["--socket", path, "--no-fallback"], env,
                                as_user=(NOBODY, group.gr_gid))
        check(rc == 77, "mode 000: exit %d, not 77" % rc)
        check("although this process is in group %s" % group.gr_name in err, "stderr: %r" % err)
        check(d.connections == 0, "a connection got through")


def case_stdout_closed(ctx):
    def handler(conn):
        try:
            for _ in range(64):
                conn.sendall(b"x" * 65535 + b"\n")
        except OSError:
            pass

    path = os.path.join(ctx.mkdir("sock"), "flood.sock")
    with FakeDaemon(path, handler):
        rc, out, err = run_shim(ctx, ["--socket", path], ctx.env(), keep_stdin_open=True,
                                close_stdout=True)
    check(rc == 74, "exit %d, not 74; stderr %r" % (rc, err))
    check("writing to stdout failed: Broken pipe" in err, "stderr: %r" % err)


def case_files(ctx):
    """A tools/call with "files": the shim opens the file and passes it with SCM_RIGHTS in the place of the path;
    every other line, "files" in it or not, and a line too long to hold back, go byte for byte."""
    import array
    d = ctx.mkdir("files")
    data = os.path.join(d, "data.csv")
    with open(data, "w") as f:
        f.write("a,b\n1,2\n")
    got = {"bytes": b"", "fds": []}

    def handler(conn):
        while True:
            msg, anc, _, _ = conn.recvmsg(1 << 20, socket.CMSG_SPACE(64 * 4))
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(payload[:len(payload) - len(payload) % 4])
                    got["fds"].append((len(got["bytes"]) + len(msg) - 1, list(fds)))
            if not msg:
                break
            got["bytes"] += msg
        conn.sendall(b"bye\n")

    plain = [b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"files":[{"path":"/etc/shadow"}]}}\n',
             b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{"files":"x"}}}\n',
             b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"arguments":{"script":"\\"files\\""}}}\n',
             b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"arguments":{"x":"' + b"q" * (17 << 20)
             + b'","files":[{"path":"' + data.encode() + b'"}]}}}\n']
    call = (b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"execute_python","arguments":'
            b'{"script":"print(1)","files":[{"path":"' + data.encode() + b'","as":"d.csv"}]}}}\n')
    tail = b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"arguments":{"files":[{"path":"/x"}]}}}'
    stream = plain[0] + plain[1] + plain[2] + call + plain[3] + tail
    path = os.path.join(ctx.mkdir("sock"), "files.sock")
    with FakeDaemon(path, handler) as fd_:
        rc, out, err = run_shim(ctx, ["-q", "--socket", path], ctx.env(), split_randomly(stream, random.Random(7)))
    check(fd_.errors == [], "fake daemon: %s" % fd_.errors)
    check(rc == 0 and out == b"bye\n", "exit %d, stdout %s; stderr: %s" % (rc, excerpt(out), err))
    lines = got["bytes"].split(b"\n")
    check(len(lines) == 6, "%d lines" % len(lines))
    # Untouched: not a tools/call, files not an array, "files" only in a string, too long, and the last line
    # that ended with the input rather than a newline.
    for i, want in ((0, plain[0]), (1, plain[1]), (2, plain[2]), (4, plain[3])):
        check(lines[i] + b"\n" == want, "line %d changed: %s" % (i, excerpt(lines[i])))
    check(lines[5] == tail, "the last line: %s" % excerpt(lines[5]))
    rewritten = json.loads(lines[3])
    eq_files = rewritten["params"]["arguments"]["files"]
    check(eq_files == [{"as": "d.csv", "fd": 0}], "files: %r" % eq_files)
    check(data.encode() not in lines[3], "the path went on")
    # One batch of one fd, filed at a byte of that line; it is the file.
    start = sum(len(x) + 1 for x in lines[:3])
    check(len(got["fds"]) == 1, "fds: %r" % got["fds"])
    at, fds = got["fds"][0]
    check(start <= at < start + len(lines[3]) + 1 and len(fds) == 1, "fds at %d, line at %d: %r" % (at, start, fds))
    check(os.pread(fds[0], 100, 0) == b"a,b\n1,2\n", "not the file")
    os.close(fds[0])


CASES = [
        ("help, version and usage errors", case_help_version_usage),
        ("pump of many lines both ways, with a 1 MiB line", case_pump_many_lines),
        ("half-close: replies after stdin EOF still arrive", case_half_close),
        ("daemon closes first: buffered bytes flushed, exit 0", case_daemon_closes_first),
        ("discovery order: --socket, then env, then XDG_RUNTIME_DIR", case_discovery_order),
        ("an explicit socket that fails is the only one tried", case_explicit_socket_only),
        ("system socket last; ENOENT and stale candidates skipped", case_system_socket_last),
        ("fallback execs the daemon with --stdio and --cache-dir", case_fallback_exec),
        ("stale user socket skipped", case_stale_socket_skipped),
        ("--no-fallback with nothing listening: exit 69 and advice", case_no_fallback_nothing_listening),
        ("daemon binary missing: exit 69 and why", case_exec_failure),
        ("permission denied names the group; exit 77 with --no-fallback", case_permission_denied),
        ("closed stdout: exit 74", case_stdout_closed),
        ("files: opened by the shim and passed as fds; other lines untouched", case_files),
]


def main():
    if not SHIM or not os.access(SHIM, os.X_OK):
        print("SKIP: set SHIM to the built mcp-python-sandbox binary")
        return 77

    try:
        ctx = Context()
    except (Failure, OSError, subprocess.SubprocessError) as e:
        print("not ok - setup: %s" % e)
        return 1
    if not ctx.isolated:
        print("# no private mount namespace: the host's %s is what the shim sees" % ctx.system_socket)

    failed = skipped = 0
    try:
        for name, fn in CASES:
            try:
                fn(ctx)
                print("ok - %s" % name)
            except Skip as e:
                skipped += 1
                print("ok - %s # SKIP %s" % (name, e))
            except Failure as e:
                failed += 1
                print("not ok - %s: %s" % (name, e))
            except Exception as e:   # a bug in the test counts as a failure
                failed += 1
                print("not ok - %s: %s: %s" % (name, type(e).__name__, e))
            sys.stdout.flush()
    finally:
        ctx.cleanup()

    print("# %d cases: %d passed, %d failed, %d skipped"
          % (len(CASES), len(CASES) - failed - skipped, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
