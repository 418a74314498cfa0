/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * CPU weights that follow recent use: the scheduler's policy for the CPUs, as scheduler.h's loop priorities are for
 * the event loop. The mechanism, reading each group's use and writing its weight, is the cgroups' (cgroup-mode.c).
 *
 * The groups of runs (one per user, the daemon's, see sandbox/limits.h) share the CPUs by weight, equal for every
 * user. Equal weights share CPU time fairly, but not waiting: the kernel's scheduler lets a task that wakes up wait
 * behind the slices of the other groups that want the CPU, so on a busy machine a user whose runs are light (an
 * agent's hello world) waits, for each of its few milliseconds of work, behind a user who keeps the CPUs busy.
 * Measured on two CPUs beside a neighbour building 60 environments: 15-35 ms for a 1 ms run, most of it spent
 * runnable behind the neighbour's sandboxes starting and the daemon's background work.
 *
 * So each user's group's use is read every CPU_SHARE_TICK_USEC and kept as an average that rises at once to a new
 * peak and decays with a half-life of CPU_SHARE_HALF_LIFE_USEC. A group that uses more than CPU_SHARE_LIGHT of a CPU
 * has its weight halved for each doubling above it, down to 1/2^CPU_SHARE_MAX_SHIFT. Weight decides only who goes
 * first when several want a CPU: a group alone still gets every CPU; groups that each keep a CPU busy end up with
 * equal weights and equal shares; a light group's wake-ups go ahead of a heavy one's.
 *
 * Not the daemon's own group (a quarter of a user's weight already): what it starts for whoever comes first
 * (sandboxes ahead, metadata readers) is on every user's way. Demoted with the users' groups, a light user's runs
 * waited longer than with no weights at all (p99 up to 95 ms against 16-31 ms; measured while children still held
 * the daemon's descriptors until their exec, see process.c, which made the waits longer still).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "time-util.h"

#define CPU_SHARE_TICK_USEC (500 * USEC_PER_MSEC)
#define CPU_SHARE_HALF_LIFE_USEC (2 * USEC_PER_SEC)
#define CPU_SHARE_LIGHT 0.1             /* CPUs: at most this, full weight (an agent's short runs use less) */
#define CPU_SHARE_MAX_SHIFT 5           /* the least weight: 1/32 */
#define CPU_SHARE_UNKNOWN UINT64_MAX    /* a group's use could not be read */

typedef struct CpuShare {
        uint64_t last_usec;     /* the group's CPU time at the last tick; CPU_SHARE_UNKNOWN before the first */
        double recent;          /* CPUs it used lately */
        unsigned shift;         /* its weight is the base weight / 2^shift */
} CpuShare;

#define CPU_SHARE_INIT ((CpuShare) { .last_usec = CPU_SHARE_UNKNOWN })

/*
 * One tick of a group: usage_usec is its CPU time now (CPU_SHARE_UNKNOWN: not read, s left as it was),
 * interval_usec since the last tick. Returns whether its weight changed.
 */
bool cpu_share_update(CpuShare *s, uint64_t usage_usec, uint64_t interval_usec);

/* Is a group using CPU, or below its full weight: worth reading at the next tick? (A quiet group is read again once
 * a run of its starts.) */
bool cpu_share_active(const CpuShare *s);

/* The weight (percent of the kernel's default) of a group of base weight: base / 2^shift, at least 1 (0 stays 0:
 * the least there is). */
unsigned cpu_share_weight(unsigned base, unsigned shift);
