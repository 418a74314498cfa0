/* SPDX-License-Identifier: MIT */
/*
 * Build slots and venv templates: the directory a build with packages works in (one path per Python and slot
 * number, locked like any work directory), the copy of what `uv venv` made for a Python that spares the next
 * builds one uv process, and the warm-up that makes that template, and fills uv's interpreter cache, ahead of the
 * first build on a Python.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envstore.h"
#include "envstore/envstore-internal.h"
#include "executor/process.h"
#include "fs-util.h"
#include "macro.h"
#include "sha256.h"
#include "strv.h"

/*
 * A build with packages works in a slot: envs/.slot-H-N, H naming the Python (and uv), N the first slot free, held
 * with lock_entry() like any work directory (more than one daemon may share a store). The same path again and
 * again lets uv keep what it learnt about the interpreter there (its cache is keyed by the path): otherwise each
 * build started the new environment's interpreter once more, 50-150 ms. The finished environment is renamed away
 * from the slot, which the next build makes anew.
 */
/* The first free slot for py: its lock's fd, its path and the path of py's template. 0; ENVSTORE_SLOTS_FULL when
 * every slot is held (by builds of ours or of another daemon on the store); -errno. */
static int take_slot(EnvStore *s, const char *python, const char *python_version, int *ret_fd, char **ret_lock_path,
                     char **ret_slot, char **ret_template) {
        _cleanup_free_ char *template = NULL;
        char h[65];
        Sha256 sh;

        sha256_init(&sh);
        hash_str(&sh, "python", python);
        hash_str(&sh, "python-version", python_version);
        hash_str(&sh, "uv", s->uv_version);
        sha256_final_hex(&sh, h);
        if (asprintf(&template, "%s/.venv-%.16s", s->envs, h) < 0)
                return -ENOMEM;
        for (unsigned i = 0; i < 256; i++) {
                _cleanup_free_ char *name = NULL;
                int fd;

                if (asprintf(&name, ".slot-%.16s-%u", h, i) < 0)
                        return -ENOMEM;
                fd = lock_entry(s, name, ret_lock_path);
                if (fd == -EWOULDBLOCK)
                        continue;   /* another build's, ours or another daemon's */
                if (fd < 0)
                        return fd;
                if (asprintf(ret_slot, "%s/%s", s->envs, name) < 0) {
                        unlock_entry(ret_lock_path, &fd);
                        return -ENOMEM;
                }
                /* What an interrupted build left there: gone, or the slot is not used. */
                (void) rm_rf_untrusted(*ret_slot);
                if (access(*ret_slot, F_OK) >= 0 || errno != ENOENT) {
                        *ret_slot = mfree(*ret_slot);
                        unlock_entry(ret_lock_path, &fd);
                        continue;
                }
                *ret_template = TAKE_PTR(template);
                *ret_fd = fd;
                return 0;
        }
        return ENVSTORE_SLOTS_FULL;
}

int build_take_slot(Build *b, const Python *py) {
        return take_slot(b->store, py->executable, py->version, &b->lock_fd, &b->lock_path, &b->tmp,
                         &b->venv_template);
}

/* Copies the directory tree at from (directories, regular files, symbolic links) to the new directory to. */
static int copy_tree_at(int from_fd, int to_parent_fd, const char *to, mode_t mode) {
        _cleanup_close_ int to_fd = -EBADF;
        DIR *d;
        struct dirent *de;
        int r = 0;

        if (mkdirat(to_parent_fd, to, mode & 07777) < 0)
                return -errno;
        to_fd = openat(to_parent_fd, to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (to_fd < 0)
                return -errno;
        d = fdopendir(from_fd);
        if (!d) {
                close(from_fd);
                return -errno;
        }
        while (r >= 0 && (de = readdir(d))) {
                struct stat st;

                /* uv's lock (mode 0666): the install makes its own. */
                if (streq(de->d_name, ".") || streq(de->d_name, "..") || streq(de->d_name, ".lock"))
                        continue;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        r = -errno;
                        break;
                }
                if (S_ISDIR(st.st_mode)) {
                        int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        r = sub < 0 ? -errno : copy_tree_at(sub, to_fd, de->d_name, st.st_mode);
                } else if (S_ISLNK(st.st_mode)) {
                        char target[4096];
                        ssize_t n = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
                        if (n < 0 || (size_t) n >= sizeof(target) - 1)
                                r = n < 0 ? -errno : -ENAMETOOLONG;
                        else {
                                target[n] = 0;
                                r = symlinkat(target, to_fd, de->d_name) < 0 ? -errno : 0;
                        }
                } else if (S_ISREG(st.st_mode) && st.st_size <= 1024 * 1024) {
                        _cleanup_close_ int in = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                        _cleanup_close_ int out = openat(to_fd, de->d_name,
                                                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                                         st.st_mode & 07777);
                        _cleanup_free_ char *data = malloc((size_t) st.st_size + 1);
                        ssize_t n = in >= 0 && data ? read(in, data, (size_t) st.st_size + 1) : -1;
                        if (in < 0 || out < 0 || !data || n != st.st_size)
                                r = -EIO;
                        else
                                r = write_all(out, data, (size_t) n);
                        if (r >= 0 && fchmod(out, st.st_mode & 07777) < 0)   /* past the umask */
                                r = -errno;
                } else
                        r = -EBADMSG;   /* nothing else belongs in what `uv venv` makes */
        }
        closedir(d);
        if (r >= 0 && fchmod(to_fd, mode & 07777) < 0)
                r = -errno;
        return r;
}

