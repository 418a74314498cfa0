# SPDX-License-Identifier: MIT
"""Shared harness for the integration tests.

Starts the real daemon (by socket activation, --listen or --stdio) and talks
to it through the real shim, the way an MCP client does: one JSON-RPC message
per line on the shim's stdin/stdout.

A test is a function decorated with @test; it fails by raising. skip(reason)
skips it, except under MCP_SANDBOX_REQUIRE_ALL=1 (CI), where a skip fails.

Over 800 lines, one file: the harness every integration and security test
imports (the daemon, the client, scratch directories, the safety nets and the
checks); one module keeps their imports to one line.
"""

import atexit
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

DAEMON = os.environ.get("DAEMON", "")
SHIM = os.environ.get("SHIM", "")
TOP_SRCDIR = os.environ.get("TOP_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))
REQUIRE_ALL = os.environ.get("MCP_SANDBOX_REQUIRE_ALL") == "1"
MODERN = "2026-07-28"
NOBODY = 65534          # the unprivileged user of tests that need a second one
# Run every test daemon as this user (a name), as the packaged units run it; the tests themselves stay root.
DAEMON_USER = os.environ.get("MCP_TEST_DAEMON_USER") or None
LEGACY = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]


class Skip(Exception):
    pass


def skip(reason):
    raise Skip(reason)


def check(cond, message="check failed"):
    if not cond:
        raise AssertionError(message)


def eq(got, want, what="value"):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


LATEST_LEGACY = "2025-11-25"     # the newest initialize-era version


def line(obj):
    """obj as one line of the wire: compact JSON and a newline."""
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def req(rid, method, params=None):
    """A JSON-RPC request."""
    m = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        m["params"] = params
    return m


def init_lines(version=LATEST_LEGACY, rid="init", name="mcptest"):
    """An initialize request and the initialized notification, as they go on the wire."""
    return line(req(rid, "initialize", {"protocolVersion": version, "capabilities": {},
                                        "clientInfo": {"name": name, "version": "1"}})) + \
        line({"jsonrpc": "2.0", "method": "notifications/initialized"})


def modern_meta(version=MODERN, **extra):
    meta = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "mcptest", "version": "1"},
    }
    meta.update(extra)
    return meta


_AT_EXIT = []


def at_exit(fn):
    """Run fn when the test program ends, the last registered first; a failing fn is ignored (best effort)."""
    _AT_EXIT.append(fn)
    return fn


@atexit.register
def _run_at_exit():
    while _AT_EXIT:
        try:
            _AT_EXIT.pop()()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def _rmtree(top):
    """rm -rf top, also where environments made directories read-only (0555) for a non-root test run."""
    def opened(fn, path, exc):
        # Only below top: never touch what holds it.
        parent = os.path.dirname(path)
        if isinstance(exc[1], FileNotFoundError) or not (parent == top or parent.startswith(top + "/")):
            return
        try:
            os.chmod(parent, 0o755)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, 0o755)
                shutil.rmtree(path, onerror=opened)
            else:
                os.unlink(path)
        except OSError:
            pass
    shutil.rmtree(top, onerror=opened)


def scratch(prefix, parent=None):
    """A new temporary directory, removed at exit. Searchable by others (mode 0711): a root daemon's sandbox
    uids pass through it when a cache directory is made below it."""
    d = tempfile.mkdtemp(prefix=prefix, dir=parent)
    os.chmod(d, 0o711)
    at_exit(lambda: _rmtree(d))
    return d


def executable(path, text):
    """Write a program (a script with its #! line) to path, mode 0755: a wrapper or a stand-in the daemon runs."""
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path


