/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "pep723/pep508.h"

static void assert_parses(const char *spec, const char *name, const char *canonical) {
        _cleanup_free_ char *error = NULL;
        Requirement r = {};

        ck_assert_msg(pep508_parse(spec, &r, &error) == 0, "'%s' should parse: %s", spec, strempty(error));
        ck_assert_ptr_null(error);
        ck_assert_str_eq(r.name, name);
        ck_assert_msg(streq(r.canonical, canonical), "'%s': canonical '%s', expected '%s'",
                      spec, r.canonical, canonical);
        requirement_done(&r);
        ck_assert_ptr_null(r.name);
}

static void assert_rejected(const char *spec, const char *message) {
        _cleanup_free_ char *error = NULL;
        Requirement r = {};

        ck_assert_msg(pep508_parse(spec, &r, &error) == -EINVAL, "'%s' should be rejected", spec);
        ck_assert_ptr_null(r.name);
        ck_assert_ptr_null(r.canonical);
        ck_assert_ptr_nonnull(error);
        ck_assert_msg(strstr(error, message), "'%s': unexpected message: %s", spec, error);
}

START_TEST(test_names) {
        assert_parses("requests", "requests", "requests");
        assert_parses("Foo_Bar.baz", "foo-bar-baz", "foo-bar-baz");
        assert_parses("foo__bar--baz..qux-_.x", "foo-bar-baz-qux-x", "foo-bar-baz-qux-x");
        assert_parses("  numpy\t ", "numpy", "numpy");
        assert_parses("A", "a", "a");
        assert_parses("9", "9", "9");
        assert_parses("zope.interface", "zope-interface", "zope-interface");
        assert_parses("PyYAML", "pyyaml", "pyyaml");

        assert_rejected("foo-", "the name 'foo-' must start and end with a letter or digit");
        assert_rejected("_foo", "the name '_foo' must start and end with a letter or digit");
        assert_rejected("foo.", "must start and end with a letter or digit");
        assert_rejected("-e foo", "the name '-e' must start and end");
        assert_rejected("-rrequirements.txt", "must start and end");
        assert_rejected(">=1.0", "it must start with a package name");
        assert_rejected("[extra]", "it must start with a package name");
        assert_rejected("foo bar", "unexpected 'bar' after the name");
        assert_rejected("foo 1.0", "unexpected '1.0' after the name");
        assert_rejected("foo#comment", "unexpected '#comment'");
        assert_rejected("foo$x", "unexpected '$x'");

        _cleanup_free_ char *n = NULL;
        ck_assert_int_eq(pep508_normalize_name("Foo_Bar.baz", &n), 0);
        ck_assert_str_eq(n, "foo-bar-baz");
}
END_TEST

START_TEST(test_empty_and_limits) {
        char buf[PEP508_SPEC_MAX + 2];

        assert_rejected("", "a dependency specifier is empty");
        assert_rejected("   \t", "a dependency specifier is empty");
        assert_rejected("foo\n", "contains a control character");
        assert_rejected("foo\r", "contains a control character");
        assert_rejected("foo\x01", "contains a control character");
        assert_rejected("fo\x7fo", "contains a control character");
        assert_rejected("foo\n--index-url http://evil", "the dependency specifier 'foo?--index-url");
        assert_rejected("f\xc3\xb6o", "contains a non-ASCII character");
        assert_rejected("foo; os_name == '\xc3\xa9'", "contains a non-ASCII character");

        memset(buf, 'a', sizeof(buf) - 1);
        buf[sizeof(buf) - 1] = 0;
        assert_rejected(buf, "is longer than 1024 bytes");

        buf[PEP508_SPEC_MAX] = 0;
        assert_parses(buf, buf, buf);

        Requirement r = {};
        ck_assert_int_eq(pep508_parse(NULL, &r, NULL), -EINVAL);
        ck_assert_int_eq(pep508_parse("foo", NULL, NULL), -EINVAL);
        ck_assert_int_eq(pep508_parse("foo-", &r, NULL), -EINVAL);
        ck_assert_ptr_null(r.name);
        requirement_done(NULL);
}
END_TEST

