#!/bin/sh
# SPDX-License-Identifier: MIT
#
# What ships beside the binaries: the systemd units, the sysusers.d and
# tmpfiles.d fragments, the configuration file and the man pages, as generated
# in the build directory.
#
#  1. the units: none of the settings that break unprivileged bwrap; the
#     sockets and users the design names; no unsubstituted @path@ left
#  2. the daemon accepts the arguments of ExecStart=
#  3. systemd-analyze verify (system and user units) without a word about
#     them, and systemd-analyze security --offline, with the score printed
#  4. the sysusers.d and tmpfiles.d fragments apply to an empty root
#  5. the configuration file: every setting of the daemon, commented out at
#     its default (--check-config prints the same as with no file at all),
#     and still the same with every setting uncommented
#  6. the man pages: mandoc -Tlint -W warning clean; every option and setting
#     documented
#  7. the daemon run under the service's hardening, emulated as far as this
#     machine allows (no systemd as PID 1 needed): read-only system, private
#     /tmp and /dev, a non-root user without capabilities, no_new_privs, the
#     unit's system call and address family filters, its umask; a script must
#     run in the sandbox
#
# A part whose tools are missing is skipped and says why; the test as a whole
# exits 77 only when every part was skipped. With MCP_SANDBOX_REQUIRE_ALL=1
# (CI) a skipped part fails.
#
# Run by "make check" with DAEMON, SHIM and TOP_SRCDIR set (see
# tests/integration/local.mk); the generated files are found next to DAEMON.

set -u

: "${DAEMON:?DAEMON is not set; run this through make check}"
builddir=$(cd "$(dirname "$DAEMON")" && pwd)
srcdir=${TOP_SRCDIR:-$builddir}
SHIM=${SHIM:-$builddir/mcp-python-sandbox}
PYTHON3=${PYTHON3:-python3}

failed=0
ran=0
skipped=0
daemon_pid=

T=$(mktemp -d "${TMPDIR:-/tmp}/test-units.XXXXXX") || exit 99
# A root daemon's sandboxes run as uids of their own: they pass through here to its cache.
chmod 0711 "$T"
# The emulated service's daemon is not daemon_pid's child for long: setpriv
# changes the user, which clears the parent-death signal bwrap set. Stop it by
# its socket, which is this run's alone.
# shellcheck disable=SC2317 # also called by the trap
stop_service_daemon() {
        [ -n "${svc:-}" ] || return 0
        pkill -TERM -f -- "--listen=$svc/run/mcp.sock" 2>/dev/null || return 0
        i=0
        while pgrep -f -- "--listen=$svc/run/mcp.sock" >/dev/null 2>&1 && [ $i -lt 100 ]; do
                sleep 0.05
                i=$((i + 1))
        done
}

