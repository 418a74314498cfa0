/* SPDX-License-Identifier: MIT */
/*
 * The sandbox module's suite: the bwrap command line, the system call filter (tried in a child), the limits, and
 * the cgroup files against fake trees (and the daemon's cgroups on the real one, where it may). Over 800 lines, one
 * suite: many short independent cases sharing the fake-tree helpers at the top, one program for one module.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "alloc-fail.h"
#include "config/config.h"
#include "macro.h"
#include "sandbox/limits.h"
#include "sandbox/sandbox.h"
#include "sandbox/seccomp.h"
#include "strv.h"

/* ---- helpers ----------------------------------------------------------- */

static ssize_t find(char **argv, const char *a) {
        for (size_t i = 0; argv[i]; i++)
                if (streq(argv[i], a))
                        return (ssize_t) i;
        return -1;
}

/* Index of the first place where the given words follow each other, or -1. */
static ssize_t find_seq(char **argv, const char *const *seq) {
        for (size_t i = 0; argv[i]; i++) {
                size_t j = 0;
                while (seq[j] && argv[i + j] && streq(argv[i + j], seq[j]))
                        j++;
                if (!seq[j])
                        return (ssize_t) i;
        }
        return -1;
}
#define HAS_SEQ(argv, ...) (find_seq((argv), (const char *const[]) { __VA_ARGS__, NULL }) >= 0)

static char *tmpdir_new(void) {
        char *d = strdup("/tmp/test-sandbox-XXXXXX");
        ck_assert_ptr_nonnull(d);
        ck_assert_ptr_nonnull(mkdtemp(d));
        return d;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
        return remove(p);
}

static void rm_rf(char *d) {
        nftw(d, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        free(d);
}

static void put(const char *dir, const char *name, const char *text) {
        char p[PATH_MAX];
        FILE *f;

        snprintf(p, sizeof(p), "%s/%s", dir, name);
        f = fopen(p, "w");
        ck_assert_msg(f != NULL, "%s: %s", p, strerror(errno));
        fputs(text, f);
        fclose(f);
}

static char *get(const char *dir, const char *name) {
        char p[PATH_MAX], *s = calloc(1, 4096);
        FILE *f;

        snprintf(p, sizeof(p), "%s/%s", dir, name);
        f = fopen(p, "r");
        ck_assert_msg(f != NULL, "%s: %s", p, strerror(errno));
        ck_assert_ptr_nonnull(s);
        (void) !fread(s, 1, 4095, f);
        fclose(f);
        return s;
}

static void ck_file(const char *dir, const char *name, const char *want) {
        _cleanup_free_ char *got = get(dir, name);
        ck_assert_msg(streq(got, want), "%s/%s: got \"%s\", want \"%s\"", dir, name, got, want);
}

static void unlink_in(const char *dir, const char *name) {
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        ck_assert_int_eq(unlink(p), 0);
}

static void mkdir_in(const char *dir, const char *name) {
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        ck_assert_msg(mkdir(p, 0755) == 0 || errno == EEXIST, "%s: %s", p, strerror(errno));
}

/* ---- the bwrap command line -------------------------------------------- */

static char **build(bool network, int seccomp_fd) {
        static char *ro[] = { (char *) "/opt/env", NULL };
        static char *env[] = { (char *) "A=b=c", (char *) "HOME=/work", NULL };
        static char *cmd[] = { (char *) "/usr/bin/python3", (char *) "-c", (char *) "pass", NULL };
        SandboxData data[] = { { .fd = 5, .dest = "/work/script.py" }, { .fd = 6, .dest = "/work/x.toml" } };
        SandboxPolicy p = {
                .bwrap = "/usr/bin/bwrap",
                .network = network,
                .tmpfs_size = 64 * 1024 * 1024,
                .etc_dir = "/var/cache/x/sandbox-etc",
                .ro_paths = ro,
                .data = data,
                .n_data = ELEMENTSOF(data),
                .seccomp_fd = seccomp_fd,
                .env = env,
                .command = cmd,
        };
        char **argv = NULL;

        ck_assert_int_eq(sandbox_build_argv(&p, &argv), 0);
        ck_assert_ptr_nonnull(argv);
        return argv;
}

START_TEST(test_argv_isolation) {
        _cleanup_strv_free_ char **a = build(false, 7);

        ck_assert_str_eq(a[0], "/usr/bin/bwrap");
        ck_assert(find(a, "--unshare-all") > 0);
        ck_assert(find(a, "--unshare-user") > 0);
        ck_assert(find(a, "--share-net") < 0);
        ck_assert(find(a, "--disable-userns") > 0);
        ck_assert(HAS_SEQ(a, "--uid", "65534"));
        ck_assert(HAS_SEQ(a, "--gid", "65534"));
        ck_assert(HAS_SEQ(a, "--cap-drop", "ALL"));
        ck_assert(find(a, "--cap-add") < 0);
        ck_assert(find(a, "--new-session") > 0);
        ck_assert(find(a, "--die-with-parent") > 0);
        ck_assert(find(a, "--clearenv") > 0);
        ck_assert(find(a, "--clearenv") < find(a, "--setenv"));
        ck_assert(HAS_SEQ(a, "--setenv", "A", "b=c"));
        ck_assert(HAS_SEQ(a, "--setenv", "HOME", "/work"));
        ck_assert(HAS_SEQ(a, "--proc", "/proc"));
        ck_assert(HAS_SEQ(a, "--dev", "/dev"));
        /* No network: no resolver configuration either. */
        ck_assert(!HAS_SEQ(a, "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"));
        /* fontconfig's configuration and the system's font cache, read-only (matplotlib asks fc-list). */
        ck_assert(HAS_SEQ(a, "--ro-bind-try", "/etc/fonts", "/etc/fonts"));
        ck_assert(HAS_SEQ(a, "--ro-bind-try", "/var/cache/fontconfig", "/var/cache/fontconfig"));
        ck_assert(!HAS_SEQ(a, "--bind", "/var/cache/fontconfig", "/var/cache/fontconfig"));
}
END_TEST

START_TEST(test_argv_filesystem) {
        _cleanup_strv_free_ char **a = build(false, 7);

        /* The host only read-only: nothing writable is bound in. */
        ck_assert(find(a, "--bind") < 0);
        ck_assert(find(a, "--bind-try") < 0);
        ck_assert(find(a, "--dev-bind") < 0);
        ck_assert(HAS_SEQ(a, "--ro-bind", "/usr", "/usr"));
        ck_assert(HAS_SEQ(a, "--ro-bind", "/opt/env", "/opt/env"));
        /* /etc is the daemon's directory, read-only, bound before what goes over its mount points. */
        ck_assert(HAS_SEQ(a, "--ro-bind", "/var/cache/x/sandbox-etc", "/etc"));
        ck_assert(find(a, "--dir") < 0);
        ck_assert(find(a, "/var/cache/x/sandbox-etc") < find(a, "/etc/ld.so.cache"));
        ck_assert(find(a, "/var/cache/x/sandbox-etc") < find(a, "/etc/ssl"));
        ck_assert(find(a, "/var/cache/x/sandbox-etc") < find(a, "/etc/fonts"));
        ck_assert(HAS_SEQ(a, "--size", "67108864", "--perms", "0755", "--tmpfs", "/tmp"));
        ck_assert(HAS_SEQ(a, "--size", "67108864", "--perms", "0755", "--tmpfs", "/work"));
        ck_assert(HAS_SEQ(a, "--ro-bind-data", "5", "/work/script.py"));
        ck_assert(HAS_SEQ(a, "--ro-bind-data", "6", "/work/x.toml"));
        ck_assert(HAS_SEQ(a, "--chdir", "/work"));
        /* No host /tmp, /home or /root. */
        ck_assert(find(a, "/home") < 0);
        ck_assert(find(a, "/root") < 0);
        ck_assert(!HAS_SEQ(a, "/tmp", "/tmp"));
}
END_TEST

START_TEST(test_argv_proc) {
        _cleanup_strv_free_ char **a = build(false, 7);
        ssize_t proc = find_seq(a, (const char *const[]) { "--proc", "/proc", NULL });

        /* What steers the host is read-only, bound over the sandbox's own /proc after it is mounted; /proc/sys
         * without -try: a sandbox without it does not start. */
        ck_assert(proc > 0);
        ck_assert(HAS_SEQ(a, "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"));
        ck_assert(!HAS_SEQ(a, "--ro-bind-try", "/proc/sys", "/proc/sys"));
        static const char *const optional[] = { "/proc/sysrq-trigger", "/proc/irq", "/proc/bus" };
        for (size_t i = 0; i < ELEMENTSOF(optional); i++) {
                ssize_t at = find_seq(a, (const char *const[]) { "--ro-bind-try", optional[i], optional[i], NULL });
                ck_assert_msg(at > proc, "%s is not bound read-only after --proc", optional[i]);
        }
        /* Nothing of /proc is bound writable: each path there follows --proc or a read-only bind. */
        for (size_t i = 2; a[i]; i++)
                if (startswith(a[i], "/proc"))
                        ck_assert_msg(streq(a[i - 1], "--proc") || startswith(a[i - 1], "--ro-bind") ||
                                              startswith(a[i - 2], "--ro-bind"),
                                      "%s %s %s", a[i - 2], a[i - 1], a[i]);
}
END_TEST

START_TEST(test_argv_seccomp_and_command) {
        _cleanup_strv_free_ char **a = build(false, 7), **b = build(false, -EBADF);
        ssize_t dashdash = find(a, "--");
        size_t n = strv_length(a);

        ck_assert(HAS_SEQ(a, "--seccomp", "7"));
        ck_assert(find(a, "--seccomp") < dashdash);
        ck_assert_int_eq(dashdash, (ssize_t) n - 4);
        ck_assert_str_eq(a[n - 3], "/usr/bin/python3");
        ck_assert_str_eq(a[n - 2], "-c");
        ck_assert_str_eq(a[n - 1], "pass");
        ck_assert(find(b, "--seccomp") < 0);
}
END_TEST

START_TEST(test_args_fd) {
        static char *cmd[] = { (char *) "/usr/bin/python3", (char *) "-c", (char *) "pass", NULL };
        static char *env[] = { (char *) "EMPTY=", (char *) "HOME=/work", NULL };
        SandboxPolicy p = { .bwrap = "/usr/bin/bwrap", .etc_dir = "/var/cache/x/sandbox-etc", .seccomp_fd = 7,
                            .env = env, .command = cmd };
        _cleanup_strv_free_ char **full = NULL, **argv = NULL;
        _cleanup_close_ int fd = -EBADF;
        char buf[65536], fd_s[16];
        ssize_t n, dashdash;
        size_t at = 0, i;

        ck_assert_int_eq(sandbox_build_argv(&p, &full), 0);
        ck_assert_int_eq(sandbox_build_args(&p, &argv, &fd), 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_ne(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
        ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), 0);

        /* The command line: bwrap --args FD -- the command, nothing of the policy. */
        snprintf(fd_s, sizeof(fd_s), "%d", fd);
        ck_assert_uint_eq(strv_length(argv), 7);
        ck_assert_str_eq(argv[0], "/usr/bin/bwrap");
        ck_assert_str_eq(argv[1], "--args");
        ck_assert_str_eq(argv[2], fd_s);
        ck_assert_str_eq(argv[3], "--");
        ck_assert_str_eq(argv[4], "/usr/bin/python3");
        ck_assert_str_eq(argv[6], "pass");

        /* The file: exactly the options of the full command line, each NUL-terminated (an empty one too). */
        n = read(fd, buf, sizeof(buf));
        ck_assert_int_gt(n, 0);
        ck_assert_int_lt(n, (ssize_t) sizeof(buf));
        ck_assert_int_eq(buf[n - 1], 0);
        dashdash = find(full, "--");
        ck_assert_int_gt(dashdash, 1);
        for (i = 1; i < (size_t) dashdash; i++) {
                ck_assert_int_lt(at, n);
                ck_assert_str_eq(buf + at, full[i]);
                at += strlen(full[i]) + 1;
        }
        ck_assert_int_eq(at, n);
        ck_assert(HAS_SEQ(full, "--setenv", "EMPTY", ""));
        ck_assert(HAS_SEQ(full, "--ro-bind", "/var/cache/x/sandbox-etc", "/etc"));
        ck_assert(HAS_SEQ(full, "--seccomp", "7"));

        /* A policy that cannot be built leaves no fd behind. */
        static char *bad_env[] = { (char *) "NOEQUALS", NULL };
        char **none = NULL;
        int none_fd = -EBADF;
        p.env = bad_env;
        ck_assert_int_eq(sandbox_build_args(&p, &none, &none_fd), -EINVAL);
        ck_assert_ptr_null(none);
        ck_assert_int_eq(none_fd, -EBADF);
}
END_TEST

START_TEST(test_argv_network) {
        _cleanup_strv_free_ char **a = build(true, 7);

        ck_assert(find(a, "--share-net") > find(a, "--unshare-all"));
        ck_assert(HAS_SEQ(a, "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"));
        /* /etc a directory of bwrap's (a mount point for resolv.conf), the daemon's files bound one by one. */
        ck_assert(HAS_SEQ(a, "--perms", "0755", "--dir", "/etc"));
        ck_assert(HAS_SEQ(a, "--ro-bind", "/var/cache/x/sandbox-etc/passwd", "/etc/passwd"));
        ck_assert(HAS_SEQ(a, "--ro-bind", "/var/cache/x/sandbox-etc/group", "/etc/group"));
        ck_assert(HAS_SEQ(a, "--ro-bind", "/var/cache/x/sandbox-etc/hosts", "/etc/hosts"));
        ck_assert(!HAS_SEQ(a, "--ro-bind", "/var/cache/x/sandbox-etc", "/etc"));
        /* Everything else stays. */
        ck_assert(find(a, "--disable-userns") > 0);
        ck_assert(HAS_SEQ(a, "--cap-drop", "ALL"));
}
END_TEST

START_TEST(test_argv_data_dirs) {
        static char *dirs[] = { (char *) "sales=/srv/sales data", (char *) "x-1=/mnt/x", NULL };
        static char *bad[] = { (char *) "noequals", NULL };
        static char *cmd[] = { (char *) "/bin/true", NULL };
        SandboxPolicy p = { .bwrap = "/usr/bin/bwrap", .seccomp_fd = -EBADF, .data_dirs = dirs, .command = cmd };
        _cleanup_strv_free_ char **a = NULL;
        char **argv = NULL;

        ck_assert_int_eq(sandbox_build_argv(&p, &a), 0);
        /* Read-only, each at /data/NAME; the root stays read-only after them. */
        ck_assert(HAS_SEQ(a, "--ro-bind-try", "/srv/sales data", "/data/sales"));
        ck_assert(HAS_SEQ(a, "--ro-bind-try", "/mnt/x", "/data/x-1"));
        ck_assert(find(a, "/srv/sales data") < find_seq(a, (const char *const[]) { "--remount-ro", "/", NULL }));
        ck_assert(find(a, "--bind") < 0);
        p.data_dirs = bad;
        ck_assert_int_eq(sandbox_build_argv(&p, &argv), -EINVAL);
        ck_assert_ptr_null(argv);
}
END_TEST

START_TEST(test_argv_bad_env) {
        static char *env[] = { (char *) "NOEQUALS", NULL };
        static char *cmd[] = { (char *) "/bin/true", NULL };
        SandboxPolicy p = { .bwrap = "/usr/bin/bwrap", .seccomp_fd = -EBADF, .env = env, .command = cmd };
        char **argv = NULL;

        ck_assert_int_eq(sandbox_build_argv(&p, &argv), -EINVAL);
        ck_assert_ptr_null(argv);
}
END_TEST

/* The directory bound at /etc: nobody's passwd and group, localhost, and an empty mount point for each host entry that
 * goes over it, of the kind the host's is (or usually is), made again when that kind changes. */
START_TEST(test_write_etc) {
        char *d = tmpdir_new(), *host = tmpdir_new(), etc[512], path[PATH_MAX];
        struct stat st;
        static const char *const dirs[] = { "ssl", "ca-certificates", "pki", "fonts" };
        static const char *const files[] = { "ld.so.cache", "localtime", "passwd", "group", "hosts" };

        snprintf(etc, sizeof(etc), "%s/etc", d);
        ck_assert_int_eq(sandbox_write_etc(etc, true), 0);
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                snprintf(path, sizeof(path), "%s/%s", etc, dirs[i]);
                ck_assert_int_eq(lstat(path, &st), 0);
                /* /etc/pki is a directory where there is one; this host's kind otherwise */
                struct stat h;
                char hp[PATH_MAX];
                snprintf(hp, sizeof(hp), "/etc/%s", dirs[i]);
                ck_assert(stat(hp, &h) < 0 ? S_ISDIR(st.st_mode) : S_ISDIR(st.st_mode) == S_ISDIR(h.st_mode));
                ck_assert_int_eq(st.st_mode & 07777, 0755);
        }
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                snprintf(path, sizeof(path), "%s/%s", etc, files[i]);
                ck_assert_int_eq(lstat(path, &st), 0);
                ck_assert(S_ISREG(st.st_mode));
                ck_assert_int_eq(st.st_mode & 07777, 0644);
        }
        snprintf(path, sizeof(path), "%s/ld.so.cache", etc);
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_size, 0);   /* a mount point, never a copy of the host's */
        snprintf(path, sizeof(path), "%s/resolv.conf", etc);
        ck_assert_int_lt(lstat(path, &st), 0);   /* no resolver configuration, not even an empty one */

        /* A host with ssl as a file and fonts missing, then ssl as a directory. */
        snprintf(path, sizeof(path), "%s/ssl", host);
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ck_assert_int_ge(fd, 0);
        close(fd);
        ck_assert_int_eq(sandbox_write_etc_mount_points(etc, host), 0);
        snprintf(path, sizeof(path), "%s/ssl", etc);
        ck_assert_int_eq(lstat(path, &st), 0);
        ck_assert(S_ISREG(st.st_mode));
        snprintf(path, sizeof(path), "%s/fonts", etc);
        ck_assert_int_eq(lstat(path, &st), 0);
        ck_assert(S_ISDIR(st.st_mode));
        snprintf(path, sizeof(path), "%s/ssl", host);
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(mkdir(path, 0755), 0);
        ck_assert_int_eq(sandbox_write_etc_mount_points(etc, host), 0);
        snprintf(path, sizeof(path), "%s/ssl", etc);
        ck_assert_int_eq(lstat(path, &st), 0);
        ck_assert(S_ISDIR(st.st_mode));
        /* Again: nothing to change. */
        ck_assert_int_eq(sandbox_write_etc_mount_points(etc, host), 0);
        rm_rf(d);
        rm_rf(host);
}
END_TEST

