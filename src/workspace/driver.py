# SPDX-License-Identifier: MIT
# The persistent sandbox's driver: runs inside bwrap as `python -I -u -c DRIVER FD`.
# src/workspace/driver.c holds this text as a C string, which make writes anew
# (src/tools/embed-python.py) whenever this file is newer.
#
# FD is one end of a SOCK_SEQPACKET socket pair whose other end the daemon
# holds. Every message is a run of records of at most 64 KiB; the first byte
# of a record says what it is: b"C" a chunk with more to come, b"E" the last
# chunk, b"H" a hello (one record). A message is one JSON object. Records are never
# torn, so a worker killed mid-message leaves nothing the next worker's hello
# could be confused with.
#
# A message is at most the request's "max_message" bytes: the daemon refuses
# a longer one (and restarts the sandbox), so a reply that would be longer
# goes as an error saying so. A hello is sent once per worker: the daemon takes
# a second one while the worker lives for a broken protocol.
#
# Process tree: this supervisor forks the worker (the interpreter that keeps
# the user's state). When the daemon kills a worker that ignored an
# interrupt, the supervisor forks a fresh one; the tmpfs /work stays.
import os
import signal
import socket
import sys

CHUNK = 65536 - 1


def send_msg(sock, obj, max_message):
    import json
    data = json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode()
    if len(data) > max_message:
        data = json.dumps({"ok": False, "error": "the answer has %d bytes, more than the %d bytes one may have"
                           % (len(data), max_message)}).encode()
    n = len(data)
    i = 0
    while True:
        piece = data[i:i + CHUNK]
        i += CHUNK
        last = i >= n
        sock.sendall((b"E" if last else b"C") + piece)
        if last:
            return


def recv_msg(sock):
    import json
    parts = []
    while True:
        rec = sock.recv(65536)
        if not rec:
            return None
        kind = rec[:1]
        if kind == b"C":
            parts.append(rec[1:])
        elif kind == b"E":
            parts.append(rec[1:])
            return json.loads(b"".join(parts))
        else:
            parts = []


