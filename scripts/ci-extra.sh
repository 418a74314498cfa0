#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The checks CI runs beyond the test suite: the unit suites under valgrind,
# the whole suite under ASan + UBSan, and each fuzz target for a while.
#
# Usage: scripts/ci-extra.sh     (after scripts/setup-debian.sh)
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] || ./autogen.sh >/dev/null
jobs=$(nproc)

echo "== unit suites under valgrind"
mkdir -p build
(cd build && { [ -f Makefile ] || ../configure --enable-werror --quiet; } && make -j"$jobs" --no-print-directory check-valgrind)

echo "== the whole suite under ASan + UBSan"
mkdir -p build-asan
(cd build-asan && { [ -f Makefile ] || ../configure --enable-werror --enable-sanitizers --quiet; } &&
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        make -j"$jobs" --no-print-directory check >/dev/null 2>&1 ||
        { cat test-suite.log; exit 1; })
grep -h '^:test-result:' $(find build-asan -name '*.trs') | sort | uniq -c

echo "== fuzz targets, ${FUZZ_SECONDS:=20}s each"
command -v clang >/dev/null || { echo "clang is needed for the fuzzers" >&2; exit 1; }
mkdir -p build-fuzz
(cd build-fuzz && { [ -f Makefile ] || ../configure --enable-fuzzer CC=clang --quiet; } &&
        make -j"$jobs" --no-print-directory fuzz FUZZ_SECONDS="$FUZZ_SECONDS")
