#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Pythons the host lacks, installed on demand (python-downloads), without the internet.

The test builds a private Python download site: an archive in uv's install_only layout made from one of this
machine's pyenv interpreters (3.12 or newer), and a download list (uv's python-downloads-json-url format) that
names it by a file:// URL. The daemon is given only an older Python. Then, through the shim:
- a call that asks for the newer version (python_version, or requires-python) shows "installing Python" in its
  progress and runs on it; the installed tree is read-only on disk; check_environment lists it; a second call
  and a restarted daemon use it without installing again (uv is wrapped to count its runs);
- validate_script says it would be installed, and installs nothing;
- a version the site does not have, an unreachable site, python-downloads = no and offline = yes each fail in
  the validate phase with a sentence that says why, and nothing runs;
- two users who each ask for a Python the site has (3.12 and 3.13) get both, one build at a time under
  max-builds=1: an install is a build for the scheduler, beside the environment builds (watched in the process
  list).

Needs root or not, bubblewrap, uv and two pyenv Pythons (3.11 and 3.12+; the two users' test: root, and two of
3.12+). Exit 77 when they are missing.
"""

import hashlib
import io
import json
import os
import stat
import tarfile
import threading
import time
import uuid

from mcptest import Daemon, UvLog, at_exit, check, descendants, eq, main, need_uv, proc_table, scratch, skip, test
from mcptest import test_pythons

_STATE = {}


def versions():
    have = test_pythons()
    old = [v for v in have if v == "3.11"]
    new = sorted((v for v in have if tuple(map(int, v.split("."))) >= (3, 12)), key=lambda v: tuple(map(int, v.split("."))))
    if not old or not new:
        skip("needs pyenv's Python 3.11 and a 3.12 or newer")
    return have, "3.11", new[0]


def build_site():
    """(json_url, version "3.12.1", minor "3.12"): a download site for the newer Python, in a scratch dir."""
    if "site" in _STATE:
        return _STATE["site"]
    _, _, minor = versions()
    site = scratch("mcptest-pysite-")
    full, key, entry = site_entry(site, minor)
    path = os.path.join(site, "downloads.json")
    with open(path, "w") as f:
        json.dump({key: entry}, f)
    _STATE["site"] = ("file://" + path, full, minor)
    return _STATE["site"]


def build_site2():
    """(json_url, [(version, minor), ...]): a download site for two Pythons newer than 3.11, or a skip."""
    if "site2" in _STATE:
        return _STATE["site2"]
    have, _, _ = versions()
    minors = sorted((v for v in have if tuple(map(int, v.split("."))) >= (3, 12)), key=lambda v: tuple(map(int, v.split("."))))
    if len(minors) < 2:
        skip("needs two pyenv Pythons of 3.12 or newer")
    site = scratch("mcptest-pysite-")
    listing, got = {}, []
    for minor in minors[:2]:
        full, key, entry = site_entry(site, minor)
        listing[key] = entry
        got.append((full, minor))
    path = os.path.join(site, "downloads.json")
    with open(path, "w") as f:
        json.dump(listing, f)
    _STATE["site2"] = ("file://" + path, got)
    return _STATE["site2"]


def site_entry(site, minor):
    """(version, key, download list entry) of an archive of pyenv's Python minor, written into site."""
    have = test_pythons()
    prefix = os.path.dirname(have[minor])
    full = os.path.basename(prefix)
    archive = os.path.join(site, f"cpython-{full}-test-install_only.tar.gz")
    skip_dirs = {"test", "idlelib", "tkinter", "ensurepip", "lib2to3", "__pycache__", "site-packages", "turtledemo"}
    libdir = os.path.join(prefix, "lib").encode()

    def add(tar, path, arc):
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            tar.add(path, arc, recursive=False)
            for name in sorted(os.listdir(path)):
                if name in skip_dirs or name.endswith(".a"):
                    continue
                add(tar, os.path.join(path, name), arc + "/" + name)
            return
        if stat.S_ISREG(st.st_mode) and arc == f"python/bin/python{minor}":
            # pyenv links its interpreter to libpython by an absolute RUNPATH; an archive uv installs must find it
            # relative to itself, as python-build-standalone's do.
            data = open(path, "rb").read()
            old = libdir + b"\0"
            new = b"$ORIGIN/../lib"
            if data.count(old) == 1:
                data = data.replace(old, new + b"\0" * (len(old) - len(new)))
            info = tar.gettarinfo(path, arc)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            return
        tar.add(path, arc, recursive=False)

    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        add(tar, prefix, "python")
    sha = hashlib.sha256(open(archive, "rb").read()).hexdigest()
    major, mi, patch = (int(x) for x in full.split("."))
    key = f"cpython-{full}-linux-x86_64-gnu"
    return full, key, {"name": "cpython", "arch": {"family": "x86_64", "variant": None}, "os": "linux", "libc": "gnu",
                       "major": major, "minor": mi, "patch": patch, "prerelease": "", "url": "file://" + archive,
                       "sha256": sha, "variant": None, "build": "20990101"}


