#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test: the user's data without pasting it through the model.

Through the real shim against the real daemon and real bubblewrap:
- data-dirs: an administrator's directory is readable at /data/NAME in a run and in a persistent sandbox, and
  not writable there (the write fails with EROFS or EACCES); check_environment lists it, and says so when the
  sandboxes cannot read one; bad entries are refused when the configuration is read.
- files: a file of the calling user's, passed by the shim as an open file descriptor, is readable (and not
  writable) at /work/in/NAME in a run and in a persistent sandbox, while the daemon runs as root. That the
  daemon never opened the path: a file the user cannot read (the daemon could) and a symbolic link to
  /etc/shadow are refused by the shim; a path that reaches the daemon without the shim is refused; fds sent
  anywhere but with a line's first byte are not used; the --stdio fallback says it cannot take files.
- read_file with offset and length returns exactly that slice, with clear errors for values out of range.

Needs $DAEMON and $SHIM, bubblewrap, uv and a pyenv Python >= 3.11. Exit status: 0 pass, 1 fail, 77 skip.
"""

import base64
import json
import os
import subprocess

import signal
import socket
import time

from mcptest import (DAEMON, NOBODY, Client, at_exit, check, eq, initialized, line, main, req, sandbox_daemon,
                     scratch, stdio_client, test, wait_until)

_STATE = {}


def data_daemon():
    """One daemon for the tests here: data-dirs with a readable directory and one the sandboxes cannot read."""
    if "d" not in _STATE:
        top = scratch("mcp-data-")
        os.chmod(top, 0o755)
        shared = os.path.join(top, "shared")
        os.mkdir(shared, 0o755)
        with open(os.path.join(shared, "table.csv"), "w") as f:
            f.write("x,y\n1,2\n3,4\n")
        os.chmod(os.path.join(shared, "table.csv"), 0o644)
        closed = os.path.join(top, "closed")
        os.mkdir(closed, 0o700)
        with open(os.path.join(closed, "secret.txt"), "w") as f:
            f.write("not for sandboxes\n")
        _STATE["top"] = top
        # As root, the sandboxes run as uids of their own: "closed" (0700, root's) is out of their reach. As
        # another user they run as the daemon's uid: then make it unreadable to that uid too.
        if os.geteuid() != 0:
            os.chmod(closed, 0o000)
        d, c = sandbox_daemon([f"--data-dirs=tables={shared} closed={closed}"])
        _STATE["d"], _STATE["c"] = d, c
    return _STATE["d"], _STATE["c"]


def run(c, script):
    r = c.call_tool("execute_python", {"script": script}, timeout=300)
    return r


@test
def data_dir_readable_not_writable():
    d, c = data_daemon()
    r = run(c, "print(open('/data/tables/table.csv').read(), end='')\n"
               "import errno\n"
               "for p in ('/data/tables/table.csv', '/data/tables/new.txt'):\n"
               "    try:\n"
               "        open(p, 'a').write('x')\n"
               "        print('WROTE', p)\n"
               "    except OSError as e:\n"
               "        print('refused', p, errno.errorcode[e.errno])\n")
    check(not r["isError"], c.text(r))
    out = r["structuredContent"]["stdout"]
    check(out.startswith("x,y\n1,2\n3,4\n"), out)
    check("WROTE" not in out, out)
    for p in ("/data/tables/table.csv", "/data/tables/new.txt"):
        check(f"refused {p} EROFS" in out or f"refused {p} EACCES" in out, out)
    # And the host file is unchanged, no new file.
    with open(os.path.join(_STATE["top"], "shared", "table.csv")) as f:
        eq(f.read(), "x,y\n1,2\n3,4\n", "host file")
    check(not os.path.exists(os.path.join(_STATE["top"], "shared", "new.txt")), "a file appeared on the host")


@test
def unreadable_data_dir_reported_not_mounted():
    d, c = data_daemon()
    st = c.call_tool("check_environment", {}, timeout=60)
    dirs = {x["name"]: x for x in st["structuredContent"]["data_dirs"]}
    eq(dirs["tables"]["path"], "/data/tables", "where")
    eq(dirs["tables"]["readable"], True, "tables readable")
    eq(dirs["closed"]["readable"], False, "closed readable")
    check("chmod" in dirs["closed"]["problem"] or "not readable" in dirs["closed"]["problem"], dirs["closed"])
    text = c.text(st)
    check("Data directories (read-only): /data/tables, /data/closed (UNAVAILABLE" in text, text)
    # The host path is not told to the model.
    check(_STATE["top"] not in json.dumps(st), "host path in check_environment")
    check("closed" in d.log_full() and "sandboxes will not have /data/closed" in d.log_full(), d.log())
    eq(st["structuredContent"]["user_files"]["available"], True, "files through the socket")
    check("Your files (the files argument): read-only at /work/in/NAME, up to 32 MiB per call" in text, text)
    # The run tools' description names the data directories too.
    ep = {t["name"]: t for t in c.result("tools/list")["tools"]}["execute_python"]
    check(" Data, read-only: /data/tables." in ep["description"], ep["description"])
    check("/data/closed" not in ep["description"], f"a directory the sandboxes do not get: {ep['description']}")
    r = run(c, "import os\nprint(sorted(os.listdir('/data')))\n")
    check(not r["isError"], c.text(r))
    eq(r["structuredContent"]["stdout"], "['tables']\n", "/data holds only what sandboxes can read")


@test
def data_dir_in_persistent_sandbox():
    d, c = data_daemon()
    r = c.call_tool("create_sandbox", {}, timeout=300)
    check(not r["isError"], c.text(r))
    sid = r["structuredContent"]["sandbox_id"]
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": (
        "import errno\n"
        "try:\n"
        "    open('/data/tables/table.csv', 'w')\n"
        "    w = 'WROTE'\n"
        "except OSError as e:\n"
        "    w = errno.errorcode[e.errno]\n"
        "print(open('/data/tables/table.csv').read().splitlines()[1], w)\n")}, timeout=120)
    check(not r["isError"], c.text(r))
    out = r["structuredContent"]["stdout"]
    check(out in ("1,2 EROFS\n", "1,2 EACCES\n"), out)
    c.call_tool("close_sandbox", {"sandbox_id": sid})


@test
def read_file_slices():
    d, c = data_daemon()
    r = c.call_tool("create_sandbox", {}, timeout=300)
    check(not r["isError"], c.text(r))
    sid = r["structuredContent"]["sandbox_id"]
    size = 3 * 1024 * 1024 + 17
    # Bytes that say where they are: byte i is (i * 7 + i // 251) % 256.
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": (
        "import os\nos.makedirs('/work/out', exist_ok=True)\n"
        f"data = bytes((i * 7 + i // 251) % 256 for i in range({size}))\n"
        "open('/work/out/big.bin', 'wb').write(data)\n"
        "open('/work/out/t.txt', 'w').write('h\u00e9llo world\\n' * 10)\n")}, timeout=120)
    check(not r["isError"], c.text(r))
    want = bytes((i * 7 + i // 251) % 256 for i in range(size))

    def read(**a):
        return c.call_tool("read_file", {"sandbox_id": sid, **a}, timeout=60)

    # The whole file is over the cap: the error says how to read it.
    r = read(path="out/big.bin", encoding="base64")
    check(r["isError"] and "offset and length" in c.text(r), c.text(r))
    for off, n in [(0, 1), (0, 1048576), (1048576, 1048576), (2 * 1048576 + 5, 999), (size - 10, 1000)]:
        r = read(path="out/big.bin", encoding="base64", offset=off, length=n)
        check(not r["isError"], c.text(r))
        st = r["structuredContent"]
        got = base64.b64decode(st["content"])
        eq(got, want[off:off + n], f"bytes {off}+{n}")
        eq(st["size"], len(got), "size")
        eq(st["offset"], off, "offset")
        eq(st["file_size"], size, "file_size")
        eq(st["eof"], off + n >= size, "eof")
    # The text says where the piece is and where the rest begins.
    r = read(path="out/big.bin", encoding="base64", offset=10, length=20)
    check("(bytes 10 to 30 of %d; the rest from offset 30)" % size in c.text(r), c.text(r))
    # Up to the end, and at the very end: nothing, eof.
    r = read(path="out/big.bin", encoding="base64", offset=size)
    check(not r["isError"], c.text(r))
    eq((r["structuredContent"]["size"], r["structuredContent"]["content"], r["structuredContent"]["eof"]),
       (0, "", True), "at the end")
    # Text: a slice on character bounds, and one that cuts 'é' in two.
    r = read(path="out/t.txt", offset=13, length=13)
    check(not r["isError"], c.text(r))
    eq(r["structuredContent"]["content"], "h\u00e9llo world\n", "text slice")
    r = read(path="out/t.txt", offset=2, length=4)
    check(r["isError"] and "base64" in c.text(r), c.text(r))
    # Out of range, clearly.
    for a, why in [(dict(offset=size + 1), "past the end"), (dict(offset=-1), "offset"), (dict(offset="3"), "offset"),
                   (dict(offset=1.5), "offset"), (dict(length=0), "length"), (dict(length=1048577), "length"),
                   (dict(length=-5), "length")]:
        r = read(path="out/big.bin", encoding="base64", **a)
        check(r["isError"], f"{a}: {c.text(r)}")
        check(why in c.text(r), f"{a}: {c.text(r)}")
    c.call_tool("close_sandbox", {"sandbox_id": sid})


def user_files():
    """Files of the user 65534 (nobody): one only they can read (0600, in a 0700 directory of theirs), one they
    cannot (root's, 0600), and a link of theirs to /etc/shadow. The daemon is root: it could read them all."""
    if "files" not in _STATE:
        top = scratch("mcp-files-")
        os.chmod(top, 0o755)
        home = os.path.join(top, "home")
        os.mkdir(home, 0o700)
        mine = os.path.join(home, "mine.csv")
        with open(mine, "w") as f:
            f.write("id,value\n1,42\n")
        os.chmod(mine, 0o600)
        rootfile = os.path.join(top, "root-only.txt")
        with open(rootfile, "w") as f:
            f.write("root's secret\n")
        os.chmod(rootfile, 0o600)
        os.symlink("/etc/shadow", os.path.join(home, "shadow-link"))
        big = os.path.join(home, "big.bin")
        with open(big, "wb") as f:
            f.truncate(40 << 20)
        for p in (home, mine, big):
            os.chown(p, NOBODY, NOBODY)
        os.lchown(os.path.join(home, "shadow-link"), NOBODY, NOBODY)
        _STATE["files"] = {"mine": mine, "root": rootfile, "link": os.path.join(home, "shadow-link"), "big": big}
    return _STATE["files"]


def nobody():
    if os.geteuid() != 0:
        from mcptest import skip
        skip("needs root: the daemon as root, the client as another user")
    d, _ = data_daemon()
    if "nobody" not in _STATE:
        _STATE["nobody"] = d.nobody_client()
    return d, _STATE["nobody"]


@test
def user_file_in_run():
    d, c = nobody()
    f = user_files()
    r = c.call_tool("execute_python", {"script": (
        "import errno, os\n"
        "print(open('/work/in/data.csv').read(), end='')\n"
        "print(sorted(os.listdir('/work/in')))\n"
        "try:\n"
        "    open('/work/in/data.csv', 'a').write('x')\n"
        "    print('WROTE')\n"
        "except OSError as e:\n"
        "    print('refused', errno.errorcode[e.errno])\n"),
        "files": [{"path": f["mine"], "as": "data.csv"}]}, timeout=300)
    check(not r["isError"], c.text(r))
    out = r["structuredContent"]["stdout"]
    check(out.startswith("id,value\n1,42\n['data.csv']\n"), out)
    check("refused EROFS" in out or "refused EACCES" in out, out)
    # "as" defaults to the file's name.
    r = c.call_tool("execute_python", {"script": "print(open('/work/in/mine.csv').read(), end='')",
                                       "files": [{"path": f["mine"]}]}, timeout=300)
    eq(r["structuredContent"]["stdout"], "id,value\n1,42\n", c.text(r))
    with open(f["mine"]) as fh:
        eq(fh.read(), "id,value\n1,42\n", "the user's file")
    # As many as a call may pass (16), in a run and in a persistent sandbox; one more is refused.
    many = [{"path": f["mine"], "as": f"f{i}.csv"} for i in range(16)]
    r = c.call_tool("execute_python", {"script": "import os\nprint(len(os.listdir('/work/in')), "
                                                 "open('/work/in/f15.csv').read().split()[1])", "files": many},
                    timeout=300)
    check(not r["isError"], c.text(r))
    eq(r["structuredContent"]["stdout"], "16 1,42\n", "16 files")
    r = c.call_tool("create_sandbox", {"files": many}, timeout=300)
    check(not r["isError"], c.text(r))
    sid = r["structuredContent"]["sandbox_id"]
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": "import os\nprint(len(os.listdir('/work/in')))"},
                    timeout=120)
    eq(r["structuredContent"]["stdout"], "16\n", c.text(r))
    c.call_tool("close_sandbox", {"sandbox_id": sid})
    r = c.call_tool("execute_python", {"script": "print('RAN')", "files": many + [{"path": f["mine"], "as": "x"}]},
                    timeout=120)
    check(r["isError"] and "16" in c.text(r), c.text(r))
    # A line far longer than the shim's 64 KiB queue, rewritten in place.
    pad = "#" + "x" * 99 + "\n"
    r = c.call_tool("execute_python", {"script": pad * 3000 + "print(open('/work/in/m').read(), end='')",
                                       "files": [{"path": f["mine"], "as": "m"}]}, timeout=300)
    eq(r["structuredContent"]["stdout"], "id,value\n1,42\n", c.text(r))


