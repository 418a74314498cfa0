#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Inside the virtual machine of tests/systemd/check-systemd.sh, as root under
# systemd (the image's vm-check.service): the Debian package installed with
# apt from the local repository on the check disk, used by real users through
# the packaged shim, upgraded, disabled, removed and purged. One line per
# step, "vm-test: PASS name" or "vm-test: FAIL name: why", then
# "vm-test: DONE". The machine has no network: uv comes from the packaged
# helper fed a local wheel, the scripts' dependencies from a local wheel
# directory with offline = yes.
#
# Usage: vm-test.sh CHECK-DIR

set -u
S=$1
# The kernel's messages (shown while booting) no longer on the console.
dmesg -n 1
echo "vm-test: start"
failed=0
version=$(cat "$S/version")
unit=mcp-python-sandboxd.service
sock=mcp-python-sandboxd.socket
confd=/etc/mcp-python-sandbox/mcp-python-sandboxd.conf.d
unitd=/etc/systemd/system/$unit.d
W=/run/vm-test
mkdir -p "$W"
export DEBIAN_FRONTEND=noninteractive

# step NAME COMMAND...: COMMAND, in a subshell, decides (die ends it); its
# last lines say why, and its lines "note: ..." what it found.
step() {
        name=$1
        shift
        if ("$@") >"$W/out" 2>&1; then
                echo "vm-test: PASS $name"
                sed -n 's/^note: \(.\{0,300\}\).*/vm-test:   \1/p' "$W/out"
        else
                echo "vm-test: FAIL $name: $(tail -c 400 "$W/out" | tr '\n' ' ')"
                failed=$((failed + 1))
        fi
}

die() {
        echo "$*"
        exit 1
}

# call USER TOOL=JSON...: the calls in one session of USER's, through the shim.
call() {
        u=$1
        shift
        runuser -u "$u" -- python3 "$S/vm-client.py" "$@"
}

