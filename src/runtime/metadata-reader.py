# SPDX-License-Identifier: MIT
# The metadata reader (src/runtime/metadata.c): reads a PEP 723 block with the
# interpreter's own TOML parser, inside the sandbox. The block's file is
# argv[1]; one JSON line answers, {"doc": ...} or {"error": ...}. The daemon
# uses the top-level keys, requires-python and dependencies: the values of the
# other keys are sent as null, so that a large table costs it nothing.
import json, sys, tomllib
try:
    with open(sys.argv[1], 'rb') as f:
        doc = tomllib.load(f)
except tomllib.TOMLDecodeError as e:
    print(json.dumps({'error': str(e)}))
else:
    keep = ('requires-python', 'dependencies')
    doc = {k: v if k in keep else None for k, v in doc.items()}
    print(json.dumps({'doc': doc}, default=str, separators=(',', ':')))
