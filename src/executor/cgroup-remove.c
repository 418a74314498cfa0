/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* In the child: each in turn. An empty cgroup's rmdir fails only for a process that came back (none can: the
 * daemon names each run's cgroups anew), so a busy one is killed and tried again for a while, then left for the
 * next daemon's start, which removes what its predecessors left. */
_noreturn_ static void remove_all(char **paths, uint64_t delay_usec) {
        (void) prctl(PR_SET_NAME, (unsigned long) "cgroup-rmdir", 0, 0, 0);
        /* Nothing of the daemon's held open (other users' sockets, the pipes of sandboxes): their ends close when
         * the daemon closes them, not when this is done. */
        (void) close_range(3, ~0U, 0);
        if (delay_usec > 0)
                (void) usleep((useconds_t) delay_usec);
        for (char **p = paths; *p; p++)
                for (unsigned i = 0; rmdir(*p) < 0 && errno == EBUSY && i < 100; i++) {
                        cgroup_kill(*p);
                        (void) usleep(10000);
                }
        _exit(0);
}

static void start_next(CgroupRemover *r, sd_event *e);

static int on_child_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        CgroupRemover *r = userdata;
        sd_event *e = sd_event_ref(sd_event_source_get_event(s));   /* s goes with the unref below */

        r->child_source = sd_event_source_disable_unref(r->child_source);
        r->pid = 0;
        r->n_running = 0;
        start_next(r, e);
        sd_event_unref(e);
        return 0;
}

static void remove_here(CgroupRemover *r) {
        for (char **p = r->queued; p && *p; p++)
                (void) rmdir(*p);
        r->queued = strv_free(r->queued);
}

static void start_next(CgroupRemover *r, sd_event *e) {
        pid_t pid;

        if (r->pid > 0 || !r->queued)
                return;
        if (!e) {
                remove_here(r);
                return;
        }
        pid = fork();
        if (pid == 0)
                remove_all(r->queued, r->delay_usec);
        if (pid < 0 || sd_event_add_child(e, &r->child_source, pid, WEXITED, on_child_exit, r) < 0) {
                if (pid > 0)
                        (void) waitpid(pid, NULL, 0);
                remove_here(r);
                return;
        }
        r->pid = pid;
        r->n_running = strv_length(r->queued);
        r->queued = strv_free(r->queued);
}

void cgroup_remover_add(CgroupRemover *r, sd_event *e, const char *path) {
        if (strv_extend(&r->queued, path) < 0) {
                (void) rmdir(path);
                return;
        }
        start_next(r, e);
}

size_t cgroup_remover_pending(const CgroupRemover *r) {
        return r->n_running + strv_length(r->queued);
}

void cgroup_remover_finish(CgroupRemover *r) {
        if (r->pid > 0) {
                r->child_source = sd_event_source_disable_unref(r->child_source);
                (void) waitpid(r->pid, NULL, 0);
                r->pid = 0;
                r->n_running = 0;
        }
        remove_here(r);
}