class Client:
    """An MCP client speaking NDJSON to a process's stdin/stdout (normally the shim)."""

    def __init__(self, argv, env=None, stderr_path=None):
        if not stderr_path:
            stderr_path = tempfile.mktemp(prefix="mcptest-client-", suffix=".log")
            at_exit(lambda: os.path.exists(stderr_path) and os.unlink(stderr_path))
        self.stderr_path = stderr_path
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, env=env)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buf = b""
        self.next_id = 1
        self.notifications = []
        self.unclaimed = []

    # --- raw I/O ---------------------------------------------------------
    def send_raw(self, data):
        """Write data. A client that already exited (the shim prints the daemon's refusal and ends) is not an error
        here: what it printed is still there for the next read, which is where a test looks."""
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            try:
                self.proc.stdin.close()     # drops what could not be written; close() later is then a no-op
            except BrokenPipeError:
                pass

    def send(self, obj):
        self.send_raw(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    def read_line(self, timeout=30):
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no message within {timeout}s; stderr: {self.stderr()[-2000:]}")
                if not sel.select(left):
                    continue
                chunk = self.proc.stdout.read(1 << 20)
                if chunk is None:
                    continue
                if chunk == b"":
                    raise EOFError(f"the server closed stdout; stderr: {self.stderr()[-2000:]}")
                self.buf += chunk
        finally:
            sel.close()
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def read_message(self, timeout=30):
        return json.loads(self.read_line(timeout))

    def expect_silence(self, seconds=0.5):
        """Nothing arrives for this long (a notification must get no reply)."""
        try:
            line = self.read_line(seconds)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected message: {line[:300]!r}")

    # --- JSON-RPC --------------------------------------------------------
    def new_id(self):
        i = self.next_id
        self.next_id += 1
        return i

    def wait_for(self, rid, timeout=60):
        for i, m in enumerate(self.unclaimed):
            if m.get("id") == rid:
                return self.unclaimed.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            m = self.read_message(max(0.01, deadline - time.monotonic()))
            if isinstance(m, dict) and "method" in m and "id" not in m:
                self.notifications.append(m)
                continue
            if isinstance(m, dict) and m.get("id") == rid:
                return m
            self.unclaimed.append(m)

    def request(self, method, params=None, rid=None, timeout=60):
        rid = self.new_id() if rid is None else rid
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.wait_for(rid, timeout)

    def result(self, method, params=None, timeout=60):
        r = self.request(method, params, timeout=timeout)
        if "error" in r:
            raise AssertionError(f"{method} failed: {r['error']}")
        return r["result"]

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def initialize(self, version="2025-11-25"):
        r = self.result("initialize", {"protocolVersion": version, "capabilities": {},
                                       "clientInfo": {"name": "mcptest", "version": "1"}})
        self.notify("notifications/initialized")
        return r

    def call_tool(self, name, arguments=None, timeout=120, meta=None):
        params = {"name": name, "arguments": arguments or {}}
        if meta:
            params["_meta"] = meta
        return self.result("tools/call", params, timeout=timeout)

    def text(self, result):
        return "".join(c.get("text", "") for c in result["content"] if c["type"] == "text")

    # --- end -------------------------------------------------------------
    def stderr(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def close(self, timeout=30):
        """Close stdin (as MCP clients do) and wait; returns the exit code."""
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            raise AssertionError(f"client did not exit within {timeout}s after stdin EOF")
        finally:
            self._stderr.close()
        return rc

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self._stderr.close()


class Daemon:
    """The real daemon in a scratch directory.

    mode: "activate" (this harness passes a listening socket with LISTEN_FDS,
    as systemd does), "systemd-socket-activate" (systemd's own tool), or
    "listen" (--listen PATH).
    wrap: a command the daemon's argv is appended to (it must exec it).
    journal_stream: set JOURNAL_STREAM to the daemon's stderr, as systemd does
    when stderr is the journal's stream.
    """

    def __init__(self, mode="activate", args=(), env=None, cache_dir=None, wrap=(), journal_stream=False):
        _DAEMONS.append(self)
        self.extra_env = env
        self.wrap = list(wrap)
        if not DAEMON or not os.path.exists(DAEMON):
            skip("DAEMON is not set to the built daemon")
        self.mode = mode
        self.dir = tempfile.mkdtemp(prefix="mcptest-")
        # A root daemon's sandboxes run as uids of their own: they pass through here to the cache.
        os.chmod(self.dir, 0o711)
        self.uid = os.geteuid()
        if DAEMON_USER:
            import pwd
            pw = pwd.getpwnam(DAEMON_USER)
            self.uid = pw.pw_uid
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            if cache_dir:
                os.chown(cache_dir, pw.pw_uid, pw.pw_gid)
            self.wrap = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups", "--", *self.wrap]
        self.socket = os.path.join(self.dir, "mcp.sock")
        self.cache_dir = cache_dir or os.path.join(self.dir, "cache")
        self.log_path = os.path.join(self.dir, "daemon.log")
        self.notify_path = os.path.join(self.dir, "notify.sock")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        os.chmod(self.notify_path, 0o666)
        self.notify.settimeout(0.05)
        self.notify_messages = []
        # Read sd_notify messages as they come, as systemd does: a datagram queue
        # nobody reads fills up (net.unix.max_dgram_qlen, 10 by default) and then
        # blocks the daemon's sd_notify().
        self._notify_lock = threading.Lock()
        self._notify_stop = threading.Event()
        self._notify_thread = threading.Thread(target=self._read_notify, daemon=True)
        self._notify_thread.start()
        self.env = dict(os.environ, NOTIFY_SOCKET=self.notify_path)
        if env:
            self.env.update(env)
        self.args = [f"--cache-dir={self.cache_dir}", "--log-level=debug", *default_daemon_args(), *args]
        self._log = open(self.log_path, "wb")
        if journal_stream:
            st = os.fstat(self._log.fileno())
            self.env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        self.proc = None
        self.listener = None
        try:
            self.start()
        except BaseException:
            # Do not leave a half-started daemon (or the notify reader) behind.
            if self.proc and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.close()
            raise

    def start(self):
        argv = [*self.wrap, DAEMON, *self.args]
        if self.mode == "activate":
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(self.socket)
            self.listener.listen(128)
            fd = self.listener.fileno()

            def hand_over():
                os.dup2(fd, 3)
                os.set_inheritable(3, True)

            env = dict(self.env, LISTEN_FDS="1", LISTEN_FDNAMES="mcp.sock")
            # LISTEN_PID must be the daemon's own pid: let a shell set it, then exec.
            self.proc = subprocess.Popen(["/bin/sh", "-c", 'LISTEN_PID=$$ exec "$0" "$@"', *argv],
                                         env=env, stdout=subprocess.DEVNULL, stderr=self._log,
                                         pass_fds=(), preexec_fn=hand_over, close_fds=False)
        elif self.mode == "systemd-socket-activate":
            if not shutil.which("systemd-socket-activate"):
                skip("systemd-socket-activate is not installed")
            # It passes on only the variables it is told to.
            passed = [a for k in ("NOTIFY_SOCKET", "PATH", *(self.extra_env or {})) for a in ("-E", k)]
            self.proc = subprocess.Popen(["systemd-socket-activate", "-l", self.socket, *passed, *argv],
                                         env=self.env,
                                         stdout=subprocess.DEVNULL, stderr=self._log)
            # It binds before it listens: the path alone does not mean a client gets in.
            self.wait_for_path(self.socket)
            self.wait_for_listener()
        elif self.mode == "listen":
            self.proc = subprocess.Popen([*argv, f"--listen={self.socket}"], env=self.env,
                                         stdout=subprocess.DEVNULL, stderr=self._log)
            # The path appears at bind(), before listen(): wait until a connection is accepted.
            self.wait_for_path(self.socket)
            self.wait_for_listener()
        else:
            raise ValueError(self.mode)

    def wait_for_listener(self, timeout=10):
        """Until a connection to the socket is accepted by the kernel (it listens)."""
        deadline = time.monotonic() + timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.socket)
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{self.socket} does not accept connections: {self.log()}")
                time.sleep(0.01)
            finally:
                s.close()

    def wait_for_path(self, path, timeout=10):
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}: {self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} did not appear: {self.log()}")
            time.sleep(0.01)

    def _read_notify(self):
        while not self._notify_stop.is_set():
            try:
                m = self.notify.recv(4096).decode(errors="replace")
            except TimeoutError:
                continue
            except OSError:
                return
            with self._notify_lock:
                self.notify_messages.append(m)

    def messages(self):
        """sd_notify messages received so far."""
        with self._notify_lock:
            return list(self.notify_messages)

    def wait_notify(self, text, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in m for m in self.messages()):
                return
            time.sleep(0.01)
        raise AssertionError(f"no sd_notify message with {text!r}: {self.messages()}")

    def client(self, *extra, env=None):
        if not SHIM or not os.path.exists(SHIM):
            skip("SHIM is not set to the built shim")
        e = dict(os.environ)
        e.pop("MCP_PYTHON_SANDBOX_SOCKET", None)
        if env:
            e.update(env)
        return Client([SHIM, f"--socket={self.socket}", "--no-fallback", *extra], env=e)

    def nobody_argv(self):
        """The shim's command line as uid/gid 65534 (groups: nogroup only). Skips unless this is root with setpriv.
        Opens the socket to everyone: only the daemon's own checks stand in the way."""
        if os.getuid() != 0:
            skip("needs root to run a client as another user")
        if not shutil.which("setpriv"):
            skip("setpriv is not installed")
        os.chmod(self.dir, 0o755)
        os.chmod(self.socket, 0o666)
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                SHIM, f"--socket={self.socket}", "--no-fallback"]

    def nobody_client(self):
        """An initialized client as uid 65534 (see nobody_argv)."""
        c = Client(self.nobody_argv())
        at_exit(lambda: c.proc.poll() is None and c.kill())
        c.initialize()
        return c

    def raw_connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.socket)
        return s

    def log(self):
        return self.log_full()[-4000:]

    def log_full(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return getattr(self, "_closed_log", "")

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"daemon did not stop within {timeout}s: {self.log()}")
        return self.proc.returncode if self.proc else None

    def close(self):
        try:
            self.stop()
        finally:
            if self.listener:
                self.listener.close()
            self._notify_stop.set()
            self._notify_thread.join()
            self.notify.close()
            self._log.close()
            self._closed_log = self.log_full()[-20000:]   # for a failed test's report
            _rmtree(self.dir)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def stdio_client(args=(), env=None, cache_dir=None):
    """The shim with no daemon running: it falls back to `mcp-python-sandboxd --stdio`.

    The shim starts the daemon with its own arguments only; to give it the
    test Pythons, MCP_PYTHON_SANDBOXD points at a wrapper that adds them.
    """
    if not SHIM or not DAEMON:
        skip("SHIM and DAEMON must point to the built programs")
    d = scratch("mcptest-stdio-")
    e = dict(os.environ)
    wrapper = os.path.join(d, "mcp-python-sandboxd")
    extra = " ".join("'" + a.replace("'", "'\\''") + "'" for a in default_daemon_args())
    executable(wrapper, f"#!/bin/sh\nexec '{DAEMON}' \"$@\" {extra}\n")
    e.update({
        "MCP_PYTHON_SANDBOXD": wrapper,
        # No user socket in a fresh XDG_RUNTIME_DIR; the system socket is the configured runstatedir's.
        "XDG_RUNTIME_DIR": d,
        "XDG_CACHE_HOME": cache_dir or os.path.join(d, "cache"),
    })
    e.pop("MCP_PYTHON_SANDBOX_SOCKET", None)   # one named explicitly is the only one tried, never a fallback
    if env:
        e.update(env)
    return Client([SHIM, *args], env=e)