/* The run's environment comes back whole or not at all: a list short of one variable (HOME, VIRTUAL_ENV) would
 * start the script somewhere else. Each of its appends fails in turn. */
START_TEST(test_run_env_whole_or_none) {
        _cleanup_strv_free_ char **full = NULL;
        unsigned n;

        alloc_fail_nth(0);
        full = sandbox_run_env("/env");
        n = alloc_fail_calls();
        ck_assert_ptr_nonnull(full);
        ck_assert_uint_ge(n, 5);
        for (unsigned i = 1; i <= n + 1; i++) {
                _cleanup_strv_free_ char **l = NULL;

                alloc_fail_nth(i);
                l = sandbox_run_env("/env");
                alloc_fail_nth(0);
                if (i <= n) {
                        ck_assert_msg(!l, "with allocation %u of %u failed, %zu variables of %zu", i, n,
                                      strv_length(l), strv_length(full));
                        continue;
                }
                ck_assert_ptr_nonnull(l);
                ck_assert_uint_eq(strv_length(l), strv_length(full));
                for (size_t k = 0; full[k]; k++)
                        ck_assert_str_eq(l[k], full[k]);
        }
}
END_TEST

/* ---- the system call filter -------------------------------------------- */

/* A filter built for this test alone, exported once. */
static int export_filter(void) {
        _cleanup_(sandbox_seccomp_freep) SandboxSeccomp *s = NULL;

        ck_assert_int_ge(sandbox_seccomp_new(&s), 0);
        return sandbox_seccomp_export(s);
}

static char *read_fd_whole(int fd, size_t *ret_size) {
        struct stat st;
        char *b;

        ck_assert_int_eq(fstat(fd, &st), 0);
        b = malloc((size_t) st.st_size + 1);
        ck_assert_ptr_nonnull(b);
        ck_assert_int_eq(pread(fd, b, (size_t) st.st_size, 0), st.st_size);
        *ret_size = (size_t) st.st_size;
        return b;
}

/* The program is an object: each export is a fresh memfd of the same bytes, what is done to one export shows in
 * no other, and two programs built apart are the same filter and need each other for nothing. */
START_TEST(test_seccomp_program) {
        _cleanup_(sandbox_seccomp_freep) SandboxSeccomp *a = NULL, *b = NULL;
        _cleanup_close_ int fd1 = -EBADF, fd2 = -EBADF, fd3 = -EBADF;
        _cleanup_free_ char *x = NULL, *y = NULL, *z = NULL;
        size_t nx, ny, nz;

        ck_assert_int_ge(sandbox_seccomp_new(&a), 0);
        ck_assert_int_ge(sandbox_seccomp_new(&b), 0);
        ck_assert_ptr_ne(a, b);
        fd1 = sandbox_seccomp_export(a);
        ck_assert_int_ge(fd1, 0);
        x = read_fd_whole(fd1, &nx);
        /* Spoil the first export: the next is whole. */
        ck_assert_int_eq(ftruncate(fd1, 0), 0);
        ck_assert_int_eq(pwrite(fd1, "junk", 4, 0), 4);
        fd2 = sandbox_seccomp_export(a);
        ck_assert_int_ge(fd2, 0);
        ck_assert_int_ne(fd1, fd2);
        y = read_fd_whole(fd2, &ny);
        ck_assert_uint_eq(nx, ny);
        ck_assert_int_eq(memcmp(x, y, nx), 0);
        /* Without a: b's is the same program. */
        a = sandbox_seccomp_free(a);
        fd3 = sandbox_seccomp_export(b);
        ck_assert_int_ge(fd3, 0);
        z = read_fd_whole(fd3, &nz);
        ck_assert_uint_eq(nx, nz);
        ck_assert_int_eq(memcmp(x, z, nx), 0);
}
END_TEST

START_TEST(test_seccomp_export) {
        _cleanup_close_ int fd = export_filter();
        struct stat st;

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fstat(fd, &st), 0);
        ck_assert_int_gt(st.st_size, 0);
        ck_assert_int_eq(st.st_size % (off_t) sizeof(struct sock_filter), 0);
        ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), 0);
        ck_assert_int_ne(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);

        static const char *const must[] = { "ptrace", "bpf", "perf_event_open", "keyctl", "userfaultfd",
                                             "io_uring_setup", "mount", "unshare", "setns", "kexec_load",
                                             "open_by_handle_at", "init_module", "chroot", NULL };
        for (size_t i = 0; must[i]; i++)
                ck_assert_msg(strv_contains((char **) sandbox_seccomp_denied, must[i]), "%s not denied", must[i]);
}
END_TEST

