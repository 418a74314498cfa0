/* SPDX-License-Identifier: MIT */
/*
 * Tests of process.c: spawning into cgroups or under rlimits, output, timeouts and kills, the reaper and the
 * cgroups it keeps. Over 800 lines, one suite: many short independent cases sharing the event loop, the reaper
 * and the cgroup maker above them, one program for one module.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include "executor/process.h"
#include "macro.h"
#include "strv.h"

static sd_event *event;
static Reaper *reaper;

static void setup(void) {
        sigset_t ss;

        /* sd-event watches children through SIGCHLD: it must be blocked. */
        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &ss, NULL), 0);
        ck_assert_int_ge(sd_event_new(&event), 0);
        ck_assert_int_ge(reaper_new(&reaper), 0);
}

static void teardown(void) {
        reaper = reaper_free(reaper);
        event = sd_event_unref(event);
}

static void on_done(Process *p, void *userdata) {
        *(bool *) userdata = true;
}

/* Run the loop until cond holds or about 10 s have passed. */
#define RUN_UNTIL(cond)                                                                                              \
        do {                                                                                                         \
                for (unsigned _i = 0; !(cond) && _i < 1000; _i++)                                                    \
                        ck_assert_int_ge(sd_event_run(event, 10 * USEC_PER_MSEC), 0);                                \
        } while (0)

static bool alive(pid_t pid) {
        return kill(pid, 0) == 0;
}

START_TEST(test_drain_then_detach) {
        char script[256];
        char *argv[] = { (char *) "/bin/sh", (char *) "-c", script, NULL };
        int sig[2];
        bool done = false;
        char c[8];
        Process *p = NULL;
        pid_t pid;

        /* Writes more than a pipe holds to both streams, says so on a pipe of its own, then lingers. */
        ck_assert_int_eq(pipe2(sig, O_CLOEXEC | O_NONBLOCK), 0);
        snprintf(script, sizeof(script),
                 "head -c 200000 /dev/zero; head -c 100000 /dev/zero >&2; echo done >&%d; exec sleep 600", sig[1]);
        ProcessOptions o = { .argv = argv, .keep_fds = &sig[1], .n_keep_fds = 1, .stdin_fd = -EBADF,
                             .head_max = 1024, .tail_max = 1024, .reaper = reaper };
        ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
        close(sig[1]);
        pid = p->pid;

        /* Until it said "done": it wrote it all, the loop read some of it, the pipes hold the rest. */
        for (unsigned i = 0; i < 1000; i++) {
                ssize_t n = read(sig[0], c, sizeof(c));
                if (n > 0)
                        break;
                ck_assert_int_ge(sd_event_run(event, 10 * USEC_PER_MSEC), 0);
        }
        process_drain(p, 4 * 1024 * 1024);
        ck_assert_uint_eq(p->out.total, 200000);
        ck_assert_uint_eq(p->err.total, 100000);
        ck_assert(!p->exited);

        process_detach(p);
        ck_assert_uint_eq(reaper_n_detached(reaper), 1);
        RUN_UNTIL(reaper_n_detached(reaper) == 0);
        ck_assert_uint_eq(reaper_n_detached(reaper), 0);
        ck_assert(!alive(pid));   /* killed and reaped: not even a zombie */
        ck_assert(!done);         /* the owner's callback is not called once it let go */
        close(sig[0]);
}
END_TEST

START_TEST(test_free_detached_at_exit) {
        char *argv[] = { (char *) "/bin/sleep", (char *) "600", NULL };
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .head_max = 64, .tail_max = 64, .reaper = reaper };
        Process *a = NULL, *b = NULL;
        pid_t pa, pb;

        ck_assert_int_ge(process_spawn(event, &o, NULL, NULL, &a), 0);
        ck_assert_int_ge(process_spawn(event, &o, NULL, NULL, &b), 0);
        pa = a->pid;
        pb = b->pid;
        process_detach(a);
        process_detach(b);
        ck_assert_uint_eq(reaper_n_detached(reaper), 2);
        /* No loop iteration: the daemon is exiting. */
        reaper_finish(reaper);
        ck_assert_uint_eq(reaper_n_detached(reaper), 0);
        ck_assert(!alive(pa));
        ck_assert(!alive(pb));
}
END_TEST

START_TEST(test_detach_after_exit_frees_at_once) {
        char *argv[] = { (char *) "/bin/true", NULL };
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .head_max = 64, .tail_max = 64, .reaper = reaper };
        bool done = false;
        Process *p = NULL;

        ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
        p->done = NULL;   /* keep it: we detach it after it exited */
        RUN_UNTIL(p->exited);
        ck_assert(p->exited);
        process_detach(p);
        ck_assert_uint_eq(reaper_n_detached(reaper), 0);
}
END_TEST

/* Dead: no such process, or a zombie nobody has reaped yet. */
static bool gone(pid_t pid) {
        char path[64], buf[512], *e;
        FILE *f;
        bool zombie = false;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        f = fopen(path, "re");
        if (!f)
                return true;
        if (fgets(buf, sizeof(buf), f) && (e = strrchr(buf, ')')))
                zombie = e[1] == ' ' && e[2] == 'Z';
        fclose(f);
        return zombie;
}

