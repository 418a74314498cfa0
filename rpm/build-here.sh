#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Build the Fedora package on a Debian machine, from the `make dist` tarball:
#   rpm/build-here.sh BUILD_DIR        (BUILD_DIR: a configured build tree)
#
# Debian's rpm knows none of Fedora's build dependencies (--nodeps), and it
# lacks systemd-rpm-macros, so stand-ins for those macros are defined here on
# the command line, never in the spec. On Fedora, use plain `rpmbuild -bb`.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build="${1:?usage: rpm/build-here.sh BUILD_DIR}"
topdir="${RPM_TOPDIR:-$HOME/rpmbuild}"

command -v rpmbuild >/dev/null || { echo "rpmbuild is needed: apt-get install rpm" >&2; exit 1; }
make -C "$build" dist >/dev/null
mkdir -p "$topdir/SOURCES"
cp "$build"/mcp-python-sandbox-*.tar.xz "$topdir/SOURCES/"
cp "$top/systemd/sysusers.conf" "$topdir/SOURCES/mcp-python-sandbox.sysusers"

exec rpmbuild -bb --nodeps --define "_topdir $topdir" \
  --define '_unitdir /usr/lib/systemd/system' \
  --define '_userunitdir /usr/lib/systemd/user' \
  --define '_sysusersdir /usr/lib/sysusers.d' \
  --define '_tmpfilesdir /usr/lib/tmpfiles.d' \
  --define 'systemd_requires Requires(post): systemd\
Requires(preun): systemd\
Requires(postun): systemd' \
  --define 'sysusers_requires_compat Requires(pre): shadow-utils' \
  --define 'sysusers_create_compat() systemd-sysusers --replace=%{_sysusersdir}/%{name}.conf - <<"SYSUSERS" || :\
%(cat %1)\
SYSUSERS' \
  --define 'tmpfiles_create() systemd-tmpfiles --create %* >/dev/null 2>&1 || :' \
  --define 'systemd_post() if [ $1 -eq 1 ]; then systemctl --no-reload preset %* >/dev/null 2>&1 || :; fi' \
  --define 'systemd_preun() if [ $1 -eq 0 ]; then systemctl --no-reload disable --now %* >/dev/null 2>&1 || :; fi' \
  --define 'systemd_postun_with_restart() if [ $1 -ge 1 ]; then systemctl try-restart %* >/dev/null 2>&1 || :; fi' \
  --define 'systemd_user_post() if [ $1 -eq 1 ]; then systemctl --global preset %* >/dev/null 2>&1 || :; fi' \
  --define 'systemd_user_preun() if [ $1 -eq 0 ]; then systemctl --global disable %* >/dev/null 2>&1 || :; fi' \
  --define 'systemd_user_postun_with_restart() :' \
  "$top/rpm/mcp-python-sandbox.spec"