def reachable_by_others(path):
    """Whether a user who is neither owner nor group (a root daemon's sandbox uids) can reach path."""
    path = os.path.realpath(path)
    parts = path.split("/")
    for i in range(2, len(parts)):
        if not os.stat("/".join(parts[:i])).st_mode & 0o001:
            return False
    return bool(os.stat(path).st_mode & 0o004)


def test_pythons():
    """{"3.12": "/path/to/bin", ...}: the CPythons this machine offers for tests (pyenv's).

    A root daemon runs its sandboxes as uids of their own, which cannot reach a pyenv below a 0700 /root:
    scripts/test.sh makes /root searchable (chmod o+x), for root's test runs; elsewhere those are left out."""
    found = {}
    roots = [os.path.expanduser("~/.pyenv/versions"), "/root/.pyenv/versions"]
    for root in roots:
        try:
            names = sorted(os.listdir(root))
        except OSError:
            continue
        for name in names:
            parts = name.split(".")
            if len(parts) != 3 or not all(p.isdigit() for p in parts):
                continue
            minor = ".".join(parts[:2])
            bindir = os.path.join(root, name, "bin")
            exe = os.path.join(bindir, "python" + minor)
            if (3, 11) <= (int(parts[0]), int(parts[1])) and os.access(exe, os.X_OK):
                if os.geteuid() == 0 and not reachable_by_others(exe):
                    continue
                found[minor] = bindir
    return found


