#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Metadata read as uv reads it, and errors that say what to do next (issue 15, part 3).

Through the real shim against the real daemon, real bwrap and real uv:
  - a '# /// script' block followed directly by comment lines ('# Run with: uv
    run x.py') is read, its dependency installed and imported;
  - a mis-written block (unclosed, indented opening) fails in the validate
    phase with the fix in the text, and the body does not run;
  - a ModuleNotFoundError of an undeclared dependency names the package to
    declare (import names mapped: sklearn -> scikit-learn ...), in the text and
    in structuredContent.hint; in a persistent sandbox it names install_package;
  - a name lookup with network off says the administrator has network off;
  - a package without a wheel says it is source-only and that building is the
    administrator's choice; an import name given as a package names the one to
    install; uv's own 'hint:' lines are kept;
  - a uv older than the daemon needs is refused at start, with the version
    needed, in the log, in check_environment and in every install; uv is then
    never run.
Local wheels and an sdist-only package in a --find-links directory keep it
deterministic; docopt and jieba come from PyPI when it is reachable (skip, or a
failure under MCP_SANDBOX_REQUIRE_ALL=1, otherwise).
"""

import os
import tempfile
import uuid

import mcptest
from mcptest import Daemon, at_exit, check, eq, main, need_pypi, need_uv, scratch, skip, test, wait_until
from wheels import build_wheel

_STATE = {}


def wheel_dir():
    if "wheels" not in _STATE:
        w = scratch("mcptest-hints-wheels-")
        build_wheel(w, "mcpt-alpha", "1.0", module_source="VALUE = 'alpha'\n")
        # Published as source only: uv under --no-build has no wheel of it to install.
        with open(os.path.join(w, "mcpt-srconly-1.0.tar.gz"), "wb") as f:
            f.write(b"not read: uv refuses to build it before looking inside")
        _STATE["wheels"] = w
    return _STATE["wheels"]


def daemon(name, args):
    d = _STATE.get(name)
    if d is None:
        need_uv()
        d = Daemon(args=list(args))
        at_exit(d.close)
        _STATE[name] = d
        c = d.client()
        c.initialize()
        st = c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}
        c.close()
        if not st.get("sandbox", {}).get("working"):
            skip(f"the sandbox does not work here: {st.get('sandbox')}")
    return d


def local_daemon():
    return daemon("local", [f"--find-links={wheel_dir()}", "--offline", "--persistent-sandboxes"])


def execute(c, script, **args):
    r = c.call_tool("execute_python", {"script": script, **args}, timeout=240)
    return r, r.get("structuredContent") or {}, c.text(r)


def shown(r, text, sentence, what):
    """The sentence reaches the model in content[] and in structuredContent (hint or error)."""
    st = r.get("structuredContent") or {}
    check(sentence in text, f"{what}: the text says {sentence!r}: {text!r}")
    check(sentence in (st.get("hint") or "") or sentence in (st.get("error") or ""),
          f"{what}: structuredContent carries it: hint={st.get('hint')!r} error={st.get('error')!r}")


@test
def block_followed_by_comment_lines_is_read():
    c = local_daemon().client()
    c.initialize()
    for tail in ("# Run with: uv run x.py\n", "# ruff: noqa\n#\n", "#\n"):
        script = ("#!/usr/bin/env -S uv run --script\n"
                  "# /// script\n# dependencies = [\"mcpt-alpha\"]\n# ///\n" + tail +
                  "import mcpt_alpha\nprint(mcpt_alpha.VALUE)\n")
        r, st, text = execute(c, script)
        check(r.get("isError") is False, f"{tail!r}: the run failed: {text}")
        eq(st.get("stdout"), "alpha\n", f"{tail!r}: the declared package was installed and imported")
        eq(st.get("environment", {}).get("requirements"), ["mcpt-alpha"], f"{tail!r}: requirements")
    c.close()


@test
def miswritten_blocks_fail_in_validate():
    c = local_daemon().client()
    c.initialize()
    marker = "BODY-RAN-" + uuid.uuid4().hex
    cases = (
        ("# /// script\n# dependencies = [\"mcpt-alpha\"]\n\n# ///\n",
         "the '# /// script' metadata block on line 1 is not closed: line 3 ends it because it does not start with "
         "'#'; start every line of the block with '# ' (or a bare '#', for an empty line) and end it with a line "
         "that is exactly '# ///'"),
        ("# /// script\n# dependencies = [\"mcpt-alpha\"]\n# /// \n",
         "the '# /// script' metadata block on line 1 is not closed: line 3 is not a closing line because it has "
         "more after '# ///'; make the block's last line exactly '# ///'"),
        ("  # /// script\n  # dependencies = [\"mcpt-alpha\"]\n  # ///\n",
         "line 1 looks like the start of a '# /// script' metadata block, but it is indented, so uv and every other "
         "reader ignore the block; write that line as exactly '# /// script', at the start of the line"),
    )
    for block, reason in cases:
        r, st, text = execute(c, block + f"print({marker!r})\n")
        check(r.get("isError") is True, f"refused: {text!r}")
        eq(st.get("failed_phase"), "validate", f"the phase of {block!r}")
        shown(r, text, reason, "mis-written block")
        check(marker not in text and marker not in st.get("stdout", ""), "the body did not run")
        v = c.call_tool("validate_script", {"script": block + "print(1)\n"}, timeout=60)
        check(v.get("isError") is True and reason in c.text(v), f"validate_script: {c.text(v)!r}")
    c.close()


@test
def undeclared_module_names_the_package():
    c = local_daemon().client()
    c.initialize()
    for module, dist in (("sklearn", "scikit-learn"), ("cv2", "opencv-python"), ("PIL", "pillow"),
                         ("yaml", "pyyaml"), ("bs4", "beautifulsoup4")):
        r, st, text = execute(c, f"import {module}\n")
        check(r.get("isError") is True, f"import {module} failed")
        shown(r, text, f"The module '{module}' is not installed: it comes from the package '{dist}', so declare "
              f"\"{dist}\" in the script's '# /// script' block (dependencies = [\"{dist}\"]) or in the "
              "dependencies argument.", f"import {module}")
    r, st, text = execute(c, "from mcpt_gamma import x\n")
    shown(r, text, "The module 'mcpt_gamma' is not installed: if it comes from a package on PyPI, declare that "
          "package (often also named \"mcpt_gamma\") in the script's '# /// script' block or in the dependencies "
          "argument; the sandbox holds only the script, so other local files cannot be imported.", "unmapped")
    # Declared and installed, yet a module of it is missing: no advice to declare what is declared.
    r, st, text = execute(c, "import mcpt_alpha.nothing\n", dependencies=["mcpt-alpha"])
    check(r.get("isError") is True and "ModuleNotFoundError" in text, f"the import failed: {text!r}")
    check("is not installed" not in text and "hint" not in st, f"no hint for a declared package: {text!r}")
    # A script that succeeds, or fails otherwise, gets none.
    r, st, text = execute(c, "raise SystemExit('ModuleNotFoundError: No module named ')\n")
    check("hint" not in st, f"no hint without a module name: {st.get('hint')!r}")
    c.close()


@test
def network_off_says_so():
    c = local_daemon().client()
    c.initialize()
    r, st, text = execute(c, "import urllib.request\nurllib.request.urlopen('https://pypi.org/simple/', timeout=10)\n")
    check(r.get("isError") is True and "gaierror" in text, f"the lookup failed: {text[-400:]!r}")
    shown(r, text, "The script tried to reach the network, but the administrator of this server has turned network "
          "access off for scripts (network=no): work with data the script carries or computes, or ask the "
          "administrator to turn network access on.", "network off")
    c.close()


@test
def network_on_does_not_blame_the_administrator():
    d = daemon("network", ["--network", f"--find-links={wheel_dir()}", "--offline"])
    c = d.client()
    c.initialize()
    r, st, text = execute(c, "import socket\nsocket.getaddrinfo('mcpt-no-such-host.invalid', 443)\n")
    check(r.get("isError") is True and "gaierror" in text, f"the lookup failed: {text[-400:]!r}")
    check("network=no" not in text and "hint" not in st, f"no network-off hint with network on: {text!r}")
    c.close()


@test
def source_only_and_import_names_as_packages():
    c = local_daemon().client()
    c.initialize()
    r, st, text = execute(c, "print(1)\n", dependencies=["mcpt-srconly"])
    eq(st.get("failed_phase"), "prepare", f"phase: {text!r}")
    shown(r, text, "'mcpt-srconly' has no wheel this server can use (it is published as source code only), and this "
          "server installs wheels only: building from source runs the package's own code, so it is the "
          "administrator's choice (allow-source-builds=yes); use a package that ships wheels, or ask the "
          "administrator.", "source only")
    check("hint: Wheels are required for `mcpt-srconly`" in text, f"uv's own hint is kept: {text!r}")
    r, st, text = execute(c, "# /// script\n# dependencies = [\"sklearn\"]\n# ///\nimport sklearn\n")
    eq(st.get("failed_phase"), "prepare", f"phase: {text!r}")
    shown(r, text, "'sklearn' is the name to import, not the package to install: declare \"scikit-learn\" instead, "
          "then import sklearn.", "import name as package")
    c.close()


@test
def source_only_from_pypi():
    need_pypi()
    c = daemon("pypi", []).client()
    c.initialize()
    for name in ("docopt", "jieba"):
        r, st, text = execute(c, f"import {name}\n", dependencies=[name])
        eq(st.get("failed_phase"), "prepare", f"{name}: {text!r}")
        shown(r, text, f"'{name}' has no wheel this server can use (it is published as source code only), and this "
              "server installs wheels only: building from source runs the package's own code, so it is the "
              "administrator's choice (allow-source-builds=yes)", name)
    c.close()


@test
def persistent_sandbox_names_install_package():
    c = local_daemon().client()
    c.initialize()
    r = c.call_tool("create_sandbox", {}, timeout=180)
    check(not r.get("isError"), f"create_sandbox: {c.text(r)}")
    sid = r["structuredContent"]["sandbox_id"]
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": "import yaml"}, timeout=120)
    sentence = ("The module 'yaml' is not installed in this sandbox: it comes from the package 'pyyaml', so install "
                "it with install_package (packages: [\"pyyaml\"]).")
    check(r.get("isError") is True, "the cell failed")
    check(sentence in c.text(r) and (r.get("structuredContent") or {}).get("hint") == sentence,
          f"execute_code: {c.text(r)!r}")
    r = c.call_tool("execute_code", {"sandbox_id": sid, "code": "import socket\nsocket.getaddrinfo('pypi.org', 443)"},
                    timeout=120)
    sentence = ("The script tried to reach the network, but the administrator of this server has turned network "
                "access off for scripts (network=no): work with data the script carries or computes, or ask the "
                "administrator to turn network access on.")
    check(r.get("isError") is True and "gaierror" in c.text(r), f"the lookup failed: {c.text(r)!r}")
    check(sentence in c.text(r) and (r.get("structuredContent") or {}).get("hint") == sentence,
          f"execute_code, network off: {c.text(r)!r}")
    c.call_tool("close_sandbox", {"sandbox_id": sid}, timeout=60)
    c.close()


def fake_uv(version):
    """A uv that says it is `version`, logs every other call, and runs the real uv for it."""
    real = need_uv()
    d = tempfile.mkdtemp(prefix="mcptest-olduv-")
    path, log = os.path.join(d, "uv"), os.path.join(d, "uv.log")
    open(log, "w").close()
    mcptest.executable(path, "#!/bin/sh\n"
                       f"if [ \"$1\" = --version ]; then echo 'uv {version} (mcptest)'; exit 0; fi\n"
                       f"printf '%s\\n' \"$*\" >> '{log}'\n"
                       f"exec '{real}' \"$@\"\n")
    os.chmod(d, 0o755)
    return path, log


@test
def old_uv_is_refused_at_start():
    path, log = fake_uv("0.8.22")
    d = Daemon(args=[f"--uv={path}", f"--find-links={wheel_dir()}", "--offline"])
    at_exit(d.close)
    c = d.client()
    c.initialize()
    sentence = ("uv 0.8.22 is older than 0.11.0, the oldest uv this server works with, so packages cannot be "
                "installed (the administrator can upgrade uv, e.g. pip install 'uv>=0.11.0', or set uv= to a newer "
                "one)")
    r = c.call_tool("check_environment", {}, timeout=60)
    uv = (r.get("structuredContent") or {}).get("uv", {})
    eq((uv.get("available"), uv.get("version"), uv.get("error")), (False, "0.8.22", sentence), "check_environment uv")
    check(f"uv: REFUSED: {sentence}" in c.text(r), f"check_environment text: {c.text(r)!r}")
    wait_until(lambda: sentence in d.log_full(), 10, "the refusal in the daemon's log")
    r, st, text = execute(c, "import mcpt_alpha\n", dependencies=["mcpt-alpha"])
    eq(st.get("failed_phase"), "prepare", f"phase: {text!r}")
    shown(r, text, sentence, "old uv")
    # Scripts without dependencies still run; uv itself never did.
    r, st, text = execute(c, "print('fine')\n")
    eq(st.get("stdout"), "fine\n", f"a script without dependencies: {text!r}")
    with open(log) as f:
        eq(f.read(), "", "uv calls besides --version")
    c.close()

    # The oldest supported version is accepted.
    path, log = fake_uv("0.11.0")
    d = Daemon(args=[f"--uv={path}", f"--find-links={wheel_dir()}", "--offline"])
    at_exit(d.close)
    c = d.client()
    c.initialize()
    uv = (c.call_tool("check_environment", {}, timeout=60).get("structuredContent") or {}).get("uv", {})
    eq((uv.get("available"), uv.get("error")), (True, None), "uv 0.11.0 is accepted")
    r, st, text = execute(c, "import mcpt_alpha\nprint(mcpt_alpha.VALUE)\n", dependencies=["mcpt-alpha"])
    eq(st.get("stdout"), "alpha\n", f"installed with it: {text!r}")
    c.close()


if __name__ == "__main__":
    main()
