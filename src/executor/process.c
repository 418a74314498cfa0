/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs-util.h"
#include "macro.h"
#include "process.h"
#include "process-signal.h"
#include "cgroup-remove.h"
#include "strv.h"
#include "time-util.h"

uint64_t process_duration_usec(const Process *p) {
        return (p->end_usec ?: now_usec()) - p->start_usec;
}

static void maybe_done(Process *p) {
        if (!p->exited || p->stdout_fd >= 0 || p->stderr_fd >= 0)
                return;
        if (!p->end_usec)
                p->end_usec = now_usec();
        p->timer_source = sd_event_source_disable_unref(p->timer_source);
        if (p->done) {
                ProcessDoneFunc done = TAKE_PTR(p->done);
                done(p, p->userdata);
        }
}

static void add_output(Process *p, bool is_out, const char *buf, size_t n) {
        capture_add(is_out ? &p->out : &p->err, buf, n);
        if (!is_out && p->stderr_func)
                p->stderr_func(p, buf, n, p->stderr_userdata);
}

void process_set_stderr_func(Process *p, ProcessOutputFunc f, void *userdata) {
        p->stderr_func = f;
        p->stderr_userdata = userdata;
}

static void close_pipe(Process *p, int *fd, sd_event_source **s) {
        *s = sd_event_source_disable_unref(*s);
        *fd = safe_close(*fd);
}

static int on_output(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Process *p = userdata;
        bool is_out = fd == p->stdout_fd;
        char buf[65536];
        ssize_t n;

        n = read(fd, buf, sizeof(buf));
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (n > 0) {
                add_output(p, is_out, buf, (size_t) n);
                return 0;
        }
        /* EOF or error: this stream is finished. */
        if (is_out)
                close_pipe(p, &p->stdout_fd, &p->stdout_source);
        else
                close_pipe(p, &p->stderr_fd, &p->stderr_source);
        maybe_done(p);
        return 0;
}

/* Cgroups still busy when their process was freed (its processes were on their way out): removed later, from a
 * timer, never by waiting in the event loop. The process's release waits for the last of its cgroups. */
typedef struct BusyRelease {
        unsigned n;             /* its cgroups still busy */
        ProcessReleaseFunc release;
        void *userdata;
        struct BusyRelease *next;
} BusyRelease;
typedef struct BusyCgroup {
        char *path;
        BusyRelease *owner;     /* NULL: nothing waits for it */
} BusyCgroup;

struct Reaper {
        BusyCgroup *busy_cgroups;
        size_t n_busy_cgroups;
        sd_event_source *busy_timer, *busy_idle;
        uint64_t busy_delay;
        bool removing;                  /* in remove_busy_cgroups(): a release freed a process */
        CgroupRemover remover;          /* the empty ones: removed by a child, off the loop */
        Process *detached;              /* until they are reaped: the list keeps them reachable */
        char **background_cgroups;
};

int reaper_new(Reaper **ret) {
        Reaper *r = calloc(1, sizeof(*r));

        if (!r)
                return -ENOMEM;
        *ret = r;
        return 0;
}

/* Remove a cgroup, killing what is left in it and waiting up to about tries ms for it to go; -EBUSY if it stays. */
static int cgroup_remove(const char *cgroup, unsigned tries) {
        for (unsigned i = 0;; i++) {
                if (rmdir(cgroup) >= 0 || errno == ENOENT)
                        return 0;
                if (errno != EBUSY)
                        return -errno;
                cgroup_kill(cgroup);
                if (i >= tries)
                        return -EBUSY;
                (void) usleep(1000);
        }
}

/* In the loop, never an rmdir of a cgroup that has processes: it fails at once, but when they are gone by then it
 * succeeds, and waits for the kernel as long as any. Empty, it goes to the remover; busy, what is in it is killed
 * and it stays (true); gone or unreadable, it is forgotten. */
static bool still_busy(Reaper *r, sd_event *e, const char *cgroup) {
        int k = cgroup_empty(cgroup);

        if (k > 0)
                cgroup_remover_add(&r->remover, e, cgroup);
        else if (k == 0)
                cgroup_kill(cgroup);
        else if (k != -ENOENT)
                (void) rmdir(cgroup);
        return k == 0;
}

