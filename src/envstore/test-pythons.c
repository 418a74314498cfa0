/* SPDX-License-Identifier: MIT */
/*
 * The Python finder (envstore/pythons.h) on a temporary tree of fake interpreters: shell scripts that answer the
 * version probe as CPython would (or do not). Covered: python-search-path's expansion ("~/", patterns, "+" builds),
 * the order candidates are found in, links to one binary found once, candidates that cannot be used (not
 * executable, dangling, a failed probe, another implementation, no JSON, a missing executable), the list newest
 * first, version choice ("3.12", requires-python, both, none: the error lists what there is) and filtering.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "envstore/pythons.h"
#include "fs-util.h"
#include "macro.h"
#include "strv.h"

extern char **environ;

static char top[PATH_MAX];

/* T/rel, in a static buffer of its own for each of the last four calls. */
static const char *at(const char *rel) {
        static char bufs[4][PATH_MAX];
        static unsigned n;
        char *b = bufs[n++ % 4];

        ck_assert_int_lt(snprintf(b, PATH_MAX, "%s/%s", top, rel), PATH_MAX);
        return b;
}

static void mkdirs(const char *rel) {
        ck_assert_int_eq(mkdir_p(at(rel), 0755), 0);
}

/* A fake interpreter at rel that answers the probe with this version, implementation and executable ($0: itself);
 * exit_code not 0: it fails without a word. */
static void fake(const char *rel, const char *version, const char *impl, const char *executable, int exit_code) {
        _cleanup_free_ char *text = NULL;
        int fd;

        ck_assert_int_ge(asprintf(&text,
                                  "#!/bin/sh\n"
                                  "[ \"$1 $2 $3\" = \"-I -S -c\" ] || { echo \"unexpected: $*\" >&2; exit 2; }\n"
                                  "[ %d = 0 ] || exit %d\n"
                                  "printf '{\"version\": \"%%s\", \"executable\": \"%%s\", \"prefix\": \"/opt/fake\", "
                                  "\"implementation\": \"%%s\"}\\n' '%s' \"%s\" '%s'\n",
                                  exit_code, exit_code, version, executable ?: "$0", impl),
                         0);
        fd = open(at(rel), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write_all(fd, text, strlen(text)), 0);
        close(fd);
}

static void link_to(const char *target, const char *rel) {
        ck_assert_int_eq(symlink(target, at(rel)), 0);
}

/* Run exe with the probe's arguments, as the runtime does: its first line of output when it exits 0, else NULL. */
static char *probe(const char *exe) {
        char *argv[] = { (char *) exe, (char *) "-I", (char *) "-S", (char *) "-c", (char *) python_probe_code, NULL };
        posix_spawn_file_actions_t fa;
        char buf[4096];
        size_t n = 0;
        ssize_t k;
        int p[2], status;
        pid_t pid;

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        ck_assert_int_eq(posix_spawn_file_actions_init(&fa), 0);
        ck_assert_int_eq(posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO), 0);
        ck_assert_int_eq(posix_spawn(&pid, exe, &fa, NULL, argv, environ), 0);
        posix_spawn_file_actions_destroy(&fa);
        close(p[1]);
        while ((k = read(p[0], buf + n, sizeof(buf) - 1 - n)) > 0)
                n += (size_t) k;
        close(p[0]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        buf[n] = 0;
        buf[strcspn(buf, "\n")] = 0;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? strdup(buf) : NULL;
}

/*
 * T/a/bin: python3 -> python3.12 (3.12.4), python3.12-config and python (not candidates' names), python3.10 (not
 * executable), python3.9 (dangling). T/b/bin: python3.11 (3.11.9), python3.13 (3.13.0), python3.14 (fails),
 * python3.15 (PyPy), python3.16 (says no JSON), python3.17 (names an executable that is not there). T/c/bin:
 * python3 -> ../../a/bin/python3.12. T/opt/3.14.1/bin/python3.14 (3.14.1), T/opt/3.15.0+freethreaded/bin/python3.15.
 * T/home/hb/python3.8 (3.8.18).
 */
