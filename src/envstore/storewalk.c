/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "envstore/storewalk.h"
#include "fs-util.h"
#include "macro.h"
#include "strv.h"

/* Deeper than any environment or uv cache gets; what lies below is not counted. */
#define WALK_MAX_DEPTH 128

#define OWNER_SHARED (-1)
/* An installed Python younger than this stays, used or not. */
#define PYTHON_GRACE_SEC (10 * 60)
/* Met only in the uv cache so far: the environment that links it next owns it with the cache. */
#define OWNER_CACHE (-2)

typedef struct Inode {
        dev_t dev;
        ino_t ino;
        uint64_t bytes;
        uint32_t nlink;         /* 0: an empty slot */
        uint32_t seen;          /* links met in the walk */
        int32_t owner;          /* the environment all links met so far are in (and the uv cache), or
                                 * OWNER_SHARED, or OWNER_CACHE */
        bool cached;            /* first met in the uv cache: counted in its share */
} Inode;

typedef struct WalkEnv {
        char *name;
        time_t used;
        struct timespec used_ts;        /* the same, to the nanosecond: a lookup meanwhile changes it */
        uint64_t exclusive;     /* freed by removing it: inodes with all their links in it, or in it and the uv
                                 * cache (those once the cache lets go of its packages) */
        uint64_t exclusive_cached;   /* the part of it counted in the cache's share */
        bool removed;
} WalkEnv;

typedef struct Walk {
        Inode *table;
        size_t n_table, n_used;
        dev_t dev;              /* not crossing into other file systems */
        uint64_t store_bytes, cache_bytes;
        bool in_cache;
} Walk;

static size_t inode_hash(dev_t dev, ino_t ino) {
        uint64_t h = (uint64_t) ino * UINT64_C(0x9E3779B97F4A7C15) ^ (uint64_t) dev * UINT64_C(0xC2B2AE3D27D4EB4F);
        return (size_t) (h ^ (h >> 29));
}

static int walk_grow(Walk *w) {
        size_t n = w->n_table ? w->n_table * 2 : 4096;
        Inode *t = calloc(n, sizeof(Inode));

        if (!t)
                return -ENOMEM;
        for (size_t i = 0; i < w->n_table; i++) {
                Inode *x = &w->table[i];
                if (x->nlink == 0)
                        continue;
                size_t j = inode_hash(x->dev, x->ino) & (n - 1);
                while (t[j].nlink != 0)
                        j = (j + 1) & (n - 1);
                t[j] = *x;
        }
        free(w->table);
        w->table = t;
        w->n_table = n;
        return 0;
}

static int walk_add(Walk *w, const struct stat *st, int owner) {
        size_t j;
        int r;

        if ((w->n_used + 1) * 4 > w->n_table * 3) {
                r = walk_grow(w);
                if (r < 0)
                        return r;
        }
        j = inode_hash(st->st_dev, st->st_ino) & (w->n_table - 1);
        while (w->table[j].nlink != 0) {
                Inode *x = &w->table[j];
                if (x->dev == st->st_dev && x->ino == st->st_ino) {
                        x->seen++;
                        if (x->owner == OWNER_CACHE && owner >= 0)
                                x->owner = owner;
                        else if (x->owner != owner)
                                x->owner = OWNER_SHARED;
                        return 0;
                }
                j = (j + 1) & (w->n_table - 1);
        }
        w->table[j] = (Inode) {
                .dev = st->st_dev,
                .ino = st->st_ino,
                .bytes = (uint64_t) st->st_blocks * 512,
                /* A directory's links are its subdirectories' "..": it is where it is, once. */
                .nlink = S_ISDIR(st->st_mode) || st->st_nlink == 0 ? 1 : (uint32_t) MIN(st->st_nlink, UINT32_MAX),
                .seen = 1,
                .owner = owner,
                .cached = w->in_cache,
        };
        w->n_used++;
        if (w->in_cache)
                w->cache_bytes += w->table[j].bytes;
        else
                w->store_bytes += w->table[j].bytes;
        return 0;
}

