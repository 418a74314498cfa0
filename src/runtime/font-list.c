/* SPDX-License-Identifier: MIT */
/* Generated from font-list.py by embed-python.py: edit that file; make writes this one. */
#include "programs.h"

#define EMBED_STR_(x) #x
#define EMBED_STR(x) EMBED_STR_(x)

const char font_list_code[] =
        "import os, sys\n"
        "d = os.environ['MPLCONFIGDIR'] = '/tmp/mcp-python-sandbox-mpl'\n"
        "import matplotlib.font_manager as fm\n"
        "name = 'fontlist-v%s.json' % fm.FontManager.__version__\n"
        "with open(os.path.join(d, name), 'rb') as f:\n"
        "    data = f.read()\n"
        "sys.stdout.buffer.write(name.encode() + b'\\n' + data)\n";
