/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "envstore/pyinstall.h"
#include "executor/process.h"
#include "log.h"
#include "macro.h"
#include "strv.h"
#include "time-util.h"

/* Longer than any archive of a Python takes to fetch and unpack on a slow link. */
#define INSTALL_TIMEOUT_USEC (15 * 60 * USEC_PER_SEC)
#define REQUEST_MAX 64
/* A request that failed fails again at once for this long: a site that is down costs each call nothing. */
#define FAILURE_MEMORY_USEC (60 * USEC_PER_SEC)
#define FAILURES_MAX 16

typedef struct Failure {
        char *request;
        char *error;
        uint64_t when;
} Failure;

typedef struct Install Install;

struct PyInstallWaiter {
        PyInstallWaiter *next, *prev;
        Install *install;
        PyInstallFunc cb;
        void *userdata;
};

struct Install {
        Install *next;
        PyInstaller *installer;
        uid_t uid;                      /* the first asker's: the scheduler charges the install to it */
        SchedTicket ticket;             /* SCHED_BUILD: waits for its turn, then held while uv runs */
        char *request;
        PyInstallWaiter *waiters;
        Process *proc;
        char *error;
        sd_event_source *defer;         /* delivers a result outside the caller's stack */
};

struct PyInstaller {
        sd_event *event;
        const Config *config;
        Scheduler *sched;
        Reaper *reaper;
        char *uv;
        char *dir;
        Install *installs;              /* the first runs; the rest wait, oldest first */
        Failure failures[FAILURES_MAX]; /* recent ones, a ring */
        size_t next_failure;
};

static void failure_remember(PyInstaller *p, const char *request, const char *error) {
        Failure *f = &p->failures[p->next_failure++ % FAILURES_MAX];

        free(f->request);
        free(f->error);
        *f = (Failure) { .request = strdup(request), .error = strdup(error), .when = now_usec() };
}

static const char *failure_recent(PyInstaller *p, const char *request) {
        for (size_t i = 0; i < FAILURES_MAX; i++) {
                Failure *f = &p->failures[i];
                if (f->request && f->error && streq(f->request, request) && now_usec() - f->when < FAILURE_MEMORY_USEC)
                        return f->error;
        }
        return NULL;
}

/*
 * The child: uv installs, then every installed tree gets its marker and loses its write bits. uv leaves the
 * trees it made writable; the store's are not. $0 is uv, $1 the request, $2 the directory.
 */
static const char install_script[] =
        "set -e\n"
        "\"$0\" python install --no-bin --no-config -- \"$1\"\n"
        "for d in \"$2\"/cpython-*; do\n"
        "  [ -d \"$d\" ] && [ ! -L \"$d\" ] || continue\n"
        "  [ -e \"$d/" PYINSTALL_MARKER "\" ] && continue\n"
        "  : > \"$d/" PYINSTALL_MARKER "\"\n"
        "  chmod -R a-w \"$d\"\n"
        "done\n";

static void waiter_unlink(PyInstallWaiter *w) {
        Install *i = w->install;

        if (w->prev)
                w->prev->next = w->next;
        else
                i->waiters = w->next;
        if (w->next)
                w->next->prev = w->prev;
        w->next = w->prev = NULL;
        w->install = NULL;
}

static Install *install_free(Install *i) {
        if (!i)
                return NULL;
        while (i->waiters) {
                PyInstallWaiter *w = i->waiters;
                waiter_unlink(w);
                free(w);
        }
        process_free(i->proc);
        scheduler_release(&i->ticket);
        sd_event_source_disable_unref(i->defer);
        free(i->request);
        free(i->error);
        free(i);
        return NULL;
}

static void installs_remove(PyInstaller *p, Install *i) {
        for (Install **pp = &p->installs; *pp; pp = &(*pp)->next)
                if (*pp == i) {
                        *pp = i->next;
                        return;
                }
}