/* Takes fd. Errors below the top (a file gone meanwhile, a directory we may not read) are skipped. */
static int walk_dir(Walk *w, int fd, int owner, unsigned depth) {
        DIR *d = fdopendir(fd);
        struct dirent *de;
        int r = 0;

        if (!d) {
                safe_close(fd);
                return -errno;
        }
        while ((de = readdir(d))) {
                struct stat st;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != w->dev)
                        continue;
                r = walk_add(w, &st, owner);
                if (r < 0)
                        break;
                if (S_ISDIR(st.st_mode) && depth < WALK_MAX_DEPTH) {
                        int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub < 0)
                                continue;
                        r = walk_dir(w, sub, owner, depth + 1);
                        if (r == -ENOMEM)
                                break;
                        r = 0;
                }
        }
        closedir(d);
        return r;
}

static int walk_path(Walk *w, int atfd, const char *path, int owner) {
        struct stat st;
        int fd = openat(atfd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0) {
                safe_close(fd);
                return -errno;
        }
        if (w->dev == 0)
                w->dev = st.st_dev;
        if (st.st_dev != w->dev) {
                safe_close(fd);
                return 0;
        }
        (void) walk_add(w, &st, owner);
        return walk_dir(w, fd, owner, 1);
}

typedef struct WalkPython {
        char *name;
        time_t installed;
        uint64_t bytes;         /* inodes first seen in it */
        bool used;              /* an environment or build left in the store runs on it */
} WalkPython;