static size_t read_pids(const char *cgroup, pid_t *pids, size_t max) {
        char path[PATH_MAX + 64];
        size_t n = 0;
        long v;
        FILE *f;

        snprintf(path, sizeof(path), "%s/cgroup.procs", cgroup);
        f = fopen(path, "re");
        if (!f)
                return 0;
        while (n < max && fscanf(f, "%ld", &v) == 1)
                pids[n++] = (pid_t) v;
        fclose(f);
        return n;
}

/* Our cgroup in the v1 hierarchy of controller, where it is usually mounted; NULL when that is not there. */
static char *v1_own(const char *controller) {
        char line[PATH_MAX], *dir = NULL;
        size_t l = strlen(controller);
        FILE *f = fopen("/proc/self/cgroup", "re");

        if (!f)
                return NULL;
        while (!dir && fgets(line, sizeof(line), f)) {
                /* "8:pids:/path" */
                char *list = strchr(line, ':'), *path = list ? strchr(list + 1, ':') : NULL;
                if (!path || (size_t) (path - list - 1) != l || strncmp(list + 1, controller, l) != 0)
                        continue;
                path[strcspn(path, "\n")] = 0;
                if (asprintf(&dir, "/sys/fs/cgroup/%s%s", controller, streq(path + 1, "/") ? "" : path + 1) < 0)
                        dir = NULL;
        }
        fclose(f);
        if (dir && access(dir, W_OK) < 0) {
                free(dir);
                dir = NULL;
        }
        return dir;
}

static void write_file(const char *dir, const char *name, const char *value) {
        char path[PATH_MAX + 64];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        f = fopen(path, "we");
        ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
        fputs(value, f);
        ck_assert_int_eq(fclose(f), 0);
}

/*
 * On the real cgroup v1 hierarchies, where there are (root, pids and memory): the child enters a cgroup in each
 * before it runs; a process that left its process group is killed through them (v1 has no cgroup.kill); both
 * are removed when the process is freed.
 */
START_TEST(test_cgroups_v1) {
        _cleanup_free_ char *pids_own = NULL, *memory_own = NULL;
        char pids[PATH_MAX], memory[PATH_MAX];
        char *cgroups[] = { pids, memory, NULL };
        char *argv[] = { (char *) "/bin/sh", (char *) "-c", (char *) "setsid sleep 600 & exec sleep 600", NULL };
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .head_max = 64, .tail_max = 64, .cgroups = cgroups,
                             .reaper = reaper };
        pid_t in_pids[8], in_memory[8];
        size_t n = 0, m;
        bool done = false;
        Process *p = NULL;
        struct stat st;

        pids_own = v1_own("pids");
        memory_own = v1_own("memory");
        if (geteuid() != 0 || !pids_own || !memory_own) {
                printf("# test_cgroups_v1 skipped: needs root and the cgroup v1 pids and memory hierarchies\n");
                return;
        }
        snprintf(pids, sizeof(pids), "%s/test-process-%d", pids_own, (int) getpid());
        snprintf(memory, sizeof(memory), "%s/test-process-%d", memory_own, (int) getpid());
        ck_assert_int_eq(mkdir(pids, 0755), 0);
        ck_assert_int_eq(mkdir(memory, 0755), 0);
        write_file(pids, "pids.max", "16");

        ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
        /* The child and the one it started in a session of its own, in both. */
        for (unsigned i = 0; i < 1000; i++) {
                n = read_pids(pids, in_pids, ELEMENTSOF(in_pids));
                if (n == 2 && getsid(in_pids[0]) != getsid(in_pids[1]))
                        break;
                ck_assert_int_ge(sd_event_run(event, 10 * USEC_PER_MSEC), 0);
        }
        ck_assert_uint_eq(n, 2);
        ck_assert(getsid(in_pids[0]) != getsid(in_pids[1]));
        ck_assert(in_pids[0] == p->pid || in_pids[1] == p->pid);
        m = read_pids(memory, in_memory, ELEMENTSOF(in_memory));
        ck_assert_uint_eq(m, 2);

        process_kill(p);
        RUN_UNTIL(done);
        ck_assert(done);
        for (unsigned i = 0; i < 1000 && !(gone(in_pids[0]) && gone(in_pids[1])); i++)
                usleep(1000);
        ck_assert(gone(in_pids[0]) && gone(in_pids[1]));

        /* Empty once its processes are gone: not kept, but handed to the remover, a child of ours, which removes
         * them while the loop goes on. */
        process_free(p);
        ck_assert_uint_eq(reaper_n_busy_cgroups(reaper), 0);
        RUN_UNTIL(reaper_n_removing(reaper) == 0);
        ck_assert_uint_eq(reaper_n_removing(reaper), 0);
        ck_assert_int_lt(stat(pids, &st), 0);
        ck_assert_int_lt(stat(memory, &st), 0);
}
END_TEST

typedef struct MakeCgroup {
        const char *path;
        int error;              /* returned instead of making it */
        pid_t pid;              /* who made it */
} MakeCgroup;