/* What the loop gives the kept cgroups in one turn: a cgroup v1 rmdir can take milliseconds (the kernel waits for
 * RCU), and dozens at once would hold up every client. The rest wait for the next idle turn. */
#define BUSY_CGROUPS_BUDGET_USEC (2 * USEC_PER_MSEC)

/* Try the busy cgroups again; force: give up on those that stay (at exit) and release their processes anyway.
 * budget_usec: stop trying once that is spent (0: no bound); returns true when it cut the round short. */
static bool remove_busy_cgroups(Reaper *r, sd_event *e, unsigned tries, bool force, uint64_t budget_usec) {
        uint64_t end = budget_usec > 0 ? now_usec() + budget_usec : UINT64_MAX;
        BusyRelease *done = NULL;
        bool cut = false;
        size_t j = 0;

        if (r->removing)
                return false;   /* a release below freed a process: the loop here goes on */
        r->removing = true;
        for (size_t i = 0; i < r->n_busy_cgroups; i++) {
                BusyCgroup *b = &r->busy_cgroups[i];
                if (!force && i > 0 && now_usec() >= end) {
                        cut = true;
                        r->busy_cgroups[j++] = *b;
                        continue;
                }
                if (force)
                        (void) cgroup_remove(b->path, tries);
                else if (still_busy(r, e, b->path)) {
                        r->busy_cgroups[j++] = *b;
                        continue;
                }
                free(b->path);
                if (b->owner && --b->owner->n == 0) {
                        b->owner->next = done;
                        done = b->owner;
                }
        }
        r->n_busy_cgroups = j;
        /* The releases last: they may free and spawn processes, which come back here. */
        while (done) {
                BusyRelease *x = done;
                done = x->next;
                if (x->release)
                        x->release(x->userdata);
                free(x);
        }
        r->removing = false;
        return cut;
}

/* Keep p's cgroups that are still busy for later (later: the loop runs, and they are looked at once, still_busy();
 * the rest go when the event loop has nothing else to do, or from the timer). Returns true when p's release waits
 * for them: most often it does not, and what the run held (its uid, its slot) is free at once. */
static bool keep_busy_cgroups(Reaper *r, Process *p, bool later) {
        BusyRelease *x = NULL;
        size_t n = 0;
        char **left = NULL;

        if (!r) {
                /* Nothing to keep them in: a try of up to 20 ms each, what stays busy is the next daemon's. */
                for (size_t i = 0; p->cgroups && p->cgroups[i]; i++)
                        (void) cgroup_remove(p->cgroups[i], 20);
                return false;
        }
        for (size_t i = 0; p->cgroups && p->cgroups[i]; i++) {
                /* Later (the loop runs): empty, which it is once the sandbox's processes are gone, it goes to the
                 * remover, and what it held is free at once; busy: kept. Else (the daemon is exiting) given up to
                 * 20 ms here, as nothing retries. */
                if ((later ? still_busy(r, p->event, p->cgroups[i]) : cgroup_remove(p->cgroups[i], 20) == -EBUSY) &&
                    strv_extend(&left, p->cgroups[i]) >= 0)
                        n++;
        }
        if (n == 0)
                return false;
        BusyCgroup *a = realloc(r->busy_cgroups, (r->n_busy_cgroups + n) * sizeof(*a));
        if (p->release)
                x = calloc(1, sizeof(*x));
        if (!a || (p->release && !x)) {
                /* No memory to wait: they stay for the next daemon to remove; the release goes now. */
                if (a)
                        r->busy_cgroups = a;
                free(x);
                strv_free(left);
                return false;
        }
        r->busy_cgroups = a;
        if (x)
                *x = (BusyRelease) { .n = (unsigned) n, .release = p->release, .userdata = p->release_userdata };
        for (size_t i = 0; i < n; i++)
                r->busy_cgroups[r->n_busy_cgroups++] = (BusyCgroup) { .path = left[i], .owner = x };
        free(left);   /* the strings live on in busy_cgroups */
        return x != NULL;
}

static int on_busy_timer(sd_event_source *s, uint64_t usec, void *userdata);

/* While cgroups are kept, try them again after a while: 10 ms, then (again: from the timer, some stayed busy)
 * doubling up to a second. */
