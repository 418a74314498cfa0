/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup-remove.h"
#include "macro.h"
#include "process-signal.h"
#include "strv.h"

int cgroup_empty(const char *cgroup) {
        char path[PATH_MAX], c;
        struct stat st;
        ssize_t n;
        int fd;

        /* kernfs counts a directory's subdirectories in its links: two, for "." and its entry, when it has none. */
        if (stat(cgroup, &st) < 0)
                return -errno;
        if (st.st_nlink > 2)
                return 0;
        if ((size_t) snprintf(path, sizeof(path), "%s/cgroup.procs", cgroup) >= sizeof(path))
                return -ENAMETOOLONG;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (fd < 0)
                return -errno;
        n = read(fd, &c, 1);
        n = n < 0 ? -errno : n;
        close(fd);
        return n < 0 ? (int) n : n == 0;
}

/* In the child (offloop.h): each in turn. An empty cgroup's rmdir fails only for a process that came back (none
 * can: the daemon names each run's cgroups anew), so a busy one is killed and tried again for a while, then left
 * for the next daemon's start, which removes what its predecessors left. */
static int remove_all(void *userdata, char **ret_message) {
        CgroupRemover *r = userdata;

        if (r->delay_usec > 0)
                (void) usleep((useconds_t) r->delay_usec);
        for (char **p = r->running; p && *p; p++)
                for (unsigned i = 0; rmdir(*p) < 0 && errno == EBUSY && i < 100; i++) {
                        cgroup_kill(*p);
                        (void) usleep(10000);
                }
        return 0;
}

static void remove_here(char ***paths) {
        for (char **p = *paths; p && *p; p++)
                (void) rmdir(*p);
        *paths = strv_free(*paths);
}

static void start_next(CgroupRemover *r);

static void on_removed(int k, const char *message, void *userdata) {
        CgroupRemover *r = userdata;

        r->job = offloop_job_free(r->job);
        r->running = strv_free(r->running);
        start_next(r);
}

static void start_next(CgroupRemover *r) {
        if (r->job || !r->queued)
                return;
        r->running = TAKE_PTR(r->queued);
        if (!r->event || offloop_spawn(r->event, "mcp-cgroup-rmdir", remove_all, on_removed, r, &r->job) < 0)
                remove_here(&r->running);   /* no child to be had: here, as before */
}

void cgroup_remover_add(CgroupRemover *r, sd_event *e, const char *path) {
        if (!r->event && e)
                r->event = sd_event_ref(e);
        if (strv_extend(&r->queued, path) < 0) {
                (void) rmdir(path);
                return;
        }
        start_next(r);
}

size_t cgroup_remover_pending(const CgroupRemover *r) {
        return strv_length(r->running) + strv_length(r->queued);
}

void cgroup_remover_finish(CgroupRemover *r) {
        r->job = offloop_job_free(r->job);
        remove_here(&r->running);
        remove_here(&r->queued);
        r->event = sd_event_unref(r->event);
}
