/* SPDX-License-Identifier: MIT */
/*
 * What is done to an environment once it is in place: its bytecode compiled in the sandbox (one environment at a
 * time, SCHED_COMPILE, charged to whose call built it) and adopted into its __pycache__ directories in a child,
 * shared with the unpacked wheels of the uv cache where the files are the same; then matplotlib's font list, when
 * the environment has matplotlib. The markers COMPILED and FONTS say it is done.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envstore.h"
#include "envstore/envstore-internal.h"
#include "envstore/layout.h"
#include "executor/offloop.h"
#include "executor/process.h"
#include "fs-util.h"
#include "log.h"
#include "macro.h"
#include "strv.h"
#include "utf8.h"

/*
 * Bytecode is compiled after the environment is in place, not during the build: the first run needs only
 * what it imports (compiled in memory, the sandbox cannot write .pyc files), and waiting for all of a
 * package's bytecode first made it wait three times as long (numpy: 1.5 s against 0.5 s). One environment at a
 * time, one process, on the side.
 *
 * The compile starts an interpreter on the environment, so it runs in the sandbox (envstore_set_compiler()),
 * where the environment is read-only and the only writable place is a scratch directory: the base interpreter,
 * with -I -S (no .pth file, no sitecustomize) and -X pycache_prefix, writes the .pyc files there, and the daemon
 * then moves those of the environment's own sources into its __pycache__ directories (env_adopt_bytecode_shared()).
 * Runs that start meanwhile see each .pyc complete or not at all (renamed into place). Once done, COMPILED marks
 * it; an interrupted compile is taken up again at the next start.
 */

/* The environment's root is read-only (0555): open it to us for one new file. */
static void mark_compiled(const char *path) {
        _cleanup_close_ int dirfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int fd;

        if (dirfd < 0 || fchmod(dirfd, 0755) < 0)
                return;
        fd = openat(dirfd, COMPILED, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0444);
        if (fd >= 0)
                close(fd);
        (void) fchmod(dirfd, 0555);
}

/* In dir (uv's entries of one name: VERSION-TAGS, a symlink to archive-v0/ID, for each wheel), the unpacked wheel
 * whose DIST_INFO/METADATA is meta itself: its fd, or -ENOENT. */
