#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Who is calling: the daemon asks the kernel who the peer is (SO_PEERCRED).

allowed-users / allowed-groups disconnect anyone not listed, on top of the
socket's mode; max-runs-per-user caps the scripts one uid runs at once, while
other users' runs go ahead. (Each run's audit record: test-runlog.py.)"""

import json
import os
import signal
import subprocess
import uuid

from mcptest import scratch
from mcptest import NOBODY, Daemon, check, eq, main, need_uv, processes_with, test, wait_until


def as_nobody(d):
    """One initialize as uid 65534, talking through the shim."""
    argv = d.nobody_argv()
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "nobody", "version": "1"}}}
    p = subprocess.run(argv, input=json.dumps(hello) + "\n", capture_output=True, text=True, timeout=30)
    return p


@test
def a_user_not_listed_is_disconnected():
    with Daemon(args=["--allowed-users=root"]) as d:
        p = as_nobody(d)
        eq(p.stdout, "", "no reply for a refused peer")
        check("Refusing a connection from uid 65534" in d.log(), d.log())
        # The listed user is served.
        c = d.client()
        eq(c.initialize()["protocolVersion"], "2025-11-25", "root is allowed")
        eq(c.close(), 0)


@test
def a_member_of_a_listed_group_is_served():
    with Daemon(args=["--allowed-users=root", f"--allowed-groups={NOBODY}"]) as d:
        p = as_nobody(d)
        reply = json.loads(p.stdout.splitlines()[0]) if p.stdout else {}
        eq(reply.get("result", {}).get("protocolVersion"), "2025-11-25", f"nobody via its group: {p.stderr}")
        check("Refusing" not in d.log(), d.log())


@test
def empty_lists_let_in_anyone_the_socket_lets_in():
    with Daemon() as d:
        p = as_nobody(d)
        check(p.stdout and "protocolVersion" in p.stdout, f"served: {p.stdout} {p.stderr}")


# --- max-runs-per-user --------------------------------------------------------


def nss_modules(pid):
    """The NSS modules (libnss_*) mapped in process pid."""
    with open(f"/proc/{pid}/maps") as f:
        return sorted({line.split()[-1] for line in f if "/libnss_" in line})


@test
def account_lookups_leave_no_nss_module_in_the_daemon():
    """Names in allowed-users and allowed-groups are looked up (at start and at each reload), and so is every
    account of a root daemon's sandbox-uid-range: in a child each time, so the NSS modules those load
    (libnss_systemd and the libm it links, some 600 KiB for good) stay out of the daemon."""
    here = subprocess.run(["python3", "-c", "import pwd, grp; pwd.getpwall(); grp.getgrall(); "
                           "print(''.join(l for l in open('/proc/self/maps') if '/libnss_' in l))"],
                          capture_output=True, text=True, timeout=30).stdout
    if not here.strip():
        print("# NSS here loads no module of its own (nsswitch.conf: files only): nothing to keep out", flush=True)
    conf = os.path.join(scratch("mcptest-access-"), "d.conf")
    with open(conf, "w") as f:
        f.write("[Daemon]\nallowed-users = root\n")
    with Daemon(args=[f"--config={conf}"]) as d:
        eq(d.client().initialize()["protocolVersion"], "2025-11-25", "root, listed by name, is served")
        eq(as_nobody(d).stdout, "", "uid 65534, not listed, is refused")
        # A reload looks the names up again: now nogroup (uid 65534's group) is listed, by name.
        with open(conf, "w") as f:
            f.write("[Daemon]\nallowed-users = root\nallowed-groups = nogroup\n")
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "Reloaded: " in d.log(), 10, "the reload")
        p = as_nobody(d)
        check('"protocolVersion"' in p.stdout, f"uid 65534 of nogroup, listed by name after the reload: {p.stdout!r}")
        eq(nss_modules(d.proc.pid), [], "NSS modules mapped in the daemon")


def sleeper(mark):
    """A script that becomes a process whose command line carries mark, and sleeps."""
    return ("import os, sys\n"
            f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', {mark!r}])\n")


def send_run(c, script, token=None):
    rid = c.new_id()
    params = {"name": "execute_python", "arguments": {"script": script}}
    if token:
        params["_meta"] = {"progressToken": token}
    c.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
    return rid


def runs_state(c):
    return c.call_tool("check_environment", {}, timeout=60)["structuredContent"]["runs"]


@test
def a_user_at_max_runs_per_user_waits_while_others_run():
    need_uv()
    conf = os.path.join(scratch("mcptest-access-conf-"), "d.conf")
    with open(conf, "w") as f:
        f.write("[Daemon]\nmax-runs = 3\nmax-runs-per-user = 1\n")
    with Daemon(args=[f"--config={conf}"]) as d:
        c = d.client()
        c.initialize()
        first, second = ("mcpt-peruser-" + uuid.uuid4().hex for _ in range(2))
        r1 = send_run(c, sleeper(first))
        wait_until(lambda: processes_with(first), 30, "the user's first run")
        r2 = send_run(c, sleeper(second), token="second")

        # The second waits, and its progress says why: the user's cap, not the server's.
        def waiting_message():
            try:
                c.wait_for(-1, timeout=0.2)
            except TimeoutError:
                pass
            return next((n["params"]["message"] for n in c.notifications
                         if n["method"] == "notifications/progress" and n["params"].get("progressToken") == "second"
                         and "queued" in n["params"].get("message", "")), None)
        msg = wait_until(waiting_message, 10, "the waiting run's progress")
        check("1 of your scripts are running, the most one user may run at once" in msg, msg)
        check(not processes_with(second), "the second run of the same user started beside the first")

        # Another user's run, sent later, goes ahead of it.
        n = d.nobody_client()
        r = n.call_tool("execute_python", {"script": "print('not held up')"}, timeout=60)
        check(not r.get("isError") and "not held up" in n.text(r), n.text(r))
        check(not processes_with(second), "the waiting run started")
        st = runs_state(n)
        eq((st["running"], st["queued"], st["yours_running"], st["max_running_per_user"]), (1, 1, 0, 1),
           "check_environment for the other user: running, queued, yours, the cap")
        n.close()

        # Raising the cap with a reload lets the waiting run start at once.
        with open(conf, "w") as f:
            f.write("[Daemon]\nmax-runs = 3\nmax-runs-per-user = 2\n")
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: processes_with(second), 15, "the waiting run after raising max-runs-per-user")
        check(processes_with(first), "the first run is still running")
        for rid in (r1, r2):
            c.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
        wait_until(lambda: not processes_with(first) and not processes_with(second), 10, "the runs to end")
        c.close()


@test
def with_max_runs_per_user_at_max_runs_a_users_runs_go_side_by_side():
    # The control for the test above: the same two runs do run at once when the cap allows them.
    need_uv()
    with Daemon(args=["--max-runs=3", "--max-runs-per-user=3"]) as d:
        c = d.client()
        c.initialize()
        marks = ["mcpt-peruser-" + uuid.uuid4().hex for _ in range(2)]
        rids = [send_run(c, sleeper(m)) for m in marks]
        wait_until(lambda: all(processes_with(m) for m in marks), 30, "both runs at once")
        for rid in rids:
            c.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
        wait_until(lambda: not any(processes_with(m) for m in marks), 10, "the runs to end")
        c.close()


@test
def by_default_one_user_takes_half_of_the_slots():
    """Without max-runs-per-user a user runs half of max-runs at once: with four slots, A's third run waits
    while two of A's run, and another user's call, sent after it, runs at once (with the cap at max-runs, as it
    was, A's three took three slots and the other user's call found one; a fourth would have queued it)."""
    need_uv()
    with Daemon(args=["--max-runs=4"]) as d:
        c = d.client()
        c.initialize()
        eq(runs_state(c)["max_running_per_user"], 2, "the default cap of one user with max-runs=4")
        marks = ["mcpt-peruser-" + uuid.uuid4().hex for _ in range(4)]
        rids = [send_run(c, sleeper(m)) for m in marks]
        wait_until(lambda: sum(1 for m in marks if processes_with(m)) == 2, 30, "two of the user's runs")
        wait_until(lambda: runs_state(c)["queued"] == 2, 10, "the user's other two runs waiting")
        eq(sum(1 for m in marks if processes_with(m)), 2, "the user's runs at once")
        n = d.nobody_client()
        r = n.call_tool("execute_python", {"script": "print('not held up')"}, timeout=60)
        check(not r.get("isError") and "not held up" in n.text(r), n.text(r))
        eq(sum(1 for m in marks if processes_with(m)), 2, "the user's runs at once, after the other user's")
        n.close()
        for rid in rids:
            c.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
        wait_until(lambda: not any(processes_with(m) for m in marks), 10, "the runs to end")
        c.close()


@test
def one_user_fills_only_their_share_of_the_queue():
    need_uv()
    # Two slots, one per user: a user's share of the three places in the queue is two.
    with Daemon(args=["--max-runs=2", "--max-runs-per-user=1", "--max-queue=3"]) as d:
        c = d.client()
        c.initialize()
        marks = ["mcpt-peruser-" + uuid.uuid4().hex for _ in range(5)]
        sent = [(c, send_run(c, sleeper(marks[0])))]
        wait_until(lambda: processes_with(marks[0]), 30, "the first run")
        sent += [(c, send_run(c, sleeper(m))) for m in marks[1:3]]
        wait_until(lambda: runs_state(c)["queued"] == 2, 10, "two runs of the user waiting")
        r = c.call_tool("execute_python", {"script": "print('fourth')"}, timeout=60)
        check(r.get("isError"), f"a fourth run beyond the user's share: {c.text(r)}")
        eq(r["structuredContent"]["error"],
           "you have 1 script running and 2 waiting, the most one user may have (max-runs-per-user). "
           "Try again when one of them has finished", "the error")

        # Another user still runs, and still finds a place in the queue.
        n = d.nobody_client()
        sent.append((n, send_run(n, sleeper(marks[3]))))
        wait_until(lambda: processes_with(marks[3]), 30, "the other user's run")
        sent.append((n, send_run(n, sleeper(marks[4]))))
        wait_until(lambda: runs_state(c)["queued"] == 3, 10, "the other user's second run waiting")
        st = runs_state(n)
        eq((st["yours_running"], st["yours_queued"], st["max_queued_per_user"]), (1, 1, 2), "the other user's runs")
        # Now the queue is full for everybody.
        r = n.call_tool("execute_python", {"script": "print('no room')"}, timeout=60)
        check(r.get("isError"), f"a run with the queue full: {n.text(r)}")
        check("2 scripts are running (1 of them yours) and 3 waiting" in r["structuredContent"]["error"],
              r["structuredContent"]["error"])
        for client, rid in reversed(sent):
            client.notify("notifications/cancelled", {"requestId": rid, "reason": "test"})
        wait_until(lambda: not any(processes_with(m) for m in marks), 10, "the runs to end")
        n.close()
        c.close()


if __name__ == "__main__":
    main()