# shellcheck disable=SC2317 # called by the trap
cleanup() {
        if [ -n "$daemon_pid" ]; then
                kill "$daemon_pid" 2>/dev/null
                wait "$daemon_pid" 2>/dev/null
        fi
        stop_service_daemon
        rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 99' INT TERM

fail() {
        echo "FAIL: $*"
        failed=1
}

skip_part() {
        if [ "${MCP_SANDBOX_REQUIRE_ALL:-0}" = 1 ]; then
                fail "$1 would be skipped (MCP_SANDBOX_REQUIRE_ALL=1): $2"
        else
                echo "SKIP: $1: $2"
                skipped=$((skipped + 1))
        fi
}

part() {
        echo "--- $*"
        ran=$((ran + 1))
}

have() {
        command -v "$1" >/dev/null 2>&1
}

system_socket=$builddir/systemd/mcp-python-sandboxd.socket
system_service=$builddir/systemd/mcp-python-sandboxd.service
user_socket=$builddir/systemd/user/mcp-python-sandboxd.socket
user_service=$builddir/systemd/user/mcp-python-sandboxd.service
sysusers=$builddir/systemd/sysusers.d/mcp-python-sandbox.conf
tmpfiles=$builddir/systemd/tmpfiles.d/mcp-python-sandbox.conf
conf=$builddir/conf/mcp-python-sandboxd.conf
man8=$builddir/man/mcp-python-sandboxd.8
man5=$builddir/man/mcp-python-sandboxd.conf.5
man1=$builddir/man/mcp-python-sandbox.1
units="$system_socket $system_service $user_socket $user_service"

for f in $units $sysusers $tmpfiles $conf $man8 $man5 $man1; do
        if [ ! -f "$f" ]; then
                echo "FAIL: $f is missing (not generated?)"
                exit 1
        fi
done

# The value of KEY= in a unit file (the last one wins, as in systemd).
unit_value() {
        sed -n "s/^[[:space:]]*$2=//p" "$1" | tail -n 1
}

# ---------------------------------------------------------------------------
part "1. unit text"

for f in $units $sysusers $tmpfiles $conf $man8 $man5; do
        if grep -n '@[A-Za-z_]*@' "$f"; then
                fail "$f: unsubstituted @...@ above"
        fi
done

for f in "$system_service" "$user_service"; do
        # Settings that break unprivileged bwrap (STYLE.md, "Packaging"), or
        # that are inherited by every script and break JIT compilers.
        if grep -n -E '^[[:space:]]*(RestrictNamespaces|PrivateUsers|ProtectKernelTunables|ProcSubset|MemoryDenyWriteExecute|PrivateNetwork)=' "$f"; then
                fail "$f: a setting above breaks the sandbox"
        fi
        # invisible is shown to work with bwrap under systemd (make
        # check-systemd); noaccess and ptraceable are not.
        if grep -n -E '^[[:space:]]*ProtectProc=(noaccess|ptraceable)' "$f"; then
                fail "$f: ProtectProc= above is not shown to work with bwrap"
        fi
        if grep -n -E '^[[:space:]]*SystemCallFilter=~.*@(mount|privileged|resources|system-service)' "$f"; then
                fail "$f: the system call filter above denies what bwrap or the daemon needs"
        fi
        if grep -n -E '^[[:space:]]*SystemCallFilter=[^~]' "$f"; then
                fail "$f: an allow-list SystemCallFilter= applies to every script too"
        fi
        families=$(unit_value "$f" RestrictAddressFamilies)
        case $families in
        "~"*) fail "$f: RestrictAddressFamilies= is a deny list" ;;
        esac
        for af in AF_UNIX AF_NETLINK AF_INET AF_INET6; do
                case " $families " in
                *" $af "*) ;;
                *) fail "$f: RestrictAddressFamilies= lacks $af (bwrap needs AF_NETLINK, uv AF_INET and AF_INET6)" ;;
                esac
        done
        [ "$(unit_value "$f" Type)" = notify ] || fail "$f: Type= is not notify"
        [ -n "$(unit_value "$f" WatchdogSec)" ] || fail "$f: no WatchdogSec= (the daemon enables the watchdog)"
        [ "$(unit_value "$f" CacheDirectory)" = mcp-python-sandbox ] || fail "$f: CacheDirectory= is not mcp-python-sandbox"
        case $(unit_value "$f" ExecStart) in
        /*/mcp-python-sandboxd | /*/mcp-python-sandboxd" "*) ;;
        *) fail "$f: ExecStart= does not run mcp-python-sandboxd by an absolute path" ;;
        esac
done

[ "$(unit_value "$system_service" User)" = mcp-sandbox ] || fail "system service: User= is not mcp-sandbox"
[ "$(unit_value "$system_service" Group)" = mcp-sandbox ] || fail "system service: Group= is not mcp-sandbox"
[ "$(unit_value "$system_service" NoNewPrivileges)" = yes ] || fail "system service: NoNewPrivileges= is not yes"
[ "$(unit_value "$system_service" ProtectSystem)" = strict ] || fail "system service: ProtectSystem= is not strict"
[ "$(unit_value "$system_service" Delegate)" = yes ] || fail "system service: Delegate= is not yes"
if grep -q -E '^[[:space:]]*(User|Group|DynamicUser)=' "$user_service"; then
        fail "user service: sets User=, Group= or DynamicUser="
