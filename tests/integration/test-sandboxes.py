#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test of the persistent sandboxes (create_sandbox, execute_code, ...).

Through the real shim against the real daemon: state that persists across
calls and reconnects, ownership by uid (a second shim as uid 65534), idle
reaping, install_package from a local wheel index, reset, file round trips
(binary included), path traversal and symlink escapes, matplotlib figures as
PNG image content, no network inside, and a timed-out cell that keeps state.

Needs $DAEMON and $SHIM, bubblewrap, uv and a pyenv Python >= 3.11; the
matplotlib test needs pypi.org. Exit status: 0 pass, 1 fail, 77 skip.
"""

import base64
import os
import shutil
import struct
import time

from mcptest import at_exit, scratch
from mcptest import Daemon, RssGrowth, check, eq, main, need_pythons, need_pypi, need_uv, sanitized, skip, test
from wheels import build_wheel

_STATE = {}


def wheel_dir():
    d = _STATE.get("wheels")
    if not d:
        d = scratch("mcptest-sbx-wheels-")
        os.chmod(d, 0o755)
        build_wheel(d, "sbx-tiny", "1.2.3", module_source="def hello():\n    return 'tiny says hi'\n")
        _STATE["wheels"] = d
    return d


def daemon(name="local", args=(), pypi=False):
    d = _STATE.get(name)
    if d is not None and d.alive():
        return d
    need_pythons("3.12")
    need_uv()
    extra = [] if pypi else [f"--find-links={wheel_dir()}", "--offline"]
    d = Daemon("activate", args=["--persistent-sandboxes", *extra, *args])
    at_exit(d.close)
    _STATE[name] = d
    return d


def client(d, **kw):
    c = d.client(**kw)
    c.initialize()
    at_exit(lambda: c.proc.poll() is None and c.kill())
    return c


def call(c, name, timeout=180, **args):
    return c.call_tool(name, args, timeout=timeout)


def create(c, **args):
    r = call(c, "create_sandbox", **args)
    check(not r.get("isError"), f"create_sandbox failed: {c.text(r)}")
    sid = r["structuredContent"]["sandbox_id"]
    check(len(sid) == 32 and all(ch in "0123456789abcdef" for ch in sid), f"sandbox id {sid!r}")
    return sid


def run(c, sid, code, timeout=None, ok=True):
    args = {"sandbox_id": sid, "code": code}
    if timeout:
        args["timeout_seconds"] = timeout
    r = call(c, "execute_code", **args)
    if ok:
        check(not r.get("isError"), f"cell failed: {c.text(r)}")
    return r


# --- tests ----------------------------------------------------------------------


@test
def state_persists_and_repl_value():
    d = daemon()
    c = client(d)
    sid = create(c)
    run(c, sid, "import math\nx = 40")
    r = run(c, sid, "def f(v):\n    return v + 2\nprint('hi')\nf(x)")
    st = r["structuredContent"]
    eq(st["result"], "42", "the final expression's repr")
    eq(st["stdout"], "hi\n", "stdout")
    check("Out[2]: 42" in c.text(r), c.text(r))
    r = run(c, sid, "math.sqrt(16); None")
    eq(r["structuredContent"].get("result"), None, "a None value is not shown (nor said)")
    r = run(c, sid, "1/0", ok=False)
    check(r.get("isError") and "ZeroDivisionError" in r["structuredContent"]["error"], c.text(r))
    check("<cell-4>" in r["structuredContent"]["error"], "the traceback names the cell")
    r = run(c, sid, "import subprocess; subprocess.run(['echo', 'from a child'])")
    check("from a child" in r["structuredContent"]["stdout"], c.text(r))
    r = run(c, sid, "import os; os.getuid(), os.getcwd()")
    eq(r["structuredContent"]["result"], "(65534, '/work')", "uid and cwd inside")
    call(c, "close_sandbox", sandbox_id=sid)
    r = call(c, "execute_code", sandbox_id=sid, code="1")
    check(r.get("isError") and "no sandbox" in c.text(r), c.text(r))
    c.close()


@test
def reconnect_keeps_sandbox_and_status_lists_it():
    d = daemon()
    c = client(d)
    sid = create(c)
    run(c, sid, "kept = 'still here'")
    c.close()
    c2 = client(d)
    eq(run(c2, sid, "kept")["structuredContent"]["result"], "'still here'", "after reconnect")
    st = call(c2, "get_sandbox_status")["structuredContent"]
    check(sid in [s["sandbox_id"] for s in st["sandboxes"]], st)
    info = call(c2, "get_sandbox_info", sandbox_id=sid)["structuredContent"]
    check(info["memory_kib"] and info["memory_kib"] > 1000, info)
    check("kept" in info["variables"], info)
    check(info["age_seconds"] >= 0 and info["idle_seconds"] >= 0, info)
    call(c2, "close_sandbox", sandbox_id=sid)
    c2.close()


@test
def other_uid_cannot_see_or_use():
    if os.getuid() != 0:
        skip("needs root to run a client as another uid")
    if not shutil.which("setpriv"):
        skip("setpriv is not installed")
    d = daemon()
    # Let uid 65534 reach the socket: the directory traversable, the socket writable.
    os.chmod(d.dir, 0o711)
    os.chmod(d.socket, 0o666)
    for p in (os.path.dirname(os.environ["SHIM"]),):
        check(os.stat(p).st_mode & 0o005 == 0o005, f"{p} must be readable by others for this test")
    c = client(d)
    sid = create(c)
    run(c, sid, "secret = 1234")
    from mcptest import Client, SHIM
    other = Client(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SHIM,
                    f"--socket={d.socket}", "--no-fallback"])
    at_exit(lambda: other.proc.poll() is None and other.kill())
    other.initialize()
    check("from uid 65534" in d.log(), "the second client really is uid 65534")
    for tool, extra in (("execute_code", {"code": "secret"}), ("get_sandbox_info", {}),
                        ("read_file", {"path": "x"}), ("close_sandbox", {}), ("reset_sandbox", {})):
        r = other.call_tool(tool, {"sandbox_id": sid, **extra})
        check(r.get("isError") and "no sandbox" in other.text(r), f"{tool} as uid 65534: {other.text(r)}")
    mine = other.call_tool("execute_code", {"sandbox_id": sid, "code": "secret"})
    unknown = other.call_tool("execute_code", {"sandbox_id": "0" * 32, "code": "1"})
    eq(other.text(unknown).replace("0" * 32, "ID"), other.text(mine).replace(sid, "ID"), "the same error as unknown")
    st = other.call_tool("get_sandbox_status")["structuredContent"]
    eq(st["sandboxes"], [], "uid 65534 sees no sandboxes")
    other.close()
    eq(run(c, sid, "secret")["structuredContent"]["result"], "1234", "the owner still has it")
    call(c, "close_sandbox", sandbox_id=sid)
    c.close()


@test
def idle_reaping():
    d = daemon("reap", ["--sandbox-idle-timeout=2"])
    c = client(d)
    sid = create(c)
    run(c, sid, "a = 1")
    time.sleep(3.5)
    r = call(c, "execute_code", sandbox_id=sid, code="a")
    check(r.get("isError") and "no sandbox" in c.text(r), c.text(r))
    eq(call(c, "get_sandbox_status")["structuredContent"]["sandboxes"], [], "reaped")
    c.close()


@test
def caps_per_user():
    d = daemon("cap", ["--max-sandboxes-per-user=2"])
    c = client(d)
    a, b = create(c), create(c)
    r = call(c, "create_sandbox")
    check(r.get("isError") and "most allowed" in c.text(r), c.text(r))
    call(c, "close_sandbox", sandbox_id=a)
    create(c)
    call(c, "close_sandbox", sandbox_id=b)
    c.close()


@test
def caps_in_total():
    # The server's cap, apart from the user's: a refusal that names max-sandboxes.
    d = daemon("cap-total", ["--max-sandboxes=1", "--max-sandboxes-per-user=4"])
    c = client(d)
    a = create(c)
    r = call(c, "create_sandbox")
    check(r.get("isError") and "max-sandboxes=1" in c.text(r) and "most allowed per user" not in c.text(r), c.text(r))
    call(c, "close_sandbox", sandbox_id=a)
    create(c)
    c.close()


@test
def install_package_then_import():
    d = daemon()
    c = client(d)
    sid = create(c)
    run(c, sid, "open('keep.txt', 'w').write('kept'); v = 1")
    r = run(c, sid, "import sbx_tiny", ok=False)
    check("ModuleNotFoundError" in c.text(r), c.text(r))
    r = call(c, "install_package", sandbox_id=sid, packages=["sbx-tiny"])
    check(not r.get("isError"), c.text(r))
    eq(r["structuredContent"]["installed"].get("sbx_tiny"), "1.2.3", "installed")
    r = run(c, sid, "import sbx_tiny; sbx_tiny.hello(), open('keep.txt').read(), 'v' in globals()")
    eq(r["structuredContent"]["result"], "('tiny says hi', 'kept', False)", "import, files kept, state reset")
    r = call(c, "list_installed_packages", sandbox_id=sid)
    eq(r["structuredContent"]["installed"].get("sbx_tiny"), "1.2.3", "listed")
    # reset goes back to the creation environment
    r = call(c, "reset_sandbox", sandbox_id=sid)
    check(not r.get("isError"), c.text(r))
    r = run(c, sid, "import os\ntry:\n    import sbx_tiny\nexcept ImportError:\n    t = 'gone'\nt, os.listdir('.')")
    eq(r["structuredContent"]["result"], "('gone', [])", "package and files gone after reset")
    call(c, "close_sandbox", sandbox_id=sid)
    c.close()


@test
def work_carried_over_by_many_sandboxes_at_once_stays_bounded():
    """Six sandboxes of one user, each with 15 MB of files in /work, install a package at once: install_package
    carries /work over to the new environment through the daemon (a tar, as base64, parsed and sent on). Every
    carry held some 50 MB at its peak, all at once: the daemon grew by 415 MB for eight. Now one carry runs at a
    time (SCHED_CARRY), the others wait their turn, every sandbox keeps its files, and the daemon grows by what
    one carry holds."""
    d = daemon()
    n = 6
    cs, sids = [], []
    for _ in range(n):
        c = client(d)
        sid = create(c)
        run(c, sid, "import os\nfor k in range(5):\n    open(f'f{k}.bin', 'wb').write(os.urandom(3_000_000))\n"
                    "open('keep.txt', 'w').write('kept')")
        cs.append(c)
        sids.append(sid)
    import threading
    results = [None] * n

    def install(i):
        results[i] = call(cs[i], "install_package", sandbox_id=sids[i], packages=["sbx-tiny"])

    with RssGrowth(d.proc.pid, every=0.002) as g:
        threads = [threading.Thread(target=install, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print(f"# the daemon grew by {g.grew} KiB at the peak for {n} carries at once", flush=True)
    for i in range(n):
        check(results[i] is not None and not results[i].get("isError"), f"install_package {i}: {results[i]}")
        r = run(cs[i], sids[i], "import os, sbx_tiny\n(open('keep.txt').read(), sum(os.path.getsize(f'f{k}.bin') "
                                "for k in range(5)))")
        eq(r["structuredContent"]["result"], "('kept', 15000000)", f"sandbox {i}'s files after the carry")
    if not sanitized(d.proc.pid):
        check(g.grew < 100 * 1024, f"the daemon grew by {g.grew} KiB for {n} carries")
    for i in range(n):
        call(cs[i], "close_sandbox", sandbox_id=sids[i])
        cs[i].close()


@test
def reset_clears_variables_and_files():
    d = daemon()
    c = client(d)
    sid = create(c)
    run(c, sid, "x = 5\nopen('f.txt', 'w').write('data')")
    r = call(c, "reset_sandbox", sandbox_id=sid)
    check(not r.get("isError"), c.text(r))
    r = run(c, sid, "import os\n('x' in globals(), os.path.exists('f.txt'))")
    eq(r["structuredContent"]["result"], "(False, False)", "after reset")
    call(c, "close_sandbox", sandbox_id=sid)
    c.close()


@test
def files_round_trip_and_escapes():
    d = daemon()
    c = client(d)
    sid = create(c)
    r = call(c, "write_file", sandbox_id=sid, path="dir/hello.txt", content="héllo\n")
    check(not r.get("isError"), c.text(r))
    r = call(c, "read_file", sandbox_id=sid, path="dir/hello.txt")
    eq(r["structuredContent"]["content"], "héllo\n", "text round trip")
    blob = bytes(range(256))
    r = call(c, "write_file", sandbox_id=sid, path="bin.dat", content=base64.b64encode(blob).decode(), encoding="base64")
    check(not r.get("isError"), c.text(r))
    r = run(c, sid, "open('bin.dat','rb').read() == bytes(range(256))")
    eq(r["structuredContent"]["result"], "True", "the interpreter sees the bytes")
    r = call(c, "read_file", sandbox_id=sid, path="bin.dat", encoding="base64")
    eq(base64.b64decode(r["structuredContent"]["content"]), blob, "binary round trip")
    r = call(c, "read_file", sandbox_id=sid, path="bin.dat")
    check(r.get("isError") and "base64" in c.text(r), "binary as text is refused with a hint")
    r = call(c, "list_files", sandbox_id=sid, recursive=True)
    paths = sorted(e["path"] for e in r["structuredContent"]["entries"])
    eq(paths, ["bin.dat", "dir", "dir/hello.txt"], "listing")
    run(c, sid, "import os; os.symlink('/etc', 'etc'); os.symlink('/etc/passwd', 'pw')")
    for tool, args in (("read_file", {"path": "../x"}), ("read_file", {"path": "/etc/passwd"}),
                       ("read_file", {"path": "etc/passwd"}), ("read_file", {"path": "pw"}),
                       ("write_file", {"path": "etc/evil", "content": "x"}),
                       ("write_file", {"path": "../../tmp/evil", "content": "x"}),
                       ("list_files", {"path": "etc"}), ("list_files", {"path": ".."})):
        r = call(c, tool, sandbox_id=sid, **args)
        check(r.get("isError"), f"{tool} {args} must be refused: {c.text(r)}")
    big = "x" * (1024 * 1024 + 1)
    r = call(c, "write_file", sandbox_id=sid, path="big.txt", content=big)
    check(r.get("isError") and "cap" in c.text(r), c.text(r)[:200])
    call(c, "close_sandbox", sandbox_id=sid)
    c.close()


@test
def a_reply_of_too_many_values_is_refused_before_it_is_built():
    # The worker is the cell's own interpreter: a cell can make its list_files answer 200 000 empty objects (0.6 MB,
    # under the message's byte cap). Built whole, that was some 140 MB of json-c objects in the daemon and a quarter
    # of a second of its loop; the daemon now counts the values as they come and starts the sandbox afresh.
    d = daemon()
    c = client(d)
    sid = create(c)
    run(c, sid, "import gc\n"
                "W = next(o for o in gc.get_objects() if isinstance(o, type) and o.__name__ == 'Worker')\n"
                "W.op_list_files = lambda self, req: {'ok': True, 'entries': [{}] * 200000, 'truncated': False}\n"
                "x = 1")
    with RssGrowth(d.proc.pid) as g:
        r = call(c, "list_files", sandbox_id=sid)
    check(r.get("isError"), f"list_files must fail: {c.text(r)[:300]}")
    print(f"# the daemon's RSS grew by {g.grew} KiB for one reply", flush=True)
    if not sanitized(d.proc.pid):   # under ASan its quarantine and shadow are not the daemon's memory
        check(g.grew < 16 * 1024, f"the daemon's RSS grew by {g.grew} KiB for one reply")
    check("broke the protocol (a message that is too long, of too many values" in d.log(), d.log()[-1500:])
    r = run(c, sid, "'x' in globals()")
    eq(r["structuredContent"]["result"], "False", "the sandbox was started afresh")
    call(c, "close_sandbox", sandbox_id=sid)
    c.close()


@test
def no_network_and_limits_inside():
    d = daemon()
    c = client(d)
    sid = create(c)
    r = run(c, sid, "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=3)\n    n = 'open'\n"
                    "except OSError as e:\n    n = 'refused'\nn")
    eq(r["structuredContent"]["result"], "'refused'", "no network")
    r = run(c, sid, "import os; sorted(os.listdir('/')) , os.path.exists('/home'), os.access('/usr', os.W_OK)")
    check("False, False)" in r["structuredContent"]["result"], r["structuredContent"]["result"])
    # the work dir is a size-capped tmpfs
    r = run(c, sid, "import os; s = os.statvfs('/work'); s.f_blocks * s.f_frsize <= 128 * 1024 * 1024")
    eq(r["structuredContent"]["result"], "True", "tmpfs capped")
    call(c, "close_sandbox", sandbox_id=sid)
    c.close()


@test
def timeout_interrupts_and_keeps_state():
    d = daemon()
    c = client(d)
    sid = create(c)
    run(c, sid, "before = 'set'")
    r = run(c, sid, "import time\nwhile True:\n    time.sleep(0.1)", timeout=1, ok=False)
    st = r["structuredContent"]
    # Lean: flags only when they are true.
    check(st["timed_out"] and st["interrupted"] and "state_lost" not in st, st)
    check(st["message"].startswith("The cell was interrupted after 1s, the time limit"), st)
    check("KeyboardInterrupt" in st["error"], st["error"])
    eq(run(c, sid, "before")["structuredContent"]["result"], "'set'", "state kept after an interrupt")
    # A cell that swallows the interrupt is killed: variables lost, files kept.
    run(c, sid, "open('f', 'w').write('1'); v = 2")
    r = run(c, sid, "import time\nwhile True:\n    try:\n        time.sleep(0.1)\n    except KeyboardInterrupt:\n"
                    "        pass", timeout=1, ok=False)
    st = r["structuredContent"]
    check(st["timed_out"] and st["state_lost"] and "files_lost" not in st, st)
    check("the interpreter was restarted" in st["message"], st)
    r = run(c, sid, "import os; 'v' in globals(), os.path.exists('f')")
    eq(r["structuredContent"]["result"], "(False, True)", "fresh interpreter, files kept")
    call(c, "close_sandbox", sandbox_id=sid)
    c.close()


@test
def matplotlib_figure_is_an_image():
    need_pypi()
    d = daemon("pypi", pypi=True)
    c = client(d)
    sid = create(c, dependencies=["matplotlib"])
    r = run(c, sid, "import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(4, 3), dpi=50)\n"
                    "plt.plot([1, 2, 3])\nprint('plotted')")
    images = [b for b in r["content"] if b["type"] == "image"]
    eq(len(images), 1, "one image")
    eq(images[0]["mimeType"], "image/png", "mime type")
    png = base64.b64decode(images[0]["data"])
    eq(png[:8], b"\x89PNG\r\n\x1a\n", "PNG signature")
    eq(png[12:16], b"IHDR", "IHDR first")
    w, h = struct.unpack(">II", png[16:24])
    eq((w, h), (200, 150), "figure size in pixels")
    check(any(b["type"] == "text" and "figure-1.png" in b["text"] for b in r["content"]), "a text line names it")
    check("structuredContent" not in r, "with an image, no structuredContent (clients showing it drop images)")
    # closed after the cell: the next one returns none
    r = run(c, sid, "1")
    eq([b for b in r["content"] if b["type"] == "image"], [], "no image next time")
    call(c, "close_sandbox", sandbox_id=sid)
    c.close()


if __name__ == "__main__":
    main()
