/* SPDX-License-Identifier: MIT */
/*
 * The environment store itself: making and freeing it, the uv version and its check, the keys, the lookup of a
 * built environment, the holds that keep one from being collected, and the lock files that tell this daemon's
 * work directories from another's. Builds are in build.c and slot.c, bytecode and font lists in compile.c, the
 * disk walk and the budget in gc.c; what they share is in envstore-internal.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envstore.h"
#include "envstore/envstore-internal.h"
#include "fs-util.h"
#include "macro.h"
#include "sha256.h"
#include "strv.h"

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

/*
 * Work directories in envs/ (.build-*, .compile-*) belong to the daemon that made them, and more than one daemon
 * may share a store (two --stdio daemons of one user on one cache). Each has a lock file beside it, ".lock-" and
 * its name, that its daemon holds with flock() while it works there; cleanup removes only the directories whose
 * lock it can take. A lock file is made before its directory and removed after it.
 */
int lock_entry(EnvStore *s, const char *name, char **ret_path) {
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

void unlock_entry(char **path, int *fd) {
        if (*path)
                (void) unlink(*path);
        *path = mfree(*path);
        *fd = safe_close(*fd);
}
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

void hash_str(Sha256 *h, const char *label, const char *value) {
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
