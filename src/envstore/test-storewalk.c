/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <systemd/sd-event.h>
#include <time.h>
#include <unistd.h>

#include "envstore/storewalk.h"
#include "fs-util.h"
#include "macro.h"
#include "strv.h"

#define MARKER ".marker"
#define KIB 1024ULL

/* TOP/envs (the store) and TOP/uv (the uv cache), made anew for each test. */
static char top[] = "/tmp/test-storewalk-XXXXXX";
static char envs[PATH_MAX], uv[PATH_MAX];

static void setup(void) {
        strcpy(top, "/tmp/test-storewalk-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(top));
        snprintf(envs, sizeof(envs), "%s/envs", top);
        snprintf(uv, sizeof(uv), "%s/uv", top);
        ck_assert_int_eq(mkdir(envs, 0755), 0);
        ck_assert_int_eq(mkdir(uv, 0755), 0);
}

static void teardown(void) {
        (void) rm_rf_untrusted(top);
}

static void data_file(const char *path, size_t size) {
        _cleanup_free_ char *buf = malloc(size);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

        ck_assert_int_ge(fd, 0);
        ck_assert_ptr_nonnull(buf);
        for (size_t i = 0; i < size; i++)
                buf[i] = (char) (i * 7 + 3);
        ck_assert_int_eq(write_all(fd, buf, size), 0);
        ck_assert_int_eq(fsync(fd), 0);
        close(fd);
}

/* An environment last used days ago, holding size bytes of its own. */
static void fake_env(const char *name, double days, size_t size) {
        char p[PATH_MAX + 64];
        struct timespec ts[2];

        snprintf(p, sizeof(p), "%s/%s", envs, name);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        if (size > 0) {
                snprintf(p, sizeof(p), "%s/%s/own", envs, name);
                data_file(p, size);
        }
        snprintf(p, sizeof(p), "%s/%s/" MARKER, envs, name);
        data_file(p, 1);
        ts[0].tv_sec = ts[1].tv_sec = time(NULL) - (time_t) (days * 86400);
        ts[0].tv_nsec = ts[1].tv_nsec = 0;
        ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
}

static void link_into(const char *from, const char *env, const char *name) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof(p), "%s/%s/%s", envs, env, name);
        ck_assert_int_eq(link(from, p), 0);
}

static bool env_exists(const char *name) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof(p), "%s/%s", envs, name);
        return access(p, F_OK) >= 0;
}

static StoreWalkOptions options(uint64_t max_size) {
        return (StoreWalkOptions) {
                .envs = envs,
                .uv_cache = uv,
                .max_size = max_size,
                .grace_sec = 3600,
                .marker = MARKER,
                .collect = true,
        };
}

START_TEST(test_hardlinks_count_once) {
        char shared[PATH_MAX + 16];
        StoreWalkResult r = {};
        StoreWalkOptions o = options(0);

        snprintf(shared, sizeof(shared), "%s/shared", uv);
        data_file(shared, 512 * KIB);
        fake_env("a", 2, 256 * KIB);
        fake_env("b", 2, 0);
        link_into(shared, "a", "shared");
        link_into(shared, "b", "shared");
        link_into(shared, "b", "shared-again");

        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        /* The shared file in the cache's share, once; a's own in the store's. */
        ck_assert_uint_ge(r.cache_bytes, 512 * KIB);
        ck_assert_uint_lt(r.cache_bytes, 600 * KIB);
        ck_assert_uint_ge(r.store_bytes, 256 * KIB);
        ck_assert_uint_lt(r.store_bytes, 400 * KIB);
        ck_assert_uint_eq(r.total_bytes, r.store_bytes + r.cache_bytes);
        ck_assert_uint_eq(r.n_envs, 2);
        ck_assert_uint_eq(r.n_removed, 0);
}
END_TEST

static void on_removed(const char *name, uint64_t bytes, const char *reason, void *userdata) {
        char ***list = userdata;
        ck_assert_int_ge(strv_extend(list, name), 0);
}