@test
def shim_refuses_what_the_user_cannot_read():
    d, c = nobody()
    f = user_files()
    cases = [(f["root"], "cannot read it"), (f["link"], "symbolic link"), ("/etc/shadow", "cannot read it"),
             ("relative.csv", "absolute"), (os.path.dirname(f["mine"]), "not a regular file"),
             (f["mine"] + ".missing", "no such file")]
    for path, why in cases:
        r = c.call_tool("execute_python", {"script": "print('RAN')", "files": [{"path": path, "as": "x"}]},
                        timeout=120)
        check(r["isError"], f"{path}: {c.text(r)}")
        check(why in c.text(r), f"{path}: {c.text(r)}")
        check("RAN" not in r["structuredContent"].get("stdout", ""), f"{path}: the script ran")
        check("secret" not in c.text(r) and "root:" not in c.text(r), f"{path}: contents leaked")
    # Bad names and too much, checked by the daemon.
    for files, why in [([{"path": f["mine"], "as": "../x"}], "\"as\" must name"),
                       ([{"path": f["mine"], "as": ".hidden"}], "\"as\" must name"),
                       ([{"path": f["mine"], "as": "a"}, {"path": f["mine"], "as": "a"}], "given twice"),
                       ([{"path": f["big"], "as": "big"}], "MiB in all"),
                       ([{"as": "x", "fd": 0}], "for mcp-python-sandbox to fill in")]:
        r = c.call_tool("execute_python", {"script": "print('RAN')", "files": files}, timeout=120)
        check(r["isError"] and why in c.text(r), f"{files}: {c.text(r)}")


