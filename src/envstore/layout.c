/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layout.h"
#include "macro.h"
#include "sha256.h"

/* Deeper than any package nests its files; a tree deeper than this is refused, not walked. */
#define MAX_DEPTH 48
/* A RECORD larger than this is not searched for the path's owner. */
#define MAX_RECORD (16 * 1024 * 1024)
/* All RECORDs read for one refusal together, and the .dist-info directories looked at: a wheel that wants a refusal
 * must not make the daemon read gigabytes for it. */
#define MAX_RECORDS_BYTES (64 * 1024 * 1024)
#define MAX_DIST_INFOS 4096

void env_layout_done(EnvLayout *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->entries[i].path);
        free(l->entries);
        free(l->site_packages);
        *l = (EnvLayout) {};
}

static int digest_fd(int fd, char ret[65]) {
        Sha256 h;

        sha256_init(&h);
        for (;;) {
                char buf[65536];
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                sha256_update(&h, buf, (size_t) n);
        }
        sha256_final_hex(&h, ret);
        return 0;
}

/* What identifies an entry's contents: a file's bytes, a symlink's target. */
static int digest_entry(int dirfd, const char *name, mode_t type, char ret[65]) {
        if (type == S_IFREG) {
                _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
                if (fd < 0)
                        return -errno;
                return digest_fd(fd, ret);
        }
        if (type == S_IFLNK) {
                char target[PATH_MAX];
                ssize_t n = readlinkat(dirfd, name, target, sizeof(target));
                if (n < 0)
                        return -errno;
                sha256_hex(target, (size_t) n, ret);
                return 0;
        }
        ret[0] = 0;
        return 0;
}

/* Walk the tree below dirfd, depth first, calling f for each entry (before descending into a directory). f
 * returns <0 to stop with an error, 1 to stop, 0 to go on, 2 to go on without descending. */
typedef int (*WalkFunc)(int dirfd, const char *name, const char *path, const struct stat *st, void *userdata);

static int walk(int dirfd, const char *prefix, unsigned depth, WalkFunc f, void *userdata) {
        _cleanup_close_ int fd = -EBADF;
        DIR *d;
        struct dirent *de;
        int r = 0;

        if (depth > MAX_DEPTH)
                return -ELOOP;
        fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        d = fdopendir(fd);
        if (!d)
                return -errno;
        fd = -EBADF;   /* the DIR owns it now */
        while (r == 0 && (errno = 0, de = readdir(d))) {
                _cleanup_free_ char *path = NULL;
                struct stat st;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                if (asprintf(&path, "%s%s%s", prefix, *prefix ? "/" : "", de->d_name) < 0) {
                        r = -ENOMEM;
                        break;
                }
                if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        r = -errno;
                        break;
                }
                r = f(dirfd, de->d_name, path, &st, userdata);
                if (r == 2) {
                        r = 0;
                        continue;
                }
                if (r == 0 && S_ISDIR(st.st_mode)) {
                        _cleanup_close_ int sub =
                                openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub < 0) {
                                r = -errno;
                                break;
                        }
                        r = walk(sub, path, depth + 1, f, userdata);
                }
        }
        if (r == 0 && errno != 0)
                r = -errno;
        closedir(d);
        return r;
}

