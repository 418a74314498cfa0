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

#include "envstore/offloop.h"
#include "executor/process.h"
#include "fs-util.h"
#include "macro.h"

/* What the child may say by default: its result and a message of a few lines. */
#define REPORT_MAX_DEFAULT (64U * 1024)

struct OffLoopJob {
        sd_event_source *child_source, *io_source, *timer_source;
        pid_t pid;
        int fd;
        char *buf;                      /* the report so far, NUL-terminated; grows up to report_max */
        size_t n_buf, size_buf, report_max;
        bool exited, eof, timed_out;
        int status;
        OffLoopDoneFunc done;
        void *userdata;
};

_noreturn_ static void child(const char *comm, OffLoopFunc f, void *userdata, int fd) {
        _cleanup_free_ char *message = NULL;
        sigset_t all;
        int r;

        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        (void) prctl(PR_SET_NAME, (unsigned long) comm, 0, 0, 0);
        if (getppid() == 1)
                _exit(2);
        /* Finishing one call's environment yields the CPU to everybody's runs. */
        (void) setpriority(PRIO_PROCESS, 0, BACKGROUND_NICE);
        sigemptyset(&all);
        (void) sigprocmask(SIG_SETMASK, &all, NULL);
        /* Nothing of the daemon's (other users' sockets) but the pipe and stderr. */
        if (fd != 3) {
                if (dup2(fd, 3) < 0)
                        _exit(2);
                fd = 3;
        }
        (void) close_range(4, ~0U, 0);
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
        else if (j->buf && j->status == 0 && sscanf(j->buf, "%d\n%n", &r, &n) == 1 && n > 0)
                message = j->buf + n;
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

/* Room for n more bytes and a NUL, within report_max: what fits. */
static size_t buf_reserve(OffLoopJob *j, size_t n) {
        size_t want = MIN(n, j->report_max - j->n_buf);

        if (j->n_buf + want + 1 > j->size_buf) {
                size_t size = MAX(j->size_buf, (size_t) 4096);
                while (size < j->n_buf + want + 1)
                        size *= 2;
                size = MIN(size, j->report_max + 1);
                char *b = realloc(j->buf, size);
                if (!b)
                        return 0;   /* the report is cut here */
                j->buf = b;
                j->size_buf = size;
        }
        return want;
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
                size_t take = buf_reserve(j, (size_t) k);   /* more than it can have to say: dropped */
                if (take == 0)
                        continue;
                memcpy(j->buf + j->n_buf, tmp, take);
                j->n_buf += take;
                j->buf[j->n_buf] = 0;
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
        free(j->buf);
        free(j);
        return NULL;
}
