/* SPDX-License-Identifier: MIT */
/*
 * Running without the sandbox (unsafe-no-sandbox=yes, development only): a private run directory in $TMPDIR
 * standing for /work and /tmp, the data files written into it, the sandbox's environment with those paths moved,
 * and the spawn itself, with the same resource limits, cgroup and uid lease as a sandboxed run.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs-util.h"
#include "macro.h"
#include "runtime-internal.h"
#include "strv.h"

/* ---- without the sandbox (unsafe-no-sandbox) ---------------------------------- */

/* When path is the directory from or below it: 1, and *ret the same path below to. Else 0. */
int runtime_path_moved(const char *path, const char *from, const char *to, char **ret) {
        const char *rest = startswith(path, from);

        if (!rest || (*rest && *rest != '/'))
                return 0;
        if (asprintf(ret, "%s%s", to, rest) < 0)
                return -ENOMEM;
        return 1;
}

/* A private directory for one run: top (mode 0700, in $TMPDIR) holding work, which stands for /work, and tmp,
 * which stands for /tmp. On failure nothing is left behind. */
static int make_run_dir(char **ret_top, char **ret_work, char **ret_tmp) {
        _cleanup_free_ char *top = NULL, *work = NULL, *tmp = NULL;
        const char *base = getenv("TMPDIR");
        int k;

        if (!base || base[0] != '/')
                base = "/tmp";
        if (asprintf(&top, "%s/mcp-python-sandbox-run-XXXXXX", base) < 0)
                return -ENOMEM;
        if (!mkdtemp(top))
                return -errno;
        if (asprintf(&work, "%s/work", top) < 0 || asprintf(&tmp, "%s/tmp", top) < 0)
                k = -ENOMEM;
        else
                k = mkdir(work, 0700) < 0 || mkdir(tmp, 0700) < 0 ? -errno : 0;
        if (k < 0) {
                (void) rm_rf_untrusted(top);
                return k;
        }
        *ret_top = TAKE_PTR(top);
        *ret_work = TAKE_PTR(work);
        *ret_tmp = TAKE_PTR(tmp);
        return 0;
}

/* A data file of the sandbox, written into the run's work directory (nothing runs there yet): the contents of
 * its fd from the current offset, read-only (0444) like the sandbox's. -EINVAL: not a plain path below /work. */