def cap_text(s, cap):
    if cap <= 0 or len(s) <= cap:
        return s, 0
    head = cap // 4
    tail = len(s) - (cap - head)
    # Cut between lines where a line ends near the cut (as the daemon's capture does).
    if s[head - 1:head] != "\n":
        i = s.rfind("\n", max(0, head - 1 - min(512, head // 4)), head - 1)
        if i >= 0:
            head = i + 1
    if s[tail - 1] != "\n":
        i = s.find("\n", tail, tail + min(512, (cap - cap // 4) // 4))
        if 0 <= i < len(s) - 1:
            tail = i + 1
    omitted = tail - head
    sep = "" if head == 0 or s[head - 1] == "\n" else "\n"
    return s[:head] + sep + "[... %d characters omitted ...]\n" % omitted + s[tail:], omitted


class Worker:
    def __init__(self, sock):
        import io
        self.sock = sock
        self.io = io
        self.globals = {"__name__": "__main__", "__builtins__": __builtins__}
        self.count = 0
        # Output written to fds 1 and 2 (subprocesses, C code) lands in files on /tmp, read after each cell.
        self.fd_out = os.open("/tmp/.sandbox-stdout", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self.fd_err = os.open("/tmp/.sandbox-stderr", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(self.fd_out, 1)
        os.dup2(self.fd_err, 2)
        os.chdir("/work")
        if "" not in sys.path and "/work" not in sys.path:
            sys.path.insert(0, "/work")

    def drain_fd(self, fd, cap):
        size = os.fstat(fd).st_size
        data = os.pread(fd, min(size, max(cap, 0) * 4 + 4096), 0) if size else b""
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        return data.decode("utf-8", "replace")

    # ---- cells -------------------------------------------------------------
    def op_exec(self, req):
        import ast
        import linecache
        import traceback
        code = req.get("code", "")
        out_cap = int(req.get("out_cap", 65536))
        self.count += 1
        name = "<cell-%d>" % self.count
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        before = self.out_files()
        out, err = self.io.StringIO(), self.io.StringIO()
        old = sys.stdout, sys.stderr
        result = None
        error = None
        interrupted = False
        sys.stdout, sys.stderr = out, err
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                tree = ast.parse(code, name, "exec")
                last = None
                if tree.body and isinstance(tree.body[-1], ast.Expr):
                    last = ast.Expression(tree.body.pop().value)
                exec(compile(tree, name, "exec"), self.globals)
                if last is not None:
                    value = eval(compile(last, name, "eval"), self.globals)
                    if value is not None:
                        self.globals["_"] = value
                        result = repr(value)
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        except BaseException as e:  # noqa: B036 - KeyboardInterrupt and SystemExit are results too
            interrupted = isinstance(e, KeyboardInterrupt)
            tb = e.__traceback__
            # Drop the driver's own frames: the user's code starts at the first frame in a cell.
            while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
                tb = tb.tb_next
            if isinstance(e, SyntaxError):
                tb = None
            error = cap_text("".join(traceback.format_exception(type(e), e, tb)), out_cap // 2)[0]
        finally:
            sys.stdout, sys.stderr = old
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        # Figures and files share one budget, as a run's do.
        total = int(req.get("max_files_total", 10 << 20))
        images, used = self.figures(int(req.get("max_images", 8)), int(req.get("max_image_bytes", 4 << 20)), total)
        stdout = out.getvalue() + self.drain_fd(self.fd_out, out_cap)
        stderr = err.getvalue() + self.drain_fd(self.fd_err, out_cap)
        stdout, out_omitted = cap_text(stdout, out_cap // 2)
        stderr, err_omitted = cap_text(stderr, out_cap // 2)
        if result is not None:
            result, _ = cap_text(result, out_cap // 2)
        return {
            "ok": True, "execution_count": self.count, "stdout": stdout, "stderr": stderr,
            "stdout_omitted": out_omitted, "stderr_omitted": err_omitted,
            "result": result, "error": error, "interrupted": interrupted,
            "images": images,
            "files": self.changed_files(before, int(req.get("max_files", 16)), int(req.get("max_file_bytes", 4 << 20)),
                                        total - used),
        }

    # ---- output files: new or modified in /work/out during a cell -------------
    def out_files(self):
        found = {}
        for root, dirs, names in os.walk("/work/out"):
            dirs.sort()
            for n in sorted(names):
                p = os.path.join(root, n)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if st.st_mode & 0o170000 == 0o100000:
                    found[p[len("/work/out/"):]] = (st.st_mtime_ns, st.st_size, st.st_ino)
        return found

    def changed_files(self, before, max_files, max_bytes, max_total):
        import base64
        files = []
        for name, key in self.out_files().items():
            if before.get(name) == key:
                continue
            if len(files) >= 64 + 16:
                break   # named one by one up to here: the answer stays small
            size = key[1]
            entry = {"name": name, "bytes": size}
            if max_files > 0 and size <= max_bytes and size <= max_total:
                try:
                    with open(os.path.join("/work/out", name), "rb") as f:
                        data = f.read(max_bytes + 1)
                except OSError:
                    data = None
                if data is not None and len(data) <= max_bytes and len(data) <= max_total:
                    entry["bytes"] = len(data)
                    entry["data"] = base64.b64encode(data).decode()
                    max_files -= 1
                    max_total -= len(data)
            files.append(entry)
        return files

    def figures(self, max_images, max_bytes, max_total):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return [], 0
        import base64
        images = []
        try:
            nums = list(plt.get_fignums())
        except Exception:
            return [], 0
        used = 0
        for num in nums:
            if len(images) >= 64 + 16:
                break   # named one by one up to here: the answer stays small (all are closed below)
            entry = {"name": "figure-%s.png" % num}
            if len(images) >= max_images:
                entry["error"] = "not returned: at most %d images per cell" % max_images
            else:
                try:
                    buf = self.io.BytesIO()
                    plt.figure(num).savefig(buf, format="png")
                    data = buf.getvalue()
                    if len(data) > max_bytes:
                        entry["error"] = "not returned: %d bytes, more than the %d byte cap" % (len(data), max_bytes)
                    elif used + len(data) > max_total:
                        entry["error"] = "not returned: figures and files may have %d bytes in all" % max_total
                    else:
                        entry["data"] = base64.b64encode(data).decode()
                        entry["bytes"] = len(data)
                        used += len(data)
                except Exception as e:
                    entry["error"] = "could not be rendered: %s" % e
            images.append(entry)
        try:
            plt.close("all")
        except Exception:
            pass
        return images, used

    # ---- files ---------------------------------------------------------------
    def resolve(self, path):
        if not isinstance(path, str) or "\0" in path:
            raise ValueError("invalid path")
        if path in ("/work", "/work/"):
            path = "."
        elif path.startswith("/work/"):
            path = path[len("/work/"):]
        if path.startswith("/"):
            raise ValueError("absolute paths are refused: give a path relative to the work directory /work")
        if ".." in path.split("/"):
            raise ValueError("'..' is refused: paths must stay inside the work directory")
        real = os.path.realpath(os.path.join("/work", path))
        if real != "/work" and not real.startswith("/work/"):
            raise ValueError("the path leaves the work directory (through a symbolic link)")
        return real

    def op_list_files(self, req):
        import stat
        top = self.resolve(req.get("path") or ".")
        recursive = bool(req.get("recursive", False))
        limit = int(req.get("max_entries", 1000))
        entries = []
        truncated = False
        stack = [top]
        while stack:
            d = stack.pop()
            try:
                names = sorted(os.listdir(d))
            except NotADirectoryError:
                raise ValueError("not a directory")
            for n in names:
                p = os.path.join(d, n)
                st = os.lstat(p)
                kind = "directory" if stat.S_ISDIR(st.st_mode) else "symlink" if stat.S_ISLNK(st.st_mode) else \
                    "file" if stat.S_ISREG(st.st_mode) else "other"
                if len(entries) >= limit:
                    truncated = True
                    break
                e = {"path": os.path.relpath(p, "/work"), "type": kind, "size": st.st_size}
                if kind == "symlink":
                    e["target"] = os.readlink(p)
                entries.append(e)
                if recursive and kind == "directory":
                    stack.append(p)
            if truncated:
                break
        return {"ok": True, "entries": entries, "truncated": truncated}

    def op_read_file(self, req):
        import base64
        path = self.resolve(req.get("path", ""))
        cap = int(req.get("max_bytes", 1 << 20))
        # A slice: offset (0 when only length is given) and length bytes at most (up to the cap).
        sliced = "offset" in req or "length" in req
        offset = int(req.get("offset", 0))
        length = int(req.get("length", cap))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            import stat
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("not a regular file")
            if not sliced and st.st_size > cap:
                raise ValueError("the file has %d bytes, more than the %d byte cap of read_file: read it in pieces "
                                 "with offset and length" % (st.st_size, cap))
            if offset > st.st_size:
                raise ValueError("offset %d is past the end of the file, which has %d bytes" % (offset, st.st_size))
            want = min(length, cap) if sliced else cap + 1
            data = b""
            while len(data) < want:
                chunk = os.pread(fd, min(65536, want - len(data)), offset + len(data))
                if not chunk:
                    break
                data += chunk
            if not sliced and len(data) > cap:
                raise ValueError("the file is larger than the %d byte cap of read_file: read it in pieces with "
                                 "offset and length" % cap)
            file_size = max(st.st_size, offset + len(data))
        finally:
            os.close(fd)
        reply = {"ok": True, "size": len(data), "offset": offset, "file_size": file_size,
                 "eof": offset + len(data) >= file_size}
        if req.get("encoding", "text") == "base64":
            reply.update(content=base64.b64encode(data).decode(), encoding="base64")
            return reply
        try:
            reply.update(content=data.decode("utf-8"), encoding="text")
            return reply
        except UnicodeDecodeError:
            if sliced:
                raise ValueError("these bytes are not UTF-8 text (a slice may cut a character in two): read them "
                                 "with encoding \"base64\", or move offset or length")
            raise ValueError("the file is not UTF-8 text: read it with encoding \"base64\"")

    def op_write_file(self, req):
        import base64
        path = self.resolve(req.get("path", ""))
        if path == "/work":
            raise ValueError("a file name is needed")
        cap = int(req.get("max_bytes", 1 << 20))
        content = req.get("content", "")
        if req.get("encoding", "text") == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except Exception:
                raise ValueError("content is not valid base64")
        else:
            data = content.encode("utf-8", "surrogatepass")
        if len(data) > cap:
            raise ValueError("%d bytes, more than the %d byte cap of write_file" % (len(data), cap))
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        if self.resolve(os.path.relpath(parent, "/work")) != parent:
            raise ValueError("the path leaves the work directory")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        if req.get("append"):
            flags = (flags & ~os.O_TRUNC) | os.O_APPEND
        fd = os.open(path, flags, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            os.close(fd)
        return {"ok": True, "path": os.path.relpath(path, "/work"), "size": len(data)}

    # ---- state -------------------------------------------------------------------
    def op_info(self, req):
        files = 0
        total = 0
        for root, dirs, names in os.walk("/work"):
            for n in names:
                files += 1
                try:
                    total += os.lstat(os.path.join(root, n)).st_size
                except OSError:
                    pass
        import types
        names = sorted(k for k, v in self.globals.items()
                       if not k.startswith("_") and not isinstance(v, types.ModuleType))
        modules = sorted(k for k, v in self.globals.items() if isinstance(v, types.ModuleType))
        return {"ok": True, "files": files, "bytes": total, "execution_count": self.count,
                "variables": names[:200], "modules": modules[:200]}

    def op_snapshot(self, req):
        import base64
        import tarfile
        cap = int(req.get("max_bytes", 32 << 20))
        buf = self.io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for n in sorted(os.listdir("/work")):
                tar.add(os.path.join("/work", n), arcname=n)
                if buf.tell() > cap:
                    raise ValueError("the work directory holds more than %d bytes" % cap)
        data = buf.getvalue()
        if len(data) > cap:
            raise ValueError("the work directory holds more than %d bytes" % cap)
        return {"ok": True, "tar": base64.b64encode(data).decode()}

    def op_restore(self, req):
        import base64
        import tarfile
        buf = self.io.BytesIO(base64.b64decode(req.get("tar", "")))
        with tarfile.open(fileobj=buf, mode="r") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall("/work", filter="data")
            else:
                tar.extractall("/work")
        return {"ok": True}

    def serve(self):
        import json
        self.sock.sendall(b"H" + json.dumps({"hello": os.getpid(), "python": sys.version.split()[0]}).encode())
        while True:
            req = recv_msg(self.sock)
            if req is None:
                return
            op = getattr(self, "op_" + str(req.get("op")), None)
            try:
                if op is None:
                    raise ValueError("unknown operation")
                reply = op(req)
            except (Exception, KeyboardInterrupt) as e:
                reply = {"ok": False, "error": str(e) or type(e).__name__}
            send_msg(self.sock, reply, int(req.get("max_message", 1 << 20)))


def main():
    fd = int(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the daemon interrupts the worker, never this process
    while True:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                Worker(socket.socket(fileno=fd)).serve()
                code = 0
            finally:
                os._exit(code)
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except ChildProcessError:
                sys.exit(1)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            sys.exit(0)   # the daemon closed its end
        os.write(2, b"sandbox: the interpreter ended (status %d); starting a fresh one\n" % status)


main()