/* As the runtime's: in the child, a while after the fork (the lock it can wait on), the cgroup made, a limit set. */
static int make_cgroup(void *userdata) {
        MakeCgroup *m = userdata;

        if (m->error)
                return m->error;
        usleep(200 * 1000);
        if (mkdir(m->path, 0755) < 0)
                return -errno;
        write_file(m->path, "pids.max", "16");
        return 0;
}

/* In the child, before anything else it does (make_cgroups is its first step): is the test's fd still open there? */
static int parent_fd_seen(void *userdata) {
        return fcntl(*(int *) userdata, F_GETFD) >= 0 ? -EEXIST : 0;
}

/*
 * A child holds nothing of the daemon's but what it is given, from its first step on, not only from its exec: a
 * pipe the daemon closes (a script handed to a sandbox started ahead) ends for its reader at once, not once every
 * child forked meanwhile gets to its exec.
 */
START_TEST(test_child_drops_the_daemons_fds_first) {
        char *argv[] = { (char *) "/bin/sh", (char *) "-c", (char *) "echo ran; read line <&9 && echo \"$line\"",
                         NULL };
        int marker = open("/dev/null", O_RDONLY | O_CLOEXEC), p[2];
        bool done = false;
        Process *proc = NULL;

        ck_assert_int_ge(marker, 0);
        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        ck_assert_int_eq(write(p[1], "kept\n", 5), 5);
        /* The fds it is given stay: fd 9 at the same number (keep_fds; sh reads no fd above 9). */
        ck_assert(p[1] != 9 && marker != 9);
        ck_assert_int_eq(dup3(p[0], 9, O_CLOEXEC), 9);
        close(p[0]);
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .head_max = 4096, .tail_max = 4096,
                             .keep_fds = (const int[]) { 9 }, .n_keep_fds = 1,
                             .make_cgroups = parent_fd_seen, .make_cgroups_userdata = &marker, .reaper = reaper };

        ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &proc), 0);
        RUN_UNTIL(done);
        ck_assert(done);
        _cleanup_free_ char *out = capture_text(&proc->out, NULL), *err = capture_text(&proc->err, NULL);
        ck_assert_msg(proc->exit_code == 0 && streq(out, "ran\nkept\n"), "exit %d, out %s, err %s", proc->exit_code,
                      out, err);
        process_free(proc);
        close(9);
        close(p[1]);
        close(marker);
}
END_TEST

/*
 * The cgroup a child is to enter is made by that child (ProcessOptions.make_cgroups), not by the event loop: it is
 * not there when process_spawn() returns, and the child, which enters it, runs in it; it goes as any other. When
 * the child cannot make it, it runs with the limits to fall back on, or, without those, runs nothing, says why, and
 * exits 127.
 */
START_TEST(test_cgroups_made_by_the_child) {
        _cleanup_free_ char *pids_own = v1_own("pids"), *dir = NULL;
        char *argv[] = { (char *) "/bin/sh", (char *) "-c", (char *) "echo ran; cat /proc/self/cgroup", NULL };
        bool done = false;
        Process *p = NULL;

        if (geteuid() != 0 || !pids_own) {
                printf("# test_cgroups_made_by_the_child skipped: needs root and the cgroup v1 pids hierarchy\n");
                return;
        }
        ck_assert_int_ge(asprintf(&dir, "%s/test-process-made-%d", pids_own, (int) getpid()), 0);
        char *cgroups[] = { dir, NULL };
        MakeCgroup m = { .path = dir };
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .head_max = 4096, .tail_max = 4096,
                             .cgroups = cgroups, .make_cgroups = make_cgroup, .make_cgroups_userdata = &m,
                             .reaper = reaper };

        ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
        ck_assert_int_lt(access(dir, F_OK), 0);
        RUN_UNTIL(done);
        ck_assert(done);
        ck_assert_int_eq(p->exit_code, 0);
        _cleanup_free_ char *out = capture_text(&p->out, NULL);
        ck_assert_msg(strstr(out, "ran\n") && strstr(out, strrchr(dir, '/')), "%s", out);
        process_free(p);
        RUN_UNTIL(reaper_n_removing(reaper) == 0);
        ck_assert_int_lt(access(dir, F_OK), 0);

        m.error = -EPERM;
        /* (under valgrind, a child that exits without its exec fails its own leak check) */
        if (!getenv("MCP_SANDBOX_VALGRIND")) {
                done = false;
                ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
                RUN_UNTIL(done);
                ck_assert(done);
                ck_assert_int_eq(p->exit_code, 127);
                _cleanup_free_ char *out2 = capture_text(&p->out, NULL), *err = capture_text(&p->err, NULL);
                ck_assert_str_eq(out2, "");
                ck_assert_msg(strstr(err, "Failed to create the cgroups of the process: Operation not permitted"),
                              "%s", err);
                process_free(p);
                ck_assert_int_lt(access(dir, F_OK), 0);
        }

        /* With limits to fall back on, it runs with those instead, in none. */
        char *ulimit[] = { (char *) "/bin/sh", (char *) "-c", (char *) "ulimit -f; cat /proc/self/cgroup", NULL };
        ProcessLimit fallback[] = { { .resource = RLIMIT_FSIZE, .value = 77 * 512 } };   /* sh: 512-byte blocks */
        done = false;
        o.argv = ulimit;
        o.fallback_limits = fallback;
        o.n_fallback_limits = ELEMENTSOF(fallback);
        ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
        RUN_UNTIL(done);
        ck_assert(done);
        ck_assert_int_eq(p->exit_code, 0);
        _cleanup_free_ char *out3 = capture_text(&p->out, NULL);
        ck_assert_msg(startswith(out3, "77\n") && !strstr(out3, strrchr(dir, '/')), "%s", out3);
        process_free(p);
        ck_assert_int_lt(access(dir, F_OK), 0);
}
END_TEST

