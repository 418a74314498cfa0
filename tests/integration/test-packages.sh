#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The Debian package on a clean Debian 12, as an administrator would meet it:
#
#  1. build the .deb from this source tree (dpkg-buildpackage -b), or take
#     the one named by MCP_SANDBOX_DEB
#  2. a minimal Debian 12 root (debootstrap --variant=minbase), cached as a
#     tarball in $MCP_SANDBOX_PKG_CACHE (default /var/cache/mcp-python-sandbox-test)
#     so that later runs skip debootstrap
#  3. in that root (its own mount and pid namespaces, entered with pivot_root,
#     not chroot: bubblewrap cannot create a user namespace in a chroot),
#     "apt-get install ./mcp-python-sandbox_*.deb" with its Recommends, then:
#     the user and group mcp-sandbox, the cache directory, the units, the
#     socket enabled and the service not, the user units not enabled, the
#     configuration file a conffile and valid
#  4. the daemon started the way mcp-python-sandboxd.socket and .service
#     would: systemd-socket-activate on /run/mcp-python-sandbox/mcp.sock, mode
#     0660, group mcp-sandbox, the unit's ExecStart= as the user mcp-sandbox;
#     a member of the group runs the shim with no options (the socket path
#     compiled into it), a non-member is refused; a PEP 723 script without
#     dependencies runs with Debian's python3, one with a dependency fails
#     saying uv is not available
#  5. mcp-python-sandbox-install-uv installs uv from PyPI; after a restart the
#     script with a dependency runs
#  6. apt-get purge removes the cache, uv and the drop-in, and the socket's
#     enablement; the user stays
#
# Needs root, debootstrap, util-linux's unshare and pivot_root, network access
# to the Debian archive and PyPI, and (without MCP_SANDBOX_DEB) dpkg-dev,
# debhelper and the build dependencies. Without them it exits 77 (skipped);
# with MCP_SANDBOX_REQUIRE_ALL=1 (CI) that is a failure instead. It takes a
# few minutes: most of it is apt-get and pip fetching packages.
#
# Usage: tests/integration/test-packages.sh      (or make check-packages)
# Environment: MCP_SANDBOX_DEB, MCP_SANDBOX_PKG_SUITE (bookworm),
# MCP_SANDBOX_PKG_MIRROR, MCP_SANDBOX_PKG_CACHE, MCP_SANDBOX_PKG_KEEP=1 (keep
# the work directory).

set -u

top=$(cd "${TOP_SRCDIR:-$(dirname "$0")/../..}" && pwd)
suite=${MCP_SANDBOX_PKG_SUITE:-bookworm}
mirror=${MCP_SANDBOX_PKG_MIRROR:-http://deb.debian.org/debian}
cache=${MCP_SANDBOX_PKG_CACHE:-/var/cache/mcp-python-sandbox-test}
deb=${MCP_SANDBOX_DEB:-}
start=$(date +%s)

say() {
        echo "test-packages: [$(($(date +%s) - start))s] $*"
}

skip() {
        if [ "${MCP_SANDBOX_REQUIRE_ALL:-0}" = 1 ]; then
                echo "FAIL: would be skipped (MCP_SANDBOX_REQUIRE_ALL=1): $*"
                exit 1
        fi
        echo "SKIP: $*"
        exit 77
}

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, namespaces, dpkg in the test root)"
for tool in debootstrap unshare pivot_root tar; do
        command -v "$tool" >/dev/null 2>&1 || skip "$tool is not installed"
done
if [ -z "$deb" ]; then
        for tool in dpkg-buildpackage dh; do
                command -v "$tool" >/dev/null 2>&1 ||
                        skip "$tool is not installed (apt-get install dpkg-dev debhelper), and MCP_SANDBOX_DEB is not set"
        done
        [ -f "$top/debian/control" ] || skip "no debian/ in $top"
        (cd "$top" && dpkg-checkbuilddeps >/dev/null 2>&1) ||
                skip "build dependencies missing: $(cd "$top" && dpkg-checkbuilddeps 2>&1)"
