/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "pep723/pep440.h"

static char *normalized(const char *s) {
        Pep440Version v;
        char *t = NULL;

        if (pep440_version_parse(s, &v) < 0)
                return NULL;
        ck_assert_int_eq(pep440_version_to_string(&v, &t), 0);
        return t;
}

START_TEST(test_version_parse_valid) {
        static const struct {
                const char *in, *out;
        } cases[] = {
                { "3", "3" },
                { "3.12", "3.12" },
                { "3.12.1", "3.12.1" },
                { "01.002.0", "1.2.0" },
                { "v3.12", "3.12" },
                { "V3.12", "3.12" },
                { "  3.12\t", "3.12" },
                { "1!2.0", "1!2.0" },
                { "0!2.0", "2.0" },
                { "1.0a1", "1.0a1" },
                { "1.0alpha1", "1.0a1" },
                { "1.0-beta.2", "1.0b2" },
                { "1.0_b_2", "1.0b2" },
                { "1.0c1", "1.0rc1" },
                { "1.0pre", "1.0rc0" },
                { "1.0.preview-3", "1.0rc3" },
                { "1.0RC1", "1.0rc1" },
                { "1.0a", "1.0a0" },
                { "1.0-1", "1.0.post1" },
                { "1.0post", "1.0.post0" },
                { "1.0.rev2", "1.0.post2" },
                { "1.0r", "1.0.post0" },
                { "1.0-post-3", "1.0.post3" },
                { "1.0.dev", "1.0.dev0" },
                { "1.0-dev-4", "1.0.dev4" },
                { "1.0DEV4", "1.0.dev4" },
                { "1.0a1.post2.dev3", "1.0a1.post2.dev3" },
                { "1.0a1-1", "1.0a1.post1" },
                { "1.0+ubuntu-1_02", "1.0+ubuntu.1.2" },
                { "1.0+AbC", "1.0+abc" },
                { "1.0+0", "1.0+0" },
                { "2023.10.1.2.3.4.5.6.7", "2023.10.1.2.3.4.5.6.7" },
                { "18446744073709551615", "18446744073709551615" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *t = normalized(cases[i].in);

                ck_assert_msg(t, "'%s' should parse", cases[i].in);
                ck_assert_str_eq(t, cases[i].out);
        }
}
END_TEST

START_TEST(test_version_parse_invalid) {
        static const char *const cases[] = {
                "", " ", "v", "3.", ".3", "3..1", "3.x", "3.12.*", "1.0+", "1.0+a..b",
                "1.0+_a", "1.0+a-", "1.0 a1", "abc", "1!", "1!!2", "!1", "1.0-", "1.0a1b2",
                "1.0.post1a1", "1.0.dev1.post1", "1.0+local+x", "3,12", "3.12;",
                "18446744073709551616", "1.2.3.4.5.6.7.8.9.10.11.12.13.14.15.16.17",
                "1.0+aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                "\303\2511.0", /* "é1.0" */
        };
        Pep440Version v;

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                ck_assert_msg(pep440_version_parse(cases[i], &v) == -EINVAL,
                              "'%s' should be rejected", cases[i]);

        ck_assert_int_eq(pep440_version_parse(NULL, &v), -EINVAL);
        ck_assert_int_eq(pep440_version_parse("1.0", NULL), -EINVAL);
}
END_TEST

START_TEST(test_version_fields) {
        Pep440Version v;

        ck_assert_int_eq(pep440_version_parse("2!3.12.1rc2.post3.dev4+abc.5", &v), 0);
        ck_assert_uint_eq(v.epoch, 2);
        ck_assert_uint_eq(v.n_release, 3);
        ck_assert_uint_eq(v.release[0], 3);
        ck_assert_uint_eq(v.release[1], 12);
        ck_assert_uint_eq(v.release[2], 1);
        ck_assert_int_eq(v.pre_kind, PEP440_PRE_RC);
        ck_assert_uint_eq(v.pre, 2);
        ck_assert(v.has_post);
        ck_assert_uint_eq(v.post, 3);
        ck_assert(v.has_dev);
        ck_assert_uint_eq(v.dev, 4);
        ck_assert_str_eq(v.local, "abc.5");
        ck_assert(pep440_version_is_prerelease(&v));

        ck_assert_int_eq(pep440_version_parse("3.12.0", &v), 0);
        ck_assert(!pep440_version_is_prerelease(&v));
        ck_assert_int_eq(pep440_version_parse("3.12.0.post1", &v), 0);
        ck_assert(!pep440_version_is_prerelease(&v));
        ck_assert_int_eq(pep440_version_parse("3.12.0.dev1", &v), 0);
        ck_assert(pep440_version_is_prerelease(&v));
}
END_TEST

START_TEST(test_version_order) {
        /* Ascending, from PEP 440's examples plus epochs and local labels. */
        static const char *const order[] = {
                "1.0.dev456", "1.0a1", "1.0a2.dev456", "1.0a12.dev456", "1.0a12",
                "1.0b1.dev456", "1.0b2", "1.0b2.post345.dev456", "1.0b2.post345",
                "1.0rc1.dev456", "1.0rc1", "1.0", "1.0+abc.5", "1.0+abc.7", "1.0+5",
                "1.0+5.1", "1.0.post456.dev34", "1.0.post456", "1.0.15", "1.1.dev1",
                "1.1", "3.9", "3.10", "3.12.0", "3.12.1", "3.13", "10", "1!0.1",
        };

        for (size_t i = 0; i < ELEMENTSOF(order); i++)
                for (size_t j = 0; j < ELEMENTSOF(order); j++) {
                        Pep440Version a, b;
                        int c;

                        ck_assert_int_eq(pep440_version_parse(order[i], &a), 0);
                        ck_assert_int_eq(pep440_version_parse(order[j], &b), 0);
                        c = pep440_version_compare(&a, &b);
                        ck_assert_msg(i < j ? c < 0 : i > j ? c > 0 : c == 0,
                                      "compare(%s, %s) = %d", order[i], order[j], c);
                }
}
END_TEST

START_TEST(test_version_equal) {
        static const char *const pairs[][2] = {
                { "1.0", "1.0.0" },
                { "1", "1.0.0.0" },
                { "v1.0", "1.0" },
                { "1.0+01", "1.0+1" },
                { "1.0alpha1", "1.0a1" },
                { "1.0-1", "1.0.post1" },
                { "0!1.0", "1.0" },
        };

        for (size_t i = 0; i < ELEMENTSOF(pairs); i++) {
                Pep440Version a, b;

                ck_assert_int_eq(pep440_version_parse(pairs[i][0], &a), 0);
                ck_assert_int_eq(pep440_version_parse(pairs[i][1], &b), 0);
                ck_assert_msg(pep440_version_compare(&a, &b) == 0, "%s != %s", pairs[i][0], pairs[i][1]);
        }
}
END_TEST

static bool set_contains(const char *set_text, const char *version) {
        _cleanup_(pep440_specifier_set_freep) Pep440SpecifierSet *set = NULL;
        _cleanup_free_ char *error = NULL;
        Pep440Version v;

        ck_assert_msg(pep440_specifier_set_parse(set_text, &set, &error) == 0,
                      "'%s' should parse: %s", set_text, strempty(error));
        ck_assert_msg(pep440_version_parse(version, &v) == 0, "'%s' should parse", version);
        return pep440_specifier_set_contains(set, &v);
}

START_TEST(test_specifier_contains) {
        static const struct {
                const char *set, *version;
                bool expected;
        } cases[] = {
                { "~=3.11", "3.11.0", true },
                { "~=3.11", "3.11", true },
                { "~=3.11", "3.12", true },
                { "~=3.11", "3.99.1", true },
                { "~=3.11", "3.10", false },
                { "~=3.11", "3.10.9", false },
                { "~=3.11", "4.0", false },
                { "~=3.11.2", "3.11.2", true },
                { "~=3.11.2", "3.11.9", true },
                { "~=3.11.2", "3.11.1", false },
                { "~=3.11.2", "3.12.0", false },
                { "~=1.4.5a4", "1.4.5", true },
                { "~=1.4.5a4", "1.4.9", true },
                { "~=1.4.5a4", "1.5", false },
                { "~=1!3.11", "1!3.12", true },
                { "~=1!3.11", "3.12", false },
                { "==3.12.*", "3.12.9", true },
                { "==3.12.*", "3.12", true },
                { "==3.12.*", "3.12.0rc1", true },
                { "==3.12.*", "3.12.1+local", true },
                { "==3.12.*", "3.13", false },
                { "==3.12.*", "3.1", false },
                { "==3.12.*", "3.120", false },
                { "==3.*", "3", true },
                { "==3.*", "3.0", true },
                { "==3.*", "4.0", false },
                { "==3.12.0.*", "3.12", true },
                { "!=3.12.*", "3.12.1", false },
                { "!=3.12.*", "3.13", true },
                { "==3.12", "3.12.0", true },
                { "==3.12", "3.12.0.0", true },
                { "==3.12", "3.12+local", true },
                { "==3.12", "3.12.1", false },
                { "==3.12", "3.12.0rc1", false },
                { "==3.12+local", "3.12+local", true },
                { "==3.12+local", "3.12", false },
                { "==3.12+local", "3.12+other", false },
                { "!=3.12.0", "3.12", false },
                { "!=3.12.0", "3.12.0", false },
                { "!=3.12.0", "3.12.1", true },
                { "!=3.12.0", "3.12.0+local", false },
                { "<3.13", "3.13.0", false },
                { "<3.13", "3.12.99", true },
                { "<3.13", "3.13.0rc1", false },
                { "<3.13", "3.13.0a1", false },
                { "<3.13", "3.13.dev1", false },
                { "<3.13", "3.12.0rc1", true },
                { "<3.13.0rc2", "3.13.0rc1", true },
                { "<3.13", "2!1.0", false },
                { "<=3.12", "3.12", true },
                { "<=3.12", "3.12.0+local", true },
                { "<=3.12", "3.12.1", false },
                { ">3.9", "3.9", false },
                { ">3.9", "3.9.0", false },
                { ">3.9", "3.9.1", true },
                { ">3.9", "3.10", true },
                { ">3.9", "3.9.post1", false },
                { ">3.9", "3.9+local", false },
                { ">3.9.post1", "3.9.post2", true },
                { ">3.9", "3.10.0a1", true },
                { ">=3.12", "3.11.99", false },
                { ">=3.12", "3.12", true },
                { ">=3.12", "3.12.0rc1", false },
                { ">=3.10,<3.14", "3.10", true },
                { ">=3.10,<3.14", "3.13.5", true },
                { ">=3.10,<3.14", "3.14", false },
                { ">=3.10,<3.14", "3.9", false },
                { " >= 3.10 , < 3.14 ", "3.11", true },
                { ">=3.10,!=3.11.*,<3.14", "3.11.4", false },
                { ">=3.10,!=3.11.*,<3.14", "3.12.4", true },
                { "===3.12.1", "3.12.1", true },
                { "===3.12.1", "3.12.1.0", false },
                { "===3.12.1", "v3.12.1", true },
                { "===1.0RC1", "1.0rc1", true },
                { "", "3.12", true },
                { "  ", "1!0", true },
                { ">=3", "1!2.0", true },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                ck_assert_msg(set_contains(cases[i].set, cases[i].version) == cases[i].expected,
                              "'%s' contains '%s' should be %s", cases[i].set, cases[i].version,
                              cases[i].expected ? "true" : "false");

        /* NULL set contains everything. */
        Pep440Version v;
        ck_assert_int_eq(pep440_version_parse("3.12", &v), 0);
        ck_assert(pep440_specifier_set_contains(NULL, &v));
}
END_TEST

START_TEST(test_specifier_invalid) {
        static const struct {
                const char *set, *error;
        } cases[] = {
                { "3.10", "'3.10' is not a valid version specifier: it must start with one of" },
                { ">=", "the version after '>=' is missing" },
                { ">=3.x", "'3.x' is not a valid version" },
                { "=>3.10", "it must start with one of" },
                { "=3.10", "it must start with one of" },
                { ">=3.10,", "empty clause" },
                { ",", "empty clause" },
                { ">=3.10,,<4", "empty clause" },
                { "~=3", "'~=' needs a version with at least two parts" },
                { ">=3.12.*", "'.*' is only allowed after == and !=" },
                { "~=3.12.*", "'.*' is only allowed after == and !=" },
                { "==3.12.*.1", "is not a valid version" },
                { "==3.12a1.*", "'.*' may only follow release numbers" },
                { "==3.12+local.*", "'.*' may only follow release numbers" },
                { "<3.12+local", "a local version label (+...) is only allowed after == and !=" },
                { "~=3.11+abc", "a local version label" },
                { ">= 3. 10", "'3. 10' is not a valid version" },
                { "===", "the version after '===' is missing" },
                { "===3;1", "';' is not allowed in a version" },
                { "===3)", "')' is not allowed in a version" },
                { ">=3.10 <3.14", "is not a valid version" },
                { "\x01>=3", "control character" },
                { ">=3.10\n", "control character" },
                { ">=3.\xc3\xa9", "is not a valid version" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(pep440_specifier_set_freep) Pep440SpecifierSet *set = NULL;
                _cleanup_free_ char *error = NULL;

                ck_assert_msg(pep440_specifier_set_parse(cases[i].set, &set, &error) == -EINVAL,
                              "'%s' should be rejected", cases[i].set);
                ck_assert_ptr_null(set);
                ck_assert_ptr_nonnull(error);
                ck_assert_msg(strstr(error, cases[i].error), "'%s': unexpected message: %s",
                              cases[i].set, error);
        }

        /* Without ret_error. */
        Pep440SpecifierSet *set = NULL;
        ck_assert_int_eq(pep440_specifier_set_parse(">=", &set, NULL), -EINVAL);
        ck_assert_ptr_null(set);
}
END_TEST

START_TEST(test_specifier_too_long) {
        _cleanup_(pep440_specifier_set_freep) Pep440SpecifierSet *set = NULL;
        _cleanup_free_ char *error = NULL, *s = NULL;
        size_t n = PEP440_SPECIFIER_SET_MAX + 1;

        s = malloc(n + 1);
        ck_assert_ptr_nonnull(s);
        memset(s, ' ', n);
        memcpy(s, ">=3", 3);
        s[n] = 0;

        ck_assert_int_eq(pep440_specifier_set_parse(s, &set, &error), -EINVAL);
        ck_assert_ptr_nonnull(strstr(error, "longer than 1024 bytes"));

        s[n - 1] = 0;
        ck_assert_int_eq(pep440_specifier_set_parse(s, &set, NULL), 0);
        ck_assert_uint_eq(set->n, 1);
}
END_TEST

START_TEST(test_specifier_to_string) {
        static const struct {
                const char *in, *out;
        } cases[] = {
                { " <3.14 , >=3.10 ", "<3.14,>=3.10" },
                { ">=3.10,<3.14", "<3.14,>=3.10" },
                { "==3.12.*", "==3.12.*" },
                { "== 3.12.*", "==3.12.*" },
                { "~=3.11", "~=3.11" },
                { ">=3.10,>=3.10", ">=3.10" },
                { ">=V3.10.0-RC1", ">=3.10.0rc1" },
                { "!=1.0-1", "!=1.0.post1" },
                { "==1.0+Local_1", "==1.0+local.1" },
                { "===Foo", "===Foo" },
                { "", "" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(pep440_specifier_set_freep) Pep440SpecifierSet *set = NULL;
                _cleanup_free_ char *s = NULL;

                ck_assert_int_eq(pep440_specifier_set_parse(cases[i].in, &set, NULL), 0);
                ck_assert_int_eq(pep440_specifier_set_to_string(set, &s), 0);
                ck_assert_str_eq(s, cases[i].out);
        }
}
END_TEST

START_TEST(test_specifier_structure) {
        _cleanup_(pep440_specifier_set_freep) Pep440SpecifierSet *set = NULL;

        ck_assert_int_eq(pep440_specifier_set_parse(">=3.10, !=3.11.*, ===x", &set, NULL), 0);
        ck_assert_uint_eq(set->n, 3);
        ck_assert_int_eq(set->items[0].op, PEP440_OP_GREATER_EQUAL);
        ck_assert(!set->items[0].wildcard);
        ck_assert_int_eq(set->items[1].op, PEP440_OP_NOT_EQUAL);
        ck_assert(set->items[1].wildcard);
        ck_assert_uint_eq(set->items[1].version.n_release, 2);
        ck_assert_int_eq(set->items[2].op, PEP440_OP_ARBITRARY);
        ck_assert_str_eq(set->items[2].arbitrary, "x");

        ck_assert_ptr_null(pep440_specifier_set_free(NULL));
}
END_TEST

static Suite *pep440_suite(void) {
        Suite *s = suite_create("pep440");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_version_parse_valid);
        tcase_add_test(tc, test_version_parse_invalid);
        tcase_add_test(tc, test_version_fields);
        tcase_add_test(tc, test_version_order);
        tcase_add_test(tc, test_version_equal);
        tcase_add_test(tc, test_specifier_contains);
        tcase_add_test(tc, test_specifier_invalid);
        tcase_add_test(tc, test_specifier_too_long);
        tcase_add_test(tc, test_specifier_to_string);
        tcase_add_test(tc, test_specifier_structure);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(pep440_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