START_TEST(test_direct_references) {
        static const char *const cases[] = {
                "foo @ https://example.com/foo-1.0.whl",
                "foo@https://example.com/foo.whl",
                "foo @https://x",
                "foo[bar] @ file:///tmp/x",
                "foo [bar]@ ./x",
                "foo @ ./local",
                "foo@1.0",
                "foo @ git+https://github.com/x/y",
                "git+https://github.com/x/y",
                "git+ssh://git@github.com/x/y.git",
                "hg+https://example.com/repo",
                "svn+svn://example.com/repo",
                "bzr+lp:project",
                "https://example.com/foo-1.0.tar.gz",
                "http:foo",
                "file:foo",
                "file:///etc/passwd",
                "./foo",
                "../foo",
                ".",
                "/abs/path",
                "/",
                "~/foo",
                "~user/pkg",
                ".\\foo",
                "C:\\path\\foo.whl",
                "foo-1.0-py3-none-any.whl",
                "foo.tar.gz",
                "Foo-1.0.ZIP",
                "foo.tgz",
                "foo.egg",
                "foo>=1 @ https://example.com/x",
                "foo https://example.com/x",
                "--index-url=https://evil.example/simple",
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *error = NULL;
                char expected[256];
                Requirement r = {};

                ck_assert_msg(pep508_parse(cases[i], &r, &error) == -EINVAL, "'%s' should be rejected",
                              cases[i]);
                (void) snprintf(expected, sizeof(expected),
                                "direct references (name @ URL, VCS or local paths) are not allowed: %s",
                                cases[i]);
                ck_assert_str_eq(error, expected);
        }

        /* Whitespace around the specifier is not echoed. */
        assert_rejected("  foo @ https://x  ",
                        "direct references (name @ URL, VCS or local paths) are not allowed: foo @ https://x");

        /* URL-looking text inside a marker string is just a string. */
        assert_parses("foo; platform_release == 'x://y'", "foo", "foo; platform_release == \"x://y\"");
        assert_parses("foo; os_name == 'a@b'", "foo", "foo; os_name == \"a@b\"");
}
END_TEST

START_TEST(test_extras) {
        assert_parses("requests[socks,security]", "requests", "requests[security,socks]");
        assert_parses("requests [ Socks , security ] >= 2.31 , < 3", "requests",
                      "requests[security,socks]<3,>=2.31");
        assert_parses("foo[]", "foo", "foo");
        assert_parses("foo[ ]", "foo", "foo");
        assert_parses("foo[a,a,A]", "foo", "foo[a]");
        assert_parses("foo[A_b.c]", "foo", "foo[a-b-c]");
        assert_parses("foo[bar](>=1)", "foo", "foo[bar]>=1");
        assert_parses("foo[bar];os_name=='nt'", "foo", "foo[bar]; os_name == \"nt\"");

        assert_rejected("foo[bar", "expected ',' or ']' in the extras at 'the end'");
        assert_rejected("foo[bar baz]", "expected ',' or ']' in the extras at 'baz]'");
        assert_rejected("foo[bar,]", "expected an extra name at ']'");
        assert_rejected("foo[,bar]", "expected an extra name at ',bar]'");
        assert_rejected("foo[-bar]", "'-bar' is not a valid extra name");
        assert_rejected("foo[bar.]", "'bar.' is not a valid extra name");
        assert_rejected("foo[bar]]", "unexpected ']'");
        assert_rejected("foo[b@r]", "expected ',' or ']'");
}
END_TEST

START_TEST(test_versions) {
        assert_parses("foo>=1.0", "foo", "foo>=1.0");
        assert_parses("foo >= 1.0 , < 2", "foo", "foo<2,>=1.0");
        assert_parses("foo (>=1.0, <2)", "foo", "foo<2,>=1.0");
        assert_parses("foo(==1.0.*)", "foo", "foo==1.0.*");
        assert_parses("foo==1.0.*", "foo", "foo==1.0.*");
        assert_parses("foo!=1.0.*", "foo", "foo!=1.0.*");
        assert_parses("foo~=1.4.5a4", "foo", "foo~=1.4.5a4");
        assert_parses("foo===1.0-weird", "foo", "foo===1.0-weird");
        assert_parses("foo!=1.0-1", "foo", "foo!=1.0.post1");
        assert_parses("foo==V1.0RC1", "foo", "foo==1.0rc1");
        assert_parses("foo==1.0+Local", "foo", "foo==1.0+local");
        assert_parses("foo<2,>=1,>=1", "foo", "foo<2,>=1");
        assert_parses("foo>1!2.0", "foo", "foo>1!2.0");

        assert_rejected("foo>=1.0.*", "'.*' is only allowed after == and !=");
        assert_rejected("foo>=", "the version after '>=' is missing");
        assert_rejected("foo=1.0", "'=1.0' is not a valid version specifier: it must start with one of");
        assert_rejected("foo=>1.0", "it must start with one of");
        assert_rejected("foo>=1.0,,<2", "empty clause");
        assert_rejected("foo>=1.0,", "empty clause");
        assert_rejected("foo ()", "the version specifier is empty");
        assert_rejected("foo (>=1.0", "the '(' has no matching ')'");
        assert_rejected("foo (>=1.0) x", "unexpected 'x' after the name");
        assert_rejected("foo>=1.0 bar", "'1.0 bar' is not a valid version");
        assert_rejected("foo~=1", "'~=' needs a version with at least two parts");
        assert_rejected("foo<1.0+local", "a local version label");
        assert_rejected("foo==1.x", "'1.x' is not a valid version");
        assert_rejected("foo>=1.0 (x)", "is not a valid version");
}
END_TEST