elif [ ! -f "$deb" ]; then
        echo "FAIL: MCP_SANDBOX_DEB=$deb does not exist"
        exit 1
fi

# Network: the archive for debootstrap and apt, PyPI for uv and a package.
reachable() {
        if command -v python3 >/dev/null 2>&1; then
                python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20).read(1)' "$1" \
                        >/dev/null 2>&1
        else
                return 0
        fi
}
reachable "$mirror/dists/$suite/Release" || skip "the Debian archive ($mirror) is not reachable"
reachable "https://pypi.org/simple/uv/" || skip "PyPI is not reachable"

T=$(mktemp -d "${TMPDIR:-/tmp}/test-packages.XXXXXX") || exit 99
cleanup() {
        if [ "${MCP_SANDBOX_PKG_KEEP:-0}" = 1 ]; then
                echo "test-packages: kept $T"
        else
                rm -rf "$T"
        fi
}
trap cleanup EXIT
trap 'exit 99' INT TERM

# --- 1. the package ------------------------------------------------------------
if [ -z "$deb" ]; then
        src="$T/src/mcp-python-sandbox"
        mkdir -p "$src"
        if [ -e "$top/.git" ] && command -v git >/dev/null 2>&1; then
                # What is in the tree, without build products and ignored files.
                (cd "$top" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$src") || exit 99
        else
                # A release tree: everything but build directories in it
                # (those of make distcheck too).
                set -- --exclude=./_build --exclude=./_inst
                for st in $(cd "$top" && find . -mindepth 2 -maxdepth 3 -name config.status); do
                        set -- "$@" --exclude="$(echo "$st" | cut -d/ -f1-2)"
                done
                tar -C "$top" "$@" -cf - . | tar -C "$src" -xf - || exit 99
                chmod -R u+w "$src"
        fi
        say "building the package in $src"
        # The outer make's flags (and TESTS=) must not reach the package's make.
        if ! (cd "$src" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES -u TESTS \
                dpkg-buildpackage -us -uc -b) >"$T/build.log" 2>&1; then
                echo "FAIL: dpkg-buildpackage failed:"
                tail -50 "$T/build.log"
                exit 1
        fi
        deb=$(ls "$T"/src/mcp-python-sandbox_*.deb | head -1)
fi
say "package: $deb"

# --- 2. the root ---------------------------------------------------------------
tarball="$cache/$suite-minbase.tar"
# A month old: made anew, so that apt in the root has little to upgrade.
if [ -f "$tarball" ] && [ -n "$(find "$tarball" -mtime +30)" ]; then
        rm -f "$tarball"
fi
if [ ! -f "$tarball" ]; then
        say "debootstrap --variant=minbase $suite (once; cached in $tarball)"
        mkdir -p "$cache" && chmod 0700 "$cache" || exit 99
        if ! debootstrap --variant=minbase "$suite" "$T/seed" "$mirror" >"$T/debootstrap.log" 2>&1; then
                echo "FAIL: debootstrap failed:"
                tail -20 "$T/debootstrap.log"
                exit 1
        fi
        rm -rf "$T"/seed/var/cache/apt/archives/*.deb
        tar -C "$T/seed" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball" || exit 99
        rm -rf "$T/seed"
fi
root="$T/root"
mkdir -p "$root"
tar -C "$root" --numeric-owner -xf "$tarball" || exit 99
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || :
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
        mkdir -p "$root/usr/local/share/ca-certificates"
        cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
mkdir -p "$root/tmp/pkg"
cp "$deb" "$root/tmp/pkg/"
chmod 0755 "$root/tmp/pkg"
chmod 0644 "$root"/tmp/pkg/*.deb

# --- 3.-6. inside the root -------------------------------------------------------
# Runs as root in the new root; prints "ok - ..." and "not ok - ..." lines.
cat >"$root/tmp/inside.sh" <<'INSIDE'
#!/bin/sh
set -u
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
unset XDG_RUNTIME_DIR MCP_PYTHON_SANDBOX_SOCKET
failed=0
t0=$(date +%s)
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }
check() { # check DESCRIPTION COMMAND...
        d=$1; shift
        if "$@" >/tmp/check.out 2>&1; then ok "$d"; else nok "$d"; sed 's/^/    /' /tmp/check.out | head -20; fi
}
step() { echo "# [$(($(date +%s) - t0))s in the root] $*"; }

step "apt-get install ./$(basename /tmp/pkg/*.deb)"
apt-get update -qq >/tmp/apt.log 2>&1 && apt-get install -y -qq /tmp/pkg/*.deb >>/tmp/apt.log 2>&1
if [ $? != 0 ]; then nok "apt-get install"; tail -30 /tmp/apt.log; exit 1; fi
ok "apt-get install of the package and its dependencies"
# The host's own certificate authorities (a TLS-inspecting proxy's, say),
# copied to /usr/local/share/ca-certificates, as its administrator would.
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
        apt-get install -y -qq ca-certificates >>/tmp/apt.log 2>&1 || { nok "apt-get install ca-certificates"; exit 1; }
fi

# --- 3. what the installation left -----------------------------------------------
check "user mcp-sandbox: system uid, home the cache, no login shell" sh -c '
        IFS=: read -r name x uid gid gecos home shell <<EOF
$(getent passwd mcp-sandbox)
EOF
        echo "$uid $home $shell"
        [ "$uid" -lt 1000 ] && [ "$home" = /var/cache/mcp-python-sandbox ] &&
                case "$shell" in */nologin | */false) ;; *) exit 1 ;; esac'