static void *thread_main(void *arg) {
        return arg;
}

/* In a child: load the exported filter as bwrap does, then probe. Exit status: a bit per failed check. */
static int child_probe(int fd) {
        struct sock_filter insns[4096];
        ssize_t n = read(fd, insns, sizeof(insns));
        struct sock_fprog prog = { .len = (unsigned short) (n / (ssize_t) sizeof(insns[0])), .filter = insns };
        int bad = 0;
        pthread_t t;
        pid_t pid;

        if (n <= 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
                return 0x80;
        errno = 0;
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != -1 || errno != EPERM)
                bad |= 1 << 0;
        if (unshare(CLONE_NEWUSER) != -1 || errno != EPERM)
                bad |= 1 << 1;
        if (syscall(SYS_clone3, NULL, (size_t) 0) != -1 || errno != ENOSYS)
                bad |= 1 << 2;
        if (syscall(SYS_clone, (unsigned long) (CLONE_NEWNET | SIGCHLD), 0, 0, 0, 0) != -1 || errno != EPERM)
                bad |= 1 << 3;
        if (personality(0xffffffff) == -1 || personality(PER_LINUX) == -1)
                bad |= 1 << 4;
        if (personality(ADDR_NO_RANDOMIZE) != -1 || errno != EPERM)
                bad |= 1 << 5;
        /* Ordinary processes and threads still work (glibc falls back from clone3 to clone). */
        pid = fork();
        if (pid == 0)
                _exit(3);
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 3)
                bad |= 1 << 6;
        if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0)
                bad |= 1 << 6;
        return bad;
}

static bool family_allowed(long af) {
        for (size_t i = 0; sandbox_seccomp_socket_families[i] >= 0; i++)
                if (sandbox_seccomp_socket_families[i] == af)
                        return true;
        return false;
}

/* Whether the kernel has the family for this caller: it makes the socket, or refuses it for another reason. */
static bool kernel_has(int af, int type) {
        int s = socket(af, type | SOCK_CLOEXEC, 0);

        if (s >= 0)
                close(s);
        return s >= 0 || errno != EAFNOSUPPORT;
}

/* A socket call that must fail with EAFNOSUPPORT; false (and a line on stderr) when it did not. */
static bool refused(const char *what, long af, int type, long r) {
        if (r == -1 && errno == EAFNOSUPPORT)
                return true;
        if (r >= 0)
                close((int) r);
        dprintf(STDERR_FILENO, "%s(0x%lx, %d): %s\n", what, af, type, r >= 0 ? "created" : strerror(errno));
        return false;
}

/* In a child, like child_probe(): every family but the four, every type, by socket() and socketpair(). */
static int child_probe_families(int fd) {
        static const int types[] = { SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_RDM, SOCK_SEQPACKET };
        struct sock_filter insns[4096];
        bool had[64][ELEMENTSOF(types)];
        unsigned filter_only = 0;
        int bad = 0, pair[2];

        /* First what the kernel offers without the filter, so that a refusal can be told from a missing module. */
        for (int af = 0; af < 64; af++)
                for (size_t t = 0; t < ELEMENTSOF(types); t++)
                        had[af][t] = kernel_has(af, types[t]);

        ssize_t n = read(fd, insns, sizeof(insns));
        struct sock_fprog prog = { .len = (unsigned short) (n / (ssize_t) sizeof(insns[0])), .filter = insns };
        if (n <= 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
                return 0x80;

        for (int af = 0; af < 300; af++) {
                if (family_allowed(af))
                        continue;
                for (size_t t = 0; t < ELEMENTSOF(types); t++) {
                        if (!refused("socket", af, types[t], socket(af, types[t] | SOCK_CLOEXEC, 0)))
                                bad |= 1 << 0;
                        else if (af < 64 && had[af][t])
                                filter_only++;
                        if (!refused("socketpair", af, types[t], socketpair(af, types[t] | SOCK_CLOEXEC, 0, pair)))
                                bad |= 1 << 1;
                }
        }
        /* What the kernel truncates to an allowed family (or to AF_VSOCK) is refused in full. */
        for (long af = AF_UNIX; af <= AF_VSOCK; af++)
                if (!refused("socket", (1L << 32) | af, SOCK_DGRAM,
                             syscall(SYS_socket, (1L << 32) | af, SOCK_DGRAM | SOCK_CLOEXEC, 0)))
                        bad |= 1 << 2;
        /* The refusals were the filter's: this kernel has some of those families (AF_VSOCK, AF_PACKET, ...). */
        if (filter_only == 0)
                bad |= 1 << 3;

        /* The four still work as they did. */
        for (size_t i = 0; sandbox_seccomp_socket_families[i] >= 0; i++) {
                int af = sandbox_seccomp_socket_families[i];
                int type = af == AF_NETLINK ? SOCK_RAW : SOCK_DGRAM;
                int s = socket(af, type | SOCK_CLOEXEC, 0);

                if (s < 0 && (af == AF_UNIX || af == AF_NETLINK || errno == EAFNOSUPPORT)) {
                        dprintf(STDERR_FILENO, "socket(%d, %d): %s\n", af, type, strerror(errno));
                        bad |= 1 << 4;
                }
                if (s >= 0)
                        close(s);
        }
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0)
                bad |= 1 << 5;
        else {
                close(pair[0]);
                close(pair[1]);
        }
        return bad;
}

START_TEST(test_seccomp_socket_families) {
        _cleanup_close_ int fd = export_filter();
        int status;
        pid_t pid;

        /* Exactly the four, in order. */
        ck_assert_int_eq(sandbox_seccomp_socket_families[0], AF_UNIX);
        ck_assert_int_eq(sandbox_seccomp_socket_families[1], AF_INET);
        ck_assert_int_eq(sandbox_seccomp_socket_families[2], AF_INET6);
        ck_assert_int_eq(sandbox_seccomp_socket_families[3], AF_NETLINK);
        ck_assert_int_eq(sandbox_seccomp_socket_families[4], -1);

        ck_assert_int_ge(fd, 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0)
                _exit(child_probe_families(fd));
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status), "the probe died of signal %d", WTERMSIG(status));
        ck_assert_msg(WEXITSTATUS(status) == 0, "failed checks: 0x%x", WEXITSTATUS(status));
}
END_TEST

START_TEST(test_seccomp_filter_works) {
        _cleanup_close_ int fd = export_filter();
        int status;
        pid_t pid;

        ck_assert_int_ge(fd, 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0)
                _exit(child_probe(fd));
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status), "the probe died of signal %d", WTERMSIG(status));
        ck_assert_msg(WEXITSTATUS(status) == 0, "failed checks: 0x%x", WEXITSTATUS(status));
}
END_TEST

/* ---- limits -------------------------------------------------------------- */

START_TEST(test_limits_from_config) {
        Config c;
        SandboxLimits l;

        config_init(&c);
        sandbox_limits_from_config(&c, &l);
        ck_assert_uint_eq(l.memory, 2ULL << 30);
        ck_assert_uint_eq(l.processes, 256);
        ck_assert_uint_eq(l.cpu_usec, c.max_timeout_usec + SANDBOX_CPU_MARGIN_USEC);
        ck_assert_uint_eq(l.file_size, c.tmpfs_size);
        ck_assert_uint_eq(l.open_files, 1024);

        c.max_cpu_time_usec = 42 * 1000000ULL;
        c.max_file_size = 1 << 20;
        sandbox_limits_from_config(&c, &l);
        ck_assert_uint_eq(l.cpu_usec, 42 * 1000000ULL);
        ck_assert_uint_eq(l.file_size, 1 << 20);
        config_done(&c);
}
END_TEST

START_TEST(test_limits_lower_only) {
        SandboxLimits max = { .memory = 1000, .processes = 10, .cpu_usec = 0, .file_size = 50, .open_files = 64 };
        SandboxLimits l;
        unsigned raised;

        /* Nothing asked: the maximum. */
        raised = sandbox_limits_lower(&max, &(SandboxLimits) {}, &l);
        ck_assert_uint_eq(raised, 0);
        ck_assert(sandbox_limits_equal(&l, &max));

        /* Lower: taken. Higher: lowered, and said. No limit at all (0): a request sets one. */
        raised = sandbox_limits_lower(&max, &(SandboxLimits) { .memory = 500, .processes = 20, .cpu_usec = 7,
                                                               .file_size = 50, .open_files = 1 },
                                      &l);
        ck_assert_uint_eq(raised, SANDBOX_LIMIT_PROCESSES);
        ck_assert_uint_eq(l.memory, 500);
        ck_assert_uint_eq(l.processes, 10);
        ck_assert_uint_eq(l.cpu_usec, 7);
        ck_assert_uint_eq(l.file_size, 50);
        ck_assert_uint_eq(l.open_files, 64);   /* not a call's to set */

        raised = sandbox_limits_lower(&max, &(SandboxLimits) { .memory = UINT64_MAX, .file_size = 51 }, &l);
        ck_assert_uint_eq(raised, SANDBOX_LIMIT_MEMORY | SANDBOX_LIMIT_FILE_SIZE);
        ck_assert_uint_eq(l.memory, 1000);
        ck_assert_uint_eq(l.file_size, 50);
}
END_TEST

static const ProcessLimit *rl_find(const ProcessLimit *rl, size_t n, int resource) {
        for (size_t i = 0; i < n; i++)
                if (rl[i].resource == resource)
                        return &rl[i];
        return NULL;
}

START_TEST(test_limits_rlimits) {
        SandboxLimits l = { .memory = 1 << 30, .processes = 99, .cpu_usec = 2500000, .file_size = 4096,
                            .open_files = 128 };
        ProcessLimit rl[SANDBOX_N_RLIMITS];
        const ProcessLimit *x;
        size_t n;

        n = sandbox_limits_rlimits(&l, false, rl);
        ck_assert_uint_eq(n, 6);
        ck_assert_uint_eq(rl_find(rl, n, RLIMIT_CORE)->value, 0);
        x = rl_find(rl, n, RLIMIT_CPU);
        ck_assert_uint_eq(x->value, 3);         /* rounded up */
        ck_assert_uint_gt(x->hard, x->value);   /* SIGXCPU first */
        ck_assert_uint_eq(rl_find(rl, n, RLIMIT_FSIZE)->value, 4096);
        ck_assert_uint_eq(rl_find(rl, n, RLIMIT_NOFILE)->value, 128);
        ck_assert_uint_eq(rl_find(rl, n, RLIMIT_AS)->value, 1 << 30);
        ck_assert_uint_eq(rl_find(rl, n, RLIMIT_NPROC)->value, 99);

        /* With a cgroup, memory and processes are its job. */
        n = sandbox_limits_rlimits(&l, true, rl);
        ck_assert_uint_eq(n, 4);
        ck_assert_ptr_null(rl_find(rl, n, RLIMIT_AS));
        ck_assert_ptr_null(rl_find(rl, n, RLIMIT_NPROC));

        /* A persistent sandbox's CPU time: RLIMIT_CPU only where there is no cgroup, whose CPU cap binds. */
        l.cpu_usec_without_cgroup = true;
        n = sandbox_limits_rlimits(&l, true, rl);
        ck_assert_uint_eq(n, 3);
        ck_assert_ptr_null(rl_find(rl, n, RLIMIT_CPU));
        n = sandbox_limits_rlimits(&l, false, rl);
        ck_assert_uint_eq(rl_find(rl, n, RLIMIT_CPU)->value, 3);

        /* 0 is no limit: not set at all (core dumps stay off). */
        n = sandbox_limits_rlimits(&(SandboxLimits) {}, false, rl);
        ck_assert_uint_eq(n, 1);
        ck_assert_int_eq(rl[0].resource, RLIMIT_CORE);
}
END_TEST

