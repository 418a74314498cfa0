/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * For unit suites only, included by the one file of a suite: strdup() of the whole test program (the library's
 * calls included, strv_extend() among them) replaced by one that fails on demand, so that a suite can prove that
 * a list built of many appends comes back whole or not at all. alloc_fail_nth(n) makes the n-th call from now
 * fail with ENOMEM (and every one after it until the next alloc_fail_nth()); alloc_fail_nth(0) makes none fail.
 * alloc_fail_calls() counts the calls since the last alloc_fail_nth(). (Not vasprintf(): with _FORTIFY_SOURCE
 * it is an inline wrapper of glibc's and cannot be replaced.)
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static unsigned alloc_fail_at, alloc_fail_seen;

static inline void alloc_fail_nth(unsigned n) {
        alloc_fail_at = n;
        alloc_fail_seen = 0;
}

static inline unsigned alloc_fail_calls(void) {
        return alloc_fail_seen;
}

static inline int alloc_fail_now(void) {
        alloc_fail_seen++;
        if (alloc_fail_at > 0 && alloc_fail_seen >= alloc_fail_at) {
                errno = ENOMEM;
                return 1;
        }
        return 0;
}

char *strdup(const char *s) {
        size_t n = strlen(s) + 1;
        char *d;

        if (alloc_fail_now())
                return NULL;
        d = malloc(n);
        return d ? memcpy(d, s, n) : NULL;
}
