/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Process: one child watched by the event loop. stdout and stderr are read
 * as they arrive into bounded captures; a timer kills the whole process group
 * when the time is up; the done callback runs once the child is reaped and
 * its pipes are closed. Children, never threads.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "capture.h"

typedef struct Process Process;
/*
 * Reaper: what outlives the Processes of a daemon, owned by whoever owns their lifetime (the manager) and handed to
 * each spawn in ProcessOptions: the processes detached before they exited, until they are reaped; the cgroups still
 * busy when their process was freed, until they can be removed (from a timer, never by waiting in the event loop);
 * and the cgroups background work joins.
 */
typedef struct Reaper Reaper;
typedef void (*ProcessDoneFunc)(Process *p, void *userdata);
typedef void (*ProcessReleaseFunc)(void *userdata);
/* A piece of what the child wrote, as it arrives; it must not free p. */
typedef void (*ProcessOutputFunc)(Process *p, const char *data, size_t n, void *userdata);

/* The niceness of work done beside the runs (environment builds, Python installs, the store's walk). */
#define BACKGROUND_NICE 10
/* From the SIGWINCH that asks a run to flush its output at its timeout to the SIGKILL (flush_on_timeout). */
#define PROCESS_FLUSH_GRACE_USEC (500 * UINT64_C(1000))

typedef struct ProcessLimit {
        int resource;              /* RLIMIT_* */
        rlim_t value;              /* the soft limit */
        rlim_t hard;               /* 0: the same as value */
} ProcessLimit;

typedef struct ProcessOptions {
        char *const *argv;
        char *const *env;          /* NULL: an empty environment */
        const char *cwd;           /* NULL: "/" */
        const int *keep_fds;       /* passed to the child at the same numbers */
        size_t n_keep_fds;
        int stdin_fd;              /* -EBADF: /dev/null */
        uint64_t timeout_usec;     /* 0: none */
        size_t head_max, tail_max; /* per stream */
        const ProcessLimit *limits;   /* set in the child; never above the hard limit it inherits */
        size_t n_limits;
        int nice;                  /* the child's niceness, when above ours: background work (builds) yields the
                                    * CPU to runs; 0: ours */
        bool idle;                 /* SCHED_IDLE and the idle I/O class: it runs only when nothing else wants to */
        char *const *cgroups;      /* the cgroup directories the child enters before it execs (v2: one; v1: one
                                    * in each hierarchy); emptied and removed at process_free() (NULL: stay in
                                    * ours) */
        int (*make_cgroups)(void *userdata);   /* run by the child first, before it enters cgroups: makes
                                                * them there, as a mkdir of a cgroup waits on a lock of the whole
                                                * machine's (cgroup v1: milliseconds beside a busy neighbour) that
                                                * the event loop must not. A negative errno: the child enters
                                                * none and sets fallback_limits instead, and says so to the daemon
                                                * (Process.fallback_fd), or without those says so on its stderr and
                                                * exits 127. NULL: they are made already */
        void *make_cgroups_userdata;
        const ProcessLimit *fallback_limits;   /* see make_cgroups; NULL: none */
        size_t n_fallback_limits;
        const char *remove_dir;    /* removed with all it holds (rm_rf_untrusted()) at process_free(), after the
                                    * child is reaped; when process_spawn() fails, the caller removes it */
        uid_t uid;                 /* the child drops every group and becomes uid:gid before it execs (only a
                                    * root daemon can); 0: it stays who we are */
        gid_t gid;
        Reaper *reaper;            /* keeps its cgroups that are still busy at process_free(), and it once
                                    * detached; gives background work (nice) its cgroups. NULL: busy cgroups are
                                    * tried for 20 ms and left, a detach kills and reaps it now */
        ProcessReleaseFunc release;   /* called once: from process_free(), after the child is reaped (when
                                       * its cgroups are still busy then, once they are gone, from a timer),
                                       * or by process_spawn() when it fails; NULL: none */
        void *release_userdata;
} ProcessOptions;