def daemon(cache=None, args=(), uv=None, url=None):
    """A daemon with only Python 3.11 of its own, the private download site (or url), and its uv counted."""
    need_uv()
    have, old, _ = versions()
    url = url or build_site()[0]
    uv = uv or UvLog()
    d = Daemon(args=["--python-search-path=", "--python-search-path=" + have[old], "--python-downloads-json-url=" + url, "--uv=" + uv.path,
                     *args], cache_dir=cache)
    at_exit(d.close)
    c = d.client()
    c.initialize()
    return d, c, uv


def text_of(r):
    return "".join(x.get("text", "") for x in r.get("content", []) if x.get("type") == "text")


def python_installs(uv, since=0):
    return [line for line in uv.lines()[since:] if line.startswith("python install")]


def run(c, script, meta=None, **args):
    r = c.call_tool("execute_python", {"script": script, **args}, timeout=300, meta=meta)
    return r, text_of(r)


PROBE = "import sys\nprint('VERSION', '%d.%d.%d' % sys.version_info[:3], sys.prefix)\n"


@test
def a_missing_python_is_installed_and_used():
    url, full, minor = build_site()
    cache = scratch("mcptest-pycache-")
    d, c, uv = daemon(cache)
    # The tool list tells the model which Pythons there are, and that others can be had.
    c.call_tool("check_environment", {}, timeout=60)   # the start-up probes are done
    tools = {t["name"]: t for t in c.result("tools/list")["tools"]}
    pv = tools["execute_python"]["inputSchema"]["properties"]["python_version"]["description"]
    check("Here: 3.11" in pv and "others are installed when asked for" in pv, f"python_version's description: {pv!r}")
    marker = uuid.uuid4().hex
    r, text = run(c, PROBE + f"print({marker!r})\n", python_version=minor, meta={"progressToken": "p"})
    check(r.get("isError") is False, f"the run on Python {minor} failed: {text[:3000]}\n{d.log()[-3000:]}")
    check(f"VERSION {full} /venv" in text, f"the script did not run on Python {full} in its environment: {text[:2000]}")
    check(marker in text, "the script's output is missing")
    eq(len(python_installs(uv)), 1, f"uv python install runs: {uv.lines()}")
    progress = [m["params"].get("message", "") for m in c.notifications if m.get("method") == "notifications/progress"]
    check(any(f"installing Python {minor}" in m for m in progress), f"no 'installing Python' progress: {progress}")

    # Read-only on disk, every file and directory of it; the daemon's own.
    root = os.path.join(cache, "pythons", f"cpython-{full}-linux-x86_64-gnu")
    check(os.path.isdir(root) and not os.path.islink(root), f"not installed in the store: {os.listdir(cache)}")
    writable = []
    for top, dirs, files in os.walk(root):
        for name in [top, *(os.path.join(top, f) for f in files)]:
            st = os.lstat(name)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o222:
                writable.append(name)
    if writable:
        st0 = os.lstat(writable[1])
        check(False, f"writable files in the installed Python: {writable[:3]} (uid {st0.st_uid}, mtime {st0.st_mtime}, "
                     f"marker {os.lstat(os.path.join(root, '.mcp-python-sandbox-installed')).st_mtime}); uv ran: "
                     f"{uv.lines()}\n{d.log()[-4000:]}")

    # uv's lock there is the daemon's alone: nobody else can hold it to stall installs.
    eq(oct(os.stat(os.path.join(cache, "pythons", ".lock")).st_mode & 0o777), "0o600", "mode of pythons/.lock")

    st = c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}
    listed = [p for p in st.get("pythons", []) if p.get("version") == full]
    check(listed and listed[0].get("installed_by_uv") is True, f"check_environment pythons: {st.get('pythons')}")
    eq(st.get("python_downloads"), True, "check_environment python_downloads")

    # Again, by requires-python this time: no second install.
    r, text = run(c, f"# /// script\n# requires-python = \">={minor}\"\n# ///\n" + PROBE)
    check(r.get("isError") is False and f"VERSION {full}" in text, f"second run: {text[:2000]}")
    eq(len(python_installs(uv)), 1, f"uv python install runs after a second call: {uv.lines()}")
    c.close()
    d.close()

    # A new daemon on the same store finds it without installing or being asked.
    d, c, uv2 = daemon(cache)
    st = c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}
    check(any(p.get("version") == full for p in st.get("pythons", [])), f"after a restart: {st.get('pythons')}")
    r, text = run(c, PROBE, python_version=minor)
    check(r.get("isError") is False and f"VERSION {full}" in text, f"run after a restart: {text[:2000]}")
    eq(python_installs(uv2), [], "uv python install after a restart")
    c.close()
    d.close()


