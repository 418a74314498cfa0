/* SPDX-License-Identifier: MIT */
#include "cpu-share.h"
#include "macro.h"

static unsigned shift_of(double recent) {
        unsigned shift = 0;

        for (double light = CPU_SHARE_LIGHT; recent > light && shift < CPU_SHARE_MAX_SHIFT; light *= 2)
                shift++;
        return shift;
}

size_t cpu_share_tick(CpuShare *s, const uint64_t *usage_usec, size_t n, uint64_t interval_usec) {
        /* What is left of the average after interval_usec: about 2^(-interval / half-life), without libm. */
        double tau = CPU_SHARE_HALF_LIFE_USEC / 0.693147, keep = tau / (tau + interval_usec);
        size_t changed = 0;

        if (interval_usec == 0)
                return 0;
        for (size_t i = 0; i < n; i++) {
                if (usage_usec[i] == CPU_SHARE_UNKNOWN)
                        continue;
                /* The first reading, or a counter that went back (a group made anew): nothing to compare with. */
                if (s[i].last_usec != CPU_SHARE_UNKNOWN && usage_usec[i] >= s[i].last_usec) {
                        double used = (double) (usage_usec[i] - s[i].last_usec) / interval_usec;
                        /* Up at once, down slowly: a burst counts from its first tick, and one quiet tick does
                         * not make a heavy group light. */
                        s[i].recent = MAX(used, s[i].recent * keep + used * (1 - keep));
                }
                s[i].last_usec = usage_usec[i];
                unsigned shift = shift_of(s[i].recent);
                if (shift != s[i].shift) {
                        s[i].shift = shift;
                        changed++;
                }
        }
        return changed;
}

bool cpu_share_active(const CpuShare *s) {
        return s->recent >= CPU_SHARE_LIGHT / 16 || s->shift > 0;
}

bool cpu_share_busy(const CpuShare *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (cpu_share_active(&s[i]))
                        return true;
        return false;
}

unsigned cpu_share_weight(unsigned base, unsigned shift) {
        if (base == 0)
                return 0;
        return MAX(base >> MIN(shift, 31u), 1u);
}