# field JSON-LINE PYTHON-EXPRESSION: the expression over r (the line, parsed).
field() {
        python3 -c 'import json, sys; r = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

# run USER SCRIPT [LIMITS-JSON [TIMEOUT]]: execute_python; prints its reply.
run() {
        a=$(python3 -c 'import json, sys
a = {"script": sys.argv[1]}
if sys.argv[2]: a["limits"] = json.loads(sys.argv[2])
if sys.argv[3]: a["timeout_seconds"] = int(sys.argv[3])
print(json.dumps(a))' "$2" "${3:-}" "${4:-}")
        call "$1" "execute_python=$a"
}

st() {  # REPLY KEY: a key of the reply's structuredContent
        field "$1" "r['result']['structuredContent'].get('$2')"
}

mainpid() {
        systemctl show -P MainPID "$unit"
}

wait_for() {    # SECONDS COMMAND...: until COMMAND succeeds
        n=$1
        shift
        while [ "$n" -gt 0 ]; do
                "$@" >/dev/null 2>&1 && return 0
                sleep 1
                n=$((n - 1))
        done
        "$@"
}


# --- installation ------------------------------------------------------------------
t_install() {
        echo "deb [trusted=yes] file:$S/repo ./" >/etc/apt/sources.list.d/check.list
        apt-get update -q || return 1
        apt-get install -y -q "mcp-python-sandbox=$version" || return 1
        useradd -m alice && useradd -m bob && useradd -m eve || return 1
        usermod -aG mcp-sandbox alice && usermod -aG mcp-sandbox bob
}
step install t_install

t_socket_only() {
        [ "$(systemctl is-enabled $sock)" = enabled ] || die "the socket is not enabled"
        [ "$(systemctl is-active $sock)" = active ] || die "the socket is not listening"
        [ -S /run/mcp-python-sandbox/mcp.sock ] || die "no socket file"
        stat -c '%a %G' /run/mcp-python-sandbox/mcp.sock | grep -qx '660 mcp-sandbox' || die "socket mode/group"
        [ "$(systemctl is-active $unit)" = inactive ] || die "the service runs before any connection"
        [ "$(systemctl is-enabled $unit)" != enabled ] || die "the service is enabled"
}
step socket-listening-service-inactive t_socket_only

# --- use -----------------------------------------------------------------------------
t_activation() {
        r=$(run alice 'import os; print(6 * 7, os.getuid())') || return 1
        [ "$(st "$r" stdout)" = "42 65534" ] || die "reply: $r"
        [ "$(systemctl is-active $unit)" = active ] || die "the service is not active after a connection"
}
step activation-on-first-connection t_activation

t_denied() {
        # --no-fallback: otherwise the shim serves eve with a daemon of her own (--stdio).
        if runuser -u eve -- python3 "$S/vm-client.py" --no-fallback 'execute_python={"script": "print(1)"}' \
                2>"$W/eve"; then
                die "eve, not in the group, was served"
        fi
        grep -q "mcp-sandbox" "$W/eve" || die "no clear denial: $(cat "$W/eve")"
        echo "note: $(cat "$W/eve")"
}
step group-access-denies-others t_denied

t_hardened() {
        r=$(call alice 'check_environment={}') || return 1
        [ "$(st "$r" sandbox | python3 -c 'import ast, sys; s = ast.literal_eval(sys.stdin.read()); print(s["working"], s["limits"])')" = "True cgroup" ] ||
                die "the sandbox under the unit's hardening: $r"
        r=$(run alice 'import os; print(os.path.exists("/home/alice"), open("/proc/1/cmdline").read()[:20])') || return 1
        field "$r" "r['result']['structuredContent']['stdout']" | grep -q "^False " || die "reply: $r"
}
step bwrap-under-the-units-hardening t_hardened

t_uv() {
        mcp-python-sandbox-install-uv --index-url "file://$S/uv-index" || return 1
        cat >"$confd/60-vm-test.conf" <<EOC
[Daemon]
find-links = $S/wheels
offline = yes
# Two runs at once on a machine of one CPU (finding 1 takes two).
max-runs = 2
# Findings 1 and 2 are about persistent sandboxes, which are not offered by default.
persistent-sandboxes = yes
EOC
        systemctl try-restart $unit || return 1
        r=$(run alice '# /// script
# dependencies = ["mcpvm-dep==1.2.3"]
# ///
import mcpvm_dep
print(mcpvm_dep.answer())') || return 1
        [ "$(st "$r" stdout)" = 42 ] || die "reply: $r"
}
step uv-from-the-helper-and-a-local-wheel t_uv

t_membomb() {
        r=$(run alice 'keep = []
for i in range(64):
    keep.append(b"x" * (16 << 20))' '{"memory_mb": 128}') || return 1
        [ "$(st "$r" limit)" = memory ] || die "reply: $r"
}
step memory-bomb-stops-at-its-limit t_membomb

t_forkbomb() {
        r=$(run alice 'import os, time
n = 0
while n < 5000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print(n)
os._exit(3)' '{"max_processes": 64}') || return 1
        [ "$(st "$r" limit)" = processes ] || die "reply: $r"
        [ "$(st "$r" stdout)" -lt 64 ] || die "forked too many: $r"
}
step fork-bomb-stops-at-its-limit t_forkbomb

# Finding 4: a fork bomb that swallows EAGAIN runs into its timeout, but it hit the process limit.
t_stubborn() {
        r=$(run alice 'import os, time
while True:
    try:
        pid = os.fork()
    except OSError:
        time.sleep(0.01)
        continue
    if pid == 0:
        time.sleep(60)
        os._exit(0)' '{"max_processes": 64}' 5) || return 1
        [ "$(st "$r" timed_out)" = True ] || die "not timed out: $r"
        [ "$(st "$r" limit)" = processes ] || die "reply: $r"
}
step stubborn-fork-bomb-reports-the-process-limit t_stubborn

# Findings 1 and 2: persistent sandboxes have cgroups of their own, and a
# sandbox created while one user's runs hold many processes neither crashes
# the daemon nor fails for want of processes.
HOLD='import os, time
for i in range(130):
    if os.fork() == 0:
        time.sleep(25)
        os._exit(0)
print("holding", flush=True)
time.sleep(20)'
t_sandboxes() {
        pid=$(mainpid)
        nr=$(systemctl show -P NRestarts $unit)
        run alice "$HOLD" '' 60 >"$W/hold1" &
        h1=$!
        run alice "$HOLD" '' 60 >"$W/hold2" &
        h2=$!
        sleep 8
        call bob 'create_sandbox={}' 'execute_code={"sandbox_id": "@SB@", "code": "import os; os.getpid()"}' \
                >"$W/sb" 2>"$W/sb.err"
        [ "$(systemctl is-active $unit)" = active ] || die "the daemon is gone"
        r=$(sed -n 2p "$W/sb")
        [ "$(field "$r" "r['result'].get('isError', False)")" = False ] ||
                die "execute_code: $(cat "$W/sb" "$W/sb.err")"
        wait "$h1" "$h2"
        grep -q holding "$W/hold1" && grep -q holding "$W/hold2" || die "the runs: $(cat "$W/hold1" "$W/hold2")"
        [ "$(mainpid)" = "$pid" ] || die "the daemon was restarted (MainPID $pid, now $(mainpid))"
        [ "$(systemctl show -P NRestarts $unit)" = "$nr" ] || die "the daemon crashed and was restarted"
}
step sandbox-beside-busy-runs-daemon-survives t_sandboxes

t_sandbox_cgroup() {
        # A session that keeps its sandbox while this looks at it.
        runuser -u bob -- python3 "$S/vm-client.py" --sleep-after 30 'create_sandbox={}' \
                'execute_code={"sandbox_id": "@SB@", "code": "1"}' >"$W/sb" 2>"$W/sb.err" &
        c=$!
        wait_for 60 sh -c "[ \$(wc -l <$W/sb) -ge 2 ]" || die "no sandbox: $(cat "$W/sb")"
        cg=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/"$(mainpid)"/cgroup)
        svc=${cg%/supervisor}
        found=0
        for procs in $(find "$svc" -name cgroup.procs); do
                dir=${procs%/cgroup.procs}
                [ "$dir" = "$cg" ] && continue
                [ -n "$(cat "$procs")" ] || continue   # cgroupfs files have no size
                found=$((found + 1))
                max=$(cat "$dir/pids.max")
                [ "$max" != max ] || die "$dir holds processes without a process limit"
        done
        for p in $(cat "$cg/cgroup.procs"); do
                [ "$p" = "$(mainpid)" ] && continue
                comm=$(cat /proc/"$p"/comm 2>/dev/null)
                case $comm in bwrap|python*) die "a sandbox process ($p, $comm) in the daemon's cgroup $cg" ;; esac
        done
        wait "$c"
        [ "$found" -gt 0 ] || die "no cgroup holds the sandbox: $(cat "$W/sb")"
        echo "note: $found cgroup(s) with processes below $svc, each with a pids.max"
}
step persistent-sandbox-has-a-cgroup t_sandbox_cgroup

t_journal() {
        journalctl -q -u $unit -o json --no-pager | grep -q '"MCP_PEER_UID":"'"$(id -u alice)"'"' ||
                die "no audit record with alice's uid"
        journalctl -q -u $unit -o json --no-pager | grep '"MCP_LIMIT":"processes"' | grep -q MCP_VERDICT ||
                die "no audit record of the process limit"
}
step journal-audit-fields t_journal

t_limits() {
        m=$(systemctl show -P MemoryMax $unit)
        t=$(systemctl show -P TasksMax $unit)
        echo "note: MemoryMax=$m TasksMax=$t"
        [ "$m" != infinity ] && [ "$t" != infinity ] || die "no ceiling for the service"
        cg=/sys/fs/cgroup/system.slice/$unit
        [ "$(cat $cg/memory.max)" != max ] && [ "$(cat $cg/pids.max)" != max ] || die "not in the cgroup"
}
step service-memorymax-tasksmax t_limits

# Finding 3: a broken drop-in makes "systemctl reload" fail and say why.
t_reload() {
        pid=$(mainpid)
        systemctl reload $unit || die "reload of a good configuration failed"
        echo 'max-runs = banana' >"$confd/99-broken.conf"
        if systemctl reload $unit; then
                rm -f "$confd/99-broken.conf"
                die "reload with a broken drop-in succeeded"
        fi
        journalctl -q -u $unit --no-pager -n 20 | grep -q banana || die "the journal does not say why"
        rm -f "$confd/99-broken.conf"
        [ "$(mainpid)" = "$pid" ] || die "the daemon was restarted"
        systemctl reload $unit || die "reload after the fix failed"
}
step reload-fails-on-a-broken-drop-in t_reload

# Idle exit, for what follows quickly.
t_idle() {
        mkdir -p "$unitd"
        printf '[Service]\nExecStart=\nExecStart=/usr/sbin/mcp-python-sandboxd --exit-idle-time=5s\n' >"$unitd/50-idle.conf"
        systemctl daemon-reload && systemctl restart $unit || return 1
        run alice 'print(1)' >/dev/null || return 1
        wait_for 40 sh -c "[ \"\$(systemctl is-active $unit)\" = inactive ]" || die "no exit when idle"
        [ "$(systemctl is-active $sock)" = active ] || die "the socket went too"
        r=$(run alice 'print(2)') || return 1
        [ "$(st "$r" stdout)" = 2 ] || die "re-activation: $r"
}
step idle-exit-and-reactivation t_idle

t_security() {
        echo "note: $(systemd-analyze security --no-pager $unit | tail -1)"
        score=$(systemd-analyze security --no-pager $unit | sed -n 's/.*exposure level for .*: \([0-9.]*\).*/\1/p')
        python3 -c 'import sys; sys.exit(not float(sys.argv[1]) < 3.3)' "$score" || die "exposure $score, not below 3.3"
}
step security-exposure-below-3.3 t_security

# Each setting the unit leaves off, with the reason written beside it, is
# shown doing what the reason says.
with_setting() {        # SETTING: the service restarted with it
        printf '[Service]\n%s\n' "$1" >"$unitd/90-setting.conf"
        systemctl daemon-reload
        systemctl restart $unit
}
without_setting() {
        rm -f "$unitd/90-setting.conf"
        systemctl daemon-reload
        systemctl restart $unit
}
sandbox_broken() {      # SETTING
        with_setting "$1"
        r=$(call alice 'check_environment={}')
        w=$(field "$r" "r['result']['structuredContent']['sandbox']['working']")
        e=$(field "$r" "r['result']['structuredContent']['sandbox'].get('error')")
        without_setting
        echo "note: $1: working=$w: $e"
        [ "$w" = False ] || die "bwrap works with $1"
}
for s in RestrictNamespaces=yes SystemCallFilter=~@mount SystemCallFilter=~@privileged \
        ProtectKernelTunables=yes ProcSubset=pid; do
        step "left-off-breaks-bwrap:$s" sandbox_broken "$s"
done
t_private_users() {
        with_setting PrivateUsers=yes
        run alice 'print(1)' >/dev/null
        got=$(journalctl -q -u $unit -o json --no-pager -n 30 | sed -n 's/.*"MCP_PEER_UID":"\([0-9]*\)".*/\1/p' | tail -1)
        without_setting
        echo "note: PrivateUsers=yes: alice ($(id -u alice)) reads as uid $got"
        [ "$got" = 65534 ] || die "alice's uid read as $got under PrivateUsers=yes"
}
step left-off-hides-client-uids:PrivateUsers=yes t_private_users
t_mdwe() {
        jit='import mmap
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
print("mapped")'
        with_setting MemoryDenyWriteExecute=yes
        r=$(run alice "$jit")
        without_setting
        [ "$(st "$r" stdout)" != mapped ] || die "writable executable memory under MemoryDenyWriteExecute=yes"
        echo "note: MemoryDenyWriteExecute=yes: $(st "$r" stderr | tail -1)"
        r=$(run alice "$jit")
        [ "$(st "$r" stdout)" = mapped ] || die "no writable executable memory without it: $r"
}
step left-off-breaks-jits:MemoryDenyWriteExecute=yes t_mdwe
t_cgroups() {
        with_setting ProtectControlGroups=yes
        r=$(call alice 'check_environment={}')
        without_setting
        l=$(field "$r" "r['result']['structuredContent']['sandbox']['limits']")
        echo "note: limits with ProtectControlGroups=yes: $l"
        [ "$l" != cgroup ] || die "runs still get cgroups"
}
step left-off-loses-cgroups:ProtectControlGroups=yes t_cgroups
t_resources() {
        nice='import os
os.nice(1)
os.sched_setaffinity(0, os.sched_getaffinity(0))
print("ran")'
        with_setting SystemCallFilter=~@resources
        r=$(run alice "$nice")
        without_setting
        echo "note: SystemCallFilter=~@resources: $(field "$r" "r['result']['content'][0]['text']" | grep -m1 'Error' | cut -c1-200)"
        [ "$(st "$r" stdout)" != ran ] || die "a script lowered its priority and set its CPUs under SystemCallFilter=~@resources"
        r=$(run alice "$nice")
        [ "$(st "$r" stdout)" = ran ] || die "not without it: $r"
}
step left-off-refuses-nice-and-affinity:SystemCallFilter=~@resources t_resources
# uv reaches the package index from the service: an index on this machine's
# loopback (its pages not to be reused without asking, as PyPI's after ten
# minutes), which PrivateNetwork= (like IPAddressDeny=) takes from the service.
t_private_network() {
        mkdir -p "$W/idx/simple/mcpvm-dep"
        for f in "$S"/wheels/mcpvm_dep-*.whl; do
                cp "$f" "$W/idx/"
                echo "<a href=\"/$(basename "$f")\">$(basename "$f")</a>" >"$W/idx/simple/mcpvm-dep/index.html"
        done
        cat >"$W/index.py" <<'EOP'
import functools, http.server, sys
class Handler(http.server.SimpleHTTPRequestHandler):
    def end_headers(self):
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()
http.server.ThreadingHTTPServer(("127.0.0.1", 8765), functools.partial(Handler, directory=sys.argv[1])).serve_forever()
EOP
        python3 "$W/index.py" "$W/idx" >"$W/http.log" 2>&1 &
        hp=$!
        mv "$confd/60-vm-test.conf" "$W/60-vm-test.conf.saved"
        printf '[Daemon]\nindex-url = http://127.0.0.1:8765/simple/\nmax-runs = 2\npersistent-sandboxes = yes\n' \
                >"$confd/60-vm-test.conf"
        systemctl restart $unit
        wait_for 20 python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8765/simple/mcpvm-dep/")'
        dep='import mcpvm_dep
print(mcpvm_dep.answer())'
        ok=$(run alice "# /// script
# dependencies = [\"mcpvm-dep>=1.0\"]
# ///
$dep")
        with_setting PrivateNetwork=yes
        r=$(run alice "# /// script
# dependencies = [\"mcpvm-dep>=1.1\"]
# ///
$dep")
        without_setting
        kill $hp
        mv "$W/60-vm-test.conf.saved" "$confd/60-vm-test.conf"
        systemctl restart $unit
        [ "$(st "$ok" stdout)" = 42 ] || die "no install from the index on the loopback: $ok"
        echo "note: PrivateNetwork=yes: $(field "$r" "r.get('result', {}).get('content', [{}])[0].get('text', r)" | grep -v -- '^---' | grep -m1 -i 'connect\|index\|error' | cut -c1-200)"
        [ "$(st "$r" stdout)" != 42 ] || die "uv reached the index under PrivateNetwork=yes"
}
step left-off-cuts-uv-from-the-index:PrivateNetwork=yes t_private_network

# Finding 5: an upgrade lets the running daemon finish its work.
t_upgrade() {
        pid=$(mainpid)
        [ -n "$pid" ] && [ "$pid" != 0 ] || { run alice 'print(1)' >/dev/null; pid=$(mainpid); }
        run alice 'import time
time.sleep(25)
print("finished")' '' 120 >"$W/inflight" 2>"$W/inflight.err" &
        c=$!
        sleep 6
        pid=$(mainpid)
        apt-get install -y -q "mcp-python-sandbox=$version+next1" || die "the upgrade failed"
        wait "$c"
        [ "$(st "$(cat "$W/inflight")" stdout)" = finished ] ||
                die "the run in flight: $(cat "$W/inflight" "$W/inflight.err")"
        # It exits when idle; the next connection starts the new daemon.
        wait_for 40 sh -c "[ \"\$(systemctl is-active $unit)\" = inactive ]" || die "the old daemon did not exit"
        r=$(run alice 'print(3)')
        [ "$(st "$r" stdout)" = 3 ] || die "after the upgrade: $r"
        new=$(mainpid)
        [ "$new" != "$pid" ] || die "the old daemon still serves"
        ls -l /proc/"$new"/exe | grep -v deleted || die "the running daemon is not the installed one"
        [ "$(dpkg-query -W -f '${Version}' mcp-python-sandbox)" = "$version+next1" ] || die "not upgraded"
}
step upgrade-keeps-the-run-in-flight t_upgrade

t_user_units() {
        loginctl enable-linger bob || return 1
        uid=$(id -u bob)
        wait_for 30 systemctl is-active "user@$uid.service" || die "no user manager for bob"
        runuser -u bob -- env XDG_RUNTIME_DIR=/run/user/$uid systemctl --user enable --now $sock || return 1
        r=$(runuser -u bob -- env XDG_RUNTIME_DIR=/run/user/$uid python3 "$S/vm-client.py" \
                'execute_python={"script": "print(5)"}') || return 1
        [ "$(st "$r" stdout)" = 5 ] || die "reply: $r"
        runuser -u bob -- env XDG_RUNTIME_DIR=/run/user/$uid systemctl --user is-active $unit ||
                die "the user's own daemon did not serve it"
        runuser -u bob -- env XDG_RUNTIME_DIR=/run/user/$uid systemctl --user disable --now $sock $unit
}
step per-user-units-with-lingering t_user_units

t_reinstall() {
        apt-get install -y -q --reinstall "mcp-python-sandbox=$version+next1" || return 1
        [ "$(systemctl is-enabled $sock)" = enabled ] && [ "$(systemctl is-active $sock)" = active ] ||
                die "the socket after reinstall"
}
step reinstall t_reinstall

t_downgrade() {
        systemctl disable --now $sock
        apt-get install -y -q --allow-downgrades "mcp-python-sandbox=$version" || return 1
        [ "$(systemctl is-enabled $sock)" = disabled ] || die "the administrator's disable was undone"
        [ "$(systemctl is-active $sock)" = inactive ] || die "the disabled socket was started"
        ls /var/cache/mcp-python-sandbox/envs | grep -q . || die "the environments went"
}
step downgrade-keeps-disable-and-cache t_downgrade

t_remove() {
        apt-get remove -y -q mcp-python-sandbox || return 1
        ls /var/cache/mcp-python-sandbox/envs | grep -q . || die "remove took the cache"
        apt-get purge -y -q mcp-python-sandbox || return 1
        [ ! -e /var/cache/mcp-python-sandbox ] || die "purge left the cache"
        id mcp-sandbox || die "the user went"
}
step remove-keeps-the-cache-purge-takes-it t_remove

echo "vm-test: DONE failed=$failed"
[ "$failed" -eq 0 ]