START_TEST(test_markers_valid) {
        assert_parses("foo>=1.0; python_version >= '3.8'", "foo", "foo>=1.0; python_version >= \"3.8\"");
        assert_parses("foo;python_version>'3.8'", "foo", "foo; python_version > \"3.8\"");
        assert_parses("foo>=1.0 ;python_version>=\"3\"", "foo", "foo>=1.0; python_version >= \"3\"");
        assert_parses("foo ; sys_platform == 'linux' and (python_version < '3.12' or platform_machine=='x86_64')",
                      "foo",
                      "foo; sys_platform == \"linux\" and (python_version < \"3.12\" or platform_machine == \"x86_64\")");
        assert_parses("foo;  ( ( os_name=='nt' ) )", "foo", "foo; ((os_name == \"nt\"))");
        assert_parses("foo; 'linux' in sys_platform", "foo", "foo; \"linux\" in sys_platform");
        assert_parses("foo; sys_platform not   in 'win32 cygwin'", "foo",
                      "foo; sys_platform not in \"win32 cygwin\"");
        assert_parses("foo; sys_platform\tnot\tin\t'win32'", "foo", "foo; sys_platform not in \"win32\"");
        assert_parses("foo; os_name == \"it's\"", "foo", "foo; os_name == \"it's\"");
        assert_parses("foo; os_name == 'say \"hi\"'", "foo", "foo; os_name == 'say \"hi\"'");
        assert_parses("foo; extra == 'bar'", "foo", "foo; extra == \"bar\"");
        assert_parses("foo; python_full_version == '3.12.*'", "foo", "foo; python_full_version == \"3.12.*\"");
        assert_parses("foo; '3.8' <= python_version", "foo", "foo; \"3.8\" <= python_version");
        assert_parses("foo; python_version ~= '3.10'", "foo", "foo; python_version ~= \"3.10\"");
        assert_parses("foo; python_version in '3.10 3.11'", "foo", "foo; python_version in \"3.10 3.11\"");
        assert_parses("foo; implementation_version >= '3.12.0'", "foo",
                      "foo; implementation_version >= \"3.12.0\"");
        assert_parses("foo;platform_version=='#1 SMP'", "foo", "foo; platform_version == \"#1 SMP\"");
        assert_parses("foo; platform_release ~= '6.1'", "foo", "foo; platform_release ~= \"6.1\"");
        assert_parses("foo; platform_release >= '6.1.0-13-amd64'", "foo",
                      "foo; platform_release >= \"6.1.0-13-amd64\"");
        assert_parses("foo; implementation_name == 'cpython' or os_name != 'nt' and platform_system=='Linux'",
                      "foo",
                      "foo; implementation_name == \"cpython\" or os_name != \"nt\" and platform_system == \"Linux\"");
        assert_parses("foo; platform_python_implementation === 'CPython'", "foo",
                      "foo; platform_python_implementation === \"CPython\"");
        assert_parses("foo; python_version>'3'and os_name=='nt'", "foo",
                      "foo; python_version > \"3\" and os_name == \"nt\"");
        assert_parses("foo; os_name == ''", "foo", "foo; os_name == \"\"");
        assert_parses("foo; os_name == '(){}-_*#:;,/?[]!~`@$%^&=+|<>'", "foo",
                      "foo; os_name == \"(){}-_*#:;,/?[]!~`@$%^&=+|<>\"");
}
END_TEST