static void retry_busy_cgroups_later(Reaper *r, sd_event *e, bool again) {
        int enabled = SD_EVENT_OFF;

        if (!r)
                return;
        if (r->n_busy_cgroups == 0) {
                r->busy_delay = 0;
                if (r->busy_timer)
                        (void) sd_event_source_set_enabled(r->busy_timer, SD_EVENT_OFF);
                return;
        }
        /* A timer already set is not put off by more cgroups kept: under a steady stream of them it still fires. */
        if (!again && r->busy_timer && sd_event_source_get_enabled(r->busy_timer, &enabled) >= 0 &&
            enabled != SD_EVENT_OFF)
                return;
        r->busy_delay = again && r->busy_delay ? MIN(r->busy_delay * 2, USEC_PER_SEC) : 10 * USEC_PER_MSEC;
        if (!r->busy_timer) {
                if (!e || sd_event_add_time_relative(e, &r->busy_timer, CLOCK_MONOTONIC, r->busy_delay, 0,
                                                     on_busy_timer, r) < 0)
                        return;   /* then at the next spawn or free */
                return;
        }
        (void) sd_event_source_set_time_relative(r->busy_timer, r->busy_delay);
        (void) sd_event_source_set_enabled(r->busy_timer, SD_EVENT_ONESHOT);
}

static int remove_kept_cgroups_when_idle(Reaper *reaper, sd_event *e);

static int on_busy_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        if (remove_busy_cgroups(userdata, sd_event_source_get_event(s), 0, false, BUSY_CGROUPS_BUDGET_USEC))
                (void) remove_kept_cgroups_when_idle(userdata, sd_event_source_get_event(s));
        retry_busy_cgroups_later(userdata, sd_event_source_get_event(s), true);
        return 0;
}

static int on_busy_idle(sd_event_source *s, void *userdata) {
        /* Cut short: the rest at the next idle turn; what stays busy: from the timer. */
        if (remove_busy_cgroups(userdata, sd_event_source_get_event(s), 0, false, BUSY_CGROUPS_BUDGET_USEC))
                (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        retry_busy_cgroups_later(userdata, sd_event_source_get_event(s), false);
        return 0;
}

/* Remove the kept cgroups when the event loop is idle (what is still busy then: from the timer). */
static int remove_kept_cgroups_when_idle(Reaper *reaper, sd_event *e) {
        int r;

        if (!reaper->busy_idle) {
                r = sd_event_add_defer(e, &reaper->busy_idle, on_busy_idle, reaper);
                if (r < 0)
                        return r;
                (void) sd_event_source_set_priority(reaper->busy_idle, SD_EVENT_PRIORITY_IDLE);
        }
        return sd_event_source_set_enabled(reaper->busy_idle, SD_EVENT_ONESHOT);
}

/*
 * Whether its processes are to be found below it in /proc rather than in its cgroups: it has none (rlimits only),
 * or its child said that it could not make them and fell back to rlimits (make_cgroups, fallback_fd). Not yet
 * known (the child has not got that far): /proc, which finds them either way. Never for cgroups that are there
 * but empty: the run's processes are gone already, and a walk of /proc at the end of every such run would cost
 * the loop milliseconds.
 */
static bool processes_outside_cgroups(Process *p) {
        char c;

        if (!p->cgroups || !p->cgroups[0] || p->outside_cgroups)
                return true;
        if (p->fallback_fd >= 0) {
                ssize_t n = read(p->fallback_fd, &c, 1);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return true;
                /* A byte: it fell back. End of file: it went on into its cgroups (or died), and its exec closed it. */
                p->outside_cgroups = n == 1;
                p->fallback_fd = safe_close(p->fallback_fd);
        }
        return p->outside_cgroups;
}

bool process_settled(Process *p) {
        if (!p || p->exited)
                return true;
        (void) processes_outside_cgroups(p);
        return p->fallback_fd < 0;
}

static void kill_group(Process *p) {
        if (p->pid <= 0 || p->exited)
                return;
        /* Found before it dies, while they are still below it; not with rlimits only, where kill(-pid) and the
         * sandbox's pid namespace have always been enough. */
        if (p->cgroups && processes_outside_cgroups(p))
                (void) signal_descendants(p->pid, SIGKILL);
        (void) kill(-p->pid, SIGKILL);
        (void) kill(p->pid, SIGKILL);
        /* Whatever left the process group, too. */
        for (size_t i = 0; p->cgroups && p->cgroups[i]; i++)
                cgroup_kill(p->cgroups[i]);
}

static int on_child_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        Process *p = userdata;

        p->exited = true;
        p->end_usec = now_usec();
        if (si->si_code == CLD_EXITED)
                p->exit_code = si->si_status;
        else {
                p->signal = si->si_status;
                p->exit_code = 128 + si->si_status;
        }
        /* Nothing asks where its processes are once it has exited (kill_group(), process_timeout()). */
        p->fallback_fd = safe_close(p->fallback_fd);
        /* Anything the child left behind in its process group goes with it. */
        (void) kill(-p->pid, SIGKILL);

        /* Stragglers outside the group could hold the pipes; drain what is there, then stop waiting. */
        for (int i = 0; i < 2; i++) {
                int fd = i == 0 ? p->stdout_fd : p->stderr_fd;
                if (fd < 0)
                        continue;
                for (;;) {
                        char buf[65536];
                        ssize_t n = read(fd, buf, sizeof(buf));
                        if (n <= 0)
                                break;
                        add_output(p, i == 0, buf, (size_t) n);
                }
        }
        close_pipe(p, &p->stdout_fd, &p->stdout_source);
        close_pipe(p, &p->stderr_fd, &p->stderr_source);
        maybe_done(p);
        return 0;
}