@test
def daemon_never_opens_a_path():
    """Straight to the socket, as the same user but without the shim: a path is refused, not opened."""
    d, _ = nobody()
    f = user_files()
    s = d.raw_connect()
    s.settimeout(30)
    at_exit(s.close)

    def exchange(data, fds=None):
        if fds:
            s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(__import__("array").array("i", fds)))])
        else:
            s.sendall(data)
        buf = b""
        while b"\n" not in buf:
            chunk = s.recv(65536)
            check(chunk, "the daemon closed the connection")
            buf += chunk
        return json.loads(buf.split(b"\n")[0])

    exchange(line(req(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "raw", "version": "0"}})))
    s.sendall(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    m = exchange(line(req(2, "tools/call", {"name": "execute_python", "arguments": {
        "script": "print(open('/work/in/x').read())", "files": [{"path": f["root"], "as": "x"}]}})))
    check(m["result"]["isError"], m)
    text = m["result"]["content"][0]["text"]
    check("never opens a path" in text, text)
    check("secret" not in json.dumps(m), "the daemon read the file")

    # The fds sent with bytes of a line are that line's: with its first byte, or with a later piece of it.
    fd = os.open(f["mine"], os.O_RDONLY)
    at_exit(lambda: os.close(fd))
    m = exchange(line(req(3, "tools/call", {"name": "execute_python", "arguments": {
        "script": "print(open('/work/in/x').read(), end='')", "files": [{"as": "x", "fd": 0}]}})), [fd])
    check(not m["result"]["isError"], m)
    eq(m["result"]["structuredContent"]["stdout"], "id,value\n1,42\n", "passed by hand")
    body = line(req(4, "tools/call", {"name": "execute_python", "arguments": {
        "script": "print(open('/work/in/x').read(), end='')", "files": [{"as": "x", "fd": 0}]}}))
    s.sendall(body[:20])
    time.sleep(0.2)
    m = exchange(body[20:], [fd])
    check(not m["result"]["isError"], m)
    eq(m["result"]["structuredContent"]["stdout"], "id,value\n1,42\n", "sent with the second piece")
    # Sent with a line that does not use them, they are closed with it: nobody else's slot 0.
    exchange(line(req(6, "ping")), [fd])
    m = exchange(body.replace(b'"id":4', b'"id":7'))
    check(m["result"]["isError"], m)
    check("no file descriptor came" in m["result"]["content"][0]["text"], m)
    # More fds than a message may carry: the connection is closed.
    s.sendmsg([line(req(5, "ping"))[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                            bytes(__import__("array").array("i", [fd] * 17)))])
    buf = b""
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    except ConnectionResetError:
        pass
    check(not buf or b"more file descriptors" in buf, buf)
    check("more file descriptors than one message may carry" in d.log_full(), d.log())


@test
def user_file_in_persistent_sandbox():
    d, c = nobody()
    f = user_files()
    r = c.call_tool("create_sandbox", {"files": [{"path": f["mine"], "as": "t.csv"}]}, timeout=300)
    check(not r["isError"], c.text(r))
    sid = r["structuredContent"]["sandbox_id"]
    code = ("import errno\n"
            "try:\n"
            "    open('/work/in/t.csv', 'w')\n"
            "    w = 'WROTE'\n"
            "except OSError as e:\n"
            "    w = errno.errorcode[e.errno]\n"
            "print(open('/work/in/t.csv').read().splitlines()[1], w)\n")
    for _ in ("created", "reset"):
        r = c.call_tool("execute_code", {"sandbox_id": sid, "code": code}, timeout=120)
        check(not r["isError"], c.text(r))
        out = r["structuredContent"]["stdout"]
        check(out in ("1,42 EROFS\n", "1,42 EACCES\n"), out)
        r = c.call_tool("reset_sandbox", {"sandbox_id": sid}, timeout=120)
        check(not r["isError"], c.text(r))
    r = c.call_tool("create_sandbox", {"files": [{"path": f["root"], "as": "t.csv"}]}, timeout=120)
    check(r["isError"] and "cannot read it" in c.text(r), c.text(r))
    c.call_tool("close_sandbox", {"sandbox_id": sid})


@test
def stdio_fallback_cannot_take_files():
    from mcptest import need_uv, newest_python
    need_uv()
    newest_python()
    f = user_files()
    c = initialized(stdio_client())
    r = c.call_tool("execute_python", {"script": "print('RAN')", "files": [{"path": "/etc/hostname"}]},
                    timeout=300)
    check(r["isError"], c.text(r))
    check("--stdio" in c.text(r) and "data-dirs" in c.text(r), c.text(r))
    check("RAN" not in r["structuredContent"].get("stdout", ""), "the script ran")
    st = c.call_tool("check_environment", {}, timeout=120)
    eq(st["structuredContent"]["user_files"]["available"], False, "files in the --stdio fallback")
    check("not in this session" in c.text(st), c.text(st))


@test
def data_dir_readability_rechecked_on_reload():
    top = scratch("mcp-data-reload-")
    os.chmod(top, 0o755)
    late = os.path.join(top, "late")
    os.mkdir(late)
    with open(os.path.join(late, "f.txt"), "w") as f:
        f.write("now readable\n")
    os.chmod(os.path.join(late, "f.txt"), 0o644)
    os.chmod(late, 0o000)
    d, c = sandbox_daemon([f"--data-dirs=late={late}"])

    def state():
        st = c.call_tool("check_environment", {}, timeout=60)["structuredContent"]
        r = c.call_tool("execute_python", {"script": "import os\nprint(os.listdir('/data') if os.path.isdir('/data') "
                                                     "else [])"}, timeout=120)
        return st["data_dirs"][0]["readable"], r["structuredContent"]["stdout"]

    eq(state(), (False, "[]\n"), "unreadable at start")
    check("sandboxes will not have /data/late" in d.log_full(), d.log())
    os.chmod(late, 0o755)
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: d.log_full().count("Reloaded: ") >= 1, what="the reload")
    eq(state(), (True, "['late']\n"), "readable after the reload")
    os.chmod(late, 0o000)
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: d.log_full().count("Reloaded: ") >= 2, what="the second reload")
    eq(state(), (False, "[]\n"), "unreadable again")
    eq(d.log_full().count("sandboxes will not have /data/late"), 2, "warned at start and at the second reload")
    os.chmod(late, 0o755)