static const char *hit(int exit_code, int sig, const char *err) {
        return sandbox_limit_hit(&(SandboxOutcome) { .exit_code = exit_code, .signal = sig, .stderr_text = err });
}

START_TEST(test_limit_hit) {
        ck_assert_ptr_null(hit(1, 0, "Traceback (most recent call last):\nValueError: x\n"));
        ck_assert_ptr_null(hit(1, 0, NULL));
        ck_assert_str_eq(hit(128 + SIGXCPU, 0, ""), "cpu_time");
        ck_assert_str_eq(hit(0, SIGXCPU, ""), "cpu_time");
        /* The script's own exit status 152 is not the signal. */
        ck_assert_ptr_null(sandbox_limit_hit(&(SandboxOutcome) { .exit_code = 128 + SIGXCPU, .decoded = true }));
        ck_assert_str_eq(hit(128 + SIGXFSZ, 0, ""), "file_size");
        ck_assert_str_eq(hit(1, 0, "Traceback (most recent call last):\n  File \"x\", line 1\nMemoryError\n"),
                         "memory");
        ck_assert_str_eq(hit(1, 0, "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 8 GiB\n"),
                         "memory");
        ck_assert_str_eq(hit(1, 0, "OSError: [Errno 12] Cannot allocate memory"), "memory");
        ck_assert_str_eq(hit(1, 0, "BlockingIOError: [Errno 11] Resource temporarily unavailable\n"), "processes");
        ck_assert_str_eq(hit(1, 0, "RuntimeError: can't start new thread\n"), "processes");
        ck_assert_str_eq(hit(1, 0, "bwrap: Creating new namespace failed: Resource temporarily unavailable\n"),
                         "processes");
        ck_assert_str_eq(hit(1, 0, "OSError: [Errno 27] File too large\n"), "file_size");
        ck_assert_str_eq(hit(1, 0, "OSError: [Errno 28] No space left on device\n"), "disk_space");
        ck_assert_str_eq(hit(1, 0, "OSError: [Errno 24] Too many open files: 'x'\n"), "open_files");
        /* Names that merely contain the words are not the exception. */
        ck_assert_ptr_null(hit(1, 0, "print('MemoryError')\nMyMemoryErrorHandler failed\n"));
        ck_assert_ptr_null(hit(1, 0, "  x = 'no MemoryError here'\n"));
        /* The last one wins: the exception that ended the script comes last. */
        ck_assert_str_eq(hit(1, 0, "MemoryError\nOSError: [Errno 28] No space left on device\n"), "disk_space");
        /* The cgroup's word, then the timeout, come first. */
        ck_assert_str_eq(sandbox_limit_hit(&(SandboxOutcome) { .exit_code = 137, .oom_killed = true }), "memory");
        ck_assert_str_eq(sandbox_limit_hit(&(SandboxOutcome) { .exit_code = 1, .pids_max = true }), "processes");
        ck_assert_str_eq(sandbox_limit_hit(&(SandboxOutcome) { .exit_code = 137, .timed_out = true,
                                                                .stderr_text = "MemoryError" }),
                         "timeout");
        /* A fork bomb that swallows EAGAIN ends at the timeout, but pids.events counted the limit. */
        ck_assert_str_eq(sandbox_limit_hit(&(SandboxOutcome) { .exit_code = 137, .timed_out = true, .pids_max = true }),
                         "processes");
        ck_assert_str_eq(sandbox_limit_hit(&(SandboxOutcome) { .exit_code = 137, .timed_out = true,
                                                                .oom_killed = true }),
                         "memory");
}
END_TEST

/* ---- cgroup v2, against a fake tree ---------------------------------------- */

START_TEST(test_cgroup_find) {
        char *root = tmpdir_new(), proc[PATH_MAX], dir[PATH_MAX];
        _cleanup_free_ char *got = NULL, *why = NULL;

        snprintf(proc, sizeof(proc), "%s/self-cgroup", root);
        mkdir_in(root, "system.slice");
        mkdir_in(root, "system.slice/x.service");
        snprintf(dir, sizeof(dir), "%s/system.slice/x.service", root);
        put(dir, "cgroup.subtree_control", "");

        /* cgroup v1 only: no "0::" line. */
        put(root, "self-cgroup", "4:memory:/x\n1:name=systemd:/x\n");
        ck_assert_int_eq(sandbox_cgroup_find(proc, root, &got, &why), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(why, "no cgroup v2"));

        /* The root cgroup is nobody's delegated subtree. */
        put(root, "self-cgroup", "0::/\n");
        ck_assert_int_eq(sandbox_cgroup_find(proc, root, &got, &why), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(why, "root cgroup"));

        /* Not there (or not writable). */
        put(root, "self-cgroup", "0::/system.slice/y.service\n");
        ck_assert_int_eq(sandbox_cgroup_find(proc, root, &got, &why), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(why, "not delegated"));

        put(root, "self-cgroup", "1:name=systemd:/system.slice/x.service\n0::/system.slice/x.service\n");
        if (geteuid() == 0) {
                /* Root can write anywhere: systemd's mark decides. */
                ck_assert_int_eq(sandbox_cgroup_find(proc, root, &got, &why), -EOPNOTSUPP);
                ck_assert_ptr_nonnull(strstr(why, "marked"));
                if (setxattr(dir, "trusted.delegate", "1", 1, 0) < 0 && setxattr(dir, "user.delegate", "1", 1, 0) < 0) {
                        rm_rf(root);
                        return;   /* this file system keeps no such attributes */
                }
        }
        ck_assert_int_eq(sandbox_cgroup_find(proc, root, &got, &why), 0);
        ck_assert_str_eq(got, dir);
        free(got);
        got = NULL;

        /* Our own leaf stands for the delegated cgroup above it. */
        put(root, "self-cgroup", "0::/system.slice/x.service/supervisor\n");
        ck_assert_int_eq(sandbox_cgroup_find(proc, root, &got, &why), 0);
        ck_assert_str_eq(got, dir);
        rm_rf(root);
}
END_TEST

START_TEST(test_cgroup_prepare) {
        char *d = tmpdir_new();
        _cleanup_free_ char *why = NULL;

        put(d, "cgroup.controllers", "cpuset cpu io memory pids\n");
        put(d, "cgroup.subtree_control", "");
        put(d, "cgroup.procs", "");
        ck_assert_int_eq(sandbox_cgroup_prepare(d, &why), 0);
        ck_file(d, "cgroup.subtree_control", "+memory +pids +cpu");

        put(d, "cgroup.controllers", "memory pids\n");
        put(d, "cgroup.subtree_control", "");
        ck_assert_int_eq(sandbox_cgroup_prepare(d, &why), 0);
        ck_file(d, "cgroup.subtree_control", "+memory +pids");

        /* "pids" is not "pidsx"; and without pids there is no containing a fork bomb. */
        put(d, "cgroup.controllers", "cpu memory pidsx\n");
        ck_assert_int_eq(sandbox_cgroup_prepare(d, &why), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(why, "not available"));
        rm_rf(d);
}
END_TEST

START_TEST(test_cgroup_new_run) {
        char *d = tmpdir_new(), run[PATH_MAX];
        _cleanup_free_ char *path = NULL;
        SandboxLimits l = { .memory = 256 << 20, .processes = 64, .cpu_quota = 150 };
        static const char *const files[] = { "memory.max", "memory.swap.max", "memory.oom.group", "pids.max",
                                             "cpu.max", "cgroup.procs", NULL };

        /* cgroupfs makes the files with the directory; here the test does. */
        snprintf(run, sizeof(run), "%s/run-1", d);
        ck_assert_int_eq(mkdir(run, 0755), 0);
        for (size_t i = 0; files[i]; i++)
                put(run, files[i], "");

        ck_assert_int_eq(sandbox_cgroup_new_run(d, "run-1", &l, &path), 0);
        ck_assert_str_eq(path, run);
        ck_file(run, "memory.max", "268435456");
        ck_file(run, "memory.swap.max", "0");
        ck_file(run, "memory.oom.group", "1");
        ck_file(run, "pids.max", "64");
        ck_file(run, "cpu.max", "150000 100000");

        ck_assert_int_eq(sandbox_cgroup_attach(run, 4242), 0);
        ck_file(run, "cgroup.procs", "4242");

        /* No limit is "max"; no cap on CPU is "max" too. */
        free(path);
        path = NULL;
        for (size_t i = 0; files[i]; i++)
                put(run, files[i], "");
        ck_assert_int_eq(sandbox_cgroup_new_run(d, "run-1", &(SandboxLimits) {}, &path), 0);
        ck_file(run, "memory.max", "max");
        ck_file(run, "pids.max", "max");
        ck_file(run, "cpu.max", "max 100000");

        /* Optional files may be missing (no swap accounting, no cpu controller). */
        free(path);
        path = NULL;
        unlink_in(run, "memory.swap.max");
        unlink_in(run, "memory.oom.group");
        unlink_in(run, "cpu.max");
        ck_assert_int_eq(sandbox_cgroup_new_run(d, "run-1", &(SandboxLimits) { .memory = 1 << 20 }, &path), 0);
        ck_file(run, "memory.max", "1048576");

        /* A limit that cannot be written fails the run cgroup. */
        free(path);
        path = NULL;
        unlink_in(run, "pids.max");
        ck_assert_int_eq(sandbox_cgroup_new_run(d, "run-1", &l, &path), -ENOENT);
        ck_assert_ptr_null(path);
        rm_rf(d);
}
END_TEST

START_TEST(test_cgroup_cpu_quota) {
        char *d = tmpdir_new(), v2[PATH_MAX], pids[PATH_MAX], cpu[PATH_MAX];

        snprintf(v2, sizeof(v2), "%s/v2", d);
        snprintf(pids, sizeof(pids), "%s/pids", d);
        snprintf(cpu, sizeof(cpu), "%s/cpu", d);
        ck_assert_int_eq(mkdir(v2, 0755), 0);
        ck_assert_int_eq(mkdir(pids, 0755), 0);
        ck_assert_int_eq(mkdir(cpu, 0755), 0);

        /* v2: cpu.max. */
        put(v2, "cpu.max", "");
        ck_assert_int_eq(sandbox_cgroup_set_cpu_quota((char *[]) { v2, NULL }, 5), 0);
        ck_file(v2, "cpu.max", "5000 100000");
        put(v2, "cpu.max", "");
        ck_assert_int_eq(sandbox_cgroup_set_cpu_quota((char *[]) { v2, NULL }, 0), 0);
        ck_file(v2, "cpu.max", "max 100000");

        /* v1: the hierarchy that has the cpu controller, among the run's cgroups. */
        put(pids, "pids.max", "");
        put(cpu, "cpu.cfs_quota_us", "");
        put(cpu, "cpu.cfs_period_us", "");
        ck_assert_int_eq(sandbox_cgroup_set_cpu_quota((char *[]) { pids, cpu, NULL }, 150), 0);
        ck_file(cpu, "cpu.cfs_quota_us", "150000");
        ck_file(cpu, "cpu.cfs_period_us", "100000");
        put(cpu, "cpu.cfs_quota_us", "");
        ck_assert_int_eq(sandbox_cgroup_set_cpu_quota((char *[]) { pids, cpu, NULL }, 0), 0);
        ck_file(cpu, "cpu.cfs_quota_us", "-1");

        /* None has it. */
        ck_assert_int_eq(sandbox_cgroup_set_cpu_quota((char *[]) { pids, NULL }, 5), -ENOENT);
        ck_assert_int_eq(sandbox_cgroup_set_cpu_quota(NULL, 5), -ENOENT);
        rm_rf(d);
}
END_TEST