@test
def validate_script_installs_nothing():
    _, _, minor = build_site()
    cache = scratch("mcptest-pycache-")
    d, c, uv = daemon(cache)
    r = c.call_tool("validate_script", {"script": "print(1)\n", "python_version": minor}, timeout=60)
    text = text_of(r)
    check(r.get("isError") is False, f"validate_script: {text}")
    check(f"python: {minor}, not installed here yet" in text, f"validate_script does not say it would install: {text}")
    eq(python_installs(uv), [], "uv python install by validate_script")
    check(not any(n.startswith("cpython-") for n in os.listdir(os.path.join(cache, "pythons"))),
          "validate_script installed a Python")
    c.close()
    d.close()


def build_pids(daemon_pid):
    """{pid: "python install" | "venv" | "pip"}: the daemon's descendants that are uv at work for a build (the
    wrapper script, then uv itself, by the same pid; not uv's own children, forked to start a program)."""
    table = proc_table()
    found = {}
    for pid in descendants(daemon_pid, table):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        for k in range(len(argv) - 2):
            if os.path.basename(argv[k]) == b"uv" and argv[k + 1] in (b"python", b"venv", b"pip"):
                found[pid] = "python install" if argv[k + 1:k + 3] == [b"python", b"install"] else argv[k + 1].decode()
                break
    return {p: k for p, k in found.items() if table[p][0] not in found}


@test
def two_users_installs_are_builds_one_at_a_time():
    url, got = build_site2()
    (full_a, minor_a), (full_b, minor_b) = got
    # Each install waits a while before uv starts, so that two of them would overlap if nothing held one back.
    uv = UvLog(delay=2, delay_on="python install")
    d, root, _ = daemon(args=["--max-builds=1"], uv=uv, url=url)
    nobody = d.nobody_client()
    seen, most, stop = {}, [0, None], threading.Event()

    def watch():
        while not stop.is_set():
            now = build_pids(d.proc.pid)
            if len(now) > most[0]:
                most[:] = [len(now), sorted(now.values())]
            seen.update(now)
            time.sleep(0.02)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        calls = []
        for c, minor in ((root, minor_a), (nobody, minor_b)):
            rid = c.new_id()
            c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                    "params": {"name": "execute_python", "arguments": {"script": PROBE, "python_version": minor}}})
            calls.append((c, rid))
        results = [c.wait_for(rid, timeout=300) for c, rid in calls]
    finally:
        stop.set()
        watcher.join()
    for (full, minor), r in zip(got, results):
        res = r.get("result") or {}
        text = text_of(res)
        check(res.get("isError") is False and f"VERSION {full}" in text,
              f"the run on Python {minor} failed: {r}\n{d.log()[-3000:]}")
    # Both installs ran, each as a build of its caller's: never two at once under max-builds=1, nor one beside the
    # other user's environment build (uv venv) that waits for the same scheduler.
    eq(sorted(line.split()[-1] for line in python_installs(uv)), sorted([minor_a, minor_b]), "uv python install runs")
    kinds = sorted(seen.values())
    check(kinds.count("python install") >= 2 and "venv" in kinds, f"the watcher saw only {kinds}; uv ran: {uv.lines()}")
    eq(most[0], 1, f"builds at once (at the most: {most[1]})")
    nobody.close()
    root.close()
    d.close()