int process_timeout(Process *p) {
        if (!p || p->exited)
                return 0;
        p->timed_out = true;
        /* First SIGWINCH, which a process that does not handle it ignores: the run flushes what it buffered (see
         * process.h); the timer comes back once more for the kill. */
        if (p->flush_on_timeout && !p->flushing && p->timer_source) {
                int n = 0;
                p->flushing = true;
                if (processes_outside_cgroups(p))
                        n = signal_descendants(p->pid, SIGWINCH);
                else
                        for (size_t i = 0; p->cgroups[i]; i++)
                                n += MAX(cgroup_signal_listed(p->cgroups[i], SIGWINCH), 0);
                if (n > 0 &&
                    sd_event_source_set_time_relative(p->timer_source, PROCESS_FLUSH_GRACE_USEC) >= 0 &&
                    sd_event_source_set_enabled(p->timer_source, SD_EVENT_ONESHOT) >= 0)
                        return 1;
        }
        p->killed = true;
        kill_group(p);
        return 0;
}

static int on_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        (void) process_timeout(userdata);
        return 0;
}

void process_kill(Process *p) {
        if (!p || p->exited)
                return;
        p->killed = true;
        kill_group(p);
}

Process *process_free(Process *p) {
        if (!p)
                return NULL;
        if (p->pid > 0 && !p->exited) {
                kill_group(p);
                /* Reap it so no zombie stays behind; SIGKILL makes this quick. */
                (void) waitpid(p->pid, NULL, 0);
        }
        sd_event_source_disable_unref(p->child_source);
        sd_event_source_disable_unref(p->stdout_source);
        sd_event_source_disable_unref(p->stderr_source);
        sd_event_source_disable_unref(p->timer_source);
        safe_close(p->stdout_fd);
        safe_close(p->stderr_fd);
        safe_close(p->fallback_fd);
        capture_done(&p->out);
        capture_done(&p->err);
        /* Empty once the child is reaped: its pid namespace went with it. What is still on its way out (or, without
         * the namespace, left the process group) is killed; busy: tried again from a timer, without waiting here. */
        /* While the loop runs, the cgroups go when it is idle; when it is exiting, now. */
        int exit_code;
        bool later = p->reaper && p->cgroups && p->event &&
                     sd_event_get_exit_code(p->event, &exit_code) == -ENODATA &&   /* no exit requested */
                     sd_event_get_state(p->event) != SD_EVENT_FINISHED;
        bool waits = keep_busy_cgroups(p->reaper, p, later);
        strv_free(p->cgroups);
        if (later && p->reaper->n_busy_cgroups > 0 && remove_kept_cgroups_when_idle(p->reaper, p->event) < 0)
                (void) remove_busy_cgroups(p->reaper, p->event, 0, false, BUSY_CGROUPS_BUDGET_USEC);
        retry_busy_cgroups_later(p->reaper, p->event, false);
        if (p->remove_dir) {
                (void) rm_rf_untrusted(p->remove_dir);
                free(p->remove_dir);
        }
        /* Reaped: nothing of it runs as its uid any more (the sandbox's pid namespace went with it); with cgroups
         * still busy, once they are gone. */
        if (p->release && !waits)
                p->release(p->release_userdata);
        sd_event_unref(p->event);
        free(p);
        return NULL;
}

