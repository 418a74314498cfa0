#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test: plots and files come back from execute_python and execute_code.

Through the real shim against the real daemon: matplotlib figures as PNG image
content with a naming text line (shown with plt.show() or left open), files in
/work/out inline (text) or as embedded resources (binary), caps on count and
size with what was left out said, and the script still running as
`python /work/script.py` would: its own line numbers in tracebacks and no
wrapper frames, __name__ == "__main__", __file__, sys.exit() codes, and no
matplotlib import unless the script asked for it.

Needs $DAEMON and $SHIM, bubblewrap, uv and a pyenv Python >= 3.11; the
matplotlib tests need pypi.org (matplotlib is installed once, and the daemon
and its cache are shared by all tests). Exit status: 0 pass, 1 fail, 77 skip.
"""

import base64
import glob
import os
import re
import shutil
import struct
import time

from mcptest import at_exit
from mcptest import Daemon, check, eq, main, need_pythons, need_pypi, need_uv, test

_STATE = {}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def client(version="2025-11-25"):
    """One daemon for all tests (its cache keeps matplotlib's environment); a client per version."""
    d = _STATE.get("daemon")
    if d is None or not d.alive():
        need_pythons("3.12")
        need_uv()
        d = Daemon("activate", args=["--persistent-sandboxes"])
        at_exit(d.close)
        _STATE["daemon"] = d
    c = _STATE.get(version)
    if c is None or c.proc.poll() is not None:
        c = d.client()
        c.initialize(version)
        at_exit(lambda: c.proc.poll() is None and c.kill())
        _STATE[version] = c
    return c


def run(script, version="2025-11-25", timeout=600, **args):
    c = client(version)
    return c.call_tool("execute_python", {"script": script, **args}, timeout=timeout)


def run_mpl(script, **kw):
    need_pypi()
    return run(script, dependencies=["matplotlib"], timeout_seconds=120, **kw)


def blocks(r, kind):
    return [b for b in r["content"] if b["type"] == kind]


def texts(r):
    return [b["text"] for b in blocks(r, "text")]


def png_size(data):
    png = base64.b64decode(data)
    eq(png[:8], PNG_SIGNATURE, "PNG signature")
    eq(png[12:16], b"IHDR", "IHDR first")
    return struct.unpack(">II", png[16:24])


def ok(r, what="the run"):
    """The run's text. A result with figures or files has no structuredContent: clients that show it when present
    would hand the model neither (test-model-view.py plays both kinds of client)."""
    text = r["content"][0]["text"]
    check(not r["isError"] and "--- exit_code: 0 ---" in text, f"{what} failed: {text[:2000]}")
    if len(r["content"]) > 1:
        check("structuredContent" not in r, f"{what}: structuredContent next to figures or files")
    return text


def figure_names(r):
    return [m.group(1) for t in texts(r) for m in [re.fullmatch(r"(.+) \((\d+)x(\d+) PNG\)", t)] if m]


def file_lines(r):
    """{name: the line that names an included file}"""
    return {m.group(1): t for t in texts(r) for m in [re.match(r"--- file out/(\S+) \(", t)] if m}


# ---- figures -----------------------------------------------------------------


@test
def shown_figure_is_an_image():
    r = run_mpl("import matplotlib.pyplot as plt\n"
                "fig = plt.figure(figsize=(4, 3), dpi=50)\n"
                "plt.plot([1, 2, 3])\n"
                "plt.show()\n"
                "print('plotted')\n")
    text = ok(r)
    images = blocks(r, "image")
    eq(len(images), 1, "one image (shown once, not again at the end)")
    eq(images[0]["mimeType"], "image/png", "mime type")
    eq(png_size(images[0]["data"]), (200, 150), "figure size in pixels")
    # the naming line comes right before the image
    i = r["content"].index(images[0])
    eq(r["content"][i - 1], {"type": "text", "text": "Figure 1 (200x150 PNG)"}, "the line naming it")
    eq(figure_names(r), ["Figure 1"], "named once")
    check("--- stdout ---\nplotted\n" in text, "stdout kept")
    check("non-interactive" not in text, f"no Agg warning: {text}")


@test
def open_shown_and_closed_figures_all_come_back():
    r = run_mpl("import matplotlib.pyplot as plt\n"
                "plt.figure(figsize=(4, 3), dpi=50); plt.plot([1, 2])\n"
                "plt.show()\n"
                "plt.figure(figsize=(2, 2), dpi=50); plt.plot([2, 1])\n"      # left open
                "f3 = plt.figure(figsize=(3, 2), dpi=50); plt.plot([0, 0])\n"
                "plt.show()\n"
                "plt.close(f3)\n"                                               # shown, then closed
                "plt.figure(1); plt.title('changed after show')\n")             # stale again: sent again
    ok(r)
    sizes = [png_size(b["data"]) for b in blocks(r, "image")]
    eq(sizes, [(200, 150), (100, 100), (150, 100), (200, 150)], "figures in order")
    eq(figure_names(r), ["Figure 1", "Figure 2", "Figure 3", "Figure 1"], "names")


@test
def figures_over_the_cap_are_listed():
    r = run_mpl("import matplotlib.pyplot as plt\n"
                "for i in range(10):\n"
                "    plt.figure(figsize=(1, 1), dpi=20)\n")
    ok(r)
    eq(len(blocks(r, "image")), 8, "at most 8 images")
    eq(figure_names(r), [f"Figure {i}" for i in range(1, 9)], "each included one named")
    note = [t for t in texts(r) if t.startswith("--- left out ---")]
    eq(len(note), 1, f"a note: {texts(r)}")
    check("Figure 9: " in note[0] and "Figure 10: " in note[0] and "more figures" in note[0], note[0])


@test
def figure_after_an_exception_still_comes_back():
    r = run_mpl("import matplotlib.pyplot as plt\n"
                "plt.figure(figsize=(2, 1), dpi=50)\n"
                "raise RuntimeError('late')\n")
    text = r["content"][0]["text"]
    check("--- exit_code: 1 ---" in text, text)
    check("structuredContent" not in r, "the figure comes back: no structuredContent")
    eq([png_size(b["data"]) for b in blocks(r, "image")], [(100, 50)], "the figure")
    check('File "/work/script.py", line 3, in <module>' in text, text)


@test
def matplotlib_stderr_is_clean():
    """matplotlib asks fontconfig (fc-list) for the system's fonts: the sandbox has fontconfig's configuration and
    the system's font cache, read-only, so a plain plot writes nothing to stderr (it used to print
    "Fontconfig error: Cannot load default config file" on every run)."""
    r = run_mpl("import matplotlib.pyplot as plt\n"
                "from matplotlib import font_manager\n"
                "plt.figure(figsize=(2, 1), dpi=50)\n"
                "plt.title('Text needs a font')\n"
                "plt.savefig('plot.png')\n"
                "import shutil, subprocess\n"
                "fc = shutil.which('fc-list')\n"
                "print('fc-list', 'absent' if not fc else len(subprocess.run([fc], capture_output=True, text=True,\n"
                "      check=True).stdout.splitlines()))\n")
    text = ok(r)
    # The result's text has a stderr section only when the run wrote to stderr.
    check("--- stderr ---" not in text and "Fontconfig" not in text, f"stderr of a matplotlib run: {text[:2000]!r}")
    if shutil.which("fc-list") and os.path.exists("/etc/fonts/fonts.conf") and glob.glob("/usr/share/fonts/*/*/*"):
        m = re.search(r"fc-list (\d+)", text)
        check(m and int(m.group(1)) > 0, f"fontconfig in the sandbox lists the system's fonts: {text[:2000]!r}")


@test
def matplotlib_font_list_is_made_once_per_environment():
    """The font list matplotlib builds on its first import is made once for the environment (in a sandbox, after
    its bytecode), kept read-only in it, and handed to each run: a run logs no "generated new fontManager", which
    a run that picks a MPLCONFIGDIR of its own does (the evidence that the log line would be seen)."""
    plot = ("import logging, os, sys\n"
            "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
            "import matplotlib\n"
            "matplotlib.use('Agg')\n"
            "import matplotlib.pyplot as plt\n"
            "plt.figure(figsize=(2, 1), dpi=50)\n"
            "plt.title('Text needs a font')\n"
            "plt.savefig('/tmp/plot.png')\n"
            "plt.close('all')\n"
            "print('plotted')\n")
    r = run_mpl("import matplotlib; print('ok')")
    ok(r)
    key = (r.get("structuredContent") or {}).get("environment", {}).get("key")
    check(key, f"the environment's key: {r.get('structuredContent')}")
    fonts = os.path.join(_STATE["daemon"].cache_dir, "envs", key, ".mcp-python-sandbox-mpl")
    deadline = time.monotonic() + 180
    while not glob.glob(os.path.join(fonts, "fontlist-v*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    lists = glob.glob(os.path.join(fonts, "fontlist-v*.json"))
    check(lists, f"the environment's font list at {fonts}")
    check(all(os.stat(p).st_mode & 0o222 == 0 for p in lists), "read-only")
    for i in range(2):
        r = run_mpl(plot)
        text = ok(r)
        check("plotted" in text, text[:2000])
        check("generated new fontManager" not in text and "--- stderr ---" not in text,
              f"run {i + 1}: the font list was built again, or stderr not clean: {text[:3000]!r}")
    r = run_mpl("import os\nos.environ['MPLCONFIGDIR'] = '/tmp/own'\n" + plot)
    text = ok(r)
    check("generated new fontManager" in text, f"a MPLCONFIGDIR of the script's own: built there: {text[:3000]!r}")


@test
def no_matplotlib_no_cost():
    # matplotlib is in the environment, but a script that does not import it must not load it.
    r = run_mpl("import sys\nprint('matplotlib' in sys.modules, 'matplotlib.pyplot' in sys.modules)\n")
    ok(r)
    st = r["structuredContent"]
    eq(st["stdout"], "False False\n", "matplotlib not imported")
    eq([b["type"] for b in r["content"]], ["text"], "one text block, nothing else")
    check("figures" not in st and "files" not in st, f"no outputs, none listed: {st}")
    # and a plain hello world stays plain
    r = run("print('hello')")
    ok(r)
    eq([b["type"] for b in r["content"]], ["text"], "hello: one text block")
    eq(r["structuredContent"]["stdout"], "hello\n", "hello")


@test
def legacy_clients_get_images_too():
    r = run_mpl("import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 3), dpi=50)\n", version="2024-11-05")
    check(not r["isError"], r["content"][0]["text"])
    check("structuredContent" not in r, "no structuredContent before 2025-06-18")
    eq([png_size(b["data"]) for b in blocks(r, "image")], [(200, 150)], "the image")
    check("Figure 1 (200x150 PNG)" in texts(r), texts(r))


# ---- files -------------------------------------------------------------------


@test
def files_come_back():
    payload = bytes(range(256)) * 3
    r = run("import os\n"
            "assert os.path.isdir('/work/out')\n"
            "with open('/work/out/data.csv', 'w') as f:\n"
            "    f.write('x,y\\n1,2\\n3,4\\n')\n"
            f"open('out/blob.bin', 'wb').write({payload!r})\n"
            "os.makedirs('out/sub')\n"
            "open('out/sub/notes.txt', 'w').write('n\u00e9e')\n"
            "os.symlink('/etc/passwd', 'out/link')\n")
    ok(r)
    check("--- file out/data.csv (12 bytes) ---\nx,y\n1,2\n3,4\n" in texts(r), f"CSV inline: {texts(r)}")
    check("--- file out/sub/notes.txt (4 bytes) ---\nn\u00e9e\n" in texts(r), "text in a subdirectory inline")
    res = blocks(r, "resource")
    eq(len(res), 1, "one resource")
    eq(res[0]["resource"]["uri"], "file:///work/out/blob.bin", "uri")
    eq(res[0]["resource"]["mimeType"], "application/octet-stream", "mime type")
    eq(base64.b64decode(res[0]["resource"]["blob"]), payload, "the same bytes")
    check(any("out/blob.bin (768 bytes" in t for t in texts(r)), "a line names the resource")
    eq(sorted(file_lines(r)), ["blob.bin", "data.csv", "sub/notes.txt"], "files named (no symlink)")
    check(not any("out/link" in t for t in texts(r)), "the symlink is not listed")


@test
def files_over_the_caps_are_listed():
    r = run("import os\n"
            "open('out/big.bin', 'wb').write(b'x' * (5 << 20))\n"        # over 4 MiB
            "for i in range(3):\n"
            "    open(f'out/c{i}.bin', 'wb').write(bytes([i + 1]) * ((4 << 20) - 1))\n"  # 3rd: over 10 MiB in all
            "for i in range(20):\n"
            "    open(f'out/t{i:02}.txt', 'w').write(str(i))\n",
            limits={"max_file_size_mb": 8})
    ok(r)
    included = file_lines(r)
    eq(len(included), 16, "at most 16 files")
    check("c0.bin" in included and "c1.bin" in included and "c2.bin" not in included, f"total cap: {included}")
    eq(len(blocks(r, "resource")), 2, "the two binary files that fit")
    note = [t for t in texts(r) if t.startswith("--- left out ---")]
    eq(len(note), 1, "one note on what was left out")
    left = note[0].splitlines()[1:]
    eq(len(left), 24 - 16, f"each left-out file on a line: {note[0]}")
    check("out/big.bin (5 MiB): larger than" in note[0] and "4 MiB" in note[0], note[0])
    check(any(x.startswith("out/c2.bin") and "10 MiB" in x for x in left), note[0])
    check(any(x.startswith("out/t19.txt") for x in left), note[0])


# ---- the script runs as `python script.py` would -------------------------------------


@test
def traceback_shows_the_script_only():
    r = run("# line 1\n"
            "def f():\n"
            "    raise ValueError('boom')\n"
            "\n"
            "f()\n")
    st = r["structuredContent"]
    eq(st["exit_code"], 1, "exit code")
    check(r["isError"], "isError")
    err = st["stderr"]
    check(err.startswith("Traceback (most recent call last):\n  File \"/work/script.py\", line 5, in <module>"),
          f"starts at the script's frame: {err}")
    check('File "/work/script.py", line 3, in f' in err and err.rstrip().endswith("ValueError: boom"), err)
    check("<string>" not in err and "_boot" not in err and "exec(" not in err, f"no wrapper frames: {err}")
    # a syntax error names the script's line, without a traceback header
    st = run("x = 1\ny = (\n")["structuredContent"]
    eq(st["exit_code"], 1, "syntax error exit code")
    check(st["stderr"].startswith('  File "/work/script.py", line 2') and "SyntaxError" in st["stderr"],
          st["stderr"])


@test
def main_guard_exit_codes_and_file():
    r = run("import sys\n"
                "print(__name__, __file__, sys.argv)\n"
                "print(open(__file__).read().splitlines()[0])\n"
                "import __main__; print(__main__.__file__, hasattr(__main__, 'sys'))\n"
                "if __name__ == '__main__':\n"
                "    print('guarded')\n")
    ok(r)
    st = r["structuredContent"]
    eq(st["stdout"], "__main__ /work/script.py ['/work/script.py']\nimport sys\n/work/script.py True\nguarded\n",
       "stdout")
    st = run("import sys\nprint('bye')\nsys.exit(3)\n")["structuredContent"]
    eq((st["exit_code"], st["stdout"]), (3, "bye\n"), "sys.exit(3)")
    st = run("raise SystemExit('why')\n")["structuredContent"]
    eq((st["exit_code"], st["stderr"]), (1, "why\n"), "SystemExit with a message")
    # classes defined in the script pickle (they live in the real __main__)
    r = run("import pickle\nclass P:\n    pass\nprint(type(pickle.loads(pickle.dumps(P()))).__name__)\n")
    ok(r)
    eq(r["structuredContent"]["stdout"], "P\n", "pickle")


# ---- execute_code ---------------------------------------------------------------


@test
def execute_code_returns_new_and_changed_files():
    c = client()
    r = c.call_tool("create_sandbox", {}, timeout=180)
    check(not r.get("isError"), c.text(r))
    sid = r["structuredContent"]["sandbox_id"]

    def cell(code):
        r = c.call_tool("execute_code", {"sandbox_id": sid, "code": code}, timeout=120)
        check(not r["isError"], c.text(r))
        return r

    r = cell("import os\nos.makedirs('/work/out')\n"
             "open('/work/out/a.csv', 'w').write('a,b\\n1,2\\n')\n"
             "open('out/b.bin', 'wb').write(bytes(range(10)))")
    check("--- file out/a.csv (8 bytes) ---\na,b\n1,2\n" in texts(r), texts(r))
    res = blocks(r, "resource")
    eq([base64.b64decode(b["resource"]["blob"]) for b in res], [bytes(range(10))], "binary as a resource")
    eq(sorted(file_lines(r)), ["a.csv", "b.bin"], "both named")
    check("structuredContent" not in r, "files come back: no structuredContent")
    r = cell("x = 1")
    eq([b["type"] for b in r["content"]], ["text"], "nothing changed: nothing returned")
    check("files" not in r["structuredContent"], "no files")
    r = cell("open('out/a.csv', 'a').write('3,4\\n')")
    eq(sorted(file_lines(r)), ["a.csv"], "only the changed file")
    c.call_tool("close_sandbox", {"sandbox_id": sid})


if __name__ == "__main__":
    main()
