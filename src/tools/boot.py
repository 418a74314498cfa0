# SPDX-License-Identifier: MIT
#
# The boot program of execute_python's sandbox, embedded in the daemon as the C
# string boot_code (src/tools/boot.c, written from this file by make with
# embed-python.py; comment lines and blank lines are left out of it). It runs as
#
#     python -I -B -c BOOT FD /work/script.py
#
# (BOOT is this source at a Python's first run; later runs get the code its base
# interpreter compiled once, in the sandbox, through a loader: src/runtime/code.c.)
#
# and runs the script as `python -I -B /work/script.py` would: byte for
# byte, in a fresh __main__ module with __file__ set, tracebacks starting at the
# script's frames, exit status 1 on an uncaught exception, SystemExit handled
# as Python does. At every plt.show() and at the end it writes the open
# matplotlib figures as PNG to FD, then the files in the output directory
# (out/ beside the script, /work/out in the sandbox); records as
# src/tools/outputs.h describes. matplotlib is only touched when the script
# imported pyplot (an import hook patches show() then), and MORE, the code that
# does this, is compiled only when needed: a hello world pays for little more
# than compile() itself.
#
# The end of a run is Python's own, done by hand: wait for the threads that are
# not daemons, run the atexit handlers, clear the script's globals as the
# interpreter's teardown does (their __del__ methods run, files they hold are
# flushed), flush stdout and stderr (exit status 120 if that fails). Then the
# exit status goes to FD as an 'X' record, if FD is still the pipe it was, and
# the interpreter leaves with os._exit(): the daemon answers the call on that
# record, and does not wait for the rest of the teardown (collecting reference
# cycles, unloading modules) and bubblewrap's exit, which take longer than a
# hello world. Processes the script started and left running are killed then,
# as they were when the interpreter exited. A process the script forked that
# runs to the end of the script exits the usual way; it never writes the
# record.
#
# FD is FD[:IN[:LEARN[:CAP]]]. With LEARN non-empty, the last records
# before 'X' include an 'M' record naming the top-level packages the run loaded
# from the environment's site-packages (what the daemon learns warm imports
# from; src/tools/preimport.h).
#
# A pre-started sandbox (prestart=, src/executor/pool.h) runs the same program
# with IN set: it starts, sets up all the above, compiles a first line
# (the compiler's own start-up is then paid ahead) and blocks reading the
# script from the pipe IN until the daemon hands one over and closes it. It
# then writes the script to /work/script.py (a new file, mode 0444, in the
# run's private /work tmpfs; the script could chmod or replace it, which only
# changes its own throwaway copy) and goes on exactly as a fresh run reads the
# file bound there: same __file__, compile() under the same path, tracebacks
# with the script's lines, and code that reads its own source finds it. Before
# it blocks, it reads a first line from IN, MODULES (comma-separated items,
# "X" for `import X`, "X:a:b" for `from X import a, b`), and does those
# imports in order, at most until it holds CAP KiB: its warm imports,
# which the daemon hands only to a script that would import them first itself
# (src/tools/preimport.h). They come on the pipe rather than the command line,
# which every local user can read.
#
# @NAME@ is the C macro NAME (src/tools/outputs.h): only inside MORE, a string,
# so this file stays Python that compiles.
import sys
def _boot():
    import os
    # stdout is block-buffered, as in any Python whose stdout is a pipe (with -u, each print() was two write()s: a
    # print-heavy loop ran five times slower). What is buffered is flushed wherever it could otherwise be lost or
    # come out of order: at the end of the run (below), before a fork (the child starts with nothing of the
    # parent's), before another program is started or a signal sent (audit events: its output follows the
    # script's), in os._exit() and os.abort(), after warm imports (what they printed is seen before the hand-over),
    # and on SIGWINCH, which the daemon sends to the run before it kills it at its timeout (ignored by default, so
    # bwrap and the script's own children carry on). stderr stays line-buffered.
    def flush(*_):
        for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                s.flush()
            except BaseException:
                pass
    def flushing(f):
        def g(*args):
            flush()
            return f(*args)
        g.__name__ = g.__qualname__ = f.__name__
        g.__doc__ = f.__doc__
        return g
    os._exit = flushing(os._exit)
    os.abort = flushing(os.abort)
    os.register_at_fork(before=flush)
    spawns = frozenset(("subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", "os.exec",
                        "os.kill", "os.killpg", "signal.pthread_kill", "pty.spawn"))
    sys.addaudithook(lambda event, args: event in spawns and flush())
    import _signal
    _signal.signal(_signal.SIGWINCH, flush)
    fd, _, src = sys.argv[1].partition(":")
    src, _, learn = src.partition(":")
    learn, _, cap = learn.partition(":")
    fd = int(fd)
    path = sys.argv[2]
    out = os.path.join(os.path.dirname(path), "out")
    del sys.argv[:2]
    os.set_inheritable(fd, False)
    try:
        os.mkdir(out)
    except OSError:
        pass
    pid = os.getpid()
    pipe = os.fstat(fd)
    ns = {"fd": fd, "pid": pid, "out": out, "sys": sys, "os": os}
    def more():
        if "files" not in ns:
            exec(MORE, ns)
        return ns
    # matplotlib's font list, made once for the environment (envstore.c, FONTS): copied into MPLCONFIGDIR, the
    # run's own tmpfs, as the script imports matplotlib, unless the script chose a MPLCONFIGDIR of its own.
    def fonts():
        src = os.path.join(sys.prefix, ".mcp-python-sandbox-mpl")
        dst = os.environ.get("MPLCONFIGDIR")
        if dst != "/tmp/.matplotlib" or not os.path.isdir(src):
            return
        try:
            os.makedirs(dst, exist_ok=True)
            for n in os.listdir(src):
                with open(os.path.join(src, n), "rb") as f, open(os.path.join(dst, n), "xb") as g:
                    g.write(f.read())
        except OSError:
            pass
    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name == "matplotlib":
                fonts()
            if name == "matplotlib.pyplot":
                return more()["hook"](self, name)
    sys.meta_path.insert(0, Finder())
    main = type(sys)("__main__")
    main.__file__ = path
    main.__cached__ = None
    main.__annotations__ = {}
    main.__builtins__ = __builtins__
    main.__loader__ = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", path)
    sys.modules["__main__"] = main
    # Where the environment's packages are, as the interpreter set sys.path up: before the script can change it.
    sitedirs = tuple(p + "/" for p in sys.path if p.endswith("/site-packages"))
    def record(kind, name, size):
        if os.getpid() != pid:
            return
        n = name.encode()[:4000]
        os.write(fd, kind + len(n).to_bytes(4, "big") + size.to_bytes(8, "big") + n)
    def rss_kib():
        try:
            with open("/proc/self/statm", "rb") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
        except (OSError, ValueError, IndexError):
            return 0
    source = None
    if src:
        compile(b"pass\n", path, "exec", dont_inherit=True)
        src = int(src)
        # First on IN: a line of items to import ahead (comma-separated; empty for none).
        chunks = [b""]
        while b"\n" not in chunks[0]:
            b = os.read(src, 4096)
            if not b:
                break
            chunks[0] += b
        mods, _, chunks[0] = chunks[0].partition(b"\n")
        mods = mods.decode()
        # Warm imports (src/tools/preimport.h says when the daemon hands this sandbox a script): import the
        # modules the script's first statements will import, in their order, while nobody waits. Stop once the
        # memory the process holds passes CAP KiB (the script imports the rest itself). One that fails may have
        # left something behind (its parent package imported): this sandbox is then spoilt, and exits unused
        # (the daemon imports nothing ahead for its user from then on). 'P' tells the daemon what was done.
        if mods:
            done = []
            cap = int(cap or 0)
            for item in mods.split(","):
                # "X" is `import X`; "X:a:b" is `from X import a, b` done as Python does it, binding nothing: the
                # import with a fromlist (which imports X.a where X has no attribute a), then each name looked up
                # in order (a module's __getattr__ loads what it loads lazily now, not in the script).
                m, *names = item.split(":")
                try:
                    m = __import__(m, fromlist=tuple(names))
                    for attr in names:
                        getattr(m, attr)
                except BaseException:
                    os._exit(1)
                done.append(item)
                if cap and rss_kib() > cap:
                    break
            flush()
            if done:
                record(b"P", " ".join(done), rss_kib())
            del done, item, m, names
        del mods, cap
        record(b"R", "-", 0)
        while True:
            b = os.read(src, 1 << 20)
            if not b:
                break
            chunks.append(b)
        os.close(src)
        source = b"".join(chunks)
        v = memoryview(source)
        w = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
        while v:
            v = v[os.write(w, v):]
        os.close(w)
        del chunks, v, w, b
        # An import-time clock the script can read: logging's start (relativeCreated) is the run's, not the wait's.
        lg = sys.modules.get("logging")
        if lg is not None and hasattr(lg, "_startTime"):
            import time
            lg._startTime = time.time_ns() if isinstance(lg._startTime, int) else time.time()
        del lg
    del src
    status = 0
    try:
        if source is None:
            with open(path, "rb") as f:
                source = f.read()
        code = compile(source, path, "exec", dont_inherit=True)
        del source
        exec(code, main.__dict__)
    except SystemExit as e:
        status = e.code
        if status is None:
            status = 0
        elif isinstance(status, int):
            status = status & 0xff if -(1 << 63) <= status < 1 << 63 else 255
        else:
            try:
                print(status, file=sys.stderr)
            except BaseException:
                pass
            status = 1
    except BaseException as e:
        status = 1
        tb = e.__traceback__.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        e = tb = None
    code = None
    if os.getpid() != pid:
        sys.exit(status)
    def quietly(f, *args):
        try:
            f(*args)
        except BaseException:
            pass
    t = sys.modules.get("threading")
    if t is not None and hasattr(t, "_shutdown"):
        quietly(t._shutdown)
    if "matplotlib.pyplot" in sys.modules:
        quietly(lambda: more()["figures"]())
    import atexit
    quietly(atexit._run_exitfuncs)
    g = main.__dict__
    for first in (True, False):
        for k in list(g):
            if k != "__builtins__" and first == (k[:1] == "_" and k[1:2] != "_"):
                quietly(g.__setitem__, k, None)
    g = k = None
    quietly(lambda: os.listdir(out) and more()["files"]())
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except BaseException as e:
            status = 120
            quietly(os.write, 2, ("Exception ignored in: %r\n%s: %s\n" % (s, type(e).__name__, e)).encode())
        e = None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) == (pipe.st_dev, pipe.st_ino):
            # LEARN: the top-level packages the run loaded from the environment, for the next waiting sandbox.
            if learn:
                quietly(lambda: record(b"M", " ".join(sorted({k.partition(".")[0] for k, m in list(sys.modules.items())
                                                               if str(getattr(m, "__file__", None)).startswith(sitedirs)})) or "-", 0))
            os.write(fd, b"X\0\0\0\1" + status.to_bytes(8, "big") + b"x")
    except BaseException:
        pass
    os._exit(status)
