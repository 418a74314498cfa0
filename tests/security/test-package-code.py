#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A hostile package author's attacks on the environment store, each refused with negative evidence.

A wheel can install files anywhere below an environment's root (its
*.data/data/ files go there) and code that runs whenever an interpreter starts
on the environment (.pth files, modules). The daemon must never start such an
interpreter outside a sandbox (the bytecode compile included), must refuse an
environment whose layout a wheel bent, and must keep every environment
read-only on disk. Each test plants a payload that tries to write a marker on
the host and a .pth file into the shared bare environment (which would run in
every other user's hello world), and shows that the marker never appears, the
bare environment and every other environment are byte-identical afterwards,
and another user's hello world stays clean.

Wheels are built on the spot into the test's own flat index (uv --find-links,
offline). Needs $DAEMON, $SHIM, bubblewrap, uv and a Python >= 3.11; exit 77
without them.
"""

import hashlib
import os
import stat
import threading
import time

import mcptest
from mcptest import Daemon, at_exit, check, eq, main, need_uv, newest_python, scratch, test, wait_until
from wheels import build_wheel

_STATE = {}


def index():
    if "index" not in _STATE:
        d = scratch("mcpt-pkg-index-")
        os.chmod(d, 0o755)
        _STATE["index"] = d
    return _STATE["index"]


def daemon():
    d = _STATE.get("daemon")
    if d is not None and d.alive():
        return d
    need_uv()
    newest_python()
    index()
    d = Daemon(args=[f"--find-links={index()}", "--offline", "--tmpfs-size=32M", "--max-runs=4"])
    at_exit(d.close)
    _STATE["daemon"] = d
    return d


def client(nobody=False):
    d = daemon()
    c = d.nobody_client() if nobody else d.client()
    if not nobody:
        c.initialize()
        at_exit(lambda: c.proc.poll() is None and c.kill())
    return c


def run(c, script, deps=()):
    r = c.call_tool("execute_python", {"script": script, "dependencies": list(deps),
                                       "python_version": newest_python(), "timeout_seconds": 60}, timeout=180)
    return r, r.get("structuredContent") or {}


def envs_dir():
    return os.path.join(daemon().cache_dir, "envs")


def env_keys():
    return sorted(e for e in os.listdir(envs_dir()) if not e.startswith("."))


def compiled(key):
    return os.path.exists(os.path.join(envs_dir(), key, ".mcp-python-sandbox-compiled"))


def bare_env():
    """The bare environment of the test Python: made by a hello world, its bytecode compiled."""
    c = client()
    r, st = run(c, "print('hi')")
    check(not r.get("isError"), c.text(r))
    key = st["environment"]["key"]
    wait_until(lambda: compiled(key), 60, "the bare environment's bytecode compile")
    site = os.path.join(envs_dir(), key, "lib", "python" + newest_python(), "site-packages")
    check(os.path.isdir(site), f"no {site}")
    return key, site


def tree_digest():
    """Every environment's every entry: its type, mode, owner and contents (a file's bytes, a link's target).
    Not the store's own dot-named entries beside them (builds, compiles and their lock files), which come and go
    with the daemon's background work: a compile's lock file outlives the marker that says it is done."""
    out = {}
    for top, dirs, files in os.walk(envs_dir()):
        if top == envs_dir():
            dirs[:] = [x for x in dirs if not x.startswith(".")]
            files = [x for x in files if not x.startswith(".")]
        for name in dirs + files:
            p = os.path.join(top, name)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    body = hashlib.sha256(f.read()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                body = os.readlink(p)
            else:
                body = ""
            out[os.path.relpath(p, envs_dir())] = (st.st_mode, st.st_uid, body)
    return out


def host_marker(what):
    """A path that exists only on the host: in a directory anyone may write (so that nothing but the sandbox
    stands in the way), which the sandbox does not have."""
    d = scratch("mcpt-pkg-marker-")
    os.chmod(d, 0o777)
    return os.path.join(d, f"marker-{what}")


def payload(marker, bare_site):
    """Python that tries both writes with only builtin modules (it may run where no standard library is)."""
    return (
        "import posix\n"
        "def _attempt(path, data):\n"
        "    try:\n"
        "        fd = posix.open(path, posix.O_WRONLY | posix.O_CREAT | posix.O_TRUNC, 0o644)\n"
        "        posix.write(fd, data)\n"
        "        posix.close(fd)\n"
        "        return 'written'\n"
        "    except OSError as e:\n"
        "        return 'refused:%d' % e.errno\n"
        f"_host = _attempt({marker!r}, b'package code ran here')\n"
        f"_bare = _attempt({bare_site + '/zz-planted.pth'!r}, b'import sys; print(\"PLANTED\", file=sys.stderr)\\n')\n"
    )


def hello_of_another_user_is_clean():
    c = client(nobody=True)
    r, st = run(c, "print('hello')")
    check(not r.get("isError"), c.text(r))
    eq(st.get("stdout"), "hello\n", "another user's hello world: stdout")
    eq(st.get("stderr", ""), "", "another user's hello world: stderr")
    c.close()


class CompileWatch:
    """Samples the host's processes while a build and its bytecode compile run: every compileall the daemon
    started, with its host uid and whether bwrap is among its ancestors."""

    def __init__(self, daemon_pid):
        self.daemon_pid = daemon_pid
        self.seen = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _ancestors(self, pid):
        """[(pid, comm), ...] from pid's parent up."""
        out = []
        for _ in range(64):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    pid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{pid}/comm") as f:
                    out.append((pid, f.read().strip()))
            except (OSError, ValueError):
                break
            if pid <= 1:
                break
        return out

    def _run(self):
        while not self._stop.is_set():
            for p in os.listdir("/proc"):
                if not p.isdigit() or int(p) in self.seen:
                    continue
                try:
                    with open(f"/proc/{p}/cmdline", "rb") as f:
                        argv = f.read().split(b"\0")
                    if b"compileall" not in argv:
                        continue
                    with open(f"/proc/{p}/status") as f:
                        uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
                    with open(f"/proc/{p}/stat") as f:
                        policy = int(f.read().rsplit(")", 1)[1].split()[38])   # field 41, after comm
                    cgroups = mcptest.own_cgroups(p)
                except (OSError, StopIteration, IndexError, ValueError):
                    continue
                up = self._ancestors(int(p))
                if any(a == self.daemon_pid for a, _ in up):   # ours, not another daemon's on this machine
                    # bwrap itself (its argv names the command), or what runs in it.
                    sandboxed = argv[0].endswith(b"/bwrap") or any(name == "bwrap" for _, name in up)
                    self.seen[int(p)] = (uid, sandboxed, argv[:3], up, policy, cgroups)
            time.sleep(0.002)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