fi

case $(unit_value "$system_socket" ListenStream) in
*/mcp-python-sandbox/mcp.sock) ;;
*) fail "system socket: ListenStream= is not .../mcp-python-sandbox/mcp.sock" ;;
esac
[ "$(unit_value "$system_socket" SocketMode)" = 0660 ] || fail "system socket: SocketMode= is not 0660"
[ "$(unit_value "$system_socket" SocketGroup)" = mcp-sandbox ] || fail "system socket: SocketGroup= is not mcp-sandbox"
[ "$(unit_value "$user_socket" ListenStream)" = "%t/mcp-python-sandbox/mcp.sock" ] ||
        fail "user socket: ListenStream= is not %t/mcp-python-sandbox/mcp.sock"
[ "$(unit_value "$user_socket" SocketMode)" = 0600 ] || fail "user socket: SocketMode= is not 0600"

grep -q '^u mcp-sandbox ' "$sysusers" || fail "sysusers.d: no user mcp-sandbox"
grep -q '^g mcp-sandbox ' "$sysusers" || fail "sysusers.d: no group mcp-sandbox"

# ---------------------------------------------------------------------------
part "2. ExecStart= arguments"

for f in "$system_service" "$user_service"; do
        # shellcheck disable=SC2046 # split the arguments as systemd does (none are quoted)
        set -- $(unit_value "$f" ExecStart)
        shift
        if ! out=$("$DAEMON" "$@" --check-config --config=/dev/null 2>&1); then
                fail "$f: the daemon refuses the arguments of ExecStart= ($*): $out"
        fi
done

# ---------------------------------------------------------------------------
# Copies of the units that run the daemon just built, so that ExecStart=
# names a binary that exists.
mkdir -p "$T/units/system" "$T/units/user" "$T/xdg-runtime"
for f in "$system_socket" "$system_service"; do
        sed "s|^ExecStart=[^ ]*|ExecStart=$DAEMON|" "$f" >"$T/units/system/$(basename "$f")"
done
for f in "$user_socket" "$user_service"; do
        sed "s|^ExecStart=[^ ]*|ExecStart=$DAEMON|" "$f" >"$T/units/user/$(basename "$f")"
done