def newest_python():
    """The newest test Python's version ("3.13"); skips when there is none."""
    have = test_pythons()
    if not have:
        skip("no Python >= 3.11 for tests (pyenv's)")
    return max(have, key=lambda v: tuple(map(int, v.split("."))))


def initialized(c):
    """c, initialized, killed at exit if it still runs."""
    c.initialize()
    at_exit(lambda: c.proc.poll() is None and c.kill())
    return c


def sandbox_daemon(args=()):
    """A daemon (offline, small tmpfs, persistent sandboxes offered, args) and an initialized client of it, both
    closed at exit; skips when the sandbox does not work on this machine."""
    need_uv()
    newest_python()
    d = Daemon(args=["--offline", "--tmpfs-size=32M", "--persistent-sandboxes", *args])
    at_exit(d.close)
    c = initialized(d.client())
    st = c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}
    if not st.get("sandbox", {}).get("working"):
        skip(f"the sandbox does not work on this machine: {st.get('sandbox', {}).get('error', 'self-test failed')}")
    return d, c


def need_pythons(*minors):
    have = test_pythons()
    missing = [m for m in minors if m not in have]
    if missing:
        skip(f"Python {', '.join(missing)} not installed (pyenv)")
    return have


def uv_path():
    return shutil.which("uv")


