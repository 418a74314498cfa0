/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs-util.h"
#include "macro.h"
#include "sha256.h"

/* FIPS 180-4's examples, and a million a's, across the ways data can come in (whole, byte by byte, in pieces). */
START_TEST(test_sha256_vectors) {
        static const struct {
                const char *text;
                size_t repeat;
                const char *hex;
        } v[] = {
                { "", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
                { "abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
                { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
                  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
                { "a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0" },
        };

        for (size_t i = 0; i < ELEMENTSOF(v); i++) {
                size_t len = strlen(v[i].text) * v[i].repeat;
                _cleanup_free_ char *data = malloc(len + 1);
                char hex[65];

                ck_assert_ptr_nonnull(data);
                for (size_t k = 0; k < v[i].repeat; k++)
                        memcpy(data + k * strlen(v[i].text), v[i].text, strlen(v[i].text));
                sha256_hex(data, len, hex);
                ck_assert_str_eq(hex, v[i].hex);
                for (size_t piece = 1; piece <= 97; piece += 32) {
                        Sha256 s;
                        sha256_init(&s);
                        for (size_t at = 0; at < len; at += piece)
                                sha256_update(&s, data + at, MIN(piece, len - at));
                        sha256_final_hex(&s, hex);
                        ck_assert_str_eq(hex, v[i].hex);
                }
        }
}
END_TEST

/* Where the CPU has SHA instructions they are used: the same digests as the portable code (MCP_SHA256_PORTABLE=1,
 * in a child) for every length up to a few blocks, whole and in pieces. */
static void sha256_digests(int fd) {
        uint8_t data[700];

        for (size_t i = 0; i < sizeof(data); i++)
                data[i] = (uint8_t) (i * 131 + 7);
        for (size_t len = 0; len <= sizeof(data); len++) {
                Sha256 s;
                char hex[65];

                sha256_init(&s);
                sha256_update(&s, data, len / 3);
                sha256_update(&s, data + len / 3, len - len / 3);
                sha256_final_hex(&s, hex);
                ck_assert_int_eq(write(fd, hex, 64), 64);
        }
}

/* The digests a child computes, with the portable code or with what the CPU has. */
static char *digests_in_child(bool portable, size_t *ret_size) {
        char *out = NULL;
        int p[2], status;
        pid_t pid;

        ck_assert_int_eq(pipe(p), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                close(p[0]);
                if (portable)
                        setenv("MCP_SHA256_PORTABLE", "1", 1);
                else
                        unsetenv("MCP_SHA256_PORTABLE");
                sha256_digests(p[1]);
                _exit(0);
        }
        close(p[1]);
        ck_assert_int_eq(read_full_fd(p[0], 1 << 20, &out, ret_size), 0);
        close(p[0]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        return out;
}

START_TEST(test_sha256_same_everywhere) {
        size_t n = 0, m = 0;
        _cleanup_free_ char *portable = digests_in_child(true, &n), *native = digests_in_child(false, &m);

        ck_assert_uint_eq(n, 701 * 64);
        ck_assert_uint_eq(m, n);
        ck_assert(memcmp(portable, native, n) == 0);
}
END_TEST

static Suite *sha256_suite(void) {
        Suite *s = suite_create("sha256");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_sha256_vectors);
        tcase_add_test(tc, test_sha256_same_everywhere);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(sha256_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
