/* SPDX-License-Identifier: MIT */
/* envstore_check_uv_version(): the oldest uv the store works with. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "envstore/envstore.h"
#include "macro.h"

static void accepted(const char *v) {
        char *reason = NULL;

        ck_assert_msg(envstore_check_uv_version(v, &reason) == 0, "%s refused: %s", v, strempty(reason));
        ck_assert_ptr_null(reason);
}

static void refused(const char *v) {
        _cleanup_free_ char *reason = NULL;

        ck_assert_msg(envstore_check_uv_version(v, &reason) == 1, "%s accepted", strempty(v));
        ck_assert_ptr_nonnull(strstr(reason, "is older than " ENVSTORE_UV_VERSION_MIN ", the oldest uv this server "
                                             "works with, so packages cannot be installed"));
}

START_TEST(test_versions) {
        _cleanup_free_ char *reason = NULL;

        ck_assert_str_eq(ENVSTORE_UV_VERSION_MIN, "0.11.0");
        accepted("0.11.0");
        accepted("0.11.1");
        accepted("0.13.9");
        accepted("0.100.0");
        accepted("1.0.0");
        accepted("0.11.0-rc1");
        refused("0.10.12");
        refused("0.8.22");
        refused("0.9.99");
        refused("0.2.0");
        refused("0.11");
        refused("");
        refused("garbage");
        refused("0.x.1");
        refused(NULL);

        ck_assert_int_eq(envstore_check_uv_version("0.4.30", &reason), 1);
        ck_assert_str_eq(reason, "uv 0.4.30 is older than 0.11.0, the oldest uv this server works with, so packages "
                                 "cannot be installed (the administrator can upgrade uv, e.g. pip install "
                                 "'uv>=0.11.0', or set uv= to a newer one)");
}
END_TEST

int main(void) {
        Suite *s = suite_create("uv-version");
        TCase *tc = tcase_create("core");
        SRunner *sr;
        int failed;

        tcase_add_test(tc, test_versions);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