static int scan_wheel_entries(const char *dir, const char *version, const char *dist_info, const struct stat *meta) {
        DIR *d = opendir(dir);
        struct dirent *v;
        int found = -ENOENT;

        if (!d)
                return -ENOENT;
        while (found < 0 && (v = readdir(d))) {
                const char *rest = startswith(v->d_name, version);
                char q[4096 + 512];
                struct stat st;
                int fd;

                if (!rest || *rest != '-' || v->d_type != DT_LNK)
                        continue;
                snprintf(q, sizeof(q), "%s/%s", dir, v->d_name);
                fd = open(q, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                snprintf(q, sizeof(q), "%s/METADATA", dist_info);
                if (fstatat(fd, q, &st, AT_SYMLINK_NOFOLLOW) >= 0 && st.st_dev == meta->st_dev &&
                    st.st_ino == meta->st_ino)
                        found = fd;
                else
                        close(fd);
        }
        closedir(d);
        return found;
}

/* The unpacked wheel of uv's cache that a distribution of the environment (its METADATA meta, a hard link) came
 * from, among uv's entries of its name: wheels-vN/pypi/NAME, or wheels-vN/KIND/HASH/NAME for other indexes. */
static int find_wheel(const char *uv_cache, const char *name, const char *version, const char *dist_info,
                      const struct stat *meta) {
        DIR *top = opendir(uv_cache), *kinds, *sub;
        struct dirent *b, *k, *e;
        char p[4096];
        int found = -ENOENT;

        if (!top)
                return -errno;
        while (found < 0 && (b = readdir(top))) {
                if (!startswith(b->d_name, "wheels-v"))
                        continue;
                snprintf(p, sizeof(p), "%s/%s", uv_cache, b->d_name);
                if (!(kinds = opendir(p)))
                        continue;
                while (found < 0 && (k = readdir(kinds))) {
                        if (k->d_name[0] == '.')
                                continue;
                        snprintf(p, sizeof(p), "%s/%s/%s/%s", uv_cache, b->d_name, k->d_name, name);
                        found = scan_wheel_entries(p, version, dist_info, meta);
                        snprintf(p, sizeof(p), "%s/%s/%s", uv_cache, b->d_name, k->d_name);
                        if (found >= 0 || !(sub = opendir(p)))
                                continue;
                        while (found < 0 && (e = readdir(sub))) {
                                if (e->d_name[0] == '.')
                                        continue;
                                snprintf(p, sizeof(p), "%s/%s/%s/%s/%s", uv_cache, b->d_name, k->d_name, e->d_name,
                                         name);
                                found = scan_wheel_entries(p, version, dist_info, meta);
                        }
                        closedir(sub);
                }
                closedir(kinds);
        }
        closedir(top);
        return found;
}

/* The unpacked wheels the environment's distributions are hard links of: at most max directory fds in ret. */
static size_t find_wheels(EnvStore *s, int env_fd, const char *site_packages, int *ret, size_t max) {
        _cleanup_close_ int sp = openat(env_fd, site_packages, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct dirent *de;
        size_t n = 0;
        DIR *d;

        if (sp < 0 || !(d = fdopendir(sp)))
                return 0;
        sp = -EBADF;   /* the DIR's now */
        while (n < max && (de = readdir(d))) {
                char name[NAME_MAX + 1], meta_path[NAME_MAX + 16];
                const char *dash;
                struct stat meta;
                size_t len;
                int fd;

                if (!endswith(de->d_name, ".dist-info"))
                        continue;
                len = strlen(de->d_name) - strlen(".dist-info");
                dash = memrchr(de->d_name, '-', len);
                if (!dash || dash == de->d_name)
                        continue;
                /* NAME-VERSION.dist-info: uv's entries are by the normalized name. */
                size_t nl = (size_t) (dash - de->d_name);
                for (size_t i = 0; i < nl; i++)
                        name[i] = de->d_name[i] == '_' || de->d_name[i] == '.' ? '-' : (char) tolower(de->d_name[i]);
                name[nl] = 0;
                char version[NAME_MAX + 1];
                snprintf(version, sizeof(version), "%.*s", (int) (len - nl - 1), dash + 1);
                snprintf(meta_path, sizeof(meta_path), "%s/METADATA", de->d_name);
                if (fstatat(dirfd(d), meta_path, &meta, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(meta.st_mode) ||
                    meta.st_nlink < 2)
                        continue;   /* not linked from uv's cache */
                fd = find_wheel(s->uv_cache, name, version, de->d_name, &meta);
                if (fd >= 0)
                        ret[n++] = fd;
        }
        closedir(d);
        return n;
}

static int adopt_bytecode(EnvStore *s) {
        _cleanup_close_ int env_fd = -EBADF, out_fd = -EBADF, lib_fd = -EBADF;
        _cleanup_free_ char *site_packages = NULL;
        struct dirent *de;
        DIR *d;

        env_fd = open(s->compiling, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        out_fd = open(s->compile_out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (env_fd < 0 || out_fd < 0)
                return -errno;
        /* site-packages of this environment: lib/pythonX.Y/site-packages, as the venv step made it. */
        lib_fd = openat(env_fd, "lib", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (lib_fd < 0 || !(d = fdopendir(lib_fd)))
                return -errno;
        lib_fd = -EBADF;   /* the DIR's now */
        while (!site_packages && (de = readdir(d)))
                if (startswith(de->d_name, "python") && asprintf(&site_packages, "lib/%s/site-packages", de->d_name) < 0)
                        site_packages = NULL;
        closedir(d);
        if (!site_packages)
                return -ENOENT;
        int shared[64];
        size_t n_shared = find_wheels(s, env_fd, site_packages, shared, ELEMENTSOF(shared));
        int r = env_adopt_bytecode_shared(env_fd, s->compiling, site_packages, out_fd, shared, n_shared);
        for (size_t i = 0; i < n_shared; i++)
                close(shared[i]);
        return r;
}

/* In a child (offloop.h): thousands of renames for a large environment. */
static int adopt_child(void *userdata, char **ret_message) {
        EnvStore *s = userdata;
        int n = adopt_bytecode(s);

        /* Marked either way: another try would not do better, and would cost a compile each start. */
        mark_compiled(s->compiling);
        (void) rm_rf_untrusted(s->compile_out);
        return n;
}

/*
 * matplotlib's font list, made once per environment: what each run built again (115 ms, and a Fontconfig error on
 * stderr), since MPLCONFIGDIR is on the run's own tmpfs. After the bytecode, in the sandbox as a run (it is
 * matplotlib's code, and any .pth of the environment's), charged to the uid whose call built the environment, with
 * no host directory to write to: the sandbox hands the file back on its stdout, at most ENV_FONTS_MAX bytes (what
 * is longer is not taken). One file of the expected name is then written into the environment (FONTS),
 * read-only, and a run's boot code puts it in MPLCONFIGDIR when the script imports matplotlib.
 */
#define FONTS ".mcp-python-sandbox-mpl"
/* matplotlib's own step takes a second or two; this much is a step gone wrong. */
#define FONTS_TIMEOUT_USEC (60 * USEC_PER_SEC)

static bool has_matplotlib(const char *env) {
        _cleanup_free_ char *lib = NULL;
        struct dirent *de;
        bool found = false;
        DIR *d;

        if (asprintf(&lib, "%s/lib", env) < 0 || !(d = opendir(lib)))
                return false;
        while (!found && (de = readdir(d))) {
                char p[4096];
                if (!startswith(de->d_name, "python"))
                        continue;
                snprintf(p, sizeof(p), "%s/%s/site-packages/matplotlib/font_manager.py", lib, de->d_name);
                found = access(p, F_OK) >= 0;
        }
        closedir(d);
        return found;
}

/* "fontlist-vV.json", V matplotlib's FontManager.__version__ ("390", "3.11.0": digits and dots): the one name
 * adopted. */
static bool fonts_name_valid(const char *name, size_t len) {
        const char *prefix = "fontlist-v", *suffix = ".json";
        size_t n = strlen(prefix), m = strlen(suffix);

        if (len <= n + m || len > n + m + 16 || memcmp(name, prefix, n) != 0 || memcmp(name + len - m, suffix, m) != 0)
                return false;
        for (size_t i = n; i < len - m; i++)
                if ((name[i] < '0' || name[i] > '9') && name[i] != '.')
                        return false;
        return true;
}

/* The font list the sandbox handed back (its whole stdout: name, newline, contents), into the environment. */
static int fonts_adopt(EnvStore *s, Process *p) {
        _cleanup_close_ int env_fd = -EBADF, fonts_fd = -EBADF, out = -EBADF;
        const Capture *c = &p->out;
        const char *nl;
        char name[64];
        size_t len;
        int r;

        /* All of it in the head, nothing dropped: more than ENV_FONTS_MAX is refused, not cut. */
        if (c->total != c->head_len || c->total > ENV_FONTS_MAX)
                return -EFBIG;
        nl = memchr(c->head, '\n', c->head_len);
        if (!nl || !fonts_name_valid(c->head, (size_t) (nl - c->head)))
                return -EBADMSG;
        len = (size_t) (nl - c->head);
        memcpy(name, c->head, len);
        name[len] = 0;

        env_fd = open(s->compiling, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (env_fd < 0)
                return -errno;
        /* The environment's root is read-only (0555): open it to us for one new directory. */
        if (fchmod(env_fd, 0755) < 0)
                return -errno;
        r = mkdirat(env_fd, FONTS, 0755) < 0 ? -errno : 0;
        if (r >= 0)
                fonts_fd = openat(env_fd, FONTS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        (void) fchmod(env_fd, 0555);
        if (r < 0)
                return r;
        if (fonts_fd < 0)
                return -errno;
        out = openat(fonts_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
        r = out < 0 ? -errno : write_all(out, nl + 1, c->head_len - len - 1);
        if (out >= 0 && r < 0)
                (void) unlinkat(fonts_fd, name, 0);
        (void) fchmod(fonts_fd, 0555);
        return r;
}

static void on_fonts_done(Process *p, void *userdata) {
        EnvStore *s = userdata;
        int r = -EIO;

        s->compile = NULL;
        if (p->exit_code == 0 && !p->signal)
                r = fonts_adopt(s, p);
        if (r < 0) {
                _cleanup_free_ char *err = capture_text(&p->err, NULL), *safe = NULL;
                if (err)
                        safe = utf8_escape_line(err, strlen(err));
                log_info("Making matplotlib's font list for environment %.12s failed (%s%d%s%s)%s%.512s",
                         strrchr(s->compiling, '/') + 1, p->signal ? "signal " : "exit ", p->signal ?: p->exit_code,
                         r != -EIO ? ", " : "", r != -EIO ? strerror(-r) : "", safe && *safe ? ": " : ".",
                         strempty(safe));
        }
        process_free(p);
        compile_clear(s);
        envstore_compile_next(s);
}

static int fonts_start(EnvStore *s) {
        _cleanup_free_ char *marker = NULL;
        uint64_t timeout = MIN(s->config->prepare_timeout_usec, (uint64_t) FONTS_TIMEOUT_USEC);

        if (!s->compiling_python || !has_matplotlib(s->compiling) ||
            asprintf(&marker, "%s/" FONTS, s->compiling) < 0 || access(marker, F_OK) >= 0)
                return -ENOENT;
        return s->compile_spawn(s->compile_userdata, ENV_COMPILE_FONTS, s->compiling, s->compiling_python, NULL,
                                s->compiling_uid, timeout, on_fonts_done, s, &s->compile);
}

static void on_adopted(int n, const char *message, void *userdata) {
        EnvStore *s = userdata;

        s->adopt = offloop_job_free(s->adopt);
        if (n < 0)
                log_warning("Failed to put the bytecode of environment %.12s in place: %s",
                            strrchr(s->compiling, '/') + 1, strerror(-n));
        else
                log_debug("Compiled the bytecode of environment %.12s in %" PRIu64 " ms (%d files)%s.",
                          strrchr(s->compiling, '/') + 1, s->compile_usec / USEC_PER_MSEC, n,
                          s->compile_partial ? "; some files are not valid Python for it" : "");
        if (fonts_start(s) == 0)
                return;
        compile_clear(s);
        envstore_compile_next(s);
}

static void on_compile_done(Process *p, void *userdata) {
        EnvStore *s = userdata;
        int n;

        /* compileall fails when some file is not valid Python for this interpreter (templates, tests for
         * other versions): what could be compiled is, and trying again would not change that. */
        if (p->signal == 0 && !p->timed_out && p->exit_code != 127) {
                s->compile_usec = process_duration_usec(p);
                s->compile_partial = p->exit_code != 0;
                s->compile = NULL;
                process_free(p);
                /* Putting it in place walks the environment: not in the loop. */
                if (offloop_spawn(s->event, "mcp-env-adopt", adopt_child, on_adopted, s, &s->adopt) >= 0)
                        return;
                n = adopt_child(s, NULL);
                on_adopted(n, NULL, s);
                return;
        } else {
                _cleanup_free_ char *err = capture_text(&p->err, NULL), *safe = NULL;
                /* What the sandbox printed, as one line of ours. */
                if (err)
                        safe = utf8_escape_line(err, strlen(err));
                log_info("Compiling the bytecode of environment %.12s failed (%s%d)%s%s",
                         strrchr(s->compiling, '/') + 1, p->signal ? "signal " : "exit ",
                         p->signal ?: p->exit_code, safe && *safe ? ": " : ".", strempty(safe));
        }
        s->compile = NULL;
        process_free(p);
        compile_clear(s);
        envstore_compile_next(s);
}

/* Stop the compile if it still runs, and forget it: its process, scratch directory, lock and environment. */
void compile_clear(EnvStore *s) {
        s->compile = process_free(s->compile);
        s->adopt = offloop_job_free(s->adopt);
        if (sched_ticket_held(&s->compile_ticket))
                scheduler_release(&s->compile_ticket);
        if (s->compile_out)
                (void) rm_rf_untrusted(s->compile_out);
        unlock_entry(&s->compile_lock_path, &s->compile_lock_fd);
        s->compile_out = mfree(s->compile_out);
        s->compiling = mfree(s->compiling);
        s->compiling_python = mfree(s->compiling_python);
}

static void on_compile_turn(SchedTicket *t, void *userdata) {
        envstore_compile_next(userdata);
}

void envstore_compile_next(EnvStore *s) {
        while (!s->compile && !s->adopt && s->compile_spawn && s->compile_queue && s->compile_queue[0]) {
                _cleanup_free_ char *path = NULL, *python = NULL, *marker = NULL, *out = NULL;
                size_t n = strv_length(s->compile_queue);
                int k;

                /* The compile at the head waits for its place (SCHED_COMPILE), charged to whose call built it. */
                if (sched_ticket_waiting(&s->compile_ticket))
                        return;
                if (!sched_ticket_held(&s->compile_ticket)) {
                        k = scheduler_acquire(s->sched, &s->compile_ticket, SCHED_COMPILE, s->compile_uids[0],
                                              on_compile_turn, s);
                        if (k != 0)
                                return;   /* SCHEDULER_QUEUED: on_compile_turn() comes back */
                }
                path = s->compile_queue[0];
                python = s->compile_pythons[0];
                memmove(s->compile_queue, s->compile_queue + 1, n * sizeof(char *));
                memmove(s->compile_pythons, s->compile_pythons + 1, n * sizeof(char *));
                s->compiling_uid = s->compile_uids[0];
                memmove(s->compile_uids, s->compile_uids + 1, (n - 1) * sizeof(uid_t));
                /* Not started below: the place goes back (the next entry may be another user's). */
                k = -ECANCELED;
                if (asprintf(&marker, "%s/" COMPILED, path) < 0 ||
                    asprintf(&out, "%s/.compile-%s-%d", s->envs, strrchr(path, '/') + 1, (int) getpid()) < 0) {
                        scheduler_release(&s->compile_ticket);
                        return;
                }
                if (access(marker, F_OK) >= 0 || access(path, F_OK) < 0)
                        goto next;   /* done already, or collected meanwhile */
                k = lock_entry(s, strrchr(out, '/') + 1, &s->compile_lock_path);
                if (k < 0) {
                        log_warning_errno(k, "Failed to lock %s: %m", out);
                        goto next;
                }
                s->compile_lock_fd = k;
                (void) rm_rf_untrusted(out);
                if (mkdir(out, 0700) < 0) {
                        log_warning_errno(errno, "Failed to create %s: %m", out);
                        unlock_entry(&s->compile_lock_path, &s->compile_lock_fd);
                        goto next;
                }
                k = s->compile_spawn(s->compile_userdata, ENV_COMPILE_BYTECODE, path, python, out, s->compiling_uid,
                                     s->config->prepare_timeout_usec, on_compile_done, s, &s->compile);
                if (k != 0) {
                        if (k == ENV_COMPILE_NO_SANDBOX)
                                log_debug("Not compiling the bytecode of environment %.12s: there is no working "
                                          "sandbox to compile it in.", strrchr(path, '/') + 1);
                        else
                                log_warning_errno(k, "Failed to start compiling the bytecode of %s: %m", path);
                        (void) rm_rf_untrusted(out);
                        unlock_entry(&s->compile_lock_path, &s->compile_lock_fd);
                        goto next;
                }
                s->compiling = TAKE_PTR(path);
                s->compiling_python = TAKE_PTR(python);
                s->compile_out = TAKE_PTR(out);
                continue;
        next:
                scheduler_release(&s->compile_ticket);
        }
}

void envstore_compile_later(EnvStore *s, const char *path, const char *python, uid_t uid) {
        size_t n = strv_length(s->compile_queue);
        uid_t *uids;

        if ((s->compiling && streq(s->compiling, path)) || strv_contains(s->compile_queue, path))
                return;
        uids = reallocarray(s->compile_uids, n + 1, sizeof(uid_t));
        if (!uids)
                return;
        s->compile_uids = uids;
        uids[n] = uid;
        if (strv_extend(&s->compile_pythons, python) < 0)
                return;
        if (strv_extend(&s->compile_queue, path) < 0) {
                free(s->compile_pythons[strv_length(s->compile_pythons) - 1]);
                s->compile_pythons[strv_length(s->compile_pythons) - 1] = NULL;
                return;
        }
        envstore_compile_next(s);
}