static void on_stderr(Process *p, const char *data, size_t n, void *userdata) {
        size_t *seen = userdata;

        for (size_t i = 0; i < n; i++)
                ck_assert_int_eq(data[i], 'e');
        *seen += n;
}

START_TEST(test_stderr_func_sees_all_of_stderr) {
        char *argv[] = { (char *) "/bin/sh", (char *) "-c",
                         (char *) "head -c 100000 /dev/zero | tr '\\0' o; head -c 300000 /dev/zero | tr '\\0' e >&2",
                         NULL };
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .head_max = 64, .tail_max = 64 };
        bool done = false;
        size_t seen = 0;
        Process *p = NULL;

        ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
        process_set_stderr_func(p, on_stderr, &seen);
        RUN_UNTIL(done);
        ck_assert(done);
        /* Every byte of stderr, none of stdout, though the capture kept only its head and tail. */
        ck_assert_uint_eq(seen, 300000);
        ck_assert_uint_eq(p->err.total, 300000);
        ck_assert_uint_eq(capture_omitted(&p->err), 300000 - 128);
        process_free(p);
}
END_TEST

/* Background work (.nice) runs at that niceness; the rest at ours. */
START_TEST(test_nice) {
        char *argv[] = { (char *) "/usr/bin/nice", NULL };
        for (int want = 0; want <= BACKGROUND_NICE; want += BACKGROUND_NICE) {
                ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .head_max = 64, .tail_max = 64, .nice = want };
                _cleanup_free_ char *out = NULL;
                char expect[16];
                bool done = false;
                Process *p = NULL;

                ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
                RUN_UNTIL(done);
                ck_assert(done);
                out = capture_text(&p->out, NULL);
                int ours = getpriority(PRIO_PROCESS, 0);
                snprintf(expect, sizeof(expect), "%d\n", want > ours ? want : ours);
                ck_assert_str_eq(out, expect);
                process_free(p);
        }
}
END_TEST

/* Each reaper holds its own: what one keeps, the other does not see, and finishing one leaves the other's. */
START_TEST(test_reapers_apart) {
        char *argv[] = { (char *) "/bin/sleep", (char *) "600", NULL };
        _cleanup_(reaper_freep) Reaper *other = NULL;
        Process *a = NULL, *b = NULL;
        pid_t pa, pb;

        ck_assert_int_ge(reaper_new(&other), 0);
        ck_assert_int_ge(process_spawn(event, &(ProcessOptions) { .argv = argv, .stdin_fd = -EBADF, .reaper = reaper },
                                       NULL, NULL, &a), 0);
        ck_assert_int_ge(process_spawn(event, &(ProcessOptions) { .argv = argv, .stdin_fd = -EBADF, .reaper = other },
                                       NULL, NULL, &b), 0);
        pa = a->pid;
        pb = b->pid;
        process_detach(a);
        ck_assert_uint_eq(reaper_n_detached(reaper), 1);
        ck_assert_uint_eq(reaper_n_detached(other), 0);
        process_detach(b);
        ck_assert_uint_eq(reaper_n_detached(reaper), 1);
        ck_assert_uint_eq(reaper_n_detached(other), 1);

        reaper_finish(other);
        ck_assert_uint_eq(reaper_n_detached(other), 0);
        ck_assert(!alive(pb));
        /* Killed, but not reaped yet (a zombie at most): the other's finish did not touch it. */
        ck_assert_uint_eq(reaper_n_detached(reaper), 1);
        ck_assert(alive(pa));
        RUN_UNTIL(reaper_n_detached(reaper) == 0);
        ck_assert_uint_eq(reaper_n_detached(reaper), 0);
        ck_assert(!alive(pa));
        ck_assert_uint_eq(reaper_n_busy_cgroups(reaper), 0);
}
END_TEST

/* Without a reaper, a detach is a free: killed and reaped before it returns; nothing is kept anywhere. */
START_TEST(test_detach_without_reaper) {
        char *argv[] = { (char *) "/bin/sleep", (char *) "600", NULL };
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .head_max = 64, .tail_max = 64 };
        bool done = false;
        Process *p = NULL;
        pid_t pid;

        ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
        pid = p->pid;
        ck_assert(alive(pid));
        process_detach(p);
        ck_assert(!alive(pid));
        ck_assert(!done);
        ck_assert_uint_eq(reaper_n_detached(reaper), 0);
}
END_TEST

/* Background work (.nice, no cgroups of its own) joins its reaper's background cgroups, and only its reaper's: on the
 * real cgroup v1 pids hierarchy, where there is one (root). */
