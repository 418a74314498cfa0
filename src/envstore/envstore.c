/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/file.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "envstore.h"
#include "envstore/layout.h"
#include "envstore/pyinstall.h"
#include "envstore/offloop.h"
#include "envstore/storewalk.h"
#include "executor/process.h"
#include "fs-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "sha256.h"
#include "strv.h"
#include "time-util.h"
#include "utf8.h"

#define MARKER ".mcp-python-sandbox-env.json"
/* The bytecode of the environment was compiled (after it was put in place, see envstore_compile_later()). */
#define COMPILED ".mcp-python-sandbox-compiled"
/* An environment used this recently is never collected. What runs on an environment, or waits to, holds it
 * (envstore_hold()), and who looks one up takes its hold at once; a walk keeps what was looked up since it began and
 * puts back what is looked up while it removes it: this is a margin, not what keeps a running script's. */
#define GC_GRACE_SEC (10)
/* How often the store's size is checked against its budget, besides after each build. */
#define GC_INTERVAL_USEC (5 * 60 * USEC_PER_SEC)
/* Sizes this fresh are given to who asks without a walk of their own. */
#define SIZES_FRESH_USEC (10 * USEC_PER_SEC)

typedef struct Build Build;

/* The environments held (envstore_hold()): shared with the holds, which may outlive the store. */
typedef struct EnvHoldList {
        unsigned n_ref;
        EnvHold *first;
} EnvHoldList;

struct EnvHold {
        EnvHoldList *list;
        EnvHold *prev, *next;
        char name[65];
        int lock_fd;            /* the environment's directory, flock()ed shared: other daemons' walks leave it
                                 * alone too; one of the holds of a name has it */
};

struct EnvWaiter {
        EnvWaiter *next;
        Build *build;
        EnvReadyFunc cb;
        void *userdata;
};

struct Build {
        EnvStore *store;
        Build *next;
        char key[65];
        char *tmp, *final;
        char *lock_path;
        int lock_fd;            /* flock()ed while the build runs: other daemons on this store leave tmp alone */
        char *python;
        char **requirements;
        Process *proc;
        uid_t uid;              /* whose call asked first: the build, then its compile, are charged to it */
        SchedTicket ticket;     /* SCHED_BUILD, charged to the uid of the call that asked first; waits, then held */
        bool installing;        /* second step: uv pip install */
        char *venv_template;    /* what `uv venv` makes for this Python, kept to copy (uv builds); NULL: bare */
        char **names;           /* the requirements' names */
        bool offline;           /* this install resolves from the uv cache only (build_offline_first()) */
        bool online;            /* the offline install failed: this is the build again, online */
        EnvLayout layout;       /* what the venv step made (layout.h) */
        OffLoopJob *finishing;  /* the last step (build_complete()), in a child */
        EnvWaiter *waiters;
        uint64_t start_usec;
        sd_event_source *defer;
        int error;
        char *message;
};

struct EnvSizesWaiter {
        EnvSizesWaiter *next;
        EnvStore *store;
        EnvSizesFunc cb;
        void *userdata;
};

struct EnvStore {
        sd_event *event;
        const Config *config;
        Scheduler *sched;
        Reaper *reaper;
        char *uv;
        char *uv_version;
        char *uv_refused;               /* why uv is not used (too old), or NULL */
        char *root, *envs, *uv_cache, *empty;
        Build *builds;
        unsigned n_building;
        uint64_t n_tmp;
        sd_event_source *prune_timer;
        Process *prune;
        EnvHoldList *holds;
        Process *shrink;                /* uv cache clean: the store is over its budget with nothing more to collect */
        char **shrink_packages;         /* what it is to clean when no build runs; NULL with shrink_all: all */
        bool shrink_all, shrink_pending;
        unsigned n_shrinks;             /* since the store was last under its budget or a build ended */
        bool over_logged;               /* "over its budget" said once, until it is under again */
        StoreWalkJob *walk;             /* the one disk walk (and collection) in flight */
        bool walk_again;                /* something changed meanwhile: walk once more after it */
        EnvSizesWaiter *sizes_waiters;
        EnvSizes sizes;                 /* from the last walk */
        uint64_t sizes_usec;            /* when it ended; 0: never */
        sd_event_source *gc_timer;
        char *compile_lock_path;
        int compile_lock_fd;
        char **compile_queue;           /* environments whose bytecode is still to be compiled, oldest first */
        char **compile_pythons;         /* the interpreter of each */
        uid_t *compile_uids;            /* and whose call built it: the compile is charged to them */
        uid_t compiling_uid;            /* whose the compile under way is */
        SchedTicket compile_ticket;     /* SCHED_COMPILE for the compile at the head of the queue, then running */
        SchedTicket walk_ticket;        /* SCHED_WALK, the daemon's: held while the walk runs */
        char *compiling;
        char *compiling_python;
        char *compile_out;              /* the scratch directory the sandboxed compile writes to */
        Process *compile;
        OffLoopJob *adopt;              /* then its bytecode put in place, in a child */
        uint64_t compile_usec;
        bool compile_partial;
        EnvCompileFunc compile_spawn;
        void *compile_userdata;
        Process *warm;                  /* slot_warm(): uv venv, then uv pip freeze, in a slot of its own */
        bool warm_freezing;
        char *warm_slot, *warm_template, *warm_lock_path;
        int warm_lock_fd;
        char **warmed;                  /* the Pythons (executables) done */
        char *warm_python, *warm_python_version;
        SchedTicket warm_ticket;        /* SCHED_BUILD, charged to whose call started it */
};