static void make_tree(void) {
        char tmpl[] = "/tmp/test-pythons-XXXXXX";

        ck_assert_ptr_nonnull(mkdtemp(tmpl));
        ck_assert_ptr_nonnull(realpath(tmpl, top));
        mkdirs("a/bin");
        mkdirs("b/bin");
        mkdirs("c/bin");
        mkdirs("opt/3.14.1/bin");
        mkdirs("opt/3.15.0+freethreaded/bin");
        mkdirs("opt/not-a-dir-match");
        mkdirs("home/hb");
        fake("a/bin/python3.12", "3.12.4", "cpython", NULL, 0);
        link_to("python3.12", "a/bin/python3");
        fake("a/bin/python3.12-config", "3.12.4", "cpython", NULL, 0);
        fake("a/bin/python", "3.12.4", "cpython", NULL, 0);
        fake("a/bin/python3.10", "3.10.1", "cpython", NULL, 0);
        ck_assert_int_eq(chmod(at("a/bin/python3.10"), 0644), 0);
        link_to("python3.9-gone", "a/bin/python3.9");
        fake("b/bin/python3.11", "3.11.9", "cpython", NULL, 0);
        fake("b/bin/python3.13", "3.13.0", "cpython", NULL, 0);
        fake("b/bin/python3.14", "3.14.0", "cpython", NULL, 1);
        fake("b/bin/python3.15", "3.15.0", "pypy", NULL, 0);
        fake("b/bin/python3.16", "3.16.0", "cpython", NULL, 0);
        {
                /* Says something that is no JSON. */
                int fd = open(at("b/bin/python3.16"), O_WRONLY | O_TRUNC | O_CLOEXEC);
                const char *t = "#!/bin/sh\necho 'Python 3.16.0'\n";
                ck_assert_int_ge(fd, 0);
                ck_assert_int_eq(write_all(fd, t, strlen(t)), 0);
                close(fd);
        }
        fake("b/bin/python3.17", "3.17.0", "cpython", "/nonexistent/python3.17", 0);
        link_to("../../a/bin/python3.12", "c/bin/python3");
        fake("opt/3.14.1/bin/python3.14", "3.14.1", "cpython", NULL, 0);
        fake("opt/3.15.0+freethreaded/bin/python3.15", "3.15.0", "cpython", NULL, 0);
        fake("home/hb/python3.8", "3.8.18", "cpython", NULL, 0);
}

static void remove_tree(void) {
        ck_assert_int_eq(rm_rf_untrusted(top), 0);
}

static char **search_path(void) {
        char **l = strv_new();

        ck_assert_int_eq(strv_extend(&l, at("a/bin")), 0);
        ck_assert_int_eq(strv_extend(&l, at("missing/bin")), 0);
        ck_assert_int_eq(strv_extend(&l, at("b/bin")), 0);
        ck_assert_int_eq(strv_extend(&l, at("c/bin")), 0);
        ck_assert_int_eq(strv_extend(&l, at("opt/*/bin")), 0);
        ck_assert_int_eq(strv_extend(&l, "~/hb"), 0);
        return l;
}

START_TEST(test_search_dirs) {
        _cleanup_strv_free_ char **path = NULL, **dirs = NULL, **rootish = NULL;
        _cleanup_free_ char *home = NULL;

        make_tree();
        path = search_path();
        home = strdup(at("home"));
        dirs = pythons_search_dirs(path, home);
        ck_assert_ptr_nonnull(dirs);
        /* In order; the pattern expanded in place, without the "+" build; "~/" in home. */
        const char *want[] = { at("a/bin"), at("missing/bin"), at("b/bin"), at("c/bin"), NULL };
        for (size_t i = 0; i < 4; i++)
                ck_assert_str_eq(dirs[i], want[i]);
        ck_assert_str_eq(dirs[4], at("opt/3.14.1/bin"));
        ck_assert_str_eq(dirs[5], at("home/hb"));
        ck_assert_ptr_null(dirs[6]);
        /* No home (a root daemon): the "~/" entry is left out. */
        rootish = pythons_search_dirs(path, NULL);
        ck_assert_ptr_nonnull(rootish);
        ck_assert_uint_eq(strv_length(rootish), 5);
        ck_assert(!strv_contains(rootish, at("home/hb")));
        remove_tree();
}
END_TEST

