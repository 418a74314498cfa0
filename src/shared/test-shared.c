/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buf.h"
#include "fs-util.h"
#include "macro.h"
#include "nss-child.h"
#include "strv.h"
#include "utf8.h"

/* ---- buf --------------------------------------------------------------- */

START_TEST(test_buf_empty) {
        Buf b = BUF_INIT;

        ck_assert_uint_eq(buf_size(&b), 0);
        ck_assert_str_eq(buf_data(&b), "");
        buf_consume(&b, 10);
        ck_assert_uint_eq(buf_size(&b), 0);
        ck_assert_int_eq(buf_append(&b, "x", 0), 0);
        ck_assert_ptr_null(b.data);
        ck_assert_int_eq(buf_flush_fd(&b, -EBADF), 0);     /* nothing to write: the fd is not touched */
        buf_clear(&b);
        buf_clear(&b);
}
END_TEST

START_TEST(test_buf_append_consume) {
        Buf b = BUF_INIT;

        ck_assert_int_eq(buf_append(&b, "hello ", 6), 0);
        ck_assert_int_eq(buf_append(&b, "world", 5), 0);
        ck_assert_uint_eq(buf_size(&b), 11);
        ck_assert_mem_eq(buf_data(&b), "hello world", 11);

        buf_consume(&b, 6);
        ck_assert_uint_eq(buf_size(&b), 5);
        ck_assert_mem_eq(buf_data(&b), "world", 5);

        /* Consuming more than there is empties the queue. */
        buf_consume(&b, 100);
        ck_assert_uint_eq(buf_size(&b), 0);

        ck_assert_int_eq(buf_append(&b, "again", 5), 0);
        ck_assert_mem_eq(buf_data(&b), "again", 5);
        buf_clear(&b);
        ck_assert_ptr_null(b.data);
        ck_assert_uint_eq(buf_size(&b), 0);
}
END_TEST

START_TEST(test_buf_reserve_commit) {
        Buf b = BUF_INIT;
        char *p;

        ck_assert_int_eq(buf_reserve(&b, 100, &p), 0);
        ck_assert_uint_ge(b.allocated - b.end, 100);
        memcpy(p, "abc", 3);
        buf_commit(&b, 3);
        ck_assert_uint_eq(buf_size(&b), 3);

        /* Reserving without committing adds nothing. */
        ck_assert_int_eq(buf_reserve(&b, 10, &p), 0);
        ck_assert_ptr_eq(p, b.data + b.end);
        ck_assert_uint_eq(buf_size(&b), 3);
        ck_assert_mem_eq(buf_data(&b), "abc", 3);

        /* Large reservations grow the buffer. */
        ck_assert_int_eq(buf_reserve(&b, 1 << 20, &p), 0);
        ck_assert_uint_ge(b.allocated - b.end, (size_t) 1 << 20);
        memset(p, 'x', 1 << 20);
        buf_commit(&b, 1 << 20);
        ck_assert_uint_eq(buf_size(&b), 3 + (1 << 20));
        ck_assert_mem_eq(buf_data(&b), "abcxxx", 6);
        buf_clear(&b);
}
END_TEST

START_TEST(test_buf_reserve_impossible) {
        Buf b = BUF_INIT;
        char *p = NULL;

        /* Sizes no allocation can satisfy fail cleanly, without looping or wrapping. */
        ck_assert_int_eq(buf_reserve(&b, SIZE_MAX - 10, &p), -ENOMEM);
        ck_assert_int_eq(buf_reserve(&b, SIZE_MAX / 2 + 2, &p), -ENOMEM);
        ck_assert_int_eq(buf_append(&b, "abc", 3), 0);
        ck_assert_int_eq(buf_reserve(&b, SIZE_MAX, &p), -ENOMEM);
        ck_assert_int_eq(buf_reserve(&b, SIZE_MAX - 2, &p), -ENOMEM);
        ck_assert_uint_eq(buf_size(&b), 3);
        ck_assert_mem_eq(buf_data(&b), "abc", 3);
        buf_clear(&b);
}
END_TEST