START_TEST(test_markers_invalid) {
        char deep[256];
        size_t k = 0;

        assert_rejected("foo>=1.0;", "invalid environment marker in 'foo>=1.0;': the marker after ';' is empty");
        assert_rejected("foo;   ", "the marker after ';' is empty");
        assert_rejected("foo; python_version", "expected a comparison operator after 'python_version'");
        assert_rejected("foo; python_version >", "expected a marker variable or a quoted string at the end");
        assert_rejected("foo; pyton_version > '3'", "'pyton_version' is not a marker variable");
        assert_rejected("foo; platform.python_implementation == 'x'",
                        "'platform.python_implementation' is not a marker variable");
        assert_rejected("foo; Python_Version > '3'", "'Python_Version' is not a marker variable");
        assert_rejected("foo; python_version > '3' and", "expected a marker variable, a quoted string or '(' at the end");
        assert_rejected("foo; python_version > '3' and and", "expected a marker variable, a quoted string or '('");
        assert_rejected("foo; (python_version > '3'", "expected 'and', 'or' or ')' at the end");
        assert_rejected("foo; python_version > '3')", "')' at ) has no matching '('");
        assert_rejected("foo; ()", "expected a marker variable, a quoted string or '(' at )");
        assert_rejected("foo; python_version > '3", "the string starting at '3 is not closed");
        assert_rejected("foo; python_version > \"3'", "is not closed");
        assert_rejected("foo; 'a' == 'b'", "''a' == 'b'' must compare a marker variable with a quoted string");
        assert_rejected("foo; os_name == sys_platform", "must compare a marker variable with a quoted string");
        assert_rejected("foo; python_version >= '3.x'", "'3.x' is not a valid version");
        assert_rejected("foo; python_version >= '3.8,3.9'", "\"3.8,3.9\" is not a valid version");
        assert_rejected("foo; python_version < ''", "\"\" is not a valid version");
        assert_rejected("foo; python_full_version > '3.12.*'", "'.*' is only allowed after == and !=");
        assert_rejected("foo; os_name ~= 'nt'", "'nt' is not a valid version");
        assert_rejected("foo; platform_release ~= '6'", "'~=' needs a version with at least two parts");
        assert_rejected("foo; os_name = 'nt'", "expected a comparison operator at = 'nt'");
        assert_rejected("foo; os_name 'nt'", "expected a comparison operator after 'os_name '");
        assert_rejected("foo; 'nt' 'nt'", "expected a comparison operator after ''nt' '");
        assert_rejected("foo; os_name == 'nt' and https://x", "'https' is not a marker variable");
        assert_rejected("foo; os_name == 'a\\b'", "'\\' is not allowed in the string 'a\\b'");
        assert_rejected("foo; os_name == '${HOME}'", "must not contain '${' or ' #'");
        assert_rejected("foo; os_name == 'a #b'", "must not contain '${' or ' #'");
        assert_rejected("foo; os_name == 'nt' xor os_name == 'x'", "'xor' is not a marker variable");
        assert_rejected("foo; os_name == 'nt' os_name == 'x'", "expected 'and' or 'or' at os_name == 'x'");
        assert_rejected("foo; os_name not 'nt'", "expected 'in' after 'not' at 'nt'");
        assert_rejected("foo; os_name in", "expected a marker variable or a quoted string at the end");
        assert_rejected("foo; os_name is 'nt'", "'is' is not a marker variable");
        assert_rejected("foo; os_name == 'nt' & os_name == 'x'", "unexpected '&' at & os_name");
        assert_rejected("foo; os_name == 'nt'; os_name == 'x'", "unexpected ';'");

        /* Nesting is capped. */
        k += (size_t) snprintf(deep, sizeof(deep), "foo; ");
        for (int i = 0; i < 40; i++)
                deep[k++] = '(';
        k += (size_t) snprintf(deep + k, sizeof(deep) - k, "os_name == 'nt'");
        for (int i = 0; i < 40; i++)
                deep[k++] = ')';
        deep[k] = 0;
        assert_rejected(deep, "parentheses are nested too deeply");
}
END_TEST

static void list_from(RequirementList *l, const char *const *specs) {
        for (; *specs; specs++) {
                _cleanup_free_ char *error = NULL;

                ck_assert_msg(requirement_list_append(l, *specs, &error) == 0, "%s: %s", *specs, strempty(error));
        }
}

