/* SPDX-License-Identifier: MIT */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs-util.h"
#include "macro.h"

int mkdir_p(const char *path, mode_t mode) {
        char p[PATH_MAX];
        size_t l = strlen(path);

        if (l == 0 || l >= sizeof(p))
                return -EINVAL;
        memcpy(p, path, l + 1);
        for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = 0;
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return -errno;
                *s = '/';
        }
        if (mkdir(p, mode) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        if (flag == FTW_DP)
                (void) rmdir(path);
        else
                (void) unlink(path);
        return 0;
}

int rm_rf(const char *path) {
        if (nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0 && errno != ENOENT)
                return -errno;
        return access(path, F_OK) == 0 ? -ENOTEMPTY : 0;
}

typedef struct RmTree {
        int top_fd;             /* the directory being emptied */
        dev_t dev;              /* its file system: no other is entered */
        unsigned moved;         /* subtrees too deep, moved up into top_fd (names made from this) */
        bool again;             /* something was moved: another pass */
} RmTree;

static int rm_dir_at(RmTree *t, int dfd, const char *name, unsigned depth);

/* What the directory fd (which this takes) holds. */
static int rm_children(RmTree *t, int fd, unsigned depth) {
        struct dirent *de;
        DIR *d;
        int r = 0;

        d = fdopendir(fd);
        if (!d) {
                r = -errno;
                safe_close(fd);
                return r;
        }
        while ((errno = 0, de = readdir(d))) {
                struct stat st;
                int k = 0;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        k = errno == ENOENT ? 0 : -errno;
                else if (!S_ISDIR(st.st_mode))
                        k = unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT ? -errno : 0;
                else if (st.st_dev != t->dev)
                        k = -EXDEV;
                else if (depth < RM_RF_MAX_DEPTH)
                        k = rm_dir_at(t, dirfd(d), de->d_name, depth + 1);
                else {
                        /* Deeper than we keep directories open for: move it up, for the next pass. */
                        for (unsigned tries = 0; tries < 64; tries++) {
                                char up[32];
                                snprintf(up, sizeof(up), ".rm-deep-%u", ++t->moved);
                                k = renameat2(dirfd(d), de->d_name, t->top_fd, up, RENAME_NOREPLACE) < 0 ? -errno : 0;
                                if (k != -EEXIST)
                                        break;
                        }
                        if (k >= 0)
                                t->again = true;
                }
                if (k < 0 && r == 0)
                        r = k;
        }
        if (errno != 0 && r == 0)
                r = -errno;
        closedir(d);
        return r;
}

/* Open the directory name in dfd, not following a symlink, and make it ours to empty: unlocked if its owner
 * (the script, our user) locked it (chmod 0), then readable, writable and searchable for us. */
static int open_dir_to_empty(int dfd, const char *name, struct stat *ret) {
        int fd;

        fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == EACCES && fchmodat(dfd, name, 0700, AT_SYMLINK_NOFOLLOW) >= 0)
                fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, ret) < 0) {
                int r = -errno;
                safe_close(fd);
                return r;
        }
        /* Entries can only be removed from a directory we may write and search. */
        if ((ret->st_mode & 0700) != 0700)
                (void) fchmod(fd, (ret->st_mode & 07777) | 0700);
        return fd;
}