check "group mcp-sandbox" getent group mcp-sandbox
check "cache directory 0700 mcp-sandbox" sh -c '[ "$(stat -c "%a %U %G" /var/cache/mcp-python-sandbox)" = "700 mcp-sandbox mcp-sandbox" ]'
check "system units installed" test -f /lib/systemd/system/mcp-python-sandboxd.socket -a -f /lib/systemd/system/mcp-python-sandboxd.service
check "user units installed" test -f /usr/lib/systemd/user/mcp-python-sandboxd.socket -a -f /usr/lib/systemd/user/mcp-python-sandboxd.service
check "the socket is enabled (sockets.target.wants)" sh -c \
        '[ "$(readlink /etc/systemd/system/sockets.target.wants/mcp-python-sandboxd.socket)" = /lib/systemd/system/mcp-python-sandboxd.socket ]'
check "the service is not enabled" sh -c '! find /etc/systemd/system -name mcp-python-sandboxd.service | grep -q .'
check "the user units are not enabled" sh -c '! find /etc/systemd/user -name "mcp-python-sandboxd.*" 2>/dev/null | grep -q .'
check "sysusers.d and tmpfiles.d fragments" test -f /usr/lib/sysusers.d/mcp-python-sandbox.conf -a -f /usr/lib/tmpfiles.d/mcp-python-sandbox.conf
check "configuration file is a conffile" sh -c \
        'dpkg-query -W -f="\${Conffiles}\n" mcp-python-sandbox | grep -q "^ /etc/mcp-python-sandbox/mcp-python-sandboxd.conf "'
check "drop-in directory" test -d /etc/mcp-python-sandbox/mcp-python-sandboxd.conf.d
check "mcp-python-sandboxd --check-config" mcp-python-sandboxd --check-config
check "man pages" test -f /usr/share/man/man8/mcp-python-sandboxd.8.gz -a -f /usr/share/man/man1/mcp-python-sandbox.1.gz \
        -a -f /usr/share/man/man5/mcp-python-sandboxd.conf.5.gz -a -f /usr/share/man/man8/mcp-python-sandbox-install-uv.8.gz
