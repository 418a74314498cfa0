/* SPDX-License-Identifier: MIT */
/*
 * A program of the daemon's own (execute_python's boot program) compiled once per Python rather than at every start
 * of a sandbox: the base interpreter compiles the daemon's source in the sandbox, as any run of it would, and hands
 * back the code object, marshal()ed, on stdout. It is kept in a sealed memfd; each run gets a read-only descriptor
 * of its own (never one shared with another sandbox) and a one-line loader for python -c.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fs-util.h"
#include "log.h"
#include "macro.h"
#include "runtime-internal.h"
#include "strv.h"

/* The compile program: the source comes as argv[1] (it is the daemon's, and no secret: it was on every run's
 * command line until now), the code object goes to stdout, compiled as python -c compiles. */
static const char compile_code[] =
        "import marshal,sys\n"
        "sys.stdout.buffer.write(marshal.dumps(compile(sys.argv[1],'<string>','exec',dont_inherit=True)))\n";

struct RuntimeCode {
        Runtime *runtime;
        char *executable;       /* the base interpreter (Python.executable) */
        int fd;                 /* the sealed memfd, -EBADF until made */
        size_t size;
        Process *proc;          /* the compile, while it runs */
        bool failed;            /* not again for this interpreter */
};

RuntimeCode *runtime_code_free(RuntimeCode *c) {
        if (!c)
                return NULL;
        process_free(c->proc);
        safe_close(c->fd);
        free(c->executable);
        free(c);
        return NULL;
}

/* A memfd holding data that nobody can change any more, not even we. */
int runtime_code_seal(const void *data, size_t size) {
        _cleanup_close_ int fd = -EBADF;
        int k;

        fd = memfd_create("boot-code", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return -errno;
        k = write_all(fd, data, size);
        if (k < 0)
                return k;
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
                return -errno;
        return TAKE_FD(fd);
}

/* What the base interpreter handed back: one marshal()ed code object (its first byte says so), all of it. */
static int code_adopt(RuntimeCode *c, Process *p) {
        const Capture *out = &p->out;
        int fd;

        if (out->total != out->head_len || out->total > RUNTIME_CODE_MAX)
                return -EFBIG;
        /* TYPE_CODE, with or without FLAG_REF */
        if (out->head_len == 0 || ((unsigned char) out->head[0] & 0x7f) != 'c')
                return -EBADMSG;
        fd = runtime_code_seal(out->head, out->head_len);
        if (fd < 0)
                return fd;
        c->fd = fd;
        c->size = out->head_len;
        return 0;
}

static void on_compiled(Process *p, void *userdata) {
        RuntimeCode *c = userdata;
        int k = -EIO;

        c->proc = NULL;
        if (p->exit_code == 0 && !p->signal)
                k = code_adopt(c, p);
        if (k < 0) {
                c->failed = true;
                log_info("Compiling the boot program with %s failed (%s%d%s%s): runs compile it at every start.",
                         c->executable, p->signal ? "signal " : "exit ", p->signal ?: p->exit_code,
                         k != -EIO ? ", " : "", k != -EIO ? strerror(-k) : "");
        } else
                log_debug("The boot program, compiled by %s: %zu bytes.", c->executable, c->size);
        process_free(p);
}

static int code_start(Runtime *r, RuntimeCode *c, const Python *py, const char *source) {
        char *ro[] = { streq(py->prefix, "/usr") ? NULL : py->prefix, NULL };
        char *command[] = { py->executable, (char *) "-I", (char *) "-S", (char *) "-B", (char *) "-c",
                            (char *) compile_code, (char *) source, NULL };
        SandboxLimits limits;

        sandbox_limits_from_config(r->config, &limits);
        return runtime_spawn_in_bwrap(r, NULL, ro, NULL, 0, NULL, 0, -EBADF, command, 0, &limits,
                                      RUNTIME_CODE_MAX + 1, 4096, on_compiled, c, &c->proc);
}

int runtime_code_fd(Runtime *r, const char *source, const char *python, size_t *ret_size) {
        _cleanup_free_ char *real = NULL;
        const Python *py = NULL;
        RuntimeCode *c = NULL;
        char path[64];
        int fd, k;

        /* Never outside the sandbox: the interpreter runs nothing of ours anywhere else. */
        if (runtime_sandbox_error(r) || runtime_unsandboxed(r) || !r->ready)
                return -ENOMEDIUM;
        real = realpath(python, NULL);
        if (!real)
                return -errno;
        for (size_t i = 0; i < r->n_codes && !c; i++)
                if (streq(r->codes[i]->executable, real))
                        c = r->codes[i];
        if (!c) {
                /* Only an interpreter the daemon knows compiles what every later run executes. */
                for (size_t i = 0; i < r->pythons.n && !py; i++)
                        if (streq(r->pythons.items[i]->executable, real))
                                py = r->pythons.items[i];
                if (!py)
                        return -ENOENT;
                RuntimeCode **a = reallocarray(r->codes, r->n_codes + 1, sizeof(*a));
                if (!a)
                        return -ENOMEM;
                r->codes = a;
                c = calloc(1, sizeof(*c));
                if (!c)
                        return -ENOMEM;
                *c = (RuntimeCode) { .runtime = r, .fd = -EBADF, .executable = TAKE_PTR(real) };
                r->codes[r->n_codes++] = c;
                k = code_start(r, c, py, source);
                if (k != 0) {
                        c->failed = true;
                        return k < 0 ? k : -ENOMEDIUM;       /* RUNTIME_NO_SANDBOX */
                }
                return -EAGAIN;
        }
        if (c->failed)
                return -ENOENT;
        if (c->fd < 0)
                return -EAGAIN;
        /* A description of its own, read-only: no offset another sandbox could move, nothing it could write. */
        snprintf(path, sizeof(path), "/proc/self/fd/%d", c->fd);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        *ret_size = c->size;
        return fd;
}

char *runtime_code_loader(int fd, size_t size) {
        char *s;

        /* The descriptor is closed before anything else runs; the code then runs in __main__, as -c would. */
        if (asprintf(&s, "import marshal,os\nc=marshal.loads(os.pread(%d,%zu,0))\nos.close(%d)\nexec(c)\n", fd, size,
                     fd) < 0)
                return NULL;
        return s;
}