if have systemd-analyze; then
        part "3. systemd-analyze verify and security"
        # Without systemd running, the user manager needs a runtime directory.
        export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$T/xdg-runtime}"
        for scope in system user; do
                flag=
                [ $scope = user ] && flag=--user
                if ! out=$(systemd-analyze verify $flag --man=no \
                        "$T/units/$scope/mcp-python-sandboxd.socket" \
                        "$T/units/$scope/mcp-python-sandboxd.service" 2>&1); then
                        fail "systemd-analyze verify $flag failed: $out"
                elif echo "$out" | grep -q mcp-python-sandbox; then
                        fail "systemd-analyze verify $flag has something to say about our $scope units: $out"
                elif [ -n "$out" ]; then
                        echo "systemd-analyze verify $flag (not about our units): $out"
                fi

                if out=$(systemd-analyze security $flag --offline=yes --no-pager \
                        "$T/units/$scope/mcp-python-sandboxd.service" 2>&1); then
                        score=$(echo "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
                        echo "systemd-analyze security --offline: $scope service exposure $score"
                        # Offline, a user unit is judged as if it ran as root;
                        # only the system unit's list says something.
                        [ $scope = system ] && echo "$out" | grep '✗' | sed 's/^/  /'
                        # A guard against losing hardening by accident; the user
                        # service cannot use mount namespaces and scores worse.
                        limit=4.0
                        [ $scope = user ] && limit=8.0
                        if [ -z "$score" ] || ! awk "BEGIN { exit !($score <= $limit) }"; then
                                fail "$scope service: exposure ${score:-unknown} is above $limit"
                        fi
                else
                        echo "systemd-analyze security --offline not available here: $out"
                fi
        done
else
        skip_part "3. systemd-analyze" "systemd-analyze is not installed"
fi

# ---------------------------------------------------------------------------
if have systemd-sysusers; then
        part "4. sysusers.d and tmpfiles.d"
        root=$T/root
        mkdir -p "$root/etc" "$root/var/cache"
        if ! out=$(systemd-sysusers --root="$root" - <"$sysusers" 2>&1); then
                fail "systemd-sysusers: $out"
        else
                grep -q '^mcp-sandbox:x:[0-9]*:[0-9]*:MCP Python sandbox:/var/cache/mcp-python-sandbox:' "$root/etc/passwd" ||
                        fail "systemd-sysusers did not create the user mcp-sandbox: $(cat "$root/etc/passwd")"
                grep -q '^mcp-sandbox:x:' "$root/etc/group" ||
                        fail "systemd-sysusers did not create the group mcp-sandbox"
        fi
        if [ "$(id -u)" = 0 ] && have systemd-tmpfiles; then
                if ! out=$(systemd-tmpfiles --root="$root" --create - <"$tmpfiles" 2>&1); then
                        fail "systemd-tmpfiles: $out"
                elif [ ! -d "$root/var/cache/mcp-python-sandbox" ]; then
                        fail "systemd-tmpfiles did not create /var/cache/mcp-python-sandbox"
                fi
        else
                echo "(tmpfiles.d fragment not applied: that takes root, to chown)"
        fi
else
        skip_part "4. sysusers.d" "systemd-sysusers is not installed"
fi

# ---------------------------------------------------------------------------
part "5. configuration file"

# Without systemd's $CACHE_DIRECTORY the default cache-dir is the built-in one.
check_config() {
        env -u CACHE_DIRECTORY "$DAEMON" --check-config --config="$1" 2>&1
}

if ! defaults=$(check_config /dev/null); then
        fail "--check-config --config=/dev/null failed: $defaults"
fi
if ! shipped=$(check_config "$conf"); then
        fail "--check-config rejects the shipped file: $shipped"
elif [ "$shipped" != "$defaults" ]; then
        fail "the shipped file changes settings:"
        printf '%s\n' "$defaults" >"$T/defaults"
        printf '%s\n' "$shipped" >"$T/shipped"
        diff -u "$T/defaults" "$T/shipped"
fi

# Every setting is in the file, commented out, and nothing else is.
printf '%s\n' "$defaults" | sed -n 's/^\([a-z][a-z0-9-]*\) =.*/\1/p' | sort -u >"$T/keys"
sed -n 's/^#\([a-z][a-z0-9-]*\)[[:space:]]*=.*/\1/p' "$conf" | sort -u >"$T/file-keys"
if ! cmp -s "$T/keys" "$T/file-keys"; then
        fail "the shipped file's commented settings differ from the daemon's (- daemon, + file):"
        diff -u "$T/keys" "$T/file-keys"
fi
if grep -n -E '^[[:space:]]*[a-z][a-z0-9-]*[[:space:]]*=' "$conf"; then
        fail "the shipped file sets something (above)"
fi

# Uncommented, the file must still parse and still mean the defaults.
sed 's/^#\([a-z][a-z0-9-]*[[:space:]]*=\)/\1/' "$conf" >"$T/uncommented.conf"
if ! uncommented=$(check_config "$T/uncommented.conf"); then
        fail "the shipped file with every setting uncommented is rejected: $uncommented"
elif [ "$uncommented" != "$defaults" ]; then
        fail "the shipped file's values are not the defaults:"
        printf '%s\n' "$defaults" >"$T/defaults"
        printf '%s\n' "$uncommented" >"$T/uncommented"
        diff -u "$T/defaults" "$T/uncommented"
fi

# ---------------------------------------------------------------------------
if have mandoc; then
        part "6. man pages"
        for page in "$man1" "$man8" "$man5"; do
                if ! out=$(mandoc -Tlint -W warning "$page" 2>&1) || [ -n "$out" ]; then
                        fail "mandoc -Tlint -W warning $page: $out"
                fi
        done
else
        skip_part "6. mandoc -Tlint" "mandoc is not installed"
        part "6. man pages (content only)"
fi
# The pages name the paths of this build, whatever its prefix: no placeholder left, and the daemon the shim
# falls back to is the one mcp-python-sandbox(1) names.
for page in "$man1" "$man8" "$man5"; do
        if grep -n '@[a-zA-Z_]*@' "$page" >"$T/placeholders"; then
                fail "$page keeps placeholders: $(cat "$T/placeholders")"
        fi
done
fallback=$("$SHIM" --help | sed -n 's/^When neither 2 nor 3 answers, \(.*\) --stdio$/\1/p')
if [ -z "$fallback" ] || ! grep -qF "$fallback --stdio" "$man1"; then
        fail "mcp-python-sandbox(1) does not name the daemon the shim runs (${fallback:-none found in --help})"
fi
while read -r key; do
        grep -q "^\.It Cm $key Ns = Ns" "$man5" || fail "mcp-python-sandboxd.conf(5) does not describe $key"
done <"$T/keys"
"$DAEMON" --help | sed -n 's/^ *\(-h \)\{0,1\}--\([a-z][a-z0-9-]*\).*/\2/p' | sort -u >"$T/options"
[ -s "$T/options" ] || fail "no options found in --help"
while read -r opt; do
        grep -q -E "^\.It (Fl h , )?Fl -$opt( |$)" "$man8" || fail "mcp-python-sandboxd(8) does not describe --$opt"
done <"$T/options"

# ---------------------------------------------------------------------------
# 7. The daemon under the service's hardening.

# The script a client sends, through the real shim; prints the shim's output.
# One execute_python through the shim; prints what the shim wrote. stdin stays open until the reply is in, as a
# client's does: its end ends the session and stops the run.
run_script() {
        timeout 120 python3 -c '
import json, subprocess, sys
p = subprocess.Popen([sys.argv[1], "--socket=" + sys.argv[2], "--no-fallback"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE)
for m in ({"jsonrpc": "2.0", "id": 1, "method": "initialize",
           "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                      "clientInfo": {"name": "test-units", "version": "1"}}},
          {"jsonrpc": "2.0", "method": "notifications/initialized"},
          {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
           "params": {"name": "execute_python", "arguments": {"script": "import os\nprint(6 * 7, os.getuid())"}}}):
    try:
        p.stdin.write(json.dumps(m).encode() + b"\n")
        p.stdin.flush()
    except BrokenPipeError:
        break
for line in p.stdout:
    sys.stdout.buffer.write(line)
    if json.loads(line).get("id") == 2:
        break
try:
    p.stdin.close()
except BrokenPipeError:
    pass
sys.exit(p.wait())
' "$SHIM" "$1" 2>>"$T/shim.log"
}

wait_for_socket() {
        i=0
        while [ ! -S "$1" ] && [ $i -lt 100 ]; do
                kill -0 "$daemon_pid" 2>/dev/null || return 1
                sleep 0.1
                i=$((i + 1))
        done
        [ -S "$1" ]
}

# A path and its parents but /, one a line.
ancestors() {
        p=$1
        while [ -n "$p" ] && [ "$p" != / ] && [ "$p" != . ]; do
                echo "$p"
                p=$(dirname "$p")
        done
}

stop_daemon() {
        kill "$daemon_pid" 2>/dev/null
        wait "$daemon_pid" 2>/dev/null
        daemon_pid=
        stop_service_daemon
}

# The unit's system call and address family filters, its no_new_privs, as
# systemd would install them (seccomp, through libseccomp), then exec.
cat >"$T/filter.py" <<'EOF'
import ctypes
import ctypes.util
import errno
import os
import subprocess
import sys

unit, argv = sys.argv[1], sys.argv[2:]
settings = {}
with open(unit) as f:
    for line in f:
        line = line.strip()
        if "=" in line and not line.startswith(("#", ";", "[")):
            k, v = line.split("=", 1)
            settings[k] = v

lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
lib.seccomp_init.restype = ctypes.c_void_p
lib.seccomp_init.argtypes = [ctypes.c_uint32]
lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
lib.seccomp_load.argtypes = [ctypes.c_void_p]


class Cmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]


lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                       ctypes.c_uint, ctypes.POINTER(Cmp)]
ALLOW, EQ = 0x7FFF0000, 4


def act_errno(e):
    return 0x00050000 | (e & 0xFFFF)


def rule(ctx, action, name, *cmps):
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    if nr == -1:      # unknown to libseccomp
        return
    arr = (Cmp * max(len(cmps), 1))(*[Cmp(*c) for c in cmps])
    lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr)   # other ABIs' calls: ignored