/* The slot, a copy of the template; -ENOENT when there is none yet. */
int venv_template_copy(Build *b) {
        int from = open(b->venv_template, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;

        if (from < 0)
                return -errno;
        if (fstat(from, &st) < 0) {
                close(from);
                return -errno;
        }
        return copy_tree_at(from, AT_FDCWD, b->tmp, st.st_mode);
}

/* What `uv venv` just made in the slot, kept as the template for the next builds on this Python: a copy, put in
 * place whole or not at all. Before any package is installed, so only uv's own files. */
static void template_save(EnvStore *s, const char *slot, const char *template) {
        _cleanup_free_ char *tmp = NULL;
        int from = open(slot, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        int r;

        if (from < 0)
                return;
        if (fstat(from, &st) < 0 || asprintf(&tmp, "%s.tmp-%d-%" PRIu64, template, (int) getpid(), ++s->n_tmp) < 0) {
                close(from);
                return;
        }
        r = copy_tree_at(from, AT_FDCWD, tmp, st.st_mode);
        if (r >= 0 && rename(tmp, template) >= 0)
                return;
        (void) rm_rf_untrusted(tmp);
}

void venv_template_save(Build *b) {
        template_save(b->store, b->tmp, b->venv_template);
}

/*
 * Ahead of the first build on a Python (started by the first call on it, a bare environment's): its template made
 * in a slot (uv venv), and uv's interpreter cache filled for that slot's path (uv pip freeze starts the slot's
 * interpreter once), in the background at nice 10. The first build with packages then runs one uv process that
 * starts no interpreter, as the later ones do. Once per Python; nothing if a template is there already.
 */
void slot_warm_clear(EnvStore *s) {
        s->warm = process_free(s->warm);
        if (s->warm_slot)
                (void) rm_rf_untrusted(s->warm_slot);
        unlock_entry(&s->warm_lock_path, &s->warm_lock_fd);
        s->warm_slot = mfree(s->warm_slot);
        s->warm_template = mfree(s->warm_template);
        s->warm_python = mfree(s->warm_python);
        s->warm_python_version = mfree(s->warm_python_version);
        s->warm_freezing = false;
        scheduler_release(&s->warm_ticket);
}

static int slot_warm_spawn(EnvStore *s, char **argv);

static void on_slot_warm_done(Process *p, void *userdata) {
        EnvStore *s = userdata;
        bool ok = p->exit_code == 0 && !p->signal;

        s->warm = NULL;
        process_free(p);
        if (ok && !s->warm_freezing) {
                _cleanup_free_ char *py = NULL;
                /* uv starts the slot's bin/python here, on the host: the slot holds only what `uv venv` just made
                 * in it (take_slot() emptied it, or did not hand it out), never a package's file. */
                if (asprintf(&py, "%s/bin/python", s->warm_slot) >= 0) {
                        char *argv[] = { s->uv, (char *) "pip", (char *) "freeze", (char *) "--no-config",
                                         (char *) "--python", py, NULL };
                        s->warm_freezing = true;
                        if (slot_warm_spawn(s, argv) >= 0)
                                return;
                }
        } else if (ok && access(s->warm_template, F_OK) < 0) {
                /* What uv venv made; the freeze added nothing to it. */
                template_save(s, s->warm_slot, s->warm_template);
        }
        slot_warm_clear(s);
}

static int slot_warm_spawn(EnvStore *s, char **argv) {
        _cleanup_strv_free_ char **env = uv_environment(s);
        ProcessOptions o = {
                .argv = argv,
                .env = env,
                .cwd = s->empty,
                .stdin_fd = -EBADF,
                .timeout_usec = s->config->prepare_timeout_usec,
                .head_max = 4096,
                .tail_max = 4096,
                .nice = BACKGROUND_NICE,
                .reaper = s->reaper,
        };
        if (!env)
                return -ENOMEM;
        return process_spawn(s->event, &o, on_slot_warm_done, s, &s->warm);
}

static void on_slot_warm_turn(SchedTicket *t, void *userdata) {
        EnvStore *s = userdata;
        _cleanup_free_ char *lock_path = NULL, *slot = NULL, *template = NULL;
        int r;

        r = take_slot(s, s->warm_python, s->warm_python_version, &s->warm_lock_fd, &lock_path, &slot, &template);
        if (r != 0) {
                slot_warm_clear(s);
                return;
        }
        s->warm_lock_path = TAKE_PTR(lock_path);
        s->warm_slot = TAKE_PTR(slot);
        s->warm_template = TAKE_PTR(template);
        if (access(s->warm_template, F_OK) >= 0) {
                slot_warm_clear(s);
                return;
        }
        char *argv[] = { s->uv, (char *) "venv", (char *) "--no-config", (char *) "--relocatable", (char *) "--python",
                         s->warm_python, s->warm_slot, NULL };
        if (slot_warm_spawn(s, argv) < 0)
                slot_warm_clear(s);
}

void slot_warm(EnvStore *s, uid_t uid, const Python *py) {
        int r;

        if (!s->uv || s->warm_python || strv_contains(s->warmed, py->executable) ||
            strv_extend(&s->warmed, py->executable) < 0)
                return;
        s->warm_python = strdup(py->executable);
        s->warm_python_version = strdup(py->version);
        if (!s->warm_python || !s->warm_python_version)
                return slot_warm_clear(s);
        /* A build like the others: in its turn, charged to the call that started it. */
        r = scheduler_acquire(s->sched, &s->warm_ticket, SCHED_BUILD, uid, on_slot_warm_turn, s);
        if (r == 0)
                on_slot_warm_turn(&s->warm_ticket, s);
        else if (r != SCHEDULER_QUEUED)
                slot_warm_clear(s);
}
