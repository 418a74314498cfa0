/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdint.h>
#include <time.h>

#include "macro.h"

/* The monotonic clock in microseconds: for durations and ages, never for wall time. */
static inline uint64_t now_usec(void) {
        struct timespec ts;

        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / NSEC_PER_USEC;
}

/* The wall clock in nanoseconds since the epoch: only for what must differ from an earlier daemon's (names), or what
 * a person reads; never for durations. */
static inline uint64_t now_realtime_nsec(void) {
        struct timespec ts;

        (void) clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

/* CPU time the calling thread has used, in microseconds: what one callback of the event loop cost. */
static inline uint64_t thread_cpu_usec(void) {
        struct timespec ts;

        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
                return 0;
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / NSEC_PER_USEC;
}