/* The interpreter home a venv's pyvenv.cfg names ("home = /x/bin"), or NULL. */
static char *venv_home(int envs_fd, const char *name) {
        char p[512], *text = NULL, *save = NULL, *home = NULL;
        _cleanup_close_ int fd = -EBADF;
        ssize_t n;

        if (snprintf(p, sizeof(p), "%s/pyvenv.cfg", name) >= (int) sizeof(p))
                return NULL;
        fd = openat(envs_fd, p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        text = calloc(1, 8193);
        if (!text)
                return NULL;
        n = read(fd, text, 8192);
        for (char *l = n > 0 ? strtok_r(text, "\n", &save) : NULL; l; l = strtok_r(NULL, "\n", &save)) {
                const char *v = startswith(l, "home");
                if (!v)
                        continue;
                v += strspn(v, " \t");
                if (*v++ != '=')
                        continue;
                v += strspn(v, " \t");
                home = strdup(v);
                break;
        }
        free(text);
        return home;
}

/* Marks the Pythons an environment (or a build, a compile) in the store runs on. */
static void pythons_mark_used(WalkPython *pys, size_t n_pys, const char *dir, const char *real_dir, int envs_fd,
                              const char *name) {
        _cleanup_free_ char *home = venv_home(envs_fd, name);

        if (!home)
                return;
        for (size_t i = 0; i < n_pys; i++)
                for (const char *base = dir; base; base = base == dir ? real_dir : NULL) {
                        const char *rest = startswith(home, base), *r2;
                        if (rest && rest[0] == '/' && (r2 = startswith(rest + 1, pys[i].name)) && r2[0] == '/')
                                pys[i].used = true;
                }
}

/* The Pythons installed in dir, counted; what an earlier collection left half removed goes first. */
static int pythons_walk(Walk *w, const StoreWalkOptions *o, int dir_fd, WalkPython **ret, size_t *ret_n) {
        WalkPython *pys = NULL;
        size_t n = 0;
        struct dirent *de;
        DIR *d = fdopendir(fcntl(dir_fd, F_DUPFD_CLOEXEC, 3));
        int r = 0;

        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                char p[4096];
                struct stat st;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                if (startswith(de->d_name, ".trash-")) {
                        snprintf(p, sizeof(p), "%s/%s", o->pythons, de->d_name);
                        (void) rm_rf_untrusted(p);
                        continue;
                }
                if (fstatat(dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (!S_ISDIR(st.st_mode)) {
                        /* uv's minor-version links, its lock: counted as what they are. */
                        (void) walk_add(w, &st, OWNER_SHARED);
                        continue;
                }
                uint64_t before = w->store_bytes;
                r = walk_path(w, dir_fd, de->d_name, OWNER_SHARED);
                if (r == -ENOMEM)
                        break;
                r = 0;
                /* Only a finished install has the marker: uv's work directories are counted, never collected. */
                if (de->d_name[0] == '.' || snprintf(p, sizeof(p), "%s/%s", de->d_name, o->pythons_marker) >= (int) sizeof(p) ||
                    fstatat(dir_fd, p, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                WalkPython *m = realloc(pys, (n + 1) * sizeof(*pys));
                if (!m) {
                        r = -ENOMEM;
                        break;
                }
                pys = m;
                pys[n] = (WalkPython) { .name = strdup(de->d_name), .installed = st.st_mtime,
                                        .bytes = w->store_bytes - before };
                if (!pys[n].name) {
                        r = -ENOMEM;
                        break;
                }
                n++;
        }
        closedir(d);
        *ret = pys;
        *ret_n = n;
        return r;
}

/* Collects the Pythons nothing runs on, by the same rules as environments; uv's links to them go too. */
static void pythons_collect(const StoreWalkOptions *o, int dir_fd, WalkPython *pys, size_t n_pys, time_t now,
                            uint64_t *total, StoreWalkResult *res, StoreWalkRemovedFunc removed, void *userdata) {
        bool any = false;

        for (size_t i = 0; o->collect && i < n_pys; i++) {
                uint64_t age = now > pys[i].installed ? (uint64_t) (now - pys[i].installed) : 0;
                bool too_old = o->max_age_usec > 0 && age * USEC_PER_SEC > o->max_age_usec;
                bool over = o->max_size > 0 && *total > o->max_size;
                char trash[512], path[4096], name[512];

                /* A Python installed for a call whose build still waits for its turn has no environment yet. */
                if (pys[i].used || (!too_old && !over) || age < MAX(o->grace_sec, PYTHON_GRACE_SEC))
                        continue;
                if (snprintf(trash, sizeof(trash), ".trash-%s-%d", pys[i].name, (int) getpid()) >= (int) sizeof(trash) ||
                    renameat(dir_fd, pys[i].name, dir_fd, trash) < 0)
                        continue;
                snprintf(path, sizeof(path), "%s/%s", o->pythons, trash);
                (void) rm_rf_untrusted(path);
                *total -= MIN(*total, pys[i].bytes);
                res->removed_bytes += pys[i].bytes;
                any = true;
                if (removed) {
                        snprintf(name, sizeof(name), STORE_WALK_PYTHON_PREFIX "%s", pys[i].name);
                        removed(name, pys[i].bytes, too_old ? "unused for too long" : "over the store budget", userdata);
                }
        }
        if (!any)
                return;
        DIR *d = fdopendir(fcntl(dir_fd, F_DUPFD_CLOEXEC, 3));
        struct dirent *de;
        if (!d)
                return;
        rewinddir(d);
        while ((de = readdir(d))) {
                struct stat st, target;
                if (fstatat(dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) >= 0 && S_ISLNK(st.st_mode) &&
                    fstatat(dir_fd, de->d_name, &target, 0) < 0 && errno == ENOENT)
                        (void) unlinkat(dir_fd, de->d_name, 0);
        }
        closedir(d);
}

static int compare_least_recent_first(const void *a, const void *b) {
        const WalkEnv *x = a, *y = b;
        return x->used < y->used ? -1 : x->used > y->used;
}

static int marker_mtime(int envs_fd, const char *name, const char *marker, struct timespec *ret) {
        char p[512];
        struct stat st;

        if (snprintf(p, sizeof(p), "%s/%s", name, marker) >= (int) sizeof(p))
                return -ENAMETOOLONG;
        if (fstatat(envs_fd, p, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        *ret = st.st_mtim;
        return 0;
}

static bool timespec_eq(const struct timespec *a, const struct timespec *b) {
        return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/*
 * Out of the store's namespace first (a lookup after this finds nothing and builds anew), then removed: 0.
 * REMOVE_ENV_IN_USE and left in place when a daemon holds it (envstore_hold() keeps a shared flock() on it: a run of
 * any daemon on this store) or a lookup touched its marker since the walk saw it (seen), before the rename or during
 * it. -errno.
 */
#define REMOVE_ENV_IN_USE 1
static int remove_env(const char *envs, int envs_fd, const char *name, const char *marker,
                      const struct timespec *seen) {
        char trash[512], path[4096];
        struct timespec now;
        _cleanup_close_ int fd = -EBADF;

        if (snprintf(trash, sizeof(trash), ".trash-%s-%d", name, (int) getpid()) >= (int) sizeof(trash))
                return -ENAMETOOLONG;
        fd = openat(envs_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (flock(fd, LOCK_EX | LOCK_NB) < 0)
                return errno == EWOULDBLOCK ? REMOVE_ENV_IN_USE : -errno;
        if (marker_mtime(envs_fd, name, marker, &now) < 0 || !timespec_eq(&now, seen))
                return REMOVE_ENV_IN_USE;
        if (renameat(envs_fd, name, envs_fd, trash) < 0)
                return -errno;
        /* Looked up between the check and the rename: it goes back, untouched. */
        if (marker_mtime(envs_fd, trash, marker, &now) < 0 || !timespec_eq(&now, seen)) {
                if (renameat(envs_fd, trash, envs_fd, name) >= 0)
                        return REMOVE_ENV_IN_USE;
        }
        snprintf(path, sizeof(path), "%s/%s", envs, trash);
        return rm_rf_untrusted(path);
}

/* A distribution's name as PEP 503 normalizes it ("Foo_Bar.baz" -> "foo-bar-baz"); NULL when it is not one. */
static char *package_normalize(const char *name, size_t n) {
        char *p, *q;

        if (n == 0 || n > 200 || !isalnum((unsigned char) name[0]))
                return NULL;
        p = q = malloc(n + 1);
        if (!p)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                char c = name[i];
                if (c == '-' || c == '_' || c == '.') {
                        if (q > p && q[-1] != '-')
                                *q++ = '-';
                } else if (isalnum((unsigned char) c))
                        *q++ = (char) tolower((unsigned char) c);
                else {
                        free(p);
                        return NULL;
                }
        }
        while (q > p && q[-1] == '-')
                q--;
        *q = 0;
        return p;
}

static void names_add(char ***names, const char *name, size_t n) {
        char *x;

        if (!*names)
                return;
        x = package_normalize(name, n);
        if (!x)
                return;
        if (!strv_contains(*names, x) && strv_extend(names, x) < 0)
                *names = strv_free(*names);
        free(x);
}

/* A directory below dir_fd, opened without following links, or NULL. */
static DIR *opendir_at(int dir_fd, const char *path) {
        int fd = openat(dir_fd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d;

        if (fd < 0)
                return NULL;
        d = fdopendir(fd);
        if (!d)
                safe_close(fd);
        return d;
}

/* The length of name without suffix, when it ends with it; else all of it. */
static size_t strip_len(const char *name, const char *suffix) {
        size_t n = strlen(name);
        return endswith(name, suffix) ? n - strlen(suffix) : n;
}

/* The distributions installed in an environment (lib/<python>/site-packages/<name>-<version>.dist-info). */
static void env_packages(int envs_fd, const char *env, char ***names) {
        char p[1024];
        DIR *lib;
        struct dirent *de;

        if (snprintf(p, sizeof(p), "%s/lib", env) >= (int) sizeof(p))
                return;
        lib = opendir_at(envs_fd, p);
        if (!lib)
                return;
        while ((de = readdir(lib))) {
                DIR *site;
                struct dirent *e;

                if (de->d_name[0] == '.')
                        continue;
                if (snprintf(p, sizeof(p), "%s/lib/%s/site-packages", env, de->d_name) >= (int) sizeof(p))
                        continue;
                site = opendir_at(envs_fd, p);
                if (!site)
                        continue;
                while ((e = readdir(site))) {
                        const char *dash = strchr(e->d_name, '-');
                        if (dash && endswith(e->d_name, ".dist-info"))
                                names_add(names, e->d_name, (size_t) (dash - e->d_name));
                }
                closedir(site);
        }
        closedir(lib);
}

/* The packages the uv cache holds something of: <bucket>/pypi/<name> and <bucket>/<kind>/<digest>/<name> in its
 * wheels-, sdists- and simple- buckets (a "<name>.rkyv" file in the last). */
static void cache_packages(const char *cache, char ***names) {
        DIR *top = opendir(cache);
        struct dirent *b;

        if (!top)
                return;
        while ((b = readdir(top))) {
                DIR *kinds;
                struct dirent *k;
                char p[4096];

                if (!startswith(b->d_name, "wheels-v") && !startswith(b->d_name, "sdists-v") &&
                    !startswith(b->d_name, "simple-v"))
                        continue;
                snprintf(p, sizeof(p), "%s/%s", cache, b->d_name);
                kinds = opendir(p);
                if (!kinds)
                        continue;
                while ((k = readdir(kinds))) {
                        bool pypi = streq(k->d_name, "pypi");
                        DIR *d1;
                        struct dirent *e1;

                        if (k->d_name[0] == '.')
                                continue;
                        snprintf(p, sizeof(p), "%s/%s/%s", cache, b->d_name, k->d_name);
                        d1 = opendir(p);
                        if (!d1)
                                continue;
                        while ((e1 = readdir(d1))) {
                                if (e1->d_name[0] == '.')
                                        continue;
                                if (pypi) {
                                        names_add(names, e1->d_name, strip_len(e1->d_name, ".rkyv"));
                                        continue;
                                }
                                DIR *d2;
                                struct dirent *e2;
                                snprintf(p, sizeof(p), "%s/%s/%s/%s", cache, b->d_name, k->d_name, e1->d_name);
                                d2 = opendir(p);
                                if (!d2)
                                        continue;
                                while ((e2 = readdir(d2)))
                                        if (e2->d_name[0] != '.')
                                                names_add(names, e2->d_name, strip_len(e2->d_name, ".rkyv"));
                                closedir(d2);
                        }
                        closedir(d1);
                }
                closedir(kinds);
        }
        closedir(top);
}

int store_walk(const StoreWalkOptions *o, StoreWalkResult *ret, StoreWalkRemovedFunc removed, void *userdata) {
        _cleanup_close_ int envs_fd = -EBADF, pythons_fd = -EBADF;
        _cleanup_free_ char *pythons_real = NULL;
        Walk w = {};
        WalkEnv *envs = NULL;
        size_t n_envs = 0;
        WalkPython *pys = NULL;
        size_t n_pys = 0;
        StoreWalkResult res = {};
        DIR *d;
        struct dirent *de;
        time_t now = time(NULL);
        uint64_t total, removed_cached = 0;
        int r = 0;

        envs_fd = open(o->envs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (envs_fd < 0)
                return -errno;

        /* What an earlier collection (of any daemon on this store) left half removed. */
        d = fdopendir(fcntl(envs_fd, F_DUPFD_CLOEXEC, 3));
        if (!d)
                return -errno;
        while ((de = readdir(d)))
                if (startswith(de->d_name, ".trash-")) {
                        char p[4096];
                        snprintf(p, sizeof(p), "%s/%s", o->envs, de->d_name);
                        (void) rm_rf_untrusted(p);
                }
        closedir(d);

        {
                struct stat st;
                if (fstat(envs_fd, &st) < 0)
                        return -errno;
                w.dev = st.st_dev;
        }
        if (o->uv_cache) {
                w.in_cache = true;
                (void) walk_path(&w, AT_FDCWD, o->uv_cache, OWNER_CACHE);
                w.in_cache = false;
        }
        if (o->pythons && o->pythons_marker) {
                pythons_fd = open(o->pythons, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                pythons_real = realpath(o->pythons, NULL);
                if (pythons_fd >= 0 && pythons_walk(&w, o, pythons_fd, &pys, &n_pys) == -ENOMEM) {
                        r = -ENOMEM;
                        goto finish;
                }
        }

        /* The duplicate shares the file offset with the one read above. */
        d = fdopendir(fcntl(envs_fd, F_DUPFD_CLOEXEC, 3));
        if (!d) {
                r = -errno;
                goto finish;
        }
        rewinddir(d);
        while ((de = readdir(d))) {
                struct stat st;
                struct timespec used;
                int owner = OWNER_SHARED;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                if (fstatat(envs_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                /* Builds, compiles and locks are counted, never collected here; so is what has no marker. */
                if (de->d_name[0] != '.' && S_ISDIR(st.st_mode) &&
                    marker_mtime(envs_fd, de->d_name, o->marker, &used) >= 0) {
                        WalkEnv *n = realloc(envs, (n_envs + 1) * sizeof(*envs));
                        if (!n) {
                                r = -ENOMEM;
                                break;
                        }
                        envs = n;
                        envs[n_envs] = (WalkEnv) { .name = strdup(de->d_name), .used = used.tv_sec, .used_ts = used };
                        if (!envs[n_envs].name) {
                                r = -ENOMEM;
                                break;
                        }
                        owner = (int) n_envs++;
                }
                if (S_ISDIR(st.st_mode))
                        r = walk_path(&w, envs_fd, de->d_name, owner);
                else
                        r = walk_add(&w, &st, owner);
                if (r == -ENOMEM)
                        break;
                r = 0;
        }
        closedir(d);
        if (r < 0)
                goto finish;

        for (size_t i = 0; i < w.n_table; i++) {
                Inode *x = &w.table[i];
                if (x->nlink != 0 && x->owner >= 0 && x->seen >= x->nlink) {
                        envs[x->owner].exclusive += x->bytes;
                        if (x->cached)
                                envs[x->owner].exclusive_cached += x->bytes;
                }
        }
        total = w.store_bytes + w.cache_bytes;

        if (n_envs > 0)   /* qsort() may not be handed NULL, even for nothing */
                qsort(envs, n_envs, sizeof(*envs), compare_least_recent_first);
        for (size_t i = 0; o->collect && i < n_envs; i++) {
                uint64_t age = now > envs[i].used ? (uint64_t) (now - envs[i].used) : 0;
                bool too_old = o->max_age_usec > 0 && age * USEC_PER_SEC > o->max_age_usec;
                bool over = o->max_size > 0 && total > o->max_size;

                if (!too_old && !over)
                        continue;
                /* Ages count from the walk's start: what was looked up since is as young as can be. */
                if (strv_contains(o->keep, envs[i].name))
                        continue;
                if (age < o->grace_sec) {
                        res.kept_young = true;
                        continue;
                }
                /* Held by a daemon, or used since the walk saw it: it stays. */
                if (remove_env(o->envs, envs_fd, envs[i].name, o->marker, &envs[i].used_ts) != 0)
                        continue;
                total -= MIN(total, envs[i].exclusive);
                res.removed_bytes += envs[i].exclusive;
                removed_cached += envs[i].exclusive_cached;
                envs[i].removed = true;
                res.n_removed++;
                if (removed)
                        removed(envs[i].name, envs[i].exclusive, too_old ? "unused for too long" : "over the store budget",
                                userdata);
        }

        /* What is left, built or being built, keeps its Python. */
        if (n_pys > 0) {
                d = fdopendir(fcntl(envs_fd, F_DUPFD_CLOEXEC, 3));
                if (d) {
                        rewinddir(d);
                        while ((de = readdir(d)))
                                if (!streq(de->d_name, ".") && !streq(de->d_name, "..") &&
                                    !startswith(de->d_name, ".trash-"))
                                        pythons_mark_used(pys, n_pys, o->pythons, pythons_real, envs_fd, de->d_name);
                        closedir(d);
                } else
                        for (size_t i = 0; i < n_pys; i++)
                                pys[i].used = true;
                pythons_collect(o, pythons_fd, pys, n_pys, now, &total, &res, removed, userdata);
        }

        res.store_bytes = w.store_bytes - MIN(w.store_bytes, res.removed_bytes - removed_cached);
        res.cache_bytes = w.cache_bytes - MIN(w.cache_bytes, removed_cached);
        res.total_bytes = total;
        res.n_envs = (unsigned) n_envs - res.n_removed;
        res.over = o->max_size > 0 && total > o->max_size;
        /* The environments removed leave their packages' files in the uv cache (the budget above counts them
         * freed), and still over with every environment that may go gone, the cache must give up more: what no
         * environment left uses; when there is nothing of that, all of it. */
        if ((res.over || removed_cached > 0) && o->collect && o->uv_cache) {
                _cleanup_strv_free_ char **used = strv_new(), **cached = strv_new();

                for (size_t i = 0; used && i < n_envs; i++)
                        if (!envs[i].removed)
                                env_packages(envs_fd, envs[i].name, &used);
                cache_packages(o->uv_cache, &cached);
                if (!used || !cached) {
                        r = -ENOMEM;
                        goto finish;
                }
                res.cache_clean = strv_new();
                for (char **n = cached; *n; n++)
                        if (!strv_contains(used, *n) && strv_extend(&res.cache_clean, *n) < 0) {
                                strv_free(res.cache_clean);
                                r = -ENOMEM;
                                goto finish;
                        }
                if (!res.cache_clean[0])
                        res.cache_clean = strv_free(res.cache_clean);
                /* Not while environments are only too young to go: the next walk takes them. */
                res.cache_clean_all = res.over && !res.cache_clean && !res.kept_young;
        }
        *ret = res;
finish:
        for (size_t i = 0; i < n_envs; i++)
                free(envs[i].name);
        free(envs);
        for (size_t i = 0; i < n_pys; i++)
                free(pys[i].name);
        free(pys);
        free(w.table);
        return r;
}
