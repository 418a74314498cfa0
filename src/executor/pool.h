/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Pool: processes started ahead of the request that will use them. A
 * target is a key (everything that decides what the process is) with a
 * spawn function; the pool keeps up to `size` started processes per target,
 * for at most a few targets, the most recently used ones. A process is taken
 * once and never comes back: the taker owns it. Targets unused for a while,
 * or no longer valid (their check says so), are dropped with their
 * processes; freeing the pool kills everything in it. The processes are no
 * work in progress: nothing waits for them.
 *
 * Each process is started for someone: the uid whose run used the target
 * (refilled for that uid's next run) or the daemon (SCHEDULER_DAEMON_UID,
 * for whoever comes first). A uid takes its own first, then the daemon's
 * unless it was the last to take that one, never another uid's: one user's
 * burst of runs cannot drain what another user's next run would use. A new target takes the place of the least
 * recently used target of the same uid when there is one, so one user's many
 * environments do not push out another's.
 */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "executor/process.h"
#include "scheduler/scheduler.h"

typedef struct Pool Pool;

typedef struct PoolItem {
        Process *proc;          /* started, waiting; its done callback is the pool's until taken */
        int in_fd;              /* write end: what the process waits for; close it after writing */
        int out_fd;             /* read end of a result pipe, or -EBADF */
        int ctl_fd;             /* the daemon's end of a socket the process holds too (network-allow's), or -EBADF */
} PoolItem;

/* Start one process for spec, for owner's next run (SCHEDULER_DAEMON_UID: whoever's), passing done and userdata to
 * process_spawn. */
typedef int (*PoolSpawnFunc)(void *spec, uid_t owner, ProcessDoneFunc done, void *userdata, PoolItem *ret);
/* Still usable (e.g. what it binds is still there)? */
typedef bool (*PoolCheckFunc)(void *spec);
typedef void (*PoolSpecFreeFunc)(void *spec);

typedef struct PoolTargetOps {
        PoolSpawnFunc spawn;
        PoolCheckFunc check;            /* may be NULL */
        PoolSpecFreeFunc free_spec;     /* may be NULL */
} PoolTargetOps;

#define POOL_MAX_TARGETS 4
#define POOL_TARGET_IDLE_USEC (10 * 60 * USEC_PER_SEC)

/* sched: where each waiting process holds a SCHED_PRESTART place of the uid it was started for (NULL: none). */
int pool_new(Pool **ret, sd_event *e, Scheduler *sched, unsigned size);
/* Kills every process in it. */
Pool *pool_free(Pool *p);
/* Per target; a change flushes. 0: the pool is off. */
void pool_set_size(Pool *p, unsigned size);
unsigned pool_size(const Pool *p);

/*
 * The target key was just used by uid (SCHEDULER_DAEMON_UID: by nobody yet): remember it (taking spec; freed at
 * once when the target is known) and start what is missing of uid's processes for it. Starting never waits for
 * the processes.
 */
int pool_refill(Pool *p, const char *key, uid_t uid, const PoolTargetOps *ops, void *spec);
/* A started process for key that uid may take (its own, else the daemon's): 1 and *ret filled (the caller owns it
 * all now), 0 if there is none. When it was the daemon's, *ret_shared (unless NULL) is set: refill that at once. */
int pool_take(Pool *p, const char *key, uid_t uid, PoolItem *ret, bool *ret_shared);
/* Kill every waiting process and forget all targets (the policy changed). */
void pool_flush(Pool *p);
/* Waiting processes, all targets together. */
unsigned pool_n_ready(const Pool *p);
unsigned pool_n_targets(const Pool *p);

/* The taken process's run starts now: its duration counts from here, and it is killed after timeout_usec
 * (0: never) as process_spawn()'s timeout would. */
int pool_item_start(PoolItem *it, sd_event *e, uint64_t timeout_usec);
/* Kill and close what is left of an item. */
void pool_item_done(PoolItem *it);
