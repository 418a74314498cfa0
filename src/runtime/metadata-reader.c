/* SPDX-License-Identifier: MIT */
/* Generated from metadata-reader.py by embed-python.py: edit that file; make writes this one. */
#include "programs.h"

#define EMBED_STR_(x) #x
#define EMBED_STR(x) EMBED_STR_(x)

const char metadata_reader_code[] =
        "import json, sys, tomllib\n"
        "try:\n"
        "    with open(sys.argv[1], 'rb') as f:\n"
        "        doc = tomllib.load(f)\n"
        "except tomllib.TOMLDecodeError as e:\n"
        "    print(json.dumps({'error': str(e)}))\n"
        "else:\n"
        "    keep = ('requires-python', 'dependencies')\n"
        "    doc = {k: v if k in keep else None for k, v in doc.items()}\n"
        "    print(json.dumps({'doc': doc}, default=str, separators=(',', ':')))\n";