@test
def bad_data_dirs_refused():
    top = scratch("mcp-data-cfg-")
    cache = os.path.join(top, "cache")
    for value, why in [("Tables=/srv", "a-z"), ("x/y=/srv", "a-z"), ("t=relative", "absolute"),
                       ("t=/srv/../etc", "plain"), ("t=/srv/", "plain"), ("t=/", "whole"),
                       ("t=/proc/1", "/proc"), ("t=/etc", "/etc"), ("t=/sys", "/sys"), ("t", "NAME=PATH"),
                       (f"t={cache}/envs", "cache directory"), (f"t={top}", "cache directory"),
                       ("t=/srv a=/srv t=/mnt", "twice")]:
        p = subprocess.run([DAEMON, f"--cache-dir={cache}", "--check-config", f"--data-dirs={value}"],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode != 0, f"{value}: accepted: {p.stdout}")
        check(why in p.stderr, f"{value}: {p.stderr}")
    os.symlink("/proc/self", os.path.join(top, "link-to-proc"))
    p = subprocess.run([DAEMON, f"--cache-dir={cache}", "--check-config",
                        f"--data-dirs=t={os.path.join(top, 'link-to-proc')}"], capture_output=True, text=True,
                       timeout=30)
    check(p.returncode != 0 and "nothing in /proc" in p.stderr, p.stderr)
    p = subprocess.run([DAEMON, f"--cache-dir={cache}", "--check-config", "--data-dirs=t-1_x=/srv/data"],
                       capture_output=True, text=True, timeout=30)
    eq(p.returncode, 0, p.stderr)
    check("data-dirs = t-1_x=/srv/data" in p.stdout, p.stdout)


if __name__ == "__main__":
    main()