START_TEST(test_cgroup_events_and_stale) {
        char *d = tmpdir_new(), p[PATH_MAX];
        char *one[] = { d, NULL };
        SandboxCgroupEvents ev;
        struct stat st;

        put(d, "memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n");
        put(d, "pids.events", "max 5\n");
        ck_assert_int_eq(sandbox_cgroup_read_events(one, &ev), 0);
        ck_assert_uint_eq(ev.oom_kill, 1);
        ck_assert_uint_eq(ev.pids_max, 5);
        put(d, "memory.events", "low 0\nmax 3\noom_kill 0\n");
        put(d, "pids.events", "max 0\n");
        ck_assert_int_eq(sandbox_cgroup_read_events(one, &ev), 0);
        ck_assert_uint_eq(ev.oom_kill, 0);
        ck_assert_uint_eq(ev.pids_max, 0);

        /* Empty run-* go; a busy one (here: not empty) and anything else stay. */
        mkdir_in(d, "run-1");
        mkdir_in(d, "run-2");
        mkdir_in(d, "supervisor");
        snprintf(p, sizeof(p), "%s/run-2", d);
        put(p, "cgroup.procs", "1\n");
        sandbox_cgroup_remove_stale(d);
        snprintf(p, sizeof(p), "%s/run-1", d);
        ck_assert_int_lt(stat(p, &st), 0);
        snprintf(p, sizeof(p), "%s/run-2", d);
        ck_assert_int_eq(stat(p, &st), 0);
        snprintf(p, sizeof(p), "%s/supervisor", d);
        ck_assert_int_eq(stat(p, &st), 0);

        /* Named by their daemon's pid: this daemon's and a dead daemon's go, a live other daemon's stays (two
         * daemons on one cache share the parent; one must not remove what the other just made for a child). */
        {
                char mine[64], live[64], dead[64];
                pid_t child = fork();
                ck_assert_int_ge(child, 0);
                if (child == 0)
                        _exit(0);
                ck_assert_int_eq(waitpid(child, NULL, 0), child);
                snprintf(mine, sizeof(mine), "run-%d-7-1", (int) getpid());
                snprintf(live, sizeof(live), "run-%d-7-1", (int) getppid());
                snprintf(dead, sizeof(dead), "run-%d-background", (int) child);
                mkdir_in(d, mine);
                mkdir_in(d, live);
                mkdir_in(d, dead);
                sandbox_cgroup_remove_stale(d);
                snprintf(p, sizeof(p), "%s/%s", d, mine);
                ck_assert_int_lt(stat(p, &st), 0);
                snprintf(p, sizeof(p), "%s/%s", d, dead);
                ck_assert_int_lt(stat(p, &st), 0);
                snprintf(p, sizeof(p), "%s/%s", d, live);
                ck_assert_int_eq(stat(p, &st), 0);
        }
        rm_rf(d);
}
END_TEST

START_TEST(test_cgroup_groups) {
        char *d = tmpdir_new(), p[PATH_MAX], buf[32];
        _cleanup_free_ char *path = NULL;
        struct stat st;

        ck_assert_str_eq(sandbox_cgroup_group_name(1000, buf, sizeof(buf)), "uid-1000");
        ck_assert_str_eq(sandbox_cgroup_group_name(0, buf, sizeof(buf)), "uid-0");
        ck_assert_str_eq(sandbox_cgroup_group_name(SANDBOX_OWNER_DAEMON, buf, sizeof(buf)), "daemon");
        ck_assert_str_eq(sandbox_cgroup_group_name(SANDBOX_OWNER_IDLE, buf, sizeof(buf)), "idle");

        /* cgroup v2: the run cgroups below get their controllers; the group its weight. */
        mkdir_in(d, "uid-5");
        snprintf(p, sizeof(p), "%s/uid-5", d);
        put(p, "cgroup.controllers", "cpuset cpu memory pids\n");
        put(p, "cgroup.subtree_control", "");
        put(p, "cpu.weight", "");
        ck_assert_int_eq(sandbox_cgroup_new_group(d, "uid-5", 100, &path), 0);
        ck_assert_str_eq(path, p);
        ck_file(p, "cgroup.subtree_control", "+memory +pids +cpu");
        ck_file(p, "cpu.weight", "100");
        path = mfree(path);
        put(p, "cgroup.controllers", "memory pids\n");
        put(p, "cgroup.subtree_control", "");
        put(p, "cpu.weight", "");
        ck_assert_int_eq(sandbox_cgroup_new_group(d, "uid-5", SANDBOX_CGROUP_DAEMON_WEIGHT, &path), 0);
        ck_file(p, "cgroup.subtree_control", "+memory +pids");
        ck_file(p, "cpu.weight", "25");
        path = mfree(path);

        /* cgroup v1: cpu.shares in the cpu hierarchy (1024 is a user's); nothing to write in the others. */
        mkdir_in(d, "daemon");
        snprintf(p, sizeof(p), "%s/daemon", d);
        put(p, "cpu.shares", "");
        ck_assert_int_eq(sandbox_cgroup_new_group(d, "daemon", SANDBOX_CGROUP_DAEMON_WEIGHT, &path), 0);
        ck_file(p, "cpu.shares", "256");
        path = mfree(path);
        /* The idle group: the least weight v1 has. */
        mkdir_in(d, "idle");
        snprintf(p, sizeof(p), "%s/idle", d);
        put(p, "cpu.shares", "");
        ck_assert_int_eq(sandbox_cgroup_new_group(d, "idle", SANDBOX_CGROUP_IDLE_WEIGHT, &path), 0);
        ck_file(p, "cpu.shares", "2");
        path = mfree(path);
        snprintf(p, sizeof(p), "%s/daemon", d);
        ck_assert_int_eq(sandbox_cgroup_new_group(d, "uid-6", 100, &path), 0);
        ck_assert_int_eq(stat(path, &st), 0);
        path = mfree(path);

        /* A run's processes move from one cgroup to another. */
        mkdir_in(d, "run-1");
        mkdir_in(d, "run-2");
        snprintf(p, sizeof(p), "%s/run-1", d);
        put(p, "cgroup.procs", "12\n34\n");
        char to[PATH_MAX];
        snprintf(to, sizeof(to), "%s/run-2", d);
        put(to, "cgroup.procs", "");
        ck_assert_int_eq(sandbox_cgroup_move_procs(p, to), 2);
        ck_file(to, "cgroup.procs", "34");
        /* A list longer than any first read: every pid moves, the last one whole (not cut at a buffer's end). A
         * last line without its newline is no whole pid and stays. */
        {
                _cleanup_free_ char *many = NULL;
                size_t l = 0;
                many = malloc(3000 * 8 + 16);
                ck_assert_ptr_nonnull(many);
                for (unsigned i = 0; i < 3000; i++)
                        l += (size_t) sprintf(many + l, "%u\n", 1000000 + i);
                strcpy(many + l, "4321");
                put(p, "cgroup.procs", many);
                ck_assert_int_eq(sandbox_cgroup_move_procs(p, to), 3000);
                ck_file(to, "cgroup.procs", "1002999");
        }
        unlink_in(p, "cgroup.procs");
        ck_assert_int_eq(sandbox_cgroup_move_procs(p, to), -ENOENT);

        /* Empty groups go (uid-6), busy ones (here: not empty) and what is no group stay; run-1 is busy too. */
        snprintf(p, sizeof(p), "%s/run-1", d);
        put(p, "cgroup.procs", "12\n");
        sandbox_cgroup_remove_stale(d);
        snprintf(p, sizeof(p), "%s/uid-6", d);
        ck_assert_int_lt(stat(p, &st), 0);
        snprintf(p, sizeof(p), "%s/uid-5", d);
        ck_assert_int_eq(stat(p, &st), 0);
        snprintf(p, sizeof(p), "%s/run-1", d);
        ck_assert_int_eq(stat(p, &st), 0);

        /* What an earlier daemon left: empty runs in groups go, and then their groups; a busy run stays. */
        mkdir_in(d, "uid-7");
        snprintf(p, sizeof(p), "%s/uid-7", d);
        mkdir_in(p, "run-3");
        mkdir_in(d, "uid-8");
        snprintf(p, sizeof(p), "%s/uid-8", d);
        mkdir_in(p, "run-4");
        snprintf(p, sizeof(p), "%s/uid-8/run-4", d);
        put(p, "cgroup.procs", "1\n");
        snprintf(p, sizeof(p), "%s/idle", d);
        unlink_in(p, "cpu.shares");     /* the idle group, empty now: it goes too */
        sandbox_cgroup_remove_stale(d);
        ck_assert_int_lt(stat(p, &st), 0);
        snprintf(p, sizeof(p), "%s/uid-7", d);
        ck_assert_int_lt(stat(p, &st), 0);
        snprintf(p, sizeof(p), "%s/uid-8/run-4", d);
        ck_assert_int_eq(stat(p, &st), 0);
        rm_rf(d);
}
END_TEST

