/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdint.h>
#include <sys/types.h>

/* mkdir -p with a mode for the directories it creates. */
int mkdir_p(const char *path, mode_t mode);
/* rm -rf without following symlinks or crossing mounts (for tests: their scratch trees). */
int rm_rf(const char *path);
/* rm -rf of a tree an untrusted process filled, and may still be filling: every step is relative to an open
 * directory, so a symlink is removed, never followed, whenever it appears; mounts are not crossed; directories
 * are made readable and writable for their owner first (a chmod 0 directory of ours is no obstacle). At most
 * RM_RF_MAX_DEPTH directories are open at once: what is deeper is moved up and removed in another pass.
 * Returns the first error, having removed what it could. */
#define RM_RF_MAX_DEPTH 64
int rm_rf_untrusted(const char *path);
/* Write all n bytes (again after EINTR and short writes); -errno on failure. */
int write_all(int fd, const void *data, size_t n);
/* Read fd from where it is to its end, or its first max bytes (what follows is left unread), into a new
 * NUL-terminated string that grows as needed; its length (without the NUL) in *ret_size, which may be NULL.
 * Again after EINTR and short reads. */
int read_full_fd(int fd, size_t max, char **ret, size_t *ret_size);
/* Read a small file (up to max bytes) into a NUL-terminated string. */
int read_small_file(const char *path, size_t max, char **ret);
/* 1 when a user with no group in common with the owners (an "other") can reach path: every directory on the
 * way searchable, and path itself readable, and searchable when it is a directory or executable. Symlinks on the
 * way are followed as the kernel would. 0 when not; -errno when path cannot be examined. */
int path_reachable_by_others(const char *path);
/* 1 when nobody but root and uid can change what path names: every directory from / down to path itself owned by
 * one of them, and writable by others only with the sticky bit (/tmp); 0 when someone else can; -errno. */
int path_held_by(const char *path, uid_t uid);
/*
 * In a child just forked: close every descriptor but 0, 1, 2 and the n in keep (negative ones are ignored), at
 * once. CLOEXEC closes them only at exec, and until then the child holds the daemon's: a pipe whose reader waits
 * for its end of file (a script handed to a sandbox started ahead) waits as long as the child takes to get to its
 * exec, which under load, in a cgroup of little CPU weight, was 20-60 ms; a child that never execs (a resolver)
 * would hold other users' connections. At most CLOSE_KEEP_MAX kept. 0, or -errno (no close_range(): Linux < 5.9).
 */
#define CLOSE_KEEP_MAX 64
int close_all_fds_except(const int *keep, size_t n);
/* The parent of pid, from /proc/PID/stat (after the last ')': the command may hold anything); -1 if unreadable. */
pid_t proc_ppid(pid_t pid);