static int snapshot_one(int dirfd, const char *name, const char *path, const struct stat *st, void *userdata) {
        EnvLayout *l = userdata;
        mode_t type = st->st_mode & S_IFMT;
        EnvLayoutEntry *e;
        int r;

        if (type != S_IFREG && type != S_IFDIR && type != S_IFLNK)
                return -EBADF;
        e = reallocarray(l->entries, l->n + 1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        l->entries = e;
        e = &l->entries[l->n];
        *e = (EnvLayoutEntry) { .type = type, .path = strdup(path) };
        if (!e->path)
                return -ENOMEM;
        l->n++;
        r = digest_entry(dirfd, name, type, e->digest);
        if (r < 0)
                return r;
        /* lib/pythonX.Y/site-packages */
        if (type == S_IFDIR && !l->site_packages && startswith(path, "lib/python") && endswith(path, "/site-packages") &&
            !strchr(path + strlen("lib/"), '/')[strlen("/site-packages")]) {
                l->site_packages = strdup(path);
                if (!l->site_packages)
                        return -ENOMEM;
        }
        return 0;
}

int env_layout_snapshot(int dirfd, EnvLayout *ret) {
        EnvLayout l = {};
        int r;

        r = walk(dirfd, "", 0, snapshot_one, &l);
        if (r == 0 && !l.site_packages)
                r = -ENOENT;
        if (r < 0) {
                env_layout_done(&l);
                return r;
        }
        *ret = l;
        return 0;
}

static const EnvLayoutEntry *layout_find(const EnvLayout *l, const char *path) {
        for (size_t i = 0; i < l->n; i++)
                if (streq(l->entries[i].path, path))
                        return &l->entries[i];
        return NULL;
}

/* path is below dir (not dir itself). */
static bool below(const char *path, const char *dir) {
        const char *rest = startswith(path, dir);
        return rest && rest[0] == '/' && rest[1];
}

typedef struct Verify {
        const EnvLayout *snapshot;
        char *path;             /* the first path that breaks a rule */
        const char *rule;
} Verify;

static int verify_one(int dirfd, const char *name, const char *path, const struct stat *st, void *userdata) {
        Verify *v = userdata;
        const EnvLayoutEntry *e = layout_find(v->snapshot, path);
        mode_t type = st->st_mode & S_IFMT;
        char digest[65];
        int r;

        if (e) {
                if (type != e->type)
                        v->rule = "replaces what the virtual environment itself is made of";
                else if (type != S_IFDIR) {
                        r = digest_entry(dirfd, name, type, digest);
                        if (r < 0)
                                return r;
                        if (!streq(digest, e->digest))
                                v->rule = "changes what the virtual environment itself is made of";
                }
        } else if (type != S_IFREG && type != S_IFDIR)
                v->rule = "is not a plain file or directory (wheels install only those)";
        else if (type == S_IFDIR && !strchr(path, '/') &&
                 (streq(path, "include") || streq(path, "share") || streq(path, "etc")))
                ;
        else if (!below(path, v->snapshot->site_packages) && !below(path, "bin") && !below(path, "include") &&
                 !below(path, "share") && !below(path, "etc"))
                v->rule = startswith(path, "lib/") ? "would shadow the standard library (packages install only "
                                                     "below site-packages)"
                                                   : "is outside the places where wheels install (site-packages, "
                                                     "bin, include, share, etc)";
        else if (below(path, "bin") && startswith(name, "python") && !strchr(path + 4, '/'))
                v->rule = "would replace the environment's interpreter";

        if (v->rule) {
                v->path = strdup(path);
                return v->path ? 1 : -ENOMEM;
        }
        return 0;
}

/* path (relative to the environment's root) as a RECORD names it: relative to site-packages the shortest way, as
 * installers write it (os.path.relpath): "../../../pyvenv.cfg", "../os.py" for lib/pythonX.Y/os.py. */
static char *record_path(const char *site_packages, const char *path) {
        size_t common = 0, up = 1, i;
        char *rel;

        /* The leading directories both share. */
        for (i = 0; site_packages[i] && site_packages[i] == path[i]; i++)
                if (path[i] == '/')
                        common = i + 1;
        if (!site_packages[i] && path[i] == '/')
                return strdup(path + i + 1);
        /* One step up for each directory of site_packages below them. */
        for (const char *c = site_packages + common; *c; c++)
                up += *c == '/';
        rel = malloc(up * 3 + strlen(path + common) + 1);
        if (!rel)
                return NULL;
        rel[0] = 0;
        for (i = 0; i < up; i++)
                strcat(rel, "../");
        strcat(rel, path + common);
        return rel;
}

/* Which installed distribution's RECORD lists path (relative to the environment's root), or a file below it when
 * it is a directory: "name-version" of its .dist-info, or NULL. */
static char *record_owner(int env_fd, const char *site_packages, const char *path) {
        _cleanup_close_ int sp = openat(env_fd, site_packages, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        _cleanup_free_ char *rel = NULL, *line = NULL;
        size_t cap = 0, n_dist = 0;
        uint64_t bytes = 0;
        struct dirent *de;
        char *owner = NULL;
        DIR *d;

        if (sp < 0)
                return NULL;
        rel = record_path(site_packages, path);
        if (!rel)
                return NULL;
        d = fdopendir(sp);
        if (!d)
                return NULL;
        sp = -EBADF;
        while (!owner && (de = readdir(d))) {
                _cleanup_close_ int dist = -EBADF;
                size_t len = strlen(de->d_name);
                struct stat st;
                FILE *f;
                int fd;

                if (len < 11 || !streq(de->d_name + len - 10, ".dist-info"))
                        continue;
                if (++n_dist > MAX_DIST_INFOS || bytes > MAX_RECORDS_BYTES)
                        break;
                /* This tree is known to break the rules: a .dist-info may be a symlink out of it, and its RECORD a
                 * fifo, which open(2) would wait on for a writer, with the daemon's event loop. */
                dist = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dist < 0)
                        continue;
                fd = openat(dist, "RECORD", O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
                if (fd < 0)
                        continue;
                if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_RECORD || !(f = fdopen(fd, "re"))) {
                        close(fd);
                        continue;
                }
                bytes += (uint64_t) st.st_size;
                while (getline(&line, &cap, f) > 0) {
                        const char *rest = startswith(line, rel);
                        if (rest && (*rest == ',' || *rest == '/')) {
                                owner = strndup(de->d_name, len - 10);
                                break;
                        }
                }
                fclose(f);
        }
        closedir(d);
        return owner;
}

int env_layout_verify(int dirfd, const EnvLayout *snapshot, char **ret_message) {
        Verify v = { .snapshot = snapshot };
        _cleanup_free_ char *owner = NULL, *missing = NULL;
        int r;

        *ret_message = NULL;
        r = walk(dirfd, "", 0, verify_one, &v);
        if (r == -ELOOP) {
                *ret_message = strdup("the installed packages nest directories deeper than the daemon accepts");
                return *ret_message ? 1 : -ENOMEM;
        }
        if (r < 0)
                return r;
        /* And nothing the venv step made is gone. */
        for (size_t i = 0; !v.path && i < snapshot->n; i++) {
                struct stat st;
                if (fstatat(dirfd, snapshot->entries[i].path, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno != ENOENT)
                                return -errno;
                        v.path = strdup(snapshot->entries[i].path);
                        v.rule = "removes a part of the virtual environment itself";
                        if (!v.path)
                                return -ENOMEM;
                }
        }
        if (!v.path)
                return 0;

        owner = record_owner(dirfd, snapshot->site_packages, v.path);
        if (asprintf(ret_message,
                     "refused to use the environment: %s installed \"%s\", which %s. Nothing of it was run; ask for "
                     "packages that do not do this, or tell the package's authors",
                     owner ? owner : "one of the packages (none of their RECORD files lists it)", v.path, v.rule) < 0) {
                *ret_message = NULL;
                free(v.path);
                return -ENOMEM;
        }
        free(v.path);
        return 1;
}

static int readonly_one(int dirfd, const char *name, const char *path, const struct stat *st, void *userdata) {
        mode_t mode;

        if (S_ISLNK(st->st_mode))
                return 0;
        /* A directory too, before what it holds: changing an entry's mode needs its ownership, not a writable
         * directory, and 0555 still lets the walk in. */
        mode = S_ISDIR(st->st_mode) || (st->st_mode & 0111) ? 0555 : 0444;
        if ((st->st_mode & 07777) != mode && fchmodat(dirfd, name, mode, 0) < 0)
                return -errno;
        return 0;
}

int env_make_readonly(int dirfd) {
        int r = walk(dirfd, "", 0, readonly_one, NULL);

        if (r < 0)
                return r;
        return fchmod(dirfd, 0555) < 0 ? -errno : 0;
}

/* ---- bytecode ---------------------------------------------------------- */

/* NAME of NAME.TAG.pyc or NAME.TAG.opt-N.pyc, in a buffer of at least NAME_MAX+1; false when name is not one. */
static bool pyc_source_stem(const char *name, char stem[static NAME_MAX + 1]) {
        size_t len = strlen(name);
        const char *dot = strchr(name, '.');

        /* A TAG between NAME and .pyc: "mod.pyc" or "mod..pyc" is none of Python's names in __pycache__. */
        if (len < 5 || !endswith(name, ".pyc") || !dot || dot == name || (size_t) (dot - name) > NAME_MAX - 3 ||
            (size_t) (dot - name) + 1 >= len - 4)
                return false;
        memcpy(stem, name, (size_t) (dot - name));
        strcpy(stem + (dot - name), ".py");
        return true;
}

typedef struct Adopt {
        int env_fd;
        const char *site_packages;
        uid_t uid;
        gid_t gid;
        int moved;
        const int *share_fds;   /* the unpacked wheels in uv's cache that the environment's files are linked from */
        size_t n_share;
} Adopt;

/* The directory at path (relative to dirfd) when it is a real directory all the way, without a symlink: its fd. */
static int open_env_dir(int env_fd, const char *path) {
        _cleanup_close_ int fd = openat(env_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_free_ char *copy = strdup(path);
        char *save = NULL;

        if (fd < 0)
                return -errno;
        if (!copy)
                return -ENOMEM;
        for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                int next;
                if (streq(c, ".") || streq(c, ".."))
                        return -EINVAL;
                next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (next < 0)
                        return -errno;
                close(fd);
                fd = next;
        }
        return TAKE_FD(fd);
}

/*
 * The .pyc just put in place for the source stem in dir (below site-packages), also in the unpacked wheel of uv's
 * cache that this source is a hard link of (same inode: the very file, not one of the same name): uv links the
 * whole unpacked wheel into every later environment, __pycache__ included, whose first run then imports from
 * bytecode. Only for a source that is that wheel's own file, so the .pyc, compiled from it, is right for every
 * environment that links it. Best effort: nothing is lost but time when it cannot be done.
 */
static void share_one(Adopt *a, const char *dir, const char *stem, int src_dir, int env_cache, const char *name) {
        const char *rel = streq(dir, a->site_packages) ? "" : dir + strlen(a->site_packages) + 1;
        struct stat src;

        if (a->n_share == 0 || fstatat(src_dir, stem, &src, AT_SYMLINK_NOFOLLOW) < 0 || src.st_nlink < 2)
                return;
        for (size_t i = 0; i < a->n_share; i++) {
                _cleanup_close_ int wdir = *rel ? open_env_dir(a->share_fds[i], rel)
                                                : openat(a->share_fds[i], ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                _cleanup_close_ int wcache = -EBADF;
                struct stat w;

                if (wdir < 0 || fstatat(wdir, stem, &w, AT_SYMLINK_NOFOLLOW) < 0 || w.st_dev != src.st_dev ||
                    w.st_ino != src.st_ino)
                        continue;
                if (mkdirat(wdir, "__pycache__", 0755) < 0 && errno != EEXIST)
                        return;
                wcache = openat(wdir, "__pycache__", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (wcache >= 0)
                        (void) linkat(env_cache, name, wcache, name, 0);   /* EEXIST: shared already */
                return;
        }
}

static int adopt_one(int dirfd, const char *name, const char *path, const struct stat *st, void *userdata) {
        Adopt *a = userdata;
        _cleanup_close_ int src_dir = -EBADF, cache = -EBADF, pyc = -EBADF;
        _cleanup_free_ char *dir = NULL;
        char stem[NAME_MAX + 1];
        const char *slash;
        struct stat sst;
        int r;

        if (S_ISDIR(st->st_mode))
                return 0;
        /* Plain files only, linked nowhere else, for a source of the environment below site-packages. */
        if (!S_ISREG(st->st_mode) || st->st_nlink != 1 || !pyc_source_stem(name, stem))
                return 0;
        slash = strrchr(path, '/');
        if (!slash)
                return 0;
        dir = strndup(path, (size_t) (slash - path));
        if (!dir)
                return -ENOMEM;
        if (!streq(dir, a->site_packages) && !below(dir, a->site_packages))
                return 0;
        src_dir = open_env_dir(a->env_fd, dir);
        if (src_dir < 0)
                return src_dir == -ENOMEM ? src_dir : 0;
        if (fstatat(src_dir, stem, &sst, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sst.st_mode))
                return 0;

        pyc = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
        if (pyc < 0)
                return 0;
        if (fstat(pyc, &sst) < 0 || !S_ISREG(sst.st_mode) || sst.st_nlink != 1)
                return 0;
        if ((sst.st_uid != a->uid || sst.st_gid != a->gid) && fchown(pyc, a->uid, a->gid) < 0)
                return -errno;
        if (fchmod(pyc, 0444) < 0)
                return -errno;

        /* __pycache__ next to the source: the directories are read-only (0555) but ours. */
        if (fchmod(src_dir, 0755) < 0)
                return -errno;
        if (mkdirat(src_dir, "__pycache__", 0755) < 0 && errno != EEXIST)
                r = -errno;
        else {
                cache = openat(src_dir, "__pycache__", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                r = cache < 0 ? -errno : 0;
        }
        (void) fchmod(src_dir, 0555);
        if (r < 0)
                return r;
        if (fchmod(cache, 0755) < 0)
                return -errno;
        r = renameat(dirfd, name, cache, name) < 0 ? -errno : 0;
        /* Moved by name: what arrived must be the file checked above, or it goes again. */
        if (r == 0) {
                struct stat moved;
                if (fstatat(cache, name, &moved, AT_SYMLINK_NOFOLLOW) < 0 || moved.st_dev != sst.st_dev ||
                    moved.st_ino != sst.st_ino) {
                        (void) unlinkat(cache, name, 0);
                        r = -EBUSY;
                }
        }
        (void) fchmod(cache, 0555);
        if (r < 0)
                return r;
        a->moved++;
        share_one(a, dir, stem, src_dir, cache, name);
        return 0;
}

int env_adopt_bytecode_shared(int env_dirfd, const char *env_path, const char *site_packages, int out_dirfd,
                              const int *share_fds, size_t n_share) {
        _cleanup_close_ int top = -EBADF;
        Adopt a = {
                .env_fd = env_dirfd,
                .site_packages = site_packages,
                .uid = geteuid(),
                .gid = getegid(),
                .share_fds = share_fds,
                .n_share = n_share,
        };
        int r;

        /* The tree mirrors absolute paths: OUT/<env_path>/lib/... */
        if (env_path[0] != '/')
                return -EINVAL;
        top = open_env_dir(out_dirfd, env_path + 1);
        if (top == -ENOENT)
                return 0;
        if (top < 0)
                return top;
        r = walk(top, "", 0, adopt_one, &a);
        return r < 0 ? r : a.moved;
}