static int write_data_file(const char *work, const SandboxData *d) {
        const char *rel = startswith(d->dest, SANDBOX_WORK_DIR "/");
        _cleanup_free_ char *path = NULL;
        _cleanup_close_ int fd = -EBADF;
        char *slash;
        int k;

        if (!rel || !*rel)
                return -EINVAL;
        for (const char *c = rel; *c;) {
                size_t l = strcspn(c, "/");
                if (l == 0 || (l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
                        return -EINVAL;
                c += l;
                if (*c == '/' && !*++c)
                        return -EINVAL;
        }
        if (asprintf(&path, "%s/%s", work, rel) < 0)
                return -ENOMEM;
        slash = strrchr(path, '/');
        if (slash - path > (ptrdiff_t) strlen(work)) {
                *slash = 0;
                k = mkdir_p(path, 0755);
                *slash = '/';
                if (k < 0)
                        return k;
        }
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
        if (fd < 0)
                return -errno;
        for (;;) {
                char buf[65536];
                ssize_t n = read(d->fd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return 0;
                k = write_all(fd, buf, (size_t) n);
                if (k < 0)
                        return k;
        }
}

/* The run's environment: the sandbox's, with /work and /tmp where they are for this run, and the real user.
 * PATH and VIRTUAL_ENV name the environment where it is on the host (also when that is below /tmp): they stay. */
static char **unsandboxed_env(const Runtime *r, const char *env_dir, const char *work, const char *tmp) {
        _cleanup_strv_free_ char **env = sandbox_run_env(env_dir), **ret = strv_new();

        if (!env || !ret)
                return NULL;
        for (size_t i = 0; env[i]; i++) {
                const char *eq = strchr(env[i], '=');
                _cleanup_free_ char *v = NULL;
                int k;

                if (!eq)
                        continue;
                if (startswith(env[i], "PATH=") || startswith(env[i], "VIRTUAL_ENV=")) {
                        if (strv_extend(&ret, env[i]) < 0)
                                return NULL;
                        continue;
                }
                k = runtime_path_moved(eq + 1, SANDBOX_WORK_DIR, work, &v);
                if (k == 0)
                        k = runtime_path_moved(eq + 1, "/tmp", tmp, &v);
                if (k < 0)
                        return NULL;
                if (startswith(env[i], "USER="))
                        k = strv_extendf(&ret, "USER=%s", r->uids ? "nobody" : r->user);
                else if (k > 0)
                        k = strv_extendf(&ret, "%.*s=%s", (int) (eq - env[i]), env[i], v);
                else
                        k = strv_extend(&ret, env[i]);
                if (k < 0)
                        return NULL;
        }
        return TAKE_PTR(ret);
}

/* The command as the sandbox would run it, as the daemon's user, in a private directory that goes with the
 * Process: no namespaces, no read-only root, no system call filter, no tmpfs size; the same resource limits. */
static int spawn_in_run_dir(Runtime *r, const char *top, const char *work, const char *tmp, const char *env_dir,
                            const SandboxData *data, size_t n_data, const int *pass_fds, size_t n_pass,
                            char *const *command, uint64_t timeout_usec, const SandboxLimits *limits,
                            size_t head_max, size_t tail_max, ProcessDoneFunc done, void *userdata, Process **ret) {
        _cleanup_strv_free_ char **argv = strv_new(), **env = NULL;
        int k;

        for (size_t i = 0; i < n_data; i++) {
                k = write_data_file(work, &data[i]);
                if (k < 0)
                        return k;
        }
        /* Not the program: that is a host path, the same inside the sandbox (and may be below a host's /work). */
        for (size_t i = 0; command[i]; i++) {
                _cleanup_free_ char *a = NULL;
                k = i == 0 ? 0 : runtime_path_moved(command[i], SANDBOX_WORK_DIR, work, &a);
                if (k < 0 || strv_extend(&argv, k > 0 ? a : command[i]) < 0)
                        return -ENOMEM;
        }
        env = unsandboxed_env(r, env_dir, work, tmp);
        if (!argv || !env)
                return -ENOMEM;

        ProcessOptions o = {
                .argv = argv,
                .env = env,
                .cwd = work,
                .keep_fds = pass_fds,
                .n_keep_fds = n_pass,
                .stdin_fd = -EBADF,
                .timeout_usec = timeout_usec,
                .head_max = head_max,
                .tail_max = tail_max,
                .remove_dir = top,
        };
        /* Without a sandbox too, never as root: a uid of its own, which owns the run's directory. */
        char *own[] = { (char *) top, (char *) work, (char *) tmp, NULL };
        return runtime_spawn_leased(r, &o, own, env_dir, limits, true, done, userdata, ret);
}

int runtime_spawn_unsandboxed(Runtime *r, const char *env_dir, const SandboxData *data, size_t n_data,
                              const int *pass_fds, size_t n_pass, char *const *command, uint64_t timeout_usec,
                              const SandboxLimits *limits, size_t head_max, size_t tail_max, ProcessDoneFunc done,
                              void *userdata, Process **ret) {
        _cleanup_free_ char *top = NULL, *work = NULL, *tmp = NULL;
        int k;

        k = make_run_dir(&top, &work, &tmp);
        if (k < 0)
                return k;
        k = spawn_in_run_dir(r, top, work, tmp, env_dir, data, n_data, pass_fds, n_pass, command, timeout_usec,
                             limits, head_max, tail_max, done, userdata, ret);
        if (k < 0)
                (void) rm_rf_untrusted(top);
        return k;
}
