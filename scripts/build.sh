#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Set up this machine and build in BUILD_DIR (default: build/), with warnings
# as errors. Used by demo.sh and test.sh.
#
# Usage: scripts/build.sh [BUILD_DIR]
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build="${1:-$top/build}"

"$top/scripts/setup-debian.sh"
cd "$top"
[ -x configure ] || ./autogen.sh >/dev/null
mkdir -p "$build"
cd "$build"
[ -f Makefile ] || "$top/configure" --enable-werror --quiet
make -j"$(nproc)" --no-print-directory >/dev/null