START_TEST(test_least_recently_used_first_until_under) {
        _cleanup_strv_free_ char **removed = strv_new();
        StoreWalkResult r = {};
        StoreWalkOptions o = options(700 * KIB);
        char shared[PATH_MAX + 16];

        snprintf(shared, sizeof(shared), "%s/shared", uv);
        data_file(shared, 200 * KIB);
        fake_env("oldest", 30, 300 * KIB);
        fake_env("older", 20, 300 * KIB);
        link_into(shared, "older", "shared");   /* removing it frees its 300 KiB, and the cache's link once uv lets go */
        fake_env("old", 10, 100 * KIB);
        fake_env("recent", 0, 300 * KIB);       /* within the grace period */

        ck_assert_int_eq(store_walk(&o, &r, on_removed, &removed), 0);
        /* 1.2 MiB: oldest goes (900 KiB), then older (600 KiB): under 700 KiB, old stays. */
        ck_assert_str_eq(removed[0], "oldest");
        ck_assert_str_eq(removed[1], "older");
        ck_assert_ptr_null(removed[2]);
        ck_assert(!env_exists("oldest") && !env_exists("older"));
        ck_assert(env_exists("old") && env_exists("recent"));
        ck_assert(!r.over);
        ck_assert_uint_le(r.total_bytes, 700 * KIB);
        ck_assert_int_eq(access(shared, F_OK), 0);
}
END_TEST

START_TEST(test_grace_keep_and_measure_only) {
        _cleanup_strv_free_ char **keep = strv_new();
        StoreWalkResult r = {};
        StoreWalkOptions o = options(1);

        fake_env("recent", 0.01, 100 * KIB);
        fake_env("kept", 5, 100 * KIB);
        fake_env("old", 5, 100 * KIB);
        ck_assert_int_ge(strv_extend(&keep, "kept"), 0);
        o.keep = keep;

        o.collect = false;
        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert_uint_eq(r.n_removed, 0);
        ck_assert(r.over);
        ck_assert(env_exists("old"));

        o.collect = true;
        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert_uint_eq(r.n_removed, 1);
        ck_assert(!env_exists("old"));
        ck_assert(env_exists("recent") && env_exists("kept"));
        ck_assert(r.over);   /* what is left may not go */
        store_walk_result_done(&r);
}
END_TEST

START_TEST(test_age_limit) {
        StoreWalkResult r = {};
        StoreWalkOptions o = options(0);

        o.max_age_usec = 7 * 86400 * USEC_PER_SEC;
        fake_env("month", 30, 0);
        fake_env("day", 1, 0);
        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert(!env_exists("month") && env_exists("day"));
        ck_assert_uint_eq(r.n_envs, 1);
}
END_TEST

/* TOP/pythons/NAME: an installed Python (read-only, as pyinstall.c leaves it) installed days ago. */
static void fake_python(const char *name, double days, size_t size) {
        char p[PATH_MAX + 128];
        struct timespec ts[2];

        snprintf(p, sizeof(p), "%s/pythons/%s", top, name);
        ck_assert_int_eq(mkdir_p(p, 0755), 0);
        snprintf(p, sizeof(p), "%s/pythons/%s/bin", top, name);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        snprintf(p, sizeof(p), "%s/pythons/%s/bin/python3", top, name);
        data_file(p, size);
        snprintf(p, sizeof(p), "%s/pythons/%s/.installed", top, name);
        data_file(p, 1);
        ts[0].tv_sec = ts[1].tv_sec = time(NULL) - (time_t) (days * 86400);
        ts[0].tv_nsec = ts[1].tv_nsec = 0;
        ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
        snprintf(p, sizeof(p), "%s/pythons/%s/bin", top, name);
        ck_assert_int_eq(chmod(p, 0555), 0);
}

/* An environment (or build) that runs on the Python NAME, as uv's pyvenv.cfg says. */
static void env_on_python(const char *env, const char *python) {
        char p[PATH_MAX + 128];
        FILE *f;

        snprintf(p, sizeof(p), "%s/%s/pyvenv.cfg", envs, env);
        f = fopen(p, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "home = %s/pythons/%s/bin\nimplementation = CPython\n", top, python);
        ck_assert_int_eq(fclose(f), 0);
}

static bool python_exists(const char *name) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof(p), "%s/pythons/%s", top, name);
        return access(p, F_OK) >= 0;
}

