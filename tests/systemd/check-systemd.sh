#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The Debian package under a real systemd: a Debian 12 virtual machine boots,
# installs the package with apt from a local repository and runs every step
# of tests/systemd/vm-test.sh (one PASS/FAIL line each) as its oneshot unit.
#
#  1. the .deb is built from this tree (dpkg-buildpackage -b), or taken from
#     MCP_SANDBOX_DEB; a copy with a higher version is made for the upgrade
#  2. the image: debootstrap bookworm with a kernel, systemd, bubblewrap and
#     python3, as an ext4 file system made without mounting anything
#     (mkfs.ext4 -d), cached in $MCP_SANDBOX_VM_CACHE (default
#     /var/cache/mcp-python-sandbox-vm) under a name that changes with the
#     recipe below; each run boots a copy-on-write overlay of it
#  3. a second disk holds the local apt repository, uv's wheel, a wheel for
#     the scripts' dependencies and the test, read by the image's unit
#     vm-check.service; the machine has no network
#  4. qemu with KVM when it boots there, TCG otherwise; the serial console is
#     the test's output, and the machine powers off when the test ends
#
# Needs root, qemu-system-x86, qemu-utils, debootstrap, e2fsprogs,
# dpkg-dev and the build dependencies, and (the first time) the Debian archive
# and PyPI. Without them it exits 77; with MCP_SANDBOX_REQUIRE_ALL=1 or
# CI=true that is a failure.
#
# Usage: tests/systemd/check-systemd.sh       (or make check-systemd)
# Environment: MCP_SANDBOX_DEB, MCP_SANDBOX_VM_CACHE, MCP_SANDBOX_PKG_MIRROR,
# MCP_SANDBOX_VM_ACCEL (kvm or tcg: no probing), MCP_SANDBOX_VM_KEEP=1 (keep
# the work directory), MCP_SANDBOX_VM_TIMEOUT (seconds for the test, 1200).

set -u

top=$(cd "${TOP_SRCDIR:-$(dirname "$0")/../..}" && pwd)
here="$top/tests/systemd"
mirror=${MCP_SANDBOX_PKG_MIRROR:-http://deb.debian.org/debian}
cache=${MCP_SANDBOX_VM_CACHE:-/var/cache/mcp-python-sandbox-vm}
deb=${MCP_SANDBOX_DEB:-}
timeout=${MCP_SANDBOX_VM_TIMEOUT:-1200}
UV_VERSION=0.13.9
start=$(date +%s)

say() {
        echo "check-systemd: [$(($(date +%s) - start))s] $*"
}

skip() {
        if [ "${MCP_SANDBOX_REQUIRE_ALL:-0}" = 1 ] || [ "${CI:-}" = true ]; then
                echo "FAIL: would be skipped (in CI every test must run): $*"
                exit 1
        fi
        echo "SKIP: $*"
        exit 77
}

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap)"
for tool in debootstrap mkfs.ext4 qemu-system-x86_64 qemu-img dpkg-scanpackages dpkg-deb python3; do
        command -v "$tool" >/dev/null 2>&1 ||
                skip "$tool is not installed (apt-get install qemu-system-x86 qemu-utils debootstrap dpkg-dev)"
done
if [ -z "$deb" ]; then
        command -v dpkg-buildpackage >/dev/null 2>&1 || skip "dpkg-buildpackage is not installed"
        (cd "$top" && dpkg-checkbuilddeps >/dev/null 2>&1) ||
                skip "build dependencies missing: $(cd "$top" && dpkg-checkbuilddeps 2>&1)"
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/check-systemd.XXXXXX") || exit 99
qemu_pid=
cleanup() {
        [ -z "$qemu_pid" ] || kill "$qemu_pid" 2>/dev/null
        if [ "${MCP_SANDBOX_VM_KEEP:-0}" = 1 ]; then
                echo "check-systemd: kept $T"
        else
                rm -rf "$T"
        fi
}
trap cleanup EXIT
trap 'exit 99' INT TERM
mkdir -p "$cache" && chmod 0700 "$cache" || exit 99

# --- the image -------------------------------------------------------------------
# What goes into the image; its hash names the cached image, so that a change
# here makes a new one.
PACKAGES="linux-image-amd64,systemd,systemd-sysv,udev,dbus,libpam-systemd,bubblewrap,python3,python3-venv,procps,util-linux,kmod,e2fsprogs,libjson-c5,libsystemd0,libseccomp2"
vm_unit='[Unit]
Description=mcp-python-sandbox VM check
After=multi-user.target
SuccessAction=poweroff-force
FailureAction=poweroff-force
[Service]
Type=oneshot
ExecStart=/bin/sh -c "mkdir -p /mnt/check && mount -o ro /dev/vdb /mnt/check && exec sh /mnt/check/vm-test.sh /mnt/check"
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/ttyS0
TimeoutStartSec=infinity
[Install]
WantedBy=multi-user.target'
recipe=$(printf '%s\n%s\n%s\n' "v1" "$PACKAGES" "$vm_unit" | sha256sum | cut -c1-12)
image="$cache/bookworm-$recipe"
# A month old: made anew, so that its packages are recent.
if [ -d "$image" ] && [ -n "$(find "$image/root.img" -mtime +30 2>/dev/null)" ]; then
        rm -rf "$image"
