/* SPDX-License-Identifier: MIT */
/*
 * Keeping the store within its budget: the cleanup of what interrupted builds left, the disk walk (storewalk.h, in
 * a child) that measures the store and the uv cache and collects the least recently used environments, the sizes
 * it hands to who asks, the timer that walks again, and uv's own cache prune and clean.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envstore.h"
#include "envstore/envstore-internal.h"
#include "envstore/pyinstall.h"
#include "envstore/storewalk.h"
#include "executor/process.h"
#include "fs-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "strv.h"
#include "time-util.h"

/* An environment used this recently is never collected. What runs on an environment, or waits to, holds it
 * (envstore_hold()), and who looks one up takes its hold at once; a walk keeps what was looked up since it began and
 * puts back what is looked up while it removes it: this is a margin, not what keeps a running script's. */
#define GC_GRACE_SEC (10)
/* How often the store's size is checked against its budget, besides after each build. */
#define GC_INTERVAL_USEC (5 * 60 * USEC_PER_SEC)
/* Sizes this fresh are given to who asks without a walk of their own. */
#define SIZES_FRESH_USEC (10 * USEC_PER_SEC)

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
void shrink_start(EnvStore *s) {
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
void envstore_prune_later(EnvStore *s) {
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
                        /* The packages go on uv's command line: all of them, or no clean this time. */
                        if (!res->cache_clean_all && strv_extend_strv(&s->shrink_packages, res->cache_clean) < 0)
                                s->shrink_packages = strv_free(s->shrink_packages);
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
                return r < 0 ? r : ENVSTORE_WALKS_FULL;
        }
        /* Not the one being compiled: collecting it stops its compile (on_walk_done()). A keep list that lacks one
         * would let the walk remove it: no walk then. */
        r = keep ? 0 : -ENOMEM;
        for (Build *b = s->builds; r >= 0 && b; b = b->next)
                r = strv_extend(&keep, b->key);
        /* What runs, waits to run or stands ready on an environment holds it. */
        for (EnvHold *h = s->holds->first; r >= 0 && h; h = h->next)
                if (!strv_contains(keep, h->name))
                        r = strv_extend(&keep, h->name);
        if (r < 0) {
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
                return ENVSTORE_SIZES_CACHED;
        }
        /* Who asks while a walk is in flight shares it. */
        if (!s->walk) {
                r = walk_start(s);
                if (r != 0)   /* an error, or ENVSTORE_WALKS_FULL */
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