def need_uv():
    p = uv_path()
    if not p:
        skip("uv is not installed")
    return p


_PYPI = {}


def need_pypi():
    """Skips when pypi.org cannot be reached (asked once per test program)."""
    if "error" not in _PYPI:
        try:
            socket.create_connection(("pypi.org", 443), timeout=5).close()
            _PYPI["error"] = None
        except OSError as e:
            _PYPI["error"] = str(e)
    if _PYPI["error"]:
        skip(f"pypi.org is not reachable: {_PYPI['error']}")


class UvLog:
    """A uv for the daemon that logs each run's arguments, then execs the real uv.

    delay: seconds to sleep before running (to catch the daemon mid-build);
    delay_on: only before runs whose first two arguments are these (e.g. "pip install");
    venv_files: after `uv venv`, that many more empty files in the new environment's share/ (the daemon keeps
    what `uv venv` made as the template every later build copies: the copy then takes long enough to be seen).
    """

    def __init__(self, delay=0, delay_on=None, venv_files=0):
        real = need_uv()
        d = tempfile.mkdtemp(prefix="mcptest-uvwrap-")
        self.dir = d
        self.path = os.path.join(d, "uv")
        self.log = os.path.join(d, "uv.log")
        open(self.log, "w").close()
        with open(self.path, "w") as f:
            # Each run's arguments; and UV_COMPILE_BYTECODE, if the daemon set it.
            f.write(f"#!/bin/sh\nprintf '%s%s\\n' \"$*\" \"${{UV_COMPILE_BYTECODE:+ [UV_COMPILE_BYTECODE]}}\" >> '{self.log}'\n")
            if delay and delay_on:
                f.write(f'case "$1 $2" in "{delay_on}") sleep {delay};; esac\n')
            elif delay:
                f.write(f"sleep {delay}\n")
            if venv_files:
                # the environment is the last argument of `uv venv`
                f.write(f'if [ "$1" = venv ]; then\n'
                        f"  '{real}' \"$@\" || exit\n"
                        f'  for last; do :; done\n'
                        f'  mkdir -p "$last/share/mcpt-pad" && cd "$last/share/mcpt-pad" || exit\n'
                        f'  i=0; while [ $i -lt {int(venv_files)} ]; do : > f$i; i=$((i+1)); done\n'
                        f'  exit 0\n'
                        f'fi\n')
            f.write(f"exec '{real}' \"$@\"\n")
        os.chmod(self.path, 0o755)

    def lines(self):
        with open(self.log) as f:
            return f.read().splitlines()

    def installs(self, since=0):
        return [line for line in self.lines()[since:] if line.startswith("pip install")]

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def default_daemon_args():
    """Arguments every test daemon gets: where the test Pythons and uv are on this machine."""
    # The pool of pre-started sandboxes (on by default) keeps processes around
    # between runs; tests that count a daemon's children or uv runs expect none.
    # test-pool.py turns it on again.
    args = ["--prestart=0"]
    pythons = test_pythons()
    if pythons:
        args.append("--python-search-path=" + " ".join(pythons[m] for m in sorted(pythons)))
    if uv_path():
        args.append("--uv=" + uv_path())
    extra = os.environ.get("MCP_TEST_DAEMON_ARGS", "")
    return args + [a for a in extra.split("\x1f") if a]


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class RssGrowth:
    """with RssGrowth(pid) as g: ... -- then g.grew: the most pid's RSS rose above its start while the block ran
    (sampled every few ms)."""

    def __init__(self, pid, every=0.004):
        self.pid, self.every = pid, every
        self.before = self.peak = rss_kib(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_kib(self.pid))
            except OSError:
                return
            time.sleep(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def grew(self):
        return self.peak - self.before


def wait_until(pred, timeout=10, what="condition"):
    """pred()'s first true value, polled until timeout seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def cgroup_mounts():
    """{controller: mount point} of the cgroup v1 hierarchies, and "": the cgroup v2 one, from /proc/self/mountinfo."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            fields, rest = head.split(), tail.split()
            if len(fields) < 5 or len(rest) < 3:
                continue
            point = fields[4].replace("\\040", " ")
            if rest[0] == "cgroup2":
                found.setdefault("", point)
            elif rest[0] == "cgroup":
                for word in rest[2].split(","):
                    found.setdefault(word, point)
    return found


def own_cgroups(pid="self"):
    """{controller: path} of a process's cgroups, from /proc/PID/cgroup: each v1 controller, and "": the v2 one."""
    found = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                found[c] = path
    return found


_NET = {}


def pids_safety_net(max_pids=3000):
    """Put this test program, and so every daemon it starts from now on, into a pids cgroup of its own with
    pids.max at max_pids: a fork bomb that gets past its run's limit stops there, not at the machine's. Call it
    before anything that can exhaust processes. Its directory, or None when this host has no place for one (not
    root, no pids controller in cgroup v1, and cgroup v2 offers none at its root)."""
    if "dir" in _NET:
        return _NET["dir"]
    _NET["dir"] = None
    if os.geteuid() != 0:
        return None
    mounts, ours = cgroup_mounts(), own_cgroups()
    if "pids" in mounts and "pids" in ours:
        home = mounts["pids"] + ours["pids"].rstrip("/")
    elif "" in mounts:
        # cgroup v2: below the root cgroup, the one that may have processes beside its children.
        home = mounts[""]
        try:
            with open(os.path.join(home, "cgroup.subtree_control")) as f:
                if "pids" not in f.read().split():
                    return None
        except OSError:
            return None
    else:
        return None
    net = os.path.join(home, f"mcptest-net-{os.getpid()}")
    try:
        os.mkdir(net)
        with open(os.path.join(net, "pids.max"), "w") as f:
            f.write(str(max_pids))
        with open(os.path.join(net, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    except OSError:
        try:
            os.rmdir(net)
        except OSError:
            pass
        return None

    def remove():
        # Out again, then the net goes once whatever ran inside it has (the daemons are stopped by then).
        with open(os.path.join(home, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        deadline = time.monotonic() + 10
        while True:
            try:
                # What a daemon that did not stop cleanly left in it (cgroups: empty ones go with rmdir).
                for d, _, _ in sorted(os.walk(net), key=lambda w: -w[0].count("/")):
                    os.rmdir(d)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    at_exit(remove)
    _NET["dir"] = net
    return net


def processes_with(marker):
    """pids whose command line holds marker (zombies have none, so they do not count)."""
    found = []
    m = marker.encode()
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if m in f.read():
                    found.append(int(p))
        except OSError:
            pass
    return found


def sanitized(pid):
    """Whether the process runs with AddressSanitizer: its quarantine keeps freed
    memory, so RSS says nothing about leaks there (LeakSanitizer does that)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "libasan" in f.read()
    except OSError:
        return False


def proc_stat(pid):
    """(comm, fields) from /proc/PID/stat, fields being what follows the command name: fields[0] is the state,
    fields[1] the parent's pid, fields[11] and fields[12] utime and stime. None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return None
    return st[st.index("(") + 1:st.rindex(")")], st[st.rindex(")") + 2:].split()


def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def proc_table():
    """{pid: (ppid, comm)} of every process."""
    t = {}
    for p in all_pids():
        st = proc_stat(p)
        if st:
            t[p] = (int(st[1][1]), st[0])
    return t


def descendants(root, table):
    """The descendants of root in a proc_table()."""
    kids = {}
    for p, (pp, _) in table.items():
        kids.setdefault(pp, []).append(p)
    out, todo = [], [root]
    while todo:
        for k in kids.get(todo.pop(), ()):
            out.append(k)
            todo.append(k)
    return out


def children(pid):
    """All descendants of pid, as they are now."""
    return descendants(pid, proc_table())


def running(pid):
    """Whether pid is a process that runs (not gone, not a zombie nobody reaped yet)."""
    st = proc_stat(pid)
    return st is not None and st[1][0] != "Z"


def cpu_ticks_of(pid):
    """utime + stime of pid, in clock ticks; None when it is gone."""
    st = proc_stat(pid)
    return int(st[1][11]) + int(st[1][12]) if st else None


def cpu_ticks(pids):
    """utime + stime summed over pids, in clock ticks; a process gone meanwhile counts nothing."""
    return sum(cpu_ticks_of(p) or 0 for p in pids)


def cpu_share(pids, seconds):
    """The CPU pids use over the next `seconds`, as a share of one CPU."""
    hz = os.sysconf("SC_CLK_TCK")
    t0, c0 = time.monotonic(), cpu_ticks(pids)
    time.sleep(seconds)
    return (cpu_ticks(pids) - c0) / hz / (time.monotonic() - t0)


# A cell for a persistent sandbox that leaves a busy loop running in a new session and answers 'started'.
BACKGROUND = r"""
import os
if os.fork() == 0:
    os.setsid()
    while True:
        pass
"started"
"""


# What an execute_python result leaves out, at its usual value (a lean result: the model reads every field).
RUN_DEFAULTS = {"exit_code": None, "signal": None, "timed_out": False, "stderr": "", "timeout_clamped": False,
                "limit": None, "failed_phase": None, "prestarted": False, "sandboxed": True, "warnings": [],
                "figures": [], "files": [], "outputs_unlisted": 0}


def with_defaults(st):
    """An execute_python structuredContent with the fields it left out at their usual values (RUN_DEFAULTS)."""
    if not st:
        return st
    full = dict(RUN_DEFAULTS, **st)
    if "environment" in st:
        full["environment"] = dict({"requirements": []}, **st["environment"])
    return full


_TESTS = []
_DAEMONS = []   # every Daemon made, in order: a failed test shows the logs of those it made


def _print_daemon_logs(since, lines=40):
    """The last lines of the log of each daemon made from index since on, for a failed test's report."""
    for i, d in enumerate(_DAEMONS[since:]):
        text = d.log_full()
        if not text:
            continue
        print(f"# daemon {i + 1} of the test ({d.dir}), the last {lines} lines of its log:", flush=True)
        for line in text.splitlines()[-lines:]:
            print(f"#   {line}", flush=True)


def test(fn):
    _TESTS.append(fn)
    return fn


def main():
    only = set(sys.argv[1:]) or set(filter(None, os.environ.get("MCP_TEST_ONLY", "").split(",")))
    passed = failed = skipped = 0
    for fn in _TESTS:
        name = fn.__name__
        if only and name not in only:
            continue
        t0 = time.monotonic()
        made = len(_DAEMONS)
        try:
            fn()
        except Skip as e:
            if REQUIRE_ALL:
                failed += 1
                print(f"not ok - {name}: skipped, but MCP_SANDBOX_REQUIRE_ALL=1 forbids skips: {e}", flush=True)
            else:
                skipped += 1
                print(f"ok - {name} # SKIP {e}", flush=True)
            continue
        except Exception as e:  # noqa: BLE001 - report every failure, go on
            failed += 1
            print(f"not ok - {name}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc(file=sys.stdout)
            _print_daemon_logs(made)
            continue
        passed += 1
        print(f"ok - {name} ({time.monotonic() - t0:.2f}s)", flush=True)
    print(f"{passed} passed, {failed} failed, {skipped} skipped", flush=True)
    if failed:
        sys.exit(1)
    if passed == 0 and skipped:
        sys.exit(77)
    sys.exit(0)