fi
if [ ! -f "$image/root.img" ]; then
        say "debootstrap bookworm with a kernel (once; cached in $image)"
        for old in "$cache"/bookworm-*; do
                [ -d "$old" ] && rm -rf "$old"
        done
        seed="$T/seed"
        if ! debootstrap --variant=minbase --include="$PACKAGES" bookworm "$seed" "$mirror" \
                >"$T/debootstrap.log" 2>&1; then
                echo "FAIL: debootstrap failed:"
                tail -20 "$T/debootstrap.log"
                exit 1
        fi
        rm -rf "$seed"/var/cache/apt/archives/*.deb "$seed"/var/lib/apt/lists/*_Packages
        echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" >"$seed/etc/fstab"
        echo vm >"$seed/etc/hostname"
        # Only the local repository: the machine has no network.
        : >"$seed/etc/apt/sources.list"
        printf '%s\n' "$vm_unit" >"$seed/etc/systemd/system/vm-check.service"
        ln -s /etc/systemd/system/vm-check.service \
                "$seed/etc/systemd/system/multi-user.target.wants/vm-check.service"
        # No login prompts on the console the test writes to.
        ln -sf /dev/null "$seed/etc/systemd/system/serial-getty@.service"
        ln -sf /dev/null "$seed/etc/systemd/system/getty@.service"
        ln -sf /dev/null "$seed/etc/systemd/system/apt-daily.timer"
        ln -sf /dev/null "$seed/etc/systemd/system/apt-daily-upgrade.timer"
        mkdir -p "$image.tmp"
        cp "$seed"/boot/vmlinuz-* "$image.tmp/vmlinuz" && cp "$seed"/boot/initrd.img-* "$image.tmp/initrd" || exit 99
        if ! mkfs.ext4 -q -F -L root -d "$seed" "$image.tmp/root.img" 4G >"$T/mkfs.log" 2>&1; then
                echo "FAIL: mkfs.ext4 -d failed:"
                cat "$T/mkfs.log"
                exit 1
        fi
        rm -rf "$seed" "$image"
        mv "$image.tmp" "$image" || exit 99
fi
say "image: $image"

# --- the package, two versions of it ------------------------------------------------
share="$T/share"
mkdir -p "$share/repo" "$share/wheels" "$share/uv-index/uv"
if [ -z "$deb" ]; then
        src="$T/src/mcp-python-sandbox"
        mkdir -p "$src"
        (cd "$top" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$src") || exit 99
        say "building the package"
        # The unit suites run in make check; here only the package is wanted.
        if ! (cd "$src" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES -u TESTS \
                DEB_BUILD_OPTIONS="nocheck parallel=2" dpkg-buildpackage -us -uc -b) >"$T/build.log" 2>&1; then
                echo "FAIL: dpkg-buildpackage failed:"
                tail -50 "$T/build.log"
                exit 1
        fi
        deb=$(ls "$T"/src/mcp-python-sandbox_*.deb | head -1)
fi
say "package: $deb"
cp "$deb" "$share/repo/" || exit 99
# The same package with a higher version: the upgrade, and back again.
version=$(dpkg-deb -f "$deb" Version)
dpkg-deb -R "$deb" "$T/next" || exit 99
sed -i "s/^Version: .*/Version: $version+next1/" "$T/next/DEBIAN/control"
dpkg-deb -b "$T/next" "$share/repo/mcp-python-sandbox_${version}+next1_amd64.deb" >/dev/null || exit 99
(cd "$share/repo" && dpkg-scanpackages -m . >Packages 2>/dev/null) || exit 99
echo "$version" >"$share/version"

# --- wheels: uv, and a dependency for the scripts -------------------------------------
uvwheels="$cache/uv-$UV_VERSION"
if ! ls "$uvwheels"/uv-*.whl >/dev/null 2>&1; then
        say "downloading uv $UV_VERSION's wheel (once; cached in $uvwheels)"
        mkdir -p "$uvwheels.tmp"
        python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
                --platform manylinux_2_17_x86_64 --python-version 3.11 -d "$uvwheels.tmp" "uv==$UV_VERSION" \
                >"$T/pip.log" 2>&1 || { cat "$T/pip.log"; skip "uv $UV_VERSION's wheel cannot be downloaded"; }
        mv "$uvwheels.tmp" "$uvwheels" || exit 99
