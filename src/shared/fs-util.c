/* SPDX-License-Identifier: MIT */
#define _XOPEN_SOURCE 700
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

static uint64_t usage_total;

static int add_usage(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        usage_total += (uint64_t) st->st_blocks * 512;
        return 0;
}

int disk_usage(const char *path, uint64_t *ret) {
        usage_total = 0;
        if (nftw(path, add_usage, 32, FTW_PHYS | FTW_MOUNT) < 0)
                return -errno;
        *ret = usage_total;
        return 0;
}

int read_small_file(const char *path, size_t max, char **ret) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        char *buf;
        ssize_t n;

        if (fd < 0)
                return -errno;
        buf = malloc(max + 1);
        if (!buf)
                return -ENOMEM;
        n = read(fd, buf, max);
        if (n < 0) {
                free(buf);
                return -errno;
        }
        buf[n] = 0;
        *ret = buf;
        return 0;
}
