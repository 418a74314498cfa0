#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Benchmark: mcp-python-sandboxd against the reference server, side by side.

    make bench                      # full run (a few minutes)
    BENCH_QUICK=1 make bench        # smoke run (small counts)

Both servers are driven by the same stdlib MCP client (bench/mcpclient.py)
over stdio: ours through the shim `mcp-python-sandbox` connected to a running
daemon (and, for comparison, straight on the socket), the reference
(mcp-python-exec-sandbox from PyPI, installed into a throwaway venv under the
work dir) as its own stdio process. Timings are printed and written to
bench/results/latest.json, bench/results/latest.svg and bench/RESULTS.md.
Nothing here fails on a timing: a benchmark reports, it does not judge.

Over 800 lines, one file: every measurement runs both servers through the
same client, work dir and result record, and the report (JSON, SVG,
RESULTS.md) is written from all of them at the end; split, the modules would
share that state through an interface of its own.

Environment knobs:
  BENCH_QUICK=1              small counts, short throughput windows
  BENCH_N=300                warm hello-world calls per server, back to back
  BENCH_N_PACED=120          warm hello-world calls per server, 100 ms apart
  BENCH_N_DEPS=30            warm calls with dependencies
  BENCH_N_HEAVY=10           warm numpy/pandas/matplotlib calls (warm imports), each
  BENCH_HEAVY_GAP=2          seconds between those calls (an agent reads each result)
  BENCH_COLD_REPS=5          cold starts per mode
  BENCH_TP_SECONDS=10        length of each throughput window
  BENCH_SKIP_REFERENCE=1     measure ours only
  BENCH_REF_PYTHON=PATH      Python >= 3.13 that runs the reference server
  BENCH_REF_PYTHON_VERSION   --python-version given to the reference (default:
                             the version our daemon runs scripts with)
  BENCH_NO_COLD_DEPS=1       skip the first-run-with-new-dependencies tests
                             (they download from PyPI)
  BENCH_FIRST_REPS=7         repetitions of every first-run row (both servers,
                             interleaved, new empty caches each; medians)
  BENCH_N_PRINT=7            print-heavy loop runs per server, interleaved
  BENCH_CORPUS_REPS=3        repetitions of the real-world scripts (bench/corpus/),
                             each on new environments (medians)
  BENCH_CORPUS=a.py,b.py     only these scripts of the corpus
  BENCH_NO_CORPUS=1          skip the corpus (it downloads from PyPI on first use;
                             BENCH_NO_COLD_DEPS=1 skips it too)
  BENCH_CLEANUP_ENVS=300,480 store entries a cleanup removes while a client pings
  BENCH_ONLY=first_runs,print_loop,corpus,cleanup
                             measure only these parts; the other rows are kept
                             from results/latest.json
"""

import argparse
import glob
import hashlib
import json
import os
import platform
import re
import select
import shutil
import signal
import statistics
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcpclient import Client, MCPError, result_ok, result_text  # noqa: E402

REFERENCE_PACKAGE = "mcp-python-exec-sandbox"
REFERENCE_VERSION = "0.1.8"
HELLO = "print('hello')"
SIX = "import six; print(six.__version__)"
NUMPY = "import numpy; print(numpy.__version__)"
HUMANIZE = "import humanize; print(humanize.naturalsize(1000000))"
# Warm heavy imports: scripts as an agent writes them, imports first (what a waiting sandbox can import ahead). The
# plot is closed after savefig: ours would otherwise also render the open figure for the client (which the
# reference does not), and the result would carry no structuredContent to count warm imports with.
HEAVY = (
    ("numpy", "import numpy as np\nprint(np.arange(10).sum())\n", ["numpy"], "45"),
    ("pandas", "import pandas as pd\nprint(pd.DataFrame({'a': [1, 2, 3]})['a'].sum())\n", ["pandas"], "6"),
    ("matplotlib", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\n"
                   "plt.savefig('/tmp/plot.png')\nplt.close('all')\nprint('saved')\n", ["matplotlib"], "saved"),
)
PRINT_LOOP = "for i in range(1000000):\n    print('x')\nprint('done')"
# Real-world scripts (bench/corpus/, PEP 723 scripts written for the benchmark as people publish them): the file and a
# line it prints when it worked. The quick run takes the first three.
CORPUS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
CORPUS = (
    ("disk_report.py", "disk report: 10 directories"),
    ("validate_orders.py", "orders checked: 58 valid"),
    ("release_notes.py", "release notes: 6 releases"),
    ("sales_report.py", "sales report: 12 months, 4 regions"),
    ("curve_fit.py", "fit converged: True"),
    ("classifier.py", "best model: random forest"),
    ("polars_lazy.py", "log summary: 7 endpoints"),
    ("temperature_chart.py", "chart saved: PNG with 3 cities"),
    ("tune.py", "study finished: 40 trials"),
    ("symbolic.py", "symbolic checks done"),
)
# The corpus's goals: the median over the scripts of reference ÷ ours.
CORPUS_GOALS = (("first", "first run (new environment, wheels cached)", 1.5),
                ("again", "the same call again at once", 5.0),
                ("compiled", "after our bytecode compile", 10.0))
# Ping during a store cleanup: one real environment, copied to this many entries unused for long.
CLEANUP_DEPS = ["rich"]
CLEANUP_SCRIPT = "import rich; print('cleanup env ready')"
CLEANUP_PING_MS = 2.0

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")


def knob(name, full, quick):
    v = os.environ.get(name)
    return type(full)(v) if v else (quick if QUICK else full)


N_HELLO = knob("BENCH_N", 300, 30)
N_PACED = knob("BENCH_N_PACED", 120, 15)
PACE_GAP_MS = 100
N_DEPS = knob("BENCH_N_DEPS", 30, 5)
N_HEAVY = knob("BENCH_N_HEAVY", 10, 3)
HEAVY_GAP_S = knob("BENCH_HEAVY_GAP", 2.0, 2.0)
COLD_REPS = knob("BENCH_COLD_REPS", 5, 2)
TP_SECONDS = knob("BENCH_TP_SECONDS", 10.0, 3.0)
N_FIRST = knob("BENCH_FIRST_REPS", 7, 2)          # each first-run row, both servers, interleaved
N_PRINT = knob("BENCH_N_PRINT", 7, 2)             # print-heavy loop runs per server, interleaved
CORPUS_REPS = knob("BENCH_CORPUS_REPS", 3, 1)     # corpus repetitions, each on new environments
CLEANUP_ENVS = [int(x) for x in knob("BENCH_CLEANUP_ENVS", "300,480", "100").split(",") if x.strip()]
# Only these parts (comma-separated: first_runs, print_loop), the other rows kept from results/latest.json.
ONLY = set(filter(None, os.environ.get("BENCH_ONLY", "").split(",")))
WARMUP = 3 if QUICK else 10
N_IDLE_CONNECTIONS = 50
CLIENTS = (1, 4, 16)

started = []            # every process this script started (Popen or pid), ended by pid at exit
notes = []              # things worth saying in the output


def note(msg):
    notes.append(msg)
    print("  note: " + msg, flush=True)


def log(msg):
    print(msg, flush=True)


# ---- small helpers ---------------------------------------------------------

def pct(values, p):
    """Percentile by linear interpolation (numpy's default)."""
    v = sorted(values)
    if not v:
        return None
    k = (len(v) - 1) * p / 100.0
    f = int(k)
    c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)


def summary(values_s):
    """Seconds in, a dict of milliseconds out."""
    ms = [x * 1000.0 for x in values_s]
    if not ms:
        return None
    return {"n": len(ms), "p50": pct(ms, 50), "p95": pct(ms, 95), "p99": pct(ms, 99),
            "min": min(ms), "max": max(ms), "mean": sum(ms) / len(ms)}


