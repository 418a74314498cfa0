#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""network-allow: a run's only way out is the daemon's proxy, which lets through
the allowlisted hosts and nothing else.

A network namespace of the test's own, joined to the host by a veth pair
(10.251.N.1 here, 10.251.N.2 there), holds an HTTP server that stands in for
the internet: not on loopback, which the proxy never reaches. A second server
listens on the host's 127.0.0.1 and holds a secret that no run may read, even
with localhost or 127.0.0.1 in the allowlist.

Needs root (ip netns), iproute2, $DAEMON, $SHIM, bubblewrap and uv.
"""

import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from mcptest import Daemon, at_exit, check, eq, fd_count, initialized, main, need_uv, newest_python
from mcptest import proc_table, sandbox_daemon, scratch, skip, test, wait_until

MARK = "hello-from-the-test-internet"
SECRET = "host-loopback-secret-4711"
_STATE = {}

SERVER = r"""
import hashlib, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        data = b""
        while len(data) < n:
            data += self.rfile.read(n - len(data))
        body = ("posted %d %s\n" % (len(data), hashlib.sha256(data).hexdigest())).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith("/big/"):
            n = int(self.path[5:])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = bytes(range(256)) * 256
            while n > 0:
                self.wfile.write(chunk[:n])
                n -= min(n, len(chunk))
            return
        body = ("%s %s host=%s\n" % (sys.argv[3], self.path, self.headers.get("Host"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"""


def run(*argv):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_internet():
    """(address of the server in the test's network namespace, its port)."""
    if "net" in _STATE:
        return _STATE["net"]
    if os.geteuid() != 0:
        skip("needs root for a network namespace")
    if not os.path.exists("/usr/sbin/ip") and not os.path.exists("/sbin/ip"):
        skip("iproute2 is not installed")
    pid = os.getpid()
    ns, host_if, ns_if = f"mcpnet{pid}", f"mcpvh{pid % 100000}", f"mcpvn{pid % 100000}"
    n = 1 + pid % 250
    here, there = f"10.251.{n}.1", f"10.251.{n}.2"
    run("ip", "netns", "add", ns)
    at_exit(lambda: subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL))
    run("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
    at_exit(lambda: subprocess.run(["ip", "link", "del", host_if], stderr=subprocess.DEVNULL))
    run("ip", "link", "set", ns_if, "netns", ns)
    run("ip", "addr", "add", f"{here}/30", "dev", host_if)
    run("ip", "link", "set", host_if, "up")
    run("ip", "-n", ns, "addr", "add", f"{there}/30", "dev", ns_if)
    run("ip", "-n", ns, "link", "set", ns_if, "up")
    run("ip", "-n", ns, "link", "set", "lo", "up")
    srv = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", SERVER, there, "8080", MARK])
    at_exit(lambda: (srv.kill(), srv.wait()))

    def up():
        try:
            socket.create_connection((there, 8080), timeout=1).close()
            return True
        except OSError:
            return False
    wait_until(up, timeout=15, what="the test internet's server")
    _STATE["net"] = (there, 8080)
    return _STATE["net"]


def loopback_secret():
    """A server on the host's 127.0.0.1 whose answer no run may see; its port."""
    if "lo" in _STATE:
        return _STATE["lo"]

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(SECRET)))
            self.end_headers()
            self.wfile.write(SECRET.encode())

        def log_message(self, *a):
            pass
    s = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    at_exit(s.shutdown)
    _STATE["lo"] = s.server_address[1]
    return _STATE["lo"]


def net_daemon():
    if "daemon" in _STATE:
        return _STATE["daemon"]
    there, port = test_internet()
    lo = loopback_secret()
    allow = f"{there}:{port},localhost:{lo},127.0.0.1:{lo},nosuchhost.invalid:8080,*.allowed.invalid"
    d, c = sandbox_daemon([f"--network-allow={allow}", "--network-max-connections-per-user=8"])
    _STATE["daemon"] = (d, c)
    return d, c


def run_script(c, script, timeout=60):
    r = c.call_tool("execute_python", {"script": script, "timeout_seconds": timeout}, timeout=timeout + 60)
    return r, r.get("structuredContent") or {}, c.text(r)


@test
def allowed_host_answers_through_urllib():
    there, port = test_internet()
    d, c = net_daemon()
    r, st, text = run_script(c, f"""
import os, urllib.request
print(os.environ["HTTP_PROXY"], os.environ["https_proxy"], repr(os.environ["NO_PROXY"]))
print("BRIDGE", os.path.exists("/run/mcp-python-sandbox-netbridge"), sorted(os.listdir("/work")))
print(urllib.request.urlopen("http://{there}:{port}/some/path?q=1", timeout=20).read().decode())
""")
    eq(st.get("exit_code"), 0, f"exit code ({text})")
    check(f"{MARK} /some/path?q=1 host={there}:{port}" in text, text)
    check("http://127.0.0.1:3128 http://127.0.0.1:3128 ''" in text, text)
    # The bridge is at its fixed place, not at its host path (nothing of the host's tree shows in /work).
    check("BRIDGE True ['out', 'script.py']" in text, text)
    eq(st.get("network_refused", []), [], "network_refused")
    check("network_refused" not in text, text)
    # check_environment says which hosts runs reach.
    r = c.call_tool("check_environment", {}, timeout=60)
    check(f"{there}:{port}" in (r["structuredContent"]["sandbox"].get("network_allow") or []), r["structuredContent"])
    check(f"Network allowlist (through the proxy at http://127.0.0.1:3128): {there}:{port}" in c.text(r), c.text(r))
    # So does the run tools' description, in its live line.
    ep = {t["name"]: t for t in c.result("tools/list")["tools"]}["execute_python"]
    check("This server: network only to listed hosts, through HTTP_PROXY (check_environment lists them); "
          in ep["description"], ep["description"])


@test
def allowed_host_answers_through_connect():
    there, port = test_internet()
    d, c = net_daemon()
    r, st, text = run_script(c, f"""
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
s.sendall(b"CONNECT {there}:{port} HTTP/1.1\\r\\nHost: {there}:{port}\\r\\n\\r\\n")
head = b""
while b"\\r\\n\\r\\n" not in head:
    head += s.recv(1)
print(head.split(b"\\r\\n")[0].decode())
s.sendall(b"GET /tunnel HTTP/1.0\\r\\n\\r\\n")
data = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    data += b
print(data.decode())
""")
    eq(st.get("exit_code"), 0, f"exit code ({text})")
    check("HTTP/1.1 200 Connection established" in text, text)
    check(f"{MARK} /tunnel" in text, text)


@test
def large_bodies_pass_both_ways():
    there, port = test_internet()
    d, c = net_daemon()
    r, st, text = run_script(c, f"""
import hashlib, os, socket, urllib.request
n = 8 * 1024 * 1024
data = urllib.request.urlopen("http://{there}:{port}/big/%d" % n, timeout=60).read()
want = (bytes(range(256)) * (n // 256 + 1))[:n]
print("GOT", len(data), data == want)
up = os.urandom(3 * 1024 * 1024)
req = urllib.request.Request("http://{there}:{port}/up", data=up, method="POST")
print(urllib.request.urlopen(req, timeout=60).read().decode().strip() == "posted %d %s" % (len(up), hashlib.sha256(up).hexdigest()))
""", timeout=120)
    eq(st.get("exit_code"), 0, f"exit code ({text})")
    check(f"GOT {8 * 1024 * 1024} True" in text, text)
    check("\nTrue" in text, text)


@test
def refused_host_gets_403_naming_the_allowlist():
    d, c = net_daemon()
    r, st, text = run_script(c, """
import urllib.request, urllib.error
try:
    urllib.request.urlopen("http://example.com/", timeout=20)
    print("REACHED")
except urllib.error.HTTPError as e:
    print("STATUS", e.code, e.read().decode())
try:
    urllib.request.urlopen("https://files.example.org/x", timeout=20)
    print("REACHED")
except Exception as e:
    print("TLS", e)
""")
    eq(st.get("exit_code"), 0, f"exit code ({text})")
    check("REACHED" not in text, text)
    check("STATUS 403 host example.com is not in the administrator's network allowlist (network-allow)" in text, text)
    check("TLS" in text and "403" in text, text)
    eq(sorted(st.get("network_refused") or []), ["example.com:80", "files.example.org:443"], "network_refused")
    check("--- network_refused: " in text and "example.com:80" in text, text)
    # The audit record says so too.
    with open(d.log_path, errors="replace") as f:
        check(any("MCP_NETWORK_REFUSED=" in ln and "example.com:80" in ln for ln in f), "MCP_NETWORK_REFUSED in the log")
    # A wrong port of an allowlisted address is refused too.
    there, port = test_internet()
    r, st, text = run_script(c, f"""
import urllib.request, urllib.error
try:
    urllib.request.urlopen("http://{there}:{port + 1}/", timeout=20)
except urllib.error.HTTPError as e:
    print("STATUS", e.code)
""")
    check("STATUS 403" in text, text)
    eq(st.get("network_refused"), [f"{there}:{port + 1}"], "network_refused")


@test
def raw_sockets_go_nowhere():
    there, port = test_internet()
    d, c = net_daemon()
    r, st, text = run_script(c, f"""
import errno, socket
for addr in [("{there}", {port}), ("1.1.1.1", 80), ("10.251.0.1", 80)]:
    try:
        socket.create_connection(addr, timeout=5)
        print("CONNECTED", addr)
    except OSError as e:
        print("FAILED", addr, errno.errorcode.get(e.errno, e.errno))
print(open("/proc/net/route").read().count("\\n") - 1, "routes")
""")
    eq(st.get("exit_code"), 0, f"exit code ({text})")
    check("CONNECTED" not in text, text)
    eq(text.count("ENETUNREACH"), 3, f"unreachable count ({text})")
    check("0 routes" in text, text)


@test
def dns_tricks_fail():
    lo = loopback_secret()
    d, c = net_daemon()
    r, st, text = run_script(c, f"""
import urllib.request, urllib.error
for url in ["http://localhost:{lo}/", "http://127.0.0.1:{lo}/", "http://LOCALHOST.:{lo}/", "http://[::1]:{lo}/",
            "http://nosuchhost.invalid:8080/", "http://x.allowed.invalid/", "http://0x7f.1:{lo}/"]:
    try:
        print("BODY", urllib.request.urlopen(url, timeout=30).read().decode())
    except urllib.error.HTTPError as e:
        print("STATUS", url, e.code, e.read().decode().strip())
    except Exception as e:
        print("ERROR", url, e)
""", timeout=90)
    eq(st.get("exit_code"), 0, f"exit code ({text})")
    check(SECRET not in text and "BODY" not in text, text)
    check(f"STATUS http://localhost:{lo}/ 403 host localhost resolves to 127.0.0.1" in text or
          f"STATUS http://localhost:{lo}/ 403 host localhost resolves to ::1" in text, text)
    check(f"STATUS http://127.0.0.1:{lo}/ 403" in text, text)
    check(f"STATUS http://LOCALHOST.:{lo}/ 403" in text, text)
    check(f"STATUS http://[::1]:{lo}/ 403" in text, text)
    check("STATUS http://nosuchhost.invalid:8080/ 502 host nosuchhost.invalid could not be resolved" in text, text)
    check("STATUS http://x.allowed.invalid/ 502" in text, text)
    check("STATUS http://0x7f.1:" in text and " 400 " in text, text)
    refused = st.get("network_refused") or []
    for h in (f"localhost:{lo}", f"127.0.0.1:{lo}", f"[::1]:{lo}"):
        check(h in refused, f"{h} in {refused}")


@test
def connections_are_capped_per_user_and_closed_with_the_run():
    d, c = net_daemon()
    before = fd_count(d.proc.pid)
    r, st, text = run_script(c, """
import socket, time
held = []
for i in range(12):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    held.append(s)
time.sleep(0.5)
refused = 0
for s in held:
    s.settimeout(0.5)
    try:
        data = s.recv(4096)
    except socket.timeout:
        continue
    if b" 503 " in data and b"network-max-connections-per-user" in data:
        refused += 1
print("REFUSED", refused)
""")
    eq(st.get("exit_code"), 0, f"exit code ({text})")
    check("REFUSED 4" in text, text)
    # The run is over: its proxy and every connection of it are gone.
    wait_until(lambda: fd_count(d.proc.pid) <= before, timeout=10, what="the daemon's fds back to before the run")


@test
def head_too_large_and_garbage_are_refused():
    d, c = net_daemon()
    r, st, text = run_script(c, """
import socket
def ask(data):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    try:
        s.sendall(data)
    except OSError:
        pass
    try:
        return s.recv(200).split(b"\\r\\n")[0].decode()
    except OSError as e:
        return str(e)
print("BIG", ask(b"GET http://example.com/ HTTP/1.1\\r\\nX: " + b"a" * 40000 + b"\\r\\n\\r\\n"))
print("JUNK", ask(b"\\x00\\x01\\x02 garbage\\r\\n\\r\\n"))
print("USERINFO", ask(b"GET http://u@example.com/ HTTP/1.1\\r\\n\\r\\n"))
""")
    check("BIG HTTP/1.1 431" in text, text)
    check("JUNK HTTP/1.1 400" in text, text)
    check("USERINFO HTTP/1.1 400" in text, text)


@test
def persistent_sandboxes_go_through_the_proxy():
    there, port = test_internet()
    d, c = net_daemon()
    r = c.call_tool("create_sandbox", {}, timeout=120)
    check(not r.get("isError"), c.text(r))
    sid = r["structuredContent"]["sandbox_id"]
    try:
        r = c.call_tool("execute_code", {"sandbox_id": sid, "code": f"""
import urllib.request, urllib.error
print(urllib.request.urlopen("http://{there}:{port}/cell", timeout=20).read().decode())
try:
    urllib.request.urlopen("http://example.net/", timeout=20)
except urllib.error.HTTPError as e:
    print("STATUS", e.code)
"""}, timeout=120)
        st, text = r.get("structuredContent") or {}, c.text(r)
        check(f"{MARK} /cell" in text, text)
        check("STATUS 403" in text, text)
        eq(st.get("network_refused"), ["example.net:80"], "network_refused")
        # Since the last call only.
        r = c.call_tool("execute_code", {"sandbox_id": sid, "code": "1 + 1"}, timeout=60)
        eq((r.get("structuredContent") or {}).get("network_refused", []), [], "network_refused of the next cell")
    finally:
        c.call_tool("close_sandbox", {"sandbox_id": sid})


@test
def prestarted_sandboxes_get_the_callers_proxy():
    there, port = test_internet()
    d, c = sandbox_daemon([f"--network-allow={there}:{port}", "--prestart=1"])
    script = f"""
import urllib.request, urllib.error
print(urllib.request.urlopen("http://{there}:{port}/pre", timeout=20).read().decode())
try:
    urllib.request.urlopen("http://example.org/", timeout=20)
except urllib.error.HTTPError as e:
    print("STATUS", e.code)
"""
    run_script(c, script)          # the first run starts one ahead for the next
    prestarted = None
    for _ in range(20):
        r, st, text = run_script(c, script)
        check(f"{MARK} /pre" in text and "STATUS 403" in text, text)
        eq(st.get("network_refused"), ["example.org:80"], "network_refused")
        if st.get("prestarted"):
            prestarted = st
            break
        time.sleep(0.3)
    check(prestarted, "no run used a pre-started sandbox")


def silent_nameserver():
    """The address of a DNS server that reads every query and answers none (a UDP socket of this test's)."""
    if "dns" in _STATE:
        return _STATE["dns"]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.77.0.53", 53))
    except OSError as e:
        skip(f"no UDP port 53 for a silent name server: {e}")
    at_exit(s.close)

    def swallow():
        while True:
            try:
                s.recv(4096)
            except OSError:
                return
    threading.Thread(target=swallow, daemon=True).start()
    _STATE["dns"] = "127.77.0.53"
    return _STATE["dns"]


def names_daemon(*args, allow=None):
    """A daemon whose resolver reads a hosts file of the test's (a private mount namespace): internal.test is the
    test internet's server, rebind.test the host's 127.0.0.1, metadata.test the cloud metadata address; any other
    name waits for a name server that never answers (seconds, then "could not be resolved")."""
    if not shutil.which("unshare"):
        skip("unshare is not installed")
    there, port = test_internet()
    d = scratch("mcptest-net-hosts-")
    hosts = os.path.join(d, "hosts")
    with open(hosts, "w") as f:
        f.write(f"{there} internal.test\n127.0.0.1 rebind.test\n169.254.169.254 metadata.test\n")
    resolv = os.path.join(d, "resolv.conf")
    with open(resolv, "w") as f:
        f.write(f"nameserver {silent_nameserver()}\noptions timeout:6 attempts:1\n")
    wrapper = os.path.join(d, "in-ns")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\nset -e\nmount --bind {shlex.quote(hosts)} /etc/hosts\n"
                f"mount --bind {shlex.quote(resolv)} /etc/resolv.conf\nexec \"$@\"\n")
    os.chmod(wrapper, 0o755)
    need_uv()
    newest_python()
    lo = loopback_secret()
    allow = allow or f"internal.test:{port},rebind.test:{lo},metadata.test"
    dm = Daemon("listen", args=["--offline", "--tmpfs-size=32M", f"--network-allow={allow}", *args],
                wrap=["unshare", "--mount", "--propagation=private", wrapper])
    at_exit(dm.close)
    return dm, initialized(dm.client())


NAMES_SCRIPT = """
import urllib.request, urllib.error
for url in ["http://internal.test:{port}/byname", "http://rebind.test:{lo}/", "http://metadata.test/latest/"]:
    try:
        print("BODY", urllib.request.urlopen(url, timeout=30).read().decode())
    except urllib.error.HTTPError as e:
        print("STATUS", url, e.code, e.read().decode().strip())
"""


@test
def names_resolving_to_private_loopback_or_link_local_addresses_are_refused():
    there, port = test_internet()
    lo = loopback_secret()
    d, c = names_daemon()
    r, st, text = run_script(c, NAMES_SCRIPT.format(port=port, lo=lo))
    eq(st.get("exit_code"), 0, f"exit code ({text})")
    check(SECRET not in text and "BODY" not in text, text)
    check(f"403 host internal.test resolves to {there}, a private address" in text, text)
    check("network-allow-private=yes" in text, text)
    check("403 host rebind.test resolves to 127.0.0.1, a loopback" in text, text)
    check("403 host metadata.test resolves to 169.254.169.254" in text, text)
    eq(sorted(st.get("network_refused") or []), sorted([f"internal.test:{port}", f"rebind.test:{lo}", "metadata.test:80"]),
       "network_refused")


@test
def network_allow_private_lets_names_reach_private_addresses_only():
    there, port = test_internet()
    lo = loopback_secret()
    d, c = names_daemon("--network-allow-private=yes")
    r, st, text = run_script(c, NAMES_SCRIPT.format(port=port, lo=lo))
    eq(st.get("exit_code"), 0, f"exit code ({text})")
    check(f"BODY {MARK} /byname host=internal.test:{port}" in text, text)
    check(SECRET not in text, text)
    check("403 host rebind.test resolves to 127.0.0.1" in text and "403 host metadata.test" in text, text)


def resolvers(daemon_pid):
    """The daemon's resolver children, by the name they take (other children are the daemon's name for a moment
    between fork and exec)."""
    return [p for p, (pp, name) in proc_table().items() if pp == daemon_pid and name == "mcp-resolve"]


@test
def name_lookups_are_capped_per_user():
    d, c = names_daemon(allow="*.slow.test:443")
    most, stop = [0], threading.Event()

    def watch():
        while not stop.is_set():
            most[0] = max(most[0], len(resolvers(d.proc.pid)))
            time.sleep(0.01)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # Twenty CONNECTs at once, each to a name the silent name server keeps waiting: eight lookups (one user's
        # share) run, the other twelve are answered at once.
        r, st, text = run_script(c, """
import socket, time
held = []
for i in range(20):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT n%d.slow.test:443 HTTP/1.1\\r\\nHost: n%d.slow.test:443\\r\\n\\r\\n" % (i, i))
    held.append(s)
time.sleep(2)
answers = {}
for s in held:
    s.settimeout(0.2)
    try:
        data = s.recv(4096).decode(errors="replace")
    except socket.timeout:
        data = "waiting"
    key = data.split("\\r\\n")[0] + " | " + data.rsplit("\\r\\n", 1)[-1].strip() if data != "waiting" else data
    answers[key] = answers.get(key, 0) + 1
for k, n in sorted(answers.items()):
    print("ANSWER", n, k)
""")
    finally:
        stop.set()
        watcher.join()
    eq(st.get("exit_code"), 0, f"exit code ({text})")
    check("ANSWER 8 waiting" in text, text)
    check("ANSWER 12 HTTP/1.1 503 Service Unavailable | too many name lookups of this user at once; try again when "
          "one is done" in text, text)
    eq(most[0], 8, "resolver children at once")
    # The run is over: its lookups were abandoned, their children killed and reaped.
    wait_until(lambda: not resolvers(d.proc.pid), timeout=10, what="no resolver children left")
    # And the user's lookups are free again: the next one is looked up (and fails when the name server stays silent),
    # not refused.
    r, st, text = run_script(c, """
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=40)
s.sendall(b"CONNECT a.slow.test:443 HTTP/1.1\\r\\n\\r\\n")
print("FIRST", s.recv(4096).decode(errors="replace").split("\\r\\n")[0])
""")
    check("FIRST HTTP/1.1 502" in text or "FIRST HTTP/1.1 504" in text, text)


@test
def the_allowlist_is_checked_when_read():
    d = Daemon(args=["--network-allow=*.com"])
    at_exit(d.close)
    # A daemon with a bad entry does not start; its log names the entry.
    deadline = time.monotonic() + 20
    while d.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    check(d.proc.poll() not in (None, 0), "the daemon started with network-allow=*.com")
    with open(d.log_path) as f:
        log = f.read()
    check('network-allow: "*.com" is not a host name' in log, log)


@test
def without_an_allowlist_nothing_changes():
    newest_python()
    need_uv()
    d = Daemon(args=["--offline", "--tmpfs-size=32M"])
    at_exit(d.close)
    c = initialized(d.client())
    r, st, text = run_script(c, """
import os, socket
print("PROXY", [k for k in os.environ if "proxy" in k.lower()])
print("BRIDGE", os.path.exists("/run/mcp-python-sandbox-netbridge"))
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=5)
    print("CONNECTED")
except OSError as e:
    print("FAILED", e.errno)
""")
    eq(st.get("exit_code"), 0, f"exit code ({text})")
    check("PROXY []" in text and "CONNECTED" not in text and "BRIDGE False" in text, text)
    check("network_refused" not in st, f"no network_refused: {st.keys()}")


if __name__ == "__main__":
    main()