static char *merged(const char *const *a, const char *const *b) {
        _cleanup_(requirement_list_done) RequirementList la = {}, lb = {}, m = {};
        char *s = NULL;

        list_from(&la, a);
        list_from(&lb, b);
        ck_assert_int_eq(requirement_list_merge(&la, &lb, &m), 0);
        for (size_t i = 1; i < m.n; i++)
                ck_assert(strcmp(m.items[i - 1].name, m.items[i].name) < 0);
        ck_assert_int_eq(requirement_list_join(&m, "\n", &s), 0);
        return s;
}

START_TEST(test_merge) {
        static const char *const none[] = { NULL };
        _cleanup_free_ char *s1 = NULL, *s2 = NULL, *s3 = NULL, *s4 = NULL, *s5 = NULL, *s6 = NULL, *s7 = NULL;

        s1 = merged((const char *const[]) { "requests>=2", "numpy", "Foo_Bar==1", NULL },
                    (const char *const[]) { "foo-bar>=2", "pandas", NULL });
        ck_assert_str_eq(s1, "foo-bar>=2\nnumpy\npandas\nrequests>=2");

        /* Within one list the later entry wins. */
        s2 = merged((const char *const[]) { "numpy<2", "NumPy>=1.26", NULL }, none);
        ck_assert_str_eq(s2, "numpy>=1.26");

        s3 = merged((const char *const[]) { "x==1", NULL }, (const char *const[]) { "x==2", "X==3", NULL });
        ck_assert_str_eq(s3, "x==3");

        /* The parameter entry wins even when it comes "earlier" in name order. */
        s4 = merged((const char *const[]) { "b", "a[x]>=1", NULL }, (const char *const[]) { "A", NULL });
        ck_assert_str_eq(s4, "a\nb");

        /* Order of input does not matter for the result. */
        s5 = merged((const char *const[]) { "zeta", "alpha", "mid; os_name == 'nt'", NULL }, none);
        s6 = merged((const char *const[]) { "mid;os_name==\"nt\"", "alpha", "zeta", NULL }, none);
        ck_assert_str_eq(s5, s6);
        ck_assert_str_eq(s5, "alpha\nmid; os_name == \"nt\"\nzeta");

        s7 = merged(none, none);
        ck_assert_str_eq(s7, "");

        _cleanup_(requirement_list_done) RequirementList l = {}, m = {};
        list_from(&l, (const char *const[]) { "b", "a", NULL });
        ck_assert_int_eq(requirement_list_merge(NULL, &l, &m), 0);
        ck_assert_uint_eq(m.n, 2);
        ck_assert_str_eq(m.items[0].name, "a");
        requirement_list_done(&m);
        ck_assert_int_eq(requirement_list_merge(&l, NULL, &m), 0);
        ck_assert_uint_eq(m.n, 2);
        requirement_list_done(&m);
        ck_assert_int_eq(requirement_list_merge(NULL, NULL, &m), 0);
        ck_assert_uint_eq(m.n, 0);
        ck_assert_ptr_null(m.items);
}
END_TEST

START_TEST(test_list_append_error) {
        _cleanup_(requirement_list_done) RequirementList l = {};
        _cleanup_free_ char *error = NULL, *s = NULL;

        ck_assert_int_eq(requirement_list_append(&l, "numpy", NULL), 0);
        ck_assert_int_eq(requirement_list_append(&l, "foo @ https://x", &error), -EINVAL);
        ck_assert_str_eq(error, "direct references (name @ URL, VCS or local paths) are not allowed: foo @ https://x");
        ck_assert_uint_eq(l.n, 1);
        ck_assert_int_eq(requirement_list_append(&l, "scipy>=1", NULL), 0);
        ck_assert_uint_eq(l.n, 2);

        ck_assert_int_eq(requirement_list_join(&l, ", ", &s), 0);
        ck_assert_str_eq(s, "numpy, scipy>=1");

        ck_assert_int_eq(requirement_list_append(NULL, "x", NULL), -EINVAL);
        requirement_list_done(NULL);
}
END_TEST

static Suite *pep508_suite(void) {
        Suite *s = suite_create("pep508");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_names);
        tcase_add_test(tc, test_empty_and_limits);
        tcase_add_test(tc, test_direct_references);
        tcase_add_test(tc, test_extras);
        tcase_add_test(tc, test_versions);
        tcase_add_test(tc, test_markers_valid);
        tcase_add_test(tc, test_markers_invalid);
        tcase_add_test(tc, test_merge);
        tcase_add_test(tc, test_list_append_error);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(pep508_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