START_TEST(test_background_cgroups) {
        _cleanup_free_ char *pids_own = NULL;
        _cleanup_(reaper_freep) Reaper *other = NULL;
        char *argv[] = { (char *) "/bin/cat", (char *) "/proc/self/cgroup", NULL };
        char dir[PATH_MAX], name[64], **paths = NULL;

        pids_own = v1_own("pids");
        if (geteuid() != 0 || !pids_own) {
                printf("# test_background_cgroups skipped: needs root and the cgroup v1 pids hierarchy\n");
                return;
        }
        snprintf(name, sizeof(name), "test-process-bg-%d", (int) getpid());
        snprintf(dir, sizeof(dir), "%s/%s", pids_own, name);
        ck_assert_int_eq(mkdir(dir, 0755), 0);
        ck_assert_int_ge(strv_extend(&paths, dir), 0);
        reaper_set_background_cgroups(reaper, paths);
        ck_assert_int_ge(reaper_new(&other), 0);

        for (unsigned i = 0; i < 3; i++) {
                /* Ours with a nice value: in it; the other reaper's, or ours at our niceness: not. */
                ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .head_max = 4096, .tail_max = 0,
                                     .nice = i == 2 ? 0 : BACKGROUND_NICE, .reaper = i == 1 ? other : reaper };
                _cleanup_free_ char *out = NULL;
                bool done = false;
                Process *p = NULL;

                ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
                RUN_UNTIL(done);
                ck_assert(done);
                ck_assert_int_eq(p->exit_code, 0);
                out = capture_text(&p->out, NULL);
                ck_assert_msg((strstr(out, name) != NULL) == (i == 0), "%u: %s", i, out);
                process_free(p);
                /* Not the process's to remove: it stays. */
                ck_assert_int_eq(access(dir, F_OK), 0);
        }
        reaper_set_background_cgroups(reaper, NULL);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static void on_release(void *userdata) {
        (*(unsigned *) userdata)++;
}

/* Our children that are the cgroup remover (offloop names it "mcp-cgroup-rmdir"; comm keeps 15 characters). */
static size_t removers_of(pid_t parent, pid_t *ret, size_t max) {
        DIR *d = opendir("/proc");
        struct dirent *de;
        size_t n = 0;

        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d)) && n < max) {
                char path[300], buf[512], *close_paren;
                int ppid = 0;
                FILE *f;

                if (de->d_name[0] < '1' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
                if (!(f = fopen(path, "re")))
                        continue;
                if (fgets(buf, sizeof(buf), f) && (close_paren = strrchr(buf, ')')) &&
                    sscanf(close_paren + 2, "%*c %d", &ppid) == 1 && ppid == parent &&
                    strstr(buf, "(mcp-cgroup-rmdi)"))
                        ret[n++] = (pid_t) atoi(de->d_name);
                fclose(f);
        }
        closedir(d);
        return n;
}

/* Whether a and b run the same program: a forked child that exec'd nothing. */
static bool same_exe(pid_t a, pid_t b) {
        char pa[64], pb[64], ea[PATH_MAX] = "", eb[PATH_MAX] = "";

        snprintf(pa, sizeof(pa), "/proc/%d/exe", (int) a);
        snprintf(pb, sizeof(pb), "/proc/%d/exe", (int) b);
        return readlink(pa, ea, sizeof(ea) - 1) > 0 && readlink(pb, eb, sizeof(eb) - 1) > 0 && streq(ea, eb);
}

/* Spawn o, run the loop until it is done, and free it. */
static void run_to_end_and_free(const ProcessOptions *o) {
        bool done = false;
        Process *p = NULL;

        ck_assert_int_ge(process_spawn(event, o, on_done, &done, &p), 0);
        RUN_UNTIL(done);
        ck_assert(done);
        process_free(p);
}

/* A cgroup that cannot be removed yet (v1: one with a child cgroup is busy), on the real cgroup v1 pids hierarchy:
 * NULL without root or the hierarchy. */
static char *busy_cgroup(const char *test, char child[static PATH_MAX]) {
        _cleanup_free_ char *pids_own = v1_own("pids");
        char *dir = NULL;

        if (geteuid() != 0 || !pids_own) {
                printf("# %s skipped: needs root and the cgroup v1 pids hierarchy\n", test);
                return NULL;
        }
        ck_assert_int_ge(asprintf(&dir, "%s/test-process-busy-%d", pids_own, (int) getpid()), 0);
        ck_assert_int_eq(mkdir(dir, 0755), 0);
        snprintf(child, PATH_MAX, "%s/child", dir);
        ck_assert_int_eq(mkdir(child, 0755), 0);
        return dir;
}

/* A cgroup still busy when its process is freed is the reaper's: kept, its process's release waiting for it, and
 * removed from a timer once it can be, then the release. */
