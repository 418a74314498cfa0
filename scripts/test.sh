#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Set up, build and run the whole test suite: the everyday loop (unit suites,
# units and man pages, the quick integration and escape tests: make check),
# the rest of the integration and escape tests (make check-integration), then
# the Debian package test (make check-packages). Under CI=true every test must run: a skip is a failure.
#
# Usage: scripts/test.sh [BUILD_DIR]     (default: build/)
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build="${1:-$top/build}"

"$top/scripts/build.sh" "$build"
cd "$build"

if [ "${CI:-}" = true ]; then
        MCP_SANDBOX_REQUIRE_ALL=1
        export MCP_SANDBOX_REQUIRE_ALL
fi

# As root, the daemon under test runs its sandboxes as uids of their own,
# which must reach the test Pythons (pyenv's, below /root): make /root
# searchable (not listable) for them.
if [ "$(id -u)" -eq 0 ] && [ -d /root/.pyenv ]; then
        chmod o+x /root
fi

# The security tests run a second time with the daemon as an unprivileged
# service user (tests/security/test-unprivileged.sh).
if [ "$(id -u)" -eq 0 ] && ! id -u mcp-sandbox-test >/dev/null 2>&1; then
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin mcp-sandbox-test
fi

status=0
make -j"$(nproc)" --no-print-directory check || status=$?
make -j"$(nproc)" --no-print-directory check-integration || status=$?

# The Debian package on a clean Debian 12 (root, network; a minute or more):
# its own target, so that make check stays quick.
packages=$(make --no-print-directory check-packages 2>&1) || status=$?
echo "$packages"

# One closing line for people and for CI: counts from automake's logs.
total=$(grep -h '^:test-result:' $(find . -name '*.trs') | wc -l)
pass=$(grep -h '^:test-result: PASS' $(find . -name '*.trs') | wc -l)
fail=$(grep -h -E '^:test-result: (FAIL|ERROR|XPASS)' $(find . -name '*.trs') | wc -l)
skip=$(grep -h '^:test-result: SKIP' $(find . -name '*.trs') | wc -l)
case $packages in
*"PASS: tests/integration/test-packages.sh"*) pass=$((pass + 1)) ;;
*"SKIP: tests/integration/test-packages.sh"*) skip=$((skip + 1)) ;;
*) fail=$((fail + 1)) ;;
esac
echo "tests: $pass passed, $fail failed, $skip skipped"

if [ "$status" -ne 0 ]; then
        # CI shows only what is printed: the end of each failed test's log,
        # where its failing check and the daemon's last words are.
        for t in $(grep -l -E '^:test-result: (FAIL|ERROR|XPASS)' $(find . -name '*.trs')); do
                echo "== ${t%.trs}.log: what failed, then its last 60 lines" >&2
                grep -E '^not ok' "${t%.trs}.log" >&2 || true
                tail -n 60 "${t%.trs}.log" >&2
        done
        echo "Failed tests: see $build/test-suite.log, $build/test-suite-integration.log and $build/test-packages.log" >&2
        exit "$status"
fi
if [ "${CI:-}" = true ] && [ "$skip" -ne 0 ]; then
        echo "CI: $skip test program(s) skipped; every test must run in CI:" >&2
        grep -l '^:test-result: SKIP' $(find . -name '*.trs') >&2
        case $packages in *"SKIP: tests/integration/test-packages.sh"*) echo "make check-packages" >&2 ;; esac
        exit 1
fi