static int install_start(Install *i);
static void install_fail_later(Install *i, const char *error);

static void on_install_turn(SchedTicket *t, void *userdata) {
        (void) install_start(userdata);
}

/* The first install that waits asks the scheduler for its turn; it starts when it has it. */
static void install_next(PyInstaller *p) {
        while (p->installs && !p->installs->proc && !p->installs->defer && !p->installs->ticket.user) {
                Install *i = p->installs;
                int r;

                if (!i->waiters) {
                        installs_remove(p, i);
                        install_free(i);
                        continue;
                }
                r = scheduler_acquire(p->sched, &i->ticket, SCHED_BUILD, i->uid, on_install_turn, i);
                if (r == SCHEDULER_QUEUED)
                        return;
                if (r == 0) {
                        if (install_start(i) >= 0)
                                return;
                        continue;
                }
                install_fail_later(i, r == SCHEDULER_USER_QUEUE_FULL
                                              ? "too many of your builds are waiting already (max-builds-per-user)"
                                              : "too many builds are waiting already (max-builds)");
                return;
        }
}

/* Every waiter hears the result; the install is gone afterwards. */
static void install_finish(Install *i) {
        PyInstaller *p = i->installer;

        installs_remove(p, i);
        while (i->waiters) {
                PyInstallWaiter *w = i->waiters;
                PyInstallFunc cb = w->cb;
                void *ud = w->userdata;
                waiter_unlink(w);
                free(w);
                cb(i->error, ud);
        }
        install_free(i);
        install_next(p);
}

static int on_defer(sd_event_source *s, void *userdata) {
        Install *i = userdata;

        i->defer = sd_event_source_disable_unref(i->defer);
        install_finish(i);
        return 0;
}

static void install_fail_later(Install *i, const char *error) {
        free(i->error);
        i->error = strdup(error);
        if (sd_event_add_defer(i->installer->event, &i->defer, on_defer, i) < 0 ||
            sd_event_source_set_enabled(i->defer, SD_EVENT_ONESHOT) < 0)
                install_finish(i);
}

/* uv's error lines, without its progress chatter; at most a few. */
static char *uv_error_text(Process *proc) {
        _cleanup_free_ char *err = capture_text(&proc->err, NULL);
        char *out = NULL, *save = NULL;
        size_t len = 0;
        unsigned n = 0;

        for (char *l = err ? strtok_r(err, "\n", &save) : NULL; l && n < 12; l = strtok_r(NULL, "\n", &save)) {
                const char *t = l + strspn(l, " ");
                if (!startswith(t, "error:") && !startswith(t, "cause:") && !startswith(t, "hint:"))
                        continue;
                strextendf_len(&out, &len, "%s%s", n++ ? "\n" : "", t);
        }
        return out;
}

static void on_install_done(Process *proc, void *userdata) {
        Install *i = userdata;
        _cleanup_free_ char *why = NULL;

        if (proc->exit_code != 0 || proc->signal != 0) {
                why = uv_error_text(proc);
                if (proc->timed_out)
                        (void) asprintf(&i->error, "installing Python %s took longer than %u minutes", i->request,
                                        (unsigned) (INSTALL_TIMEOUT_USEC / USEC_PER_SEC / 60));
                else
                        (void) asprintf(&i->error, "%s", why ?: "uv python install failed");
                if (!i->error)
                        i->error = strdup("uv python install failed");
                log_warning("Installing Python %s failed: %s", i->request, strempty(i->error));
                failure_remember(i->installer, i->request, i->error);
        } else
                log_info("Installed Python %s into %s.", i->request, i->installer->dir);
        i->proc = process_free(i->proc);
        scheduler_release(&i->ticket);
        install_finish(i);
}

