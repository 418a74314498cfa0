#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The main job, end to end: set up, build, start a real daemon, and run a
# PEP 723 script with a dependency through the shim, as an MCP client does.
#
# Usage: scripts/demo.sh [BUILD_DIR]     (default: build/)
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build="${1:-$top/build}"

"$top/scripts/build.sh" "$build"
cd "$build"

run=$(mktemp -d)
trap 'kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; rm -rf "$run"' EXIT
# A cache that survives demo runs, so the second run is warm.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mcp-python-sandbox-demo"
# As root the daemon runs its sandboxes as uids of their own, which cannot
# pass through a 0700 /root to a cache there.
if [ "$(id -u)" -eq 0 ] && [ -z "${XDG_CACHE_HOME:-}" ]; then
        cache=/var/cache/mcp-python-sandbox-demo
fi
"$build/mcp-python-sandboxd" --listen="$run/mcp.sock" --cache-dir="$cache" --log-level=notice &
daemon=$!
i=0
while [ ! -S "$run/mcp.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done

cat > "$run/demo.py" <<'PY'
# /// script
# dependencies = ["humanize>=4"]
# requires-python = ">=3.11"
# ///
import sys
import humanize

print(f"Python {sys.version.split()[0]} in the sandbox says:", humanize.naturalsize(123456789))
print("Network:", end=" ")
try:
    import socket
    socket.create_connection(("pypi.org", 443), timeout=2)
    print("reachable")
except OSError as e:
    print(f"not reachable ({e.strerror or e})")
PY

echo "== execute_python through the shim ($build/mcp-python-sandbox) =="
"$top/scripts/mcp-call" --shim="$build/mcp-python-sandbox" --socket="$run/mcp.sock" \
        execute_python --script-file="$run/demo.py"
