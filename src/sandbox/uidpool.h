/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Host uids for sandboxes, under a root daemon: each run, pre-started
 * sandbox, persistent sandbox and helper gets a uid of its own from the
 * configured range (sandbox-uid-range=), with the gid of the same number, and
 * gives it back when its last process is gone. A uid of its own makes
 * RLIMIT_NPROC bind that sandbox alone, keeps sandboxes from signalling or
 * tracing each other, and keeps every sandboxed process off host uid 0.
 *
 * Uids are handed out round robin: a cursor goes round the range, skipping
 * the uids taken, so a uid given back comes again only once the cursor has
 * gone past every other free uid of the range (with the default range, some
 * 65,000 sandboxes later). The pool is refcounted: a process that holds a uid holds the
 * pool, so that it can give the uid back whenever it is freed.
 */

#include <stdint.h>
#include <sys/types.h>

typedef struct UidPool UidPool;

/* first..last, inclusive; -EINVAL for an empty or unsafe range (one that holds 0, 65534, or (uid_t) -1). */
int uid_pool_new(UidPool **ret, uint32_t first, uint32_t last);
UidPool *uid_pool_ref(UidPool *p);
UidPool *uid_pool_unref(UidPool *p);

enum {
        UID_POOL_EXHAUSTED = 1,         /* uid_pool_take(): every uid of the range is taken; *ret untouched */
};

/* A free uid: 0 and *ret; UID_POOL_EXHAUSTED when every uid of the range is taken; -ENOMEM. */
int uid_pool_take(UidPool *p, uid_t *ret);
void uid_pool_release(UidPool *p, uid_t uid);
unsigned uid_pool_n_taken(const UidPool *p);