START_TEST(test_candidates_in_order_each_once) {
        _cleanup_strv_free_ char **path = NULL, **dirs = NULL, **found = NULL;
        _cleanup_free_ char *home = NULL;

        make_tree();
        path = search_path();
        home = strdup(at("home"));
        dirs = pythons_search_dirs(path, home);
        ck_assert_ptr_nonnull(dirs);
        ck_assert_int_eq(pythons_candidates(dirs, &found), 0);
        /* a/bin/python3 is found first, as the binary it links to; that binary and c/bin/python3 are the same one.
         * Not: python, python3.12-config (names), python3.10 (not executable), python3.9 (dangling), the "+" build. */
        const char *want[] = {
                at("a/bin/python3.12"), at("b/bin/python3.11"), at("b/bin/python3.13"), at("b/bin/python3.14"),
                NULL,
        };
        for (size_t i = 0; want[i]; i++)
                ck_assert_str_eq(found[i], want[i]);
        ck_assert_str_eq(found[4], at("b/bin/python3.15"));
        ck_assert_str_eq(found[5], at("b/bin/python3.16"));
        ck_assert_str_eq(found[6], at("b/bin/python3.17"));
        ck_assert_str_eq(found[7], at("opt/3.14.1/bin/python3.14"));
        ck_assert_str_eq(found[8], at("home/hb/python3.8"));
        ck_assert_ptr_null(found[9]);
        remove_tree();
}
END_TEST

/* Probe every candidate as the runtime does, into p; how many were added. */
static unsigned probe_all(Pythons *p, unsigned *ret_refused) {
        _cleanup_strv_free_ char **path = search_path(), **dirs = NULL, **found = NULL;
        _cleanup_free_ char *home = strdup(at("home"));
        unsigned added = 0, refused = 0;

        dirs = pythons_search_dirs(path, home);
        ck_assert_ptr_nonnull(dirs);
        ck_assert_int_eq(pythons_candidates(dirs, &found), 0);
        for (size_t i = 0; found[i]; i++) {
                _cleanup_free_ char *line = probe(found[i]);
                int k = line ? pythons_add_probe(p, line) : -EIO;
                if (k > 0)
                        added++;
                else
                        refused++;
        }
        *ret_refused = refused;
        return added;
}

START_TEST(test_unusable_skipped_and_newest_first) {
        _cleanup_(pythons_done) Pythons p = {};
        _cleanup_free_ char *list = NULL, *line = NULL;
        unsigned refused;

        make_tree();
        /* 3.14 fails, 3.15 is PyPy, 3.16 prints no JSON, 3.17 names a file that is not there. */
        ck_assert_uint_eq(probe_all(&p, &refused), 5);
        ck_assert_uint_eq(refused, 4);
        list = pythons_list(&p);
        ck_assert_str_eq(list, "3.14.1, 3.13.0, 3.12.4, 3.11.9, 3.8.18");
        ck_assert_str_eq(p.items[2]->executable, at("a/bin/python3.12"));
        ck_assert_str_eq(p.items[2]->prefix, "/opt/fake");
        /* Each refusal by name. */
        ck_assert_ptr_null(probe(at("b/bin/python3.14")));
        line = probe(at("b/bin/python3.15"));
        ck_assert_int_eq(pythons_add_probe(&p, line), -EINVAL);
        free(line);
        line = probe(at("b/bin/python3.16"));
        ck_assert_int_eq(pythons_add_probe(&p, line), -EINVAL);
        free(line);
        line = probe(at("b/bin/python3.17"));
        ck_assert_int_eq(pythons_add_probe(&p, line), -ENOENT);
        free(line);
        /* The same binary again, also by a link's name: a duplicate. */
        line = probe(at("c/bin/python3"));
        ck_assert_int_eq(pythons_add_probe(&p, line), 0);
        ck_assert_int_eq(pythons_add(&p, "3.12.4", at("a/bin/python3.12"), "/opt/fake"), 0);
        ck_assert_uint_eq(p.n, 5);
        remove_tree();
}
END_TEST