def expand(group, seen):
    out = subprocess.run(["systemd-analyze", "syscall-filter", group],
                         capture_output=True, text=True, check=True).stdout
    names = []
    for line in out.splitlines()[1:]:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@"):
            if line not in seen:
                seen.add(line)
                names += expand(line, seen)
        else:
            names.append(line)
    return names


ctx = lib.seccomp_init(ALLOW)
err = getattr(errno, settings.get("SystemCallErrorNumber", "EPERM"), errno.EPERM)
denied = []
flt = settings.get("SystemCallFilter", "")
if flt.startswith("~"):
    for item in flt[1:].split():
        denied += expand(item, {item}) if item.startswith("@") else [item]
if settings.get("ProtectHostname") == "yes":
    denied += ["sethostname", "setdomainname"]
for name in sorted(set(denied)):
    rule(ctx, act_errno(err), name)
if settings.get("RestrictRealtime") == "yes":
    for policy in (1, 2, 6):          # SCHED_FIFO, SCHED_RR, SCHED_DEADLINE
        rule(ctx, act_errno(errno.EPERM), "sched_setscheduler", (1, EQ, policy, 0))
allowed = settings.get("RestrictAddressFamilies", "").split()
if allowed and not allowed[0].startswith("~"):
    import socket
    keep = {int(getattr(socket, a)) for a in allowed if hasattr(socket, a)}
    for af in range(0, 46):           # AF_MAX on Linux
        if af not in keep:
            rule(ctx, act_errno(errno.EAFNOSUPPORT), "socket", (0, EQ, af, 0))