def refused(c, script, what, want, **args):
    marker = "RAN-" + uuid.uuid4().hex
    r, text = run(c, script + f"print({marker!r})\n", **args)
    check(r.get("isError") is True, f"{what}: want an error, got: {text[:2000]}")
    check(marker not in text, f"{what}: the script ran")
    for w in want:
        check(w in text, f"{what}: want {w!r} in the error: {text[:2000]}")
    return text


@test
def versions_that_cannot_be_had_fail_clearly():
    _, full, minor = build_site()
    # The site has one version; 3.10 is not on it: uv's own words, and what there is.
    d, c, uv = daemon()
    refused(c, "", "a version the site lacks", ["Python 3.10 is not available", "3.11",
                                                 "uv could not install it", "No download found"],
            python_version="3.10")
    refused(c, "# /// script\n# requires-python = \">=4\"\n# ///\n", "requires-python >=4",
            ["requires-python", "uv could not install it"])
    c.close()
    d.close()

    # The site is unreachable.
    d, c, uv = daemon(args=["--python-downloads-json-url=http://127.0.0.1:9/downloads.json"])
    refused(c, "", "an unreachable site", ["uv could not install it"], python_version=minor)
    c.close()
    d.close()

    # The administrator said no, or offline.
    for args in (["--python-downloads=no"], ["--offline"]):
        d, c, uv = daemon(args=args)
        refused(c, "", " ".join(args), [f"Python {minor} is not available", "python-downloads"],
                python_version=minor)
        eq(python_installs(uv), [], f"uv python install with {args}")
        st = c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}
        eq(st.get("python_downloads"), False, f"check_environment python_downloads with {args}")
        tools = {t["name"]: t for t in c.result("tools/list")["tools"]}
        pv = tools["execute_python"]["inputSchema"]["properties"]["python_version"]["description"]
        check("installed when asked" not in pv, f"python_version's description with {args}: {pv!r}")
        c.close()
        d.close()


# The prefix of the URLs in uv's own download list, which python-install-mirror replaces.
DEFAULT_DOWNLOADS = "https://github.com/astral-sh/python-build-standalone/releases/download"


@test
def an_administrators_mirror_serves_the_install():
    """python-install-mirror: the download list names the usual public URL, which nothing here can reach; the
    install comes from the mirror the administrator named instead."""
    url, full, minor = build_site()
    site = os.path.dirname(url[len("file://"):])
    with open(os.path.join(site, "downloads.json")) as f:
        listing = json.load(f)
    mirror = scratch("mcptest-pymirror-")
    for entry in listing.values():
        name = os.path.basename(entry["url"])
        os.makedirs(os.path.join(mirror, "20990101"), exist_ok=True)
        os.link(entry["url"][len("file://"):], os.path.join(mirror, "20990101", name))
        entry["url"] = f"{DEFAULT_DOWNLOADS}/20990101/{name}"
    public = os.path.join(mirror, "downloads.json")
    with open(public, "w") as f:
        json.dump(listing, f)

    # Without the mirror the public URL is tried and fails (no internet here, or a test that proves nothing).
    d, c, uv = daemon(args=["--python-downloads-json-url=file://" + public])
    refused(c, "", "the public URL without a mirror", ["uv could not install it"], python_version=minor)
    c.close()
    d.close()

    d, c, uv = daemon(args=["--python-downloads-json-url=file://" + public, "--python-install-mirror=file://" + mirror])
    r, text = run(c, PROBE, python_version=minor)
    check(r.get("isError") is False and f"VERSION {full} /venv" in text, f"the run through the mirror: {text[:3000]}")
    eq(len(python_installs(uv)), 1, f"uv python install runs: {uv.lines()}")
    c.close()
    d.close()


if __name__ == "__main__":
    main()
