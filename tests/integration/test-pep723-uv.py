#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The PEP 723 parser against real uv, shape by shape.

tests/unit/test-pep723-regex.py compares the parser with the PEP's reference
regex over a large generated corpus; this one asks uv itself (`uv export
--script`, which reads the block and fails the way `uv run` does) about the
shapes that matter, LF and CRLF, and compares the outcome: a block, none, two
blocks, an unclosed block. Where they differ, the shape must be one of the
documented differences below, each for a reason.

Needs $DAEMON (for the directory of pep723-dump) and uv (skips without it; a
failure under MCP_SANDBOX_REQUIRE_ALL=1).
"""

import json
import os
import subprocess

from mcptest import check, eq, main, need_uv, scratch, test

BLOCK = "# /// script\n# dependencies = []\n# ///\n"

SHAPES = [
    BLOCK + "print(1)\n",
    "#!/usr/bin/env -S uv run --script\n" + BLOCK,
    BLOCK + "# Run with: uv run x.py\nprint(1)\n",
    BLOCK + "# ruff: noqa\n#\nprint(1)\n",
    BLOCK + "#\n",
    "# /// script\n# dependencies = []\n# ///\n# ///\n# x\n",
    "# /// script\n# dependencies = []\n# ///",
    "# /// script\n#\n# dependencies = []\n#\n# ///\n",
    "# /// script\n# dependencies = []\n# text = '''\n# /// example\n# '''\n# ///\n",
    "print(1)\n",
    "",
    "# /// script\n# dependencies = []\nprint(1)\n",
    "# /// script\n# dependencies = []\n\n# ///\n",
    "# /// script\n#dependencies = []\n# ///\n",
    "# /// script\n# dependencies = []\n# /// \nprint(1)\n",
    "# /// script\n# dependencies = []\n",
    BLOCK + "\n" + BLOCK,
    BLOCK + "x = 1\n" + BLOCK + "# trailing\n",
    BLOCK + "# /// script\n# dependencies = []\n# ///\n",
    "# /// pyproject\n# [project]\n# ///\n\n" + BLOCK,
    BLOCK + "\n# /// other\n# a = 1\n# ///\n",
    "x = 1\n" + BLOCK,
    "# /// script \n# dependencies = []\n# ///\n",
    "  # /// script\n  # dependencies = []\n  # ///\n",
    "# /// other\n# /// script\n# dependencies = []\n# ///\n",
    "x = '# /// script'\n" + BLOCK,
]

# Where the parser and uv part, and why (src/pep723/pep723.h).
DIFFERENT = {
    # A "# /// script" that is not exactly the line: uv ignores the block silently; we refuse it, naming the fix.
    "# /// script \n# dependencies = []\n# ///\n": ("error", "none"),
    "  # /// script\n  # dependencies = []\n  # ///\n": ("error", "none"),
    # A "# /// script" line inside a block of another type is that block's content for the PEP's regex; uv takes
    # the first "# /// script" it finds anywhere.
    "# /// other\n# /// script\n# dependencies = []\n# ///\n": ("none", "block"),
    # uv's search for a second block closes it only where the line after "# ///" is not a comment (the PEP text's
    # rule), so a comment after it hides the second block from uv, which then uses the first; the regex reads two,
    # and two blocks MUST be an error.
    BLOCK + "x = 1\n" + BLOCK + "# trailing\n": ("two", "block"),
    # uv looks only at the first "# /// script" of the text, here mid-line, and then gives up; the PEP reads the block.
    "x = '# /// script'\n" + BLOCK: ("block", "none"),
}


def uv_outcome(uv, path, cache):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "UV_CACHE_DIR": cache, "NO_COLOR": "1", "UV_NO_CONFIG": "1",
           "UV_OFFLINE": "1", "UV_PYTHON_DOWNLOADS": "never", "HOME": cache}
    p = subprocess.run([uv, "export", "--script", path, "-q"], env=env, cwd=os.path.dirname(path),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    err = p.stderr.decode(errors="replace")
    if p.returncode == 0 or "TOML parse error" in err:
        return "block", err   # read a block (whose TOML may not be valid)
    if "multiple PEP 723 metadata blocks" in err:
        return "two", err
    if "without a closing tag" in err or "closing tag (`# ///`) has trailing content" in err:
        return "unclosed", err
    if "does not contain a PEP 723 metadata tag" in err:
        return "none", err
    return "other", err


def ours(results):
    out = []
    for r in results:
        if "error" not in r:
            out.append("none" if r["toml"] is None else "block")
        elif "two '# /// script' metadata blocks" in r["error"]:
            out.append("two")
        elif "is not closed" in r["error"]:
            out.append("unclosed")
        else:
            out.append("error")
    return out


@test
def parser_agrees_with_uv():
    uv = need_uv()
    dump = os.path.join(os.path.dirname(os.environ.get("DAEMON", "./x")), "pep723-dump")
    d = scratch("mcptest-pep723-uv-")
    cache = os.path.join(d, "cache")
    scripts = []
    for s in SHAPES:
        scripts.append((s, s))
        if "\n" in s:
            scripts.append((s.replace("\n", "\r\n"), s))
    out = subprocess.run([dump], input=json.dumps([s for s, _ in scripts]).encode(), stdout=subprocess.PIPE,
                         check=True).stdout
    mine = ours(json.loads(out))
    seen = set()
    for (script, shape), got in zip(scripts, mine):
        path = os.path.join(d, "s.py")
        with open(path, "w", newline="") as f:
            f.write(script)
        theirs, err = uv_outcome(uv, path, cache)
        check(theirs != "other", f"{script!r}: uv said something unexpected: {err!r}")
        seen.add(theirs)
        want = DIFFERENT.get(shape)
        if want:
            eq((got, theirs), want, f"{script!r}: the documented difference (ours, uv's)")
        else:
            eq(got, theirs, f"{script!r}: our outcome against uv's ({err.strip()[:200]!r})")
    eq(seen, {"block", "none", "two", "unclosed"}, "every outcome of uv's was seen")


if __name__ == "__main__":
    main()