START_TEST(test_busy_cgroup_kept) {
        char *argv[] = { (char *) "/bin/true", NULL }, child[PATH_MAX];
        _cleanup_free_ char *dir = busy_cgroup("test_busy_cgroup_kept", child);
        char *cgroups[] = { dir, NULL };
        unsigned released = 0;

        if (!dir)
                return;
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .cgroups = cgroups, .reaper = reaper,
                             .release = on_release, .release_userdata = &released };
        run_to_end_and_free(&o);
        ck_assert_uint_eq(reaper_n_busy_cgroups(reaper), 1);
        ck_assert_int_eq(access(dir, F_OK), 0);
        ck_assert_uint_eq(released, 0);
        /* While it stays busy, the timer tries it again and keeps it. */
        for (unsigned i = 0; i < 10; i++)
                ck_assert_int_ge(sd_event_run(event, 10 * USEC_PER_MSEC), 0);
        ck_assert_uint_eq(reaper_n_busy_cgroups(reaper), 1);
        ck_assert_uint_eq(released, 0);

        ck_assert_int_eq(rmdir(child), 0);
        RUN_UNTIL(reaper_n_busy_cgroups(reaper) == 0 && reaper_n_removing(reaper) == 0);
        ck_assert_uint_eq(reaper_n_busy_cgroups(reaper), 0);
        ck_assert_int_lt(access(dir, F_OK), 0);
        ck_assert_uint_eq(released, 1);
}
END_TEST

/* At exit, what stays busy is given up on: the release goes anyway, once; the cgroup is left for the next daemon. */
START_TEST(test_busy_cgroup_finish) {
        char *argv[] = { (char *) "/bin/true", NULL }, child[PATH_MAX];
        _cleanup_free_ char *dir = busy_cgroup("test_busy_cgroup_finish", child);
        char *cgroups[] = { dir, NULL };
        unsigned released = 0;

        if (!dir)
                return;
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .cgroups = cgroups, .reaper = reaper,
                             .release = on_release, .release_userdata = &released };
        run_to_end_and_free(&o);
        ck_assert_uint_eq(reaper_n_busy_cgroups(reaper), 1);
        ck_assert_uint_eq(released, 0);
        reaper_finish(reaper);
        ck_assert_uint_eq(reaper_n_busy_cgroups(reaper), 0);
        ck_assert_uint_eq(released, 1);
        ck_assert_int_eq(access(dir, F_OK), 0);
        /* Finished: nothing comes back to it. */
        reaper = reaper_free(reaper);
        ck_assert_uint_eq(released, 1);
        ck_assert_int_eq(rmdir(child), 0);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* An empty cgroup is not removed by the event loop, where a cgroup v1 rmdir waits for the kernel's RCU grace periods
 * (15-30 ms each beside a busy neighbour), but by a child: the process's release goes at once, the cgroup is still
 * there while that child waits (a delay only tests set), and it is gone once the child has run. */
START_TEST(test_empty_cgroup_removed_off_the_loop) {
        _cleanup_free_ char *pids_own = v1_own("pids"), *dir = NULL, *moved = NULL;
        char *argv[] = { (char *) "/bin/true", NULL };
        unsigned released = 0;

        if (geteuid() != 0 || !pids_own) {
                printf("# test_empty_cgroup_removed_off_the_loop skipped: needs root and the cgroup v1 pids hierarchy\n");
                return;
        }
        ck_assert_int_ge(asprintf(&dir, "%s/test-process-empty-%d", pids_own, (int) getpid()), 0);
        ck_assert_int_ge(asprintf(&moved, "%s/test-process-moved-%d", pids_own, (int) getpid()), 0);
        ck_assert_int_eq(mkdir(dir, 0755), 0);
        ck_assert_int_eq(mkdir(moved, 0755), 0);
        char *cgroups[] = { dir, NULL }, *left[] = { moved, NULL };
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .cgroups = cgroups, .reaper = reaper,
                             .release = on_release, .release_userdata = &released };
        reaper_set_remover_delay(reaper, 300 * USEC_PER_MSEC);
        run_to_end_and_free(&o);
        ck_assert_uint_eq(released, 1);
        ck_assert_uint_eq(reaper_n_busy_cgroups(reaper), 0);
        ck_assert_uint_eq(reaper_n_removing(reaper), 1);
        ck_assert_int_eq(access(dir, F_OK), 0);
        /* What a sandbox was moved out of goes the same way, after the one before (the child of now has that). */
        reaper_remove_empty_cgroups(reaper, event, left);
        ck_assert_uint_eq(reaper_n_removing(reaper), 2);
        ck_assert_int_eq(access(moved, F_OK), 0);
        /* One remover at a time, whatever is queued; it is this program, forked, and runs nothing else. */
        pid_t removers[4];
        size_t n = 0;
        for (unsigned i = 0; i < 200 && n == 0; i++) {   /* until the child has named itself */
                n = removers_of(getpid(), removers, ELEMENTSOF(removers));
                if (n == 0)
                        usleep(1000);
        }
        ck_assert_uint_eq(n, 1);
        /* (valgrind shows a process its own exe as the program it runs, and another's as valgrind's tool) */
        ck_assert(getenv("MCP_SANDBOX_VALGRIND") || same_exe(removers[0], getpid()));
        RUN_UNTIL(reaper_n_removing(reaper) == 0);
        ck_assert_uint_eq(reaper_n_removing(reaper), 0);
        ck_assert_int_lt(access(dir, F_OK), 0);
        ck_assert_int_lt(access(moved, F_OK), 0);
        reaper_set_remover_delay(reaper, 0);
}
END_TEST