@test
def a_wheel_that_replaces_pyvenv_cfg_is_refused_and_nothing_of_it_runs():
    """The attack of the containment issue: a wheel's data files replace pyvenv.cfg (home = a directory of the
    attacker's) and add lib/pythonX.Y/encodings and os.py there, so that an interpreter started on the
    environment, even with -I -S, takes them for its standard library. Here home points at a stand-in of that
    directory outside the environment (the real attacker computes the environment's own path)."""
    bare_key, bare_site = bare_env()
    minor = newest_python()
    marker = host_marker("data")

    fake_prefix = scratch("mcpt-pkg-home-")
    os.makedirs(os.path.join(fake_prefix, "bin"))
    lib = os.path.join(fake_prefix, "lib", "python" + minor)
    os.makedirs(os.path.join(lib, "encodings"))
    open(os.path.join(lib, "os.py"), "w").close()
    code = payload(marker, bare_site)
    with open(os.path.join(lib, "encodings", "__init__.py"), "w") as f:
        f.write(code)
    for top, dirs, files in os.walk(fake_prefix):
        for x in dirs:
            os.chmod(os.path.join(top, x), 0o755)
        for x in files:
            os.chmod(os.path.join(top, x), 0o644)

    data = "mcpt_evil_data-1.0.data/data"
    build_wheel(index(), "mcpt-evil-data", "1.0", extra_files=[
        (f"{data}/pyvenv.cfg", f"home = {fake_prefix}/bin\ninclude-system-site-packages = false\n".encode()),
        (f"{data}/lib/python{minor}/os.py", b""),
        (f"{data}/lib/python{minor}/encodings/__init__.py", code.encode()),
    ])
    before = tree_digest()

    c = client()
    with CompileWatch(daemon().proc.pid):
        r, st = run(c, "import mcpt_evil_data\nprint('installed')", ["mcpt-evil-data"])
        # Whatever would have started an interpreter on it has had its chance.
        time.sleep(3)
    text = c.text(r)
    check(r.get("isError") is True, f"the environment was accepted: {text}")
    check("installed" not in (st.get("stdout") or ""), f"the script ran: {text}")
    for word in ("mcpt_evil_data-1.0", "pyvenv.cfg", "refused"):
        check(word in text, f"the error should name {word!r}: {text}")

    check(not os.path.exists(marker), f"the package's code ran on the host and wrote {marker}")
    after = tree_digest()
    eq(sorted(after), sorted(before), "the entries of every environment (none added, none removed)")
    for path in before:
        eq(after[path], before[path], f"{path} (mode, owner, contents)")
    check(not [e for e in os.listdir(envs_dir()) if e.startswith((".build-", ".slot-"))], "a build directory was left")
    hello_of_another_user_is_clean()


