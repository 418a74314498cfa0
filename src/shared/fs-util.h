/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdint.h>
#include <sys/types.h>

/* mkdir -p with a mode for the directories it creates. */
int mkdir_p(const char *path, mode_t mode);
/* rm -rf without following symlinks or crossing mounts. */
int rm_rf(const char *path);
/* Bytes used below path (st_blocks), not following symlinks. */
int disk_usage(const char *path, uint64_t *ret);
/* Read a small file (up to max bytes) into a NUL-terminated string. */
int read_small_file(const char *path, size_t max, char **ret);
