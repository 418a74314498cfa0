/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The store's disk walk: how much the environment store and the uv cache hold together, and the collection of
 * least recently used environments when that is over the budget. Environments hardlink their files from the uv
 * cache, so the walk counts every inode (st_dev, st_ino) once, wherever it has links.
 *
 * store_walk() is the walk itself (plain C, synchronous: for the unit tests and for the child).
 * store_walk_spawn() runs it in a forked child of the daemon (executor/offloop.h), never in the event loop: a store
 * of a few hundred thousand files takes seconds to walk. The child runs only this code, as the daemon's user, and
 * reports on a pipe; the parent hears of it through the loop.
 */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "strv.h"

typedef struct StoreWalkOptions {
        const char *envs;            /* the store: one directory per environment, dot-names are not ones */
        const char *uv_cache;        /* counted, never collected here; NULL: none */
        const char *pythons;         /* Pythons installed on demand (pyinstall.h): counted, and one that no
                                      * environment (nor build) uses is collected like an environment, by the
                                      * age of its install marker; NULL: none */
        const char *pythons_marker;
        uint64_t max_size;           /* bytes of unique inodes over both; 0: no size budget */
        uint64_t max_age_usec;       /* unused this long: collected; 0: never */
        uint64_t grace_sec;          /* used this recently: never collected */
        const char *marker;          /* the file in an environment whose mtime is its last use */
        char **keep;                 /* environment names never collected (strv; NULL: none); nor is one whose
                                      * directory some process holds a shared flock() on (envstore_hold()) */
        bool collect;                /* false: only measure */
} StoreWalkOptions;

typedef struct StoreWalkResult {
        uint64_t store_bytes;        /* inodes first seen in the store */
        uint64_t cache_bytes;        /* inodes seen in the uv cache */
        uint64_t total_bytes;        /* both, each inode once, after what was collected */
        uint64_t removed_bytes;
        unsigned n_envs;             /* environments left */
        unsigned n_removed;
        bool over;                   /* still over the size budget after collecting what may be (counting the uv
                                      * cache without what only the removed environments used of it) */
        char **cache_clean;          /* when over, or when what was removed shares files with the uv cache: the
                                      * packages (PEP 503 names) the cache holds that no environment left uses,
                                      * for "uv cache clean NAME..." (strv; NULL: none) */
        bool cache_clean_all;        /* when over and there are none: only cleaning all of the cache helps */
        bool kept_young;             /* over, and environments stayed only because they were used within the
                                      * grace: a walk once it has passed takes them */
} StoreWalkResult;

/* Called for each environment removed (reason: "over the store budget" or "unused for too long"); for a Python,
 * name is STORE_WALK_PYTHON_PREFIX and its directory's name. */
#define STORE_WALK_PYTHON_PREFIX "python:"
typedef void (*StoreWalkRemovedFunc)(const char *name, uint64_t bytes, const char *reason, void *userdata);

int store_walk(const StoreWalkOptions *o, StoreWalkResult *ret, StoreWalkRemovedFunc removed, void *userdata);

static inline void store_walk_result_done(StoreWalkResult *r) {
        r->cache_clean = strv_free(r->cache_clean);
}

typedef struct StoreWalkJob StoreWalkJob;
/* result is NULL when the child failed; removed lists the names of the environments it removed (strv). */
typedef void (*StoreWalkDoneFunc)(const StoreWalkResult *result, char **removed, void *userdata);

int store_walk_spawn(sd_event *e, const StoreWalkOptions *o, StoreWalkDoneFunc done, void *userdata,
                     StoreWalkJob **ret);
/* Kills the child if it still runs; done is not called. */
StoreWalkJob *store_walk_job_free(StoreWalkJob *j);
