/* SPDX-License-Identifier: MIT */
/* close_all_fds_except(), in a child of the test as in the daemon's. */
#include <check.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs-util.h"
#include "macro.h"

static bool is_open(int fd) {
        return fcntl(fd, F_GETFD) >= 0;
}

/* In a child: fds 3..39 opened, then close_all_fds_except(keep); exits 0 when what is left open below 64 is 0-2 and
 * want exactly, 1 when not, 2 on an error. */
static int run_child(const int *keep, size_t n, const int *want, size_t n_want) {
        pid_t pid = fork();
        int status;

        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (null < 0)
                        _exit(2);
                for (int fd = 3; fd < 40; fd++)
                        if (fd != null && !is_open(fd) && dup3(null, fd, O_CLOEXEC) < 0)
                                _exit(2);
                if (close_all_fds_except(keep, n) < 0)
                        _exit(2);
                for (int fd = 0; fd < 64; fd++) {
                        bool wanted = fd < 3;
                        for (size_t i = 0; i < n_want; i++)
                                wanted = wanted || want[i] == fd;
                        if (is_open(fd) != wanted)
                                _exit(1);
                }
                _exit(0);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status));
        return WEXITSTATUS(status);
}

START_TEST(test_keeps_only_what_it_is_told) {
        /* Unsorted, twice, below 3, negative: kept are 5, 9, 10 and 39, with 0-2. */
        ck_assert_int_eq(run_child((const int[]) { 10, 5, -9, 1, 39, 9, 5 }, 7, (const int[]) { 5, 9, 10, 39 }, 4),
                         0);
        /* Nothing to keep: only 0-2. */
        ck_assert_int_eq(run_child(NULL, 0, NULL, 0), 0);
        /* 3 itself, and neighbours. */
        ck_assert_int_eq(run_child((const int[]) { 3, 4, 6 }, 3, (const int[]) { 3, 4, 6 }, 3), 0);
        /* The check can fail: a kept fd that is not expected is seen. */
        ck_assert_int_eq(run_child((const int[]) { 7 }, 1, NULL, 0), 1);
}
END_TEST

START_TEST(test_too_many) {
        int keep[CLOSE_KEEP_MAX + 1] = {};

        ck_assert_int_eq(close_all_fds_except(keep, ELEMENTSOF(keep)), -E2BIG);
}
END_TEST

int main(void) {
        Suite *s = suite_create("close-fds");
        TCase *tc = tcase_create("close");
        SRunner *sr;
        int failed;

        tcase_add_test(tc, test_keeps_only_what_it_is_told);
        tcase_add_test(tc, test_too_many);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
