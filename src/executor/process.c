/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs-util.h"
#include "macro.h"
#include "process.h"

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / NSEC_PER_USEC;
}

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

/* Write a short string into a cgroup's file: one write, no creation. */
static int cgroup_write(const char *cgroup, const char *name, const char *value) {
        char path[PATH_MAX];
        int fd, r = 0;

        if ((size_t) snprintf(path, sizeof(path), "%s/%s", cgroup, name) >= sizeof(path))
                return -ENAMETOOLONG;
        fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (fd < 0)
                return -errno;
        if (write(fd, value, strlen(value)) != (ssize_t) strlen(value))
                r = errno ? -errno : -EIO;
        close(fd);
        return r;
}

static void kill_group(Process *p) {
        if (p->pid > 0 && !p->exited) {
                (void) kill(-p->pid, SIGKILL);
                (void) kill(p->pid, SIGKILL);
                /* Whatever left the process group, too (Linux 5.14 and later). */
                if (p->cgroup)
                        (void) cgroup_write(p->cgroup, "cgroup.kill", "1");
        }
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

static int on_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        Process *p = userdata;

        p->timed_out = true;
        p->killed = true;
        kill_group(p);
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
        capture_done(&p->out);
        capture_done(&p->err);
        if (p->cgroup) {
                /* Empty once the child is reaped: its pid namespace went with it. Busy: left for later. */
                (void) rmdir(p->cgroup);
                free(p->cgroup);
        }
        if (p->remove_dir) {
                (void) rm_rf_untrusted(p->remove_dir);
                free(p->remove_dir);
        }
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

/* Detached processes until they are reaped: the list keeps them reachable, so nothing looks leaked. */
static Process *detached;

static void on_detached_done(Process *p, void *userdata) {
        if (p->detached_prev)
                p->detached_prev->detached_next = p->detached_next;
        else
                detached = p->detached_next;
        if (p->detached_next)
                p->detached_next->detached_prev = p->detached_prev;
        process_free(p);
}

void process_detach(Process *p) {
        if (!p)
                return;
        if (p->exited) {
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
        p->detached_next = detached;
        if (detached)
                detached->detached_prev = p;
        detached = p;
}

unsigned process_n_detached(void) {
        unsigned n = 0;

        for (Process *p = detached; p; p = p->detached_next)
                n++;
        return n;
}

void process_free_detached(void) {
        while (detached) {
                Process *p = detached;

                detached = p->detached_next;
                process_free(p);   /* killed already: waits for it, then removes what it leaves */
        }
}

_noreturn_ static void child(const ProcessOptions *o, int out_w, int err_w, int sync_r) {
        sigset_t all;
        int null_fd = -EBADF;
        char c;

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

        for (size_t i = 0; i < o->n_limits; i++) {
                struct rlimit old, rl = { o->limits[i].value, o->limits[i].hard ?: o->limits[i].value };
                /* Limits only ever lower: what we were given is the most the child can have. */
                if (getrlimit(o->limits[i].resource, &old) >= 0 && old.rlim_max != RLIM_INFINITY) {
                        rl.rlim_max = MIN(rl.rlim_max, old.rlim_max);
                        rl.rlim_cur = MIN(rl.rlim_cur, rl.rlim_max);
                }
                if (setrlimit(o->limits[i].resource, &rl) < 0) {
                        dprintf(STDERR_FILENO, "Failed to set a resource limit: %s\n", strerror(errno));
                        _exit(127);
                }
        }

        /* Wait until the parent has put us into our cgroup: nothing may run outside it. */
        if (sync_r >= 0 && read(sync_r, &c, 1) != 1) {
                dprintf(STDERR_FILENO, "Failed to enter the cgroup %s.\n", o->cgroup);
                _exit(127);
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
        int out[2] = { -EBADF, -EBADF }, err[2] = { -EBADF, -EBADF }, sync[2] = { -EBADF, -EBADF };
        int r;

        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->event = sd_event_ref(e);
        p->stdout_fd = p->stderr_fd = -EBADF;
        p->done = done;
        p->userdata = userdata;
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
        if (o->cgroup) {
                p->cgroup = strdup(o->cgroup);
                if (!p->cgroup || pipe2(sync, O_CLOEXEC) < 0) {
                        r = p->cgroup ? -errno : -ENOMEM;
                        goto fail;
                }
        }

        p->start_usec = now_usec();
        p->pid = fork();
        if (p->pid < 0) {
                r = -errno;
                goto fail;
        }
        if (p->pid == 0) {
                safe_close(sync[1]);
                child(o, out[1], err[1], sync[0]);
        }

        /* The child is in its own session; its pid is its process group. */
        safe_close(out[1]);
        safe_close(err[1]);
        if (o->cgroup) {
                char pid[32];
                sync[0] = safe_close(sync[0]);
                snprintf(pid, sizeof(pid), "%d", (int) p->pid);
                r = cgroup_write(o->cgroup, "cgroup.procs", pid);
                /* On failure the child reads EOF and exits; process_free() below reaps it. */
                if (r >= 0 && write(sync[1], "x", 1) != 1)
                        r = -errno;
                sync[1] = safe_close(sync[1]);
                if (r < 0) {
                        safe_close(out[0]);
                        safe_close(err[0]);
                        return r;
                }
        }
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
        safe_close(sync[0]);
        safe_close(sync[1]);
        return r;
}