static int install_start(Install *i) {
        PyInstaller *p = i->installer;
        const Config *c = p->config;
        _cleanup_strv_free_ char **env = strv_new();
        char *argv[] = { (char *) "/bin/sh", (char *) "-c", (char *) install_script, p->uv, i->request, p->dir, NULL };
        ProcessOptions o = {
                .argv = argv,
                .cwd = p->dir,
                .stdin_fd = -EBADF,
                .timeout_usec = INSTALL_TIMEOUT_USEC,
                .head_max = 4096,
                .tail_max = 4096,
                .nice = BACKGROUND_NICE,
                .reaper = p->reaper,
        };
        int r;

        if (!env ||
            strv_extend(&env, "PATH=/usr/local/bin:/usr/bin:/bin") < 0 ||
            strv_extend(&env, "LANG=C.UTF-8") < 0 ||
            strv_extendf(&env, "HOME=%s", p->dir) < 0 ||
            strv_extendf(&env, "UV_PYTHON_INSTALL_DIR=%s", p->dir) < 0 ||
            strv_extendf(&env, "UV_CACHE_DIR=%s/.uv-cache", p->dir) < 0 ||
            strv_extend(&env, "UV_NO_CONFIG=1") < 0 ||
            strv_extend(&env, "UV_NO_PROGRESS=1") < 0 ||
            strv_extend(&env, "NO_COLOR=1") < 0 ||
            (c->system_certs && strv_extend(&env, "UV_SYSTEM_CERTS=1") < 0) ||
            (c->python_install_mirror && *c->python_install_mirror &&
             strv_extendf(&env, "UV_PYTHON_INSTALL_MIRROR=%s", c->python_install_mirror) < 0) ||
            (c->python_downloads_json_url && *c->python_downloads_json_url &&
             strv_extendf(&env, "UV_PYTHON_DOWNLOADS_JSON_URL=%s", c->python_downloads_json_url) < 0))
                return -ENOMEM;
        o.env = env;

        log_info("Installing Python %s (uv python install%s%s).", i->request,
                 c->python_downloads_json_url && *c->python_downloads_json_url ? ", list from " : "",
                 c->python_downloads_json_url && *c->python_downloads_json_url ? c->python_downloads_json_url : "");
        r = process_spawn(p->event, &o, on_install_done, i, &i->proc);
        if (r < 0) {
                log_warning_errno(r, "Failed to start uv python install: %m");
                install_fail_later(i, "the daemon could not start uv to install a Python");
        }
        return r;
}

/* A version ("3", "3.12", "3.12.1") or specifiers (">=3.12,<3.14"): what both uv and PEP 440 read, no options. */
static bool request_valid(const char *s) {
        size_t n = strlen(s);

        if (n == 0 || n > REQUEST_MAX || s[0] == '-' || s[0] == ' ')
                return false;
        for (const char *c = s; *c; c++)
                if (!strchr("0123456789.<>=!~,* ", *c))
                        return false;
        return strpbrk(s, "0123456789") != NULL;
}

int pyinstaller_new(PyInstaller **ret, sd_event *e, const Config *config, Scheduler *sched, Reaper *reaper,
                    const char *uv_path, const char *dir) {
        PyInstaller *p = calloc(1, sizeof(*p));

        if (!p)
                return -ENOMEM;
        p->event = sd_event_ref(e);
        p->config = config;
        p->sched = sched;
        p->reaper = reaper;
        p->uv = strdup(uv_path);
        p->dir = strdup(dir);
        if (!p->uv || !p->dir) {
                pyinstaller_free(p);
                return -ENOMEM;
        }
        *ret = p;
        return 0;
}

PyInstaller *pyinstaller_free(PyInstaller *p) {
        if (!p)
                return NULL;
        while (p->installs) {
                Install *i = p->installs;
                p->installs = i->next;
                install_free(i);
        }
        for (size_t i = 0; i < FAILURES_MAX; i++) {
                free(p->failures[i].request);
                free(p->failures[i].error);
        }
        sd_event_unref(p->event);
        free(p->uv);
        free(p->dir);
        free(p);
        return NULL;
}

