# SPDX-License-Identifier: MIT
# matplotlib's font list (src/runtime/spawn.c, for the store's font step): made
# in the sandbox's /tmp by importing matplotlib.font_manager in the
# environment, then written to stdout, its file name on the first line.
import os, sys
d = os.environ['MPLCONFIGDIR'] = '/tmp/mcp-python-sandbox-mpl'
import matplotlib.font_manager as fm
name = 'fontlist-v%s.json' % fm.FontManager.__version__
with open(os.path.join(d, name), 'rb') as f:
    data = f.read()
sys.stdout.buffer.write(name.encode() + b'\n' + data)
