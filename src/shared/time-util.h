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