const char *pyinstaller_dir(const PyInstaller *p) {
        return p->dir;
}

int pyinstaller_install(PyInstaller *p, uid_t uid, const char *request, PyInstallFunc cb, void *userdata,
                        PyInstallWaiter **ret) {
        Install *i, **tail;
        PyInstallWaiter *w;

        const char *failed;

        if (!request_valid(request))
                return -EINVAL;
        failed = failure_recent(p, request);
        for (tail = &p->installs; *tail; tail = &(*tail)->next)
                if (streq((*tail)->request, request) && !(*tail)->defer)
                        break;
        i = *tail;
        if (!i) {
                i = calloc(1, sizeof(*i));
                if (!i)
                        return -ENOMEM;
                i->installer = p;
                i->uid = uid;
                i->request = strdup(request);
                if (!i->request) {
                        free(i);
                        return -ENOMEM;
                }
                *tail = i;
                if (failed) {
                        /* Not queued behind others: it only hears the answer it had a moment ago. */
                        installs_remove(p, i);
                        i->next = p->installs;
                        p->installs = i;
                        install_fail_later(i, failed);
                }
        }
        w = calloc(1, sizeof(*w));
        if (!w) {
                if (!i->waiters) {
                        installs_remove(p, i);
                        install_free(i);
                }
                return -ENOMEM;
        }
        *w = (PyInstallWaiter) { .install = i, .cb = cb, .userdata = userdata, .next = i->waiters };
        if (i->waiters)
                i->waiters->prev = w;
        i->waiters = w;
        if (ret)
                *ret = w;
        install_next(p);
        return 0;
}

void pyinstall_waiter_cancel(PyInstallWaiter *w) {
        if (!w)
                return;
        /* The install goes on: it is likely wanted again, and a half-done one would be left for uv to repair. */
        waiter_unlink(w);
        free(w);
}

int pyinstall_scan(const char *dir, PyInstalledFunc found, void *userdata) {
        DIR *d = opendir(dir);
        struct dirent *de;

        if (!d)
                return errno == ENOENT ? 0 : -errno;
        while ((de = readdir(d))) {
                char version[32], exe[PATH_MAX], prefix[PATH_MAX];
                const char *v, *end;
                unsigned major = 0, minor = 0;
                struct stat st;

                v = startswith(de->d_name, "cpython-");
                if (!v)
                        continue;
                end = strchr(v, '-');
                /* "+freethreaded", "+debug": other builds than the one calls ask for. */
                if (!end || (size_t) (end - v) >= sizeof(version) || memchr(v, '+', (size_t) (end - v)) ||
                    !startswith(end, "-linux-"))
                        continue;
                memcpy(version, v, (size_t) (end - v));
                version[end - v] = 0;
                if (sscanf(version, "%u.%u", &major, &minor) != 2)
                        continue;
                if (snprintf(prefix, sizeof(prefix), "%s/%s", dir, de->d_name) >= (int) sizeof(prefix) - 64)
                        continue;
                /* uv's minor-version links ("cpython-3.12-linux-...") point at a tree that is listed itself. */
                if (lstat(prefix, &st) < 0 || !S_ISDIR(st.st_mode))
                        continue;
                /* Not one uv is still unpacking, or one whose install failed half way. */
                if (snprintf(exe, sizeof(exe), "%s/" PYINSTALL_MARKER, prefix) >= (int) sizeof(exe) ||
                    access(exe, F_OK) < 0)
                        continue;
                if (snprintf(exe, sizeof(exe), "%s/bin/python%u.%u", prefix, major, minor) >= (int) sizeof(exe) ||
                    access(exe, X_OK) < 0)
                        continue;
                found(version, exe, prefix, userdata);
        }
        closedir(d);
        return 0;
}

bool pyinstall_owns(const char *dir, const char *path) {
        const char *rest = startswith(path, dir);
        return rest && rest[0] == '/';
}