void process_drain(Process *p, size_t max) {
        for (int i = 0; i < 2; i++) {
                int fd = i == 0 ? p->stdout_fd : p->stderr_fd;
                size_t left = max;

                while (fd >= 0 && left > 0) {
                        char buf[65536];
                        ssize_t n = read(fd, buf, MIN(sizeof(buf), left));
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0)
                                break;
                        add_output(p, i == 0, buf, (size_t) n);
                        left -= (size_t) n;
                }
        }
}

void reaper_set_background_cgroups(Reaper *r, char **paths) {
        strv_free(r->background_cgroups);
        r->background_cgroups = paths;
}

static void on_detached_done(Process *p, void *userdata) {
        if (p->detached_prev)
                p->detached_prev->detached_next = p->detached_next;
        else
                p->reaper->detached = p->detached_next;
        if (p->detached_next)
                p->detached_next->detached_prev = p->detached_prev;
        process_free(p);
}

void process_detach(Process *p) {
        if (!p)
                return;
        /* Nothing to hand it to: killed and reaped now. */
        if (p->exited || !p->reaper) {
                process_free(p);
                return;
        }
        if (!p->end_usec)
                p->end_usec = now_usec();
        p->killed = true;
        kill_group(p);
        close_pipe(p, &p->stdout_fd, &p->stdout_source);
        close_pipe(p, &p->stderr_fd, &p->stderr_source);
        p->timer_source = sd_event_source_disable_unref(p->timer_source);
        p->done = on_detached_done;
        p->userdata = NULL;
        p->stderr_func = NULL;
        p->detached_prev = NULL;
        p->detached_next = p->reaper->detached;
        if (p->reaper->detached)
                p->reaper->detached->detached_prev = p;
        p->reaper->detached = p;
}

unsigned reaper_n_detached(const Reaper *r) {
        unsigned n = 0;

        for (Process *p = r->detached; p; p = p->detached_next)
                n++;
        return n;
}

size_t reaper_n_busy_cgroups(const Reaper *r) {
        return r->n_busy_cgroups;
}

void reaper_remove_empty_cgroups(Reaper *r, sd_event *e, char *const *paths) {
        for (size_t i = 0; paths && paths[i]; i++)
                if (r && cgroup_empty(paths[i]) > 0)
                        cgroup_remover_add(&r->remover, e, paths[i]);
                else
                        (void) rmdir(paths[i]);   /* busy: fails at once, and stays for the next daemon */
}

size_t reaper_n_removing(const Reaper *r) {
        return cgroup_remover_pending(&r->remover);
}

void reaper_set_remover_delay(Reaper *r, uint64_t usec) {
        r->remover.delay_usec = usec;
}

void reaper_finish(Reaper *r) {
        if (!r)
                return;
        while (r->detached) {
                Process *p = r->detached;

                r->detached = p->detached_next;
                process_free(p);   /* killed already: waits for it, then removes what it leaves */
        }
        /* A last chance, of up to a second each, for the cgroups still busy; then their processes are released. */
        (void) remove_busy_cgroups(r, NULL, 1000, true, 0);
        cgroup_remover_finish(&r->remover);
        r->busy_cgroups = mfree(r->busy_cgroups);
        r->busy_timer = sd_event_source_disable_unref(r->busy_timer);
        r->busy_idle = sd_event_source_disable_unref(r->busy_idle);
        r->busy_delay = 0;
}

Reaper *reaper_free(Reaper *r) {
        if (!r)
                return NULL;
        reaper_finish(r);
        strv_free(r->background_cgroups);
        free(r);
        return NULL;
}

