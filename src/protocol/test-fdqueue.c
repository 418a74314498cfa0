/* SPDX-License-Identifier: MIT */
/* The fd-passing extension's two parsers: which line the daemon gives the fds that came (protocol/fdqueue.c), and
 * the shim's rewrite of a tools/call with "files" (shim/files.c). */
#include <check.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macro.h"
#include "protocol/fdqueue.h"
#include "shim/files.h"

static int fd_open(void) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        return fd;
}

static bool fd_is_open(int fd) {
        return fcntl(fd, F_GETFD) >= 0;
}

START_TEST(test_take_at_line_start) {
        FdQueue q = {};
        int a[2] = { fd_open(), fd_open() }, b[1] = { fd_open() }, got[FDQUEUE_MAX_FDS];

        ck_assert_int_eq(fdqueue_push(&q, 120, a, 2), 0);
        ck_assert_int_eq(fdqueue_push(&q, 250, b, 1), 0);
        ck_assert_uint_eq(fdqueue_n_fds(&q), 3);
        /* A line before them gets none, and they stay. */
        ck_assert_uint_eq(fdqueue_take(&q, 0, 100, got), 0);
        ck_assert_uint_eq(fdqueue_n_fds(&q), 3);
        /* The line [100, 200) gets the two filed at its byte 120. */
        ck_assert_uint_eq(fdqueue_take(&q, 100, 200, got), 2);
        ck_assert_int_eq(got[0], a[0]);
        ck_assert_int_eq(got[1], a[1]);
        ck_assert(fd_is_open(a[0]) && fd_is_open(a[1]));
        close(a[0]);
        close(a[1]);
        /* A line at 300: the batch at 250 came with a line that was not taken (an oversized one): closed. */
        ck_assert_uint_eq(fdqueue_take(&q, 300, 400, got), 0);
        ck_assert(!fd_is_open(b[0]));
        ck_assert_uint_eq(fdqueue_n_fds(&q), 0);
        fdqueue_done(&q);
}
END_TEST

START_TEST(test_limits) {
        FdQueue q = {};
        int many[FDQUEUE_MAX_FDS], one[1], got[FDQUEUE_MAX_FDS];

        for (size_t i = 0; i < ELEMENTSOF(many); i++)
                many[i] = fd_open();
        ck_assert_int_eq(fdqueue_push(&q, 0, many, FDQUEUE_MAX_FDS), 0);
        /* One more than may wait: refused and closed. */
        one[0] = fd_open();
        ck_assert_int_eq(fdqueue_push(&q, 10, one, 1), -EMFILE);
        ck_assert(!fd_is_open(one[0]));
        /* Going backwards is refused too. */
        fdqueue_done(&q);
        for (size_t i = 0; i < ELEMENTSOF(many); i++)
                ck_assert(!fd_is_open(many[i]));
        one[0] = fd_open();
        ck_assert_int_eq(fdqueue_push(&q, 50, one, 1), 0);
        int two[1] = { fd_open() };
        ck_assert_int_eq(fdqueue_push(&q, 40, two, 1), -EINVAL);
        ck_assert(!fd_is_open(two[0]));
        /* Batches, not only fds, are bounded. */
        for (size_t i = 1; i < FDQUEUE_MAX_BATCHES; i++) {
                int x[1] = { fd_open() };
                ck_assert_int_eq(fdqueue_push(&q, 50 + i, x, 1), 0);
        }
        int y[1] = { fd_open() };
        ck_assert_int_eq(fdqueue_push(&q, 99, y, 1), -EMFILE);
        ck_assert(!fd_is_open(y[0]));
        /* Nothing pushed with no fds. */
        ck_assert_int_eq(fdqueue_push(&q, 1000, NULL, 0), 0);
        /* Several batches within one line: all its own, in order; the line's last byte counts, its end not. */
        ck_assert_uint_eq(fdqueue_take(&q, 50, 52, got), 2);
        close(got[0]);
        close(got[1]);
        ck_assert_uint_eq(fdqueue_n_fds(&q), FDQUEUE_MAX_BATCHES - 2);
        fdqueue_done(&q);
        ck_assert_uint_eq(fdqueue_n_fds(&q), 0);
}
END_TEST

