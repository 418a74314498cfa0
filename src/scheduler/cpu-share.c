/* SPDX-License-Identifier: MIT */
#include "cpu-share.h"
#include "macro.h"

static unsigned shift_of(double recent) {
        unsigned shift = 0;

        for (double light = CPU_SHARE_LIGHT; recent > light && shift < CPU_SHARE_MAX_SHIFT; light *= 2)
                shift++;
        return shift;
}

bool cpu_share_update(CpuShare *s, uint64_t usage_usec, uint64_t interval_usec) {
        /* What is left of the average after interval_usec: about 2^(-interval / half-life), without libm. */
        double tau = CPU_SHARE_HALF_LIFE_USEC / 0.693147, keep = tau / (tau + interval_usec);
        unsigned shift;

        if (interval_usec == 0 || usage_usec == CPU_SHARE_UNKNOWN)
                return false;
        /* The first reading, or a counter that went back (a group made anew): nothing to compare with. */
        if (s->last_usec != CPU_SHARE_UNKNOWN && usage_usec >= s->last_usec) {
                double used = (double) (usage_usec - s->last_usec) / interval_usec;
                /* Up at once, down slowly: a burst counts from its first tick, and one quiet tick does not make a
                 * heavy group light. */
                s->recent = MAX(used, s->recent * keep + used * (1 - keep));
        }
        s->last_usec = usage_usec;
        shift = shift_of(s->recent);
        if (shift == s->shift)
                return false;
        s->shift = shift;
        return true;
}

bool cpu_share_active(const CpuShare *s) {
        return s->recent >= CPU_SHARE_LIGHT / 16 || s->shift > 0;
}

unsigned cpu_share_weight(unsigned base, unsigned shift) {
        if (base == 0)
                return 0;
        return MAX(base >> MIN(shift, 31u), 1u);
}