def rss_kb(pid, field="VmRSS"):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def pss_kb(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rollup_kb(pid):
    """{"Rss", "Pss", "Shared_Clean", "Anonymous", ...} of /proc/PID/smaps_rollup, in KiB."""
    out = {}
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if v.strip().endswith("kB"):
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree_rss_kb(roots):
    kids = children_map()
    total, todo, seen = 0, list(roots), set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += rss_kb(p) or 0
        todo.extend(kids.get(p, []))
    return total


def cpu_ticks(pid):
    """utime + stime of a process itself (its children's time does not reliably
    come back through bwrap's pid namespace, so it is left out)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
        v = st[st.rindex(")") + 2:].split()
        return sum(int(x) for x in v[11:13])
    except (OSError, ValueError):
        return 0


def machine_busy():
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def run_text(argv, env=None):
    try:
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                              text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return "unavailable (%s)" % e


def read_first(path, pattern=None):
    try:
        with open(path) as f:
            for line in f:
                if pattern is None or line.startswith(pattern):
                    return line.split(":", 1)[1].strip() if pattern else line.strip()
    except OSError:
        pass
    return None


def wait_socket(path, proc=None, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("the daemon exited (status %s)" % proc.returncode)
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.close()
            return
        except OSError:
            time.sleep(0.01)
    raise RuntimeError("no socket at %s after %.0f s" % (path, timeout))


def stop(proc, sig=signal.SIGTERM, wait=10.0):
    """End one process we started, by its pid."""
    if proc is None:
        return
    if isinstance(proc, int):
        try:
            os.kill(proc, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                if os.waitpid(proc, os.WNOHANG)[0] == proc:
                    return
            except ChildProcessError:
                return
            time.sleep(0.01)
        try:
            os.kill(proc, signal.SIGKILL)
            os.waitpid(proc, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        return
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- our daemon ------------------------------------------------------------

class Ours:
    def __init__(self, args, work):
        self.daemon = args.daemon
        self.shim = args.shim
        self.uv = args.uv
        self.work = work
        self.conf = os.path.join(work, "empty.conf")
        open(self.conf, "w").close()
        self.logs = os.path.join(work, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.proc = None
        self.sock = None
        self.cache = None

    def daemon_args(self, cache, extra=()):
        return [self.daemon, "--config=" + self.conf, "--cache-dir=" + cache, "--uv=" + self.uv,
                "--log-level=info"] + list(extra)

    def start(self, cache, name, extra=()):
        """A daemon of our own with --listen; returns (Popen, socket path)."""
        sock = os.path.join(self.work, name + ".sock")
        if os.path.exists(sock):
            os.unlink(sock)
        err = open(os.path.join(self.logs, name + ".log"), "w")
        proc = subprocess.Popen(self.daemon_args(cache, extra) + ["--listen=" + sock],
                                stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        started.append(proc)
        wait_socket(sock, proc)
        return proc, sock

    def shim_env(self):
        env = dict(os.environ)
        env.pop("MCP_PYTHON_SANDBOX_SOCKET", None)
        env["MCP_PYTHON_SANDBOXD"] = self.daemon
        rt = os.path.join(self.work, "xdg-runtime")
        os.makedirs(rt, exist_ok=True)
        env["XDG_RUNTIME_DIR"] = rt
        env["XDG_CACHE_HOME"] = os.path.join(self.work, "xdg-cache")
        return env

    def client_shim(self, sock):
        c = Client.spawn([self.shim, "--socket=" + sock, "--no-fallback", "-q"], env=self.shim_env())
        started.append(c.proc)
        return c


def activation_cold_start(ours, cache, tag):
    """systemd-style socket activation: connect + initialize to a socket nobody
    serves yet; on the first connection start the daemon with LISTEN_FDS."""
    path = os.path.join(ours.work, "activate-%s.sock" % tag)
    if os.path.exists(path):
        os.unlink(path)
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(path)
    lsock.listen(128)
    lfd = lsock.fileno()
    log_fd = os.open(os.path.join(ours.logs, "activate-%s.log" % tag), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    argv = ours.daemon_args(cache)
    env = dict(os.environ)

    t0 = time.monotonic()
    c = Client.connect(path)
    rid = c.start_request("initialize", Client.INITIALIZE_PARAMS)
    # The "service manager": the listening socket turns readable, start the service.
    import select
    select.select([lfd], [], [], 10)
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(lfd, 3)
            os.set_inheritable(3, True)
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.closerange(4, 4096)
            env["LISTEN_FDS"] = "1"
            env["LISTEN_PID"] = str(os.getpid())
            env["LISTEN_FDNAMES"] = "mcp-python-sandboxd.socket"
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    started.append(pid)
    try:
        c.wait_reply(rid, "initialize", timeout=60)
        t1 = time.monotonic()
    finally:
        c.close()
        lsock.close()
        os.close(log_fd)
    return t1 - t0, pid


# ---- the reference server --------------------------------------------------

class Reference:
    def __init__(self, work, uv):
        self.work = work
        self.uv = uv
        self.venv = os.path.join(work, "venv")
        self.bin = os.path.join(self.venv, "bin", "mcp-python-exec-sandbox")
        self.home = os.path.join(work, "home")
        self.python_version = None
        self.error = None
        self.server_python = None

    def uv_env(self):
        env = dict(os.environ)
        env["UV_SYSTEM_CERTS"] = "1"
        env["UV_PYTHON_DOWNLOADS"] = "never"
        return env

    def find_python(self):
        cand = [os.environ.get("BENCH_REF_PYTHON")]
        cand += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[3-9]*/bin/python3.1[3-9]")), reverse=True)
        cand += sorted(glob.glob("/root/.pyenv/versions/3.1[3-9]*/bin/python3.1[3-9]"), reverse=True)
        cand += [shutil.which("python3.14"), shutil.which("python3.13")]
        for c in cand:
            if c and os.access(c, os.X_OK):
                return c
        return None

    def install(self):
        if os.access(self.bin, os.X_OK):
            return True
        py = self.find_python()
        if not py:
            self.error = ("no Python >= 3.13 found (the reference needs one; set BENCH_REF_PYTHON)")
            return False
        shutil.rmtree(self.venv, ignore_errors=True)
        log("  installing %s==%s into %s (Python %s)" % (REFERENCE_PACKAGE, REFERENCE_VERSION, self.venv, py))
        for argv in ([self.uv, "venv", "-q", "--python", py, self.venv],
                     [self.uv, "pip", "install", "-q", "--python", os.path.join(self.venv, "bin", "python"),
                      "%s==%s" % (REFERENCE_PACKAGE, REFERENCE_VERSION)]):
            p = subprocess.run(argv, env=self.uv_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                self.error = "installing the reference failed: %s: %s" % (" ".join(argv), p.stdout.strip()[-800:])
                return False
        return True

    def env(self, home=None):
        home = home or self.home
        # Its bwrap wrapper binds ~/.cache/uv and fails when that does not exist.
        os.makedirs(os.path.join(home, ".cache", "uv"), exist_ok=True)
        return {"PATH": "%s:/usr/local/bin:/usr/bin:/bin" % os.path.dirname(self.uv), "HOME": home,
                "LANG": "C.UTF-8", "UV_SYSTEM_CERTS": "1"}

    def argv(self, python_version=None):
        return [self.bin, "--sandbox-backend", "native", "--python-version", python_version or self.python_version,
                "--uv-path", self.uv, "--no-warm-cache"]

    def client(self, home=None, python_version=None, stderr_name="reference"):
        err = open(os.path.join(self.work, stderr_name + ".log"), "a")
        c = Client.spawn(self.argv(python_version), env=self.env(home), stderr=err)
        started.append(c.proc)
        return c

    @staticmethod
    def deps_script(body, offline=False):
        # Its runs get a clean environment without UV_SYSTEM_CERTS, and this
        # machine's TLS-inspecting proxy needs the system CA store: the
        # reference passes [tool.uv] from script metadata through to uv.
        return ("# /// script\n# [tool.uv]\n# system-certs = true\n%s# ///\n" % ("# offline = true\n" if offline else "")
                + body)


# ---- measurements ----------------------------------------------------------

def warm_latency(client, script, n, deps=None, warmup=WARMUP, expect=None, store=None):
    """Per-call round-trip times (s) of n execute_python calls after warm-up.

    store: our cache directory; the measurement then waits until the daemon has compiled the environment's
    bytecode, which it does on the side after the environment is built (a warm environment is a compiled one)."""
    failures, last = 0, None
    for _ in range(warmup):
        last = client.execute_python(script, deps)
    if not result_ok(last, expect):
        raise MCPError("warm-up call failed: %s" % result_text(last)[:600])
    wait_env_compiled(store, last, 60)
    times, server = [], []
    for _ in range(n):
        t0 = time.monotonic()
        r = client.execute_python(script, deps)
        times.append(time.monotonic() - t0)
        if not result_ok(r, expect):
            failures += 1
        sc = r.get("structuredContent") if isinstance(r, dict) else None
        if isinstance(sc, dict):
            server.append((sc.get("prepare_ms"), sc.get("run_ms"), sc.get("duration_ms")))
    s = summary(times)
    s["failures"] = failures
    if server:
        s["server_prepare_ms_mean"] = sum(x[0] or 0 for x in server) / len(server)
        s["server_run_ms_mean"] = sum(x[1] or 0 for x in server) / len(server)
        s["server_duration_ms_mean"] = sum(x[2] or 0 for x in server) / len(server)
    return s


def wait_env_compiled(store, result, timeout):
    """Our environment of result (store: our cache directory; None: the reference's, nothing to wait for) has its
    bytecode compiled, or timeout seconds passed. True if there was an environment to wait for."""
    key = ((result.get("structuredContent") or {}).get("environment") or {}).get("key") if store else None
    if not key:
        return False
    marker = os.path.join(store, "envs", key, ".mcp-python-sandbox-compiled")
    deadline = time.monotonic() + timeout
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return True


def heavy_latency(client, script, deps, n, gap, expect, store=None):
    """Warm runs of a script with heavy imports, gap seconds apart (an agent reads each result before its next
    call): the run after the first teaches our daemon what to import ahead. Also counts our runs that found their
    modules imported ("warm_imports" in the result)."""
    last = None
    for _ in range(2):
        last = client.execute_python(script, deps)
    if not result_ok(last, expect):
        raise MCPError("warm-up call failed: %s" % result_text(last)[:600])
    if wait_env_compiled(store, last, 120):
        client.execute_python(script, deps)   # the compiled environment's first run teaches the next sandbox
    times, warm, failures = [], 0, 0
    for _ in range(n):
        time.sleep(gap)
        t0 = time.monotonic()
        r = client.execute_python(script, deps)
        times.append(time.monotonic() - t0)
        if not result_ok(r, expect):
            failures += 1
        if "warm_imports" in ((r.get("structuredContent") or {}) if isinstance(r, dict) else {}):
            warm += 1
    s = summary(times)
    s["failures"] = failures
    s["warm_imports"] = warm
    return s


def paced_latency(contenders, n, gap):
    """Latency with a pause between calls, as an agent that reads each result
    before its next call: our pre-started sandbox has time to be replaced."""
    times = {name: [] for name, _ in contenders}
    for i in range(n):
        for name, call in contenders:
            time.sleep(gap)
            t0 = time.monotonic()
            call()
            times[name].append(time.monotonic() - t0)
    return {name: summary(v) for name, v in times.items()}


def interleaved_latency(contenders, n, chunk=10, warmup=WARMUP):
    """Latency of several contenders (name, call() -> ok), measured in
    alternating chunks so that other load on the machine hits them alike."""
    times = {name: [] for name, _ in contenders}
    fails = {name: 0 for name, _ in contenders}
    dead = set()
    for name, call in contenders:
        ok = False
        for _ in range(warmup):
            ok = call()
        if not ok:
            note("%s: the warm-up call failed; not measured" % name)
            dead.add(name)
    done = 0
    while done < n:
        k = min(chunk, n - done)
        for name, call in contenders:
            if name in dead:
                continue
            for _ in range(k):
                t0 = time.monotonic()
                ok = call()
                times[name].append(time.monotonic() - t0)
                if not ok:
                    fails[name] += 1
        done += k
    out = {}
    for name, _ in contenders:
        s = summary(times[name])
        if s:
            s["failures"] = fails[name]
        out[name] = s
    return out


def compact_len(obj):
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))


def model_cost(client):
    """What a conversation pays for a server, in characters of JSON as the client receives them: the tools/list
    result (every conversation), and a hello world's result (every call), its structuredContent apart."""
    tl = client.request("tools/list")
    r = client.execute_python(HELLO)
    st = r.get("structuredContent")
    return {"tools": len(tl.get("tools", [])), "tools_list_chars": compact_len(tl),
            "hello_result_chars": compact_len(r), "hello_structured_chars": compact_len(st) if st is not None else 0,
            "hello_structured": st}


def model_cost_rows(MC):
    """Markdown table rows: ours next to the reference's."""
    ours, ref = MC.get("ours") or {}, MC.get("reference") or {}
    L = ["| | ours | reference |", "|---|---:|---:|"]
    for key, label in (("tools", "tools offered"), ("tools_list_chars", "tools/list result, characters"),
                       ("hello_result_chars", "hello world result, characters"),
                       ("hello_structured_chars", "of which structuredContent")):
        L.append("| %s | %s | %s |" % (label, ours.get(key, "–"), ref.get(key, "–")))
    return L


def mcp_call(c, script, expect):
    def call():
        r = c.execute_python(script)
        if not result_ok(r, expect):
            call.last_error = result_text(r)[:400]
            return False
        return True
    return call


def ref_python_version(ref, our_pyver):
    """Which --python-version can the reference use here? Its runs see only /usr, /bin,
    /lib, /sbin, ~/.cache/uv and the script dir, so a Python outside /usr is invisible."""
    want = os.environ.get("BENCH_REF_PYTHON_VERSION")
    if want:
        return want
    want = ".".join(our_pyver.split(".")[:2])
    if QUICK:
        return want
    c = ref.client(stderr_name="probe-3.13", python_version="3.13")
    c.initialize()
    _, ok, r = one_call(c, HELLO, expect="hello")
    c.close()
    if ok:
        return "3.13"
    first_err = next((l for l in result_text(r).splitlines() if "error" in l or "cause" in l), result_text(r)[:200])
    note("the reference with `--python-version 3.13` cannot run a script here: its sandbox shows only /usr, /bin, "
         "/lib, /sbin, ~/.cache/uv and the script dir, no Python 3.13 lives there, and uv's download of one fails "
         "(`%s`); even where a download works it would land on the sandbox's throwaway root and repeat on every "
         "call. Both servers therefore run scripts with the system Python %s; the reference server itself runs "
         "on Python 3.13." % (first_err.strip(), our_pyver))
    return want


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return None


def wait_compiled(cache, timeout=120):
    """Until every environment of our store at cache has its bytecode compiled (the daemon marks it)."""
    envs = os.path.join(cache, "envs")
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        names = [n for n in os.listdir(envs) if not n.startswith(".")] if os.path.isdir(envs) else []
        if all(os.path.exists(os.path.join(envs, n, ".mcp-python-sandbox-compiled")) for n in names):
            return
        time.sleep(0.05)


def first_runs(R, ours, ours_work, ref, ref_ok):
    """Every first-run row N_FIRST times, ours and the reference interleaved, each repetition on new, empty caches:
    the first call needing the package (empty caches), then the same package under a new requirement set (a new
    environment, wheels cached; the index page fetched again online), then under a third with the index resolved
    from the cache (ours: --offline first, as it does by itself when its cached page is fresh; the reference:
    `[tool.uv] offline = true`). Medians; the load average before each repetition is kept."""
    rows, loads = {}, []
    kinds = (("cold_%s", "first run with %s, empty caches", "%s", False),
             ("newenv_%s", "new environment for %s, wheels cached", "%s>=0", False),
             ("offline_%s", "new environment for %s, wheels cached, index from the cache", "%s>=0.0.1", True))

    def add(key, label, who, dt, ok, r):
        e = rows.setdefault(key, {"label": label, "ours": [], "reference": [], "errors": []})
        if ok:
            e[who].append(dt * 1000)
        else:
            e["errors"].append("%s: %s" % (who, result_text(r)[:400]))

    for rep in range(N_FIRST):
        loads.append(os.getloadavg()[0])
        for name, body in (("humanize", HUMANIZE), ("numpy", NUMPY)):
            fresh = os.path.join(ours_work, "cache-first-" + name)
            shutil.rmtree(fresh, ignore_errors=True)
            d, sock = ours.start(fresh, "first-%s-%d" % (name, rep))
            c = ours.client_shim(sock)
            c.initialize()
            c.execute_python(HELLO)      # the daemon and the bare env are ready: only the deps are cold
            for key, label, req, _ in kinds:
                # A cache with the wheels is one whose bytecode was compiled (seconds after the build that
                # fetched them, at idle priority): wait for it, untimed.
                wait_compiled(fresh)
                dt, ok, r = one_call(c, body, [req % name])
                add(key % name, label % name, "ours", dt, ok, r)
            c.close()
            stop(d)
            shutil.rmtree(fresh, ignore_errors=True)
            if ref_ok:
                home = os.path.join(ref.work, "home-first-" + name)
                shutil.rmtree(home, ignore_errors=True)
                c = ref.client(home=home)
                c.initialize()
                c.execute_python(HELLO)  # uv's interpreter discovery is then cached
                for key, label, req, offline in kinds:
                    dt, ok, r = one_call(c, ref.deps_script(body, offline=offline), [req % name])
                    add(key % name, label % name, "reference", dt, ok, r)
                c.close()
                shutil.rmtree(home, ignore_errors=True)
        log("  repetition %d/%d: %s" % (rep + 1, N_FIRST, "; ".join(
            "%s %s/%s" % (k, "%.0f" % v["ours"][-1] if v["ours"] else "-",
                          "%.0f" % v["reference"][-1] if v["reference"] else "-") for k, v in rows.items())))
    out = {}
    for key, e in rows.items():
        o = {"label": e["label"]}
        for who in ("ours", "reference"):
            if e[who]:
                o[who] = {"ms": statistics.median(e[who]), "all_ms": e[who], "ok": len(e[who]) == N_FIRST}
        if e["errors"]:
            o["errors"] = e["errors"][:4]
            for x in e["errors"][:2]:
                note("first run (%s) failed: %s" % (key, x))
        out[key] = o
    R["cold_deps"] = out
    R["cold_deps_load"] = {"reps": N_FIRST, "loadavg_1min": loads}
    R["setup"].append(
        "First run with new dependencies (both servers, %d repetitions interleaved, medians; each repetition on "
        "new, empty caches: ours a new --cache-dir, the reference a new HOME): one hello world first (the daemon, "
        "its bare environment and uv's interpreter discovery are ready), then the first call needing the package "
        "(uv resolves and downloads from PyPI), then the same package under a new requirement set (`pkg>=0`: a new "
        "environment from cached wheels; ours once the bytecode of the first environment is compiled, which it "
        "does at idle priority right after the build, as a cache with these wheels has it), then under a third "
        "(`pkg>=0.0.1`) with the index resolved from the cache: ours resolves offline first by itself when its cached index page is younger than PyPI's max-age, "
        "the reference is told `[tool.uv] offline = true`. This machine's HTTPS proxy strips PyPI's cache "
        "headers, so every online resolve fetches the index page again (100-170 ms for numpy) for both servers "
        "alike; the offline rows show the figures without that." % N_FIRST)


def print_loop(R, ours, ours_work, cache, ref, ref_ok):
    """A print-heavy loop (1M small writes), both servers warm, interleaved, N_PRINT runs each."""
    d, sock = ours.start(cache, "print-loop")
    c = ours.client_shim(sock)
    c.initialize()
    c.execute_python(HELLO)
    rc = None
    if ref_ok:
        rc = ref.client()
        rc.initialize()
        rc.execute_python(HELLO)
    times = {"ours": [], "reference": []}
    try:
        for i in range(N_PRINT):
            for who, cl in (("ours", c), ("reference", rc)):
                if cl is None:
                    continue
                dt, ok, r = one_call(cl, PRINT_LOOP)   # the reference keeps only the head of the output
                if ok:
                    times[who].append(dt)
                else:
                    note("print loop (%s) failed: %s" % (who, result_text(r)[:300]))
    finally:
        c.close()
        stop(d)
        if rc:
            rc.close()
    R["print_loop"] = {who: summary(v) for who, v in times.items() if v}
    R["setup"].append("Print-heavy loop: `for i in range(1000000): print('x')`, warm, %d runs per server "
                      "interleaved (p50); each server caps what it returns its own way." % N_PRINT)
    log("  print loop p50: ours %s ms, reference %s ms" % (
        "%.0f" % R["print_loop"]["ours"]["p50"] if "ours" in R["print_loop"] else "-",
        "%.0f" % R["print_loop"]["reference"]["p50"] if "reference" in R["print_loop"] else "-"))


# ---- real-world scripts (bench/corpus/) ---------------------------------------

def corpus_respell(script, k):
    """script with each requirement of its PEP 723 block spelled the k-th way: `pkg>=0`, `pkg>=0.0`, ... (a
    requirement with a specifier of its own gets it after a comma). The same packages, a new environment."""
    spec = ">=0" + ".0" * k
    out, inside = [], False
    for line in script.splitlines(keepends=True):
        if line.rstrip("\n") == "# /// script":
            inside = True
        elif line.rstrip("\n") == "# ///":
            inside = False
        m = re.match(r'^(#\s+")([^"]+)(",?\s*)$', line) if inside else None
        if m:
            req = m.group(2)
            line = m.group(1) + req + ("," if re.search(r"[<>=!~]", req) else "") + spec + m.group(3)
        out.append(line)
    return "".join(out)


def corpus_for_reference(script):
    """The reference's copy: the same script, its block telling uv to use the system CAs (this machine's HTTPS
    proxy needs them, and the reference gives uv a clean environment); ours refuses a [tool] table."""
    return script.replace("\n# ///\n", "\n# [tool.uv]\n# system-certs = true\n# ///\n", 1)


def corpus_deps(script):
    m = re.search(r"^# dependencies = \[\n((?:#\s+\".*\n)*)# \]", script, re.M)
    return [x for x in re.findall(r'"([^"]+)"', m.group(1))] if m else []


def corpus_call(client, script, expect):
    t0 = time.monotonic()
    try:
        r = client.execute_python(script, timeout=900, timeout_seconds=300)
    except MCPError as e:
        return time.monotonic() - t0, False, {"content": [{"type": "text", "text": str(e)}]}
    return time.monotonic() - t0, result_ok(r, expect), r


def corpus(R, ours, ours_work, ref, ref_ok):
    """Each script of the corpus on a warm daemon / server whose uv cache holds its wheels (primed with the same
    packages under another spelling, untimed), then per repetition under a new spelling, ours and the reference
    interleaved script by script: (a) its first run (a new environment from cached wheels), (b) the same call again
    at once, (c) ours once the environment's bytecode is compiled, HEAVY_GAP_S apart, the median of 3 runs; the
    reference the median of 3 further runs, as far apart."""
    only = set(filter(None, os.environ.get("BENCH_CORPUS", "").split(",")))
    scripts = [x for x in CORPUS if not only or x[0] in only]
    if QUICK and not only:
        scripts = scripts[:3]
    texts = {}
    for name, _ in scripts:
        with open(os.path.join(CORPUS_DIR, name)) as f:
            texts[name] = f.read()
    cache = os.path.join(ours_work, "cache-corpus")
    # The uv cache stays from run to run (wheels cached is the point); the environments go.
    shutil.rmtree(os.path.join(cache, "envs"), ignore_errors=True)
    d, sock = ours.start(cache, "corpus")
    c = ours.client_shim(sock)
    c.initialize()
    c.execute_python(HELLO)
    clients = [("ours", c, lambda s: s)]
    if ref_ok:
        home = os.path.join(ref.work, "home-corpus")
        shutil.rmtree(os.path.join(home, ".cache", "uv", "environments-v2"), ignore_errors=True)
        rc = ref.client(home=home, stderr_name="reference-corpus")
        rc.initialize()
        rc.execute_python(HELLO)
        clients.append(("reference", rc, corpus_for_reference))
    rows = {name: {"deps": corpus_deps(texts[name]), "errors": [],
                   **{who: {"first": [], "again": [], "compiled": [], "warm_imports": 0} for who, _, _ in clients}}
            for name, _ in scripts}
    dead = set()
    loads = []

    def failed(name, who, what, r):
        rows[name]["errors"].append("%s, %s: %s" % (who, what, result_text(r)[-400:]))
        dead.add(name)

    try:
        log("  priming both caches (the same packages, another spelling)")
        for name, expect in scripts:
            for who, cl, conv in clients:
                dt, ok, r = corpus_call(cl, conv(corpus_respell(texts[name], 0)), expect)
                if not ok:
                    failed(name, who, "priming", r)
        wait_compiled(cache, 600)
        for rep in range(CORPUS_REPS):
            loads.append(os.getloadavg()[0])
            for name, expect in scripts:
                if name in dead:
                    continue
                script = corpus_respell(texts[name], rep + 1)
                for who, cl, conv in clients:
                    e = rows[name][who]
                    text = conv(script)
                    wait_compiled(cache, 120)   # nothing of ours compiles beside a measurement
                    dt, ok, r = corpus_call(cl, text, expect)
                    if not ok:
                        failed(name, who, "first run", r)
                        break
                    first = r
                    e["first"].append(dt * 1000)
                    e.setdefault("first_prepare", []).append((r.get("structuredContent") or {}).get("prepare_ms"))
                    dt, ok, r = corpus_call(cl, text, expect)
                    if not ok:
                        failed(name, who, "again", r)
                        break
                    e["again"].append(dt * 1000)
                    if who == "ours":
                        wait_env_compiled(cache, first, 600)
                        key = ((first.get("structuredContent") or {}).get("environment") or {}).get("key")
                        if key and not os.path.exists(os.path.join(cache, "envs", key,
                                                                   ".mcp-python-sandbox-compiled")):
                            note("corpus %s: the environment's compile had not finished after 600 s" % name)
                    times = []
                    for _ in range(3):
                        time.sleep(HEAVY_GAP_S)
                        dt, ok, r = corpus_call(cl, text, expect)
                        if not ok:
                            failed(name, who, "after the compile", r)
                            break
                        times.append(dt * 1000)
                        if "warm_imports" in (r.get("structuredContent") or {}):
                            e["warm_imports"] += 1
                    if len(times) < 3:
                        break
                    e["compiled"].append(statistics.median(times))
                if name not in dead:
                    log("  %d/%d %-22s %s" % (rep + 1, CORPUS_REPS, name, "; ".join(
                        "%s %s" % (who, "/".join("%.0f" % rows[name][who][m][-1] for m in ("first", "again", "compiled")))
                        for who, _, _ in clients)))
    finally:
        for _, cl, _ in clients:
            cl.close()
        stop(d)
    out = {}
    for name, e in rows.items():
        o = {"deps": e["deps"]}
        for who, _, _ in clients:
            if name in dead:
                continue
            o[who] = {m: statistics.median(e[who][m]) for m in ("first", "again", "compiled")}
            o[who]["all_ms"] = {m: e[who][m] for m in ("first", "again", "compiled")}
            if who == "ours":
                o[who]["warm_imports"] = "%d of %d" % (e[who]["warm_imports"], 3 * CORPUS_REPS)
                prep = [x for x in e[who].get("first_prepare", []) if x is not None]
                if prep:
                    o[who]["first_prepare_ms"] = statistics.median(prep)
        if e["errors"]:
            o["errors"] = e["errors"][:3]
            note("corpus script %s failed: %s" % (name, e["errors"][0]))
        out[name] = o
    R["corpus"] = {"scripts": out, "reps": CORPUS_REPS, "loadavg_1min": loads, "gap_s": HEAVY_GAP_S,
                   "summary": corpus_summary(out)}
    for m, label, want in CORPUS_GOALS:
        x = R["corpus"]["summary"].get(m)
        log("  median ratio, %s: %s (goal ≥ %.1f×)" % (label, fmt_x(x), want))


def corpus_wanted():
    """The corpus downloads its packages from PyPI the first time: BENCH_NO_COLD_DEPS=1 or BENCH_NO_CORPUS=1 skip
    it (a note says so)."""
    for k in ("BENCH_NO_COLD_DEPS", "BENCH_NO_CORPUS"):
        if os.environ.get(k, "") not in ("", "0"):
            note("%s set: the real-world scripts (bench/corpus/) were not measured" % k)
            return False
    return True


def corpus_summary(scripts):
    """Per measurement, the median over the scripts measured by both servers of reference ÷ ours."""
    out = {}
    for m, _, _ in CORPUS_GOALS:
        xs = [s["reference"][m] / s["ours"][m] for s in scripts.values()
              if s.get("ours") and s.get("reference") and s["ours"].get(m)]
        if xs:
            out[m] = statistics.median(xs)
            out[m + "_n"] = len(xs)
    return out


def corpus_lines(R):
    """RESULTS.md's section on the corpus."""
    C = R.get("corpus")
    if not C or not C.get("scripts"):
        return []
    ld = C.get("loadavg_1min") or []
    L = ["", "## Real-world scripts (bench/corpus/)", "",
         "%d PEP 723 scripts written for the benchmark as people publish them (`# /// script` with "
         "`requires-python = \">=3.11\"` and their dependencies, a body doing real work on generated data), each "
         "sent as it is to ours and, to the reference, with `[tool.uv] system-certs = true` added to its block "
         "(this machine's HTTPS proxy needs the system CAs; ours refuses a `[tool]` table). Both run them on "
         "Python 3.11. Each server's uv cache was primed first with the same packages under another requirement "
         "spelling (untimed), so every measured first run builds a new environment from cached wheels (ours "
         "once the bytecode of those wheels was compiled); the reference, as ever, resolves online, and this "
         "machine's proxy makes it fetch the index pages again. Per repetition (%d, each under a new spelling: "
         "`pkg>=0.0`, `pkg>=0.0.0`, ...), script by script, ours then the reference: **first run**, the same call "
         "**again at once**, and **after the compile**: ours once the daemon has compiled the environment's "
         "bytecode (at idle priority, after the build), calls %.0f s apart (the pool re-fills), the median of 3; "
         "the reference the median of 3 further runs as far apart. Medians over the repetitions; ratios are "
         "reference ÷ ours. Load average (1 min) before each repetition: %s."
         % (len(C["scripts"]), C["reps"], C.get("gap_s", HEAVY_GAP_S), ", ".join("%.1f" % x for x in ld) or "—"), "",
         "| script | dependencies | first run ours / ref (ms) | × | again at once ours / ref (ms) | × "
         "| after the compile ours / ref (ms) | × | ours with warm imports | ours: the first run's build (ms) |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in C["scripts"].items():
        o, r = s.get("ours") or {}, s.get("reference") or {}
        cells = []
        for m, _, _ in CORPUS_GOALS:
            cells.append("%s / %s" % ("%.0f" % o[m] if m in o else "—", "%.0f" % r[m] if m in r else "—"))
            cells.append(fmt_x(ratio(r.get(m), o.get(m))))
        L.append("| %s%s | %s | %s | %s | %s |" % (name, " (failed)" if s.get("errors") else "", ", ".join(s["deps"]),
                                                   " | ".join(cells), o.get("warm_imports", "—"),
                                                   "%.0f" % o["first_prepare_ms"] if "first_prepare_ms" in o else "—"))
    cold = []
    for name, s in C["scripts"].items():
        if str((s.get("ours") or {}).get("warm_imports", "")).startswith("0 of"):
            try:
                with open(os.path.join(CORPUS_DIR, name), encoding="utf-8") as f:
                    odd = sorted(set(ch for ch in f.read() if ord(ch) > 127))
            except OSError:
                odd = []
            cold.append("%s%s" % (name, " (has %s)" % " ".join(odd) if odd else ""))
    if cold:
        L += ["", "Our runs of %s never got warm imports: a sandbox that imported ahead is handed only a plain ASCII "
                  "script (src/tools/preimport.h), so these ran in a plain sandbox, importing everything each time."
              % ", ".join(cold)]
    L += ["", "| measurement (median over the corpus of reference ÷ ours) | ratio | goal | met |", "|---|---:|---:|---|"]
    for m, label, want in CORPUS_GOALS:
        x = C["summary"].get(m)
        L.append("| %s (%s scripts) | %s | ≥ %.1f× | %s |" % (label, C["summary"].get(m + "_n", 0), fmt_x(x), want,
                                                         "—" if x is None else ("yes" if x >= want else "**no**")))
    return L


# ---- ping during a store cleanup ------------------------------------------------

ENV_MARKER = ".mcp-python-sandbox-env.json"   # an environment's last use is its mtime (src/envstore/envstore.c)


def ping_child(sock, period_s, stop_r, out_w):
    """In a forked child: ping on a connection of its own every period_s until stop_r reads EOF; write
    [[monotonic send time, seconds], ...] as JSON to out_w."""
    samples = []
    try:
        c = Client.connect(sock)
        c.initialize()
        nxt = time.monotonic()
        while True:
            if select.select([stop_r], [], [], 0)[0]:
                break
            t0 = time.monotonic()
            c.request("ping", timeout=120)
            samples.append((t0, time.monotonic() - t0))
            nxt += period_s
            left = nxt - time.monotonic()
            if left > 0:
                time.sleep(left)
            else:
                nxt = time.monotonic()
        c.close()
    finally:
        data = json.dumps(samples).encode()
        while data:
            data = data[os.write(out_w, data):]
        os._exit(0)


class Pinger:
    """A client in a process of its own pinging the daemon every CLEANUP_PING_MS (so that nothing the benchmark
    does meanwhile delays its reads)."""

    def __init__(self, sock):
        stop_r, self.stop_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.stop_w)
            os.close(self.out_r)
            ping_child(sock, CLEANUP_PING_MS / 1000.0, stop_r, out_w)
        started.append(self.pid)
        os.close(stop_r)
        os.close(out_w)

    def finish(self):
        os.close(self.stop_w)
        chunks = []
        while True:
            b = os.read(self.out_r, 1 << 16)
            if not b:
                break
            chunks.append(b)
        os.close(self.out_r)
        os.waitpid(self.pid, 0)
        started.remove(self.pid)   # reaped: its pid is no longer ours to signal
        return json.loads(b"".join(chunks) or b"[]")


def ping_summary(samples):
    s = summary([x[1] for x in samples])
    if s:
        worst = max(samples, key=lambda x: x[1])
        s["max_at"] = worst[0]
        s["over_10ms"] = sum(1 for x in samples if x[1] > 0.010)
    return s


def schedstat(pid):
    """(ms on a CPU, ms waiting for one, now in s) of a process so far (/proc/PID/schedstat), or None."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            v = f.read().split()
        return int(v[0]) / 1e6, int(v[1]) / 1e6, time.monotonic()
    except (OSError, ValueError, IndexError):
        return None


def sched_delta(a, b):
    """What a process got between two schedstat() readings, per second."""
    if not a or not b or b[2] <= a[2]:
        return None
    return {"cpu_ms_per_s": (b[0] - a[0]) / (b[2] - a[2]), "runqueue_wait_ms_per_s": (b[1] - a[1]) / (b[2] - a[2]),
            "seconds": b[2] - a[2]}


def fill_store(envs, src, n, tag):
    """n store entries copied from the environment src (files hard-linked, as uv links them from its cache), each
    with a marker of its own dated 60 days back (the default store-max-age is 30 days). Returns their names."""
    names = []
    with open(os.path.join(src, ENV_MARKER)) as f:
        marker = f.read()
    old = time.time() - 60 * 86400
    for i in range(n):
        name = hashlib.sha256(("bench-cleanup-%s-%d" % (tag, i)).encode()).hexdigest()
        dst = os.path.join(envs, name)
        shutil.rmtree(dst, ignore_errors=True)
        subprocess.run(["cp", "-al", src, dst], check=True)
        mode = os.stat(dst).st_mode
        os.chmod(dst, mode | 0o200)
        os.unlink(os.path.join(dst, ENV_MARKER))
        with open(os.path.join(dst, ENV_MARKER), "w") as f:
            f.write(marker.replace(os.path.basename(src), name))
        os.utime(os.path.join(dst, ENV_MARKER), (old, old))
        os.chmod(dst, mode)
        names.append(name)
    return names


def cleanup_ping(R, ours, ours_work):
    """A client's ping every CLEANUP_PING_MS, quiet, then while the daemon collects hundreds of environments unused
    for too long (CLEANUP_ENVS entries, copies of one real environment); the cleanup is started by a
    check_environment call on another connection (it asks for the store's sizes, which walks the store and collects
    on the way). How long the cleanup took: until the last entry left the store's namespace, and until that call's
    reply (the walk has then removed everything)."""
    cache = os.path.join(ours_work, "cache-cleanup")
    envs = os.path.join(cache, "envs")
    shutil.rmtree(envs, ignore_errors=True)   # the uv cache stays
    d, sock = ours.start(cache, "cleanup")
    out = {"deps": CLEANUP_DEPS, "ping_every_ms": CLEANUP_PING_MS, "runs": []}
    try:
        c = Client.connect(sock)
        c.initialize()
        r = c.execute_python(CLEANUP_SCRIPT, CLEANUP_DEPS)
        if not result_ok(r, "ready"):
            raise MCPError("building the environment to copy failed: " + result_text(r)[:400])
        key = r["structuredContent"]["environment"]["key"]
        wait_env_compiled(cache, r, 300)
        c.close()
        src = os.path.join(envs, key)
        out["env_files"] = sum(len(f) + len(dd) for _, dd, f in os.walk(src))
        for n in CLEANUP_ENVS:
            names = set(fill_store(envs, src, n, str(n)))
            # Sizes younger than 10 s are given without a walk: the quiet baseline takes longer than that.
            p = Pinger(sock)
            s0 = schedstat(d.pid)
            time.sleep(12.0)
            s1 = schedstat(d.pid)
            quiet = p.finish()
            trig = Client.connect(sock)
            trig.initialize()
            p = Pinger(sock)
            time.sleep(0.3)
            reply = {}

            def ask():
                try:
                    reply["result"] = trig.call_tool("check_environment", {}, timeout=900)
                except MCPError as e:
                    reply["error"] = str(e)
                reply["t"] = time.monotonic()
            s2 = schedstat(d.pid)
            t0 = time.monotonic()
            th = threading.Thread(target=ask, daemon=True)
            th.start()
            t_gone, left, progress = None, n, [(0.0, n)]
            while time.monotonic() - t0 < 900:
                try:
                    present = os.listdir(envs)
                except OSError:
                    present = []
                left = len(names.intersection(present))
                if left != progress[-1][1] and time.monotonic() - t0 - progress[-1][0] >= 0.1:
                    progress.append((round(time.monotonic() - t0, 2), left))
                trash = sum(1 for x in present if x.startswith(".trash-"))
                if t_gone is None and left == 0:
                    t_gone = time.monotonic()
                if "t" in reply and ((left == 0 and trash == 0) or time.monotonic() - reply["t"] > 5):
                    break
                time.sleep(0.02)
            s3 = schedstat(d.pid)
            th.join(1)
            time.sleep(0.3)
            during = p.finish()
            trig.close()
            t_end = reply.get("t") or time.monotonic()
            in_window = [x for x in during if t0 <= x[0] <= t_end]
            run = {"envs": n, "removed": n - left, "quiet": ping_summary(quiet),
                   "during": ping_summary(in_window), "all_pings": ping_summary(during),
                   "renamed_s": t_gone - t0 if t_gone else None, "walk_s": reply["t"] - t0 if "t" in reply else None,
                   "daemon_quiet": sched_delta(s0, s1), "daemon_during": sched_delta(s2, s3),
                   "left_in_store": progress + [(round((t_gone or time.monotonic()) - t0, 2), left)]}
            if "max_at" in (run["during"] or {}):
                run["during"]["max_at_s"] = run["during"].pop("max_at") - t0
            if run["quiet"]:
                run["quiet"]["max_at_s"] = run["quiet"].pop("max_at") - s0[2] if s0 else None
            run["all_pings"] and run["all_pings"].pop("max_at", None)
            if "error" in reply:
                note("cleanup of %d environments: check_environment failed: %s" % (n, reply["error"]))
            if left:
                note("cleanup of %d environments: %d were still in the store after it" % (n, left))
            out["runs"].append(run)
            q, dr = run["quiet"] or {}, run["during"] or {}
            log("  %d environments: quiet ping p50 %s / p99 %s / max %s ms; during the cleanup (%s s to rename "
                "all, %s s to the reply) p50 %s / p99 %s / max %s ms (%s pings, %s over 10 ms)" % (
                    n, fmt_ms(q), fmt_ms(q, "p99"), fmt_ms(q, "max"),
                    "%.1f" % run["renamed_s"] if run["renamed_s"] is not None else "—",
                    "%.1f" % run["walk_s"] if run["walk_s"] is not None else "—",
                    fmt_ms(dr), fmt_ms(dr, "p99"), fmt_ms(dr, "max"), dr.get("n"), dr.get("over_10ms")))
    finally:
        stop(d)
    R["cleanup"] = out
    R["setup"].append(
        "Ping during a store cleanup: one real environment (%s, %d files and directories) built by a daemon of its "
        "own, then copied to %s store entries (files hard-linked, as uv links them; each with a marker of its own "
        "dated 60 days back, beyond the default store-max-age of 30 days). A client in a process of its own pings on "
        "its own connection every %.0f ms, first on the quiet daemon (the baseline), then while a check_environment "
        "call on another connection makes the daemon walk the store, which collects the old entries (the walk and "
        "its removals run in a child process of the daemon). Latencies are those of the pings sent between that "
        "call and its reply; the cleanup's time is until the last entry left the store's namespace (watched every "
        "20 ms) and until the reply." % (", ".join(CLEANUP_DEPS), out.get("env_files", 0),
                                          " and ".join(map(str, CLEANUP_ENVS)), CLEANUP_PING_MS))


def cleanup_rows(R):
    """Rows of the results table."""
    L = []
    for run in (R.get("cleanup") or {}).get("runs", []):
        q, d = run.get("quiet"), run.get("during")
        for k in ("p50", "p99", "max"):
            L.append("| ping %s during a store cleanup of %d environments, a ping every %.0f ms (ms; last column: "
                     "quiet daemon) | %s | – | %s | |" % (k, run["envs"], R["cleanup"]["ping_every_ms"], fmt_ms(d, k),
                                                           fmt_ms(q, k)))
        L.append("| that cleanup: all %d out of the store's namespace / the walk done (s) | %s / %s | – | | |" % (
            run["envs"], "%.1f" % run["renamed_s"] if run.get("renamed_s") is not None else "—",
            "%.1f" % run["walk_s"] if run.get("walk_s") is not None else "—"))
        dq, dd = run.get("daemon_quiet"), run.get("daemon_during")
        if dq and dd and "cpu_ms_per_s" in dq and "cpu_ms_per_s" in dd:
            L.append("| the daemon process during that cleanup: on a CPU / waiting for one (ms per second; last "
                     "column: quiet) | %.1f / %.1f | – | %.1f / %.1f | |" % (
                         dd["cpu_ms_per_s"], dd["runqueue_wait_ms_per_s"], dq["cpu_ms_per_s"],
                         dq["runqueue_wait_ms_per_s"]))
    return L


def one_call(client, script, deps=None, expect=None):
    t0 = time.monotonic()
    r = client.execute_python(script, deps, timeout=900)
    dt = time.monotonic() - t0
    return dt, result_ok(r, expect), r


def throughput(make_client, n_clients, seconds, server_pids_fn, script=HELLO):
    """n_clients sessions call hello world in a loop for `seconds`; returns runs/s
    and peak RSS of the server process(es) and of their whole process trees."""
    clients = [make_client(i) for i in range(n_clients)]
    for c in clients:
        c.initialize()
        c.execute_python(script)          # warm
    counts = [0] * n_clients
    fails = [0] * n_clients
    lat = [[] for _ in range(n_clients)]
    go = threading.Event()
    t_end = [0.0]

    def worker(i):
        go.wait()
        c = clients[i]
        while time.monotonic() < t_end[0]:
            t0 = time.monotonic()
            r = c.execute_python(script)
            lat[i].append(time.monotonic() - t0)
            if result_ok(r, "hello"):
                counts[i] += 1
            else:
                fails[i] += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_clients)]
    for t in threads:
        t.start()
    pids = server_pids_fn()
    peak_rss, peak_tree, samples = 0, 0, 0
    cpu0 = sum(cpu_ticks(p) for p in pids)
    busy0 = machine_busy()
    t_start = time.monotonic()
    t_end[0] = t_start + seconds
    go.set()
    next_tree = t_start
    while any(t.is_alive() for t in threads):
        peak_rss = max(peak_rss, sum(rss_kb(p) or 0 for p in pids))
        if time.monotonic() >= next_tree:
            peak_tree = max(peak_tree, tree_rss_kb(pids))
            next_tree = time.monotonic() + 0.5
        samples += 1
        time.sleep(0.1)
    elapsed = time.monotonic() - t_start
    cpu1 = sum(cpu_ticks(p) for p in pids)
    busy1 = machine_busy()
    for c in clients:
        c.close()
    done = sum(counts)
    hz = os.sysconf("SC_CLK_TCK")
    alll = [x for l in lat for x in l]
    return {"clients": n_clients, "runs": done, "failures": sum(fails), "seconds": elapsed,
            "runs_per_s": done / elapsed, "latency_ms": summary(alll),
            "peak_server_rss_kb": peak_rss, "peak_tree_rss_kb": peak_tree,
            "server_cpu_ms_per_run": (cpu1 - cpu0) * 1000.0 / hz / done if done else None,
            "machine_cpu_busy": (busy1[0] - busy0[0]) / float(max(1, busy1[1] - busy0[1]))}


# ---- the floor: bwrap + Python with exactly our argv -------------------------

CAPTURE_WRAPPER = r"""#!/usr/bin/python3 -I
# Written by bench/run.py: record the bwrap argv of the daemon, with the options
# it passes through --args FD spelled out, and the contents of the fds they
# read; then run the real bwrap with the arguments unchanged. It runs as the
# sandbox's uid (a root daemon's are its own): the directory is open to it.
import os, re, sys
f = "%(dir)s/%%d" %% os.getpid()
args = sys.argv[1:]
def read_fd(fd):
    with open("/proc/self/fd/%%d" %% fd, "rb") as src:   # a new open file: bwrap's offset stays
        return src.read()
flat = []
i = 0
while i < len(args):
    if args[i] == "--args" and i + 1 < len(args):
        flat += [x.decode() for x in read_fd(int(args[i + 1])).split(b"\0")[:-1]]
        i += 2
        continue
    flat.append(args[i])
    i += 1
with open(f + ".argv", "wb") as out:
    out.write(b"".join(x.encode() + b"\0" for x in flat))
for prev, a in zip(flat, flat[1:]):
    if prev in ("--seccomp", "--ro-bind-data", "--bind-data", "--file") and a.isdigit():
        try:
            with open(f + ".fd" + a, "wb") as out:
                out.write(read_fd(int(a)))
        except OSError:
            pass
# The boot program's compiled code, which its loader (-c) reads from an inherited fd by number.
for a in flat:
    m = re.search(r"os\.pread\((\d+),", a)
    if m:
        try:
            with open(f + ".code" + m.group(1), "wb") as out:
                out.write(read_fd(int(m.group(1))))
        except OSError:
            pass
os.execv("%(bwrap)s", ["%(bwrap)s"] + args)
"""


def capture_argv(ours, cache, bwrap):
    """Run one warm execute_python through a daemon whose bwrap is a recording
    wrapper; return (argv, {fd: saved file}) of the run's bwrap."""
    cap = os.path.join(ours.work, "argv-capture")
    shutil.rmtree(cap, ignore_errors=True)
    os.makedirs(cap)
    os.chmod(cap, 0o777)   # the wrapper runs as the sandbox's uid
    wrapper = os.path.join(ours.work, "bwrap-capture.sh")
    with open(wrapper, "w") as f:
        f.write(CAPTURE_WRAPPER % {"dir": cap, "bwrap": bwrap})
    os.chmod(wrapper, 0o755)
    # No pre-started sandboxes here: the capture must see the argv of a plain run.
    proc, sock = ours.start(cache, "capture", ["--bwrap=" + wrapper, "--prestart=0"])
    try:
        c = Client.connect(sock)
        c.initialize()
        c.execute_python(HELLO)
        for f in glob.glob(os.path.join(cap, "*")):
            os.unlink(f)
        r = c.execute_python(HELLO)
        c.close()
        if not result_ok(r, "hello"):
            raise RuntimeError("hello world through the capture wrapper failed: " + result_text(r)[:400])
    finally:
        stop(proc)
    for a in glob.glob(os.path.join(cap, "*.argv")):
        with open(a, "rb") as f:
            argv = [x.decode() for x in f.read().split(b"\0")[:-1]]
        if any(x.endswith("/script.py") for x in argv):
            base = a[:-len(".argv")]
            fds = {}
            for fdfile in glob.glob(base + ".fd*"):
                fds[int(fdfile.rsplit(".fd", 1)[1])] = fdfile
            for codefile in glob.glob(base + ".code*"):
                fds["code"] = (int(codefile.rsplit(".code", 1)[1]), codefile)
            # "$@" holds the arguments only: put the real bwrap in front.
            return [bwrap] + argv, fds, result_text(r)
    raise RuntimeError("the capture wrapper saw no run")


def run_captured(argv, fds):
    """Run the captured argv with fresh fds holding the same contents."""
    opened, new = {}, list(argv)
    try:
        for i in range(1, len(argv)):
            if argv[i - 1] in ("--seccomp", "--ro-bind-data", "--bind-data", "--file") and argv[i].isdigit():
                old = int(argv[i])
                fd = os.open(fds[old], os.O_RDONLY)
                opened[old] = fd
                new[i] = str(fd)
        # The boot program's loader reads the compiled code from an fd it names: a fresh one, named anew.
        if "code" in fds and "-c" in argv:
            old, path = fds["code"]
            fd = os.open(path, os.O_RDONLY)
            opened["code"] = fd
            k = argv.index("-c") + 1
            new[k] = new[k].replace("os.pread(%d," % old, "os.pread(%d," % fd).replace(
                "os.close(%d)" % old, "os.close(%d)" % fd)
        # The run's bootstrap takes the fd of its figure/file pipe after "-c CODE": give it a sink.
        if "-c" in argv:
            k = argv.index("-c")
            if k + 2 < len(argv) and argv[k + 2].split(":")[0].isdigit():
                sink = os.open("/dev/null", os.O_WRONLY)
                opened[-1] = sink
                new[k + 2] = str(sink)
        p = subprocess.run(new, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           pass_fds=tuple(opened.values()), env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        return p
    finally:
        for fd in opened.values():
            os.close(fd)


def drop(argv, flag, nargs, prefix=()):
    """argv without every `flag` and its nargs arguments (and an immediately
    preceding run of prefix options such as --size N --perms M)."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == flag and (not out or out[-1] != "--"):
            i += 1 + nargs
            while len(out) >= 2 and out[-2] in prefix:
                del out[-2:]
            continue
        if argv[i] == "--":
            out.extend(argv[i:])
            break
        out.append(argv[i])
        i += 1
    return out


def drop_tmpfs(argv, path):
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--tmpfs" and argv[i + 1] == path:
            while len(out) >= 2 and out[-2] in ("--size", "--perms"):
                del out[-2:]
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def drop_etc(argv):
    out, i = [], 0
    while i < len(argv):
        if argv[i] in ("--ro-bind", "--ro-bind-try") and i + 2 < len(argv) and argv[i + 2].startswith("/etc/"):
            i += 3
            continue
        out.append(argv[i])
        i += 1
    return out


def ablations(argv):
    """What each part of our sandbox argv costs: the argv with one part removed."""
    no_net = []
    for a in argv:
        if a == "--unshare-all" and not no_net.count("--"):
            no_net += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        else:
            no_net.append(a)
    return [
        ("network namespace (--unshare-all vs. all but net)", no_net),
        ("seccomp filter", drop(argv, "--seccomp", 1)),
        ("--disable-userns", drop(argv, "--disable-userns", 0)),
        ("tmpfs on /tmp and /dev/shm", drop_tmpfs(drop_tmpfs(argv, "/tmp"), "/dev/shm")),
        ("--remount-ro /", drop(argv, "--remount-ro", 1)),
        ("--proc /proc", drop(argv, "--proc", 1)),
        ("--dev /dev", drop(argv, "--dev", 1)),
        ("/etc files (--ro-bind-try /etc/…, passwd, group, hosts)", drop_etc(argv)),
        ("--new-session --die-with-parent", drop(drop(argv, "--new-session", 0), "--die-with-parent", 0)),
    ]


def measure_ablations(argv, fds, n):
    fixed = ablations(argv)
    contenders = [("full", lambda: run_captured(argv, fds).returncode == 0)]
    for name, av in fixed:
        contenders.append((name, (lambda av=av: run_captured(av, fds).returncode == 0)))
    res = interleaved_latency(contenders, n, chunk=1, warmup=2)
    full = res.get("full")
    out = []
    for name, _ in contenders[1:]:
        r = res.get(name)
        if r and full:
            out.append({"part": name, "p50_without_ms": r["p50"], "saves_ms": full["p50"] - r["p50"]})
    return {"full_p50_ms": full and full["p50"], "parts": out}


# ---- where the milliseconds go: strace one warm run ---------------------------

STRACE_LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(\w+)\((.*)$")


STRACE_RESUMED = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+<\.\.\. (\w+) resumed>(.*)$")


def read_strace(path, since):
    """(pid, time, syscall, rest) per line; a call strace split (unfinished ... resumed) counts when it returns."""
    ev = []
    with open(path, errors="replace") as f:
        for line in f:
            m = STRACE_LINE.match(line) or STRACE_RESUMED.match(line)
            if m and "<unfinished ...>" in line and m.re is STRACE_LINE and m.group(3) == "read":
                continue   # a read's data shows when it resumes
            if m and float(m.group(2)) >= since:
                ev.append((int(m.group(1)), float(m.group(2)), m.group(3), m.group(4)))
    return ev


def strace_one_call(daemon_pid, sock, out_path, prime):
    """strace -f the daemon through one warm hello world; prime() calls first, traced (a pre-started sandbox must
    be started under strace to be followed). Returns (events of the measured call, client ms, result)."""
    c = Client.connect(sock)
    c.initialize()
    c.execute_python(HELLO)
    st = subprocess.Popen(["strace", "-f", "-ttt", "-qq", "-s", "48", "-o", out_path,
                           "-e", "trace=execve,clone,clone3,fork,vfork,wait4,waitid,exit_group,"
                                 "recvmsg,sendmsg,recvfrom,sendto,memfd_create,read,write",
                           "-p", str(daemon_pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(st)
    time.sleep(1.0)
    prime(c)
    since = time.time()
    t0 = time.monotonic()
    r = c.execute_python(HELLO)
    straced_ms = (time.monotonic() - t0) * 1000
    time.sleep(0.3)
    stop(st, signal.SIGINT)
    c.close()
    return read_strace(out_path, since), straced_ms, r


def segments(pts):
    pts = [(n, e[1]) for n, e in pts if e]
    return [{"from": n0, "to": n1, "ms": (t1 - t0) * 1000} for (n0, t0), (n1, t1) in zip(pts, pts[1:])]


def first_event(ev, cond, after=0.0):
    for e in ev:
        if e[1] >= after and cond(e):
            return e
    return None


def profile_fresh_run(daemon_pid, sock, out_path):
    """Where a run that starts its own sandbox spends its time (a daemon with prestart=0)."""
    if not shutil.which("strace"):
        return {"error": "strace not installed"}
    ev, straced_ms, r = strace_one_call(daemon_pid, sock, out_path, lambda c: None)
    d = daemon_pid
    req = first_event(ev, lambda e: e[0] == d and e[2] in ("read", "recvmsg", "recvfrom") and "tools/call" in e[3])
    if not req:
        return {"error": "the request was not seen in the trace", "straced_ms": straced_ms}
    fork = first_event(ev, lambda e: e[0] == d and e[2] in ("clone", "clone3", "fork", "vfork"), req[1])
    bw = first_event(ev, lambda e: e[2] == "execve" and "bwrap" in e[3], req[1])
    py = first_event(ev, lambda e: e[2] == "execve" and "/bin/python" in e[3], req[1])
    rec = first_event(ev, lambda e: e[0] == d and e[2] == "read" and "X\\0\\0\\0\\1" in e[3], req[1])
    reply = first_event(ev, lambda e: e[0] == d and e[2] in ("write", "sendmsg", "sendto") and "result" in e[3],
                        req[1])
    segs = segments([("request read", req), ("fork", fork), ("execve bwrap", bw), ("execve python", py),
                     ("end-of-run record read", rec), ("reply written", reply)])
    return {"straced_ms": straced_ms, "segments": segs, "ok": result_ok(r, "hello")}


def profile_prestarted_run(daemon_pid, sock, out_path):
    """Where a run in a pre-started sandbox spends its time (the default, at an agent's pace)."""
    if not shutil.which("strace"):
        return {"error": "strace not installed"}

    def prime(c):
        c.execute_python(HELLO)   # its replacement sandbox starts under strace
        time.sleep(1.0)           # and reaches its read of the script

    ev, straced_ms, r = strace_one_call(daemon_pid, sock, out_path, prime)
    d = daemon_pid
    req = first_event(ev, lambda e: e[0] == d and e[2] in ("read", "recvmsg", "recvfrom") and "tools/call" in e[3])
    if not req:
        return {"error": "the request was not seen in the trace", "straced_ms": straced_ms}
    hand = first_event(ev, lambda e: e[0] == d and e[2] == "write" and "print(" in e[3], req[1])
    got = first_event(ev, lambda e: e[0] != d and e[2] == "read" and "print(" in e[3], req[1])
    out = first_event(ev, lambda e: e[0] != d and e[2] == "write" and '"hello' in e[3], req[1])
    xw = first_event(ev, lambda e: e[0] != d and e[2] == "write" and "X\\0\\0\\0\\1" in e[3], req[1])
    xr = first_event(ev, lambda e: e[0] == d and e[2] == "read" and "X\\0\\0\\0\\1" in e[3], req[1])
    reply = first_event(ev, lambda e: e[0] == d and e[2] in ("write", "sendmsg", "sendto") and "result" in e[3],
                        req[1])
    if not hand or not got:
        return {"error": "the run did not use a pre-started sandbox in the trace", "straced_ms": straced_ms}
    segs = segments([("request read", req), ("script handed over", hand), ("Python has the script", got),
                     ("script printed", out), ("end-of-run record written", xw), ("daemon reads it", xr),
                     ("reply written", reply)])
    return {"straced_ms": straced_ms, "segments": segs, "ok": result_ok(r, "hello")}


def perf_cpu_split(daemon_pid, sock, n, out_path):
    """CPU samples of the daemon and everything it starts, by command name, over n warm runs."""
    if not shutil.which("perf"):
        return {"error": "perf not installed"}
    c = Client.connect(sock)
    c.initialize()
    c.execute_python(HELLO)
    pf = subprocess.Popen(["perf", "record", "-q", "-g", "-F", "2999", "-o", out_path, "-p", str(daemon_pid)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(pf)
    time.sleep(0.5)
    for _ in range(n):
        c.execute_python(HELLO)
    stop(pf, signal.SIGINT)
    c.close()
    rep = run_text(["perf", "report", "-i", out_path, "--no-children", "--sort", "comm", "--stdio", "-g", "none"])
    split = {}
    for line in rep.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S.*)$", line)
        if m:
            split[m.group(2).strip()] = float(m.group(1))
    rep = run_text(["perf", "report", "-i", out_path, "--comms", "bwrap", "--children", "--sort", "sym", "--stdio",
                    "-g", "none"])
    mi = None
    for line in rep.splitlines():
        if "show_mountinfo" in line:
            mi = float(line.split("%")[0])
            break
    return {"runs": n, "cpu_share_by_command_pct": split, "bwrap_show_mountinfo_pct_of_all": mi}


# ---- output: SVG, Markdown ---------------------------------------------------

def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg_panel(x, y, w, title, rows, unit, fmt="%.1f"):
    """Horizontal bars: rows = [(label, value, colour)]. Returns (svg, height)."""
    out = ['<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>' % (x, y + 14, esc(title))]
    rows = [r for r in rows if r[1] is not None]
    vmax = max([r[1] for r in rows] or [1]) or 1
    label_w, bar_w = 250, w - 250 - 90
    yy = y + 26
    for label, v, colour in rows:
        bw = max(1.0, bar_w * v / vmax)
        out.append('<text x="%d" y="%d" font-size="12" text-anchor="end">%s</text>' % (x + label_w - 6, yy + 12, esc(label)))
        out.append('<rect x="%d" y="%d" width="%.1f" height="16" fill="%s"/>' % (x + label_w, yy, bw, colour))
        out.append('<text x="%.1f" y="%d" font-size="12">%s %s</text>' % (x + label_w + bw + 4, yy + 12, fmt % v, esc(unit)))
        yy += 22
    return "\n".join(out), yy - y + 14


OURS_C, OURS2_C, REF_C, FLOOR_C = "#2b7bb9", "#7fb3dc", "#d9534f", "#8c8c8c"


def write_svg(path, R):
    W = 760
    panels = []
    w = R.get("warm_hello", {})
    rows = []
    wp = R.get("warm_hello_paced", {})
    for key, label, col in (("ours_shim", "ours, agent's pace", OURS_C), ("reference", "reference, agent's pace", REF_C)):
        s = wp.get(key)
        if s:
            rows.append((label + " p50", s["p50"], col))
            rows.append((label + " p99", s["p99"], col))
    for key, label, col in (("ours_shim", "ours (shim), back to back", OURS2_C),
                            ("ours_socket", "ours (socket), back to back", OURS2_C),
                            ("ours_fresh_socket", "ours, a sandbox per call", OURS2_C),
                            ("reference", "reference, back to back", REF_C)):
        s = w.get(key)
        if s:
            rows.append((label + " p50", s["p50"], col))
            rows.append((label + " p99", s["p99"], col))
    fl = R.get("floor", {})
    for key, label in (("bwrap_python", "floor: bwrap + python (our argv)"), ("python", "floor: python -I -c pass")):
        if fl.get(key):
            rows.append((label + " p50", fl[key]["p50"], FLOOR_C))
    panels.append(("Warm execute_python hello world (ms, lower is better)", rows, "ms", "%.1f"))
    cs = R.get("cold_start", {})
    rows = []
    for key, label, col in (("ours_socket_activation", "ours: socket activation", OURS_C),
                            ("ours_shim_fallback", "ours: shim --stdio fallback", OURS2_C),
                            ("ours_shim_to_running_daemon", "ours: shim, daemon running", OURS2_C),
                            ("reference", "reference: spawn", REF_C)):
        if cs.get(key):
            rows.append((label + " p50", cs[key]["p50"], col))
    panels.append(("Cold start to initialize answered (ms)", rows, "ms", "%.1f"))
    rows = []
    for srv, label, col in (("ours", "ours", OURS_C), ("reference", "reference", REF_C)):
        for t in R.get("throughput", {}).get(srv, []):
            rows.append(("%s, %d client%s" % (label, t["clients"], "s" if t["clients"] > 1 else ""), t["runs_per_s"], col))
    panels.append(("Throughput, hello world (runs/s, higher is better)", rows, "runs/s", "%.1f"))
    rows = []
    d = R.get("warm_deps", {})
    for key, label in (("six", "six"), ("numpy", "numpy")):
        for srv, col in (("ours", OURS_C), ("reference", REF_C)):
            s = d.get(key, {}).get(srv)
            if s:
                rows.append(("%s: %s p50" % (srv, label), s["p50"], col))
    panels.append(("Warm runs with dependencies (ms)", rows, "ms", "%.1f"))
    body, y = [], 40
    for title, rows, unit, fmt in panels:
        svg, h = svg_panel(10, y, W - 20, title, rows, unit, fmt)
        body.append(svg)
        y += h + 10
    head = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">\n'
            '<rect width="100%%" height="100%%" fill="white"/>\n'
            '<text x="10" y="24" font-size="16" font-weight="bold">mcp-python-sandboxd vs %s %s — %s</text>\n'
            % (W, y + 10, REFERENCE_PACKAGE, REFERENCE_VERSION, esc(R["date"])))
    with open(path, "w") as f:
        f.write(head + "\n".join(body) + "\n</svg>\n")


def fmt_ms(s, key="p50"):
    return "—" if not s or s.get(key) is None else "%.1f" % s[key]


def ratio(a, b):
    return None if not a or not b else a / b


def fmt_x(x):
    return "—" if x is None else "%.2f×" % x


def table_lines(R):
    L = []
    w, fl, cs = R.get("warm_hello", {}), R.get("floor", {}), R.get("cold_start", {})
    L.append("| measurement | ours | reference | floor | ours vs reference |")
    L.append("|---|---:|---:|---:|---:|")
    ours, ref = w.get("ours_shim"), w.get("reference")
    wp = R.get("warm_hello_paced", {})
    po, pr = wp.get("ours_shim"), wp.get("reference")
    for k in ("p50", "p95", "p99"):
        L.append("| warm hello world %s, calls %d ms apart (an agent's pace) (ms) | %s | %s | | %s |" % (
            k, PACE_GAP_MS, fmt_ms(po, k), fmt_ms(pr, k), fmt_x(ratio(pr and pr[k], po and po[k]))))
    for k in ("p50", "p95", "p99"):
        L.append("| warm hello world %s, back to back (ours: the sandbox started after the previous call is not "
                 "ready yet) (ms) | %s | %s | | %s |" % (k, fmt_ms(ours, k), fmt_ms(ref, k),
                                                     fmt_x(ratio(ref and ref[k], ours and ours[k]))))
    so = w.get("ours_socket")
    L.append("| warm hello world p50, back to back, ours on the socket without the shim (ms) | %s | | | |" % fmt_ms(so))
    fr = w.get("ours_fresh_socket")
    for k in ("p50", "p95", "p99"):
        L.append("| warm hello world %s, every call starts its own sandbox (prestart=0, on the socket) (ms) "
                 "| %s | | %s | |" % (k, fmt_ms(fr, k), fmt_ms(fl.get("bwrap_python"), k)))
    L.append("| floor: `python -I -c pass` p50 (ms) | | | %s | |" % fmt_ms(fl.get("python")))
    L.append("| floor: bwrap with our exact argv + the same hello world p50 (ms) | | | %s | |" % fmt_ms(fl.get("bwrap_python")))
    L.append("| floor: minimal bwrap (only /usr) + `python -I -c pass` p50 (ms) | | | %s | |" % fmt_ms(fl.get("bwrap_minimal")))
    L.append("| **warm hello p50, a sandbox per call (ours: prestart=0) / bwrap floor p50** | %s | %s | 1.00× | |" % (
        fmt_x(ratio(fr and fr["p50"], fl.get("bwrap_python", {}).get("p50"))),
        fmt_x(ratio(ref and ref["p50"], fl.get("bwrap_python", {}).get("p50")))))
    ca, cf, cr = cs.get("ours_socket_activation"), cs.get("ours_shim_fallback"), cs.get("reference")
    L.append("| cold start, socket activation → initialize p50 (ms) | %s | | | %s |" % (fmt_ms(ca), fmt_x(ratio(cr and cr["p50"], ca and ca["p50"]))))
    L.append("| cold start, shim `--stdio` fallback → initialize p50 (ms) | %s | | | %s |" % (fmt_ms(cf), fmt_x(ratio(cr and cr["p50"], cf and cf["p50"]))))
    L.append("| session start, shim → running daemon → initialize p50 (ms) | %s | | | |" % fmt_ms(cs.get("ours_shim_to_running_daemon")))
    L.append("| cold start, process spawn → initialize p50 (ms) | | %s | | |" % fmt_ms(cr))
    for key, label in (("six", "six"), ("numpy", "numpy")):
        d = R.get("warm_deps", {}).get(key, {})
        o, r = d.get("ours"), d.get("reference")
        L.append("| warm run with %s p50 / p95 (ms) | %s / %s | %s / %s | | %s |" % (
            label, fmt_ms(o), fmt_ms(o, "p95"), fmt_ms(r), fmt_ms(r, "p95"), fmt_x(ratio(r and r["p50"], o and o["p50"]))))
    for key, _, _, _ in HEAVY:
        d = R.get("warm_heavy", {}).get(key, {})
        o, r = d.get("ours"), d.get("reference")
        L.append("| warm run with %s, imports first, calls %.0f s apart (ours: %s of %s with warm imports) p50 / p95 "
                 "(ms) | %s / %s | %s / %s | | %s |" % (
                     key, HEAVY_GAP_S, o.get("warm_imports", "—") if o else "—", N_HEAVY, fmt_ms(o), fmt_ms(o, "p95"),
                     fmt_ms(r), fmt_ms(r, "p95"), fmt_x(ratio(r and r["p50"], o and o["p50"]))))
    reps = R.get("cold_deps_load", {}).get("reps")
    for key, c in R.get("cold_deps", {}).items():
        o, r = c.get("ours"), c.get("reference")
        # Rows whose index page is fetched online: this machine's proxy strips PyPI's cache headers.
        proxy = "" if key.startswith("offline_") else "†"
        L.append("| %s%s (ms%s) | %s | %s | | %s |" % (
            c["label"], proxy, ", median of %d" % reps if reps else "",
            "%.0f" % o["ms"] if o and o.get("ok") else ("failed" if o else "—"),
            "%.0f" % r["ms"] if r and r.get("ok") else ("failed" if r else "—"),
            fmt_x(ratio(r and r.get("ok") and r["ms"], o and o.get("ok") and o["ms"]))))
    pl = R.get("print_loop", {})
    if pl:
        o, r = pl.get("ours"), pl.get("reference")
        L.append("| print-heavy loop, 1M small writes p50 (ms) | %s | %s | | %s |" % (
            fmt_ms(o), fmt_ms(r), fmt_x(ratio(r and r["p50"], o and o["p50"]))))
    L += cleanup_rows(R)
    tp = R.get("throughput", {})
    for i, n in enumerate(CLIENTS):
        o = next((t for t in tp.get("ours", []) if t["clients"] == n), None)
        r = next((t for t in tp.get("reference", []) if t["clients"] == n), None)
        L.append("| throughput, %d client%s (runs/s; p50 latency ms) | %s | %s | | %s |" % (
            n, "s" if n > 1 else "",
            "%.1f; %.0f" % (o["runs_per_s"], o["latency_ms"]["p50"]) if o and o["latency_ms"] else "—",
            "%.1f; %.0f" % (r["runs_per_s"], r["latency_ms"]["p50"]) if r and r["latency_ms"] else "—",
            fmt_x(ratio(o and o["runs_per_s"], r and r["runs_per_s"]))))
    o = next((t for t in tp.get("ours", []) if t["clients"] == 1), None)
    r = next((t for t in tp.get("reference", []) if t["clients"] == 1), None)
    L.append("| CPU time of the server process itself per hello world run, 1 client (ms) | %s | %s | | %s |" % (
        "%.2f" % o["server_cpu_ms_per_run"] if o and o.get("server_cpu_ms_per_run") else "—",
        "%.2f" % r["server_cpu_ms_per_run"] if r and r.get("server_cpu_ms_per_run") else "—",
        fmt_x(ratio(r and r.get("server_cpu_ms_per_run"), o and o.get("server_cpu_ms_per_run")))))
    m = R.get("memory", {})
    L.append("| server RSS idle, fresh (KiB) | %s | %s | | |" % (m.get("ours_idle_fresh_rss_kb", "—"), m.get("reference_idle_rss_kb", "—")))
    L.append("| server RSS idle, after the warm runs (KiB) | %s | %s | | |" % (m.get("ours_idle_after_runs_rss_kb", "—"), m.get("reference_idle_after_runs_rss_kb", "—")))
    L.append("| RSS per extra connection (KiB; reference: one process each) | %s | %s | | |" % (
        "%.1f" % m["ours_per_connection_kb"] if "ours_per_connection_kb" in m else "—", m.get("reference_idle_rss_kb", "—")))
    L.append("| server RSS peak, 16 clients (KiB; reference: sum of 16 servers) | %s | %s | | |" % (
        m.get("ours_load16_rss_kb", "—"), m.get("reference_load16_rss_kb", "—")))
    L.append("| whole process tree RSS peak, 16 clients (KiB) | %s | %s | | |" % (
        m.get("ours_load16_tree_rss_kb", "—"), m.get("reference_load16_tree_rss_kb", "—")))
    L.append("| shim RSS, connected and idle (KiB) | %s | | | |" % m.get("shim_rss_kb", "—"))
    b = R.get("binaries", {})
    L.append("| binary size daemon / shim (bytes, as built; stripped) | %s / %s; %s / %s | | | |" % (
        b.get("daemon"), b.get("shim"), b.get("daemon_stripped"), b.get("shim_stripped")))
    return L


def goals(R):
    g = []
    w, fl, cs, m = R.get("warm_hello", {}), R.get("floor", {}), R.get("cold_start", {}), R.get("memory", {})
    ours, ref, flo = w.get("ours_shim"), w.get("reference"), fl.get("bwrap_python")
    fr = w.get("ours_fresh_socket")
    x = ratio(fr and fr["p50"], flo and flo["p50"])
    g.append(("warm hello world within 1.3× of the bwrap + Python floor", x is not None and x <= 1.3,
              "every call starting its own sandbox (prestart=0): p50 %s ms vs floor %s ms = %s; with a pre-started "
              "sandbox the call is below the floor" % (fmt_ms(fr), fmt_ms(flo), fmt_x(x))))
    x = ratio(ref and ref["p50"], ours and ours["p50"])
    wp = R.get("warm_hello_paced", {})
    po, pr = wp.get("ours_shim"), wp.get("reference")
    xp = ratio(pr and pr["p50"], po and po["p50"])
    g.append(("≥10× faster than the reference on warm hello world (calls at an agent's pace)", xp is not None and xp >= 10,
              ("%d ms apart: reference p50 %s ms / ours %s ms = %s. Back to back (not an agent's pattern: every call "
               "then waits for a sandbox to start, the floor of one throwaway sandbox per run): %s ms / %s ms = %s"
               % (PACE_GAP_MS, fmt_ms(pr), fmt_ms(po), fmt_x(xp), fmt_ms(ref), fmt_ms(ours), fmt_x(x)))
              if ref else "reference not measured"))
    ca, cf, cr = cs.get("ours_socket_activation"), cs.get("ours_shim_fallback"), cs.get("reference")
    xa = ratio(cr and cr["p50"], ca and ca["p50"])
    xf = ratio(cr and cr["p50"], cf and cf["p50"])
    g.append(("≥20× faster than the reference on cold start", xa is not None and xa >= 20,
              "socket activation %s (%s ms), shim fallback %s (%s ms), reference %s ms" % (
                  fmt_x(xa), fmt_ms(ca), fmt_x(xf), fmt_ms(cf), fmt_ms(cr)) if cr else "reference not measured"))
    idle = m.get("ours_idle_fresh_rss_kb")
    idle2 = m.get("ours_idle_after_runs_rss_kb")
    r1 = m.get("ours_idle_after_runs_rollup") or {}
    g.append(("daemon idle RSS ≤ 4 MB", idle is not None and max(idle, idle2 or 0) <= 4096,
              "%s KiB fresh, %s KiB after the runs%s" % (
                  idle, idle2,
                  "; of the latter %s KiB are pages of shared libraries (libc alone maps ~1.7 MB; shared with every "
                  "process using them), %s KiB the daemon's own anonymous memory; PSS %s KiB" % (
                      r1.get("Shared_Clean"), r1.get("Anonymous"), r1.get("Pss")) if r1 else "")))
    for key, want in (("numpy", 50), ("pandas", 50), ("matplotlib", 10)):
        d = R.get("warm_heavy", {}).get(key, {})
        o, r = d.get("ours"), d.get("reference")
        xh = ratio(r and r["p50"], o and o["p50"])
        g.append(("≥%d× faster than the reference on a warm %s run (warm imports)" % (want, key),
                  xh is not None and xh >= want,
                  "reference p50 %s ms / ours %s ms = %s" % (fmt_ms(r), fmt_ms(o), fmt_x(xh)) if r and o
                  else "not measured"))
    g.append(("≥5× faster than the reference on warm hello world back to back", x is not None and x >= 5,
              "reference p50 %s ms / ours %s ms = %s" % (fmt_ms(ref), fmt_ms(ours), fmt_x(x)) if ref else
              "reference not measured"))
    tpr = {t["clients"]: t["runs_per_s"] for t in R.get("throughput", {}).get("reference", [])}
    tpo = {t["clients"]: t["runs_per_s"] for t in R.get("throughput", {}).get("ours", [])}
    if 16 in tpr and 16 in tpo:
        g.append(("≥3× the reference's throughput at 16 clients", tpo[16] >= 3 * tpr[16],
                  "%.1f vs %.1f runs/s = %.2f×" % (tpo[16], tpr[16], tpo[16] / tpr[16])))
    cd = R.get("cold_deps", {})

    def first(key):
        c = cd.get(key, {})
        o, r = c.get("ours", {}), c.get("reference", {})
        return ratio(r.get("ok") and r.get("ms"), o.get("ok") and o.get("ms")), o.get("ms"), r.get("ms")
    for want, keys, what in ((1.5, ("newenv_numpy", "newenv_humanize"), "wheels cached"),
                             (1.0, ("cold_numpy", "cold_humanize"), "empty caches")):
        got = [(k, *first(k)) for k in keys if k in cd]
        if got:
            g.append(("first run with new dependencies ≥%.1f× the reference, %s" % (want, what),
                      all(x is not None and x >= want for _, x, _, _ in got),
                      "; ".join("%s: ours %s ms, reference %s ms = %s" % (
                          k.split("_", 1)[1], "%.0f" % o if o else "—", "%.0f" % r if r else "—", fmt_x(x))
                          for k, x, o, r in got)))
    pl = R.get("print_loop", {})
    if pl.get("ours") and pl.get("reference"):
        o, r = pl["ours"]["p50"], pl["reference"]["p50"]
        g.append(("print-heavy loop no slower than the reference", o <= r,
                  "p50 ours %.0f ms, reference %.0f ms = %s" % (o, r, fmt_x(ratio(r, o)))))
    runs = (R.get("cleanup") or {}).get("runs") or []
    if runs:
        def one(x):
            d, q = x.get("during") or {}, x.get("quiet") or {}
            return ("%d environments: max %s ms at %s s of the cleanup's %s s, p99 %s ms, %s of %s pings over 10 ms "
                    "(the quiet daemon just before: max %s ms, %s of %s over 10 ms); %s removed" % (
                        x["envs"], fmt_ms(d, "max"), "%.1f" % d["max_at_s"] if d.get("max_at_s") is not None else "—",
                        "%.1f" % x["walk_s"] if x.get("walk_s") is not None else "—", fmt_ms(d, "p99"),
                        d.get("over_10ms", "—"), d.get("n", "—"), fmt_ms(q, "max"), q.get("over_10ms", "—"),
                        q.get("n", "—"), x.get("removed")))
        g.append(("no stall: a ping during a store cleanup of hundreds of environments under 10 ms",
                  all((x.get("during") or {}).get("max") is not None and x["during"]["max"] < 10 and
                      x.get("removed") == x["envs"] for x in runs),
                  "; ".join(one(x) for x in runs)))
    C = R.get("corpus") or {}
    for m, label, want in CORPUS_GOALS if C.get("scripts") else ():
        x = C["summary"].get(m)
        g.append(("real-world scripts (bench/corpus/): %s ≥%.1f× the reference, median over the corpus" % (label, want),
                  x is not None and x >= want,
                  "median of reference ÷ ours over %s scripts: %s (per script in \"Real-world scripts\")"
                  % (C["summary"].get(m + "_n", 0), fmt_x(x))))
    tp = {t["clients"]: t["runs_per_s"] for t in R.get("throughput", {}).get("ours", [])}
    ncpu = R["machine"]["nproc"]
    if 1 in tp and 4 in tp:
        sc = tp[4] / tp[1]
        busy = {t["clients"]: t.get("machine_cpu_busy") for t in R["throughput"]["ours"]}
        b1, b4 = busy.get(1), busy.get(4)
        # Scaling with cores until the CPU is saturated: either the runs grow with the cores, or they grow with
        # the CPU put to work and the machine is saturated at 4 clients (one client alone already keeps more than
        # one core busy: the next sandbox starts while the answer goes out).
        eff = sc / (b4 / b1) if b1 and b4 else None
        saturated = b4 is not None and b4 >= 0.85
        met = sc >= 0.8 * min(ncpu, 4) or (eff is not None and eff >= 0.8 and saturated)
        g.append(("throughput scales with cores", met,
                  "1→4 clients: %.1f → %.1f runs/s (%.2f×) on %d CPUs%s; 16 clients %.1f runs/s" % (
                      tp[1], tp[4], sc, ncpu,
                      "; the machine %.0f%% → %.0f%% busy (other work included): runs per busy CPU %.2f× %s" % (
                          100 * b1, 100 * b4, eff, "and saturated at 4 clients" if saturated else "(not saturated)")
                      if eff is not None else "", tp.get(16, 0))))
    return g


def write_markdown(path, R, table, goal_rows):
    M = R["machine"]
    V = R["versions"]
    L = ["# Benchmark results", "",
         "Produced by `make bench` (bench/run.py) on %s%s. Numbers are from one run on this machine; "
         "they are not a test and nothing fails on them. Raw data: `bench/results/latest.json`; "
         "plot: `bench/results/latest.svg`." % (R["date"], " (BENCH_QUICK=1, small counts)" if R["quick"] else ""), "",
         "![results](results/latest.svg)", "",
         "## Machine", "",
         "- CPUs: %s × %s" % (M["nproc"], M["cpu"]),
         "- Memory: %s" % M.get("memory"),
         "- Kernel: %s" % M["kernel"],
         "- Debian: %s" % M["debian"],
         "- Load average (1, 5, 15 min) at the start / end of the run: %s / %s" % (R.get("loadavg_start"), R.get("loadavg_end")), "",
         "## Versions", ""]
    for k, v in V.items():
        L.append("- %s: %s" % (k, v))
    L += ["", "## Setup", ""]
    for s in R["setup"]:
        L.append("- " + s)
    L += ["", "## Results", ""] + table + ["", "Ratios in the last column are reference ÷ ours for times and ours ÷ reference "
                                           "for throughput: above 1× means ours is better.", "", "## Goals", "",
                                           "| goal | met | numbers |", "|---|---|---|"]
    for name, ok, detail in goal_rows:
        L.append("| %s | %s | %s |" % (name, "yes" if ok else "**no**", detail))
    L += ["", "## Where the milliseconds go (one warm hello world)", ""]
    fl = R.get("floor", {})
    w = R.get("warm_hello", {})
    for key, what in (("profile", "in a pre-started sandbox (the default; what a call at an agent's pace gets)"),
                      ("profile_fresh", "that starts its own sandbox (prestart=0; what back-to-back calls pay)")):
        P = R.get(key, {})
        if P.get("segments"):
            L.append("A warm hello world %s, `strace -f -ttt` attached to the daemon (tracing slows every step; read "
                     "the shares, not the absolute values): the traced call took %.1f ms end to end at the client."
                     % (what, P["straced_ms"]))
            L.append("")
            L.append("| from | to | ms (traced) |")
            L.append("|---|---|---:|")
            for seg in P["segments"]:
                L.append("| %s | %s | %.2f |" % (seg["from"], seg["to"], seg["ms"]))
            L.append("")
        elif P.get("error"):
            L.append("Profile of a run %s: %s." % (what, P["error"]))
            L.append("")
    ours, so = w.get("ours_shim"), w.get("ours_socket")
    if ours and fl.get("python") and fl.get("bwrap_python"):
        py, bw, bm = fl["python"]["p50"], fl["bwrap_python"]["p50"], (fl.get("bwrap_minimal") or {}).get("p50")
        L.append("Untraced, from the floors measured in the same run (p50):")
        L.append("")
        L.append("- Python start-up and the script (`python -I`, host): %.1f ms" % py)
        if bm:
            L.append("- bubblewrap with a minimal argv (user + mount namespace, /usr only): +%.1f ms" % (bm - py))
            L.append("- our full sandbox argv (all namespaces, tmpfs mounts, seccomp, …) over the minimal bwrap: +%.1f ms" % (bw - bm))
        else:
            L.append("- bubblewrap with our argv: +%.1f ms" % (bw - py))
        fr = w.get("ours_fresh_socket")
        if fr:
            L.append("- the daemon (request parsing, environment lookup, fork, reply) and the client round trip on "
                     "the socket, a sandbox started per call: %+.1f ms (differences under ~1 ms are noise here)"
                     % (fr["p50"] - bw))
        if so:
            L.append("- the shim's stdio ↔ socket pump: %+.1f ms" % (ours["p50"] - so["p50"]))
        if fr and fr.get("server_run_ms_mean") is not None:
            L.append("- the daemon's own accounting (structuredContent means, a sandbox per call): prepare %.2f ms, "
                     "run %.2f ms, duration %.2f ms" % (fr["server_prepare_ms_mean"], fr["server_run_ms_mean"],
                                                        fr["server_duration_ms_mean"]))
        L.append("")
    CS = R.get("cpu_split", {})
    if CS.get("cpu_share_by_command_pct"):
        sh = CS["cpu_share_by_command_pct"]
        L.append("Where the CPU goes over %d warm hello worlds (`perf record -p <daemon>`, children included, "
                 "share of samples by command): %s." % (CS["runs"], ", ".join(
                     "%s %.0f%%" % (k.replace("mcp-python-sand", "daemon (and its child before exec)"), v)
                     for k, v in sorted(sh.items(), key=lambda kv: -kv[1]) if v >= 0.5)))
        if CS.get("bwrap_show_mountinfo_pct_of_all"):
            L.append("Of all samples, %.1f%% are the kernel formatting /proc/self/mountinfo for bwrap, which "
                     "re-reads it for every bind mount it makes read-only." % CS["bwrap_show_mountinfo_pct_of_all"])
        L.append("")
    AC = R.get("argv_costs")
    if AC and AC.get("parts"):
        L.append("What each part of our bwrap argv costs: the captured argv replayed with that part removed, "
                 "interleaved call by call, p50 (full argv: %.1f ms; differences under ~1 ms are within the noise on a shared 2-CPU machine):" % AC["full_p50_ms"])
        L.append("")
        L.append("| part removed | p50 without it (ms) | cost (ms) |")
        L.append("|---|---:|---:|")
        for a in sorted(AC["parts"], key=lambda a: -a["saves_ms"]):
            L.append("| %s | %.1f | %+.1f |" % (a["part"], a["p50_without_ms"], a["saves_ms"]))
        L.append("")
    for a in R.get("analysis", []):
        L.append("- " + a)
    if R.get("model_cost"):
        L += ["", "## What the model pays", "",
              "Characters of JSON (compact, as the client receives them) that a conversation carries: the tools/list "
              "result once, a result on every call. Ours with its default configuration (one-shot tools; "
              "`persistent-sandboxes=yes` adds eleven more); the client speaks 2025-06-18, so results carry "
              "structuredContent.", ""] + model_cost_rows(R["model_cost"])
        sb = R["model_cost"].get("ours_with_persistent_sandboxes")
        if sb:
            L += ["", "Ours with `persistent-sandboxes=yes`: %d tools, a tools/list of %d characters."
                  % (sb["tools"], sb["tools_list_chars"])]
        st = (R["model_cost"].get("ours") or {}).get("hello_structured")
        if st is not None:
            L += ["", "Our hello world's structuredContent: `%s`" % json.dumps(st, separators=(",", ":"))]
    L += corpus_lines(R)
    L += ["", "## Notes", ""]
    for n in R["notes"]:
        L.append("- " + n)
    L.append("")
    # The section bench-noisy (noisy.py) writes stays as it was.
    try:
        with open(path) as f:
            old = f.read()
        i = old.find("\n## Noisy neighbour")
        if i >= 0:
            L.append(old[i + 1:].rstrip("\n") + "\n")
    except OSError:
        pass
    with open(path, "w") as f:
        f.write("\n".join(L))


# ---- main --------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--work", required=True, help="work dir (caches the reference venv and our store)")
    ap.add_argument("--out", required=True, help="bench/ directory that receives RESULTS.md and results/")
    ap.add_argument("--uv", default=None,
                    help="uv for the reference and for our daemon (default: /usr/local/bin/uv, else PATH); the "
                         "reference runs it inside its sandbox, so it must live under /usr")
    ap.add_argument("--bwrap", default=shutil.which("bwrap") or "/usr/bin/bwrap")
    ap.add_argument("--render-only", action="store_true",
                    help="re-write RESULTS.md and the plot from results/latest.json, measure nothing")
    args = ap.parse_args()
    if args.render_only:
        return render(json.load(open(os.path.join(args.out, "results", "latest.json"))), args.out)
    if not args.uv:
        args.uv = "/usr/local/bin/uv" if os.access("/usr/local/bin/uv", os.X_OK) else (shutil.which("uv") or "uv")
    args.daemon, args.shim = os.path.abspath(args.daemon), os.path.abspath(args.shim)
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    ours_work = os.path.join(work, "ours")
    os.makedirs(ours_work, exist_ok=True)
    ref_work = os.path.join(work, "reference")
    os.makedirs(ref_work, exist_ok=True)
    t_begin = time.monotonic()
    global T_BEGIN
    T_BEGIN = t_begin

    R = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "quick": QUICK,
         "counts": {"warm_hello": N_HELLO, "warm_deps": N_DEPS, "cold_reps": COLD_REPS,
                    "throughput_seconds": TP_SECONDS, "idle_connections": N_IDLE_CONNECTIONS},
         "notes": notes, "setup": []}
    R["loadavg_start"] = loadavg()
    mem = read_first("/proc/meminfo", "MemTotal")
    R["machine"] = {"nproc": os.cpu_count(), "cpu": read_first("/proc/cpuinfo", "model name"),
                    "kernel": platform.release(), "debian": read_first("/etc/debian_version") or "n/a",
                    "memory": mem}
    R["versions"] = {
        "mcp-python-sandboxd": run_text([args.daemon, "--version"]).splitlines()[0],
        "reference": "%s %s (PyPI)" % (REFERENCE_PACKAGE, REFERENCE_VERSION),
        "uv": run_text([args.uv, "--version"]),
        "bwrap": run_text([args.bwrap, "--version"]),
        "bench client Python": platform.python_version(),
    }
    log("mcp-python-sandbox benchmark%s — %s, %s CPUs, kernel %s" % (" (quick)" if QUICK else "", R["machine"]["cpu"],
                                                                       R["machine"]["nproc"], R["machine"]["kernel"]))
    ours = Ours(args, ours_work)
    cache = os.path.join(ours_work, "cache")
    daemon = None
    ref = Reference(ref_work, args.uv)
    do_ref = os.environ.get("BENCH_SKIP_REFERENCE", "") in ("", "0")
    ref_ok = False
    if ONLY:
        return main_only(args, R, ours, ours_work, cache, ref, do_ref)
    try:
        # -- the reference: install, find how it can run here ---------------------
        if do_ref:
            log("[reference] setting up")
            ref_ok = ref.install()
            if not ref_ok:
                note("the reference cannot run here: " + ref.error)
            else:
                R["versions"]["reference server Python"] = run_text([os.path.join(ref.venv, "bin", "python"), "--version"])
        else:
            note("BENCH_SKIP_REFERENCE set: the reference was not measured")

        # -- capture our bwrap argv; floors ----------------------------------------
        log("[floor] capturing the daemon's bwrap argv")
        argv, fds, text = capture_argv(ours, cache, args.bwrap)
        R["sandbox_argv"] = argv
        py = next((a for a in argv if a.endswith("/bin/python")), None)
        # The run sees its environment at /venv: the interpreter on the host is below what is bound there.
        for i in range(len(argv) - 2):
            if py and argv[i] == "--ro-bind" and argv[i + 2] == "/venv" and py.startswith("/venv/"):
                py = argv[i + 1] + py[len("/venv"):]
        py_real = os.path.realpath(py) if py else sys.executable
        our_pyver = run_text([py_real, "-c", "import platform; print(platform.python_version())"])
        R["versions"]["Python running the scripts (ours)"] = "%s (%s)" % (our_pyver, py_real)
        log("  interpreter %s (%s), %d argv words" % (py_real, our_pyver, len(argv)))
        # Minimal bwrap: a user + mount namespace, /usr and the /lib, /bin symlinks, nothing else.
        minimal = [args.bwrap, "--ro-bind", "/usr", "/usr"]
        for i, a in enumerate(argv):
            if a == "--symlink":
                minimal += argv[i:i + 3]
        minimal += [py_real, "-I", "-c", "pass"]
        R["floor_minimal_argv"] = minimal

        def floor_call(fn, expect=None):
            def call():
                p = fn()
                return p.returncode == 0 and (expect is None or expect in p.stdout)
            return call
        floors = [
            ("floor_bwrap_python", floor_call(lambda: run_captured(argv, fds), b"hello")),
            ("floor_python", floor_call(lambda: subprocess.run([py_real, "-I", "-c", "pass"], stdout=subprocess.PIPE,
                                                               stderr=subprocess.PIPE))),
            ("floor_bwrap_minimal", floor_call(lambda: subprocess.run(minimal, stdout=subprocess.PIPE,
                                                                      stderr=subprocess.PIPE))),
        ]
        if not floors[0][1]():
            raise RuntimeError("replaying the captured bwrap argv failed: %s" % run_captured(argv, fds).stderr[-400:])
        R["setup"].append("Floor: the interpreter our runs use (`%s`), `-I -c pass` on the host; then the exact bwrap "
                          "argv the daemon ran for a warm hello world (captured with `--bwrap=` pointing at a "
                          "recording wrapper, seccomp program and script fds replayed from copies), started from "
                          "Python's subprocess like the other contenders' processes; and a minimal bwrap (user and "
                          "mount namespaces, /usr only) around `python -I -c pass`. The floors are timed in the same "
                          "interleaved loop as the servers' warm hello world." % py_real)

        # -- cold start ------------------------------------------------------------
        log("[cold start] ours, socket activation (%d)" % COLD_REPS)
        R["cold_start"] = {}
        times = []
        for i in range(COLD_REPS + 1):
            dt, pid = activation_cold_start(ours, cache, str(i))
            stop(pid)
            if i > 0:        # the first one warms the page cache
                times.append(dt)
        R["cold_start"]["ours_socket_activation"] = summary(times)
        log("  p50 %.1f ms" % R["cold_start"]["ours_socket_activation"]["p50"])

        log("[cold start] ours, shim --stdio fallback (%d)" % COLD_REPS)
        times = []
        for i in range(COLD_REPS + 1):
            t0 = time.monotonic()
            c = Client.spawn([args.shim], env=ours.shim_env(),
                             stderr=open(os.path.join(ours.logs, "shim-fallback.log"), "a"))
            started.append(c.proc)
            c.initialize()
            dt = time.monotonic() - t0
            c.close()
            if i > 0:
                times.append(dt)
        R["cold_start"]["ours_shim_fallback"] = summary(times)
        log("  p50 %.1f ms" % R["cold_start"]["ours_shim_fallback"]["p50"])
        R["setup"].append("Cold start, ours: (a) a harness plays systemd: it binds the socket, the client connects "
                          "and sends `initialize`, the harness sees the socket readable and starts the daemon with "
                          "LISTEN_FDS=1/LISTEN_PID; timed from connect to the `initialize` reply; (b) the shim with "
                          "no daemon reachable execs `mcp-python-sandboxd --stdio`; timed from spawn to the reply. "
                          "One untimed start first, so the page cache is warm for both servers.")

        # -- our daemon, running ----------------------------------------------------
        log("[ours] starting the daemon (--listen)")
        daemon, sock = ours.start(cache, "main")
        time.sleep(1.0)    # start-up work (self-test, interpreter probe) done
        R["memory"] = {"ours_idle_fresh_rss_kb": rss_kb(daemon.pid), "ours_idle_fresh_pss_kb": pss_kb(daemon.pid),
                       "ours_idle_fresh_rollup": rollup_kb(daemon.pid)}

        times = []
        for i in range(COLD_REPS + 1):
            t0 = time.monotonic()
            c = ours.client_shim(sock)
            c.initialize()
            dt = time.monotonic() - t0
            if i == 0:
                R["memory"]["shim_rss_kb"] = rss_kb(c.proc.pid)
            c.close()
            if i > 0:
                times.append(dt)
        R["cold_start"]["ours_shim_to_running_daemon"] = summary(times)

        # The same daemon without pre-started sandboxes: every call starts its own, the path the floor measures.
        fresh_daemon, fresh_sock = ours.start(cache, "fresh", ["--prestart=0"])
        clients = [("ours_shim", ours.client_shim(sock)), ("ours_socket", Client.connect(sock)),
                   ("ours_fresh_socket", Client.connect(fresh_sock))]
        ref_client = None
        if do_ref and ref_ok:
            ref.python_version = ref_python_version(ref, our_pyver)
            ref_client = ref.client()
            clients.append(("reference", ref_client))
        for _, x in clients:
            x.initialize()
        log("[model] the tool list and a hello world's result, as the client receives them")
        R["model_cost"] = {"ours": model_cost(clients[1][1])}
        if ref_client:
            R["model_cost"]["reference"] = model_cost(ref_client)
        for line in model_cost_rows(R["model_cost"]):
            log("  " + line)
        if ref_client:
            time.sleep(0.5)
            R["memory"]["reference_idle_rss_kb"] = rss_kb(ref_client.proc.pid)
            R["memory"]["reference_idle_pss_kb"] = pss_kb(ref_client.proc.pid)
        contenders = [(n, mcp_call(x, HELLO, "hello")) for n, x in clients] + floors
        log("[warm] hello world, %d calls each, interleaved in chunks of 10: %s" % (
            N_HELLO, ", ".join(n for n, _ in contenders)))
        res = interleaved_latency(contenders, N_HELLO)
        for n, call in contenders:
            if getattr(call, "last_error", None):
                note("%s: a call failed: %s" % (n, call.last_error))
        R["warm_hello"] = {k: v for k, v in res.items() if not k.startswith("floor_")}
        R["floor"] = {k[len("floor_"):]: v for k, v in res.items() if k.startswith("floor_")}
        for k, v in list(R["warm_hello"].items()) + list(R["floor"].items()):
            if v:
                log("  %-17s p50 %.1f  p95 %.1f  p99 %.1f ms  (%d failures)" % (k, v["p50"], v["p95"], v["p99"], v["failures"]))
        paced = [(n, call) for n, call in contenders if n in ("ours_shim", "reference")]
        log("[warm] hello world at an agent's pace: %d calls each, %d ms apart" % (N_PACED, PACE_GAP_MS))
        R["warm_hello_paced"] = paced_latency(paced, N_PACED, PACE_GAP_MS / 1000.0)
        for k, v in R["warm_hello_paced"].items():
            log("  %-17s p50 %.1f  p95 %.1f  p99 %.1f ms" % (k, v["p50"], v["p95"], v["p99"]))
        if ref_client:
            R["memory"]["reference_idle_after_runs_rss_kb"] = rss_kb(ref_client.proc.pid)
            ref_client.close()
        clients[0][1].close()
        clients[2][1].close()
        stop(fresh_daemon)
        c = clients[1][1]

        log("[ours] warm runs with dependencies (%d each)" % N_DEPS)
        R["setup"].append("Warm runs with dependencies, ours: measured once the daemon has compiled the "
                          "environment's bytecode, which it does on the side right after building it (runs before "
                          "that, the first one included, import from source).")
        R["warm_deps"] = {"six": {}, "numpy": {}}
        c2 = ours.client_shim(sock)
        c2.initialize()
        R["warm_deps"]["six"]["ours"] = warm_latency(c2, SIX, N_DEPS, deps=["six"], warmup=2, expect="1.",
                                                     store=cache)
        R["warm_deps"]["numpy"]["ours"] = warm_latency(c2, NUMPY, N_DEPS, deps=["numpy"], warmup=2, expect=".",
                                                       store=cache)
        c2.close()
        log("  six p50 %.1f ms, numpy p50 %.1f ms" % (R["warm_deps"]["six"]["ours"]["p50"],
                                                      R["warm_deps"]["numpy"]["ours"]["p50"]))

        log("[ours] warm heavy imports, %d calls each, %.0f s apart" % (N_HEAVY, HEAVY_GAP_S))
        R["warm_heavy"] = {}
        c2 = ours.client_shim(sock)
        c2.initialize()
        for key, script, deps, expect in HEAVY:
            try:
                R["warm_heavy"].setdefault(key, {})["ours"] = heavy_latency(c2, script, deps, N_HEAVY, HEAVY_GAP_S,
                                                                            expect, store=cache)
                log("  %s p50 %.1f ms (%d of %d with warm imports)" % (
                    key, R["warm_heavy"][key]["ours"]["p50"], R["warm_heavy"][key]["ours"]["warm_imports"], N_HEAVY))
            except MCPError as e:
                note("our warm run with %s failed: %s" % (key, e))
        c2.close()

        log("[ours] memory: %d idle connections" % N_IDLE_CONNECTIONS)
        c.close()
        time.sleep(0.3)
        R["memory"]["ours_idle_after_runs_rss_kb"] = rss_kb(daemon.pid)
        R["memory"]["ours_idle_after_runs_rollup"] = rollup_kb(daemon.pid)
        base = rss_kb(daemon.pid)
        conns = []
        for _ in range(N_IDLE_CONNECTIONS):
            x = Client.connect(sock)
            x.initialize()
            conns.append(x)
        time.sleep(0.3)
        after = rss_kb(daemon.pid)
        R["memory"]["ours_per_connection_kb"] = (after - base) / float(N_IDLE_CONNECTIONS)
        R["memory"]["ours_with_50_connections_rss_kb"] = after
        for x in conns:
            x.close()

        log("[ours] throughput")
        R["throughput"] = {"ours": []}
        for n in CLIENTS:
            t = throughput(lambda i: ours.client_shim(sock), n, TP_SECONDS, lambda: [daemon.pid])
            R["throughput"]["ours"].append(t)
            log("  %2d clients: %.1f runs/s (p50 %.0f ms, %d failures), peak daemon RSS %d KiB, daemon CPU %.2f ms/run, "
                "machine %.0f%% busy" % (n, t["runs_per_s"], t["latency_ms"]["p50"] if t["latency_ms"] else 0,
                                         t["failures"], t["peak_server_rss_kb"], t["server_cpu_ms_per_run"] or 0,
                                         100 * t["machine_cpu_busy"]))
        R["memory"]["ours_load16_rss_kb"] = R["throughput"]["ours"][-1]["peak_server_rss_kb"]
        R["memory"]["ours_load16_tree_rss_kb"] = R["throughput"]["ours"][-1]["peak_tree_rss_kb"]

        n_abl = 10 if QUICK else 100
        log("[floor] what each part of the sandbox argv costs (%d runs each, interleaved)" % n_abl)
        R["argv_costs"] = measure_ablations(argv, fds, n_abl)
        for a in R["argv_costs"]["parts"]:
            log("  %-55s %+.1f ms" % (a["part"], a["saves_ms"]))

        log("[ours] profiling one warm run in a pre-started sandbox with strace")
        R["profile"] = profile_prestarted_run(daemon.pid, sock, os.path.join(ours_work, "strace.txt"))
        for s in R["profile"].get("segments", []):
            log("  %-26s → %-26s %7.2f ms" % (s["from"], s["to"], s["ms"]))
        log("[ours] profiling one warm run that starts its sandbox (prestart=0) with strace")
        fproc, fsock = ours.start(cache, "profile-fresh", ["--prestart=0"])
        try:
            R["profile_fresh"] = profile_fresh_run(fproc.pid, fsock, os.path.join(ours_work, "strace-fresh.txt"))
        finally:
            stop(fproc)
        for s in R["profile_fresh"].get("segments", []):
            log("  %-26s → %-26s %7.2f ms" % (s["from"], s["to"], s["ms"]))
        log("[ours] CPU split of warm runs with perf")
        R["cpu_split"] = perf_cpu_split(daemon.pid, sock, 50 if QUICK else 200, os.path.join(ours_work, "perf.data"))
        log("  " + json.dumps(R["cpu_split"]))
        stop(daemon)
        daemon = None

        # -- first run with new dependencies; the print loop (both servers, interleaved) --------
        R["cold_deps"] = {}
        if os.environ.get("BENCH_NO_COLD_DEPS", "") in ("", "0"):
            log("[both] first run with new dependencies (%d repetitions, fresh caches each)" % N_FIRST)
            first_runs(R, ours, ours_work, ref, do_ref and ref_ok)
        log("[both] print-heavy loop (%d runs each)" % N_PRINT)
        print_loop(R, ours, ours_work, cache, ref, do_ref and ref_ok)
        if corpus_wanted():
            log("[both] real-world scripts (bench/corpus/, %d repetitions)" % CORPUS_REPS)
            corpus(R, ours, ours_work, ref, do_ref and ref_ok)
        log("[ours] ping during a store cleanup of %s environments" % " and ".join(map(str, CLEANUP_ENVS)))
        cleanup_ping(R, ours, ours_work)

        # -- the reference ---------------------------------------------------------------
        if do_ref and ref_ok:
            R["versions"]["Python running the scripts (reference)"] = "--python-version %s" % ref.python_version
            R["setup"].append("Reference: `%s` with HOME=%s (its uv cache is $HOME/.cache/uv), PATH with uv and bwrap, "
                              "UV_SYSTEM_CERTS=1. `--no-warm-cache` because its cache warming runs `uv pip download`, "
                              "which does not exist, and would only add a failing background process."
                              % (" ".join(ref.argv()), ref.home))
            R["setup"].append("Reference runs with dependencies carry `[tool.uv] system-certs = true` in a PEP 723 "
                              "block: the reference gives uv a clean environment without UV_SYSTEM_CERTS, and this "
                              "machine's TLS-inspecting proxy needs the system CAs. Packages go in its `dependencies` "
                              "argument, as for ours.")

            log("[reference] cold start (%d)" % COLD_REPS)
            times = []
            for i in range(COLD_REPS + 1):
                t0 = time.monotonic()
                c = ref.client()
                c.initialize()
                dt = time.monotonic() - t0
                c.close()
                if i > 0:
                    times.append(dt)
            R["cold_start"]["reference"] = summary(times)
            log("  p50 %.1f ms" % R["cold_start"]["reference"]["p50"])

            c = ref.client()
            c.initialize()
            log("[reference] warm runs with dependencies (%d each)" % N_DEPS)
            for key, body, deps in (("six", SIX, ["six"]), ("numpy", NUMPY, ["numpy"])):
                try:
                    R["warm_deps"][key]["reference"] = warm_latency(c, ref.deps_script(body), N_DEPS, deps=deps,
                                                                    warmup=2, expect=".")
                    log("  %s p50 %.1f ms" % (key, R["warm_deps"][key]["reference"]["p50"]))
                except MCPError as e:
                    note("reference warm run with %s failed: %s" % (key, e))
            c.close()

            log("[reference] warm heavy imports, %d calls each, %.0f s apart" % (N_HEAVY, HEAVY_GAP_S))
            c = ref.client()
            c.initialize()
            for key, script, deps, expect in HEAVY:
                try:
                    R.setdefault("warm_heavy", {}).setdefault(key, {})["reference"] = heavy_latency(
                        c, ref.deps_script(script), deps, N_HEAVY, HEAVY_GAP_S, expect)
                    log("  %s p50 %.1f ms" % (key, R["warm_heavy"][key]["reference"]["p50"]))
                except MCPError as e:
                    note("reference warm run with %s failed: %s" % (key, e))
            c.close()

            log("[reference] throughput (one server process per client, as it is deployed)")
            R["throughput"]["reference"] = []
            for n in CLIENTS:
                servers = []

                def mk(i, servers=servers):
                    cl = ref.client()
                    servers.append(cl.proc.pid)
                    return cl
                t = throughput(mk, n, TP_SECONDS, lambda servers=servers: list(servers))
                R["throughput"]["reference"].append(t)
                log("  %2d clients: %.1f runs/s (p50 %.0f ms, %d failures), peak RSS of the servers %d KiB, "
                    "server CPU %.2f ms/run, machine %.0f%% busy" % (
                        n, t["runs_per_s"], t["latency_ms"]["p50"] if t["latency_ms"] else 0, t["failures"],
                        t["peak_server_rss_kb"], t["server_cpu_ms_per_run"] or 0, 100 * t["machine_cpu_busy"]))
            R["memory"]["reference_load16_rss_kb"] = R["throughput"]["reference"][-1]["peak_server_rss_kb"]
            R["memory"]["reference_load16_tree_rss_kb"] = R["throughput"]["reference"][-1]["peak_tree_rss_kb"]

        # -- sizes ---------------------------------------------------------------------
        R["binaries"] = {"daemon": os.path.getsize(args.daemon), "shim": os.path.getsize(args.shim)}
        if shutil.which("strip"):
            for k, p in (("daemon", args.daemon), ("shim", args.shim)):
                with tempfile.NamedTemporaryFile(dir=work) as tf:
                    if subprocess.run(["strip", "-o", tf.name, p]).returncode == 0:
                        R["binaries"][k + "_stripped"] = os.path.getsize(tf.name)
    finally:
        stop(daemon)
        for p in started:
            stop(p, wait=5)

    R["loadavg_end"] = loadavg()
    try:
        if float(R["loadavg_start"].split()[0]) > 0.5 or float(R["loadavg_end"].split()[0]) > 2.5:
            note("the machine was not idle (load average %s at the start, %s at the end; the bench itself adds "
                 "up to ~2): other work shares these %d CPUs, so read the numbers with that in mind — the warm "
                 "hello world of both servers was measured interleaved so such load hits them alike."
                 % (R["loadavg_start"], R["loadavg_end"], os.cpu_count()))
    except (AttributeError, ValueError):
        pass

    R["elapsed_s"] = time.monotonic() - t_begin
    return render(R, args.out)


def main_only(args, R, ours, ours_work, cache, ref, do_ref):
    """BENCH_ONLY: measure only those parts; every other number is kept from results/latest.json."""
    try:
        with open(os.path.join(args.out, "results", "latest.json")) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = {}
    # The setup lines and notes of the parts measured now are replaced; those of the others stay.
    drop_setup = tuple(x for part, x in (("first_runs", "First run with new dependencies"),
                                         ("print_loop", "Print-heavy loop"), ("cleanup", "Ping during")) if part in ONLY)
    drop_notes = tuple(x for part, xs in (("first_runs", ("first run (",)), ("print_loop", ("print loop",)),
                                          ("corpus", ("corpus",)), ("cleanup", ("cleanup of",)))
                       if part in ONLY for x in xs)
    setup_keep = [x for x in old.get("setup", []) if not (drop_setup and x.startswith(drop_setup))]
    for k, v in old.items():
        if k not in ("date", "notes", "setup", "loadavg_start", "loadavg_end", "machine", "versions", "quick"):
            R.setdefault(k, v)
    for k, v in old.get("versions", {}).items():
        R["versions"].setdefault(k, v)
    R["setup"] = setup_keep
    notes.extend(n if n.startswith("(from the run of ") else "(from the run of %s) %s" % (old.get("date", "an earlier run"), n)
                 for n in old.get("notes", []) if "BENCH_ONLY" not in n and not any(x in n for x in drop_notes))
    note("this run measured only %s (BENCH_ONLY); the other rows are from the run of %s"
         % (", ".join(sorted(ONLY)), old.get("date", "an earlier run")))
    ref_ok = False
    try:
        if do_ref:
            ref_ok = ref.install()
            if not ref_ok:
                note("the reference cannot run here: " + ref.error)
            else:
                R["versions"]["reference server Python"] = run_text([os.path.join(ref.venv, "bin", "python"), "--version"])
                ref.python_version = (os.environ.get("BENCH_REF_PYTHON_VERSION") or
                                      (old.get("versions", {}).get("Python running the scripts (reference)", "").split()
                                       or [None])[-1] or
                                      run_text(["/usr/bin/python3", "-c",
                                                "import sys; print('%d.%d' % sys.version_info[:2])"]))
                R["versions"]["Python running the scripts (reference)"] = "--python-version %s" % ref.python_version
        if "first_runs" in ONLY:
            log("[both] first run with new dependencies (%d repetitions, fresh caches each)" % N_FIRST)
            first_runs(R, ours, ours_work, ref, ref_ok)
        if "print_loop" in ONLY:
            log("[both] print-heavy loop (%d runs each)" % N_PRINT)
            print_loop(R, ours, ours_work, cache, ref, ref_ok)
        if "corpus" in ONLY:
            log("[both] real-world scripts (bench/corpus/, %d repetitions)" % CORPUS_REPS)
            corpus(R, ours, ours_work, ref, ref_ok)
        if "cleanup" in ONLY:
            log("[ours] ping during a store cleanup of %s environments" % " and ".join(map(str, CLEANUP_ENVS)))
            cleanup_ping(R, ours, ours_work)
    finally:
        for p in started:
            stop(p, wait=5)
    R["loadavg_end"] = loadavg()
    R["elapsed_s"] = time.monotonic() - T_BEGIN
    return render(R, args.out)


def render(R, out):
    global notes
    notes = R["notes"]
    # -- analysis ----------------------------------------------------------------------
    A = []
    w, fl = R.get("warm_hello", {}), R.get("floor", {})
    so, sh, fr = w.get("ours_socket"), w.get("ours_shim"), w.get("ours_fresh_socket")
    if fr and fl.get("bwrap_python"):
        A.append("A warm hello world that starts its own sandbox spends %+.1f ms (p50) beyond the bwrap + Python "
                 "floor (%.1f ms): that is the daemon's own work plus the socket round trip, less the interpreter's "
                 "teardown and bwrap's exit, which the floor waits for and our answer does not (it goes out on the "
                 "script's end-of-run record)%s." % (
                     fr["p50"] - fl["bwrap_python"]["p50"], fl["bwrap_python"]["p50"],
                     "; the shim adds %+.1f ms" % (sh["p50"] - so["p50"]) if sh and so else ""))
    segs = {(x["from"], x["to"]): x["ms"] for x in R.get("profile_fresh", {}).get("segments", [])}
    pre = segs.get(("request read", "fork"))
    if pre is not None:
        A.append("A run that starts its own sandbox, in the daemon before the fork (parse, environment lookup, "
                 "argv, memfd): %.2f ms traced." % pre)
    bws = segs.get(("execve bwrap", "execve python"))
    if bws is not None:
        A.append("bwrap's set-up (namespaces, mounts, tmpfs, seccomp) before Python starts: %.2f ms traced." % bws)
    pys = segs.get(("execve python", "end-of-run record read"))
    if pys is not None:
        A.append("Python from execve to the end of the script: %.2f ms traced." % pys)
    segs = R.get("profile", {}).get("segments", [])
    if segs:
        A.append("In a pre-started sandbox, from the request read to the reply written: %.2f ms traced, of which "
                 "the script's own part (Python has the script → end-of-run record written) %.2f ms." % (
                     sum(x["ms"] for x in segs),
                     sum(x["ms"] for x in segs if x["from"] in ("Python has the script", "script printed"))))
    # What could be removed next.
    ref = w.get("reference")
    if fr and fl.get("python") and fl.get("bwrap_python"):
        AC = R.get("argv_costs", {}).get("parts", [])
        big = [a for a in sorted(AC, key=lambda a: -a["saves_ms"]) if a["saves_ms"] >= 1.0]
        A.append("A call that starts its own sandbox (back to back, or prestart=0) costs what starting a sandbox "
                 "costs: the daemon is not where the time goes (%+.1f ms of %.1f ms); Python's own start-up (%.1f ms) and bwrap (%.1f ms over bare Python%s) are. "
                 "At an agent's pace neither is on the request path: a pre-started sandbox (bwrap + `python -I`, "
                 "its compiler warmed, blocked reading the script from a pipe) takes the script, and the daemon "
                 "answers when the script's end-of-run record arrives (threads joined, atexit run, stdout and "
                 "stderr flushed), not when the interpreter and bwrap have torn down; the sandbox is then killed "
                 "and reaped in the background and its replacement started. What is left is the round trip, the "
                 "daemon's parsing and the script itself. Reference p50 %s."
                 % (fr["p50"] - fl["bwrap_python"]["p50"], fr["p50"], fl["python"]["p50"],
                    fl["bwrap_python"]["p50"] - fl["python"]["p50"],
                    "; biggest parts by ablation: " + ", ".join("%s %+.1f ms" % (a["part"], a["saves_ms"]) for a in big[:4])
                    if big else "",
                    "%.1f ms" % ref["p50"] if ref else "not measured"))
    cd = R.get("cold_deps", {})
    if cd:
        ld = R.get("cold_deps_load", {}).get("loadavg_1min") or []
        A.append("First runs with new dependencies: an environment is built in a fixed slot of the store (uv's "
                 "interpreter cache applies there), from a copy of what `uv venv` made for that Python the first "
                 "time (one uv process: `uv pip install --no-build`), with `--offline` first when uv's cache has a "
                 "page younger than PyPI's max-age for every name asked for (online again if that was not enough), "
                 "then verified, made read-only and renamed into place before the run; the reference lets `uv run "
                 "--script` install into its cache. The bytecode of our environments is compiled after they are in "
                 "place, on the side at idle priority, so the first run neither waits for it nor is slowed by it. "
                 "† rows resolve online: this machine's HTTPS proxy strips PyPI's cache headers, so each such "
                 "resolve fetches the index page again for both servers; the \"index from the cache\" rows show "
                 "the figures without that.%s" % (
                     " Load average (1 min) before each repetition: %s." % ", ".join("%.1f" % x for x in ld)
                     if ld else ""))
    R["analysis"] = A
    table = table_lines(R)
    goal_rows = goals(R)
    R["goals"] = [{"goal": n, "met": ok, "detail": d} for n, ok, d in goal_rows]

    out_dir = os.path.abspath(out)
    res_dir = os.path.join(out_dir, "results")
    os.makedirs(res_dir, exist_ok=True)
    with open(os.path.join(res_dir, "latest.json"), "w") as f:
        json.dump(R, f, indent=2, sort_keys=True)
    write_svg(os.path.join(res_dir, "latest.svg"), R)
    write_markdown(os.path.join(out_dir, "RESULTS.md"), R, table, goal_rows)

    log("")
    for line in table:
        log(line)
    log("")
    log("Goals:")
    for n, ok, d in goal_rows:
        log("  [%s] %s — %s" % ("met" if ok else "NOT met", n, d))
    log("")
    log("Wrote %s, %s and %s (%.0f s)." % (os.path.join(out_dir, "RESULTS.md"), os.path.join(res_dir, "latest.json"),
                                            os.path.join(res_dir, "latest.svg"), R["elapsed_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
