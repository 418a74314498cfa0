/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "pep723/pep508.h"
#include "tools/hints.h"

static const char sklearn_tb[] =
        "Traceback (most recent call last):\n"
        "  File \"/work/script.py\", line 1, in <module>\n"
        "    import sklearn.linear_model\n"
        "ModuleNotFoundError: No module named 'sklearn'\n";

static void requirements(RequirementList *l, const char *spec) {
        ck_assert_int_eq(requirement_list_append(l, spec, NULL), 0);
}

START_TEST(test_module_mapped) {
        _cleanup_free_ char *h = hint_for_run(sklearn_tb, false, NULL, false);

        ck_assert_str_eq(h, "The module 'sklearn' is not installed: it comes from the package 'scikit-learn', so "
                            "declare \"scikit-learn\" in the script's '# /// script' block (dependencies = "
                            "[\"scikit-learn\"]) or in the dependencies argument.");
        ck_assert_str_eq(hint_distribution_for_module("cv2"), "opencv-python");
        ck_assert_str_eq(hint_distribution_for_module("PIL"), "pillow");
        ck_assert_str_eq(hint_distribution_for_module("yaml"), "pyyaml");
        ck_assert_str_eq(hint_distribution_for_module("bs4"), "beautifulsoup4");
        ck_assert_ptr_null(hint_distribution_for_module("numpy"));
        ck_assert_ptr_null(hint_distribution_for_module("pil"));
}
END_TEST

START_TEST(test_module_submodule_and_unmapped) {
        _cleanup_free_ char *a = hint_for_run("ModuleNotFoundError: No module named 'PIL.Image'\n", false, NULL, false);
        _cleanup_free_ char *b = hint_for_run("ModuleNotFoundError: No module named 'rich'\n", false, NULL, false);
        _cleanup_free_ char *c = hint_for_run("ModuleNotFoundError: No module named 'cv2'\n", false, NULL, true);

        ck_assert_ptr_nonnull(strstr(a, "The module 'PIL' is not installed: it comes from the package 'pillow'"));
        ck_assert_str_eq(b, "The module 'rich' is not installed: if it comes from a package on PyPI, declare that "
                            "package (often also named \"rich\") in the script's '# /// script' block or in the "
                            "dependencies argument; the sandbox holds only the script, so other local files cannot "
                            "be imported.");
        ck_assert_str_eq(c, "The module 'cv2' is not installed in this sandbox: it comes from the package "
                            "'opencv-python', so install it with install_package (packages: [\"opencv-python\"]).");
}
END_TEST

START_TEST(test_module_declared_or_absent) {
        _cleanup_(requirement_list_done) RequirementList l = {};

        requirements(&l, "Scikit_Learn>=1");
        requirements(&l, "rich");
        ck_assert_ptr_null(hint_for_run(sklearn_tb, false, &l, false));
        ck_assert_ptr_null(hint_for_run("ModuleNotFoundError: No module named 'rich'\n", false, &l, false));
        ck_assert_ptr_null(hint_for_run("ValueError: x\n", false, NULL, false));
        ck_assert_ptr_null(hint_for_run("", true, NULL, false));
        ck_assert_ptr_null(hint_for_run(NULL, true, NULL, false));
        /* Standard library an interpreter was built without: no package to declare. */
        ck_assert_ptr_null(hint_for_run("ModuleNotFoundError: No module named '_tkinter'\n", false, NULL, false));
        ck_assert_ptr_null(hint_for_run("ModuleNotFoundError: No module named 'tkinter'\n", false, NULL, false));
        ck_assert_str_eq(hint_distribution_for_module("distutils"), "setuptools");
        /* Not a name we can build a sentence from. */
        ck_assert_ptr_null(hint_for_run("ModuleNotFoundError: No module named '$x'\n", false, NULL, false));
        ck_assert_ptr_null(hint_for_run("ModuleNotFoundError: No module named 'abc", false, NULL, false));
}
END_TEST

START_TEST(test_network) {
        static const char tb[] = "socket.gaierror: [Errno -3] Temporary failure in name resolution\n";
        _cleanup_free_ char *h = hint_for_run(tb, true, NULL, false);
        _cleanup_free_ char *u = hint_for_run("urllib3.exceptions.NameResolutionError: <...>: Failed to resolve "
                                              "'pypi.org'\n", true, NULL, false);

        ck_assert_str_eq(h, "The script tried to reach the network, but the administrator of this server has turned "
                            "network access off for scripts (network=no): work with data the script carries or "
                            "computes, or ask the administrator to turn network access on.");
        ck_assert_ptr_nonnull(u);
        /* With network on, a resolver failure is the network's, not the administrator's. */
        ck_assert_ptr_null(hint_for_run(tb, false, NULL, false));
}
END_TEST

START_TEST(test_install) {
        static const char docopt[] =
                "error: No solution found when resolving dependencies\n"
                "  cause: Because all versions of docopt have no usable wheels and you require docopt, we can "
                "conclude that your requirements are unsatisfiable.\n"
                "hint: Wheels are required for `docopt` because building from source is disabled for all packages "
                "(i.e., with `--no-build`)\n";
        _cleanup_(requirement_list_done) RequirementList l = {}, s = {};
        _cleanup_free_ char *h = NULL, *h2 = NULL, *h3 = NULL;

        requirements(&l, "docopt");
        h = hint_for_install(docopt, &l, false);
        ck_assert_str_eq(h, "'docopt' has no wheel this server can use (it is published as source code only), and "
                            "this server installs wheels only: building from source runs the package's own code, so "
                            "it is the administrator's choice (allow-source-builds=yes); use a package that ships "
                            "wheels, or ask the administrator.");
        ck_assert_ptr_null(hint_for_install(docopt, &l, true));

        /* Without uv's hint line, from its cause. */
        h3 = hint_for_install("  cause: Because all versions of jieba have no usable wheels and you require jieba\n", NULL,
                              false);
        ck_assert_ptr_nonnull(strstr(h3, "'jieba' has no wheel this server can use"));

        /* An import name given as the package. */
        requirements(&s, "sklearn");
        h2 = hint_for_install("  cause: Because all versions of sklearn have no usable wheels and you require sklearn\n",
                              &s, false);
        ck_assert_str_eq(h2, "'sklearn' is the name to import, not the package to install: declare \"scikit-learn\" "
                             "instead, then import sklearn.");
        ck_assert_ptr_null(hint_for_install("error: the network is down\n", &l, false));
        ck_assert_ptr_null(hint_for_install(NULL, &l, false));
}
END_TEST

static Suite *hints_suite(void) {
        Suite *s = suite_create("hints");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_module_mapped);
        tcase_add_test(tc, test_module_submodule_and_unmapped);
        tcase_add_test(tc, test_module_declared_or_absent);
        tcase_add_test(tc, test_network);
        tcase_add_test(tc, test_install);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(hints_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