/* One that is not empty (a cgroup in it) is not the remover's: reaper_remove_empty_cgroups() leaves it. */
START_TEST(test_busy_cgroup_not_removed) {
        char child[PATH_MAX];
        _cleanup_free_ char *dir = busy_cgroup("test_busy_cgroup_not_removed", child);

        if (!dir)
                return;
        char *paths[] = { dir, NULL };
        reaper_remove_empty_cgroups(reaper, event, paths);
        ck_assert_uint_eq(reaper_n_removing(reaper), 0);
        ck_assert_int_eq(access(dir, F_OK), 0);
        ck_assert_int_eq(rmdir(child), 0);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* Without a reaper nothing is kept: the release goes with the free, the busy cgroup stays behind. */
START_TEST(test_busy_cgroup_without_reaper) {
        char *argv[] = { (char *) "/bin/true", NULL }, child[PATH_MAX];
        _cleanup_free_ char *dir = busy_cgroup("test_busy_cgroup_without_reaper", child);
        char *cgroups[] = { dir, NULL };
        unsigned released = 0;

        if (!dir)
                return;
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .cgroups = cgroups,
                             .release = on_release, .release_userdata = &released };
        run_to_end_and_free(&o);
        ck_assert_uint_eq(released, 1);
        ck_assert_uint_eq(reaper_n_busy_cgroups(reaper), 0);
        ck_assert_int_eq(access(dir, F_OK), 0);
        ck_assert_int_eq(rmdir(child), 0);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* A script whose own process left its process group (setsid) and prints only at SIGWINCH, spawned with o (argv,
 * the timeout and the output bounds set here) and the flush asked for at its timeout: that print is all its
 * output. */
static void assert_flushed_at_timeout(ProcessOptions *o) {
        char *argv[] = { (char *) "/bin/sh", (char *) "-c",
                         (char *) "setsid /bin/sh -c 'trap \"echo flushed; exit 0\" WINCH; while :; do sleep 0.05; done' "
                                  "& wait",
                         NULL };
        bool done = false;
        Process *p = NULL;

        o->argv = argv;
        o->stdin_fd = -EBADF;
        o->head_max = o->tail_max = 1024;
        o->timeout_usec = 300 * USEC_PER_MSEC;
        o->reaper = reaper;
        ck_assert_int_ge(process_spawn(event, o, on_done, &done, &p), 0);
        p->flush_on_timeout = true;
        ck_assert(!p->cgroups == !o->cgroups);
        RUN_UNTIL(done);
        ck_assert(done);
        ck_assert(p->timed_out);
        ck_assert(p->flushing);
        ck_assert_uint_eq(p->out.total, strlen("flushed\n"));
        process_free(p);
}

/* At its timeout, a run without cgroups is asked to flush as one with them is: SIGWINCH reaches every process below
 * it, one in a session of its own (as bwrap's sandbox is) included, and only the kill comes later. */
START_TEST(test_flush_on_timeout_without_cgroups) {
        assert_flushed_at_timeout(&(ProcessOptions) {});
}
END_TEST

/* The same where the child could not make its cgroups and runs under its fallback limits: they hold none of its
 * processes, and the flush goes to those /proc shows below it instead of to nobody. */
START_TEST(test_flush_on_timeout_after_cgroup_fallback) {
        char *cgroups[] = { (char *) "/nonexistent/test-process-fallback", NULL };
        ProcessLimit none[1];
        MakeCgroup m = { .path = cgroups[0], .error = -EPERM };

        assert_flushed_at_timeout(&(ProcessOptions) { .cgroups = cgroups, .make_cgroups = make_cgroup,
                                                      .make_cgroups_userdata = &m, .fallback_limits = none,
                                                      .n_fallback_limits = 0 });
}
END_TEST

/* In the child, held until the test makes the file it names (the child keeps none of the test's fds), then unable
 * to make its cgroups. */
static int held_then_fail(void *userdata) {
        for (unsigned i = 0; i < 1000 && access(userdata, F_OK) < 0; i++)
                usleep(10 * 1000);
        return -EPERM;
}

/*
 * process_settled(): not while the child is still on its way into its cgroups (its processes could still land in
 * the old ones, were they moved now); once it went past them (here: fell back to its limits) and execed, yes;
 * without cgroups, at once.
 */
START_TEST(test_settled_once_past_its_cgroups) {
        _cleanup_free_ char *gate = NULL;
        char *cgroups[] = { (char *) "/nonexistent/test-process-settled", NULL };
        char *argv[] = { (char *) "/bin/sleep", (char *) "30", NULL };
        ProcessLimit none[1];
        bool done = false;
        Process *p = NULL;

        ck_assert_int_ge(asprintf(&gate, "/tmp/test-process-settled-%d", (int) getpid()), 0);
        (void) unlink(gate);
        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .head_max = 4096, .tail_max = 4096,
                             .cgroups = cgroups, .make_cgroups = held_then_fail, .make_cgroups_userdata = gate,
                             .fallback_limits = none, .n_fallback_limits = 0, .reaper = reaper };
        ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
        for (unsigned i = 0; i < 20; i++) {
                ck_assert(!process_settled(p));
                ck_assert_int_ge(sd_event_run(event, 10 * USEC_PER_MSEC), 0);
        }
        ck_assert(!p->exited);
        int fd = open(gate, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        close(fd);
        RUN_UNTIL(process_settled(p));
        ck_assert(process_settled(p));
        ck_assert(!p->exited);
        process_kill(p);
        RUN_UNTIL(done);
        ck_assert(done);
        process_free(p);
        ck_assert_int_eq(unlink(gate), 0);

        /* No cgroups: nothing to wait for. */
        done = false;
        o.cgroups = NULL;
        o.make_cgroups = NULL;
        o.fallback_limits = NULL;
        ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
        ck_assert(process_settled(p));
        process_kill(p);
        RUN_UNTIL(done);
        process_free(p);
}
END_TEST

/* The same fallback, killed: a process that left the process group (setsid) is still found, below the child in
 * /proc, and goes with it; whether a directory stands at the cgroup's path or not, the child's word decides. */
static void assert_killed_after_fallback(const char *cgroup) {
        char *argv[] = { (char *) "/bin/sh", (char *) "-c",
                         (char *) "setsid /bin/sh -c 'echo $$; exec sleep 600' & wait", NULL };
        char *cgroups[] = { (char *) cgroup, NULL };
        ProcessLimit none[1];
        MakeCgroup m = { .path = cgroups[0], .error = -EPERM };
        char stat[64], state = 0;
        bool done = false;
        Process *p = NULL;
        pid_t left;

        ProcessOptions o = { .argv = argv, .stdin_fd = -EBADF, .head_max = 1024, .tail_max = 1024,
                             .cgroups = cgroups, .make_cgroups = make_cgroup, .make_cgroups_userdata = &m,
                             .fallback_limits = none, .n_fallback_limits = 0, .reaper = reaper };
        ck_assert_int_ge(process_spawn(event, &o, on_done, &done, &p), 0);
        RUN_UNTIL(p->out.total > 0 && memchr(p->out.head, '\n', p->out.head_len));
        left = (pid_t) atoi(p->out.head);
        ck_assert_int_gt(left, 1);
        ck_assert_int_eq(kill(left, 0), 0);
        process_kill(p);
        RUN_UNTIL(done);
        ck_assert(done);
        /* Gone, or dead and not yet reaped by whoever it was left to: never running. */
        snprintf(stat, sizeof(stat), "/proc/%d/stat", (int) left);
        for (int i = 0; i < 200; i++) {
                FILE *f = fopen(stat, "re");
                state = 0;
                if (f) {
                        if (fscanf(f, "%*d (%*[^)]) %c", &state) != 1)
                                state = 0;
                        fclose(f);
                }
                if (!f || state == 'Z')
                        break;
                usleep(10 * 1000);
        }
        if (state && state != 'Z')
                (void) kill(left, SIGKILL);
        ck_assert_msg(!state || state == 'Z', "the process that left the group still runs (state %c)", state);
        process_free(p);
}

START_TEST(test_kill_after_cgroup_fallback) {
        assert_killed_after_fallback("/nonexistent/test-process-fallback-kill");
}
END_TEST

/* A directory at the cgroup's path (made by someone else, or left half made): still the fallback's processes. */
START_TEST(test_kill_after_cgroup_fallback_path_taken) {
        char dir[] = "/tmp/test-process-taken-XXXXXX";

        ck_assert_ptr_nonnull(mkdtemp(dir));
        assert_killed_after_fallback(dir);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static Suite *process_suite(void) {
        Suite *s = suite_create("process");
        TCase *tc = tcase_create("detach");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_drain_then_detach);
        tcase_add_test(tc, test_free_detached_at_exit);
        tcase_add_test(tc, test_detach_after_exit_frees_at_once);
        tcase_add_test(tc, test_cgroups_v1);
        tcase_add_test(tc, test_cgroups_made_by_the_child);
        tcase_add_test(tc, test_settled_once_past_its_cgroups);
        tcase_add_test(tc, test_child_drops_the_daemons_fds_first);
        tcase_add_test(tc, test_reapers_apart);
        tcase_add_test(tc, test_detach_without_reaper);
        tcase_add_test(tc, test_background_cgroups);
        tcase_add_test(tc, test_busy_cgroup_kept);
        tcase_add_test(tc, test_empty_cgroup_removed_off_the_loop);
        tcase_add_test(tc, test_busy_cgroup_not_removed);
        tcase_add_test(tc, test_busy_cgroup_finish);
        tcase_add_test(tc, test_busy_cgroup_without_reaper);
        suite_add_tcase(s, tc);

        tc = tcase_create("output");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_stderr_func_sees_all_of_stderr);
        tcase_add_test(tc, test_nice);
        tcase_add_test(tc, test_flush_on_timeout_without_cgroups);
        tcase_add_test(tc, test_flush_on_timeout_after_cgroup_fallback);
        tcase_add_test(tc, test_kill_after_cgroup_fallback);
        tcase_add_test(tc, test_kill_after_cgroup_fallback_path_taken);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(process_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