struct Process {
        sd_event *event;
        pid_t pid;
        int stdout_fd, stderr_fd;
        sd_event_source *child_source, *stdout_source, *stderr_source, *timer_source;
        Capture out, err;
        uint64_t start_usec, end_usec;
        char **cgroups;            /* from ProcessOptions */
        int fallback_fd;           /* with make_cgroups and fallback_limits: the child writes one byte here when it
                                    * fell back to rlimits, none when it went into its cgroups; closed once read (or
                                    * at its exec) */
        bool outside_cgroups;      /* it said so: its processes are not in cgroups, only below it in /proc */
        char *remove_dir;          /* from ProcessOptions */
        uid_t uid;                 /* from ProcessOptions */
        Reaper *reaper;            /* from ProcessOptions */
        ProcessReleaseFunc release;
        void *release_userdata;

        bool exited;
        int exit_code;             /* when exited normally */
        int signal;                /* when killed by a signal, else 0 */
        bool timed_out;
        bool killed;               /* by us: timeout or process_kill() */
        bool flush_on_timeout;     /* at the timeout, SIGWINCH to its processes first (its cgroups', or without
                                    * cgroups every descendant /proc shows), SIGKILL PROCESS_FLUSH_GRACE_USEC
                                    * later: a run flushes its buffered output then */
        bool flushing;             /* that SIGWINCH was sent */

        ProcessDoneFunc done;
        void *userdata;
        ProcessOutputFunc stderr_func;
        void *stderr_userdata;
        Process *detached_prev, *detached_next;   /* process_detach()'s list */
};

/* Start the child. On exec failure the child exits 127 and stderr says why. */
int process_spawn(sd_event *e, const ProcessOptions *o, ProcessDoneFunc done, void *userdata, Process **ret);
/* Also hand stderr to f as it arrives (the capture keeps it as well); NULL: no more. */
void process_set_stderr_func(Process *p, ProcessOutputFunc f, void *userdata);
/* Kill the process group now; done still runs (unless the Process is freed). */
void process_kill(Process *p);
/* Whether the child has gone past its cgroups: it entered them (or fell back to its limits) and execed, or it is
 * gone. Until then a process of it may still be on its way into them. Without cgroups made by the child
 * (make_cgroups with fallback_limits), always. */
bool process_settled(Process *p);
/* Its time is up: sets timed_out and kills it, or, with flush_on_timeout, first sends SIGWINCH and
 * returns 1: the timer (timer_source) then fires once more, PROCESS_FLUSH_GRACE_USEC later, to kill it. */
int process_timeout(Process *p);
Process *process_free(Process *p);
/* Read what stdout and stderr hold now, at most max bytes each, without waiting. */
void process_drain(Process *p, size_t max);
/* Done with it before it exited: kill it, stop reading it; it is reaped and freed in the background, by its
 * reaper (without one: now). */
void process_detach(Process *p);

int reaper_new(Reaper **ret);
/* reaper_finish(), then the rest. The processes spawned with it are gone by then. */
Reaper *reaper_free(Reaper *r);
static inline void reaper_freep(Reaper **r) {
        if (*r)
                reaper_free(*r);
}
/* At exit, while what the releases of its processes use is still there: reap and free the detached processes
 * still dying (their cgroups and directories go with them), and remove the cgroups that were still busy when their
 * process was freed, up to a second each, then release their processes whatever stayed. Again later: only what
 * was kept since. */
void reaper_finish(Reaper *r);
/* Where a child with a nice value (background work: builds, Python installs) goes when it has no cgroups of its
 * own: it joins these (best effort), which are neither killed nor removed with it. Takes paths; NULL: nowhere. */
void reaper_set_background_cgroups(Reaper *r, char **paths);
/* For tests: how many processes are detached and not reaped yet. */
unsigned reaper_n_detached(const Reaper *r);
/* Remove cgroups no process is in any more (those a sandbox was moved out of): by a child of ours, later
 * (cgroup-remove.h); without a reaper, or where one is not empty, an rmdir here, which fails at once for a busy one. */
void reaper_remove_empty_cgroups(Reaper *r, sd_event *e, char *const *paths);
/* For tests: how many cgroups are kept, waiting to be removed. */
size_t reaper_n_busy_cgroups(const Reaper *r);
/* For tests: how many empty cgroups wait for their rmdir, which a child of ours does (cgroup-remove.h); and a delay
 * that child waits before it begins. */
size_t reaper_n_removing(const Reaper *r);
void reaper_set_remover_delay(Reaper *r, uint64_t usec);
static inline void process_freep(Process **p) {
        if (*p)
                process_free(*p);
}
uint64_t process_duration_usec(const Process *p);
