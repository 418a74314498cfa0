#!/bin/sh
# SPDX-License-Identifier: MIT
# Generate the build system: ./autogen.sh && ./configure && make
set -e
cd "$(dirname "$0")"
autoreconf --force --install --symlink
echo "Now run ./configure and make."