/* A fresh open of the directory fd (its own read position). */
static int reopen_dir(int fd) {
        return openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* The directory name in dfd, with what it holds. A symlink put in its place meanwhile is not followed. */
static int rm_dir_at(RmTree *t, int dfd, const char *name, unsigned depth) {
        struct stat st;
        int fd, r;

        fd = open_dir_to_empty(dfd, name, &st);
        if (fd < 0) {
                if (fd == -ENOENT)
                        return 0;
                /* Replaced by something else since it was looked at: remove that. */
                if ((fd == -ENOTDIR || fd == -ELOOP) && unlinkat(dfd, name, 0) >= 0)
                        return 0;
                return fd;
        }
        if (st.st_dev != t->dev) {
                safe_close(fd);
                return -EXDEV;
        }
        r = rm_children(t, fd, depth);
        if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
                r = -errno;
        return r;
}

int rm_rf_untrusted(const char *path) {
        _cleanup_close_ int fd = -EBADF;
        RmTree t = {};
        struct stat st;
        int r = 0, k;

        fd = open_dir_to_empty(AT_FDCWD, path, &st);
        if (fd < 0) {
                if (fd == -ENOENT)
                        return 0;
                if (fd == -ENOTDIR || fd == -ELOOP)
                        return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
                return fd;
        }
        t = (RmTree) { .top_fd = fd, .dev = st.st_dev };
        /* Each pass takes RM_RF_MAX_DEPTH levels off whatever was deeper; a bound on passes, should
         * something keep adding. */
        for (unsigned pass = 0; pass < 4096; pass++) {
                int dup_fd = reopen_dir(fd);
                if (dup_fd < 0)
                        return -errno;
                t.again = false;
                k = rm_children(&t, dup_fd, 0);
                if (k < 0 && r == 0)
                        r = k;
                if (!t.again)
                        break;
        }
        if (rmdir(path) < 0 && errno != ENOENT && r == 0)
                r = -errno;
        return r;
}

int write_all(int fd, const void *data, size_t n) {
        const char *p = data;

        while (n > 0) {
                ssize_t k = write(fd, p, n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

int read_full_fd(int fd, size_t max, char **ret, size_t *ret_size) {
        _cleanup_free_ char *buf = NULL;
        size_t have = 0, size = 0;

        max = MIN(max, SIZE_MAX / 2);
        while (have < max) {
                if (have + 1 >= size) {
                        /* Doubling from 4 KiB, never past the bound (and its NUL). */
                        size_t n = MIN(size ? size * 2 : 4096, max + 1);
                        char *b = realloc(buf, n);
                        if (!b)
                                return -ENOMEM;
                        buf = b;
                        size = n;
                }
                ssize_t k = read(fd, buf + have, size - 1 - have);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                have += (size_t) k;
        }
        if (!buf && !(buf = malloc(1)))
                return -ENOMEM;
        buf[have] = 0;
        if (ret_size)
                *ret_size = have;
        *ret = TAKE_PTR(buf);
        return 0;
}

int read_small_file(const char *path, size_t max, char **ret) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);

        if (fd < 0)
                return -errno;
        return read_full_fd(fd, max, ret, NULL);
}

/* Call check on what each step of path's real path is, "/" first, path itself last (last true); 1 when every
 * call said 1, else the first other answer, or -errno. */
static int each_step(const char *path, int (*check)(const struct stat *st, bool last, const void *userdata),
                     const void *userdata) {
        _cleanup_free_ char *real = realpath(path, NULL);   /* no symlink left on the way */
        struct stat st;
        int r;

        if (!real)
                return -errno;
        for (char *slash = real;; slash = strchr(slash + 1, '/')) {
                if (slash)
                        *slash = 0;
                if (stat(*real ? real : "/", &st) < 0)
                        return -errno;
                r = check(&st, !slash, userdata);
                if (r != 1 || !slash)
                        return r;
                *slash = '/';
        }
}

static int check_reachable(const struct stat *st, bool last, const void *userdata) {
        if (!last)
                return !!(st->st_mode & S_IXOTH);       /* directories on the way: searchable */
        if (!(st->st_mode & S_IROTH))
                return 0;
        return !((S_ISDIR(st->st_mode) || (st->st_mode & S_IXUSR)) && !(st->st_mode & S_IXOTH));
}

int path_reachable_by_others(const char *path) {
        return each_step(path, check_reachable, NULL);
}

static int check_held(const struct stat *st, bool last, const void *userdata) {
        uid_t uid = *(const uid_t *) userdata;

        if (st->st_uid != 0 && st->st_uid != uid)
                return 0;
        return !((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX));
}

int path_held_by(const char *path, uid_t uid) {
        return each_step(path, check_held, &uid);
}

pid_t proc_ppid(pid_t pid) {
        char path[64], buf[1024], *e;
        ssize_t n;
        int fd, ppid;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return -1;
        buf[n] = 0;
        e = strrchr(buf, ')');
        if (!e || sscanf(e + 1, " %*c %d", &ppid) != 1)
                return -1;
        return (pid_t) ppid;
}

int close_all_fds_except(const int *keep, size_t n) {
        int sorted[CLOSE_KEEP_MAX];
        size_t m = 0;
        unsigned from = 3;

        if (n > CLOSE_KEEP_MAX)
                return -E2BIG;
        /* The ones above 2, in order (a copy may come twice: the second is below from then). */
        for (size_t i = 0; i < n; i++) {
                size_t j;
                if (keep[i] < 3)
                        continue;
                for (j = m++; j > 0 && sorted[j - 1] > keep[i]; j--)
                        sorted[j] = sorted[j - 1];
                sorted[j] = keep[i];
        }
        for (size_t i = 0; i < m; i++) {
                if ((unsigned) sorted[i] < from)
                        continue;
                if ((unsigned) sorted[i] > from && close_range(from, (unsigned) sorted[i] - 1, 0) < 0)
                        return -errno;
                from = (unsigned) sorted[i] + 1;
        }
        return close_range(from, ~0U, 0) < 0 ? -errno : 0;
}
