/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Pool: processes started ahead of the request that will use them. A
 * target is a key (everything that decides what the process is) with a
 * spawn function; the pool keeps started processes per target, for at most a
 * few targets, the most recently used ones. How many per target follows the
 * call rate: one to begin with, one more (up to `size`) each time a take
 * finds none ready while the previous take was less than POOL_DEPTH_BURST_USEC
 * ago, one less after POOL_DEPTH_DECAY_USEC without such a take. A process is taken
 * once and never comes back: the taker owns it. Targets unused for a while,
 * or no longer valid (their check says so), are dropped with their
 * processes; freeing the pool kills everything in it. The processes are no
 * work in progress: nothing waits for them.
 *
 * Each process is started for someone: the uid whose run used the target
 * (refilled for that uid's next run) or the daemon (SCHEDULER_DAEMON_UID,
 * for whoever comes first). A uid takes its own or the daemon's, the latter
 * not twice in a row, never another uid's: one user's burst of runs cannot
 * drain what another user's next run would use. Each uid has a depth of its
 * own for a target, following its own call rate: one user's burst deepens
 * nobody else's. A new target takes the place of the least
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
        char *tag;              /* what the spawn function says this process holds (e.g. its warm imports), or NULL */
        uid_t owner;            /* whom it was started for (SCHEDULER_DAEMON_UID: whoever comes first) */
        uint64_t started;       /* when it was spawned */
} PoolItem;

/* Start one process for spec, for owner's next run (SCHEDULER_DAEMON_UID: whoever's), passing done and userdata to
 * process_spawn. 0 and *ret; a positive value, the spawn function's own documented outcome, when it has nothing to
 * start (e.g. RUNTIME_NO_SANDBOX: the sandbox does not work); -errno. Either of the last two counts as a failed
 * start (after a few, the target pauses) and is what pool_refill() returns. */
typedef int (*PoolSpawnFunc)(void *spec, uid_t owner, ProcessDoneFunc done, void *userdata, PoolItem *ret);
/* Still usable (e.g. what it binds is still there)? */
typedef bool (*PoolCheckFunc)(void *spec);
typedef void (*PoolSpecFreeFunc)(void *spec);
/* pool_refill() of a known target: fold what the new spec knows into the target's (e.g. what was learnt). */
typedef void (*PoolSpecUpdateFunc)(void *spec, void *new_spec);
/* A waiting process is still what spec would start now? Else it is stopped and replaced at the refill. */
typedef bool (*PoolKeepFunc)(void *spec, const PoolItem *it);
/* A waiting process went unused: it ended by itself or wrote to stdout/stderr. */
typedef void (*PoolDroppedFunc)(void *spec, const PoolItem *it);

typedef struct PoolTargetOps {
        PoolSpawnFunc spawn;
        PoolCheckFunc check;            /* may be NULL */
        PoolSpecFreeFunc free_spec;     /* may be NULL */
        PoolSpecUpdateFunc update;      /* may be NULL */
        PoolKeepFunc keep;              /* may be NULL */
        PoolDroppedFunc dropped;        /* may be NULL */
} PoolTargetOps;

/* How well a waiting process suits the taker: < 0 not at all; the highest wins, a ready one before others. */
typedef int (*PoolAcceptFunc)(const PoolItem *it, void *userdata);

#define POOL_MAX_TARGETS 4
#define POOL_TARGET_IDLE_USEC (10 * 60 * USEC_PER_SEC)
#define POOL_DEPTH_BURST_USEC (2 * USEC_PER_SEC)
#define POOL_DEPTH_DECAY_USEC (30 * USEC_PER_SEC)

/* sched: where each waiting process holds a SCHED_PRESTART place of the uid it was started for (NULL: none). */
int pool_new(Pool **ret, sd_event *e, Scheduler *sched, unsigned size);
/* Kills every process in it. */
Pool *pool_free(Pool *p);
/* The most per target; a change flushes. 0: the pool is off. */
void pool_set_size(Pool *p, unsigned size);
unsigned pool_size(const Pool *p);

/*
 * The target key was just used by uid (SCHEDULER_DAEMON_UID: by nobody yet): remember it (taking spec; freed at
 * once when the target is known) and start what is missing of uid's processes for it. Starting never waits for
 * the processes. 0; the spawn function's positive outcome when it had nothing to start (PoolSpawnFunc); -errno.
 */
int pool_refill(Pool *p, const char *key, uid_t uid, const PoolTargetOps *ops, void *spec);
/*
 * A started process for key that uid may take (its own, else the daemon's) and accept (NULL: any) takes: 1 and
 * *ret filled (the caller owns it all now), 0 if there is none. A process is ready when its out_fd is readable
 * (it wrote that it waits); a ready one is taken before any that is still starting, then uid's own before the
 * daemon's. When it was the daemon's, *ret_shared (unless NULL) is set: refill that at once.
 */
int pool_take(Pool *p, const char *key, uid_t uid, PoolAcceptFunc accept, void *userdata, PoolItem *ret,
              bool *ret_shared);
/* uid's calls for key come faster than its processes start (uid's depth grew): a taker should start the
 * replacement at once rather than after its work. */
bool pool_in_burst(const Pool *p, const char *key, uid_t uid);
/* Kill every waiting process and forget all targets (the policy changed). */
void pool_flush(Pool *p);
/* Waiting processes, all targets together. */
unsigned pool_n_ready(const Pool *p);
/* For tests: how many targets it keeps (unused ones go after a while). */
unsigned pool_n_targets(const Pool *p);
/* The depth of each target's deepest user now, all targets together (each user's processes are refilled to their
 * own depth). */
unsigned pool_n_wanted(const Pool *p);
/* Call f for each target's spec and the number of processes waiting for it. */
void pool_foreach_target(const Pool *p, void (*f)(void *spec, unsigned n_waiting, unsigned depth, void *userdata),
                         void *userdata);

/* The taken process's run starts now: its duration counts from here, and it is killed after timeout_usec
 * (0: never) as process_spawn()'s timeout would. */
int pool_item_start(PoolItem *it, sd_event *e, uint64_t timeout_usec);
/* Kill and close what is left of an item. */
void pool_item_done(PoolItem *it);