static void send_fds(int sock, const char *data, const int *fds, size_t n) {
        union {
                struct cmsghdr h;
                char space[CMSG_SPACE(sizeof(int) * 64)];
        } control = {};
        struct iovec iov = { .iov_base = (void *) data, .iov_len = strlen(data) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

        if (n > 0) {
                mh.msg_control = &control;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
                control.h.cmsg_level = SOL_SOCKET;
                control.h.cmsg_type = SCM_RIGHTS;
                control.h.cmsg_len = CMSG_LEN(sizeof(int) * n);
                memcpy(CMSG_DATA(&control.h), fds, sizeof(int) * n);
        }
        ck_assert_int_eq(sendmsg(sock, &mh, 0), (ssize_t) strlen(data));
}

START_TEST(test_recv) {
        int sv[2], fds[FDQUEUE_MAX_FDS], got[FDQUEUE_MAX_FDS], x = fd_open();
        char buf[256];
        size_t n;

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        /* A read may join earlier bytes to those sent with fds, but ends with the latter: what fdqueue.h builds
         * on. */
        send_fds(sv[0], "abc\n", NULL, 0);
        send_fds(sv[0], "{\"x\":1}\n", &x, 1);
        send_fds(sv[0], "later\n", NULL, 0);
        ck_assert_int_eq(fdqueue_recv(sv[1], buf, sizeof(buf), got, &n), 12);
        ck_assert_uint_eq(n, 1);
        ck_assert_int_eq(fdqueue_recv(sv[1], buf, sizeof(buf), got + 1, &n), 6);
        ck_assert_uint_eq(n, 0);
        ck_assert_int_ne(got[0], x);
        ck_assert(fcntl(got[0], F_GETFD) & FD_CLOEXEC);
        close(got[0]);
        /* Nothing there. */
        ck_assert_int_eq(fdqueue_recv(sv[1], buf, sizeof(buf), got, &n), -EAGAIN);

        /* More than fit: all closed, -EMFILE. */
        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                fds[i] = x;
        int more[FDQUEUE_MAX_FDS + 1];
        for (size_t i = 0; i < ELEMENTSOF(more); i++)
                more[i] = x;
        send_fds(sv[0], "y", more, ELEMENTSOF(more));
        ck_assert_int_eq(fdqueue_recv(sv[1], buf, sizeof(buf), got, &n), -EMFILE);
        ck_assert_uint_eq(n, 0);
        /* Exactly as many as fit: fine. */
        send_fds(sv[0], "z", fds, ELEMENTSOF(fds));
        ck_assert_int_eq(fdqueue_recv(sv[1], buf, sizeof(buf), got, &n), 1);
        ck_assert_uint_eq(n, FDQUEUE_MAX_FDS);
        for (size_t i = 0; i < n; i++)
                close(got[i]);
        close(x);
        close(sv[0]);
        close(sv[1]);
}
END_TEST

/* ---- the shim's rewrite -------------------------------------------------- */

static char dir[] = "/tmp/test-fdqueue-XXXXXX";

static char *path_in(const char *name) {
        char *p = NULL;
        ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
        return p;
}

static json_object *rewrite(const char *line, int *fds, size_t *n, int expect) {
        char *out = NULL;
        size_t len = 0;
        json_object *o;

        ck_assert_int_eq(shim_files_rewrite(line, strlen(line), &out, &len, fds, n), expect);
        if (expect == 0) {
                ck_assert_ptr_null(out);
                ck_assert_uint_eq(*n, 0);
                return NULL;
        }
        ck_assert_int_eq(out[len - 1], '\n');
        ck_assert_ptr_null(memchr(out, '\n', len - 1));
        o = json_tokener_parse(out);
        ck_assert_ptr_nonnull(o);
        free(out);
        return o;
}

static json_object *entry(json_object *msg, size_t i) {
        json_object *p, *a, *f;
        ck_assert(json_object_object_get_ex(msg, "params", &p));
        ck_assert(json_object_object_get_ex(p, "arguments", &a));
        ck_assert(json_object_object_get_ex(a, "files", &f));
        return json_object_array_get_idx(f, i);
}

static const char *str(json_object *o, const char *k) {
        json_object *v;
        return json_object_object_get_ex(o, k, &v) ? json_object_get_string(v) : NULL;
}

START_TEST(test_rewrite) {
        ck_assert_ptr_nonnull(mkdtemp(dir));
        _cleanup_free_ char *data = path_in("data.csv"), *link = path_in("link"), *sub = path_in("sub"),
                            *line = NULL;
        int fds[SHIM_FILES_MAX];
        size_t n;
        json_object *m, *e;
        FILE *f;

        ck_assert_ptr_nonnull(f = fopen(data, "w"));
        fputs("a,b\n", f);
        fclose(f);
        ck_assert_int_eq(symlink(data, link), 0);
        ck_assert_int_eq(mkdir(sub, 0755), 0);

        /* Lines that are not a tools/call with files go as they are. */
        rewrite("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", fds, &n, 0);
        rewrite("{\"method\":\"tools/list\",\"params\":{\"arguments\":{\"files\":[{\"path\":\"/etc/passwd\"}]}}}",
                fds, &n, 0);
        rewrite("{\"method\":\"tools/call\",\"params\":{\"arguments\":{\"files\":\"x\"}}}", fds, &n, 0);
        rewrite("{\"method\":\"tools/call\",\"params\":{\"arguments\":{\"script\":\"\\\"files\\\"\"}}}", fds, &n, 0);
        rewrite("{\"method\":\"tools/call\",\"params\":{\"arguments\":{\"files\":[{\"path\":", fds, &n, 0);
        rewrite("not json \"files\"", fds, &n, 0);
        rewrite("{\"method\":\"tools/call\",\"params\":{\"arguments\":{\"files\":[{\"as\":\"x\"}]}}}", fds, &n, 0);

        ck_assert_int_ge(asprintf(&line,
                                  "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"x\","
                                  "\"arguments\":{\"files\":[{\"path\":\"%s\",\"as\":\"d.csv\"},{\"path\":\"%s\"},"
                                  "{\"path\":\"%s\"},{\"path\":\"%s\"},{\"path\":\"rel\"},{\"path\":\"%s\"},"
                                  "{\"as\":\"y\",\"fd\":3},{\"path\":7}]}}}",
                                  data, link, sub, "/nonexistent/x", data), 0);
        m = rewrite(line, fds, &n, 1);
        ck_assert_uint_eq(n, 2);
        e = entry(m, 0);
        ck_assert_str_eq(str(e, "as"), "d.csv");
        ck_assert_str_eq(json_object_to_json_string(json_object_object_get(e, "fd")), "0");
        ck_assert_ptr_null(str(e, "path"));
        ck_assert_ptr_null(strstr(json_object_to_json_string(m), dir));   /* no path goes on */
        ck_assert(strstr(str(entry(m, 1), "error"), "symbolic link"));
        ck_assert_str_eq(str(entry(m, 1), "as"), "link");
        ck_assert(strstr(str(entry(m, 2), "error"), "not a regular file"));
        ck_assert(strstr(str(entry(m, 3), "error"), "no such file"));
        ck_assert(strstr(str(entry(m, 4), "error"), "absolute"));
        ck_assert_str_eq(str(entry(m, 5), "as"), "data.csv");
        ck_assert_str_eq(json_object_to_json_string(json_object_object_get(entry(m, 5), "fd")), "1");
        ck_assert(strstr(str(entry(m, 6), "error"), "fill in"));
        ck_assert(strstr(str(entry(m, 7), "error"), "must be a string"));
        /* The fds are the file, open for reading. */
        char buf[16] = {};
        ck_assert_int_eq(pread(fds[0], buf, sizeof(buf), 0), 4);
        ck_assert_str_eq(buf, "a,b\n");
        ck_assert(fcntl(fds[1], F_GETFD) & FD_CLOEXEC);
        for (size_t i = 0; i < n; i++)
                close(fds[i]);
        json_object_put(m);

        /* A batch: each call's files, slots counted across the line. */
        free(line);
        ck_assert_int_ge(asprintf(&line,
                                  "[{\"method\":\"tools/call\",\"params\":{\"arguments\":{\"files\":"
                                  "[{\"path\":\"%s\"}]}}},"
                                  "{\"method\":\"tools/call\",\"params\":{\"arguments\":{\"files\":"
                                  "[{\"path\":\"%s\"}]}}}]",
                                  data, data), 0);
        m = rewrite(line, fds, &n, 1);
        ck_assert_uint_eq(n, 2);
        ck_assert(strstr(json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN), "\"fd\":1"));
        for (size_t i = 0; i < n; i++)
                close(fds[i]);
        json_object_put(m);

        /* At most SHIM_FILES_MAX open per line; the rest say why. */
        free(line);
        line = strdup("{\"method\":\"tools/call\",\"params\":{\"arguments\":{\"files\":[");
        for (int i = 0; i < SHIM_FILES_MAX + 2; i++) {
                char *l2 = NULL;
                ck_assert_int_ge(asprintf(&l2, "%s%s{\"path\":\"%s\"}", line, i ? "," : "", data), 0);
                free(line);
                line = l2;
        }
        char *l3 = NULL;
        ck_assert_int_ge(asprintf(&l3, "%s]}}}", line), 0);
        free(line);
        line = l3;
        m = rewrite(line, fds, &n, 1);
        ck_assert_uint_eq(n, SHIM_FILES_MAX);
        ck_assert(strstr(str(entry(m, SHIM_FILES_MAX), "error"), "more files"));
        for (size_t i = 0; i < n; i++)
                close(fds[i]);
        json_object_put(m);

        unlink(link);
        unlink(data);
        rmdir(sub);
        rmdir(dir);
}
END_TEST

static Suite *fdqueue_suite(void) {
        Suite *s = suite_create("fdqueue");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_take_at_line_start);
        tcase_add_test(tc, test_limits);
        tcase_add_test(tc, test_recv);
        tcase_add_test(tc, test_rewrite);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(fdqueue_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
