#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The checks CI runs beyond the test suite: the unit suites under valgrind,
# the whole suite under ASan + UBSan, each fuzz target for a while, and a
# smoke run of the benchmark.
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
# A small quarantine: the suite's memory bounds (RSS) measure the daemon, not the
# freed blocks ASan holds back.
mkdir -p build-asan
(cd build-asan && { [ -f Makefile ] || ../configure --enable-werror --enable-sanitizers --quiet; } &&
        export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:quarantine_size_mb=16 &&
        export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 &&
        { make -j"$jobs" --no-print-directory check >/dev/null 2>&1 || { cat test-suite.log; exit 1; }; } &&
        { make -j"$jobs" --no-print-directory check-integration >/dev/null 2>&1 ||
          { cat test-suite-integration.log; exit 1; }; })
grep -h '^:test-result:' $(find build-asan -name '*.trs') | sort | uniq -c

echo "== fuzz targets, ${FUZZ_SECONDS:=20}s each"
command -v clang >/dev/null || { echo "clang is needed for the fuzzers" >&2; exit 1; }
mkdir -p build-fuzz
(cd build-fuzz && { [ -f Makefile ] || ../configure --enable-fuzzer CC=clang --quiet; } &&
        make -j"$jobs" --no-print-directory fuzz FUZZ_SECONDS="$FUZZ_SECONDS")

# The benchmark reports and never fails on a timing; this smoke run fails
# only when the harness itself breaks (a server it cannot drive, a
# measurement or an output file missing).
echo "== the benchmark, a smoke run"
out=$(mktemp -d)
(cd build && BENCH_QUICK=1 BENCH_NO_COLD_DEPS=1 python3 ../bench/run.py --daemon "$PWD/mcp-python-sandboxd" \
        --shim "$PWD/mcp-python-sandbox" --work "$PWD/bench-work" --out "$out" >bench.log 2>&1 ||
        { cat bench.log; exit 1; })
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
R = json.load(open(os.path.join(out, "results", "latest.json")))
missing = []
for section, keys in (("warm_hello", ("ours_shim", "ours_socket", "ours_fresh_socket", "reference")),
                      ("warm_hello_paced", ("ours_shim", "reference")),
                      ("cold_start", ("ours_socket_activation", "ours_shim_fallback", "reference")),
                      ("floor", ("python", "bwrap_python")),
                      ("memory", ("ours_idle_fresh_rss_kb", "ours_idle_after_runs_rss_kb", "shim_rss_kb"))):
    for k in keys:
        if not (R.get(section) or {}).get(k):
            missing.append(section + "." + k)
for k, v in (R.get("warm_hello") or {}).items():
    if v and v.get("failures"):
        missing.append("warm_hello.%s: %d failed calls" % (k, v["failures"]))
if [t["clients"] for t in R.get("throughput", {}).get("ours", [])] != [1, 4, 16]:
    missing.append("throughput.ours for 1, 4 and 16 clients")
runs = (R.get("cleanup") or {}).get("runs") or []
if not runs or not all((x.get("during") or {}).get("n") and (x.get("quiet") or {}).get("n") for x in runs):
    missing.append("cleanup: pings quiet and during a store cleanup")
have = [g.get("goal", "") for g in R.get("goals", [])]
for want in ("warm hello world within", "on warm hello world (calls at an agent's pace)", "on cold start",
             "daemon idle RSS", "warm numpy run", "warm pandas run", "warm matplotlib run", "back to back",
             "throughput at 16 clients", "print-heavy loop", "throughput scales with cores",
             "ping during a store cleanup"):
    if not any(want in g for g in have):
        missing.append("the goal '%s'" % want)
for f in ("RESULTS.md", "results/latest.svg"):
    if not os.path.getsize(os.path.join(out, f)):
        missing.append(f)
if missing:
    sys.exit("the benchmark lacks: " + ", ".join(missing))
print("bench smoke run: %d measurements, goals: %s" % (
    sum(len(v) for v in R.values() if isinstance(v, dict)), ", ".join("met" if g["met"] else "not met" for g in R["goals"])))
PY
rm -rf "$out"
