#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The security tests (and test-execute's output at a timeout) again with the
# daemon as an unprivileged service user, as the packaged units run it (the
# other runs of them use a root daemon, whose sandboxes get uids of their
# own). The user is $MCP_TEST_SERVICE_USER
# (default: mcp-sandbox-test, which scripts/test.sh creates); the tests
# themselves run as root, which they need to look at the host.
#
# Exit 77 (skipped) when not root or the user does not exist.
set -u

user=${MCP_TEST_SERVICE_USER:-mcp-sandbox-test}
if [ "$(id -u)" -ne 0 ]; then
        echo "needs root to start the daemon as $user"
        exit 77
fi
if ! id -u "$user" >/dev/null 2>&1; then
        echo "no user $user: scripts/test.sh creates it (useradd --system $user)"
        exit 77
fi
if [ "$(id -u "$user")" -eq 0 ]; then
        echo "$user is root" >&2
        exit 1
fi

MCP_TEST_DAEMON_USER=$user
export MCP_TEST_DAEMON_USER
status=0
for t in test-escape.py test-package-code.py test-sandbox-failures.py test-sandbox-protocol.py; do
        echo "== $t, the daemon as $user"
        only=
        # A sandbox's own cgroup is a root daemon's here (cgroup v1): that test is for the root run only.
        [ "$t" = test-sandbox-protocol.py ] && only="hellos_in_a_loop_are_refused_and_slow_no_one
                a_64_mib_message_is_refused_and_memory_stays_low without_cgroups_rlimit_cpu_ends_what_a_cell_leaves_running"
        # shellcheck disable=SC2086
        python3 "$TOP_SRCDIR/tests/security/$t" $only
        rc=$?
        [ "$rc" -eq 0 ] || [ "$status" -ne 0 ] || status=$rc
done
# Without cgroups (a service user's daemon has rlimits only), a run's buffered output must still come out at its
# timeout: the SIGWINCH that asks for it reaches the sandbox's processes through /proc.
echo "== test-execute.py (output at a timeout), the daemon as $user"
python3 "$TOP_SRCDIR/tests/integration/test-execute.py" buffered_output_arrives_whole_and_in_order
rc=$?
[ "$rc" -eq 0 ] || [ "$status" -ne 0 ] || status=$rc
exit "$status"
