/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Account lookups (getpwnam(), getpwent() and the like) in a child process, waited for: the NSS modules they load
 * stay out of the daemon. libnss_systemd and the libm it links are some 600 KiB of the daemon's resident memory
 * once loaded, for good (glibc never unloads them), and they may talk to systemd-userdbd. For start-up and reload,
 * never for a call: the wait is a fork and the lookup.
 */

#include <stddef.h>

/* Runs in the child: write what is found to fd, return >= 0 or -errno. Logging goes where the daemon's does. */
typedef int (*NssChildFunc)(int fd, void *userdata);

/* f's return, with what it wrote in *ret (NUL-terminated, at most NSS_CHILD_MAX bytes; may be NULL); -errno when
 * the child could not run or did not finish. */
#define NSS_CHILD_MAX ((size_t) 1024 * 1024)
int nss_child_run(NssChildFunc f, void *userdata, char **ret);
