#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Install what building, running and testing mcp-python-sandbox needs on
# Debian 12 (or Ubuntu): the build dependencies and tools from the archive,
# and uv, which Debian does not package, pinned, from PyPI.
#
# Usage: scripts/setup-debian.sh        (as root, or through sudo)
set -eu

UV_VERSION="${UV_VERSION:-0.13.9}"
UV_BIN="${UV_BIN:-/usr/local/bin/uv}"

SUDO=
if [ "$(id -u)" -ne 0 ]; then
        SUDO=sudo
fi

PACKAGES="build-essential autoconf automake pkg-config libsystemd-dev libjson-c-dev check
libseccomp-dev bubblewrap systemd python3 python3-venv mandoc valgrind clang libclang-rt-14-dev
debhelper debootstrap dpkg-dev iproute2 qemu-system-x86 qemu-utils"

missing=
for p in $PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
        echo "setup: installing from the Debian archive:$missing"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if [ -x "$UV_BIN" ] && "$UV_BIN" --version 2>/dev/null | grep -q "^uv $UV_VERSION"; then
        echo "setup: uv $UV_VERSION is at $UV_BIN"
else
        echo "setup: installing uv $UV_VERSION from PyPI to $UV_BIN"
        tmp=$(mktemp -d)
        trap 'rm -rf "$tmp"' EXIT
        python3 -m venv "$tmp/venv"
        "$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION"
        $SUDO install -m 0755 "$tmp/venv/bin/uv" "$UV_BIN"
fi
"$UV_BIN" --version