START_TEST(test_buf_compacts) {
        Buf b = BUF_INIT;
        char chunk[1000];
        size_t allocated;

        /* A steady stream through the queue reuses the same memory. */
        memset(chunk, 'c', sizeof(chunk));
        ck_assert_int_eq(buf_append(&b, chunk, sizeof(chunk)), 0);
        allocated = b.allocated;
        for (unsigned i = 0; i < 10000; i++) {
                ck_assert_int_eq(buf_append(&b, chunk, sizeof(chunk)), 0);
                buf_consume(&b, sizeof(chunk));
                ck_assert_uint_eq(buf_size(&b), sizeof(chunk));
        }
        ck_assert_uint_le(b.allocated, 2 * allocated);

        /* Partly drained: the rest moves to the front before growing. */
        buf_consume(&b, 600);
        char *p;
        size_t before = b.allocated;
        ck_assert_int_eq(buf_reserve(&b, b.allocated - 400, &p), 0);
        ck_assert_uint_eq(b.allocated, before);
        ck_assert_uint_eq(b.start, 0);
        ck_assert_uint_eq(buf_size(&b), 400);
        ck_assert_mem_eq(buf_data(&b), chunk, 400);
        buf_clear(&b);
}
END_TEST

START_TEST(test_buf_consume_keeps_memory) {
        Buf b = BUF_INIT;
        const char *line;

        /* Consumed bytes stay readable until the next reserve (framing relies on it). */
        ck_assert_int_eq(buf_append(&b, "line\nrest", 9), 0);
        line = buf_data(&b);
        buf_consume(&b, 5);
        ck_assert_mem_eq(line, "line\n", 5);
        ck_assert_mem_eq(buf_data(&b), "rest", 4);
        buf_clear(&b);
}
END_TEST