_noreturn_ static void child(const ProcessOptions *o, int out_w, int err_w, int fallback_w) {
        const ProcessLimit *limits = o->limits;
        size_t n_limits = o->n_limits;
        bool in_cgroups = true;
        sigset_t all;
        int null_fd = -EBADF, k, keep[CLOSE_KEEP_MAX];
        size_t n_keep = 0;
        char pid[32];

        /* Nothing of the daemon's but what this child is given, before anything that can take time
         * (close_all_fds_except()). With more to keep than that takes, CLOEXEC does it at the exec. */
        if (o->n_keep_fds <= CLOSE_KEEP_MAX - 4) {
                keep[n_keep++] = o->stdin_fd;
                keep[n_keep++] = out_w;
                keep[n_keep++] = err_w;
                keep[n_keep++] = fallback_w;
                for (size_t i = 0; i < o->n_keep_fds; i++)
                        keep[n_keep++] = o->keep_fds[i];
                (void) close_all_fds_except(keep, n_keep);
        }

        /* Into our cgroups (made here, when they are to be) before anything else: nothing may run outside them.
         * The child does it, not the daemon: making a cgroup and moving a process take a lock of the whole
         * machine's (cgroup v1: milliseconds under load), which the event loop must not wait for. */
        if (o->make_cgroups && (k = o->make_cgroups(o->make_cgroups_userdata)) < 0) {
                if (!o->fallback_limits) {
                        dprintf(err_w, "Failed to create the cgroups of the process: %s\n", strerror(-k));
                        _exit(127);
                }
                in_cgroups = false;
                /* The daemon learns it here, not from what is or is not in cgroupfs (processes_outside_cgroups()). */
                if (fallback_w >= 0 && write(fallback_w, "R", 1) != 1) {
                        dprintf(err_w, "Failed to report the fallback to rlimits: %s\n", strerror(errno));
                        _exit(127);
                }
                limits = o->fallback_limits;
                n_limits = o->n_fallback_limits;
        }
        snprintf(pid, sizeof(pid), "%d", (int) getpid());
        for (size_t i = 0; in_cgroups && o->cgroups && o->cgroups[i]; i++)
                if ((k = cgroup_write(o->cgroups[i], "cgroup.procs", pid)) < 0) {
                        dprintf(err_w, "Failed to enter the cgroup %s: %s\n", o->cgroups[i], strerror(-k));
                        _exit(127);
                }
        /* Background work shares the CPU with the daemon's other own work, below the users' runs. */
        if (!(o->cgroups && o->cgroups[0]) && o->nice > 0)
                for (size_t i = 0; o->reaper && o->reaper->background_cgroups && o->reaper->background_cgroups[i]; i++)
                        (void) cgroup_write(o->reaper->background_cgroups[i], "cgroup.procs", pid);

        /* The daemon blocks signals for sd-event and ignores SIGPIPE; the child must not inherit that. */
        sigemptyset(&all);
        (void) sigprocmask(SIG_SETMASK, &all, NULL);
        for (int sig = 1; sig < _NSIG; sig++)
                (void) signal(sig, SIG_DFL);

        (void) setsid();
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);

        if (o->stdin_fd < 0)
                null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (dup2(o->stdin_fd >= 0 ? o->stdin_fd : null_fd, STDIN_FILENO) < 0 || dup2(out_w, STDOUT_FILENO) < 0 ||
            dup2(err_w, STDERR_FILENO) < 0)
                _exit(127);

        for (size_t i = 0; i < o->n_keep_fds; i++) {
                int flags = fcntl(o->keep_fds[i], F_GETFD);
                if (flags < 0 || fcntl(o->keep_fds[i], F_SETFD, flags & ~FD_CLOEXEC) < 0)
                        _exit(127);
        }

        for (size_t i = 0; i < n_limits; i++) {
                struct rlimit old, rl = { limits[i].value, limits[i].hard ?: limits[i].value };
                /* Limits only ever lower: what we were given is the most the child can have. */
                if (getrlimit(limits[i].resource, &old) >= 0 && old.rlim_max != RLIM_INFINITY) {
                        rl.rlim_max = MIN(rl.rlim_max, old.rlim_max);
                        rl.rlim_cur = MIN(rl.rlim_cur, rl.rlim_max);
                }
                if (setrlimit(limits[i].resource, &rl) < 0) {
                        dprintf(STDERR_FILENO, "Failed to set a resource limit: %s\n", strerror(errno));
                        _exit(127);
                }
        }

        if (o->nice > 0 && getpriority(PRIO_PROCESS, 0) < o->nice)
                (void) setpriority(PRIO_PROCESS, 0, o->nice);
        if (o->idle) {
                /* Only what no other process wants, CPU and disk; inherited by all it starts. */
                (void) sched_setscheduler(0, SCHED_IDLE, &(struct sched_param) {});
                (void) syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, 0, 3 << 13 /* IOPRIO_CLASS_IDLE */);
        }

        /* Last, after the cgroup: we moved ourselves while we could still be moved by root. */
        if (o->uid > 0) {
                if (setgroups(0, NULL) < 0 || setresgid(o->gid, o->gid, o->gid) < 0 ||
                    setresuid(o->uid, o->uid, o->uid) < 0) {
                        dprintf(STDERR_FILENO, "Failed to become uid %u: %s\n", (unsigned) o->uid, strerror(errno));
                        _exit(127);
                }
                /* A change of credentials clears the parent-death signal. */
                (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        }

        if (chdir(o->cwd ?: "/") < 0) {
                dprintf(STDERR_FILENO, "Failed to enter %s: %s\n", o->cwd ?: "/", strerror(errno));
                _exit(127);
        }

        static char *const empty_env[] = { NULL };
        execve(o->argv[0], o->argv, o->env ?: empty_env);
        dprintf(STDERR_FILENO, "Failed to execute %s: %s\n", o->argv[0], strerror(errno));
        _exit(127);
}