if lib.seccomp_load(ctx) != 0:        # also sets no_new_privs
    sys.exit("seccomp_load failed")
print(f"filter: {len(set(denied))} system calls denied, address families {' '.join(allowed)}",
      file=sys.stderr, flush=True)
os.execvp(argv[0], argv)
EOF

if ! have bwrap; then
        skip_part "7. hardened run" "bwrap is not installed"
elif ! have timeout; then
        skip_part "7. hardened run" "timeout(1) is not available"
else
        part "7. the daemon under the service's hardening"
        # shellcheck disable=SC2046
        set -- $(unit_value "$system_service" ExecStart)
        shift
        exec_args="$*"

        # First without any hardening: if the sandbox does not work on this
        # machine at all, hardening cannot be judged.
        mkdir -p "$T/plain/cache"
        # shellcheck disable=SC2086 # the arguments of ExecStart=, split as systemd does
        "$DAEMON" $exec_args --listen="$T/plain/mcp.sock" --cache-dir="$T/plain/cache" \
                --log-level=debug 2>"$T/plain.log" &
        daemon_pid=$!
        plain_ok=no
        if wait_for_socket "$T/plain/mcp.sock" && run_script "$T/plain/mcp.sock" >"$T/plain.out" &&
                grep -q '"stdout":"42 65534\\n"' "$T/plain.out"; then
                plain_ok=yes
        fi
        stop_daemon

        if [ $plain_ok = no ]; then
                skip_part "7. hardened run" "the sandbox does not work here even without hardening: $(grep -m1 -i 'sandbox' "$T/plain.log")"
        else
                # The service's user and mounts need root; as anyone else only the
                # filters and no_new_privs can be applied.
                svc=$T/svc
                mkdir -p "$svc/cache" "$svc/run"
                chmod 755 "$T" "$svc"
                wrap=
                if [ "$(id -u)" = 0 ] && have setpriv; then
                        uid=65500
                        chown "$uid:$uid" "$svc/cache" "$svc/run"
                        # ProtectSystem=strict, ProtectHome=read-only: all read-only
                        # but the API file systems and the cache (CacheDirectory=);
                        # PrivateDevices=, PrivateTmp=, PrivateIPC=, ProtectHostname=;
                        # then User=, CapabilityBoundingSet=, NoNewPrivileges=.
                        # Under the private /tmp, the directories leading to the
                        # build and the cache must stay searchable.
                        parents=$({ ancestors "$builddir"; ancestors "$svc"; } | sort -u |
                                sed -n 's|^\(/tmp/.*\)$|--perms 0755 --dir \1|p; s|^\(/var/tmp/.*\)$|--perms 0755 --dir \1|p')
                        wrap="bwrap --ro-bind / / --bind /proc /proc --bind /sys /sys --dev /dev
                                --tmpfs /tmp --tmpfs /var/tmp $parents
                                --ro-bind $builddir $builddir --bind $svc $svc
                                --unshare-ipc --unshare-uts --die-with-parent --
                                setpriv --reuid=$uid --regid=$uid --clear-groups --no-new-privs
                                --bounding-set=-all --inh-caps=-all --"
                        if ! $wrap test -x "$DAEMON"; then
                                wrap=
                                echo "(the service user cannot reach $DAEMON; filters only)"
                                chown "$(id -u):$(id -g)" "$svc/cache" "$svc/run"
                        fi
                fi
                [ -n "$wrap" ] || echo "(not root: user, capabilities and mounts not emulated; filters only)"

                filter=
                if "$PYTHON3" -c 'import ctypes, ctypes.util; ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2")' 2>/dev/null; then
                        filter="$PYTHON3 $T/filter.py $system_service"
                else
                        echo "(libseccomp cannot be loaded from $PYTHON3: system call filters not emulated)"
                fi

                umask_value=$(unit_value "$system_service" UMask)
                # The filter is installed before the user changes, as systemd
                # does; setpriv needs nothing the unit denies. UMask= applies
                # to the daemon only, not to the emulation's own mounts.
                # shellcheck disable=SC2016,SC2086 # $0 and $@ are the inner shell's; commands split on purpose
                $filter $wrap sh -c 'umask "$0" && exec "$@"' "${umask_value:-0022}" \
                        "$DAEMON" $exec_args --listen="$svc/run/mcp.sock" \
                        --cache-dir="$svc/cache" --log-level=debug 2>"$T/svc.log" &
                daemon_pid=$!
                if ! wait_for_socket "$svc/run/mcp.sock"; then
                        fail "the hardened daemon did not start:"
                        cat "$T/svc.log"
                elif ! run_script "$svc/run/mcp.sock" >"$T/svc.out" ||
                        ! grep -q '"stdout":"42 65534\\n"' "$T/svc.out"; then
                        fail "a script does not run under the service's hardening:"
                        cut -c1-2000 "$T/svc.out"
                        cat "$T/svc.log"
                else
                        grep -m1 '^filter:' "$T/svc.log"
                        grep -q 'Sandbox self-test passed' "$T/svc.log" ||
                                fail "the hardened daemon's log does not say the self-test passed"
                        echo "a script ran in the sandbox under the emulated hardening"
                        # What the daemon creates at the top of the cache stays
                        # closed to others (CacheDirectoryMode= closes the top).
                        if [ -n "$wrap" ] && find "$svc/cache" -mindepth 1 -maxdepth 1 -perm /o+rwx | grep -q .; then
                                fail "the daemon made world-accessible files in the cache despite UMask=$umask_value:"
                                find "$svc/cache" -mindepth 1 -maxdepth 1 -perm /o+rwx | head
                        fi
                fi
                stop_daemon
        fi
fi

# ---------------------------------------------------------------------------
if [ $failed != 0 ]; then
        exit 1
fi
if [ $ran = 0 ]; then
        exit 77
fi
[ $skipped = 0 ] || echo "($skipped part(s) skipped)"
exit 0
