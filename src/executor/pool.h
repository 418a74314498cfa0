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

/* Start one process for spec, passing done and userdata to process_spawn. */
typedef int (*PoolSpawnFunc)(void *spec, ProcessDoneFunc done, void *userdata, PoolItem *ret);
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

/* sched: where each waiting process holds a SCHED_PRESTART place of the daemon's own account (NULL: none). */
int pool_new(Pool **ret, sd_event *e, Scheduler *sched, unsigned size);
/* Kills every process in it. */
Pool *pool_free(Pool *p);
/* Per target; a change flushes. 0: the pool is off. */
void pool_set_size(Pool *p, unsigned size);
unsigned pool_size(const Pool *p);

/*
 * The target key was just used: remember it (taking spec; freed at once when the target is known) and start
 * what is missing. Starting never waits for the processes.
 */
int pool_refill(Pool *p, const char *key, const PoolTargetOps *ops, void *spec);
/* A started process for key: 1 and *ret filled (the caller owns it all now), 0 if there is none. */
int pool_take(Pool *p, const char *key, PoolItem *ret);
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
