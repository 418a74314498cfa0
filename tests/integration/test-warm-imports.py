#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Integration test: warm imports (src/tools/preimport.h, README "Warm imports").

A waiting sandbox of an environment imports, before the script comes, the
modules the environment's last run imported first; a script that imports them
first itself is handed it, and cannot tell except by speed. The real daemon,
real bwrap, packages from local wheels (--find-links, --offline) whose
import-time code records when it ran, what the environment held then and a
random token:

- the second run of an environment finds its module imported in the waiting
  sandbox: the result says "warm_imports", the log gives the sandbox's memory,
  and the module's import-time clock is older than the script by the wait
  (a fresh interpreter's is not: checked on the first run);
- a script that sets os.environ before its import, one that prints first, one
  that changes sys.path and one that reads sys.modules get a fresh
  interpreter: the import-time code sees the variable and runs after the
  script started;
- each waiting sandbox is used once (a new import-time token each run);
- a module that prints at import: the sandbox that imported it (and printed)
  is not used, the output is exactly a fresh run's, and the environment
  imports nothing ahead from then on;
- prestart-memory bounds what one imports (the rest is imported by the
  script), 0 turns warm imports off; check_environment reports the pool.
- a module whose import fails in the waiting sandbox (after another was
  imported): that sandbox exits unused, and its user's next ones import
  nothing ahead;
- the list is learnt and kept per user: user B's sandboxes never import
  what user A's runs taught, and B's check_environment does not show it;
- with the network on, nothing is imported ahead.
- the same script called again at once finds its module imported: the
  sandbox for the next run starts importing beside the first run (its
  import began before the first run ended), not after its reply.
- `from X import a, b` is imported ahead as Python does it: a package whose
  module __getattr__ loads a submodule on that access has loaded it before
  the script came; a script that takes other names, or the same in another
  order, gets a fresh interpreter; a name that does not exist makes the
  waiting sandbox exit unused, and the script fails as in a fresh one; once
  a run teaches another list (the script put right), it is imported ahead.

Needs $DAEMON and $SHIM, bubblewrap and uv. Exit status: 0 pass, 1 fail, 77 skip.
"""

import atexit
import time

import os

from mcptest import Daemon, check, children, eq, main, need_uv, scratch, skip, test, wait_until, with_defaults
from wheels import build_wheel

_STATE = {}


@atexit.register
def _cleanup():
    for key, d in list(_STATE.items()):
        if key != "wheels":
            try:
                d.close()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass

SIDE = ("import os as _os, time as _time\n"
        "IMPORTED_AT = _time.time()\n"
        "FLAG = _os.environ.get('MCPT_FLAG')\n"
        "TOKEN = _os.urandom(8).hex()\n")


def wheels():
    if "wheels" not in _STATE:
        w = scratch("mcptest-warm-wheels-")
        build_wheel(w, "mcpt-warm", "1.0", module_source=SIDE)
        build_wheel(w, "mcpt-other", "1.0", module_source=SIDE)
        build_wheel(w, "mcpt-loud", "1.0", module_source="print('loud at import')\n")
        # Slow to import, as pandas is: when the import began, then two seconds of it.
        build_wheel(w, "mcpt-slow", "1.0", module_source=SIDE + "_time.sleep(2)\n")
        # Fails to import until the script is there: in a waiting sandbox only.
        build_wheel(w, "mcpt-early", "1.0",
                    module_source="import os\nif not os.path.exists('/work/script.py'):\n    raise ImportError('early')\n")
        # Lazy, as pydantic and scipy are: Model is loaded from a submodule by the package's __getattr__, and
        # lazy_b is a submodule that "from mcpt_lazy import lazy_b" imports. Each records when it was loaded.
        lazy = ("def __getattr__(name):\n"
                "    if name == 'Model':\n"
                "        from mcpt_lazy._impl import Model\n"
                "        return Model\n"
                "    raise AttributeError(name)\n")
        loaded = "import os, time\nLOADED_AT = time.time()\nTOKEN = os.urandom(8).hex()\n"
        build_wheel(w, "mcpt-lazy", "1.0", module_source=lazy,
                    extra_files=(("mcpt_lazy/_impl.py",
                                  (loaded + "class Model:\n    LOADED_AT = LOADED_AT\n    TOKEN = TOKEN\n").encode()),
                                 ("mcpt_lazy/lazy_b.py", loaded.encode())))
        _STATE["wheels"] = w
    return _STATE["wheels"]


def daemon(*extra):
    key = " ".join(extra)
    d = _STATE.get(key)
    if d is None or not d.alive():
        need_uv()
        d = Daemon("activate", args=("--prestart=1", f"--find-links={wheels()}", "--offline", "--tmpfs-size=32M", *extra))
        _STATE[key] = d
    return d


def client(*extra):
    c = daemon(*extra).client()
    c.initialize()
    return c


def run(c, script, deps):
    r = c.call_tool("execute_python", {"script": script, "dependencies": deps}, timeout=180)
    st = with_defaults(r.get("structuredContent") or {})
    check(r.get("isError") is False and st.get("exit_code") == 0, f"run failed: {c.text(r)[:2000]}")
    return st


def pool(c):
    st = c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}
    return st.get("prestart") or {}


def waiting_with(c, imports):
    """Wait until a sandbox that imported `imports` waits, and is settled (imports done)."""
    def ready():
        for e in pool(c).get("environments", []):
            if e.get("warm_imports") == imports and e.get("waiting", 0) >= 1:
                return True
        return False
    wait_until(ready, timeout=60, what=f"a waiting sandbox importing {imports}")
    time.sleep(1.5)   # the wait the import-time clock must show


AGE = "import mcpt_warm\nimport time\nprint(mcpt_warm.FLAG, mcpt_warm.TOKEN, time.time() - mcpt_warm.IMPORTED_AT)\n"


def age_of(st):
    flag, token, age = st["stdout"].split()
    return flag, token, float(age)


@test
def second_run_finds_its_module_imported():
    c = client()
    deps = ["mcpt-warm"]
    st = run(c, AGE, deps)
    flag, token1, age = age_of(st)
    check(age < 0.5, f"a fresh interpreter imports when the script does: {age}")
    check("warm_imports" not in st, f"first run: {st}")
    waiting_with(c, ["mcpt_warm"])
    # What one user's scripts import is not on a command line every local user can read (it goes on the pipe).
    seen = 0
    for pid in children(daemon().proc.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        seen += 1
        check(b"mcpt_warm" not in cmd, f"pid {pid} shows the module on its command line: {cmd[:300]!r}")
    check(seen > 0, "the waiting sandbox's processes were looked at")
    st = run(c, AGE, deps)
    eq(st.get("prestarted"), True, "prestarted")
    eq(st.get("warm_imports"), ["mcpt_warm"], "warm_imports")
    flag, token2, age = age_of(st)
    check(age >= 1.0, f"the module was imported in the waiting sandbox, before the script came: {age}")
    eq(flag, "None", "flag")
    log = daemon().log_full()
    check("MCP_WARM_IMPORTS=mcpt_warm" in log, "the log names the warm imports")
    check("MCP_WARM_IMPORTS_RSS_KIB=" in log, "the log gives the sandbox's memory")
    # Used once: the next run gets another sandbox, which imported the module anew.
    waiting_with(c, ["mcpt_warm"])
    st = run(c, AGE, deps)
    eq(st.get("warm_imports"), ["mcpt_warm"], "warm_imports, third run")
    _, token3, _ = age_of(st)
    check(len({token1, token2, token3}) == 3, f"one sandbox per run: {token1} {token2} {token3}")
    p = pool(c)
    check(p.get("warm_import_memory_max_bytes") == 256 * 1024 * 1024, f"pool report: {p}")
    mem = [e.get("warm_imports_memory_bytes") for e in p.get("environments", []) if e.get("warm_imports")]
    check(mem and 1024 * 1024 < mem[0] < 256 * 1024 * 1024, f"the memory a waiting sandbox held is reported: {p}")
    c.close()


FRESH = {
    "environ": "import os\nos.environ['MCPT_FLAG'] = 'set'\nimport mcpt_warm\nimport time\n"
               "print(mcpt_warm.FLAG, mcpt_warm.TOKEN, time.time() - mcpt_warm.IMPORTED_AT)\n",
    "print first": "print('first', end=' ')\nimport mcpt_warm\nimport time\n"
                   "print(mcpt_warm.TOKEN, time.time() - mcpt_warm.IMPORTED_AT)\n",
    "sys.path": "import sys\nsys.path.append('/nonexistent')\nimport mcpt_warm\nimport time\n"
                "print(mcpt_warm.FLAG, mcpt_warm.TOKEN, time.time() - mcpt_warm.IMPORTED_AT)\n",
    "sys.modules": "import mcpt_warm\nimport sys, time\nassert 'mcpt_warm' in sys.modules\n"
                   "print(mcpt_warm.FLAG, mcpt_warm.TOKEN, time.time() - mcpt_warm.IMPORTED_AT)\n",
    # A letter beyond ASCII that Python reads as an ASCII one in a name (fullwidth x is x).
    "fullwidth letter": AGE + "\uff58 = 1\n",
}
# Symbols beyond ASCII in comments and strings, as real scripts have them: nothing Python could read as a name.
SYMBOLS = ("import mcpt_warm  # within \u00b1 2 \u00b0C \u2014 roughly\nimport time\n"
           "print(mcpt_warm.FLAG, mcpt_warm.TOKEN, time.time() - mcpt_warm.IMPORTED_AT)  # \u201cdone\u201d \u2192 \u2713\n")


@test
def scripts_that_could_tell_get_a_fresh_interpreter():
    c = client()
    deps = ["mcpt-warm"]
    run(c, AGE, deps)
    for name, script in FRESH.items():
        waiting_with(c, ["mcpt_warm"])   # one is there to be handed, and is not
        st = run(c, script, deps)
        check("warm_imports" not in st, f"{name}: {st}")
        flag, _, age = age_of(st)
        check(age < 0.5, f"{name}: imported when the script did: {age}")
        if name == "environ":
            eq(flag, "set", "the import-time code sees the variable the script set")
    waiting_with(c, ["mcpt_warm"])
    st = run(c, SYMBOLS, deps)
    eq(st.get("warm_imports"), ["mcpt_warm"], "warm_imports of a script with symbols in its comments")
    _, _, age = age_of(st)
    check(age >= 1.0, f"with symbols in comments, imported in the waiting sandbox: {age}")
    c.close()


@test
def a_module_that_prints_at_import_is_not_imported_ahead():
    c = client()
    deps = ["mcpt-loud"]
    script = "import mcpt_loud\nprint('after')\n"
    eq(run(c, script, deps)["stdout"], "loud at import\nafter\n", "first run")
    # The waiting sandbox printed while it imported: it is not handed over (what a taken one printed would be the
    # script's output, in order, all the same), and the environment imports nothing ahead from then on.
    waiting_with(c, ["mcpt_loud"])
    for i in range(3):
        st = run(c, script, deps)
        eq(st["stdout"], "loud at import\nafter\n", f"run {i}: output as a fresh run's")
        check("warm_imports" not in st, f"run {i}: {st}")
        envs = [e for e in pool(c).get("environments", []) if e.get("warm_imports_off")]
        check(envs, "the environment imports nothing ahead any more")
    c.close()


@test
def prestart_memory_bounds_the_imports():
    c = client("--prestart-memory=1K")
    deps = ["mcpt-warm", "mcpt-other"]
    script = ("import mcpt_warm\nimport mcpt_other\nimport time\n"
              "print(time.time() - mcpt_warm.IMPORTED_AT, time.time() - mcpt_other.IMPORTED_AT)\n")
    run(c, script, deps)
    waiting_with(c, ["mcpt_warm", "mcpt_other"])
    st = run(c, script, deps)
    eq(st.get("warm_imports"), ["mcpt_warm"], "the first module only: past the cap, the script imports the rest")
    a, b = map(float, st["stdout"].split())
    check(a >= 1.0 and b < 0.5, f"ages {a} {b}")
    c.close()

    c = client("--prestart-memory=0")
    run(c, AGE, ["mcpt-warm"])
    time.sleep(1.0)
    st = run(c, AGE, ["mcpt-warm"])
    eq(st.get("prestarted"), True, "prestarted")
    check("warm_imports" not in st, f"prestart-memory=0: {st}")
    c.close()


@test
def a_failed_warm_import_spoils_the_sandbox():
    c = client()
    deps = ["mcpt-warm", "mcpt-early"]
    script = "import mcpt_warm\nimport mcpt_early\n" + AGE.split("\n", 1)[1]
    run(c, script, deps)

    # The waiting sandbox imported mcpt_warm, then failed on mcpt_early: with mcpt_warm imported, it is not what
    # the script's own imports would have made; it is dropped, and its user's next ones import nothing ahead.
    def settled():
        for e in pool(c).get("environments", []):
            if e.get("warm_imports_off") or (e.get("warm_imports") and e.get("waiting", 0) >= 1):
                return True
        return False
    wait_until(settled, timeout=60, what="the waiting sandbox to import or fail")
    time.sleep(1.5)
    for i in range(2):
        st = run(c, script, deps)
        check("warm_imports" not in st, f"run {i}: handed a sandbox whose warm import failed: {st}")
        _, _, age = age_of(st)
        check(age < 0.5, f"run {i}: mcpt_warm was imported before the script: {age}")
    envs = [e for e in pool(c).get("environments", []) if e.get("warm_imports_off")]
    check(envs, "warm imports are off for this user and environment")
    c.close()


@test
def warm_imports_are_learnt_per_user():
    if os.geteuid() != 0:
        skip("needs root, to be user A beside user B (uid 65534)")
    d = daemon("--max-runs=4")
    a = client("--max-runs=4")
    deps = ["mcpt-warm"]
    run(a, AGE, deps)
    waiting_with(a, ["mcpt_warm"])
    b = d.nobody_client()
    # B sees the pool, not what A's scripts import.
    for e in pool(b).get("environments", []):
        eq(e.get("warm_imports"), [], f"B's view of an environment A taught: {e}")
    # B's run teaches nothing (no leading imports); the sandbox kept for B's next run imports nothing either.
    late = "print('late', end=' ')\n" + AGE
    st = run(b, late, deps)
    check("warm_imports" not in st, f"B's first run: {st}")
    wait_until(lambda: sum(e.get("waiting", 0) for e in pool(b).get("environments", [])) >= 2, 60,
               "A's and B's sandboxes to wait")
    time.sleep(1.5)
    st = run(b, AGE, deps)
    check("warm_imports" not in st, f"B's sandbox imported what A's runs taught: {st}")
    _, _, age = age_of(st)
    check(age < 0.5, f"B's module was imported before B's script: {age}")
    # A's own list is still A's.
    waiting_with(a, ["mcpt_warm"])
    eq(run(a, AGE, deps).get("warm_imports"), ["mcpt_warm"], "A's warm imports")
    a.close()
    b.close()


@test
def no_warm_imports_with_the_network_on():
    c = client("--network")
    run(c, AGE, ["mcpt-warm"])
    time.sleep(2.0)
    st = run(c, AGE, ["mcpt-warm"])
    eq(st.get("prestarted"), True, "prestarted")
    check("warm_imports" not in st, f"network on: {st}")
    _, _, age = age_of(st)
    check(age < 0.5, f"imported before the script: {age}")
    eq(pool(c).get("warm_import_memory_max_bytes"), 0, "warm imports off, as reported")
    c.close()


LAZY = ("from mcpt_lazy import Model, lazy_b\nimport time\n"
        "print(Model.TOKEN, time.time() - Model.LOADED_AT, time.time() - lazy_b.LOADED_AT)\n")


def lazy_ages(st):
    token, model, b = st["stdout"].split()
    return token, float(model), float(b)


@test
def from_imports_are_done_ahead_with_their_names():
    c = client()
    deps = ["mcpt-lazy"]
    st = run(c, LAZY, deps)
    _, model, b = lazy_ages(st)
    check(model < 0.5 and b < 0.5, f"a fresh interpreter loads them when the script does: {model} {b}")
    waiting_with(c, ["mcpt_lazy:Model:lazy_b"])
    st = run(c, LAZY, deps)
    eq(st.get("warm_imports"), ["mcpt_lazy:Model:lazy_b"], "warm_imports")
    token1, model, b = lazy_ages(st)
    check(model >= 1.0, f"Model (the package's __getattr__) was loaded in the waiting sandbox: {model}")
    check(b >= 1.0, f"lazy_b (a submodule the from-import imports) was loaded in the waiting sandbox: {b}")
    check("MCP_WARM_IMPORTS=mcpt_lazy:Model:lazy_b" in daemon().log_full(), "the log names the item")
    # The same statement spelt otherwise (aliases, brackets) is the same item.
    waiting_with(c, ["mcpt_lazy:Model:lazy_b"])
    st = run(c, "from mcpt_lazy import (\n    Model as M,\n    lazy_b,\n)\nimport time\n"
                "print(M.TOKEN, time.time() - M.LOADED_AT, time.time() - lazy_b.LOADED_AT)\n", deps)
    eq(st.get("warm_imports"), ["mcpt_lazy:Model:lazy_b"], "warm_imports with an alias and brackets")
    token2, model, _ = lazy_ages(st)
    check(model >= 1.0 and token2 != token1, f"imported ahead, in another sandbox: {model} {token1} {token2}")
    # The same names in another order, or other names: another item, a fresh interpreter (each run teaches its
    # own list, which the next one does not match either).
    others = (
        ("another order", LAZY.replace("Model, lazy_b", "lazy_b, Model"), ["mcpt_lazy:lazy_b:Model"]),
        ("the first order again", LAZY, ["mcpt_lazy:Model:lazy_b"]),
        ("one name", "from mcpt_lazy import lazy_b\nimport time\nprint('-', 0, time.time() - lazy_b.LOADED_AT)\n",
         ["mcpt_lazy:lazy_b"]),
        ("the module whole", "import mcpt_lazy\nfrom mcpt_lazy import lazy_b\nimport time\n"
         "print('-', 0, time.time() - lazy_b.LOADED_AT)\n", ["mcpt_lazy", "mcpt_lazy:lazy_b"]),
    )
    waiting = ["mcpt_lazy:Model:lazy_b"]
    for name, script, teaches in others:
        waiting_with(c, waiting)   # one is there to be handed, and is not
        st = run(c, script, deps)
        check("warm_imports" not in st, f"{name}: {st}")
        _, model, b = lazy_ages(st)
        check(model < 0.5 and b < 0.5, f"{name}: loaded when the script did: {model} {b}")
        waiting = teaches
    c.close()


@test
def a_from_import_of_a_missing_name_spoils_the_sandbox():
    c = client()
    deps = ["mcpt-lazy", "mcpt-other"]
    script = "from mcpt_lazy import Model, missing\nprint('not reached')\n"
    r = c.call_tool("execute_python", {"script": script, "dependencies": deps}, timeout=180)
    first = with_defaults(r.get("structuredContent") or {})
    eq(first.get("exit_code"), 1, "the script fails at its import")
    check("cannot import name 'missing' from 'mcpt_lazy'" in first.get("stderr", ""), f"first run: {first}")

    # The waiting sandbox did the from-import as the script would have, and failed: it exits unused, and its
    # user's next ones import nothing ahead.
    def settled():
        return any(e.get("warm_imports_off") for e in pool(c).get("environments", []))
    wait_until(settled, timeout=60, what="the waiting sandbox to fail its from-import")
    time.sleep(1.5)
    r = c.call_tool("execute_python", {"script": script, "dependencies": deps}, timeout=180)
    st = with_defaults(r.get("structuredContent") or {})
    check("warm_imports" not in st, f"handed a sandbox whose warm import failed: {st}")
    eq(st.get("exit_code"), 1, "exit code")
    eq(st.get("stdout"), first.get("stdout"), "stdout as a fresh run's")
    eq(st.get("stderr"), first.get("stderr"), "the ImportError as a fresh run's")
    check(any(e.get("warm_imports_off") for e in pool(c).get("environments", [])), "warm imports off after it")
    # The script put right: its first run is fresh and teaches another list, which is tried again.
    fixed = "from mcpt_lazy import Model\nimport time\nprint(Model.TOKEN, time.time() - Model.LOADED_AT, 0)\n"
    st = run(c, fixed, deps)
    check("warm_imports" not in st, f"the first run of the script put right: {st}")
    waiting_with(c, ["mcpt_lazy:Model"])
    st = run(c, fixed, deps)
    eq(st.get("warm_imports"), ["mcpt_lazy:Model"], "warm imports again, for the list the script now teaches")
    _, model, _ = lazy_ages(st)
    check(model >= 1.0, f"Model was loaded in the waiting sandbox: {model}")
    c.close()


@test
def the_same_script_again_at_once_finds_its_imports_done():
    c = client()
    deps = ["mcpt-slow"]
    script = "import mcpt_slow\nimport time\nprint(mcpt_slow.TOKEN, mcpt_slow.IMPORTED_AT, time.time())\n"
    st = run(c, script, deps)
    check("warm_imports" not in st, f"first run: {st}")
    token1, _, end1 = st["stdout"].split()
    # At once: no wait for the pool to settle.
    st = run(c, script, deps)
    eq(st.get("prestarted"), True, "prestarted")
    eq(st.get("warm_imports"), ["mcpt_slow"], "warm_imports")
    token2, at2, _ = st["stdout"].split()
    check(token2 != token1, "a sandbox of its own")
    check(float(at2) < float(end1),
          f"the second run's import began while the first run was still going: {at2} vs its end {end1}")
    c.close()


if __name__ == "__main__":
    main()