static void assert_chosen(const Pythons *p, const char *want, const char *requires, const char *version) {
        _cleanup_free_ char *err = NULL;
        const Python *py = pythons_choose(p, want, requires, &err);

        ck_assert_msg(py, "%s / %s: %s", want ?: "-", requires ?: "-", err ?: "");
        ck_assert_str_eq(py->version, version);
        ck_assert_ptr_null(err);
}

static void assert_refused(const Pythons *p, const char *want, const char *requires, const char *error) {
        _cleanup_free_ char *err = NULL;

        ck_assert_ptr_null(pythons_choose(p, want, requires, &err));
        ck_assert_ptr_nonnull(err);
        ck_assert_str_eq(err, error);
}

START_TEST(test_choose) {
        _cleanup_(pythons_done) Pythons p = {}, none = {};
        unsigned refused;

        make_tree();
        ck_assert_uint_eq(probe_all(&p, &refused), 5);
        assert_chosen(&p, NULL, NULL, "3.14.1");
        assert_chosen(&p, "3.12", NULL, "3.12.4");
        assert_chosen(&p, "3.12.4", NULL, "3.12.4");
        assert_chosen(&p, "3", NULL, "3.14.1");
        assert_chosen(&p, NULL, ">=3.12", "3.14.1");
        assert_chosen(&p, NULL, ">=3.12,<3.14", "3.13.0");
        assert_chosen(&p, NULL, "<3.11", "3.8.18");
        assert_chosen(&p, "3.11", ">=3.9", "3.11.9");
        /* "3.1" is not a prefix of 3.11 or 3.14: versions match by component. */
        assert_refused(&p, "3.1", NULL, "Python 3.1 is not available; available: 3.14.1, 3.13.0, 3.12.4, 3.11.9, 3.8.18");
        assert_refused(&p, "3.12.5", NULL,
                       "Python 3.12.5 is not available; available: 3.14.1, 3.13.0, 3.12.4, 3.11.9, 3.8.18");
        assert_refused(&p, NULL, ">=3.15",
                       "no available Python satisfies requires-python \">=3.15\"; available: 3.14.1, 3.13.0, 3.12.4, "
                       "3.11.9, 3.8.18");
        assert_refused(&p, "3.12", ">=3.13",
                       "no available Python is both 3.12 and within requires-python \">=3.13\"; available: 3.14.1, "
                       "3.13.0, 3.12.4, 3.11.9, 3.8.18");
        {
                _cleanup_free_ char *err = NULL;
                ck_assert_ptr_null(pythons_choose(&p, NULL, "=>3.12", &err));
                ck_assert_ptr_nonnull(strstr(err, "requires-python \"=>3.12\" is not a valid version specifier"));
        }
        assert_refused(&none, "3.12", NULL,
                       "no Python interpreter is available to the sandbox service (the administrator can set "
                       "python-search-path)");
        remove_tree();
}
END_TEST

START_TEST(test_filter) {
        _cleanup_(pythons_done) Pythons p = {};
        _cleanup_free_ char *list = NULL;
        char *allowed[] = { (char *) "3.12", (char *) "3.8.18", (char *) "3.1", NULL }, *all[] = { NULL };
        unsigned refused;

        make_tree();
        ck_assert_uint_eq(probe_all(&p, &refused), 5);
        pythons_filter(&p, all);
        ck_assert_uint_eq(p.n, 5);
        pythons_filter(&p, allowed);
        list = pythons_list(&p);
        ck_assert_str_eq(list, "3.12.4, 3.8.18");
        assert_chosen(&p, NULL, NULL, "3.12.4");
        remove_tree();
}
END_TEST

static Suite *pythons_suite(void) {
        Suite *s = suite_create("pythons");
        TCase *tc = tcase_create("finder");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_search_dirs);
        tcase_add_test(tc, test_candidates_in_order_each_once);
        tcase_add_test(tc, test_unusable_skipped_and_newest_first);
        tcase_add_test(tc, test_choose);
        tcase_add_test(tc, test_filter);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(pythons_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
