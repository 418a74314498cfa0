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

/* What the child may say: its result and a message of a few lines. */
#define REPORT_MAX (64U * 1024)

struct OffLoopJob {
        sd_event_source *child_source, *io_source;
        pid_t pid;
        int fd;
        char buf[REPORT_MAX + 1];
        size_t n_buf;
        bool exited, eof;
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
        j->buf[j->n_buf] = 0;
        if (j->status == 0 && sscanf(j->buf, "%d\n%n", &r, &n) == 1 && n > 0)
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
                size_t take = MIN((size_t) k, REPORT_MAX - j->n_buf);   /* more than it can have to say: dropped */
                memcpy(j->buf + j->n_buf, tmp, take);
                j->n_buf += take;
        }
        j->eof = true;
        j->io_source = sd_event_source_disable_unref(j->io_source);
        j->fd = safe_close(j->fd);
        job_finish(j);
        return 0;
}

int offloop_spawn(sd_event *e, const char *comm, OffLoopFunc f, OffLoopDoneFunc done, void *userdata,
                  OffLoopJob **ret) {
        OffLoopJob *j;
        int p[2], r;

        j = calloc(1, sizeof(*j));
        if (!j)
                return -ENOMEM;
        j->fd = -EBADF;
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
        if (r < 0) {
                offloop_job_free(j);
                return r;
        }
        *ret = j;
        return 0;
}

OffLoopJob *offloop_job_free(OffLoopJob *j) {
        if (!j)
                return NULL;
        j->io_source = sd_event_source_disable_unref(j->io_source);
        j->child_source = sd_event_source_disable_unref(j->child_source);
        if (j->pid > 0) {
                (void) kill(j->pid, SIGKILL);
                (void) waitpid(j->pid, NULL, 0);
        }
        safe_close(j->fd);
        free(j);
        return NULL;
}