int envstore_new(EnvStore **ret, sd_event *e, const Config *config, Scheduler *sched, Reaper *reaper,
                 const char *uv_path, bool other_uids) {
        EnvStore *s = calloc(1, sizeof(*s));
        int r;

        if (!s)
                return -ENOMEM;
        s->event = sd_event_ref(e);
        s->config = config;
        s->sched = sched;
        s->reaper = reaper;
        s->compile_lock_fd = -EBADF;
        s->warm_lock_fd = -EBADF;
        s->uv = uv_path ? strdup(uv_path) : NULL;
        s->holds = calloc(1, sizeof(EnvHoldList));
        if (!s->holds) {
                envstore_free(s);
                return -ENOMEM;
        }
        s->holds->n_ref = 1;
        if (asprintf(&s->root, "%s", config->cache_dir) < 0 || asprintf(&s->envs, "%s/envs", config->cache_dir) < 0 ||
            asprintf(&s->uv_cache, "%s/uv", config->cache_dir) < 0 ||
            asprintf(&s->empty, "%s/empty", config->cache_dir) < 0) {
                envstore_free(s);
                return -ENOMEM;
        }
        /* The uv cache and the rest are the daemon's alone; sandboxes of other uids pass through envs/ to the
         * environment they are given (read-only, 0555). Also for a store an older version made 0755. */
        mode_t envs_mode = other_uids ? 0711 : 0700;
        r = mkdir_p(s->envs, envs_mode);
        if (r >= 0)
                r = mkdir_p(s->uv_cache, 0700);
        if (r >= 0)
                r = mkdir_p(s->empty, 0700);
        if (r >= 0 && (chmod(s->envs, envs_mode) < 0 || chmod(s->uv_cache, 0700) < 0 || chmod(s->empty, 0700) < 0))
                r = -errno;
        if (r < 0) {
                envstore_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

static void build_free(Build *b);

/*
 * Work directories in envs/ (.build-*, .compile-*) belong to the daemon that made them, and more than one daemon
 * may share a store (two --stdio daemons of one user on one cache). Each has a lock file beside it, ".lock-" and
 * its name, that its daemon holds with flock() while it works there; cleanup removes only the directories whose
 * lock it can take. A lock file is made before its directory and removed after it.
 */
static int lock_entry(EnvStore *s, const char *name, char **ret_path) {
        _cleanup_free_ char *path = NULL;
        int fd;

        if (asprintf(&path, "%s/.lock-%s", s->envs, name) < 0)
                return -ENOMEM;
        for (unsigned tries = 0;; tries++) {
                struct stat a, b;

                fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0)
                        return -errno;
                if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                        int r = -errno;
                        close(fd);
                        return r;
                }
                /* Its holder may have unlinked it (unlock_entry()) between our open() and flock(): a lock on a
                 * file that is no longer there is none. Build slots are taken again and again. */
                if (fstat(fd, &a) >= 0 && stat(path, &b) >= 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
                        break;
                close(fd);
                if (tries >= 16)
                        return -EWOULDBLOCK;
        }
        *ret_path = TAKE_PTR(path);
        return fd;
}

static void unlock_entry(char **path, int *fd) {
        if (*path)
                (void) unlink(*path);
        *path = mfree(*path);
        *fd = safe_close(*fd);
}
static void envstore_prune_later(EnvStore *s);
static void shrink_start(EnvStore *s);

static void hold_list_unref(EnvHoldList *l) {
        if (l && --l->n_ref == 0)
                free(l);
}

EnvHold *envstore_hold(EnvStore *s, const char *path) {
        const char *name = path ? startswith(path, s->envs) : NULL;
        EnvHold *h;

        if (!name || name[0] != '/')
                return NULL;
        name++;
        if (name[0] == 0 || name[0] == '.' || strlen(name) >= sizeof(h->name) || strchr(name, '/'))
                return NULL;
        h = calloc(1, sizeof(*h));
        if (!h)
                return NULL;
        strcpy(h->name, name);
        h->lock_fd = -EBADF;
        if (!envstore_held(s, name)) {
                /* Never waits: a walk that has it (exclusively) is removing it; the lookup before us failed or
                 * made the walk put it back (storewalk.c's remove_env()). */
                h->lock_fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (h->lock_fd >= 0 && flock(h->lock_fd, LOCK_SH | LOCK_NB) < 0)
                        h->lock_fd = safe_close(h->lock_fd);
        }
        h->list = s->holds;
        h->list->n_ref++;
        h->next = h->list->first;
        if (h->next)
                h->next->prev = h;
        h->list->first = h;
        return h;
}

EnvHold *envstore_hold_release(EnvHold *h) {
        if (!h)
                return NULL;
        if (h->prev)
                h->prev->next = h->next;
        else
                h->list->first = h->next;
        if (h->next)
                h->next->prev = h->prev;
        if (h->lock_fd >= 0) {
                EnvHold *other = h->list->first;
                while (other && !streq(other->name, h->name))
                        other = other->next;
                if (other)
                        other->lock_fd = TAKE_FD(h->lock_fd);
                else
                        h->lock_fd = safe_close(h->lock_fd);
        }
        hold_list_unref(h->list);
        free(h);
        return NULL;
}

bool envstore_held(const EnvStore *s, const char *key) {
        for (EnvHold *h = s->holds->first; h; h = h->next)
                if (streq(h->name, key))
                        return true;
        return false;
}

static void envstore_compile_later(EnvStore *s, const char *path, const char *python, uid_t uid);
static void envstore_compile_next(EnvStore *s);
static void compile_clear(EnvStore *s);

static void slot_warm_clear(EnvStore *s);

EnvStore *envstore_free(EnvStore *s) {
        if (!s)
                return NULL;
        /* Waiting builds first: freeing a running one must not start them. */
        for (Build *b = s->builds; b; b = b->next)
                if (sched_ticket_waiting(&b->ticket))
                        scheduler_release(&b->ticket);
        while (s->builds) {
                Build *b = s->builds;
                s->builds = b->next;
                build_free(b);
        }
        sd_event_source_disable_unref(s->prune_timer);
        sd_event_source_disable_unref(s->gc_timer);
        process_free(s->prune);
        process_free(s->shrink);
        strv_free(s->shrink_packages);
        hold_list_unref(s->holds);
        store_walk_job_free(s->walk);
        while (s->sizes_waiters) {
                EnvSizesWaiter *w = s->sizes_waiters;
                s->sizes_waiters = w->next;
                free(w);
        }
        slot_warm_clear(s);
        strv_free(s->warmed);
        process_free(s->compile);
        offloop_job_free(s->adopt);
        if (s->compile_out)
                (void) rm_rf_untrusted(s->compile_out);
        unlock_entry(&s->compile_lock_path, &s->compile_lock_fd);
        free(s->compile_out);
        free(s->compiling);
        free(s->compiling_python);
        strv_free(s->compile_queue);
        strv_free(s->compile_pythons);
        free(s->compile_uids);
        scheduler_release(&s->compile_ticket);
        scheduler_release(&s->walk_ticket);
        free(s->uv);
        free(s->uv_refused);
        free(s->uv_version);
        free(s->root);
        free(s->envs);
        free(s->uv_cache);
        free(s->empty);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}

void envstore_set_compiler(EnvStore *s, EnvCompileFunc f, void *userdata) {
        s->compile_spawn = f;
        s->compile_userdata = userdata;
        envstore_compile_next(s);
}

/* "0.13.9" -> {0, 13, 9}; a suffix ("-rc1", "+local") after the numbers is ignored. */
static int parse_uv_version(const char *v, unsigned ret[3]) {
        for (size_t i = 0; i < 3; i++) {
                char *end;
                unsigned long n;

                if (!v || *v < '0' || *v > '9')
                        return -EINVAL;
                errno = 0;
                n = strtoul(v, &end, 10);
                if (errno != 0 || n > 100000)
                        return -EINVAL;
                ret[i] = (unsigned) n;
                if (i < 2 && *end != '.')
                        return -EINVAL;
                v = end + 1;
        }
        return 0;
}

int envstore_check_uv_version(const char *version, char **ret_reason) {
        unsigned have[3], need[3];

        if (parse_uv_version(ENVSTORE_UV_VERSION_MIN, need) < 0)
                return -EINVAL;
        if (parse_uv_version(version, have) >= 0 &&
            (have[0] != need[0] ? have[0] > need[0] : have[1] != need[1] ? have[1] > need[1] : have[2] >= need[2]))
                return 0;

        if (asprintf(ret_reason,
                     "uv %s is older than %s, the oldest uv this server works with, so packages cannot be installed "
                     "(the administrator can upgrade uv, e.g. pip install 'uv>=%s', or set uv= to a newer one)",
                     version ?: "of unknown version", ENVSTORE_UV_VERSION_MIN, ENVSTORE_UV_VERSION_MIN) < 0)
                return -ENOMEM;
        return 1;
}

int envstore_refuse_uv(EnvStore *s, const char *reason) {
        char *m = strdup(reason);

        if (!m)
                return -ENOMEM;
        free(s->uv_refused);
        s->uv_refused = m;
        s->uv = mfree(s->uv);
        return 0;
}

void envstore_set_uv_version(EnvStore *s, const char *version) {
        free(s->uv_version);
        s->uv_version = version ? strdup(version) : NULL;
}

const char *envstore_root(const EnvStore *s) {
        return s->envs;
}

const char *envstore_uv_cache(const EnvStore *s) {
        return s->uv_cache;
}

static void hash_str(Sha256 *h, const char *label, const char *value) {
        sha256_update(h, label, strlen(label) + 1);
        sha256_update(h, strempty(value), strlen(strempty(value)) + 1);
}

void envstore_key(const EnvStore *s, const Python *py, const RequirementList *reqs, char ret[65]) {
        const Config *c = s->config;
        Sha256 h;

        sha256_init(&h);
        /* v2: layout verified, read-only on disk, bytecode compiled in the sandbox. Older ones are never used and
         * age out. */
        hash_str(&h, "format", "mcp-python-sandbox environment v2");
        hash_str(&h, "python", py->executable);
        hash_str(&h, "python-version", py->version);
        for (size_t i = 0; i < reqs->n; i++)
                hash_str(&h, "requirement", reqs->items[i].canonical);
        if (reqs->n > 0) {
                /* What decides which files land in the environment. A bare one is made without uv. */
                hash_str(&h, "uv", s->uv_version);
                hash_str(&h, "index-url", c->index_url);
                for (size_t i = 0; c->extra_index_urls[i]; i++)
                        hash_str(&h, "extra-index-url", c->extra_index_urls[i]);
                for (size_t i = 0; c->find_links[i]; i++)
                        hash_str(&h, "find-links", c->find_links[i]);
                hash_str(&h, "source-builds", yes_no(c->allow_source_builds));
        }
        sha256_final_hex(&h, ret);
}

char *envstore_lookup(EnvStore *s, const char *key) {
        char *path = NULL, marker[4096];

        if (asprintf(&path, "%s/%s", s->envs, key) < 0)
                return NULL;
        snprintf(marker, sizeof(marker), "%s/" MARKER, path);
        /* Touch the marker: least recently used environments are collected first. */
        if (utimensat(AT_FDCWD, marker, NULL, 0) < 0) {
                free(path);
                return NULL;
        }
        return path;
}

unsigned envstore_n_building(const EnvStore *s) {
        return s->n_building;
}

unsigned envstore_n_ready(EnvStore *s) {
        DIR *d = opendir(s->envs);
        unsigned n = 0;
        struct dirent *de;

        if (!d)
                return 0;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.')
                        n++;
        closedir(d);
        return n;
}

static void build_free(Build *b) {
        EnvWaiter *w;

        if (!b)
                return;
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
                size_t l = strlen(line);
                char *n = realloc(out, len + l + 2);
                if (!n)
                        break;
                out = n;
                memcpy(out + len, line, l);
                len += l;
                out[len++] = '\n';
                out[len] = 0;
                lines++;
        }
        if (out && len > 0)
                out[len - 1] = 0;
        return out;
}

