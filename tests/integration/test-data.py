#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test: the user's data without pasting it through the model.

Through the real shim against the real daemon and real bubblewrap:
- data-dirs: an administrator's directory is readable at /data/NAME in a run and in a persistent sandbox, and
  not writable there (the write fails with EROFS or EACCES); check_environment lists it, and says so when the
  sandboxes cannot read one; bad entries are refused when the configuration is read.

Needs $DAEMON and $SHIM, bubblewrap, uv and a pyenv Python >= 3.11. Exit status: 0 pass, 1 fail, 77 skip.
"""

import base64
import json
import os
import subprocess

from mcptest import DAEMON, at_exit, check, eq, main, sandbox_daemon, scratch, test

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
    p = subprocess.run([DAEMON, f"--cache-dir={cache}", "--check-config", "--data-dirs=t-1_x=/srv/data"],
                       capture_output=True, text=True, timeout=30)
    eq(p.returncode, 0, p.stderr)
    check("data-dirs = t-1_x=/srv/data" in p.stdout, p.stdout)


if __name__ == "__main__":
    main()
