/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buf.h"
#include "offloop.h"
#include "process.h"
#include "fs-util.h"
#include "macro.h"

/* What the child may say by default: its result and a message of a few lines. */
#define REPORT_MAX_DEFAULT (64U * 1024)

struct OffLoopJob {
        sd_event_source *child_source, *io_source, *timer_source;
        pid_t pid;
        int fd;
        Buf report;                     /* what the child said so far: report_max bytes at most */
        size_t report_max;
        bool exited, eof, timed_out;
        int status;
        OffLoopDoneFunc done;
        void *userdata;
};

_noreturn_ static void child(const char *comm, OffLoopFunc f, void *userdata, int fd) {
        _cleanup_free_ char *message = NULL;
        sigset_t all;
        int r;

        /* Nothing of the daemon's (other users' sockets, a sandbox's script pipe) but the pipe and stderr, first:
         * at nice 10 the rest may take a while (close_all_fds_except()). */
        (void) close_all_fds_except(&fd, 1);
        if (fd != 3) {
                if (dup2(fd, 3) < 0)
                        _exit(2);
                if (fd > 3)
                        close(fd);
                fd = 3;
        }
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        (void) prctl(PR_SET_NAME, (unsigned long) comm, 0, 0, 0);
        if (getppid() == 1)
                _exit(2);
        /* Finishing one call's environment yields the CPU to everybody's runs. */
        (void) setpriority(PRIO_PROCESS, 0, BACKGROUND_NICE);
        sigemptyset(&all);
        (void) sigprocmask(SIG_SETMASK, &all, NULL);
        r = f(userdata, &message);
        dprintf(fd, "%d\n%s", r, strempty(message));
        _exit(0);
}

static void job_finish(OffLoopJob *j) {
        int r = -EIO, n = 0;
        const char *message = NULL;

        if (!j->exited || !j->eof)
                return;
        j->io_source = sd_event_source_disable_unref(j->io_source);
        j->child_source = sd_event_source_disable_unref(j->child_source);
        j->timer_source = sd_event_source_disable_unref(j->timer_source);
        if (j->timed_out)
                r = -ETIME;
        else if (j->status == 0 && buf_append(&j->report, "", 1) >= 0 &&
                 sscanf(buf_data(&j->report), "%d\n%n", &r, &n) == 1 && n > 0)
                message = buf_data(&j->report) + n;
        else
                r = -EIO;
        j->done(r, message && *message ? message : NULL, j->userdata);
}

static int on_child(sd_event_source *s, const siginfo_t *si, void *userdata) {
        OffLoopJob *j = userdata;

        j->exited = true;
        j->pid = 0;   /* reaped */
        j->status = si->si_code == CLD_EXITED ? si->si_status : 128 + si->si_status;
        job_finish(j);
        return 0;
}

static int on_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        OffLoopJob *j = userdata;

        if (j->pid > 0) {
                j->timed_out = true;
                (void) kill(j->pid, SIGKILL);   /* on_child() follows */
        }
        return 0;
}

static int on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        OffLoopJob *j = userdata;
        char tmp[4096];

        for (;;) {
                ssize_t k = read(fd, tmp, sizeof(tmp));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return 0;
                if (k <= 0)
                        break;
                /* More than it can have to say: dropped (and so is what does not fit in memory). */
                size_t take = MIN((size_t) k, j->report_max - buf_size(&j->report));
                if (take > 0)
                        (void) buf_append(&j->report, tmp, take);
        }
        j->eof = true;
        j->io_source = sd_event_source_disable_unref(j->io_source);
        j->fd = safe_close(j->fd);
        job_finish(j);
        return 0;
}

int offloop_spawn_full(sd_event *e, const char *comm, size_t report_max, uint64_t timeout_usec, OffLoopFunc f,
                       OffLoopDoneFunc done, void *userdata, OffLoopJob **ret) {
        OffLoopJob *j;
        int p[2], r;

        j = calloc(1, sizeof(*j));
        if (!j)
                return -ENOMEM;
        j->fd = -EBADF;
        j->report_max = report_max;
        j->done = done;
        j->userdata = userdata;
        if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
                free(j);
                return -errno;
        }
        j->pid = fork();
        if (j->pid < 0) {
                r = -errno;
                safe_close(p[0]);
                safe_close(p[1]);
                free(j);
                return r;
        }
        if (j->pid == 0) {
                int flags = fcntl(p[1], F_GETFL);
                if (flags >= 0)
                        (void) fcntl(p[1], F_SETFL, flags & ~O_NONBLOCK);
                free(j);   /* the parent's: the child never returns to who would free it */
                child(comm, f, userdata, p[1]);
        }
        safe_close(p[1]);
        j->fd = p[0];
        r = sd_event_add_child(e, &j->child_source, j->pid, WEXITED, on_child, j);
        if (r >= 0)
                r = sd_event_add_io(e, &j->io_source, j->fd, EPOLLIN, on_io, j);
        if (r >= 0 && timeout_usec > 0)
                r = sd_event_add_time_relative(e, &j->timer_source, CLOCK_MONOTONIC, timeout_usec, USEC_PER_SEC,
                                               on_timeout, j);
        if (r < 0) {
                offloop_job_free(j);
                return r;
        }
        *ret = j;
        return 0;
}

int offloop_spawn(sd_event *e, const char *comm, OffLoopFunc f, OffLoopDoneFunc done, void *userdata,
                  OffLoopJob **ret) {
        return offloop_spawn_full(e, comm, REPORT_MAX_DEFAULT, 0, f, done, userdata, ret);
}

OffLoopJob *offloop_job_free(OffLoopJob *j) {
        if (!j)
                return NULL;
        j->timer_source = sd_event_source_disable_unref(j->timer_source);
        j->io_source = sd_event_source_disable_unref(j->io_source);
        j->child_source = sd_event_source_disable_unref(j->child_source);
        if (j->pid > 0) {
                (void) kill(j->pid, SIGKILL);
                (void) waitpid(j->pid, NULL, 0);
        }
        safe_close(j->fd);
        buf_clear(&j->report);
        free(j);
        return NULL;
}
