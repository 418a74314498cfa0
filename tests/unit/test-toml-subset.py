#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The daemon's reading of PEP 723 TOML (src/pep723/toml-subset.h) against tomllib.

Blocks as people write them, and many thousands of generated ones (random lines
drawn from fragments of TOML, valid and not: keys bare, quoted and dotted,
strings basic, literal, multi-line and escaped, arrays over lines with comments,
numbers, tables, stray brackets and commas, tabs, carriage returns, non-ASCII),
go through the C parser (pep723-dump, as script blocks) and through tomllib.
Wherever the C parser reads a block, tomllib must read the same document from
it; where tomllib refuses a block, the C parser must have left it to tomllib.
The blocks as people write them must all be read by the C parser (or the fast
path serves nobody), and the generated corpus must give both outcomes.
"""

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pep723dump import dump, report  # noqa: E402

try:
    import tomllib
except ImportError:   # Python < 3.11
    print("SKIP: this Python has no tomllib")
    sys.exit(77)

# Blocks as they are published: each must be read in the daemon.
COMMON = [
    'dependencies = ["rich"]\n',
    'dependencies = []\n',
    'requires-python = ">=3.11"\ndependencies = [\n  "httpx",\n  "rich>=13",\n]\n',
    '# the tools\ndependencies = [\n    "requests<3",  # http\n    # "pandas",\n    "numpy; python_version >= \'3.11\'",\n]\n',
    'requires-python = ">=3.11"   # new enough\n',
    "dependencies = ['requests[socks]', 'python-dateutil']\n",
    'dependencies=["six"]\nrequires-python="~=3.12"\n',
    '\n\ndependencies = [ "a" , "b" ]\n\n',
    'dependencies = [\n\t"tabulate",\n\t"humanize",\n]\n',
    '',
    '# nothing but a comment\n',
]

KEYS = ["dependencies", "requires-python", "dependencies ", "requires-python\t", "name", '"dependencies"',
        "'requires-python'", "dependencies.x", "tool.uv", "[tool]", "[tool.uv]", "[[tool]]", "dep-endencies"]
BLANKS = [" = ", "=", "= ", " =", "\t=\t", " ", "\t", "  "]
# Strings: those the subset reads first, then those it leaves to tomllib (valid or not).
GOOD_STRINGS = ['"rich"', '"rich>=13"', "'rich'", '""', "''", '"a#b"', "'a\"b'", '"a\'b"', '"tab\tin"',
                "'c:\\path'", '"numpy; python_version >= \'3.11\'"', '"requests[socks]"', "'x'"]
ODD_STRINGS = ['"\\u0072ich"', '"a\\"b"', '"""rich"""', "'''rich'''", '"unterminated', "'unterminated",
               '"caf\u00e9"', '"\u00e9"', '"x" "y"', '"a\\\\b"', '"a\rb"', '"a\nb"', "'a\nb'", '"a\n"', '"\n"']
ARRAYS = ["[", "]", ",", "[]", "[ ]", "[,]", '["a",]', '["a",,]', '["a" "b"]', '[["a"]]', '["a", 1]', "[1, 2]",
          '[\n"a",\n]', "[ # c\n", "# c\n"]
OTHER_VALUES = ["1", "3.11", "true", "{}", '{ a = "b" }', "2024-01-01"]
ODDITIES = ["#", "# comment", " # comment", "\n", "\n", "\n", "\r\n", "\r", "\x01", "\x7f", "\x0c"]
FRAGMENTS = KEYS + BLANKS + GOOD_STRINGS + ODD_STRINGS + ARRAYS + OTHER_VALUES + ODDITIES


def a_string(rnd):
    return rnd.choice(GOOD_STRINGS) if rnd.random() < 0.85 else rnd.choice(ODD_STRINGS)


def generated(n, seed):
    rnd = random.Random(seed)
    # Mostly shaped like key = value lines, so that a fair share is valid; a third random fragments.
    for i in range(n):
        if i % 3 == 0:
            yield "".join(rnd.choice(FRAGMENTS) for _ in range(rnd.randint(1, 14)))
            continue
        lines = []
        keys = rnd.sample(["dependencies", "requires-python"], rnd.randint(1, 2))
        if rnd.random() < 0.15:   # a key outside the subset, or one twice
            keys.insert(rnd.randrange(len(keys) + 1),
                        rnd.choice(["name", '"dependencies"', "dependencies.a", "dependencies", "requires-python"]))
        for key in keys:
            eq = rnd.choice([" = ", "=", "\t= ", " =\t"] * 3 + [" : ", "\n= "])
            if rnd.random() < (0.9 if key == "dependencies" else 0.1):
                items = [a_string(rnd) for _ in range(rnd.randint(0, 4))]
                seps = [rnd.choice([",", ", ", ",\n  ", " ,", ",\n# c\n", ",  # c\n"] * 3 + [",,", " ", "\n"])
                        for _ in items]
                body = "".join(x + sep for x, sep in zip(items, seps))
                if items and rnd.random() < 0.5:
                    body = body.rstrip(", \n")   # no trailing comma
                value = rnd.choice(["[", "[\n  ", "[ ", "[  # c\n"]) + body + \
                    rnd.choice(["]", "\n]", " ]"] * 3 + ["", "]]", "],"])
            else:
                value = a_string(rnd) if rnd.random() < 0.8 else rnd.choice(OTHER_VALUES)
            tail = rnd.choice(["", "", "", " # note", "\t#", "  # a \"quoted\" note", " x", ",",
                               ' requires-python = "x"', " dependencies = []"])
            lines.append(key + eq + value + tail)
        if rnd.random() < 0.3:
            lines.insert(rnd.randrange(len(lines) + 1), rnd.choice(["", "# c", "[tool.uv]", "   ", "\t# c"]))
        yield "\n".join(lines) + rnd.choice(["\n", "", "\n\n"])


def as_script(toml):
    """The block as a script carries it: "# " before each line, "#" alone for an empty one."""
    lines = toml.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    body = "".join(("# " + x if x else "#") + "\n" for x in lines)
    return "# /// script\n" + body + "# ///\nprint('x')\n"


def tomllib_reads(toml):
    try:
        return True, tomllib.loads(toml)
    except tomllib.TOMLDecodeError as e:
        return False, str(e)


def main():
    texts = list(COMMON) + list(generated(30000, 723))
    results = dump([as_script(t) for t in texts])

    failures = []
    outcomes = {"read here": 0, "left to tomllib (it reads it)": 0, "left to tomllib (it refuses it)": 0}
    for i, (text, got) in enumerate(zip(texts, results)):
        if "error" in got or got.get("toml") is None:
            continue   # not a block: nothing to read (test-pep723-regex.py covers the extraction)
        ok, ref = tomllib_reads(got["toml"])
        mine = got.get("subset")
        if mine is not None:
            outcomes["read here"] += 1
            if not ok:
                failures.append(f"read here, refused by tomllib ({ref}): {got['toml']!r} -> {mine!r}")
            elif mine != ref:
                failures.append(f"read differently: {got['toml']!r}: here {mine!r}, tomllib {ref!r}")
        else:
            outcomes["left to tomllib (it reads it)" if ok else "left to tomllib (it refuses it)"] += 1
            if i < len(COMMON):
                failures.append(f"a block as people write it was left to tomllib: {got['toml']!r}")

    print(f"{len(texts)} blocks: {outcomes}")
    # The corpus must give every outcome, or it proves little.
    for kind, n in outcomes.items():
        if n < 300:
            failures.append(f"only {n} blocks {kind}")
    return report(failures)


if __name__ == "__main__":
    sys.exit(main())
