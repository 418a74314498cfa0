/* SPDX-License-Identifier: MIT */
/*
 * The build of one environment, a small state machine: queued for its turn (SCHED_BUILD), then `uv venv` (or a
 * copy of the template, slot.c) or a bare environment's `python -m venv`, then `uv pip install`, offline first
 * when the uv cache is fresh and online again in an emptied slot if that was not enough, then the layout check and
 * the rename into place in a child (offloop.h); every waiter of the key hears of the end once, and a finished
 * environment goes to the compile queue (compile.c) and the collector (gc.c). Also envstore_prepare(), which
 * starts a build or joins the one running for its key.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "envstore.h"
#include "envstore/envstore-internal.h"
#include "envstore/layout.h"
#include "executor/offloop.h"
#include "executor/process.h"
#include "fs-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "strv.h"
#include "time-util.h"
#include "utf8.h"

void build_free(Build *b) {
        EnvWaiter *w;

        if (!b)
                return;
        offloop_job_free(b->preparing);
        offloop_job_free(b->finishing);
        while ((w = b->waiters)) {
                b->waiters = w->next;
                free(w);
        }
        process_free(b->proc);
        scheduler_release(&b->ticket);
        sd_event_source_disable_unref(b->defer);
        env_layout_done(&b->layout);
        if (b->tmp)
                (void) rm_rf_untrusted(b->tmp);
        unlock_entry(&b->lock_path, &b->lock_fd);
        free(b->tmp);
        free(b->final);
        free(b->python);
        free(b->message);
        free(b->venv_template);
        strv_free(b->requirements);
        strv_free(b->names);
        free(b);
}

static void build_unlink(Build *b) {
        EnvStore *s = b->store;
        for (Build **p = &s->builds; *p; p = &(*p)->next)
                if (*p == b) {
                        *p = b->next;
                        s->n_building--;
                        return;
                }
}

/* Tell everyone who waits, then forget the build. */
static void build_finish(Build *b) {
        EnvResult res = {
                .error = b->error,
                .path = b->error == 0 ? b->final : NULL,
                .message = b->message,
                .build_usec = now_usec() - b->start_usec,
        };

        build_unlink(b);
        scheduler_release(&b->ticket);   /* the next build may start while we tell the waiters */
        /* A failed build has left nothing behind by the time anyone hears of it. */
        if (b->error != 0 && b->tmp) {
                (void) rm_rf_untrusted(b->tmp);
                free(b->tmp);
                b->tmp = NULL;
        }
        if (b->error == 0)
                log_info("Environment %.12s ready (%s) in %" PRIu64 " ms.", b->key,
                         b->requirements[0] ? "with packages" : "bare", res.build_usec / USEC_PER_MSEC);
        else {
                _cleanup_free_ char *safe = b->message ? utf8_escape_line(b->message, strlen(b->message)) : NULL;
                log_info("Environment %.12s failed: %s", b->key, strempty(safe));
        }

        while (b->waiters) {
                EnvWaiter *w = b->waiters;
                b->waiters = w->next;
                w->cb(&res, w->userdata);
                free(w);
        }
        if (b->error == 0) {
                b->store->n_shrinks = 0;   /* a new environment: the cache may have to shrink once more */
                (void) envstore_gc(b->store, b->key);
                envstore_prune_later(b->store);
                envstore_compile_later(b->store, b->final, b->python, b->uid);
        }
        shrink_start(b->store);
        build_free(b);
}

static int on_defer_finish(sd_event_source *src, void *userdata) {
        build_finish(userdata);
        return 0;
}

static void build_fail(Build *b, int error, const char *message) {
        free(b->message);
        b->message = strdup(message ?: "the environment could not be prepared");
        b->error = error < 0 ? error : -EIO;
        /* Never call back from inside envstore_prepare(): go through the loop. */
        if (sd_event_add_defer(b->store->event, &b->defer, on_defer_finish, b) < 0)
                build_finish(b);
}