static char **uv_environment(const EnvStore *s) {
        const Config *c = s->config;
        char **env = strv_new();

        strv_extend(&env, "PATH=/usr/local/bin:/usr/bin:/bin");
        strv_extend(&env, "LANG=C.UTF-8");
        strv_extendf(&env, "HOME=%s", s->root);
        strv_extendf(&env, "UV_CACHE_DIR=%s", s->uv_cache);
        strv_extend(&env, "UV_NO_CONFIG=1");
        strv_extend(&env, "UV_PYTHON_DOWNLOADS=never");
        strv_extend(&env, "UV_NO_PROGRESS=1");
        strv_extend(&env, "NO_COLOR=1");
        strv_extend(&env, "UV_LINK_MODE=hardlink");
        strv_extend(&env, "UV_LOCK_TIMEOUT=120");
        /* uv starts the interpreter to learn about it: it must not write bytecode into a shared Python. */
        strv_extend(&env, "PYTHONDONTWRITEBYTECODE=1");
        if (c->system_certs)
                strv_extend(&env, "UV_SYSTEM_CERTS=1");
        if (!c->allow_source_builds)
                strv_extend(&env, "UV_NO_BUILD=1");
        if (c->offline)
                strv_extend(&env, "UV_OFFLINE=1");
        return env;
}