int process_spawn(sd_event *e, const ProcessOptions *o, ProcessDoneFunc done, void *userdata, Process **ret) {
        _cleanup_(process_freep) Process *p = NULL;
        int out[2] = { -EBADF, -EBADF }, err[2] = { -EBADF, -EBADF }, fallback[2] = { -EBADF, -EBADF };
        int r;


        p = calloc(1, sizeof(*p));
        if (!p) {
                if (o->release)
                        o->release(o->release_userdata);
                return -ENOMEM;
        }
        p->event = sd_event_ref(e);
        p->stdout_fd = p->stderr_fd = p->fallback_fd = -EBADF;
        p->done = done;
        p->userdata = userdata;
        p->uid = o->uid;
        p->reaper = o->reaper;
        p->release = o->release;
        p->release_userdata = o->release_userdata;
        if (o->remove_dir) {
                p->remove_dir = strdup(o->remove_dir);
                if (!p->remove_dir)
                        return -ENOMEM;
        }

        r = capture_init(&p->out, o->head_max, o->tail_max);
        if (r < 0)
                return r;
        r = capture_init(&p->err, o->head_max, o->tail_max);
        if (r < 0)
                return r;

        if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
                r = -errno;
                goto fail;
        }
        if (o->cgroups && o->cgroups[0]) {
                if (strv_extend_strv(&p->cgroups, o->cgroups) < 0) {
                        r = -ENOMEM;
                        goto fail;
                }
                if (o->make_cgroups && o->fallback_limits && pipe2(fallback, O_CLOEXEC | O_NONBLOCK) < 0) {
                        r = -errno;
                        goto fail;
                }
        }

        p->start_usec = now_usec();
        p->pid = fork();
        if (p->pid < 0) {
                r = -errno;
                goto fail;
        }
        if (p->pid == 0)
                child(o, out[1], err[1], fallback[1]);

        /* The child is in its own session; its pid is its process group. */
        safe_close(out[1]);
        safe_close(err[1]);
        safe_close(fallback[1]);
        p->fallback_fd = fallback[0];
        p->stdout_fd = out[0];
        p->stderr_fd = err[0];
        (void) fcntl(p->stdout_fd, F_SETFL, O_NONBLOCK);
        (void) fcntl(p->stderr_fd, F_SETFL, O_NONBLOCK);

        r = sd_event_add_child(e, &p->child_source, p->pid, WEXITED, on_child_exit, p);
        if (r < 0)
                return r;
        r = sd_event_add_io(e, &p->stdout_source, p->stdout_fd, EPOLLIN, on_output, p);
        if (r < 0)
                return r;
        r = sd_event_add_io(e, &p->stderr_source, p->stderr_fd, EPOLLIN, on_output, p);
        if (r < 0)
                return r;
        if (o->timeout_usec > 0) {
                r = sd_event_add_time_relative(e, &p->timer_source, CLOCK_MONOTONIC, o->timeout_usec, 0, on_timeout,
                                               p);
                if (r < 0)
                        return r;
        }

        *ret = TAKE_PTR(p);
        return 0;

fail:
        safe_close(out[0]);
        safe_close(out[1]);
        safe_close(err[0]);
        safe_close(err[1]);
        safe_close(fallback[0]);
        safe_close(fallback[1]);
        return r;
}