/* uv says a lot; keep the lines that explain a failure. */
static char *condense_uv_error(const Capture *err) {
        _cleanup_free_ char *text = capture_text(err, NULL);
        static const char *const noise[] = {
                "Using ", "Resolved ", "Prepared ", "Installed ", "Uninstalled ", "Audited ", " + ", " - ",
                "Creating virtual environment", "Activate with", "Bytecode compiled", "Downloading ", " Downloading",
                "Building ", "Checked ",
        };
        char *out = NULL, *line, *save = NULL;
        size_t len = 0, lines = 0, hints = 0;

        if (!text)
                return NULL;
        for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                bool skip = false;
                for (size_t i = 0; i < ELEMENTSOF(noise); i++)
                        if (startswith(line, noise[i]))
                                skip = true;
                /* uv's own "hint:" lines name the fix ("did you mean to install scikit-learn?"): past the cap too. */
                bool hint = startswith(line, "hint:") && hints < 4 && strlen(line) < 600;
                if (skip || !*line || ((lines >= 12 || len > 1500) && !hint))
                        continue;
                if (hint)
                        hints++;
                if (strextendf_len(&out, &len, "%s\n", line) < 0)
                        break;
                lines++;
        }
        if (out && len > 0)
                out[len - 1] = 0;
        return out;
}

char **uv_environment(const EnvStore *s) {
        const Config *c = s->config;
        char **env = strv_new();

        if (!env ||
            strv_extend(&env, "PATH=/usr/local/bin:/usr/bin:/bin") < 0 ||
            strv_extend(&env, "LANG=C.UTF-8") < 0 ||
            strv_extendf(&env, "HOME=%s", s->root) < 0 ||
            strv_extendf(&env, "UV_CACHE_DIR=%s", s->uv_cache) < 0 ||
            strv_extend(&env, "UV_NO_CONFIG=1") < 0 ||
            strv_extend(&env, "UV_PYTHON_DOWNLOADS=never") < 0 ||
            strv_extend(&env, "UV_NO_PROGRESS=1") < 0 ||
            strv_extend(&env, "NO_COLOR=1") < 0 ||
            strv_extend(&env, "UV_LINK_MODE=hardlink") < 0 ||
            strv_extend(&env, "UV_LOCK_TIMEOUT=120") < 0 ||
            /* uv starts the interpreter to learn about it: it must not write bytecode into a shared Python. */
            strv_extend(&env, "PYTHONDONTWRITEBYTECODE=1") < 0 ||
            (c->system_certs && strv_extend(&env, "UV_SYSTEM_CERTS=1") < 0) ||
            (!c->allow_source_builds && strv_extend(&env, "UV_NO_BUILD=1") < 0) ||
            (c->offline && strv_extend(&env, "UV_OFFLINE=1") < 0))
                return strv_free(env);
        return env;
}

static void on_step_done(Process *p, void *userdata);

static int build_spawn(Build *b, char **argv, char **env) {
        ProcessOptions o = {
                .argv = argv,
                .env = env,
                .cwd = b->store->empty,
                .stdin_fd = -EBADF,
                .timeout_usec = b->store->config->prepare_timeout_usec,
                .head_max = 8192,
                .tail_max = 8192,
                /* A new environment for one call yields the CPU to everybody's runs. */
                .nice = BACKGROUND_NICE,
                .reaper = b->store->reaper,
        };
        b->proc = process_free(b->proc);
        return process_spawn(b->store->event, &o, on_step_done, b, &b->proc);
}

static int build_step_install(Build *b) {
        const Config *c = b->store->config;
        _cleanup_strv_free_ char **argv = strv_new(), **env = uv_environment(b->store);
        _cleanup_free_ char *py = NULL;

        if (!argv || !env || asprintf(&py, "%s/bin/python", b->tmp) < 0)
                return -ENOMEM;
        if (strv_extend(&argv, b->store->uv) < 0 ||
            strv_extend(&argv, "pip") < 0 ||
            strv_extend(&argv, "install") < 0 ||
            strv_extend(&argv, "--no-config") < 0 ||
            strv_extend(&argv, "--python") < 0 ||
            strv_extend(&argv, py) < 0 ||
            (!c->allow_source_builds && strv_extend(&argv, "--no-build") < 0) ||
            ((c->offline || b->offline) && strv_extend(&argv, "--offline") < 0) ||
            (c->index_url && *c->index_url &&
             (strv_extend(&argv, "--default-index") < 0 || strv_extend(&argv, c->index_url) < 0)))
                return -ENOMEM;
        for (size_t i = 0; c->extra_index_urls[i]; i++)
                if (strv_extend(&argv, "--index") < 0 || strv_extend(&argv, c->extra_index_urls[i]) < 0)
                        return -ENOMEM;
        for (size_t i = 0; c->find_links[i]; i++)
                if (strv_extend(&argv, "--find-links") < 0 || strv_extend(&argv, c->find_links[i]) < 0)
                        return -ENOMEM;
        /* Sanitized PEP 508 strings: none starts with "-". */
        if (strv_extend_strv(&argv, b->requirements) < 0)
                return -ENOMEM;
        b->installing = true;
        return build_spawn(b, argv, env);
}