@test
def package_code_runs_only_inside_the_sandbox_and_environments_stay_read_only():
    """A wheel of the ordinary layout whose .pth file runs its code in every interpreter started on the
    environment: it runs in the script's sandbox, where both writes are refused; the bytecode compile, which
    starts an interpreter on the environment too, runs in the sandbox as an unprivileged uid; the environment is
    read-only on disk, its .pyc files included."""
    bare_key, bare_site = bare_env()
    marker = host_marker("pth")
    code = payload(marker, bare_site) + "import sys\nprint('PAYLOAD', _host, _bare, file=sys.stderr)\n"
    # Enough source that its compile is seen running.
    bulk = "".join(f"def f{i}(x):\n    return [x * {i} for _ in range(3)]\n" for i in range(40000))
    build_wheel(index(), "mcpt-evil-pth", "1.0", module_source=code, extra_files=[
        ("mcpt_evil_pth.pth", b"import mcpt_evil_pth\n"),
        ("mcpt_evil_pth/bulk.py", bulk.encode()),
    ])
    before = tree_digest()

    c = client()
    with CompileWatch(daemon().proc.pid) as watch:
        r, st = run(c, "print('script ran')", ["mcpt-evil-pth"])
        check(not r.get("isError"), c.text(r))
        key = st["environment"]["key"]
        wait_until(lambda: compiled(key), 120, "the bytecode compile of the new environment")
        # The daemon opens the root to itself (0755) for the moment it writes the marker, then closes it again: under
        # load (the compile's end runs at idle priority) this test can look in between.
        env = os.path.join(envs_dir(), key)
        wait_until(lambda: not os.stat(env).st_mode & 0o222, 30, f"{env} to be read-only again after its marker")

    # The .pth ran in the sandbox, and both its writes were refused there.
    err = st.get("stderr") or ""
    line = next((x for x in err.splitlines() if x.startswith("PAYLOAD ")), None)
    check(line is not None, f"the package's .pth did not run in the script's sandbox: {c.text(r)}")
    host, bare = line.split()[1:3]
    check(host.startswith("refused:") and bare.startswith("refused:"), f"a write got through: {line}")
    check(not os.path.exists(marker), f"the package's code ran on the host and wrote {marker}")

    # Every compile ran in bwrap, as a uid other than root.
    check(watch.seen, "no bytecode compile was seen running")
    mounts = mcptest.cgroup_mounts()
    for pid, (uid, in_bwrap, argv, up, policy, cgroups) in watch.seen.items():
        check(in_bwrap, f"compileall (pid {pid}: {argv}) ran outside bwrap: its ancestors {up}")
        check(uid != 0, f"compileall (pid {pid}) ran as host root")
        eq(policy, 5, f"compileall (pid {pid}): scheduling policy (5: SCHED_IDLE, it never slows a run)")
        # With cgroups of the daemon's, in the CPU's hierarchy: the "idle" group at the least weight, for a policy
        # binds only within one cgroup.
        cpu = "cpu" if "cpu" in cgroups else ""
        path = cgroups.get(cpu, "")
        if "/mcp-python-sandbox-" in path and cpu in mounts:
            check("/idle/run-" in path, f"compileall (pid {pid}) is in {path}, not the idle group")
            group = mounts[cpu] + os.path.dirname(path)
            weight, least = ("cpu.shares", "2") if cpu else ("cpu.weight", "1")
            if os.path.exists(os.path.join(group, weight)):
                with open(os.path.join(group, weight)) as f:
                    eq(f.read().strip(), least, f"{weight} of the compile's group {group}")

    # The other environments are as they were; the new one is read-only on disk, bytecode included.
    after = tree_digest()
    for path, v in before.items():
        eq(after.get(path), v, f"{path} (mode, owner, contents)")
    pycs = 0
    for top, dirs, files in os.walk(env):
        for name in dirs + files:
            p = os.path.join(top, name)
            st_ = os.lstat(p)
            if stat.S_ISLNK(st_.st_mode):
                continue
            check(not st_.st_mode & 0o222, f"{p} is writable on disk: mode {st_.st_mode:o}")
            eq(st_.st_uid, daemon().uid, f"owner of {p} (the daemon's user)")
            pycs += name.startswith("bulk.") and name.endswith(".pyc")
    check(not os.stat(env).st_mode & 0o222, f"{env} itself is writable")
    eq(pycs, 1, "bulk.*.pyc compiled into the environment's __pycache__")
    hello_of_another_user_is_clean()