check "python3 (Recommends) is installed" python3 -c 'import sys; assert sys.version_info >= (3, 11)'

# --- 4. the daemon as the units start it ------------------------------------------
sock=$(sed -n 's/^ListenStream=//p' /lib/systemd/system/mcp-python-sandboxd.socket)
exec_start=$(sed -n 's/^ExecStart=//p' /lib/systemd/system/mcp-python-sandboxd.service)
[ "$sock" = /run/mcp-python-sandbox/mcp.sock ] && ok "ListenStream=$sock" || nok "ListenStream=$sock"
useradd -m -G mcp-sandbox alice && useradd -m bob || nok "useradd"
daemon_pid=

start_daemon() {
        rm -f "$sock"
        mkdir -p -m 0755 "$(dirname "$sock")"
        # The unit's User=, Group=, CacheDirectory= and UMask=; systemd makes
        # the socket, which this stands in for.
        systemd-socket-activate -l "$sock" \
                setpriv --reuid=mcp-sandbox --regid=mcp-sandbox --init-groups --inh-caps=-all -- \
                env CACHE_DIRECTORY=/var/cache/mcp-python-sandbox sh -c 'umask 0077 && exec "$@"' sh $exec_start \
                >>/tmp/daemon.log 2>&1 &
        daemon_pid=$!
        i=0
        while [ ! -S "$sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
        chgrp mcp-sandbox "$sock" && chmod 0660 "$sock"
}

stop_daemon() {
        [ -n "$daemon_pid" ] || return 0
        kill "$daemon_pid" 2>/dev/null
        wait "$daemon_pid" 2>/dev/null
        daemon_pid=
}

# call AS_USER SCRIPT: one execute_python through the shim with no options; prints what the shim wrote. stdin
# stays open until the call's reply is in, as a client's does: its end ends the session and stops the run.
call() {
        setpriv --reuid="$1" --regid="$1" --init-groups -- env HOME="/home/$1" \
                timeout 600 python3 -c '
import json, subprocess, sys
p = subprocess.Popen(["mcp-python-sandbox", "--no-fallback"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
for m in ({"jsonrpc": "2.0", "id": 1, "method": "initialize",
           "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                      "clientInfo": {"name": "test-packages", "version": "1"}}},
          {"jsonrpc": "2.0", "method": "notifications/initialized"},
          {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
           "params": {"name": "execute_python", "arguments": {"script": sys.argv[1], "timeout_seconds": 60}}}):
    try:
        p.stdin.write(json.dumps(m).encode() + b"\n")
        p.stdin.flush()
    except BrokenPipeError:
        break   # the shim gave up (its exit status says why)
for line in p.stdout:
    sys.stdout.buffer.write(line)
    if json.loads(line).get("id") == 2:
        break
try:
    p.stdin.close()
except BrokenPipeError:
    pass
sys.exit(p.wait())
' "$2" 2>>/tmp/shim.log
}

plain='# /// script
# requires-python = ">=3.11"
# dependencies = []
# ///
import sys
print("plain", sys.version_info[0], sys.version_info[1])
'
withdep='# /// script
# requires-python = ">=3.11"
# dependencies = ["six==1.16.0"]
# ///
import six
print("dependency", six.__version__)
'

step "daemon started by socket activation as mcp-sandbox"
start_daemon
check "the socket is 0660 root:mcp-sandbox" sh -c "[ \"\$(stat -c '%a %U %G' $sock)\" = '660 root mcp-sandbox' ]"
call alice "$plain" >/tmp/out1
if grep -q '"stdout":"plain 3 11\\n"' /tmp/out1; then
        ok "a group member's shim ran a PEP 723 script without dependencies with Debian's python3"
else
        nok "a script without dependencies:"; cut -c1-1500 /tmp/out1; tail -20 /tmp/daemon.log
fi
call bob "$plain" >/tmp/out2
rc=$?
if [ $rc = 77 ] && [ ! -s /tmp/out2 ] && grep -q "permission denied" /tmp/shim.log; then
        ok "a non-member is refused with \"permission denied\" (exit 77)"
else
        nok "a non-member: exit $rc"; cut -c1-500 /tmp/out2; tail -3 /tmp/shim.log
fi
call alice "$withdep" >/tmp/out3
if grep -q '"isError":true' /tmp/out3 && grep -q 'uv is not available' /tmp/out3; then
        ok "without uv, a script with a dependency fails saying uv is not available"
else
        nok "without uv, a script with a dependency:"; cut -c1-1500 /tmp/out3
fi
stop_daemon

# --- 5. uv from the helper --------------------------------------------------------
step "mcp-python-sandbox-install-uv"
if mcp-python-sandbox-install-uv >/tmp/install-uv.log 2>&1; then
        ok "mcp-python-sandbox-install-uv: $(/var/lib/mcp-python-sandbox/uv/bin/uv --version)"
else
        nok "mcp-python-sandbox-install-uv:"; tail -20 /tmp/install-uv.log
fi
check "the uv drop-in" grep -qx "uv = /var/lib/mcp-python-sandbox/uv/bin/uv" \
        /etc/mcp-python-sandbox/mcp-python-sandboxd.conf.d/50-uv.conf
check "--check-config with the drop-in" sh -c 'mcp-python-sandboxd --check-config | grep -q "uv = /var/lib/mcp-python-sandbox/uv/bin/uv"'
step "a script with a dependency (uv installs it from PyPI)"
start_daemon
call alice "$withdep" >/tmp/out4
if grep -q '"stdout":"dependency 1.16.0\\n"' /tmp/out4; then
        ok "with uv, a script with a dependency runs"
else
        nok "with uv, a script with a dependency:"; cut -c1-1500 /tmp/out4; tail -20 /tmp/daemon.log
fi
stop_daemon

# --- 6. purge -------------------------------------------------------------------
step "apt-get purge"
if apt-get purge -y -qq mcp-python-sandbox >/tmp/purge.log 2>&1; then
        ok "apt-get purge"
else
        nok "apt-get purge:"; tail -20 /tmp/purge.log
fi
check "purge removed the cache, uv, the configuration and the socket's enablement" sh -c '
        ! test -e /var/cache/mcp-python-sandbox && ! test -e /var/lib/mcp-python-sandbox &&
        ! test -e /etc/mcp-python-sandbox &&
        ! test -e /etc/systemd/system/sockets.target.wants/mcp-python-sandboxd.socket'
check "the user mcp-sandbox stays" getent passwd mcp-sandbox

step "done"
exit $failed
INSIDE
chmod 0755 "$root/tmp/inside.sh"

say "installing and testing in a $suite root"
# New mount and pid namespaces; the root becomes / by pivot_root (chroot
# would keep bubblewrap from creating user namespaces). The network is the
# host's: apt and pip need it.
unshare --mount --pid --fork --propagation private sh -c '
        set -e
        root=$1
        mount --bind "$root" "$root"
        mount -t proc proc "$root/proc"
        mount --rbind /dev "$root/dev"
        mount --rbind /sys "$root/sys"
        mount -t tmpfs -o mode=0755 tmpfs "$root/run"
        cd "$root"
        mkdir -p .old-root
        pivot_root . .old-root
        umount -l /.old-root
        rmdir /.old-root
        exec env -i TERM=dumb /tmp/inside.sh
' sh "$root" 2>&1 | tee "$T/inside.log"
status=$(grep -c '^not ok' "$T/inside.log")
passed=$(grep -c '^ok' "$T/inside.log")
say "$passed passed, $status failed"
if [ "$status" != 0 ] || ! grep -q '^# .* done$' "$T/inside.log"; then
        exit 1
fi
exit 0