fi
cp "$uvwheels"/uv-*.whl "$share/uv-index/uv/" || exit 99
# pip's --index-url takes a local directory holding an index.html per project.
(cd "$share/uv-index/uv" && for w in *.whl; do echo "<a href=\"$w\">$w</a>"; done >index.html)
PYTHONPATH="$top/tests/integration" python3 -c '
import sys, wheels
wheels.build_wheel(sys.argv[1], "mcpvm-dep", "1.2.3", module_source="def answer():\n    return 42\n")
' "$share/wheels" || exit 99
cp "$here/vm-test.sh" "$here/vm-client.py" "$share/" || exit 99
mkfs.ext4 -q -F -L check -d "$share" "$T/share.img" 512M >"$T/mkfs-share.log" 2>&1 || {
        cat "$T/mkfs-share.log"
        exit 99
}

# --- the machine --------------------------------------------------------------------
qemu-img create -q -f qcow2 -F raw -b "$image/root.img" "$T/root.qcow2" || exit 99
console="$T/console.log"
boot() {        # ACCEL CPUS
        : >"$console"
        cpus=$2
        qemu-system-x86_64 -accel "$1" -m 2048 -smp "$cpus" -no-reboot -display none -monitor none \
                -serial "file:$console" -nic none \
                -kernel "$image/vmlinuz" -initrd "$image/initrd" \
                -append "root=/dev/vda rw console=ttyS0 loglevel=6 systemd.show_status=0 panic=-1" \
                -drive "file=$T/root.qcow2,format=qcow2,if=virtio" \
                -drive "file=$T/share.img,format=raw,if=virtio,readonly=on" \
                >"$T/qemu.log" 2>&1 &
        qemu_pid=$!
}
# Whether the machine got as far as PATTERN on its console: KVM here may be
# of a kind a stock kernel cannot boot under, which shows as not even the
# kernel's first line.
started() {     # SECONDS PATTERN
        i=0
        while [ "$i" -lt "$1" ]; do
                grep -q "$2" "$console" 2>/dev/null && return 0
                kill -0 "$qemu_pid" 2>/dev/null || return 1
                sleep 1
                i=$((i + 1))
        done
        return 1
}
accel=${MCP_SANDBOX_VM_ACCEL:-}
if [ -z "$accel" ] && [ -w /dev/kvm ]; then
        boot kvm 2
        if started 30 "Linux version" && started 300 "^vm-test: start"; then
                accel=kvm
        else
                say "KVM did not boot the machine (qemu: $(tail -1 "$T/qemu.log")); falling back to TCG"
                kill "$qemu_pid" 2>/dev/null
                wait "$qemu_pid" 2>/dev/null
                qemu-img create -q -f qcow2 -F raw -b "$image/root.img" "$T/root.qcow2" || exit 99
        fi
fi
if [ "$accel" != kvm ]; then
        accel=tcg
        # One CPU: under TCG on a busy host a second one starves, and the
        # guest's kernel stalls waiting for it.
        boot tcg 1
        started 600 "^vm-test: start" || {
                echo "FAIL: the machine did not start the test (qemu: $(tail -3 "$T/qemu.log")); its console:"
                tail -40 "$console"
                exit 1
        }
fi
say "the machine runs the test (accel=$accel)"

# Its lines as they come, until it powers off.
shown=0
elapsed=0
while kill -0 "$qemu_pid" 2>/dev/null; do
        if [ "$elapsed" -ge "$timeout" ]; then
                echo "FAIL: the test did not end within ${timeout}s"
                break
        fi
        n=$(grep -c "^vm-test: " "$console")
        if [ "$n" -gt "$shown" ]; then
                grep "^vm-test: " "$console" | sed -n "$((shown + 1)),${n}p"
                shown=$n
        fi
        sleep 2
        elapsed=$((elapsed + 2))
done
kill "$qemu_pid" 2>/dev/null
wait "$qemu_pid" 2>/dev/null
qemu_pid=
grep "^vm-test: " "$console" | sed -n "$((shown + 1)),\$p"
# The whole console of the last run, for what the lines above do not say.
cp "$console" "$cache/console.log" && say "the machine's console: $cache/console.log"
pass=$(grep -c "^vm-test: PASS" "$console")
failed=$(grep -c "^vm-test: FAIL" "$console")
say "$pass passed, $failed failed (accel=$accel)"
if ! grep -q "^vm-test: DONE" "$console"; then
        echo "FAIL: the test did not finish; the end of the console:"
        tail -40 "$console"
        exit 1
fi
[ "$failed" -eq 0 ] && [ "$pass" -gt 0 ] || exit 1
exit 0