START_TEST(test_cgroup_v1_events) {
        char *d = tmpdir_new(), pids[PATH_MAX], memory[PATH_MAX], cpu[PATH_MAX];
        char *run[] = { pids, memory, cpu, NULL };
        SandboxCgroupEvents ev;

        /* A run's cgroup in each hierarchy; each tells what it knows. */
        snprintf(pids, sizeof(pids), "%s/pids", d);
        snprintf(memory, sizeof(memory), "%s/memory", d);
        snprintf(cpu, sizeof(cpu), "%s/cpu", d);
        mkdir_in(d, "pids");
        mkdir_in(d, "memory");
        mkdir_in(d, "cpu");
        put(cpu, "cpu.stat", "nr_periods 0\n");
        ck_assert_int_eq(sandbox_cgroup_read_events(run, &ev), -ENOENT);

        put(pids, "pids.events", "max 3\n");
        put(memory, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
        put(memory, "memory.failcnt", "40\n");
        ck_assert_int_eq(sandbox_cgroup_read_events(run, &ev), 0);
        ck_assert_uint_eq(ev.oom_kill, 2);
        ck_assert_uint_eq(ev.pids_max, 3);

        /* The OOM killer not called: the limit may have been hit, page cache reclaimed, nothing killed. */
        put(memory, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
        put(pids, "pids.events", "max 0\n");
        ck_assert_int_eq(sandbox_cgroup_read_events(run, &ev), 0);
        ck_assert_uint_eq(ev.oom_kill, 0);
        ck_assert_uint_eq(ev.pids_max, 0);

        /* Before Linux 4.13 there is no count of kills: the failures to charge stand in for it. */
        put(memory, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n");
        put(memory, "memory.memsw.failcnt", "2\n");
        ck_assert_int_eq(sandbox_cgroup_read_events(run, &ev), 0);
        ck_assert_uint_eq(ev.oom_kill, 42);
        rm_rf(d);
}
END_TEST

START_TEST(test_cgroup_mount) {
        char *d = tmpdir_new(), mi[PATH_MAX];
        _cleanup_free_ char *mount = NULL, *root = NULL;

        snprintf(mi, sizeof(mi), "%s/mountinfo", d);
        put(d, "mountinfo",
            "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
            "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
            "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
            "33 31 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset,clone_children\n"
            "35 31 0:32 /docker/abc /sys/fs/cgroup/mem\\040ory rw - cgroup cgroup rw,memory\n"
            "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
            "50 22 0:50 / /mnt/no\\040dash rw\n");

        ck_assert_int_eq(sandbox_cgroup_mount(mi, "cpu", &mount, &root), 0);
        ck_assert_str_eq(mount, "/sys/fs/cgroup/cpu,cpuacct");
        ck_assert_str_eq(root, "/");
        free(mount);
        free(root);

        /* Octal escapes undone; the cgroup mounted there kept. */
        ck_assert_int_eq(sandbox_cgroup_mount(mi, "memory", &mount, &root), 0);
        ck_assert_str_eq(mount, "/sys/fs/cgroup/mem ory");
        ck_assert_str_eq(root, "/docker/abc");
        free(mount);
        free(root);

        ck_assert_int_eq(sandbox_cgroup_mount(mi, NULL, &mount, &root), 0);
        ck_assert_str_eq(mount, "/sys/fs/cgroup/unified");
        free(mount);
        free(root);
        mount = root = NULL;

        /* "cpu" is not "cpuset" nor "cpuacct" alone, "pids" is not mounted, "systemd" is no controller name. */
        ck_assert_int_eq(sandbox_cgroup_mount(mi, "pids", &mount, &root), -ENOENT);
        ck_assert_int_eq(sandbox_cgroup_mount(mi, "systemd", &mount, &root), -ENOENT);
        put(d, "mountinfo", "33 31 0:30 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n");
        ck_assert_int_eq(sandbox_cgroup_mount(mi, "cpu", &mount, &root), -ENOENT);
        ck_assert_ptr_null(mount);
        rm_rf(d);
}
END_TEST

START_TEST(test_cgroup_v1_find_and_create) {
        char *d = tmpdir_new(), mi[PATH_MAX], proc[PATH_MAX], info[2 * PATH_MAX], want[PATH_MAX];
        _cleanup_free_ char *got = NULL, *why = NULL, *parent = NULL;
        struct stat st;

        snprintf(mi, sizeof(mi), "%s/mountinfo", d);
        snprintf(proc, sizeof(proc), "%s/self-cgroup", d);
        mkdir_in(d, "pids");
        mkdir_in(d, "memory");
        mkdir_in(d, "pids/user.slice");
        snprintf(info, sizeof(info),
                 "39 31 0:36 / %s/pids rw,relatime - cgroup cgroup rw,pids\n"
                 "35 31 0:32 /lxc/c1 %s/memory rw,relatime - cgroup cgroup rw,memory\n"
                 "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
                 d, d);
        put(d, "mountinfo", info);
        put(d, "self-cgroup", "8:pids:/user.slice\n4:memory:/lxc/c1\n1:name=systemd:/x\n0::/\n");

        ck_assert_int_eq(sandbox_cgroup_v1_find(mi, proc, "pids", &got, &why), 0);
        snprintf(want, sizeof(want), "%s/pids/user.slice", d);
        ck_assert_str_eq(got, want);
        free(got);
        got = NULL;

        /* The hierarchy's root as mounted (a container's) is the mount point. */
        ck_assert_int_eq(sandbox_cgroup_v1_find(mi, proc, "memory", &got, &why), 0);
        snprintf(want, sizeof(want), "%s/memory", d);
        ck_assert_str_eq(got, want);
        free(got);
        got = NULL;

        /* Ours outside of what is mounted; a hierarchy not mounted; none of ours in it. */
        put(d, "self-cgroup", "8:pids:/\n4:memory:/lxc/c2\n");
        ck_assert_int_eq(sandbox_cgroup_v1_find(mi, proc, "memory", &got, &why), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(why, "not in the part mounted"));
        ck_assert_int_eq(sandbox_cgroup_v1_find(mi, proc, "cpu", &got, &why), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(why, "no cgroup v1 hierarchy with the cpu controller"));
        put(d, "self-cgroup", "0::/\n");
        ck_assert_int_eq(sandbox_cgroup_v1_find(mi, proc, "pids", &got, &why), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(why, "names no cgroup"));

        /* The root of the hierarchy is the mount point itself. */
        put(d, "self-cgroup", "8:pids:/\n");
        ck_assert_int_eq(sandbox_cgroup_v1_find(mi, proc, "pids", &got, &why), 0);
        snprintf(want, sizeof(want), "%s/pids", d);
        ck_assert_str_eq(got, want);

        /* The daemon's parent of run cgroups below it, made or found. */
        ck_assert_int_eq(sandbox_cgroup_v1_create(got, "mcp-python-sandbox-x", &parent, &why), 0);
        snprintf(want, sizeof(want), "%s/pids/mcp-python-sandbox-x", d);
        ck_assert_str_eq(parent, want);
        ck_assert_int_eq(stat(parent, &st), 0);
        free(parent);
        parent = NULL;
        ck_assert_int_eq(sandbox_cgroup_v1_create(got, "mcp-python-sandbox-x", &parent, &why), 0);
        free(parent);
        parent = NULL;
        ck_assert_int_eq(sandbox_cgroup_v1_create("/nonexistent", "y", &parent, &why), -ENOENT);
        ck_assert_ptr_nonnull(strstr(why, "cannot be created"));
        rm_rf(d);
}
END_TEST

START_TEST(test_service_need) {
        SandboxServiceLimits n;
        const uint64_t G = 1024ULL * 1024 * 1024, M = 1024ULL * 1024;

        /* The defaults on 2 CPUs (max-runs 8, max-sandboxes 64, 256 processes, 2G each) and 24G of memory: the sum
         * of memory is more than the machine has, so 80% of it. */
        sandbox_service_need(8 + 64, 256, 2 * G, 24 * G, &n);
        ck_assert_uint_eq(n.tasks, 72 * 256 + SANDBOX_SERVICE_TASKS_MARGIN);
        ck_assert_uint_eq(n.memory, 24 * G * 80 / 100);
        /* Few and small runs on a big machine: the sum and the margin. */
        sandbox_service_need(4, 64, 256 * M, 64 * G, &n);
        ck_assert_uint_eq(n.tasks, 4 * 64 + 768);
        ck_assert_uint_eq(n.memory, 4 * 256 * M + SANDBOX_SERVICE_MEMORY_MARGIN);
        /* The machine's memory unknown: the sum. */
        sandbox_service_need(4, 64, 256 * M, 0, &n);
        ck_assert_uint_eq(n.memory, 4 * 256 * M + SANDBOX_SERVICE_MEMORY_MARGIN);
        /* A run's processes or memory not capped: no service limit is enough for processes; memory is the share. */
        sandbox_service_need(4, 0, 0, 10 * G, &n);
        ck_assert_uint_eq(n.tasks, SANDBOX_SERVICE_UNLIMITED);
        ck_assert_uint_eq(n.memory, 8 * G);
        sandbox_service_need(4, 0, 0, 0, &n);
        ck_assert_uint_eq(n.memory, SANDBOX_SERVICE_UNLIMITED);
        /* Huge caps saturate rather than wrap around. */
        sandbox_service_need(UINT64_MAX / 2, 4, UINT64_MAX / 2, 0, &n);
        ck_assert_uint_eq(n.tasks, SANDBOX_SERVICE_UNLIMITED);
        ck_assert_uint_eq(n.memory, SANDBOX_SERVICE_UNLIMITED);
        /* Nothing can run: the margin alone. */
        sandbox_service_need(0, 256, 2 * G, 24 * G, &n);
        ck_assert_uint_eq(n.tasks, SANDBOX_SERVICE_TASKS_MARGIN);
        ck_assert_uint_eq(n.memory, SANDBOX_SERVICE_MEMORY_MARGIN);
}
END_TEST

START_TEST(test_cgroup_service_limits) {
        char *d = tmpdir_new(), mi[PATH_MAX], proc[PATH_MAX], info[2 * PATH_MAX];
        SandboxServiceLimits l;

        snprintf(mi, sizeof(mi), "%s/mountinfo", d);
        snprintf(proc, sizeof(proc), "%s/self-cgroup", d);

        /* cgroup v1: the smallest pids.max of our cgroup and its ancestors ("max" is none); the memory hierarchy
         * mounted from a container's cgroup, whose "unlimited" is a number near 2^63. */
        mkdir_in(d, "pids");
        mkdir_in(d, "pids/a");
        mkdir_in(d, "pids/a/b");
        mkdir_in(d, "memory");
        mkdir_in(d, "memory/svc");
        put(d, "pids/pids.max", "7\n");                /* the root has none; this one is above nothing of ours */
        put(d, "pids/a/pids.max", "500\n");
        put(d, "pids/a/b/pids.max", "max\n");
        put(d, "memory/memory.limit_in_bytes", "9223372036854771712\n");
        put(d, "memory/svc/memory.limit_in_bytes", "9223372036854771712\n");
        snprintf(info, sizeof(info),
                 "39 31 0:36 / %s/pids rw,relatime - cgroup cgroup rw,pids\n"
                 "35 31 0:32 /lxc/c1 %s/memory rw,relatime - cgroup cgroup rw,memory\n",
                 d, d);
        put(d, "mountinfo", info);
        put(d, "self-cgroup", "8:pids:/a/b\n4:memory:/lxc/c1/svc\n0::/\n");
        ck_assert_int_eq(sandbox_cgroup_service_limits(mi, proc, &l), 0);
        ck_assert_uint_eq(l.tasks, 7);          /* the mount point is the hierarchy's root: read too */
        ck_assert_uint_eq(l.memory, SANDBOX_SERVICE_UNLIMITED);
        unlink_in(d, "pids/pids.max");
        put(d, "memory/memory.limit_in_bytes", "1073741824\n");
        ck_assert_int_eq(sandbox_cgroup_service_limits(mi, proc, &l), 0);
        ck_assert_uint_eq(l.tasks, 500);
        ck_assert_uint_eq(l.memory, 1073741824);
        /* Ours is not below what is mounted, or not listed: nothing known, no limit. */
        put(d, "self-cgroup", "8:pids:/a/b\n4:memory:/lxc/c2\n");
        ck_assert_int_eq(sandbox_cgroup_service_limits(mi, proc, &l), 0);
        ck_assert_uint_eq(l.tasks, 500);
        ck_assert_uint_eq(l.memory, SANDBOX_SERVICE_UNLIMITED);

        /* cgroup v2 (no v1 hierarchy of either): pids.max and memory.max up to the root. */
        mkdir_in(d, "unified");
        mkdir_in(d, "unified/system.slice");
        mkdir_in(d, "unified/system.slice/svc.service");
        mkdir_in(d, "unified/system.slice/svc.service/supervisor");
        put(d, "unified/system.slice/pids.max", "max\n");
        put(d, "unified/system.slice/memory.max", "2147483648\n");
        put(d, "unified/system.slice/svc.service/pids.max", "33536\n");
        put(d, "unified/system.slice/svc.service/memory.max", "max\n");
        snprintf(info, sizeof(info), "41 31 0:38 / %s/unified rw,relatime - cgroup2 cgroup2 rw\n", d);
        put(d, "mountinfo", info);
        put(d, "self-cgroup", "0::/system.slice/svc.service/supervisor\n");
        ck_assert_int_eq(sandbox_cgroup_service_limits(mi, proc, &l), 0);
        ck_assert_uint_eq(l.tasks, 33536);
        ck_assert_uint_eq(l.memory, 2147483648ULL);

        /* No cgroup file system at all. */
        put(d, "mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n");
        ck_assert_int_eq(sandbox_cgroup_service_limits(mi, proc, &l), 0);
        ck_assert_uint_eq(l.tasks, SANDBOX_SERVICE_UNLIMITED);
        ck_assert_uint_eq(l.memory, SANDBOX_SERVICE_UNLIMITED);
        rm_rf(d);
}
END_TEST

/* A fake v1 hierarchy's run cgroup, with the files cgroupfs would give it. */
static void fake_v1_run(const char *dir, const char *const *files) {
        char run[PATH_MAX];

        snprintf(run, sizeof(run), "%s/run-1", dir);
        ck_assert_msg(mkdir(run, 0755) == 0 || errno == EEXIST, "%s: %s", run, strerror(errno));
        for (size_t i = 0; files[i]; i++)
                put(run, files[i], "");
}

static const char *const v1_pids_files[] = { "pids.max", "cgroup.procs", NULL };
static const char *const v1_memory_files[] = { "memory.limit_in_bytes", "memory.memsw.limit_in_bytes",
                                                "memory.oom_control", "memory.swappiness", "cgroup.procs", NULL };
static const char *const v1_cpu_files[] = { "cpu.cfs_period_us", "cpu.cfs_quota_us", "cgroup.procs", NULL };

START_TEST(test_cgroup_v1_new_run) {
        char *d = tmpdir_new(), pids[1024], memory[1024], cpu[1024], run[PATH_MAX];
        char *dirs[_SANDBOX_CGROUP_V1_MAX] = { [SANDBOX_CGROUP_V1_PIDS] = pids, [SANDBOX_CGROUP_V1_MEMORY] = memory,
                                               [SANDBOX_CGROUP_V1_CPU] = cpu };
        SandboxLimits l = { .memory = 256 << 20, .processes = 64, .cpu_quota = 150 };
        char **paths = NULL;
        struct stat st;

        ck_assert_str_eq(sandbox_cgroup_v1_controller(SANDBOX_CGROUP_V1_MEMORY), "memory");
        snprintf(pids, sizeof(pids), "%s/pids", d);
        snprintf(memory, sizeof(memory), "%s/memory", d);
        snprintf(cpu, sizeof(cpu), "%s/cpu", d);
        mkdir_in(d, "pids");
        mkdir_in(d, "memory");
        mkdir_in(d, "cpu");
        fake_v1_run(pids, v1_pids_files);
        fake_v1_run(memory, v1_memory_files);
        fake_v1_run(cpu, v1_cpu_files);

        ck_assert_int_eq(sandbox_cgroup_v1_new_run(dirs, "run-1", &l, &paths), 0);
        ck_assert_uint_eq(strv_length(paths), 3);
        snprintf(run, sizeof(run), "%s/run-1", pids);
        ck_assert_str_eq(paths[0], run);
        ck_file(run, "pids.max", "64");
        snprintf(run, sizeof(run), "%s/run-1", memory);
        ck_assert_str_eq(paths[1], run);
        ck_file(run, "memory.limit_in_bytes", "268435456");
        ck_file(run, "memory.memsw.limit_in_bytes", "268435456");
        ck_file(run, "memory.oom_control", "0");
        ck_file(run, "memory.swappiness", "");   /* swap is in memsw: left alone */
        snprintf(run, sizeof(run), "%s/run-1", cpu);
        ck_assert_str_eq(paths[2], run);
        ck_file(run, "cpu.cfs_period_us", "100000");
        ck_file(run, "cpu.cfs_quota_us", "150000");
        paths = strv_free(paths);

        /* No limits: "max" and -1. */
        fake_v1_run(pids, v1_pids_files);
        fake_v1_run(memory, v1_memory_files);
        fake_v1_run(cpu, v1_cpu_files);
        ck_assert_int_eq(sandbox_cgroup_v1_new_run(dirs, "run-1", &(SandboxLimits) {}, &paths), 0);
        snprintf(run, sizeof(run), "%s/run-1", pids);
        ck_file(run, "pids.max", "max");
        snprintf(run, sizeof(run), "%s/run-1", memory);
        ck_file(run, "memory.limit_in_bytes", "-1");
        ck_file(run, "memory.memsw.limit_in_bytes", "-1");
        snprintf(run, sizeof(run), "%s/run-1", cpu);
        ck_file(run, "cpu.cfs_quota_us", "-1");
        paths = strv_free(paths);

        /* Without swap accounting (no memsw), the run does not swap. */
        fake_v1_run(memory, v1_memory_files);
        snprintf(run, sizeof(run), "%s/run-1", memory);
        unlink_in(run, "memory.memsw.limit_in_bytes");
        ck_assert_int_eq(sandbox_cgroup_v1_new_run(dirs, "run-1", &(SandboxLimits) { .memory = 1 << 20 }, &paths),
                         0);
        ck_file(run, "memory.limit_in_bytes", "1048576");
        ck_file(run, "memory.swappiness", "0");
        paths = strv_free(paths);

        /* No cpu hierarchy: fine without a CPU cap, refused with one. */
        dirs[SANDBOX_CGROUP_V1_CPU] = NULL;
        fake_v1_run(pids, v1_pids_files);
        fake_v1_run(memory, v1_memory_files);
        ck_assert_int_eq(sandbox_cgroup_v1_new_run(dirs, "run-1", &(SandboxLimits) { .processes = 9 }, &paths), 0);
        ck_assert_uint_eq(strv_length(paths), 2);
        paths = strv_free(paths);
        ck_assert_int_eq(sandbox_cgroup_v1_new_run(dirs, "run-1", &l, &paths), -EOPNOTSUPP);
        ck_assert_ptr_null(paths);

        /* Controllers mounted together (pids,cpu): one run cgroup for both. */
        dirs[SANDBOX_CGROUP_V1_CPU] = pids;
        fake_v1_run(pids, v1_pids_files);
        fake_v1_run(pids, v1_cpu_files);
        fake_v1_run(memory, v1_memory_files);
        ck_assert_int_eq(sandbox_cgroup_v1_new_run(dirs, "run-1", &l, &paths), 0);
        ck_assert_uint_eq(strv_length(paths), 2);
        snprintf(run, sizeof(run), "%s/run-1", pids);
        ck_file(run, "pids.max", "64");
        ck_file(run, "cpu.cfs_quota_us", "150000");
        paths = strv_free(paths);

        /* A limit that cannot be written fails the run; what it made goes again. */
        dirs[SANDBOX_CGROUP_V1_CPU] = NULL;
        ck_assert_int_eq(sandbox_cgroup_v1_new_run(dirs, "run-2", &(SandboxLimits) {}, &paths), -ENOENT);
        ck_assert_ptr_null(paths);
        snprintf(run, sizeof(run), "%s/run-2", pids);
        ck_assert_int_lt(stat(run, &st), 0);
        snprintf(run, sizeof(run), "%s/run-2", memory);
        ck_assert_int_lt(stat(run, &st), 0);

        /* Both hierarchies it cannot do without. */
        dirs[SANDBOX_CGROUP_V1_MEMORY] = NULL;
        ck_assert_int_eq(sandbox_cgroup_v1_new_run(dirs, "run-1", &l, &paths), -EINVAL);
        rm_rf(d);
}
END_TEST

START_TEST(test_cgroup_v2_create) {
        char *root = tmpdir_new(), proc[PATH_MAX], ours[1024], want[PATH_MAX];
        _cleanup_free_ char *got = NULL, *why = NULL;

        snprintf(proc, sizeof(proc), "%s/self-cgroup", root);
        snprintf(ours, sizeof(ours), "%s/init.scope", root);
        mkdir_in(root, "init.scope");
        mkdir_in(root, "init.scope/sbx");
        snprintf(want, sizeof(want), "%s/sbx", ours);
        put(want, "cgroup.controllers", "memory pids\n");
        put(want, "cgroup.subtree_control", "");

        /* v1 only. */
        put(root, "self-cgroup", "4:memory:/x\n");
        ck_assert_int_eq(sandbox_cgroup_v2_create(proc, root, "/", "sbx", &got, &why), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(why, "no cgroup v2"));

        /* No controllers in the v2 hierarchy (a hybrid layout's "unified"): nothing to limit with. */
        put(root, "self-cgroup", "0::/init.scope\n");
        put(ours, "cgroup.controllers", "\n");
        put(ours, "cgroup.subtree_control", "");
        ck_assert_int_eq(sandbox_cgroup_v2_create(proc, root, "/", "sbx", &got, &why), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(why, "offers no memory and pids"));

        /* Enabled for our children already: nothing written to ours. */
        put(ours, "cgroup.controllers", "cpu memory pids\n");
        put(ours, "cgroup.subtree_control", "memory pids\n");
        ck_assert_int_eq(sandbox_cgroup_v2_create(proc, root, "/", "sbx", &got, &why), 0);
        ck_assert_str_eq(got, want);
        ck_file(ours, "cgroup.subtree_control", "memory pids\n");
        ck_file(want, "cgroup.subtree_control", "+memory +pids");
        free(got);
        got = NULL;

        /* Enabled when not: memory and pids, then cpu where it can be. */
        put(ours, "cgroup.controllers", "memory pids\n");
        put(ours, "cgroup.subtree_control", "");
        put(want, "cgroup.subtree_control", "");
        ck_assert_int_eq(sandbox_cgroup_v2_create(proc, root, "/", "sbx", &got, &why), 0);
        ck_file(ours, "cgroup.subtree_control", "+memory +pids");
        free(got);
        got = NULL;

        /* The root cgroup's own child, and a mount that starts below the root (a cgroup namespace's). */
        put(root, "self-cgroup", "0::/\n");
        put(root, "cgroup.controllers", "memory pids\n");
        put(root, "cgroup.subtree_control", "memory pids");
        mkdir_in(root, "sbx");
        snprintf(want, sizeof(want), "%s/sbx", root);
        put(want, "cgroup.controllers", "memory pids\n");
        put(want, "cgroup.subtree_control", "");
        ck_assert_int_eq(sandbox_cgroup_v2_create(proc, root, "/", "sbx", &got, &why), 0);
        ck_assert_str_eq(got, want);
        free(got);
        got = NULL;
        put(root, "self-cgroup", "0::/lxc/c1/init.scope\n");
        snprintf(want, sizeof(want), "%s/sbx", ours);
        ck_assert_int_eq(sandbox_cgroup_v2_create(proc, root, "/lxc/c1", "sbx", &got, &why), 0);
        ck_assert_str_eq(got, want);
        free(got);
        got = NULL;
        ck_assert_int_eq(sandbox_cgroup_v2_create(proc, root, "/lxc/c2", "sbx", &got, &why), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(why, "not in the part"));
        rm_rf(root);
}
END_TEST

/* The daemon's cgroups are an object: two of them (two instance keys) probe alike; where the daemon creates its
 * cgroups itself (as root), each makes its runs' cgroups under directories of its own, a group of runs stays when
 * its last run is gone (until the daemon exits: no rmdir of it in the loop), and freeing one removes what it created
 * while the other's stays. */
START_TEST(test_cgroups_object) {
        _cleanup_(sandbox_cgroups_freep) SandboxCgroups *a = NULL, *b = NULL;
        _cleanup_strv_free_ char **pa = NULL, **pb = NULL;
        SandboxLimits l = { .processes = 16, .owner = 4242 };
        char key[64], name_a[64], name_b[64];
        int ca, cb;

        snprintf(key, sizeof(key), "test-sandbox-a-%d", (int) getpid());
        ck_assert_int_ge(sandbox_cgroups_new(&a, key), 0);
        snprintf(key, sizeof(key), "test-sandbox-b-%d", (int) getpid());
        ck_assert_int_ge(sandbox_cgroups_new(&b, key), 0);
        ca = sandbox_cgroup_probe(a);
        cb = sandbox_cgroup_probe(b);
        ck_assert_int_ge(ca, 0);
        ck_assert_int_eq(ca, cb);
        ck_assert_int_eq(sandbox_cgroup_mode(a), sandbox_cgroup_mode(b));
        ck_assert_str_eq(sandbox_limits_mechanism(a), ca > 0 ? "cgroup" : "rlimit");
        ck_assert_ptr_nonnull(sandbox_limits_mechanism_detail(a));

        snprintf(name_a, sizeof(name_a), "run-%d-test-a", (int) getpid());
        snprintf(name_b, sizeof(name_b), "run-%d-test-b", (int) getpid());
        if (ca == 0) {
                ck_assert_int_eq(sandbox_cgroup_new_run_cgroups(a, name_a, &l, &pa), -EOPNOTSUPP);
                ck_assert_ptr_null(pa);
                ck_assert_int_eq(sandbox_cgroup_run_paths(a, name_a, l.owner, &pa), -EOPNOTSUPP);
                ck_assert_ptr_null(pa);
                printf("# test_cgroups_object: rlimits only here (%s)\n", sandbox_limits_mechanism_detail(a));
                return;
        }
        /* Named for a spawned child to make (process.h): the owner's group made, the run's cgroups not, the
         * paths what the child makes. */
        _cleanup_strv_free_ char **planned = NULL;
        ck_assert_int_eq(sandbox_cgroup_run_paths(a, name_a, l.owner, &planned), 0);
        ck_assert_uint_ge(strv_length(planned), 1);
        for (size_t i = 0; planned[i]; i++) {
                _cleanup_free_ char *group = strdup(planned[i]);
                ck_assert_int_lt(access(planned[i], F_OK), 0);
                *strrchr(group, '/') = 0;
                ck_assert_int_eq(access(group, F_OK), 0);
        }
        ck_assert_int_eq(sandbox_cgroup_new_run_cgroups(a, name_a, &l, &pa), 0);
        ck_assert_uint_eq(strv_length(pa), strv_length(planned));
        for (size_t i = 0; pa[i]; i++)
                ck_assert_str_eq(pa[i], planned[i]);
        ck_assert_int_eq(sandbox_cgroup_new_run_cgroups(b, name_b, &l, &pb), 0);
        ck_assert_uint_eq(strv_length(pa), strv_length(pb));

        /* A run moved to another owner: not while no process is in it yet (its child, which makes and enters its
         * cgroups, would enter the old ones after the move), nothing new left; once one is, it goes along. */
        _cleanup_strv_free_ char **moved = NULL, **unmade = NULL;
        SandboxLimits lm = l;
        char name_m[64];
        lm.owner = 4243;
        snprintf(name_m, sizeof(name_m), "run-%d-test-m", (int) getpid());
        ck_assert_int_eq(sandbox_cgroup_move_run_cgroups(a, pa, name_m, &lm, &moved), -ESRCH);
        ck_assert_ptr_null(moved);
        ck_assert_int_eq(sandbox_cgroup_run_paths(a, name_m, lm.owner, &unmade), 0);
        for (size_t i = 0; unmade[i]; i++)
                ck_assert_int_lt(access(unmade[i], F_OK), 0);
        pid_t child = fork();
        ck_assert_int_ge(child, 0);
        if (child == 0) {
                pause();
                _exit(0);
        }
        for (size_t i = 0; pa[i]; i++)
                ck_assert_int_eq(sandbox_cgroup_attach(pa[i], child), 0);
        ck_assert_int_eq(sandbox_cgroup_move_run_cgroups(a, pa, name_m, &lm, &moved), 0);
        for (size_t i = 0; moved[i]; i++) {
                char want[32];
                snprintf(want, sizeof(want), "%d\n", (int) child);
                ck_assert_str_eq(moved[i], unmade[i]);
                ck_file(moved[i], "cgroup.procs", want);
        }
        ck_assert_int_eq(kill(child, SIGKILL), 0);
        ck_assert_int_eq(waitpid(child, NULL, 0), child);
        for (size_t i = 0; moved[i]; i++)
                ck_assert_int_eq(rmdir(moved[i]), 0);
        /* cgroup v1's cpu: a new run cgroup has the kernel's defaults, which the daemon leaves as they are (no quota,
         * a period of 100 ms), and a quota is written alone. */
        for (size_t i = 0; pa[i]; i++) {
                char f[PATH_MAX];
                snprintf(f, sizeof(f), "%s/cpu.cfs_quota_us", pa[i]);
                if (access(f, F_OK) < 0)
                        continue;
                _cleanup_strv_free_ char **pq = NULL;
                char name_q[64];
                SandboxLimits q = l;
                ck_file(pa[i], "cpu.cfs_quota_us", "-1\n");
                ck_file(pa[i], "cpu.cfs_period_us", "100000\n");
                q.cpu_quota = 50;
                snprintf(name_q, sizeof(name_q), "run-%d-test-q", (int) getpid());
                ck_assert_int_eq(sandbox_cgroup_new_run_cgroups(a, name_q, &q, &pq), 0);
                for (size_t j = 0; pq[j]; j++) {
                        snprintf(f, sizeof(f), "%s/cpu.cfs_quota_us", pq[j]);
                        if (access(f, F_OK) >= 0) {
                                ck_file(pq[j], "cpu.cfs_quota_us", "50000\n");
                                ck_file(pq[j], "cpu.cfs_period_us", "100000\n");
                        }
                }
                for (size_t j = 0; pq[j]; j++)
                        ck_assert_int_eq(rmdir(pq[j]), 0);
        }
        for (size_t i = 0; pa[i]; i++) {
                ck_assert_int_eq(access(pa[i], F_OK), 0);
                ck_assert_int_eq(access(pb[i], F_OK), 0);
                ck_assert_msg(strstr(pa[i], "/uid-4242/"), "%s", pa[i]);
        }
        if (sandbox_cgroup_mode(a) == SANDBOX_CGROUP_V2_DELEGATED)
                return;   /* one delegated subtree: no directory of a's own to compare (freed below, with the runs) */

        _cleanup_free_ char *group_a = strdup(pa[0]), *group_b = strdup(pb[0]);
        ck_assert_ptr_nonnull(group_a);
        ck_assert_ptr_nonnull(group_b);
        *strrchr(group_a, '/') = 0;
        *strrchr(group_b, '/') = 0;
        ck_assert_str_ne(group_a, group_b);
        /* The run goes; the group of its owner stays, made once for the runs to come. */
        for (size_t i = 0; pa[i]; i++)
                ck_assert_int_eq(rmdir(pa[i]), 0);
        ck_assert_int_eq(access(group_a, F_OK), 0);
        ck_assert_int_eq(access(group_b, F_OK), 0);
        /* The next run of the owner finds it there. */
        _cleanup_strv_free_ char **pa2 = NULL;
        ck_assert_int_eq(sandbox_cgroup_new_run_cgroups(a, name_a, &l, &pa2), 0);
        ck_assert_msg(startswith(pa2[0], group_a), "%s", pa2[0]);
        for (size_t i = 0; pa2[i]; i++)
                ck_assert_int_eq(rmdir(pa2[i]), 0);
        /* a freed: what it created goes; b's stays. */
        *strrchr(group_a, '/') = 0;
        ck_assert_int_eq(access(group_a, F_OK), 0);
        a = sandbox_cgroups_free(a);
        ck_assert_int_lt(access(group_a, F_OK), 0);
        for (size_t i = 0; pb[i]; i++)
                ck_assert_int_eq(access(pb[i], F_OK), 0);
        for (size_t i = 0; pb[i]; i++)
                ck_assert_int_eq(rmdir(pb[i]), 0);
        ck_assert_int_eq(access(group_b, F_OK), 0);
        b = sandbox_cgroups_free(b);
        ck_assert_int_lt(access(group_b, F_OK), 0);
}
END_TEST

/* What the CPU weights that follow use read and write (scheduler/cpu-share.h). */
START_TEST(test_cgroup_usage_and_weight) {
        static const struct {
                const char *usage_file, *usage_text;
                uint64_t usage_usec;
                const char *weight_file;
                unsigned weight;
                const char *written;
        } cases[] = {
                /* v1: cpuacct.usage in ns; cpu.shares out of 1024. */
                { "cpuacct.usage", "123456789\n", 123456, "cpu.shares", 3, "30" },
                /* v2: cpu.stat's usage_usec line, not one that ends in it; cpu.weight, at least 1. */
                { "cpu.stat", "xusage_usec 1\nusage_usec 4242\nuser_usec 4000\n", 4242, "cpu.weight", 0, "1" },
        };
        char *d = tmpdir_new();
        uint64_t u = 0;

        /* Neither file: an error, nothing made up; no weight file: nothing to write. */
        ck_assert_int_lt(sandbox_cgroup_cpu_usage(d, &u), 0);
        ck_assert_int_eq(sandbox_cgroup_set_weight(d, 3), 0);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                put(d, cases[i].usage_file, cases[i].usage_text);
                ck_assert_int_eq(sandbox_cgroup_cpu_usage(d, &u), 0);
                ck_assert_uint_eq(u, cases[i].usage_usec);
                put(d, cases[i].weight_file, "");
                ck_assert_int_eq(sandbox_cgroup_set_weight(d, cases[i].weight), 0);
                ck_file(d, cases[i].weight_file, cases[i].written);
        }
        rm_rf(d);
}
END_TEST

static Suite *sandbox_suite(void) {
        Suite *s = suite_create("sandbox");
        TCase *tc = tcase_create("argv");

        tcase_add_test(tc, test_argv_isolation);
        tcase_add_test(tc, test_argv_filesystem);
        tcase_add_test(tc, test_argv_proc);
        tcase_add_test(tc, test_argv_seccomp_and_command);
        tcase_add_test(tc, test_argv_network);
        tcase_add_test(tc, test_argv_data_dirs);
        tcase_add_test(tc, test_args_fd);
        tcase_add_test(tc, test_argv_bad_env);
        tcase_add_test(tc, test_write_etc);
        tcase_add_test(tc, test_run_env_whole_or_none);
        suite_add_tcase(s, tc);

        tc = tcase_create("seccomp");
        tcase_add_test(tc, test_seccomp_export);
        tcase_add_test(tc, test_seccomp_program);
        tcase_add_test(tc, test_seccomp_filter_works);
        tcase_add_test(tc, test_seccomp_socket_families);
        suite_add_tcase(s, tc);

        tc = tcase_create("limits");
        tcase_add_test(tc, test_limits_from_config);
        tcase_add_test(tc, test_limits_lower_only);
        tcase_add_test(tc, test_limits_rlimits);
        tcase_add_test(tc, test_limit_hit);
        tcase_add_test(tc, test_service_need);
        suite_add_tcase(s, tc);

        tc = tcase_create("cgroup");
        tcase_add_test(tc, test_cgroup_find);
        tcase_add_test(tc, test_cgroup_prepare);
        tcase_add_test(tc, test_cgroup_new_run);
        tcase_add_test(tc, test_cgroup_cpu_quota);
        tcase_add_test(tc, test_cgroup_events_and_stale);
        tcase_add_test(tc, test_cgroup_v2_create);
        tcase_add_test(tc, test_cgroup_mount);
        tcase_add_test(tc, test_cgroup_v1_find_and_create);
        tcase_add_test(tc, test_cgroup_service_limits);
        tcase_add_test(tc, test_cgroup_v1_new_run);
        tcase_add_test(tc, test_cgroup_v1_events);
        tcase_add_test(tc, test_cgroup_groups);
        tcase_add_test(tc, test_cgroup_usage_and_weight);
        tcase_add_test(tc, test_cgroups_object);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(sandbox_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