/* 0: in place. 1: refused, *ret_message says why. -errno otherwise. */
static int build_complete(Build *b, char **ret_message) {
        _cleanup_json_ json_object *info = json_object_new_object(), *reqs = json_object_new_array();
        _cleanup_close_ int dirfd = -EBADF, fd = -EBADF;
        const char *text;
        int r;

        dirfd = open(b->tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dirfd < 0)
                return -errno;
        /* uv's lock for installs into this environment: there will be none. */
        if (unlinkat(dirfd, ".lock", 0) < 0 && errno != ENOENT)
                return -errno;
        /* What the packages installed, before anything can start an interpreter on it. */
        r = env_layout_verify(dirfd, &b->layout, ret_message);
        if (r != 0)
                return r;

        for (size_t i = 0; b->requirements[i]; i++)
                json_object_array_add(reqs, json_object_new_string(b->requirements[i]));
        json_add_int(info, "format", 2);   /* envstore_key()'s v2: verified, read-only, compiled in the sandbox */
        json_add_string(info, "key", b->key);
        json_add_string(info, "python", b->python);
        json_add(info, "requirements", TAKE_PTR(reqs));
        json_add_int(info, "created", (int64_t) time(NULL));
        fd = openat(dirfd, MARKER, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        text = json_object_to_json_string_ext(info, JSON_C_TO_STRING_PRETTY);
        r = write_all(fd, text, strlen(text));
        if (r >= 0)
                r = write_all(fd, "\n", 1);
        if (r < 0)
                return r;
        fd = safe_close(fd);

        /* Read-only on disk, not only through the sandbox's mounts. */
        r = env_make_readonly(dirfd);
        if (r < 0)
                return r;

        /* Atomic: the environment appears complete or not at all. */
        if (rename(b->tmp, b->final) < 0) {
                if (errno != EEXIST && errno != ENOTEMPTY)
                        return -errno;
                /* Someone else completed the same key first; theirs is as good as ours. */
                (void) rm_rf_untrusted(b->tmp);
        }
        free(b->tmp);
        b->tmp = NULL;
        if (access(b->final, F_OK) < 0)
                return -errno;
        return 0;
}

/* After the venv step: remember what it made, to tell it from what the packages add. */
static int build_snapshot(Build *b) {
        _cleanup_close_ int dirfd = open(b->tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        if (dirfd < 0)
                return -errno;
        env_layout_done(&b->layout);
        return env_layout_snapshot(dirfd, &b->layout);
}

static void build_completed(Build *b, int r, const char *why);
static int build_start(Build *b);
static int build_complete_child(void *userdata, char **ret_message);
static void on_build_completed(int r, const char *message, void *userdata);

static void on_step_done(Process *p, void *userdata) {
        Build *b = userdata;
        _cleanup_free_ char *why = NULL;
        int r;

        if (p->exit_code != 0 && !p->signal && b->installing && b->offline) {
                /* Not all it needs is in the uv cache (a dependency never fetched, a version never downloaded):
                 * the same install, online. */
                _cleanup_free_ char *detail = condense_uv_error(&p->err);
                _cleanup_free_ char *safe = detail ? utf8_escape_line(detail, strlen(detail)) : NULL;
                log_debug("Environment %.12s: the uv cache alone was not enough (%s); resolving online.", b->key,
                          strempty(safe));
                /* Not in the slot the failed uv left: it may have put some of the wheels in place, and a wheel's
                 * data files can replace bin/python, which the next uv would start here, outside any sandbox.
                 * The build starts over, from an emptied slot and a fresh copy of the template. */
                b->offline = false;
                b->online = true;
                b->installing = false;
                r = build_start(b);
                if (r < 0)
                        build_fail(b, r, "the environment build could not be started again");
                return;
        }
        if (p->exit_code != 0 || p->signal) {
                if (p->timed_out)
                        r = asprintf(&why, "preparing the environment took longer than %" PRIu64 "s and was stopped",
                                     b->store->config->prepare_timeout_usec / USEC_PER_SEC);
                else if (p->signal)
                        r = asprintf(&why, "the installer (uv) crashed: it was killed by signal %d (SIG%s)", p->signal,
                                     strempty(sigabbrev_np(p->signal)));
                else {
                        _cleanup_free_ char *detail = condense_uv_error(&p->err);
                        r = asprintf(&why, "%s", detail && *detail ? detail : "the installer failed without saying why");
                }
                if (r < 0)
                        why = NULL;
                return build_fail(b, -EIO, why);
        }

        if (!b->installing && b->venv_template && access(b->venv_template, F_OK) < 0)
                venv_template_save(b);
        if (!b->installing) {
                r = build_snapshot(b);
                if (r < 0) {
                        char m[256];
                        snprintf(m, sizeof(m), "the new virtual environment could not be read: %s", strerror(-r));
                        return build_fail(b, r, m);
                }
        }
        if (!b->installing && b->requirements[0]) {
                r = build_step_install(b);
                if (r < 0)
                        build_fail(b, r, "uv could not be started");
                return;
        }

        /* Verifying what the packages installed, and making it read-only, walk the environment: not in the loop. */
        if (offloop_spawn(b->store->event, "mcp-env-finish", build_complete_child, on_build_completed, b,
                          &b->finishing) >= 0)
                return;
        r = build_complete(b, &why);
        build_completed(b, r, why);
}

static void build_completed(Build *b, int r, const char *why) {
        if (r == 0) {
                /* Renamed into place (or someone else's was there first, and ours removed). */
                free(b->tmp);
                b->tmp = NULL;
        }
        if (r == 1) {
                _cleanup_free_ char *safe = utf8_escape_line(why, strlen(why));   /* holds a wheel's path */
                log_warning("Environment %.12s (%s): %s.", b->key, strempty(b->requirements[0]), strempty(safe));
                return build_fail(b, -EPERM, why);
        }
        if (r < 0) {
                char m[256];
                snprintf(m, sizeof(m), "the finished environment could not be put in place: %s", strerror(-r));
                return build_fail(b, r, m);
        }
        build_finish(b);
}

static int build_complete_child(void *userdata, char **ret_message) {
        return build_complete(userdata, ret_message);
}

static void on_build_completed(int r, const char *message, void *userdata) {
        Build *b = userdata;
        /* message lives in the job's buffer: copied before the job goes. */
        _cleanup_free_ char *why = message ? strdup(message) : NULL;

        b->finishing = offloop_job_free(b->finishing);
        if (r == 1 && !why)
                return build_completed(b, r, "the environment was refused");
        build_completed(b, r, why);
}

/* PyPI's index pages may be used this long (its max-age), as uv would when the headers reach it. */
#define INDEX_FRESH_SEC (600)

/*
 * Offline first: when the default index (PyPI) is used and uv's cache has a page fetched within INDEX_FRESH_SEC for
 * every name asked for, the install resolves from the cache alone (--offline) and is tried online only if that
 * was not enough (on_step_done()). A page as fresh as this is what uv itself would use without asking, had the
 * index's cache headers reached it; this machine's HTTPS proxy strips them, and each online resolve fetched every
 * page again.
 */
static bool build_offline_first(Build *b) {
        const Config *c = b->store->config;
        _cleanup_free_ char *latest = NULL;
        struct dirent *de;
        DIR *d;
        time_t now = time(NULL);

        if (c->offline || (c->index_url && *c->index_url) || c->extra_index_urls[0] || c->find_links[0] ||
            !b->names || !b->names[0])
                return false;
        d = opendir(b->store->uv_cache);
        if (!d)
                return false;
        /* uv's current index cache is the simple-vN with the highest N. */
        unsigned best = 0;
        while ((de = readdir(d))) {
                const char *v = startswith(de->d_name, "simple-v");
                char *end;
                unsigned long n = v ? strtoul(v, &end, 10) : 0;
                if (v && *v && !*end && n > best) {
                        best = (unsigned) n;
                        free(latest);
                        latest = strdup(de->d_name);
                }
        }
        closedir(d);
        if (!latest)
                return false;
        for (size_t i = 0; b->names[i]; i++) {
                _cleanup_free_ char *page = NULL;
                struct stat st;
                if (asprintf(&page, "%s/%s/pypi/%s.rkyv", b->store->uv_cache, latest, b->names[i]) < 0 ||
                    stat(page, &st) < 0 || now - st.st_mtime > INDEX_FRESH_SEC || st.st_mtime > now + 60)
                        return false;
        }
        return true;
}

/* The slot emptied: 0 when nothing is left at path, -ENOTEMPTY when something could not be removed. */
static int slot_empty(const char *path) {
        (void) rm_rf_untrusted(path);
        if (access(path, F_OK) >= 0)
                return -ENOTEMPTY;
        return errno == ENOENT ? 0 : -errno;
}

/* The `uv venv` step, for a Python without a template yet, into the emptied slot. */
static int build_step_venv(Build *b) {
        _cleanup_strv_free_ char **argv = strv_new(), **env = uv_environment(b->store);

        if (!argv || !env ||
            strv_extend(&argv, b->store->uv) < 0 ||
            strv_extend(&argv, "venv") < 0 ||
            strv_extend(&argv, "--no-config") < 0 ||
            strv_extend(&argv, "--relocatable") < 0 ||
            strv_extend(&argv, "--python") < 0 ||
            strv_extend(&argv, b->python) < 0 ||
            strv_extend(&argv, b->tmp) < 0)
                return -ENOMEM;
        return build_spawn(b, argv, env);
}

/*
 * In a child: every build with packages starts from an empty slot (nothing a failed install left there is ever
 * used, or started by the uv to come: it runs the slot's bin/python on the host), then holds a copy of what
 * `uv venv` made for this Python before (one uv process less). 0: copied. 1: no template, the slot empty. Some 70
 * files made and as many removed: under a busy disk that took the event loop up to 110 ms, every user's calls
 * waiting behind it.
 */
static int build_prepare_child(void *userdata, char **ret_message) {
        Build *b = userdata;
        int r;

        r = slot_empty(b->tmp);
        if (r < 0)
                return r;
        if (venv_template_copy(b) >= 0)
                return 0;
        r = slot_empty(b->tmp);
        return r < 0 ? r : 1;
}

static void on_build_prepared(int r, const char *message, void *userdata) {
        Build *b = userdata;

        b->preparing = offloop_job_free(b->preparing);
        if (r == 0) {
                /* What the copy holds, read here: the finishing step checks the environment against it. */
                r = build_snapshot(b);
                if (r >= 0)
                        r = build_step_install(b);
        } else if (r == 1)
                r = build_step_venv(b);
        if (r == -ETIME)
                build_fail(b, r, "preparing the environment's directory took too long and was stopped");
        else if (r < 0)
                build_fail(b, r, "the environment build could not be started");
}

static int build_start(Build *b) {
        _cleanup_strv_free_ char **argv = strv_new(), **env = NULL;

        if (b->requirements[0]) {
                if (!b->store->uv)
                        return -ENOENT;
                b->offline = !b->online && build_offline_first(b);
                if (offloop_spawn_full(b->store->event, "mcp-env-slot", 4096, b->store->config->prepare_timeout_usec,
                                       build_prepare_child, on_build_prepared, b, &b->preparing) < 0)
                        /* No child to be had: here, then, as it was done before. */
                        on_build_prepared(build_prepare_child(b, NULL), NULL, b);
                return 0;
        }
        /* A bare environment: the interpreter's own venv module, no uv. */
        if (strv_extend(&env, "PATH=/usr/local/bin:/usr/bin:/bin") < 0 ||
            strv_extend(&env, "LANG=C.UTF-8") < 0 ||
            strv_extend(&argv, b->python) < 0 ||
            strv_extend(&argv, "-I") < 0 ||
            /* No bytecode of its own modules written into a Python every environment shares. */
            strv_extend(&argv, "-B") < 0 ||
            strv_extend(&argv, "-m") < 0 ||
            strv_extend(&argv, "venv") < 0 ||
            strv_extend(&argv, "--without-pip") < 0 ||
            strv_extend(&argv, b->tmp) < 0)
                return -ENOMEM;
        return build_spawn(b, argv, env);
}

/* The build's turn has come (SCHED_BUILD): its uv processes start. */
static void on_build_turn(SchedTicket *t, void *userdata) {
        Build *b = userdata;
        int r;

        r = build_start(b);
        if (r == -ENOENT)
                build_fail(b, r,
                           b->store->uv_refused ?: "uv is not available to the sandbox service, so packages cannot "
                                                   "be installed (the administrator can install uv or set uv= in "
                                                   "the configuration)");
        else if (r < 0)
                build_fail(b, r, "the environment build could not be started");
}

int envstore_prepare(EnvStore *s, uid_t uid, const char *key, const Python *py, const RequirementList *reqs, EnvReadyFunc cb,
                     void *userdata, EnvWaiter **ret_waiter) {
        Build *b = NULL;
        EnvWaiter *w = NULL;
        int r;

        for (Build *x = s->builds; x; x = x->next)
                if (streq(x->key, key))
                        b = x;

        /* The first call on a Python (a bare environment): get its build slot ready for the packages to come. */
        if (reqs->n == 0)
                slot_warm(s, uid, py);

        if (!b) {
                b = calloc(1, sizeof(*b));
                if (!b)
                        return -ENOMEM;
                b->store = s;
                b->uid = uid;
                b->lock_fd = -EBADF;
                memcpy(b->key, key, 65);
                b->start_usec = now_usec();
                b->python = strdup(py->executable);
                b->requirements = strv_new();
                r = 0;
                for (size_t i = 0; r >= 0 && i < reqs->n; i++)
                        r = strv_extend(&b->requirements, reqs->items[i].canonical);
                for (size_t i = 0; r >= 0 && i < reqs->n; i++)
                        r = strv_extend(&b->names, reqs->items[i].name);
                if (r < 0 || asprintf(&b->final, "%s/%s", s->envs, key) < 0 || !b->python || !b->requirements) {
                        build_free(b);
                        return -ENOMEM;
                }
                if (reqs->n > 0)
                        r = build_take_slot(b, py);
                else if (asprintf(&b->tmp, "%s/.build-%.16s-%d-%" PRIu64, s->envs, key, (int) getpid(),
                                  ++s->n_tmp) < 0)
                        r = -ENOMEM;
                else {
                        b->lock_fd = lock_entry(s, strrchr(b->tmp, '/') + 1, &b->lock_path);
                        r = MIN(b->lock_fd, 0);
                }
                if (r != 0) {   /* an error, or ENVSTORE_SLOTS_FULL */
                        build_free(b);
                        return r;
                }
                b->next = s->builds;
                s->builds = b;
                s->n_building++;
                log_info("Preparing environment %.12s for Python %s: %s", key, py->version,
                         reqs->n ? "installing packages" : "bare");

                /* No more builds at once than max-builds (and the uid's share): the others wait their turn, round
                 * robin among the users who asked. A build is charged to the uid that asked first. */
                r = scheduler_acquire(s->sched, &b->ticket, SCHED_BUILD, uid, on_build_turn, b);
                if (r == 0)
                        on_build_turn(&b->ticket, b);
                else if (r != SCHEDULER_QUEUED)
                        build_fail(b, r < 0 ? r : -EBUSY, "the environment build could not be queued");
        }

        if (cb) {
                w = calloc(1, sizeof(*w));
                if (!w)
                        return -ENOMEM;
                *w = (EnvWaiter) { .build = b, .cb = cb, .userdata = userdata };
                /* Last: the calls that waited for the build go on in the order they came. */
                EnvWaiter **tail = &b->waiters;
                while (*tail)
                        tail = &(*tail)->next;
                *tail = w;
        }
        if (ret_waiter)
                *ret_waiter = w;
        return 0;
}

void envstore_waiter_cancel(EnvWaiter *w) {
        if (!w)
                return;
        /* The build goes on: the next request for these packages will find it warm. */
        for (EnvWaiter **p = &w->build->waiters; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        break;
                }
        free(w);
}