START_TEST(test_pythons_counted_and_collected_when_unused) {
        _cleanup_strv_free_ char **removed = strv_new();
        char pythons[PATH_MAX + 16], link_path[PATH_MAX + 64], build[PATH_MAX + 32];
        StoreWalkResult r = {};
        StoreWalkOptions o = options(0);

        snprintf(pythons, sizeof(pythons), "%s/pythons", top);
        o.pythons = pythons;
        o.pythons_marker = ".installed";
        fake_python("cpython-3.12.1-linux-x86_64-gnu", 10, 400 * KIB);    /* used by an environment */
        fake_python("cpython-3.13.0-linux-x86_64-gnu", 10, 400 * KIB);    /* by a build in progress */
        fake_python("cpython-3.10.9-linux-x86_64-gnu", 10, 400 * KIB);    /* by nothing */
        fake_python("cpython-3.9.1-linux-x86_64-gnu", 0, 400 * KIB);      /* by nothing, just installed */
        snprintf(link_path, sizeof(link_path), "%s/cpython-3.10-linux-x86_64-gnu", pythons);
        ck_assert_int_eq(symlink("cpython-3.10.9-linux-x86_64-gnu", link_path), 0);
        fake_env("env", 0, 0);
        env_on_python("env", "cpython-3.12.1-linux-x86_64-gnu");
        snprintf(build, sizeof(build), "%s/.build-x", envs);
        ck_assert_int_eq(mkdir(build, 0755), 0);
        env_on_python(".build-x", "cpython-3.13.0-linux-x86_64-gnu");

        /* Measured: all four Pythons are in the store's bytes. */
        o.collect = false;
        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert_uint_ge(r.store_bytes, 1600 * KIB);
        ck_assert(python_exists("cpython-3.10.9-linux-x86_64-gnu"));

        /* Over the budget: only the one nothing uses and that is past the grace period goes, with uv's link. */
        o.collect = true;
        o.max_size = 1;
        ck_assert_int_eq(store_walk(&o, &r, on_removed, &removed), 0);
        ck_assert_str_eq(removed[0], STORE_WALK_PYTHON_PREFIX "cpython-3.10.9-linux-x86_64-gnu");
        ck_assert_ptr_null(removed[1]);
        ck_assert(!python_exists("cpython-3.10.9-linux-x86_64-gnu"));
        ck_assert_int_lt(access(link_path, F_OK), 0);
        ck_assert(python_exists("cpython-3.12.1-linux-x86_64-gnu") && python_exists("cpython-3.13.0-linux-x86_64-gnu") &&
                  python_exists("cpython-3.9.1-linux-x86_64-gnu"));
        ck_assert_uint_ge(r.removed_bytes, 400 * KIB);
        store_walk_result_done(&r);

        /* Under the budget and young enough: nothing goes. */
        o.max_size = 0;
        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert(python_exists("cpython-3.9.1-linux-x86_64-gnu"));
}
END_TEST

/* A file in the uv cache (directories made as needed), size bytes. */
static void cache_file(const char *rel, size_t size) {
        char p[PATH_MAX + 128], *slash;

        snprintf(p, sizeof(p), "%s/%s", uv, rel);
        slash = strrchr(p, '/');
        *slash = 0;
        ck_assert_int_eq(mkdir_p(p, 0755), 0);
        *slash = '/';
        data_file(p, size);
}

/* env has the distribution dist-info (as "name-version.dist-info") installed. */
static void env_dist(const char *env, const char *dist_info) {
        char p[PATH_MAX + 128];

        snprintf(p, sizeof(p), "%s/%s/lib/python3.11/site-packages/%s", envs, env, dist_info);
        ck_assert_int_eq(mkdir_p(p, 0755), 0);
}

START_TEST(test_held_stays_even_least_recent) {
        _cleanup_strv_free_ char **keep = strv_new(), **removed = strv_new();
        StoreWalkResult r = {};
        StoreWalkOptions o = options(300 * KIB);

        o.grace_sec = 120;
        fake_env("running", 30, 400 * KIB);   /* the least recently used, and alone over the budget: held */
        fake_env("idle", 0.01, 100 * KIB);    /* 15 minutes ago: past the short grace */
        fake_env("looked-up", 0, 100 * KIB);  /* just looked up: not yet held, within the grace */
        ck_assert_int_ge(strv_extend(&keep, "running"), 0);
        o.keep = keep;

        ck_assert_int_eq(store_walk(&o, &r, on_removed, &removed), 0);
        ck_assert_str_eq(removed[0], "idle");
        ck_assert_ptr_null(removed[1]);
        ck_assert(env_exists("running") && env_exists("looked-up") && !env_exists("idle"));
        ck_assert(r.over);
        /* looked-up goes once the grace has passed: a walk then, not all of the uv cache now. */
        ck_assert(r.kept_young);
        ck_assert(!r.cache_clean_all);
        store_walk_result_done(&r);

        /* Once released (and past the grace), it goes like any other. */
        o.keep = NULL;
        o.grace_sec = 0;
        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert(!env_exists("running"));
        store_walk_result_done(&r);
}
END_TEST

