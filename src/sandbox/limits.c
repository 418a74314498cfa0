/* SPDX-License-Identifier: MIT */
/*
 * The limits of a run as a model (the configured maximum, what a call may lower), the rlimits that carry them
 * where there is no cgroup, and what a failed run hit. The cgroups that carry them otherwise are in cgroup.c
 * (creating, filling and removing them, on either version) and cgroup-mode.c (which of those this daemon uses).
 */
#include <ctype.h>
#include <signal.h>
#include <string.h>

#include "config/config.h"
#include "limits.h"
#include "macro.h"

void sandbox_limits_from_config(const Config *c, SandboxLimits *ret) {
        *ret = (SandboxLimits) {
                .memory = c->max_memory,
                .processes = c->max_processes,
                /* Wall-clock time is capped by the timeout; CPU time only adds up faster with threads. */
                .cpu_usec = c->max_cpu_time_usec ?: c->max_timeout_usec + SANDBOX_CPU_MARGIN_USEC,
                .file_size = c->max_file_size ?: c->tmpfs_size,
                .open_files = c->max_open_files,
                .cpu_quota = c->cpu_quota,
                .owner = SANDBOX_OWNER_DAEMON,
        };
}

static uint64_t mul_sat(uint64_t a, uint64_t b) {
        return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

static uint64_t add_sat(uint64_t a, uint64_t b) {
        return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

void sandbox_service_need(uint64_t scripts, uint64_t processes, uint64_t memory, uint64_t mem_total,
                          SandboxServiceLimits *ret) {
        uint64_t share = mem_total > 0 ? mul_sat(mem_total, SANDBOX_SERVICE_MEMORY_SHARE) / 100
                                       : SANDBOX_SERVICE_UNLIMITED;

        *ret = (SandboxServiceLimits) {
                .tasks = processes == 0 ? SANDBOX_SERVICE_UNLIMITED
                                        : add_sat(mul_sat(scripts, processes), SANDBOX_SERVICE_TASKS_MARGIN),
                .memory = MIN(memory == 0 ? SANDBOX_SERVICE_UNLIMITED
                                          : add_sat(mul_sat(scripts, memory), SANDBOX_SERVICE_MEMORY_MARGIN),
                              share),
        };
}

static uint64_t lower_one(uint64_t max, uint64_t want, unsigned bit, unsigned *raised) {
        if (want == 0)
                return max;
        if (max != 0 && want > max) {
                *raised |= bit;
                return max;
        }
        return want;
}

unsigned sandbox_limits_lower(const SandboxLimits *max, const SandboxLimits *want, SandboxLimits *ret) {
        unsigned raised = 0;
        SandboxLimits l = *max;

        l.memory = lower_one(max->memory, want->memory, SANDBOX_LIMIT_MEMORY, &raised);
        l.processes = lower_one(max->processes, want->processes, SANDBOX_LIMIT_PROCESSES, &raised);
        l.cpu_usec = lower_one(max->cpu_usec, want->cpu_usec, SANDBOX_LIMIT_CPU, &raised);
        l.file_size = lower_one(max->file_size, want->file_size, SANDBOX_LIMIT_FILE_SIZE, &raised);
        *ret = l;
        return raised;
}

bool sandbox_limits_equal(const SandboxLimits *a, const SandboxLimits *b) {
        return a->memory == b->memory && a->processes == b->processes && a->cpu_usec == b->cpu_usec &&
               a->file_size == b->file_size && a->open_files == b->open_files && a->cpu_quota == b->cpu_quota &&
               a->cpu_usec_without_cgroup == b->cpu_usec_without_cgroup;
}

size_t sandbox_limits_rlimits(const SandboxLimits *l, bool cgroup, ProcessLimit ret[static SANDBOX_N_RLIMITS]) {
        size_t n = 0;

        ret[n++] = (ProcessLimit) { .resource = RLIMIT_CORE, .value = 0 };
        if (l->cpu_usec > 0 && !(cgroup && l->cpu_usec_without_cgroup)) {
                rlim_t s = (rlim_t) ((l->cpu_usec + 999999) / 1000000);
                /* SIGXCPU at the soft limit (it ends Python), SIGKILL a little later for whoever ignores it. */
                ret[n++] = (ProcessLimit) { .resource = RLIMIT_CPU, .value = s, .hard = s + 5 };
        }
        /* Python ignores SIGXFSZ: a write past the limit fails with EFBIG. */
        if (l->file_size > 0)
                ret[n++] = (ProcessLimit) { .resource = RLIMIT_FSIZE, .value = (rlim_t) l->file_size };
        if (l->open_files > 0)
                ret[n++] = (ProcessLimit) { .resource = RLIMIT_NOFILE, .value = (rlim_t) l->open_files };
        if (!cgroup && l->memory > 0)
                ret[n++] = (ProcessLimit) { .resource = RLIMIT_AS, .value = (rlim_t) l->memory };
        if (!cgroup && l->processes > 0)
                ret[n++] = (ProcessLimit) { .resource = RLIMIT_NPROC, .value = (rlim_t) l->processes };
        return n;
}

/* ---- what hit a limit --------------------------------------------------- */

/* "numpy.core._exceptions._ArrayMemoryError: ..." or "MemoryError": a dotted name ending in MemoryError. */
static bool is_memory_error(const char *line, size_t n) {
        static const char name[] = "MemoryError";
        size_t i = 0;

        while (i < n && (isalnum((unsigned char) line[i]) || line[i] == '_' || line[i] == '.'))
                i++;
        if (i < sizeof(name) - 1 || memcmp(line + i - (sizeof(name) - 1), name, sizeof(name) - 1) != 0)
                return false;
        return i == n || line[i] == ':' || isspace((unsigned char) line[i]);
}

static bool line_has(const char *line, size_t n, const char *s) {
        size_t l = strlen(s);

        for (size_t i = 0; i + l <= n; i++)
                if (memcmp(line + i, s, l) == 0)
                        return true;
        return false;
}

static const char *classify_line(const char *line, size_t n) {
        if (is_memory_error(line, n) || line_has(line, n, "[Errno 12] Cannot allocate memory"))
                return "memory";
        if ((line_has(line, n, "BlockingIOError") && line_has(line, n, "[Errno 11]")) ||
            line_has(line, n, "can't start new thread") || line_has(line, n, "can't create new thread") ||
            (n > 6 && memcmp(line, "bwrap:", 6) == 0 && line_has(line, n, "Resource temporarily unavailable")))
                return "processes";
        if (line_has(line, n, "[Errno 27] File too large"))
                return "file_size";
        if (line_has(line, n, "[Errno 28] No space left on device"))
                return "disk_space";
        if (line_has(line, n, "[Errno 24] Too many open files"))
                return "open_files";
        return NULL;
}

int sandbox_exit_signal(int exit_code) {
        return exit_code > 128 && exit_code < 128 + NSIG ? exit_code - 128 : 0;
}

const char *sandbox_limit_hit(const SandboxOutcome *o) {
        const char *found = NULL;
        int sig = o->signal ?: o->decoded ? 0 : sandbox_exit_signal(o->exit_code);

        /* What the run's cgroup counted comes first, before the timeout too: a fork bomb that swallows EAGAIN
         * runs into the timeout, but the process limit it kept hitting is what explains the run. */
        if (o->oom_killed)
                return "memory";
        if (o->pids_max)
                return "processes";
        if (o->timed_out)
                return "timeout";
        if (sig == SIGXCPU)
                return "cpu_time";
        if (sig == SIGXFSZ)
                return "file_size";

        /* The last line naming an exhausted resource: the exception that ended the script comes last. */
        for (const char *l = o->stderr_text; l && *l;) {
                const char *e = strchrnul(l, '\n');
                const char *what = classify_line(l, (size_t) (e - l));
                if (what)
                        found = what;
                l = *e ? e + 1 : e;
        }
        return found;
}