static void on_step_done(Process *p, void *userdata);
static void venv_template_save(Build *b);
static void slot_warm(EnvStore *s, uid_t uid, const Python *py);

static void on_prune_done(Process *p, void *userdata) {
        EnvStore *s = userdata;
        _cleanup_free_ char *err = capture_text(&p->err, NULL);

        if (p->exit_code != 0)
                log_warning("uv cache prune failed: %s", strempty(err));
        else
                log_info("Pruned the uv cache.");
        s->prune = NULL;
        process_free(p);
}

static int on_prune_timer(sd_event_source *src, uint64_t usec, void *userdata) {
        EnvStore *s = userdata;
        _cleanup_strv_free_ char **env = uv_environment(s);
        char *argv[] = { s->uv, (char *) "cache", (char *) "prune", NULL };
        ProcessOptions o = { .argv = argv, .env = env, .cwd = s->empty, .stdin_fd = -EBADF,
                             .timeout_usec = 600 * USEC_PER_SEC, .head_max = 2048, .tail_max = 2048,
                             .nice = BACKGROUND_NICE, .reaper = s->reaper };

        /* Only when no build is running: pruning waits for uv's cache lock otherwise. */
        if (s->n_building > 0 || s->prune || s->shrink || !s->uv || !env) {
                envstore_prune_later(s);
                return 0;
        }
        if (process_spawn(s->event, &o, on_prune_done, s, &s->prune) < 0)
                log_warning("Failed to start uv cache prune.");
        return 0;
}

static int walk_start(EnvStore *s);

static void on_shrink_done(Process *p, void *userdata) {
        EnvStore *s = userdata;
        _cleanup_free_ char *err = capture_text(&p->err, NULL);

        if (p->exit_code != 0)
                log_warning("uv cache clean failed: %s", strempty(err));
        s->shrink = NULL;
        process_free(p);
        /* What it freed shows in the next walk, which may find more to do. */
        (void) walk_start(s);
}

/* The cache shrinks only when no build runs (uv takes its cache lock; a build would wait for it, or lose what it
 * was about to link); otherwise after the last build ends (build_finish()). */