START_TEST(test_cache_linked_with_env_counts_as_freed) {
        char wheel[PATH_MAX + 64];
        StoreWalkResult r = {};
        StoreWalkOptions o = options(700 * KIB);

        /* The cache's unpacked wheel, linked into old only: removing old and cleaning its package frees it. */
        cache_file("archive-v0/abc/big.so", 600 * KIB);
        snprintf(wheel, sizeof(wheel), "%s/archive-v0/abc/big.so", uv);
        cache_file("wheels-v8/pypi/big/big-1.0-py3-none-any.http", 1);
        fake_env("old", 10, 100 * KIB);
        link_into(wheel, "old", "big.so");
        env_dist("old", "big-1.0.dist-info");
        fake_env("new", 0, 100 * KIB);

        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert_uint_eq(r.n_removed, 1);
        ck_assert(!env_exists("old") && env_exists("new"));
        ck_assert_uint_ge(r.removed_bytes, 700 * KIB);
        ck_assert_uint_lt(r.cache_bytes, 100 * KIB);
        ck_assert(!r.over);
        /* Under the budget as counted, once the cache lets go of what only old used. */
        ck_assert_ptr_nonnull(r.cache_clean);
        ck_assert_str_eq(r.cache_clean[0], "big");
        ck_assert_ptr_null(r.cache_clean[1]);
        ck_assert(!r.cache_clean_all);
        store_walk_result_done(&r);
}
END_TEST

START_TEST(test_cache_clean_decision) {
        _cleanup_strv_free_ char **keep = strv_new();
        StoreWalkResult r = {};
        StoreWalkOptions o = options(200 * KIB);

        cache_file("wheels-v8/pypi/alpha/alpha-1.0-py3-none-any.whl", 100 * KIB);
        cache_file("wheels-v8/pypi/beta/beta-2.0-py3-none-any.whl", 100 * KIB);
        cache_file("wheels-v8/index/0123abcd/delta-pkg/x.http", 100 * KIB);
        cache_file("simple-v28/pypi/Gamma_X.rkyv", 10 * KIB);
        cache_file("archive-v0/zzz/blob", 100 * KIB);   /* no package's name: never a candidate */
        fake_env("held", 5, 100 * KIB);
        env_dist("held", "beta-2.0.dist-info");
        fake_env("gone", 5, 0);
        env_dist("gone", "alpha-1.0.dist-info");
        ck_assert_int_ge(strv_extend(&keep, "held"), 0);
        o.keep = keep;

        /* Over with gone removed: the cache gives up what held does not use. */
        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert(!env_exists("gone") && env_exists("held"));
        ck_assert(r.over);
        ck_assert(!r.cache_clean_all);
        ck_assert_ptr_nonnull(r.cache_clean);
        ck_assert(strv_contains(r.cache_clean, "alpha"));
        ck_assert(strv_contains(r.cache_clean, "delta-pkg"));
        ck_assert(strv_contains(r.cache_clean, "gamma-x"));
        ck_assert(!strv_contains(r.cache_clean, "beta"));
        ck_assert_uint_eq(strv_length(r.cache_clean), 3);
        store_walk_result_done(&r);

        ck_assert(!r.kept_young);

        /* Only what held uses is left in the cache: all of it is the last resort. */
        ck_assert_int_eq(rm_rf_untrusted(uv), 0);
        cache_file("wheels-v8/pypi/beta/beta-2.0-py3-none-any.whl", 300 * KIB);
        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert(r.over);
        ck_assert(r.cache_clean_all);
        store_walk_result_done(&r);

        /* Under the budget: nothing to clean. */
        o.max_size = 100 * 1024 * KIB;
        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert(!r.over && !r.cache_clean && !r.cache_clean_all);

        /* Measure only: never a decision. */
        o.max_size = 1;
        o.collect = false;
        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert(r.over && !r.cache_clean && !r.cache_clean_all);
}
END_TEST