START_TEST(test_buf_trim) {
        _cleanup_close_ int r = -EBADF, w = -EBADF;
        int fds[2];
        Buf b = BUF_INIT;
        char *p, sink[4096] = {};

        ck_assert_int_eq(pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
        r = fds[0];
        w = fds[1];

        /* A flush that empties a small buffer keeps it. */
        ck_assert_int_eq(buf_append(&b, "x", 1), 0);
        ck_assert_int_eq(buf_flush_fd(&b, w), 1);
        ck_assert_ptr_nonnull(b.data);
        ck_assert_int_eq(read(r, sink, sizeof(sink)), 1);

        /* A large one is not given back while it holds data (the pipe is full) ... */
        while (write(w, sink, sizeof(sink)) > 0)
                ;
        ck_assert_int_eq(errno, EAGAIN);
        ck_assert_int_eq(buf_reserve(&b, 1 << 20, &p), 0);
        memset(p, 'q', 10);
        buf_commit(&b, 10);
        ck_assert_int_eq(buf_flush_fd(&b, w), 0);
        ck_assert_uint_eq(buf_size(&b), 10);
        ck_assert_ptr_nonnull(b.data);

        /* ... and is once a flush empties it. */
        while (read(r, sink, sizeof(sink)) > 0)
                ;
        ck_assert_int_eq(buf_flush_fd(&b, w), 10);
        ck_assert_ptr_null(b.data);
        ck_assert_uint_eq(b.allocated, 0);
        buf_clear(&b);
}
END_TEST

START_TEST(test_buf_flush_socket) {
        _cleanup_close_ int a = -EBADF, z = -EBADF;
        int fds[2];
        Buf b = BUF_INIT;
        char got[64];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
        a = fds[0];
        z = fds[1];

        ck_assert_int_eq(buf_append(&b, "hello\n", 6), 0);
        ck_assert_int_eq(buf_flush_fd(&b, a), 6);
        ck_assert_uint_eq(buf_size(&b), 0);
        ck_assert_int_eq(read(z, got, sizeof(got)), 6);
        ck_assert_mem_eq(got, "hello\n", 6);

        /* Nothing to write. */
        ck_assert_int_eq(buf_flush_fd(&b, a), 0);

        /* A full socket: what fits is written, the rest waits, no blocking. */
        size_t total = 4 << 20;
        char *big = malloc(total);
        ck_assert_ptr_nonnull(big);
        memset(big, 'b', total);
        ck_assert_int_eq(buf_append(&b, big, total), 0);
        ssize_t n = buf_flush_fd(&b, a);
        ck_assert_int_gt(n, 0);
        ck_assert_uint_lt((size_t) n, total);
        ck_assert_uint_eq(buf_size(&b), total - (size_t) n);
        ck_assert_int_eq(buf_flush_fd(&b, a), 0);
        free(big);

        /* The peer is gone: an error, and no SIGPIPE. */
        z = safe_close(z);
        ck_assert_int_eq(buf_flush_fd(&b, a), -EPIPE);
        buf_clear(&b);
}
END_TEST

START_TEST(test_buf_flush_pipe) {
        _cleanup_close_ int r = -EBADF, w = -EBADF;
        int fds[2];
        Buf b = BUF_INIT;
        char got[64];

        /* Not a socket (stdout of --stdio): falls back to write(). */
        ck_assert_int_eq(pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
        r = fds[0];
        w = fds[1];
        ck_assert_int_eq(buf_append(&b, "{\"a\":1}\n", 8), 0);
        ck_assert_int_eq(buf_flush_fd(&b, w), 8);
        ck_assert_int_eq(read(r, got, sizeof(got)), 8);
        ck_assert_mem_eq(got, "{\"a\":1}\n", 8);

        /* A full non-blocking pipe leaves the rest queued. */
        size_t total = 1 << 20;
        char *big = malloc(total);
        ck_assert_ptr_nonnull(big);
        memset(big, 'p', total);
        ck_assert_int_eq(buf_append(&b, big, total), 0);
        ssize_t n = buf_flush_fd(&b, w);
        ck_assert_int_gt(n, 0);
        ck_assert_uint_eq(buf_size(&b), total - (size_t) n);
        free(big);

        /* A bad fd is an error. */
        ck_assert_int_eq(buf_flush_fd(&b, -1), -EBADF);
        buf_clear(&b);
}
END_TEST

/* ---- strv -------------------------------------------------------------- */

static void assert_strv(char **l, const char *const *want, size_t n) {
        ck_assert_ptr_nonnull(l);
        ck_assert_uint_eq(strv_length(l), n);
        for (size_t i = 0; i < n; i++)
                ck_assert_str_eq(l[i], want[i]);
        ck_assert_ptr_null(l[n]);
}

START_TEST(test_strv_new_free) {
        char **l = strv_new();

        ck_assert_ptr_nonnull(l);
        ck_assert_ptr_null(l[0]);
        ck_assert_uint_eq(strv_length(l), 0);
        ck_assert_ptr_null(strv_free(l));
        ck_assert_ptr_null(strv_free(NULL));
        ck_assert_uint_eq(strv_length(NULL), 0);
}
END_TEST

START_TEST(test_strv_extend) {
        _cleanup_strv_free_ char **l = NULL;
        static const char *const want[] = { "a", "", "b c", "n=42" };

        /* Starting from NULL. */
        ck_assert_int_eq(strv_extend(&l, "a"), 0);
        ck_assert_int_eq(strv_extend(&l, ""), 0);
        ck_assert_int_eq(strv_extend(&l, "b c"), 0);
        ck_assert_int_eq(strv_extendf(&l, "n=%d", 42), 0);
        assert_strv(l, want, ELEMENTSOF(want));
}
END_TEST

START_TEST(test_strv_extend_copies) {
        _cleanup_strv_free_ char **l = strv_new();
        char value[] = "mutable";

        ck_assert_int_eq(strv_extend(&l, value), 0);
        value[0] = 'X';
        ck_assert_str_eq(l[0], "mutable");
}
END_TEST

START_TEST(test_strv_extend_strv) {
        _cleanup_strv_free_ char **a = NULL, **b = NULL;
        static const char *const want[] = { "1", "2", "3", "4" };

        ck_assert_int_eq(strv_extend(&a, "1"), 0);
        ck_assert_int_eq(strv_extend(&a, "2"), 0);
        ck_assert_int_eq(strv_extend(&b, "3"), 0);
        ck_assert_int_eq(strv_extend(&b, "4"), 0);
        ck_assert_int_eq(strv_extend_strv(&a, b), 0);
        assert_strv(a, want, 4);
        ck_assert_uint_eq(strv_length(b), 2);

        ck_assert_int_eq(strv_extend_strv(&a, NULL), 0);
        assert_strv(a, want, 4);

        _cleanup_strv_free_ char **empty = strv_new();
        ck_assert_int_eq(strv_extend_strv(&a, empty), 0);
        assert_strv(a, want, 4);
}
END_TEST

START_TEST(test_strv_split) {
        static const struct {
                const char *in, *sep;
                const char *out[5];
                size_t n;
        } cases[] = {
                { "a b c", " ", { "a", "b", "c" }, 3 },
                { "  a   b  ", " ", { "a", "b" }, 2 },
                { "a:b,c d\te", " \t:,", { "a", "b", "c", "d", "e" }, 5 },
                { "::a::", ":", { "a" }, 1 },
                { "", " ", {}, 0 },
                { "   ", " ", {}, 0 },
                { "single", " ", { "single" }, 1 },
                { "x", "", { "x" }, 1 },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_strv_free_ char **l = strv_split(cases[i].in, cases[i].sep);
                assert_strv(l, cases[i].out, cases[i].n);
        }

        _cleanup_strv_free_ char **l = strv_split(NULL, " ");
        ck_assert_ptr_nonnull(l);
        ck_assert_uint_eq(strv_length(l), 0);
}
END_TEST

START_TEST(test_strv_contains) {
        _cleanup_strv_free_ char **l = strv_split("3.12 3.13", " ");

        ck_assert(strv_contains(l, "3.12"));
        ck_assert(strv_contains(l, "3.13"));
        ck_assert(!strv_contains(l, "3.1"));
        ck_assert(!strv_contains(l, ""));
        ck_assert(!strv_contains(NULL, "x"));
}
END_TEST

START_TEST(test_strv_join) {
        _cleanup_strv_free_ char **l = strv_split("a b c", " ");
        _cleanup_strv_free_ char **one = strv_split("only", " ");
        _cleanup_strv_free_ char **empty = strv_new();
        _cleanup_free_ char *j1 = strv_join(l, ", "), *j2 = strv_join(one, ", "), *j3 = strv_join(empty, ", "),
                            *j4 = strv_join(NULL, ","), *j5 = strv_join(l, "");

        ck_assert_str_eq(j1, "a, b, c");
        ck_assert_str_eq(j2, "only");
        ck_assert_str_eq(j3, "");
        ck_assert_str_eq(j4, "");
        ck_assert_str_eq(j5, "abc");

        /* Empty elements keep their separators. */
        _cleanup_strv_free_ char **e = NULL;
        ck_assert_int_eq(strv_extend(&e, ""), 0);
        ck_assert_int_eq(strv_extend(&e, "x"), 0);
        ck_assert_int_eq(strv_extend(&e, ""), 0);
        _cleanup_free_ char *j6 = strv_join(e, "|");
        ck_assert_str_eq(j6, "|x|");
}
END_TEST

START_TEST(test_strv_many) {
        _cleanup_strv_free_ char **l = NULL;

        for (unsigned i = 0; i < 5000; i++)
                ck_assert_int_eq(strv_extendf(&l, "item-%u", i), 0);
        ck_assert_uint_eq(strv_length(l), 5000);
        ck_assert_str_eq(l[0], "item-0");
        ck_assert_str_eq(l[4999], "item-4999");
        ck_assert(strv_contains(l, "item-2500"));
}
END_TEST

/* ---- fs-util ------------------------------------------------------------- */

static void write_file(const char *dir, const char *name) {
        char p[PATH_MAX];
        FILE *f;

        snprintf(p, sizeof(p), "%s/%s", dir, name);
        f = fopen(p, "we");
        ck_assert_ptr_nonnull(f);
        fputs("x", f);
        fclose(f);
}

START_TEST(test_rm_rf_untrusted) {
        char top[] = "/tmp/test-shared-rm-XXXXXX", outside[] = "/tmp/test-shared-keep-XXXXXX";
        char p[512], q[1024];

        ck_assert_ptr_nonnull(mkdtemp(top));
        ck_assert_ptr_nonnull(mkdtemp(outside));
        write_file(outside, "precious");

        /* Files, a read-only file, symlinks to a directory and a file outside, a locked directory. */
        write_file(top, "a");
        write_file(top, "ro");
        snprintf(p, sizeof(p), "%s/ro", top);
        ck_assert_int_eq(chmod(p, 0444), 0);
        snprintf(p, sizeof(p), "%s/link-dir", top);
        ck_assert_int_eq(symlink(outside, p), 0);
        snprintf(p, sizeof(p), "%s/link-file", top);
        snprintf(q, sizeof(q), "%s/precious", outside);
        ck_assert_int_eq(symlink(q, p), 0);
        snprintf(p, sizeof(p), "%s/sub", top);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        write_file(p, "b");
        snprintf(q, sizeof(q), "%s/deeper", p);
        ck_assert_int_eq(mkdir(q, 0755), 0);
        write_file(q, "c");
        ck_assert_int_eq(chmod(q, 0), 0);
        ck_assert_int_eq(chmod(p, 0500), 0);

        ck_assert_int_eq(rm_rf_untrusted(top), 0);
        ck_assert_int_eq(access(top, F_OK), -1);
        ck_assert_int_eq(errno, ENOENT);
        /* Nothing behind the symlinks was touched. */
        snprintf(q, sizeof(q), "%s/precious", outside);
        ck_assert_int_eq(access(q, F_OK), 0);

        /* Gone already, or never a directory: fine. */
        ck_assert_int_eq(rm_rf_untrusted(top), 0);
        snprintf(p, sizeof(p), "%s/link", outside);
        ck_assert_int_eq(symlink(outside, p), 0);
        ck_assert_int_eq(rm_rf_untrusted(p), 0);
        ck_assert_int_eq(access(q, F_OK), 0);

        ck_assert_int_eq(unlink(q), 0);
        ck_assert_int_eq(rmdir(outside), 0);
}
END_TEST

/* A tree whose owner locked every directory, the top included (chmod 0): as that owner, without privileges. */
static int rm_locked_tree(void) {
        char top[] = "/tmp/test-shared-locked-XXXXXX", p[512];

        if (!mkdtemp(top))
                return 10;
        snprintf(p, sizeof(p), "%s/sub", top);
        if (mkdir(p, 0700) < 0)
                return 11;
        write_file(p, "f");
        if (chmod(p, 0) < 0 || chmod(top, 0) < 0)
                return 12;
        if (access(p, F_OK) == 0)    /* we cannot even look: the locks hold for us */
                return 13;
        if (rm_rf_untrusted(top) != 0)
                return 14;
        return access(top, F_OK) < 0 && errno == ENOENT ? 0 : 15;
}

START_TEST(test_rm_rf_untrusted_locked_top) {
        pid_t pid;
        int status;

        if (geteuid() != 0) {
                ck_assert_int_eq(rm_locked_tree(), 0);
                return;
        }
        /* Root may read a locked directory: test as nobody, where the locks bind. */
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
                        _exit(2);
                _exit(rm_locked_tree());
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status));
        ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

START_TEST(test_rm_rf_untrusted_depth) {
        char top[] = "/tmp/test-shared-deep-XXXXXX";
        int fd;

        ck_assert_ptr_nonnull(mkdtemp(top));
        fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        /* Deeper than it keeps directories open for, several times over. */
        for (unsigned i = 0; i < 3 * RM_RF_MAX_DEPTH + 10; i++) {
                int next;
                ck_assert_int_eq(mkdirat(fd, "d", 0755), 0);
                next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                ck_assert_int_ge(next, 0);
                close(fd);
                fd = next;
        }
        close(openat(fd, "bottom", O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
        close(fd);

        ck_assert_int_eq(rm_rf_untrusted(top), 0);
        ck_assert_int_eq(access(top, F_OK), -1);
}
END_TEST

/* ---- utf8 ------------------------------------------------------------ */

static void check_escape_n(const char *in, size_t n, const char *want) {
        char *got = utf8_escape_line(in, n);

        ck_assert_ptr_nonnull(got);
        ck_assert_str_eq(got, want);
        free(got);
}
#define check_escape(in, want) check_escape_n((in), sizeof(in) - 1, (want))

/* A pipe holding n bytes (a pattern), its write end closed: read_full_fd() gets them in more than one read. */
static int pipe_with(size_t n) {
        int fds[2];

        ck_assert_int_ge(pipe2(fds, O_CLOEXEC), 0);
        for (size_t i = 0; i < n; i++) {
                char c = (char) ('a' + i % 26);
                ck_assert_int_eq(write(fds[1], &c, 1), 1);
        }
        close(fds[1]);
        return fds[0];
}

START_TEST(test_read_full_fd) {
        _cleanup_close_ int fd = pipe_with(10000);
        _cleanup_free_ char *s = NULL;
        size_t n = 0;

        /* Past the first 4 KiB: it grows, and the NUL follows the last byte. */
        ck_assert_int_eq(read_full_fd(fd, 1 << 20, &s, &n), 0);
        ck_assert_uint_eq(n, 10000);
        ck_assert_uint_eq(strlen(s), 10000);
        for (size_t i = 0; i < n; i++)
                ck_assert_int_eq(s[i], 'a' + i % 26);
}
END_TEST

START_TEST(test_read_full_fd_bound) {
        _cleanup_close_ int fd = pipe_with(10000);
        _cleanup_free_ char *a = NULL, *b = NULL, *c = NULL;
        size_t n = 0;

        /* At the bound it stops, and what follows is still there to read. */
        ck_assert_int_eq(read_full_fd(fd, 6000, &a, &n), 0);
        ck_assert_uint_eq(n, 6000);
        ck_assert_uint_eq(strlen(a), 6000);
        ck_assert_int_eq(read_full_fd(fd, SIZE_MAX, &b, &n), 0);
        ck_assert_uint_eq(n, 4000);
        ck_assert_int_eq(b[0], 'a' + 6000 % 26);
        /* At the end: an empty string. */
        ck_assert_int_eq(read_full_fd(fd, 10, &c, NULL), 0);
        ck_assert_str_eq(c, "");
}
END_TEST

START_TEST(test_read_full_fd_zero) {
        _cleanup_close_ int fd = pipe_with(3);
        _cleanup_free_ char *a = NULL, *b = NULL;
        size_t n = 1;

        ck_assert_int_eq(read_full_fd(fd, 0, &a, &n), 0);
        ck_assert_uint_eq(n, 0);
        ck_assert_str_eq(a, "");
        ck_assert_int_eq(read_full_fd(fd, 3, &b, &n), 0);
        ck_assert_str_eq(b, "abc");
        ck_assert_int_eq(read_full_fd(-EBADF, 3, &b, &n), -EBADF);
}
END_TEST

START_TEST(test_read_small_file) {
        char path[] = "/tmp/test-shared-XXXXXX";
        _cleanup_close_ int fd = mkstemp(path);
        _cleanup_free_ char *whole = NULL, *cut = NULL, *none = NULL;
        char data[9000];

        ck_assert_int_ge(fd, 0);
        for (size_t i = 0; i < sizeof(data); i++)
                data[i] = (char) ('0' + i % 10);
        ck_assert_int_eq(write(fd, data, sizeof(data)), (ssize_t) sizeof(data));
        ck_assert_int_eq(read_small_file(path, 16384, &whole), 0);
        ck_assert_uint_eq(strlen(whole), sizeof(data));
        ck_assert_int_eq(memcmp(whole, data, sizeof(data)), 0);
        ck_assert_int_eq(read_small_file(path, 10, &cut), 0);
        ck_assert_str_eq(cut, "0123456789");
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(read_small_file(path, 10, &none), -ENOENT);
        ck_assert_ptr_null(none);
}
END_TEST

/* utf8_is_valid() as it was, a byte at a time: what its word-at-a-time path must agree with. */
static bool utf8_is_valid_bytewise(const char *s, size_t n) {
        for (size_t i = 0; i < n;) {
                size_t l = utf8_decode(s + i, n - i, &(uint32_t) { 0 });
                if (l == 0)
                        return false;
                i += l;
        }
        return true;
}

START_TEST(test_utf8_valid_words) {
        /* Sequences good and bad (overlong, surrogates, past U+10FFFF, cut short, a lone continuation byte),
         * put after 0 to 40 ASCII bytes and followed by 0 to 20 more, so that they start and end at every place
         * in a word, and run past its end. */
        static const char *const seqs[] = {
                "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf",     /* good */
                "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xf0\x80\x80\xaf",             /* overlong */
                "\xed\xa0\x80", "\xed\xbf\xbf",                                         /* surrogates */
                "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xfe",                 /* past the end */
                "\xc3", "\xe2\x82", "\xf0\x9f\x98", "\x80", "\xbf\xbf",                 /* cut short, alone */
                "\xe2\x28\xa1", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
        };
        char text[128];

        for (size_t k = 0; k < ELEMENTSOF(seqs); k++)
                for (size_t pre = 0; pre <= 40; pre++)
                        for (size_t post = 0; post <= 20; post++) {
                                size_t l = strlen(seqs[k]), n = pre + l + post;

                                memset(text, 'a', sizeof(text));
                                memcpy(text + pre, seqs[k], l);
                                ck_assert_int_eq(utf8_is_valid(text, n), utf8_is_valid_bytewise(text, n));
                                /* Cut off inside the sequence too. */
                                for (size_t cut = pre; cut < pre + l; cut++)
                                        ck_assert_int_eq(utf8_is_valid(text, cut), utf8_is_valid_bytewise(text, cut));
                        }

        /* Random text, mostly ASCII with some of everything. */
        srand(17);
        for (int round = 0; round < 2000; round++) {
                size_t n = (size_t) rand() % sizeof(text);
                for (size_t i = 0; i < n; i++)
                        text[i] = rand() % 8 ? (char) (rand() % 0x80) : (char) (rand() % 0x100);
                ck_assert_int_eq(utf8_is_valid(text, n), utf8_is_valid_bytewise(text, n));
        }
        /* A long ASCII run and the one bad byte at its end, or at its start. */
        char *big = malloc(100000);
        ck_assert_ptr_nonnull(big);
        memset(big, 'x', 100000);
        ck_assert(utf8_is_valid(big, 100000));
        big[99999] = (char) 0xc3;
        ck_assert(!utf8_is_valid(big, 100000));
        big[99999] = 'x';
        big[0] = (char) 0x80;
        ck_assert(!utf8_is_valid(big, 100000));
        free(big);
}
END_TEST

START_TEST(test_escape_line) {
        check_escape("", "");
        check_escape("plain text, caf\xc3\xa9 \xe2\x82\xac", "plain text, caf\xc3\xa9 \xe2\x82\xac");
        /* A leading '<' could be a priority prefix; later ones are harmless. */
        check_escape("<0>forged <3>", "\\x3c0>forged <3>");
        check_escape("a\nb\rc\td\x1b[31m\x7f", "a\\x0ab\\x0dc\\x09d\\x1b[31m\\x7f");
        check_escape("a\0b", "a\\x00b");
        /* The escape character itself, so an escape in the text cannot pass for one of ours. */
        check_escape("\\x41", "\\x5cx41");
        /* C1 controls (CSI is U+009B), broken and overlong sequences, a character cut at the end. */
        check_escape("\xc2\x9b" "2J \xc2\xa0", "\\xc2\\x9b" "2J \xc2\xa0");
        check_escape("\xff\xfe\xc0\xaf", "\\xff\\xfe\\xc0\\xaf");
        check_escape("ok \xe2\x82", "ok \\xe2\\x82");
        /* An invalid lead byte does not swallow the valid character after it. */
        check_escape("\xe2\xc3\xa9", "\\xe2\xc3\xa9");
}
END_TEST

START_TEST(test_escape_line_all_bytes) {
        char in[256], *out;

        for (int i = 0; i < 256; i++)
                in[i] = (char) i;
        out = utf8_escape_line(in, sizeof(in));
        ck_assert_ptr_nonnull(out);
        ck_assert_uint_le(strlen(out), 4 * sizeof(in));
        for (const unsigned char *p = (const unsigned char *) out; *p; p++)
                ck_assert(*p >= 0x20 && *p < 0x7f);
        free(out);
}
END_TEST

static int child_says(int fd, void *userdata) {
        const char *what = userdata;

        if (streq(what, "die"))
                abort();   /* (as a lookup that crashes would) */
        if (streq(what, "flood")) {
                /* More than is taken: it is killed, not waited for while it waits on the pipe. */
                static char block[65536];
                memset(block, 'x', sizeof(block));
                for (;;)
                        if (write_all(fd, block, sizeof(block)) < 0)
                                _exit(0);
        }
        if (write_all(fd, what, strlen(what)) < 0)
                return -EIO;
        /* In the child: what it looks up is loaded there, not here. */
        return getpid();
}

/* nss_child_run(): the function runs in another process; its result and what it wrote come back; a child that
 * dies, or writes without end, gives -EIO. */
START_TEST(test_nss_child_run) {
        _cleanup_free_ char *out = NULL, *none = NULL;
        int r;

        r = nss_child_run(child_says, (void *) "u 1\ng 2\n", &out);
        ck_assert_int_gt(r, 0);
        ck_assert_int_ne(r, getpid());
        ck_assert_str_eq(out, "u 1\ng 2\n");
        /* A child each time. */
        int r2 = nss_child_run(child_says, (void *) "", NULL);
        ck_assert_int_gt(r2, 0);
        ck_assert_int_ne(r2, r);
        ck_assert_int_eq(nss_child_run(child_says, (void *) "die", &none), -EIO);
        ck_assert_ptr_null(none);
        ck_assert_int_eq(nss_child_run(child_says, (void *) "flood", &none), -EIO);
        ck_assert_ptr_null(none);
}
END_TEST

static Suite *shared_suite(void) {
        Suite *s = suite_create("shared");
        TCase *tc = tcase_create("buf");

        tcase_add_test(tc, test_buf_empty);
        tcase_add_test(tc, test_buf_append_consume);
        tcase_add_test(tc, test_buf_reserve_commit);
        tcase_add_test(tc, test_buf_reserve_impossible);
        tcase_add_test(tc, test_buf_compacts);
        tcase_add_test(tc, test_buf_consume_keeps_memory);
        tcase_add_test(tc, test_buf_trim);
        tcase_add_test(tc, test_buf_flush_socket);
        tcase_add_test(tc, test_buf_flush_pipe);
        suite_add_tcase(s, tc);

        tc = tcase_create("strv");
        tcase_add_test(tc, test_strv_new_free);
        tcase_add_test(tc, test_strv_extend);
        tcase_add_test(tc, test_strv_extend_copies);
        tcase_add_test(tc, test_strv_extend_strv);
        tcase_add_test(tc, test_strv_split);
        tcase_add_test(tc, test_strv_contains);
        tcase_add_test(tc, test_strv_join);
        tcase_add_test(tc, test_strv_many);
        suite_add_tcase(s, tc);

        tc = tcase_create("fs-util");
        tcase_add_test(tc, test_rm_rf_untrusted);
        tcase_add_test(tc, test_rm_rf_untrusted_depth);
        tcase_add_test(tc, test_read_full_fd);
        tcase_add_test(tc, test_read_full_fd_bound);
        tcase_add_test(tc, test_read_full_fd_zero);
        tcase_add_test(tc, test_read_small_file);
        tcase_add_test(tc, test_rm_rf_untrusted_locked_top);
        tcase_add_test(tc, test_nss_child_run);
        suite_add_tcase(s, tc);

        tc = tcase_create("utf8");
        tcase_add_test(tc, test_escape_line);
        tcase_add_test(tc, test_utf8_valid_words);
        tcase_add_test(tc, test_escape_line_all_bytes);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(shared_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
