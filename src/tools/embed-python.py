#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turn a Python program into a C string constant.

    embed-python.py SYMBOL IN.py OUT.c [HEADER...]    write OUT.c
    embed-python.py --check SYMBOL IN.py OUT.c [HEADER...]
                                                     exit 1 if OUT.c is not what IN.py makes

Comment lines and blank lines are left out (the string travels on bwrap's command
line). @NAME@ in the program becomes the value of the C macro NAME, spliced in
with the preprocessor, so a limit is written down once, in a header; the
HEADERs are #included for that.
"""
import os
import re
import sys


def render(symbol, src_path, headers):
    with open(src_path, encoding="utf-8") as f:
        src = f.read()
    out = ["/* SPDX-License-Identifier: MIT */",
           "/* Generated from %s by embed-python.py: edit that file; make writes this one. */"
           % os.path.basename(src_path)]
    out += ['#include "%s"' % h for h in headers]
    out += ["", "#define EMBED_STR_(x) #x", "#define EMBED_STR(x) EMBED_STR_(x)", "",
            "const char %s[] =" % symbol]
    for line in src.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = re.split(r"@([A-Z_][A-Z0-9_]*)@", line + "\n")
        c = []
        for i, p in enumerate(parts):
            if i % 2:
                c.append("EMBED_STR(%s)" % p)
            elif p:
                esc = p.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
                c.append('"%s"' % esc)
        out.append("        " + " ".join(c))
    out[-1] += ";"
    return "\n".join(out) + "\n"


def main(argv):
    check = argv[:1] == ["--check"]
    if check:
        argv = argv[1:]
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    symbol, src_path, out_path, headers = argv[0], argv[1], argv[2], argv[3:]
    text = render(symbol, src_path, headers)
    if check:
        try:
            with open(out_path, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = None
        if current != text:
            sys.stderr.write("%s is not what %s makes: run make (or embed-python.py) and commit it\n"
                             % (out_path, src_path))
            return 1
        return 0
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