START_TEST(test_flocked_stays) {
        char p[PATH_MAX + 64];
        StoreWalkResult r = {};
        StoreWalkOptions o = options(1);
        int fd;

        o.grace_sec = 0;
        fake_env("held-elsewhere", 30, 100 * KIB);
        fake_env("free", 20, 100 * KIB);
        /* As another daemon's envstore_hold() does. */
        snprintf(p, sizeof(p), "%s/held-elsewhere", envs);
        fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(flock(fd, LOCK_SH | LOCK_NB), 0);

        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert(env_exists("held-elsewhere") && !env_exists("free"));
        ck_assert_uint_eq(r.n_removed, 1);
        store_walk_result_done(&r);

        close(fd);
        ck_assert_int_eq(store_walk(&o, &r, NULL, NULL), 0);
        ck_assert(!env_exists("held-elsewhere"));
        store_walk_result_done(&r);
}
END_TEST

/* store_walk_spawn(): the same walk in a child (offloop.h), its result and removals heard through the loop. */
typedef struct Spawned {
        bool done, ok;
        StoreWalkResult result;
        char **removed;
} Spawned;

static void on_spawned(const StoreWalkResult *result, char **removed, void *userdata) {
        Spawned *sp = userdata;

        sp->done = true;
        sp->ok = result != NULL;
        if (result) {
                sp->result = *result;
                sp->result.cache_clean = NULL;
                ck_assert_int_ge(strv_extend_strv(&sp->result.cache_clean, result->cache_clean), 0);
        }
        ck_assert_int_ge(strv_extend_strv(&sp->removed, removed), 0);
}

START_TEST(test_spawn_reports_like_the_walk) {
        StoreWalkOptions o = options(300 * KIB);
        Spawned sp = {};
        StoreWalkJob *j = NULL;
        sd_event *e = NULL;
        sigset_t ss;

        /* Under make check-valgrind the forked child fails its own leak check at _exit(): make check runs this. */
        if (getenv("MCP_SANDBOX_VALGRIND"))
                return;

        fake_env("old", 3, 256 * KIB);
        fake_env("new", 2, 256 * KIB);
        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &ss, NULL), 0);
        ck_assert_int_ge(sd_event_new(&e), 0);
        ck_assert_int_eq(store_walk_spawn(e, &o, on_spawned, &sp, &j), 0);
        while (!sp.done)
                ck_assert_int_ge(sd_event_run(e, UINT64_MAX), 0);
        store_walk_job_free(j);
        sd_event_unref(e);

        ck_assert(sp.ok);
        ck_assert_uint_eq(sp.result.n_removed, 1);
        ck_assert_uint_eq(sp.result.n_envs, 1);
        ck_assert_uint_ge(sp.result.removed_bytes, 256 * KIB);
        ck_assert_ptr_nonnull(sp.removed);
        ck_assert_str_eq(sp.removed[0], "old");
        ck_assert_ptr_null(sp.removed[1]);
        ck_assert(!env_exists("old"));
        ck_assert(env_exists("new"));
        store_walk_result_done(&sp.result);
        strv_free(sp.removed);
}
END_TEST

static Suite *storewalk_suite(void) {
        Suite *s = suite_create("storewalk");
        TCase *tc = tcase_create("walk");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_hardlinks_count_once);
        tcase_add_test(tc, test_least_recently_used_first_until_under);
        tcase_add_test(tc, test_grace_keep_and_measure_only);
        tcase_add_test(tc, test_age_limit);
        tcase_add_test(tc, test_pythons_counted_and_collected_when_unused);
        tcase_add_test(tc, test_held_stays_even_least_recent);
        tcase_add_test(tc, test_cache_linked_with_env_counts_as_freed);
        tcase_add_test(tc, test_cache_clean_decision);
        tcase_add_test(tc, test_flocked_stays);
        tcase_add_test(tc, test_spawn_reports_like_the_walk);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(storewalk_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