MORE = '''
left = [@OUTPUTS_MAX_FIGURES@, @OUTPUTS_MAX_TOTAL@, False]
done = []
def send(kind, name, size, data=b""):
    if os.getpid() != pid or left[2]:
        return
    n = name.encode("utf-8", "surrogateescape")
    v = memoryview(kind + len(n).to_bytes(4, "big") + size.to_bytes(8, "big") + n + data)
    try:
        while v:
            v = v[os.write(fd, v):]
    except OSError:
        left[2] = True
def figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None or os.getpid() != pid:
        return
    try:
        from matplotlib._pylab_helpers import Gcf
        figs = [m.canvas.figure for m in Gcf.get_all_fig_managers()]
    except Exception:
        figs = [plt.figure(n) for n in plt.get_fignums()]
    for f in figs:
        seen = any(f is d for d in done)
        if seen and not f.stale:
            continue
        if not seen:
            done.append(f)
        name = "Figure %s" % getattr(f, "number", len(done))
        if left[0] <= 0:
            f.stale = False
            send(b"f", name, 0)
            continue
        try:
            import io
            b = io.BytesIO()
            f.savefig(b, format="png")
            data = b.getvalue()
        except Exception:
            send(b"f", name, 0)
            continue
        f.stale = False   # sent as it is now; drawing on it again makes it stale
        if len(data) > @OUTPUTS_MAX_BYTES@ or len(data) > left[1]:
            send(b"f", name, len(data))
            continue
        left[0] -= 1
        left[1] -= len(data)
        send(b"F", name, len(data), data)
def files():
    n = @OUTPUTS_MAX_FILES@
    for root, dirs, names in os.walk(out):
        dirs.sort()
        for name in sorted(names):
            p = os.path.join(root, name)
            rel = os.path.relpath(p, out)
            try:
                st = os.lstat(p)
                if st.st_mode & 0o170000 != 0o100000:
                    continue
                if n <= 0 or st.st_size > @OUTPUTS_MAX_BYTES@ or st.st_size > left[1]:
                    send(b"o", rel, st.st_size)
                    continue
                with open(p, "rb") as f:
                    data = f.read(@OUTPUTS_MAX_BYTES@ + 1)
            except OSError:
                continue
            if len(data) > @OUTPUTS_MAX_BYTES@ or len(data) > left[1]:
                send(b"o", rel, len(data))
                continue
            n -= 1
            left[1] -= len(data)
            send(b"O", rel, len(data), data)
def show(*args, **kwargs):
    """Return the open figures to the MCP client; they stay open."""
    try:
        figures()
    except Exception:
        pass
def hook(finder, name):
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass
    import importlib.util
    spec = importlib.util.find_spec(name)
    loader = getattr(spec, "loader", None)
    real = getattr(loader, "exec_module", None)
    if real is None:
        return spec
    def exec_module(module):
        real(module)
        module.show = show
    loader.exec_module = exec_module
    return spec
'''
_boot()
