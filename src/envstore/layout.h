/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The layout of a built environment, checked before it is put in place.
 *
 * A wheel can install files anywhere below the environment's root (its
 * *.data/data/ files go there), and an interpreter started on the environment
 * reads pyvenv.cfg and lib/pythonX.Y/ before anything else: a wheel that
 * replaces pyvenv.cfg, or adds lib/pythonX.Y/encodings/, runs its code first
 * in every interpreter started there. So the daemon records what the venv
 * step made (env_layout_snapshot()), and after the packages are installed
 * accepts only:
 *   - everything the venv step made, exactly as it made it (pyvenv.cfg,
 *     bin/python*, lib64, uv's _virtualenv.* ...);
 *   - new files and directories below lib/pythonX.Y/site-packages/, bin/,
 *     include/, share/ and etc/ (jupyter's configuration), where wheels
 *     install;
 *   - nothing but plain files and directories among them: no symlinks, no
 *     devices, fifos or sockets.
 * Then the whole tree is made read-only on disk (env_make_readonly()).
 *
 * Bytecode is compiled in a sandbox that can write only a scratch directory
 * (python -X pycache_prefix); env_adopt_bytecode_shared() moves the .pyc files it
 * made for the environment's own sources into their __pycache__ directories.
 *
 * Every step works relative to open directories and never follows a symlink.
 */

#include <stddef.h>
#include <stdint.h>

typedef struct EnvLayoutEntry {
        char *path;             /* relative to the environment's root */
        unsigned type;          /* S_IFREG, S_IFDIR or S_IFLNK (of st_mode) */
        char digest[65];        /* regular file: sha256 of its contents; symlink: of its target */
} EnvLayoutEntry;

typedef struct EnvLayout {
        EnvLayoutEntry *entries;
        size_t n;
        char *site_packages;    /* "lib/pythonX.Y/site-packages" */
} EnvLayout;

void env_layout_done(EnvLayout *l);

/* Record the tree below dirfd (what the venv step made). */
int env_layout_snapshot(int dirfd, EnvLayout *ret);

/*
 * Check the tree below dirfd against the snapshot. 0: it holds only what it
 * may. 1: it does not, and *ret_message says which path breaks which rule and
 * which installed package (its .dist-info RECORD) put it there. -errno when
 * the tree cannot be read.
 */
int env_layout_verify(int dirfd, const EnvLayout *snapshot, char **ret_message);

/* Make every directory 0555 and every file 0444 (0555 when it was executable), the root included. */
int env_make_readonly(int dirfd);

/*
 * Move the .pyc files below out_dirfd (a pycache_prefix tree, whose top is
 * the environment's absolute path env_path) into the __pycache__ directories
 * of the environment at env_dirfd, next to their sources. Only plain files
 * named NAME.TAG.pyc or NAME.TAG.opt-N.pyc for which NAME.py exists, below
 * site_packages; each becomes ours, 0444. Returns how many were moved.
 * Each .pyc whose source is a hard link of a file in one of share_fds (the unpacked wheels in uv's cache the
 * environment was installed from, opened by the caller; none when n_share is 0) is linked into that wheel's
 * __pycache__ too.
 */
int env_adopt_bytecode_shared(int env_dirfd, const char *env_path, const char *site_packages, int out_dirfd,
                              const int *share_fds, size_t n_share);
