/* SPDX-License-Identifier: MIT */
/*
 * The boot program's code as runs get it (runtime/code.c), without a Runtime: the sealed memfd can be read and
 * never changed, by its holder or through a descriptor opened anew, in place or by size; the loader runs the code
 * in __main__ as -c runs source, with the descriptor closed before the code starts (with the host's python3, when
 * there is one).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs-util.h"
#include "macro.h"
#include "runtime/runtime.h"

START_TEST(test_sealed_reads_and_refuses_changes) {
        static const char data[] = "c\x01\x02 the code";
        _cleanup_close_ int fd = runtime_code_seal(data, sizeof(data)), rw = -EBADF, ro = -EBADF;
        char buf[64], path[64];

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pread(fd, buf, sizeof(buf), 0), (ssize_t) sizeof(data));
        ck_assert(memcmp(buf, data, sizeof(data)) == 0);

        /* Not by the descriptor made, not by one opened anew for writing. */
        errno = 0;
        ck_assert_int_lt(pwrite(fd, "x", 1, 0), 0);
        ck_assert_int_eq(errno, EPERM);
        ck_assert_int_lt(ftruncate(fd, 0), 0);
        ck_assert_int_lt(ftruncate(fd, 4096), 0);
        ck_assert(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        rw = open(path, O_RDWR | O_CLOEXEC);
        if (rw >= 0) {
                errno = 0;
                ck_assert_int_lt(write(rw, "x", 1), 0);
                ck_assert_int_eq(errno, EPERM);
        }
        /* The seals themselves are sealed. */
        ck_assert_int_lt(fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), 0);
        ck_assert_int_eq(fcntl(fd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL),
                         F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);

        /* A descriptor opened anew (what each run gets) has an offset of its own. */
        ro = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(ro, 0);
        ck_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
        ck_assert_int_eq(lseek(ro, 3, SEEK_SET), 3);
        ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), 0);
        ck_assert_int_eq(pread(fd, buf, sizeof(buf), 0), (ssize_t) sizeof(data));
        ck_assert(memcmp(buf, data, sizeof(data)) == 0);
}
END_TEST

/* Run python3 -c ARG with fd kept; its stdout, or NULL. */
static char *run_python(const char *arg, int fd) {
        int out[2];
        pid_t pid;
        char buf[4096];
        size_t n = 0;
        ssize_t k;
        int st;

        ck_assert_int_eq(pipe(out), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                dup2(out[1], STDOUT_FILENO);
                if (fd >= 0)
                        fcntl(fd, F_SETFD, 0);
                execlp("python3", "python3", "-I", "-B", "-c", arg, "one", "two", (char *) NULL);
                _exit(127);
        }
        close(out[1]);
        while (n < sizeof(buf) - 1 && (k = read(out[0], buf + n, sizeof(buf) - 1 - n)) > 0)
                n += (size_t) k;
        close(out[0]);
        buf[n] = 0;
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) == 127)
                return NULL;
        ck_assert_int_eq(WEXITSTATUS(st), 0);
        return strdup(buf);
}

#define LOADER_FD 50

START_TEST(test_loader_runs_the_code_as_c_would) {
        /* What the sandbox's compile does (code.c), here with the host's python3: the source is our own. */
        static const char source[] =
                "import sys\n"
                "def f():\n"
                "    import os\n"
                "    try:\n"
                "        os.fstat(50)\n"
                "        shut = False\n"
                "    except OSError:\n"
                "        shut = True\n"
                "    print(__name__, sys.argv, shut)\n"
                "f()\n";
        static const char compile[] =
                "import marshal,sys\n"
                "sys.stdout.buffer.write(marshal.dumps(compile(sys.argv[1],'<string>','exec',dont_inherit=True))"
                ".hex().encode())\n";
        _cleanup_free_ char *code = NULL, *loader = NULL, *out = NULL;
        _cleanup_close_ int sealed = -EBADF;
        char path[64], hex[65536];
        size_t n = 0;
        ssize_t k;
        int p[2], st;

        ck_assert_int_eq(pipe(p), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                dup2(p[1], STDOUT_FILENO);
                execlp("python3", "python3", "-I", "-S", "-B", "-c", compile, source, (char *) NULL);
                _exit(127);
        }
        close(p[1]);
        while (n < sizeof(hex) - 1 && (k = read(p[0], hex + n, sizeof(hex) - 1 - n)) > 0)
                n += (size_t) k;
        hex[n] = 0;
        close(p[0]);
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
                return;   /* no python3 here: nothing to run the loader with */
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        ck_assert(n > 2 && n % 2 == 0);
        code = malloc(n / 2);
        ck_assert_ptr_nonnull(code);
        for (size_t i = 0; i < n / 2; i++) {
                unsigned v;
                ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
                code[i] = (char) v;
        }

        /* Sealed, then opened anew read-only at the number the code checks, as runtime_code_fd() hands it out. */
        sealed = runtime_code_seal(code, n / 2);
        ck_assert_int_ge(sealed, 0);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", sealed);
        int ro = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(ro, 0);
        ck_assert_int_eq(dup3(ro, LOADER_FD, O_CLOEXEC), LOADER_FD);
        close(ro);
        loader = runtime_code_loader(LOADER_FD, n / 2);
        ck_assert_ptr_nonnull(loader);
        out = run_python(loader, LOADER_FD);
        close(LOADER_FD);
        ck_assert_ptr_nonnull(out);
        /* In __main__, argv as -c has it, the descriptor shut before the code ran. */
        ck_assert_str_eq(out, "__main__ ['-c', 'one', 'two'] True\n");
}
END_TEST

static Suite *code_suite(void) {
        Suite *s = suite_create("code");
        TCase *tc = tcase_create("core");

        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_sealed_reads_and_refuses_changes);
        tcase_add_test(tc, test_loader_runs_the_code_as_c_would);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(code_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