@test
def tool_results_name_no_host_path_of_the_store_or_cache():
    """A run sees its environment at /venv: sys.prefix, VIRTUAL_ENV, a package's __file__ and a traceback through
    it say /venv, and nothing in any result, check_environment's included, names where the store is."""
    build_wheel(index(), "mcpt-paths", "1.0", module_source="def boom():\n    raise RuntimeError('boom')\n")
    c = client()
    script = ("import json, os, sys, mcpt_paths\n"
              "print(json.dumps([sys.prefix, sys.executable, os.environ.get('VIRTUAL_ENV'), mcpt_paths.__file__]))\n"
              "mcpt_paths.boom()\n")
    r, st = run(c, script, ["mcpt-paths"])
    import json
    prefix, executable, venv, module = json.loads(st["stdout"].splitlines()[0])
    eq((prefix, venv), ("/venv", "/venv"), "sys.prefix and VIRTUAL_ENV inside")
    check(executable.startswith("/venv/bin/python"), f"sys.executable: {executable}")
    check(module.startswith("/venv/lib/"), f"the package's __file__: {module}")
    check('File "/venv/lib/' in st.get("stderr", "") and "RuntimeError: boom" in st.get("stderr", ""),
          f"the traceback through the package: {st.get('stderr')}")
    env = client().call_tool("check_environment", {}, timeout=60)
    cache = os.path.realpath(daemon().cache_dir)
    for what, result in (("execute_python", r), ("check_environment", env)):
        text = json.dumps(result)
        check(cache not in text and daemon().cache_dir not in text, f"{what}'s result names the cache: {text[:2000]}")


def fake_matplotlib(name, extra):
    """A wheel with a matplotlib/font_manager.py of its own, so the daemon makes the environment's font list with
    it: package code in that step, which also runs extra."""
    fm = ("import os, sys\n"
          "class FontManager:\n"
          "    __version__ = 390\n"
          "d = os.environ['MPLCONFIGDIR']\n"
          "os.makedirs(d, exist_ok=True)\n" + extra)
    build_wheel(index(), name, "1.0", extra_files=[("matplotlib/__init__.py", b""),
                                                    ("matplotlib/font_manager.py", fm.encode())])


def fonts_made(key):
    """The environment's font list directory once the step is over (made read-only last), or None."""
    fonts = os.path.join(envs_dir(), key, ".mcp-python-sandbox-mpl")
    done = lambda: os.path.isdir(fonts) and os.stat(fonts).st_mode & 0o777 == 0o555
    wait_until(lambda: done() or f"environment {key[:12]} failed" in daemon().log(), 120, "the font list step")
    return sorted(os.listdir(fonts)) if done() else None


@test
def the_font_list_step_writes_no_host_directory_and_hands_back_one_bounded_file():
    """matplotlib's font list is made per environment by package code (matplotlib's, any .pth): it gets no host
    directory to write to; of all it writes, one file of the expected name is adopted, and one larger than the cap
    is not adopted at all."""
    fake_matplotlib("mcpt-fonts-many", "for i in range(60):\n"
                    "    open(os.path.join(d, 'fontlist-v%d.json' % (1000 + i)), 'w').write('{}')\n"
                    "open(os.path.join(d, 'fontlist-v390.json'), 'w').write('{\"ok\": 1}')\n"
                    "open(os.path.join(d, 'evil.pth'), 'w').write('x')\n")
    # 5 MiB: more than the cap, less than the sandbox's /tmp.
    fake_matplotlib("mcpt-fonts-big", "open(os.path.join(d, 'fontlist-v390.json'), 'w').write('x' * (5 << 20))\n")
    c = client()
    r, st = run(c, "import mcpt_fonts_many\nprint('ran')", ["mcpt-fonts-many"])
    eq(st.get("stdout"), "ran\n", c.text(r))
    key = st["environment"]["key"]
    eq(fonts_made(key), ["fontlist-v390.json"], "the font lists adopted into the environment")
    with open(os.path.join(envs_dir(), key, ".mcp-python-sandbox-mpl", "fontlist-v390.json")) as f:
        eq(f.read(), '{"ok": 1}', "the adopted font list")

    r, st = run(c, "import mcpt_fonts_big\nprint('ran')", ["mcpt-fonts-big"])
    eq(st.get("stdout"), "ran\n", c.text(r))
    key = st["environment"]["key"]
    eq(fonts_made(key), None, "a font list larger than the cap, adopted")
    check("File too large" in daemon().log(), "the log says why the font list was not adopted")
    hello_of_another_user_is_clean()


if __name__ == "__main__":
    main()