static void shrink_start(EnvStore *s) {
        _cleanup_strv_free_ char **env = NULL, **argv = NULL;
        ProcessOptions o;

        if (!s->shrink_pending || s->shrink || s->prune || s->n_building > 0 || !s->uv)
                return;
        env = uv_environment(s);
        argv = strv_new();
        if (!env || !argv || strv_extend(&argv, s->uv) < 0 || strv_extend(&argv, "cache") < 0 ||
            strv_extend(&argv, "clean") < 0 || (!s->shrink_all && strv_extend_strv(&argv, s->shrink_packages) < 0))
                return;
        s->shrink_pending = false;
        s->shrink_packages = strv_free(s->shrink_packages);
        o = (ProcessOptions) { .argv = argv, .env = env, .cwd = s->empty, .stdin_fd = -EBADF,
                               .timeout_usec = 600 * USEC_PER_SEC, .head_max = 2048, .tail_max = 2048 };
        if (process_spawn(s->event, &o, on_shrink_done, s, &s->shrink) < 0)
                log_warning("Failed to start uv cache clean.");
}

/* After a build, once no build has run for a while, let uv drop what its cache no longer needs. */
static void envstore_prune_later(EnvStore *s) {
        uint64_t delay = s->config->uv_prune_delay_usec;

        if (delay == 0)
                return;
        if (!s->prune_timer) {
                if (sd_event_add_time_relative(s->event, &s->prune_timer, CLOCK_MONOTONIC, delay,
                                               USEC_PER_SEC, on_prune_timer, s) < 0)
                        return;
                (void) sd_event_source_set_enabled(s->prune_timer, SD_EVENT_ONESHOT);
                return;
        }
        (void) sd_event_source_set_time_relative(s->prune_timer, delay);
        (void) sd_event_source_set_enabled(s->prune_timer, SD_EVENT_ONESHOT);
}

/*
 * Bytecode is compiled after the environment is in place, not during the build: the first run needs only
 * what it imports (compiled in memory, the sandbox cannot write .pyc files), and waiting for all of a
 * package's bytecode first made it wait three times as long (numpy: 1.5 s against 0.5 s). One environment at a
 * time, one process, on the side.
 *
 * The compile starts an interpreter on the environment, so it runs in the sandbox (envstore_set_compiler()),
 * where the environment is read-only and the only writable place is a scratch directory: the base interpreter,
 * with -I -S (no .pth file, no sitecustomize) and -X pycache_prefix, writes the .pyc files there, and the daemon
 * then moves those of the environment's own sources into its __pycache__ directories (env_adopt_bytecode()).
 * Runs that start meanwhile see each .pyc complete or not at all (renamed into place). Once done, COMPILED marks
 * it; an interrupted compile is taken up again at the next start.
 */
