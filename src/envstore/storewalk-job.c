/* SPDX-License-Identifier: MIT */
/*
 * The store's disk walk run off the loop: store_walk() (storewalk.c) in a forked child of the daemon (offloop.h),
 * which reports what it removed, what the uv cache may let go of and the totals as lines of text on a pipe, read
 * back here into a StoreWalkResult for the caller of store_walk_spawn().
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/offloop.h"
#include "envstore/storewalk.h"
#include "macro.h"
#include "strv.h"

/* What the child may say: one line per removed environment and one of totals. */
#define REPORT_MAX (4U * 1024 * 1024)
/* A walk that takes longer (a hung file system) is killed; who waits for it hears that it failed. */
#define WALK_TIMEOUT_USEC (15 * 60 * USEC_PER_SEC)

/* The child's side: store_walk() in an off-loop child (offloop.h), its report lines of text. */

struct StoreWalkJob {
        OffLoopJob *job;
        StoreWalkDoneFunc done;
        void *userdata;
        StoreWalkOptions options;       /* borrowed from the caller until the child has forked: only it reads them */
};

typedef struct Report {
        char *text;
        size_t len;
} Report;

static void report_removed(const char *name, uint64_t bytes, const char *reason, void *userdata) {
        Report *report = userdata;
        (void) strextendf_len(&report->text, &report->len, "R %" PRIu64 " %s\n", bytes, name);
        (void) reason;
}

static int walk_child(void *userdata, char **ret_message) {
        StoreWalkJob *j = userdata;
        _cleanup_(store_walk_result_done) StoreWalkResult res = {};
        Report report = {};
        int r;

        r = store_walk(&j->options, &res, report_removed, &report);
        /* Only what uv takes as a package name goes on the line (package_normalize()). */
        for (char **n = res.cache_clean; r >= 0 && n && *n; n++)
                (void) strextendf_len(&report.text, &report.len, "C %s\n", *n);
        if (r >= 0)
                r = strextendf_len(&report.text, &report.len,
                                   "U %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %u %u %d %d %d\n", res.store_bytes,
                                   res.cache_bytes, res.total_bytes, res.removed_bytes, res.n_envs, res.n_removed,
                                   (int) res.over, (int) res.cache_clean_all, (int) res.kept_young);
        if (r < 0) {
                free(report.text);
                return r;
        }
        *ret_message = report.text;
        return 0;
}

static void on_walk_done(int r, const char *message, void *userdata) {
        StoreWalkJob *j = userdata;
        _cleanup_strv_free_ char **removed = strv_new();
        _cleanup_free_ char *report = r >= 0 && message ? strdup(message) : NULL;
        StoreWalkResult res = {};
        bool ok = false;
        char *line, *save = NULL;

        j->job = offloop_job_free(j->job);
        if (report)
                for (line = strtok_r(report, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                        uint64_t bytes;
                        int over, all, young, n = 0;
                        const char *name;

                        if (sscanf(line, "R %" SCNu64 " %n", &bytes, &n) == 1 && n > 0)
                                (void) strv_extend(&removed, line + n);
                        else if ((name = startswith(line, "C ")))
                                (void) strv_extend(&res.cache_clean, name);
                        else if (sscanf(line, "U %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %u %u %d %d %d",
                                        &res.store_bytes, &res.cache_bytes, &res.total_bytes, &res.removed_bytes,
                                        &res.n_envs, &res.n_removed, &over, &all, &young) == 9) {
                                res.over = over;
                                res.cache_clean_all = all;
                                res.kept_young = young;
                                ok = true;
                        }
                }
        j->done(ok ? &res : NULL, removed, j->userdata);
        store_walk_result_done(&res);
}

int store_walk_spawn(sd_event *e, const StoreWalkOptions *o, StoreWalkDoneFunc done, void *userdata,
                     StoreWalkJob **ret) {
        StoreWalkJob *j;
        int r;

        j = calloc(1, sizeof(*j));
        if (!j)
                return -ENOMEM;
        j->done = done;
        j->userdata = userdata;
        j->options = *o;
        /* "mcp-store-walk" tells it from the daemon in ps and top. */
        r = offloop_spawn_full(e, "mcp-store-walk", REPORT_MAX, WALK_TIMEOUT_USEC, walk_child, on_walk_done, j,
                               &j->job);
        if (r < 0) {
                free(j);
                return r;
        }
        *ret = j;
        return 0;
}

StoreWalkJob *store_walk_job_free(StoreWalkJob *j) {
        if (!j)
                return NULL;
        offloop_job_free(j->job);
        free(j);
        return NULL;
}
