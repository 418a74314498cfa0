/* SPDX-License-Identifier: MIT */
#pragma once
/*
 * Empty cgroups, removed by a child process of the daemon and never by its event loop: an rmdir of a cgroup waits
 * for the kernel's RCU grace periods, 15-30 ms each on cgroup v1 beside a neighbour starting sandboxes in a loop,
 * and every client waited for them (src/executor/cgroup-remove.c). Internal to the executor.
 */
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "offloop.h"

typedef struct CgroupRemover {
        char **queued;                  /* for the next child */
        char **running;                 /* what the child of now removes */
        OffLoopJob *job;                /* that child (offloop.h) */
        sd_event *event;                /* where the next one is heard of */
        uint64_t delay_usec;            /* tests: the child waits this long before its first rmdir */
} CgroupRemover;

/* 1 when the cgroup holds no process and no cgroup: nothing can come back into it, and its rmdir can fail only by
 * taking its time. 0 when it does; -ENOENT when it is gone; another -errno when it cannot be read. */
int cgroup_empty(const char *cgroup);
/* Remove an empty cgroup (cgroup_empty()) later, in a child: the one of now if none runs, else the next. Where no
 * child can be started (or e is NULL), removed here and now. */
void cgroup_remover_add(CgroupRemover *r, sd_event *e, const char *path);
/* Cgroups given and not yet removed: queued, and those the running child has. */
size_t cgroup_remover_pending(const CgroupRemover *r);
/* At exit: stop the child, then remove here what it had and what is queued. */
void cgroup_remover_finish(CgroupRemover *r);
