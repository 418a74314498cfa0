# SPDX-License-Identifier: MIT
"""Tiny, valid wheels built on the spot, for a local package index.

A directory of wheels is a "flat index": uv takes it with --find-links DIR.
Installing from it needs no network, so tests that use it are deterministic.
"""

import base64
import hashlib
import os
import re
import zipfile


def normalize(name):
    """PEP 503 normalized name: lower case, runs of -_. become one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def build_wheel(directory, name, version="1.0", requires=(), module_source=None, extra_files=()):
    """Write NAME-VERSION-py3-none-any.whl into directory; returns its path.

    The wheel holds one package, import name = name with "-" as "_", whose
    __init__.py defines __version__ (and whatever module_source adds), plus the
    dist-info files a wheel must have: METADATA, WHEEL and RECORD (with hashes).
    requires: PEP 508 strings for Requires-Dist.
    extra_files: (path in the wheel, bytes) pairs added as they are, e.g. "NAME-VERSION.data/data/x" (installed
    relative to the environment's root) or "x.pth" (into site-packages); listed in RECORD like the rest.
    """
    dist = re.sub(r"[-_.]+", "_", name)   # the wheel file name's form
    pkg = dist.lower()
    info = f"{dist}-{version}.dist-info"
    source = f"__version__ = {version!r}\nDIST_NAME = {name!r}\n" + (module_source or "")
    metadata = "Metadata-Version: 2.1\n" f"Name: {name}\n" f"Version: {version}\n" "Summary: mcptest wheel\n"
    for r in requires:
        metadata += f"Requires-Dist: {r}\n"
    wheel = "Wheel-Version: 1.0\nGenerator: mcptest\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = [
        (f"{pkg}/__init__.py", source.encode()),
        (f"{info}/METADATA", metadata.encode()),
        (f"{info}/WHEEL", wheel.encode()),
        *extra_files,
    ]
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files)
    record += f"{info}/RECORD,,\n"
    files.append((f"{info}/RECORD", record.encode()))

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{dist}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path + ".part", "w", zipfile.ZIP_DEFLATED) as z:
        for name_in_zip, data in files:
            z.writestr(name_in_zip, data)
    os.replace(path + ".part", path)
    return path
