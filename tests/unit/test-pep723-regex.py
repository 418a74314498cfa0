#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The PEP 723 parser against the PEP's reference regex, on a generated corpus of shapes.

Every script of up to four lines drawn from an alphabet of line kinds (openings,
closings, content, comments after the closing line, near-misses, code, blank
lines), each with LF, CRLF and no final newline, plus longer random shapes, goes
through the C parser (pep723-dump) and through Python's re with the regex the
PEP gives, read the way its reference implementation reads it. Where they
differ, the difference must be one of the parser's three documented choices
(src/pep723/pep723.h):
  - an empty block ("# /// script" then "# ///") is a block: the PEP's text and
    uv accept it, the regex needs one content line. Checked against the regex
    with its content group made optional (`+` -> `*`), and only where such an
    empty block occurs;
  - an unclosed "# /// script" is refused, as uv refuses it, where the regex
    ignores it: checked by showing that the regex does not match at that line
    and that the line is not inside any block the regex matched;
  - a "# /// script" line with indentation or trailing blanks is refused where
    the regex ignores it: checked the same way.
Content is compared line by line split at "\n" (the reference implementation's
splitlines() also splits at "\x0b", "\x0c" and others, which no shape here has).
"""

import itertools
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pep723dump import dump, report  # noqa: E402

PEP_REGEX = r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$"
# The same with an empty content allowed: the one place where the PEP's text and uv accept more.
EMPTY_OK_REGEX = PEP_REGEX.replace(r"(^#(| .*)$\s)+)", r"(^#(| .*)$\s)*)")
assert EMPTY_OK_REGEX != PEP_REGEX

LINES = [
    "# /// script",
    "# /// other",
    "# ///",
    "# dependencies = []",
    "#",
    "# Run with: uv run x.py",
    "#x = 1",
    "x = 1",
    "",
    "# /// ",
    "  # /// script",
    "# /// script ",
    "# s = '# /// script'",
]
RANDOM_EXTRA = LINES + ["# ruff: noqa", "\t# ///", "# ///\r", "# ////", "#!/usr/bin/env python3"]

failures = []


def fail(msg):
    failures.append(msg)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def regex_read(script, regex):
    """What the reference implementation makes of a script: ('none',), ('dup', starts) or ('block', toml, start, end).

    Read as Python reads a file in text mode would give it, with "\r\n" as "\n"."""
    text = script.replace("\r\n", "\n")
    matches = [m for m in re.finditer(regex, text) if m.group("type") == "script"]
    if len(matches) > 1:
        return ("dup", [line_of(text, m.start()) for m in matches])
    if not matches:
        return ("none",)
    m = matches[0]
    lines = m.group("content").split("\n")[:-1]
    toml = "".join((l[2:] if l.startswith("# ") else l[1:]) + "\n" for l in lines)
    return ("block", toml, line_of(text, m.start()), line_of(text, m.end()))


def spans(script, regex):
    """The line ranges of every block the regex matches, whatever its type."""
    text = script.replace("\r\n", "\n")
    return [(line_of(text, m.start()), line_of(text, m.end())) for m in re.finditer(regex, text)]


def has_empty_block(script):
    return re.search(r"(?m)^# /// [a-zA-Z0-9-]+\n# ///$", script.replace("\r\n", "\n")) is not None


def regex_matches_at(script, lineno, regex):
    text = script.replace("\r\n", "\n")
    pos = 0
    for _ in range(lineno - 1):
        pos = text.index("\n", pos) + 1
    return re.compile(regex).match(text, pos) is not None


def script_line(script, lineno):
    return script.replace("\r\n", "\n").split("\n")[lineno - 1]


def compare(script, got):
    strict = regex_read(script, PEP_REGEX)
    relaxed = regex_read(script, EMPTY_OK_REGEX)
    if strict != relaxed and not has_empty_block(script):
        fail(f"{script!r}: the two regexes differ without an empty block")

    if "error" in got:
        err = got["error"]
        m = re.match(r"the '# /// script' metadata block on line (\d+) is not closed", err)
        n = re.match(r"line (\d+) looks like the start of a '# /// script' metadata block", err)
        d = re.match(r"the script has two '# /// script' metadata blocks \(lines (\d+) and (\d+)\)", err)
        if d:
            if relaxed[0] != "dup" or relaxed[1][:2] != [int(d.group(1)), int(d.group(2))]:
                fail(f"{script!r}: C says two blocks ({err}), the regex says {relaxed}")
            return
        if not (m or n):
            fail(f"{script!r}: unexpected error {err!r}")
            return
        lineno = int((m or n).group(1))
        line = script_line(script, lineno)
        if m and line.rstrip("\r") != "# /// script" and line != "# /// script":
            fail(f"{script!r}: C says line {lineno} opens an unclosed block, but it is {line!r}")
        if n and (line.strip(" \t\r") != "# /// script" or line == "# /// script"):
            fail(f"{script!r}: C says line {lineno} is a near miss, but it is {line!r}")
        if regex_matches_at(script, lineno, EMPTY_OK_REGEX):
            fail(f"{script!r}: C refuses line {lineno}, but the regex reads a block there")
        for a, b in spans(script, EMPTY_OK_REGEX):
            if a <= lineno <= b:
                fail(f"{script!r}: C refuses line {lineno}, inside a block the regex read (lines {a}-{b})")
        return

    mine = ("none",) if got["toml"] is None else ("block", got["toml"], got["start"], got["end"])
    if mine != relaxed:
        fail(f"{script!r}: C reads {mine}, the regex {relaxed}")
    # Where C reads a block or none, nothing was ignored that the checks above would refuse.
    for i, line in enumerate(script.replace("\r\n", "\n").split("\n"), 1):
        if line == "# /// script" and not any(a <= i <= b for a, b in spans(script, EMPTY_OK_REGEX)):
            fail(f"{script!r}: the regex ignores the block on line {i}, and C did not say so")


def corpus():
    shapes = []
    for n in range(0, 5):
        shapes.extend(itertools.product(LINES, repeat=n))
    rnd = random.Random(723)
    for _ in range(20000):
        shapes.append(tuple(rnd.choice(RANDOM_EXTRA) for _ in range(rnd.randint(5, 12))))
    for shape in shapes:
        yield "\n".join(shape) + "\n"
        if shape:
            yield "\n".join(shape)
            yield "\r\n".join(shape) + "\r\n"
    # Shapes from real scripts.
    yield "#!/usr/bin/env -S uv run --script\n# /// script\n# dependencies = [\"rich\"]\n# ///\n# Run with: uv run x.py\n"
    yield "# /// script\n# requires-python = \">=3.11\"\n# dependencies = [\n#   \"httpx\",\n# ]\n# ///\n# ruff: noqa: E501\n"


def main():
    scripts = list(corpus())
    results = dump(scripts)

    kinds = {}
    for script, got in zip(scripts, results):
        kind = "error" if "error" in got else "none" if got["toml"] is None else "block"
        kinds[kind] = kinds.get(kind, 0) + 1
        compare(script, got)

    print(f"{len(scripts)} scripts: {kinds}")
    # The corpus must exercise every outcome, or it proves little.
    for kind in ("error", "none", "block"):
        if kinds.get(kind, 0) < 100:
            fail(f"only {kinds.get(kind, 0)} scripts with outcome {kind}")
    return report(failures)


if __name__ == "__main__":
    sys.exit(main())