static void envstore_compile_next(EnvStore *s);

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
        if (fonts_start(s) >= 0)
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
static void compile_clear(EnvStore *s) {
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

static void envstore_compile_next(EnvStore *s) {
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
                if (k < 0) {
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

static void envstore_compile_later(EnvStore *s, const char *path, const char *python, uid_t uid) {
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

        if (asprintf(&py, "%s/bin/python", b->tmp) < 0)
                return -ENOMEM;
        strv_extend(&argv, b->store->uv);
        strv_extend(&argv, "pip");
        strv_extend(&argv, "install");
        strv_extend(&argv, "--no-config");
        strv_extend(&argv, "--python");
        strv_extend(&argv, py);
        if (!c->allow_source_builds)
                strv_extend(&argv, "--no-build");
        if (c->offline || b->offline)
                strv_extend(&argv, "--offline");
        if (c->index_url && *c->index_url) {
                strv_extend(&argv, "--default-index");
                strv_extend(&argv, c->index_url);
        }
        for (size_t i = 0; c->extra_index_urls[i]; i++) {
                strv_extend(&argv, "--index");
                strv_extend(&argv, c->extra_index_urls[i]);
        }
        for (size_t i = 0; c->find_links[i]; i++) {
                strv_extend(&argv, "--find-links");
                strv_extend(&argv, c->find_links[i]);
        }
        /* Sanitized PEP 508 strings: none starts with "-". */
        strv_extend_strv(&argv, b->requirements);
        if (!argv || !env)
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

/*
 * A build with packages works in a slot: envs/.slot-H-N, H naming the Python (and uv), N the first slot free, held
 * with lock_entry() like any work directory (more than one daemon may share a store). The same path again and
 * again lets uv keep what it learnt about the interpreter there (its cache is keyed by the path): otherwise each
 * build started the new environment's interpreter once more, 50-150 ms. The finished environment is renamed away
 * from the slot, which the next build makes anew.
 */
/* The first free slot for py: its lock's fd, its path and the path of py's template. */
static int take_slot(EnvStore *s, const char *python, const char *python_version, char **ret_lock_path,
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
                return fd;
        }
        return -EBUSY;
}

static int build_take_slot(Build *b, const Python *py) {
        return take_slot(b->store, py->executable, py->version, &b->lock_path, &b->tmp, &b->venv_template);
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
static int venv_template_copy(Build *b) {
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

static void venv_template_save(Build *b) {
        template_save(b->store, b->tmp, b->venv_template);
}

/*
 * Ahead of the first build on a Python (started by the first call on it, a bare environment's): its template made
 * in a slot (uv venv), and uv's interpreter cache filled for that slot's path (uv pip freeze starts the slot's
 * interpreter once), in the background at nice 10. The first build with packages then runs one uv process that
 * starts no interpreter, as the later ones do. Once per Python; nothing if a template is there already.
 */
static void slot_warm_clear(EnvStore *s) {
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
        int fd;

        fd = take_slot(s, s->warm_python, s->warm_python_version, &lock_path, &slot, &template);
        if (fd < 0) {
                slot_warm_clear(s);
                return;
        }
        s->warm_lock_fd = fd;
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

static void slot_warm(EnvStore *s, uid_t uid, const Python *py) {
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

static int build_start(Build *b) {
        _cleanup_strv_free_ char **argv = strv_new(), **env = NULL;
        int r;

        if (!b->requirements[0]) {
                /* A bare environment: the interpreter's own venv module, no uv. */
                env = strv_new();
                strv_extend(&env, "PATH=/usr/local/bin:/usr/bin:/bin");
                strv_extend(&env, "LANG=C.UTF-8");
                strv_extend(&argv, b->python);
                strv_extend(&argv, "-I");
                /* No bytecode of its own modules written into a Python every environment shares. */
                strv_extend(&argv, "-B");
                strv_extend(&argv, "-m");
                strv_extend(&argv, "venv");
                strv_extend(&argv, "--without-pip");
                strv_extend(&argv, b->tmp);
        } else {
                if (!b->store->uv)
                        return -ENOENT;
                b->offline = !b->online && build_offline_first(b);
                /* Every build with packages starts from an empty slot: nothing a failed install left there is
                 * ever used, or started by the uv to come (it runs the slot's bin/python on the host). */
                r = slot_empty(b->tmp);
                if (r < 0)
                        return r;
                /* What `uv venv` made for this Python before, copied: one uv process less. */
                if (venv_template_copy(b) >= 0) {
                        r = build_snapshot(b);
                        if (r < 0)
                                return r;
                        return build_step_install(b);
                }
                r = slot_empty(b->tmp);
                if (r < 0)
                        return r;
                env = uv_environment(b->store);
                strv_extend(&argv, b->store->uv);
                strv_extend(&argv, "venv");
                strv_extend(&argv, "--no-config");
                strv_extend(&argv, "--relocatable");
                strv_extend(&argv, "--python");
                strv_extend(&argv, b->python);
                strv_extend(&argv, b->tmp);
        }
        if (!argv || !env)
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
                for (size_t i = 0; i < reqs->n; i++)
                        strv_extend(&b->requirements, reqs->items[i].canonical);
                for (size_t i = 0; i < reqs->n; i++)
                        strv_extend(&b->names, reqs->items[i].name);
                if (asprintf(&b->final, "%s/%s", s->envs, key) < 0 || !b->python || !b->requirements ||
                    (reqs->n > 0 && !b->names)) {
                        build_free(b);
                        return -ENOMEM;
                }
                if (reqs->n > 0)
                        b->lock_fd = build_take_slot(b, py);
                else if (asprintf(&b->tmp, "%s/.build-%.16s-%d-%" PRIu64, s->envs, key, (int) getpid(),
                                  ++s->n_tmp) < 0)
                        b->lock_fd = -ENOMEM;
                else
                        b->lock_fd = lock_entry(s, strrchr(b->tmp, '/') + 1, &b->lock_path);
                if (b->lock_fd < 0) {
                        r = b->lock_fd;
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

/*
 * A work directory another daemon (or an earlier run of ours) left: out of the way if nobody holds its lock.
 * Renamed to a .trash- name, which the next disk walk removes, in its child. 1: it was stale.
 */
static int take_stale(EnvStore *s, const char *name) {
        _cleanup_free_ char *lock_path = NULL, *from = NULL, *to = NULL;
        _cleanup_close_ int fd = -EBADF;

        fd = lock_entry(s, name, &lock_path);
        if (fd == -EWOULDBLOCK)
                return 0;   /* in use */
        if (fd < 0)
                return fd;
        if (asprintf(&from, "%s/%s", s->envs, name) < 0 ||
            asprintf(&to, "%s/.trash-%s-%d-%" PRIu64, s->envs, name, (int) getpid(), ++s->n_tmp) < 0) {
                unlock_entry(&lock_path, &fd);
                return -ENOMEM;
        }
        if (rename(from, to) < 0 && errno != ENOENT) {
                int r = -errno;
                unlock_entry(&lock_path, &fd);
                return r;
        }
        unlock_entry(&lock_path, &fd);
        return 1;
}

static bool is_ours(EnvStore *s, const char *name) {
        for (Build *b = s->builds; b; b = b->next)
                if (b->tmp && streq(strrchr(b->tmp, '/') + 1, name))
                        return true;
        return s->compile_out && streq(strrchr(s->compile_out, '/') + 1, name);
}

void envstore_cleanup(EnvStore *s) {
        DIR *d = opendir(s->envs);
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d))) {
                char p[4096];
                if (de->d_name[0] != '.') {
                        char m[4096 + 64];
                        /* Built, but its bytecode compile was interrupted: take it up again. */
                        snprintf(p, sizeof(p), "%s/%s", s->envs, de->d_name);
                        snprintf(m, sizeof(m), "%s/" MARKER, p);
                        if (access(m, F_OK) >= 0) {
                                _cleanup_free_ char *text = NULL;
                                _cleanup_json_ json_object *info = NULL;
                                if (read_small_file(m, 64 * 1024, &text) >= 0)
                                        info = json_tokener_parse(text);
                                snprintf(m, sizeof(m), "%s/" COMPILED, p);
                                /* Older environments are never used again: no compile for them. */
                                json_object *format = json_get(info, "format", json_type_int);
                                if (access(m, F_OK) < 0 && json_get_string(info, "python") && format &&
                                    json_object_get_int(format) == 2)
                                        envstore_compile_later(s, p, json_get_string(info, "python"), SCHEDULER_DAEMON_UID);
                        }
                        continue;
                }
                if (startswith(de->d_name, ".lock-")) {
                        /* The lock of a directory that is gone: its daemon died between the two. */
                        struct stat st;
                        snprintf(p, sizeof(p), "%s/%s", s->envs, de->d_name + strlen(".lock-"));
                        if (lstat(p, &st) < 0 && errno == ENOENT && !is_ours(s, de->d_name + strlen(".lock-"))) {
                                _cleanup_free_ char *lp = NULL;
                                int fd = lock_entry(s, de->d_name + strlen(".lock-"), &lp);
                                if (fd >= 0)
                                        unlock_entry(&lp, &fd);
                        }
                        continue;
                }
                /* A template's copy that never got renamed into place: unlocked, so it goes at once. */
                if (startswith(de->d_name, ".venv-") && strstr(de->d_name, ".tmp-") && !is_ours(s, de->d_name)) {
                        if (take_stale(s, de->d_name) > 0)
                                log_debug("Removing an unfinished copy of a venv template: %s", de->d_name);
                        continue;
                }
                if (!startswith(de->d_name, ".build-") && !startswith(de->d_name, ".compile-") &&
                    !startswith(de->d_name, ".slot-"))
                        continue;
                /* Ours are in flight; another daemon's hold their lock; the rest were interrupted. */
                if (is_ours(s, de->d_name))
                        continue;
                if (take_stale(s, de->d_name) > 0)
                        log_info("Removing an interrupted build: %s/%s", s->envs, de->d_name);
        }
        closedir(d);
        /* The walk removes what was put aside, and checks the budget: at start, and then on a timer. */
        (void) envstore_gc(s, NULL);
}

static void sizes_notify(EnvStore *s, const EnvSizes *sizes) {
        EnvSizesWaiter *list = TAKE_PTR(s->sizes_waiters);

        while (list) {
                EnvSizesWaiter *w = list;
                list = w->next;
                w->cb(sizes, w->userdata);
                free(w);
        }
}

static void gc_timer_arm(EnvStore *s);
static void gc_timer_arm_usec(EnvStore *s, uint64_t usec);
static int walk_start(EnvStore *s);

static void on_walk_done(const StoreWalkResult *res, char **removed, void *userdata) {
        EnvStore *s = userdata;
        EnvSizes sizes = {};

        s->walk = store_walk_job_free(s->walk);
        scheduler_release(&s->walk_ticket);
        for (char **name = removed; name && *name; name++) {
                _cleanup_free_ char *p = NULL;
                const char *py = startswith(*name, STORE_WALK_PYTHON_PREFIX);
                if (py) {
                        log_info("Removed the installed Python %s (no environment uses it; over the store budget "
                                 "or unused for too long).", py);
                        continue;
                }
                log_info("Removed environment %.12s (least recently used, over the store budget or unused for too "
                         "long).", *name);
                if (asprintf(&p, "%s/%s", s->envs, *name) >= 0 && s->compiling && streq(s->compiling, p))
                        compile_clear(s);   /* its compile went with it */
        }
        if (res) {
                sizes = (EnvSizes) {
                        .known = true,
                        .store_bytes = res->store_bytes,
                        .cache_bytes = res->cache_bytes,
                        .total_bytes = res->total_bytes,
                };
                s->sizes = sizes;
                s->sizes_usec = now_usec();
                log_debug("Store walk: %" PRIu64 " MiB in the store, %" PRIu64 " MiB in the uv cache, %" PRIu64
                          " MiB of unique inodes in all; %u environments removed (%" PRIu64 " MiB).",
                          res->store_bytes >> 20, res->cache_bytes >> 20, res->total_bytes >> 20, res->n_removed,
                          res->removed_bytes >> 20);
                /* What is left over the budget is the uv cache's: it lets go of the packages no environment left
                 * uses, or of everything when there are none (environments keep their hardlinked files). Twice
                 * at most until a build ends or the store is under again: what is held stays over. */
                if (!res->over) {
                        s->over_logged = false;
                        s->n_shrinks = 0;
                }
                if (s->uv && !s->uv_refused && (res->cache_clean_all || res->cache_clean) && s->n_shrinks < 2) {
                        if (res->over && !s->over_logged)
                                log_info("The store is over its budget (%" PRIu64 " MiB of %" PRIu64 " MiB) with no "
                                         "more environments that may be removed: cleaning %s of the uv cache.",
                                         res->total_bytes >> 20, s->config->store_max_size >> 20,
                                         res->cache_clean_all ? "all" : "the packages no environment uses");
                        s->over_logged = s->over_logged || res->over;
                        s->n_shrinks++;
                        strv_free(s->shrink_packages);
                        s->shrink_packages = NULL;
                        if (!res->cache_clean_all)
                                (void) strv_extend_strv(&s->shrink_packages, res->cache_clean);
                        s->shrink_all = res->cache_clean_all;
                        s->shrink_pending = s->shrink_all || s->shrink_packages;
                        shrink_start(s);
                } else if (res->over && !s->over_logged) {
                        log_warning("The store is over its budget (%" PRIu64 " MiB of %" PRIu64 " MiB) and what is "
                                    "left is in use.", res->total_bytes >> 20, s->config->store_max_size >> 20);
                        s->over_logged = true;
                }
        } else
                log_warning("The store's disk walk failed.");
        envstore_compile_next(s);
        sizes_notify(s, &sizes);
        /* Over the budget with environments only too young to go: walk again as soon as they are not. */
        if (res && res->kept_young)
                gc_timer_arm_usec(s, (GC_GRACE_SEC + 1) * USEC_PER_SEC);
        if (s->walk_again) {
                s->walk_again = false;
                (void) walk_start(s);
        }
}

static int walk_start(EnvStore *s) {
        const Config *c = s->config;
        _cleanup_strv_free_ char **keep = strv_new();
        _cleanup_free_ char *pythons = NULL;
        StoreWalkOptions o = {
                .envs = s->envs,
                .uv_cache = s->uv_cache,
                .max_size = c->store_max_size,
                .max_age_usec = c->store_max_age_usec,
                .grace_sec = GC_GRACE_SEC,
                .marker = MARKER,
                .collect = c->store_max_size > 0 || c->store_max_age_usec > 0,
        };
        int r;

        if (s->walk) {
                s->walk_again = true;
                return 0;
        }
        /* The store's own upkeep, shared by whoever asks for sizes meanwhile: charged to the daemon. */
        r = scheduler_try_acquire(s->sched, &s->walk_ticket, SCHED_WALK, SCHEDULER_DAEMON_UID);
        if (r != 0) {
                log_debug("No disk walk now: max-walks is reached.");
                sizes_notify(s, &(EnvSizes) {});
                return r < 0 ? r : -EBUSY;
        }
        /* Not the one being compiled: collecting it stops its compile (on_walk_done()). */
        for (Build *b = s->builds; b; b = b->next)
                (void) strv_extend(&keep, b->key);
        /* What runs, waits to run or stands ready on an environment holds it. */
        for (EnvHold *h = s->holds->first; h; h = h->next)
                if (!strv_contains(keep, h->name))
                        (void) strv_extend(&keep, h->name);
        if (!keep) {
                scheduler_release(&s->walk_ticket);
                sizes_notify(s, &(EnvSizes) {});
                return -ENOMEM;
        }
        o.keep = keep;
        if (asprintf(&pythons, "%s/pythons", s->root) >= 0) {
                o.pythons = pythons;
                o.pythons_marker = PYINSTALL_MARKER;
        }
        r = store_walk_spawn(s->event, &o, on_walk_done, s, &s->walk);
        if (r < 0) {
                scheduler_release(&s->walk_ticket);
                log_warning_errno(r, "Failed to start the store's disk walk: %m");
                sizes_notify(s, &(EnvSizes) {});
        }
        gc_timer_arm(s);
        return r;
}

static int on_gc_timer(sd_event_source *src, uint64_t usec, void *userdata) {
        EnvStore *s = userdata;

        /* Without a budget there is nothing to enforce: walks only for who asks for sizes. */
        if (s->config->store_max_size == 0 && s->config->store_max_age_usec == 0) {
                gc_timer_arm(s);   /* a reload may set one */
                return 0;
        }
        (void) walk_start(s);
        return 0;
}

static void gc_timer_arm_usec(EnvStore *s, uint64_t usec) {
        if (!s->gc_timer) {
                if (sd_event_add_time_relative(s->event, &s->gc_timer, CLOCK_MONOTONIC, usec, USEC_PER_SEC / 4,
                                               on_gc_timer, s) < 0)
                        return;
        } else
                (void) sd_event_source_set_time_relative(s->gc_timer, usec);
        (void) sd_event_source_set_enabled(s->gc_timer, SD_EVENT_ONESHOT);
}

static void gc_timer_arm(EnvStore *s) {
        gc_timer_arm_usec(s, GC_INTERVAL_USEC);
}

/* The walk goes in a child process (storewalk.h); this only starts it, or asks for one more after the current. */
int envstore_gc(EnvStore *s, const char *keep_key) {
        (void) keep_key;   /* built just now: within the grace period */
        return walk_start(s);
}

int envstore_sizes(EnvStore *s, EnvSizes *ret_cached, EnvSizesFunc cb, void *userdata, EnvSizesWaiter **ret_waiter) {
        EnvSizesWaiter *w, **tail;
        int r;

        if (s->sizes_usec > 0 && now_usec() - s->sizes_usec < SIZES_FRESH_USEC) {
                *ret_cached = s->sizes;
                return 1;
        }
        /* Who asks while a walk is in flight shares it. */
        if (!s->walk) {
                r = walk_start(s);
                if (r < 0)
                        return r;
        }
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        *w = (EnvSizesWaiter) { .store = s, .cb = cb, .userdata = userdata };
        for (tail = &s->sizes_waiters; *tail; tail = &(*tail)->next)
                ;
        *tail = w;
        *ret_waiter = w;
        return 0;
}

void envstore_sizes_cancel(EnvSizesWaiter *w) {
        if (!w)
                return;
        for (EnvSizesWaiter **p = &w->store->sizes_waiters; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        free(w);
                        return;
                }
}

unsigned envstore_n_walks(const EnvStore *s) {
        return s->walk ? 1 : 0;
}
