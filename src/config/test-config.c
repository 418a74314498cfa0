/* SPDX-License-Identifier: MIT */
/*
 * The config module's suite: every kind of setting through the file, the drop-ins and the command line, the values'
 * parsers, the checks of the settings together, access lists and reload. Over 800 lines, one suite: many short
 * independent cases, one program for one module.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "config/config.h"
#include "macro.h"
#include "strv.h"

/* ---- helpers ----------------------------------------------------------- */

typedef struct Redirect {
        int fd;          /* 1 or 2 */
        int saved;
        FILE *tmp;
} Redirect;

static void redirect_begin(Redirect *r, int fd) {
        fflush(fd == 1 ? stdout : stderr);
        r->fd = fd;
        r->tmp = tmpfile();
        ck_assert_ptr_nonnull(r->tmp);
        r->saved = dup(fd);
        ck_assert_int_ge(r->saved, 0);
        ck_assert_int_ge(dup2(fileno(r->tmp), fd), 0);
}

/* Restores the fd and returns what was written to it. */
static char *redirect_end(Redirect *r) {
        char *text;
        long n;

        fflush(r->fd == 1 ? stdout : stderr);
        ck_assert_int_ge(dup2(r->saved, r->fd), 0);
        close(r->saved);
        n = ftell(r->tmp);
        ck_assert_int_ge(n, 0);
        text = calloc(1, (size_t) n + 1);
        ck_assert_ptr_nonnull(text);
        rewind(r->tmp);
        ck_assert_uint_eq(fread(text, 1, (size_t) n, r->tmp), (size_t) n);
        fclose(r->tmp);
        return text;
}

/* Parses text as the configuration file "name"; returns what config_parse_file() returns. */
static int parse_text(Config *c, const char *name, const char *text, char **ret_log) {
        FILE *f = fmemopen((void *) text, strlen(text), "r");
        Redirect rd;
        int r;

        ck_assert_ptr_nonnull(f);
        redirect_begin(&rd, 2);
        r = config_parse_file(c, name, f);
        _cleanup_free_ char *log = redirect_end(&rd);
        fclose(f);
        if (ret_log)
                *ret_log = TAKE_PTR(log);
        return r;
}

static char *dump(const Config *c) {
        char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        ck_assert_ptr_nonnull(f);
        config_dump(c, f);
        ck_assert_int_eq(fclose(f), 0);
        return text;
}

static void write_file(const char *dir, const char *name, const char *text) {
        char path[PATH_MAX];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        f = fopen(path, "we");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        ck_assert_int_eq(fclose(f), 0);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) st;
        (void) flag;
        (void) ftw;
        return remove(path);
}

static void rm_rf(const char *dir) {
        ck_assert_int_eq(nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

static void assert_strv(char **l, const char *const *want, size_t n) {
        ck_assert_uint_eq(strv_length(l), n);
        for (size_t i = 0; i < n; i++)
                ck_assert_str_eq(l[i], want[i]);
}

static void setup(void) {
        unsetenv("CACHE_DIRECTORY");
}

/* ---- values ------------------------------------------------------------ */

START_TEST(test_defaults) {
        _cleanup_(config_done) Config c;
        static const char *const search[] = { "/usr/local/bin", "/usr/bin", "/opt/python*/bin",
                                              "~/.local/share/uv/python/cpython-*/bin", "~/.pyenv/versions/*/bin" };

        config_init(&c);
        ck_assert_uint_eq(c.max_connections, 256);
        ck_assert_uint_eq(c.max_message_size, 16 * 1024 * 1024);
        ck_assert_uint_eq(c.default_timeout_usec, 30 * USEC_PER_SEC);
        ck_assert_int_eq(c.log_level, LOG_INFO);
        ck_assert(!c.network);
        ck_assert(!c.unsafe_no_sandbox);
        ck_assert(c.system_certs);
        ck_assert_ptr_null(c.listen_path);
        ck_assert_ptr_nonnull(c.cache_dir);
        ck_assert_str_eq(c.bwrap_path, BWRAP_PATH);
        ck_assert_str_eq(c.uv_path, UV_PATH);
        assert_strv(c.python_search_path, search, 5);
        /* Pythons are installed on demand unless offline says no network, or the setting does. */
        ck_assert_int_eq(c.python_downloads, CONFIG_AUTO);
        ck_assert(config_python_downloads(&c));
        c.offline = true;
        ck_assert(!config_python_downloads(&c));
        c.python_downloads = 1;
        ck_assert(config_python_downloads(&c));
        c.offline = false;
        {
                _cleanup_free_ char *err = NULL;
                ck_assert_int_eq(config_set(&c, "python-downloads", "no", &err), 0);
                ck_assert(!config_python_downloads(&c));
                ck_assert_int_eq(config_set(&c, "python-downloads", "auto", &err), 0);
                ck_assert_int_eq(c.python_downloads, CONFIG_AUTO);
                ck_assert_int_lt(config_set(&c, "python-downloads", "maybe", &err), 0);
                ck_assert_ptr_nonnull(strstr(err, "yes, no or auto"));
        }
        ck_assert_uint_eq(strv_length(c.python_versions), 0);
        ck_assert_uint_eq(strv_length(c.warmup), 0);
        /* 0x7B000000-0x7B00FFFF: 65536 uids of no account, container or DynamicUser=. */
        ck_assert_uint_eq(c.sandbox_uids.first, 2063597568);
        ck_assert_uint_eq(c.sandbox_uids.last, 2063663103);
        ck_assert_uint_eq(c.sandbox_uids.first, 0x7B000000);
        ck_assert_uint_eq(c.sandbox_uids.last - c.sandbox_uids.first + 1, 65536);
}
END_TEST

START_TEST(test_cache_directory_env) {
        _cleanup_(config_done) Config a, b;

        /* systemd's CacheDirectory= sets $CACHE_DIRECTORY; a list of several is not used. */
        setenv("CACHE_DIRECTORY", "/var/cache/elsewhere", 1);
        config_init(&a);
        ck_assert_str_eq(a.cache_dir, "/var/cache/elsewhere");
        setenv("CACHE_DIRECTORY", "/a:/b", 1);
        config_init(&b);
        ck_assert_str_ne(b.cache_dir, "/a:/b");
        unsetenv("CACHE_DIRECTORY");
}
END_TEST

START_TEST(test_parse_size) {
        static const struct {
                const char *in;
                uint64_t out;
        } good[] = {
                { "0", 0 },
                { "512", 512 },
                { "512B", 512 },
                { "4K", 4096 },
                { "4k", 4096 },
                { "4KiB", 4096 },
                { "16M", 16ULL << 20 },
                { "16 MiB", 16ULL << 20 },
                { "2G", 2ULL << 30 },
                { "2gib", 2ULL << 30 },
                { "1T", 1ULL << 40 },
                { "18446744073709551615", UINT64_MAX },
        };
        static const char *const bad[] = {
                "", "K", "-1", "+1", " 1", "1.5G", "12X", "1KB", "1 K B", "0x10",
                "18446744073709551616", "99999999999999999999", "20000000T", "16777216T",
        };
        uint64_t u;

        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                u = 1234;
                ck_assert_msg(parse_size(good[i].in, &u) == 0, "%s", good[i].in);
                ck_assert_msg(u == good[i].out, "%s: %" PRIu64, good[i].in, u);
        }
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                ck_assert_msg(parse_size(bad[i], &u) < 0, "accepted: %s", bad[i]);
        ck_assert_int_lt(parse_size(NULL, &u), 0);
}
END_TEST

START_TEST(test_parse_seconds) {
        static const struct {
                const char *in;
                uint64_t out;
        } good[] = {
                { "0", 0 },
                { "30", 30 * USEC_PER_SEC },
                { "30s", 30 * USEC_PER_SEC },
                { "30sec", 30 * USEC_PER_SEC },
                { "500ms", 500 * USEC_PER_MSEC },
                { "5min", 300 * USEC_PER_SEC },
                { "5m", 300 * USEC_PER_SEC },
                { "2h", 7200 * USEC_PER_SEC },
                { "1d", 86400 * USEC_PER_SEC },
                { "10 s", 10 * USEC_PER_SEC },
                { "3MIN", 180 * USEC_PER_SEC },
        };
        static const char *const bad[] = {
                "", "s", "-5", "1.5s", "5 years", "5us", "abc", "1 2", "999999999999999999d",
        };
        uint64_t u;

        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                u = 1234;
                ck_assert_msg(parse_seconds(good[i].in, &u) == 0, "%s", good[i].in);
                ck_assert_msg(u == good[i].out, "%s: %" PRIu64, good[i].in, u);
        }
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                ck_assert_msg(parse_seconds(bad[i], &u) < 0, "accepted: %s", bad[i]);
}
END_TEST

START_TEST(test_parse_bool) {
        static const char *const yes[] = { "1", "yes", "YES", "true", "True", "on", "y" };
        static const char *const no[] = { "0", "no", "No", "false", "FALSE", "off", "n" };
        static const char *const bad[] = { "", "2", "maybe", "yess", "enable", " yes" };
        bool b;

        for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
                b = false;
                ck_assert_int_eq(parse_bool(yes[i], &b), 0);
                ck_assert(b);
        }
        for (size_t i = 0; i < ELEMENTSOF(no); i++) {
                b = true;
                ck_assert_int_eq(parse_bool(no[i], &b), 0);
                ck_assert(!b);
        }
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                ck_assert_msg(parse_bool(bad[i], &b) == -EINVAL, "accepted: %s", bad[i]);
}
END_TEST

START_TEST(test_parse_uid_range) {
        static const struct {
                const char *in;
                uint32_t first, last;
        } good[] = {
                { "2063597568-2063663103", 2063597568, 2063663103 },
                { "100000-165535", 100000, 165535 },
                { "1-16", 1, 16 },                      /* 16 uids, the fewest */
                { "65518-65533", 65518, 65533 },        /* just below nobody */
                { "65535-65550", 65535, 65550 },        /* just above */
                { "2147483631-2147483646", 2147483631, 2147483646 },
                { "0100000-0100015", 100000, 100015 },  /* decimal, leading zeros and all */
        };
        static const char *const not_a_range[] = {
                "", "abc", "10-", "-10", "10", "-", "10 - 20", " 10-20", "10-20 ", "+10-20", "10-+20", "10--20",
                "0x10-0x20", "10-20-30", "1.5-20", "10-20x", "100000:165535",
                "18446744073709551616-18446744073709551617",
        };
        static const char *const unsafe[] = {
                "0-100",                        /* root */
                "0-65533",
                "65000-70000",                  /* nobody */
                "65534-65549",
                "65519-65534",
                "1-4294967294",
                "5-3",                          /* empty */
                "100-114",                      /* 15 uids */
                "100-100",
                "100-2147483647",               /* 2^31 - 1 and above */
                "2147483647-2147483662",
                "100-4294967295",               /* (uid_t) -1 */
                "4294967295-4294967310",
                "100-18446744073709551615",
        };
        UidRange u;

        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                u = (UidRange) { 7, 7 };
                ck_assert_msg(parse_uid_range(good[i].in, &u) == 0, "%s", good[i].in);
                ck_assert_msg(u.first == good[i].first && u.last == good[i].last, "%s: %" PRIu32 "-%" PRIu32,
                              good[i].in, u.first, u.last);
        }
        for (size_t i = 0; i < ELEMENTSOF(not_a_range); i++) {
                u = (UidRange) { 7, 7 };
                ck_assert_msg(parse_uid_range(not_a_range[i], &u) == -EINVAL, "\"%s\"", not_a_range[i]);
                ck_assert(u.first == 7 && u.last == 7);
        }
        for (size_t i = 0; i < ELEMENTSOF(unsafe); i++) {
                u = (UidRange) { 7, 7 };
                ck_assert_msg(parse_uid_range(unsafe[i], &u) == -ERANGE, "%s", unsafe[i]);
                ck_assert(u.first == 7 && u.last == 7);
        }
}
END_TEST

START_TEST(test_set_each_type) {
        _cleanup_(config_done) Config c;
        char *error = NULL;

        config_init(&c);

        ck_assert_int_eq(config_set(&c, "max-message-size", "1M", &error), 0);
        ck_assert_ptr_null(error);
        ck_assert_uint_eq(c.max_message_size, 1 << 20);

        ck_assert_int_eq(config_set(&c, "max-connections", "12", &error), 0);
        ck_assert_uint_eq(c.max_connections, 12);

        ck_assert_int_eq(config_set(&c, "default-timeout", "1500ms", &error), 0);
        ck_assert_uint_eq(c.default_timeout_usec, 1500 * USEC_PER_MSEC);

        ck_assert_int_eq(config_set(&c, "network", "yes", &error), 0);
        ck_assert(c.network);
        ck_assert_int_eq(config_set(&c, "network", "off", &error), 0);
        ck_assert(!c.network);

        ck_assert_int_eq(config_set(&c, "unsafe-no-sandbox", "yes", &error), 0);
        ck_assert(c.unsafe_no_sandbox);
        ck_assert_int_eq(config_set(&c, "unsafe-no-sandbox", "no", &error), 0);
        ck_assert(!c.unsafe_no_sandbox);

        ck_assert_int_eq(config_set(&c, "cache-dir", "/srv/cache", &error), 0);
        ck_assert_str_eq(c.cache_dir, "/srv/cache");
        ck_assert_int_eq(config_set(&c, "index-url", "", &error), 0);
        ck_assert_str_eq(c.index_url, "");

        ck_assert_int_eq(config_set(&c, "log-level", "debug", &error), 0);
        ck_assert_int_eq(c.log_level, LOG_DEBUG);
        ck_assert_int_eq(config_set(&c, "log-level", "error", &error), 0);
        ck_assert_int_eq(c.log_level, LOG_ERR);
        ck_assert_int_eq(config_set(&c, "log-level", "5", &error), 0);
        ck_assert_int_eq(c.log_level, LOG_NOTICE);

        ck_assert_int_eq(config_set(&c, "store-max-age", "7d", &error), 0);
        ck_assert_uint_eq(c.store_max_age_usec, 7 * 86400 * USEC_PER_SEC);
        ck_assert_int_eq(config_set(&c, "store-max-size", "0", &error), 0);
        ck_assert_uint_eq(c.store_max_size, 0);

        ck_assert_int_eq(config_set(&c, "sandbox-uid-range", "100000-165535", &error), 0);
        ck_assert_ptr_null(error);
        ck_assert_uint_eq(c.sandbox_uids.first, 100000);
        ck_assert_uint_eq(c.sandbox_uids.last, 165535);
}
END_TEST

START_TEST(test_lists) {
        _cleanup_(config_done) Config c;
        char *error = NULL;

        config_init(&c);

        /* White-space separated; a repeated key adds; an empty value resets. */
        ck_assert_int_eq(config_set(&c, "python-versions", "3.12 3.13", &error), 0);
        ck_assert_int_eq(config_set(&c, "python-versions", "\t3.14  ", &error), 0);
        static const char *const v3[] = { "3.12", "3.13", "3.14" };
        assert_strv(c.python_versions, v3, 3);

        ck_assert_int_eq(config_set(&c, "python-versions", "", &error), 0);
        ck_assert_uint_eq(strv_length(c.python_versions), 0);
        ck_assert_int_eq(config_set(&c, "python-versions", "3.11", &error), 0);
        static const char *const v1[] = { "3.11" };
        assert_strv(c.python_versions, v1, 1);

        /* The default search path is a list like any other. */
        ck_assert_int_eq(config_set(&c, "python-search-path", "", &error), 0);
        ck_assert_int_eq(config_set(&c, "python-search-path", "/opt/python/bin", &error), 0);
        static const char *const sp[] = { "/opt/python/bin" };
        assert_strv(c.python_search_path, sp, 1);

        /* URLs stay whole. */
        ck_assert_int_eq(config_set(&c, "extra-index-urls",
                                    "https://pypi.example.org/simple http://localhost:8080/simple", &error),
                         0);
        static const char *const urls[] = { "https://pypi.example.org/simple", "http://localhost:8080/simple" };
        assert_strv(c.extra_index_urls, urls, 2);
        ck_assert_int_eq(config_set(&c, "find-links", "file:///srv/wheels", &error), 0);
        static const char *const fl[] = { "file:///srv/wheels" };
        assert_strv(c.find_links, fl, 1);
}
END_TEST

START_TEST(test_list_lines) {
        _cleanup_(config_done) Config c;
        char *error = NULL;

        config_init(&c);

        /* Each occurrence is one entry, spaces and all. */
        ck_assert_int_eq(config_set(&c, "warmup", "numpy pandas", &error), 0);
        ck_assert_int_eq(config_set(&c, "warmup", "requests>=2", &error), 0);
        static const char *const w[] = { "numpy pandas", "requests>=2" };
        assert_strv(c.warmup, w, 2);

        ck_assert_int_eq(config_set(&c, "warmup", "", &error), 0);
        ck_assert_uint_eq(strv_length(c.warmup), 0);
        ck_assert_ptr_nonnull(c.warmup);
}
END_TEST

START_TEST(test_set_errors) {
        _cleanup_(config_done) Config c;
        static const struct {
                const char *key, *value, *message;
        } cases[] = {
                { "no-such-key", "1", "unknown setting \"no-such-key\"" },
                { "", "1", "unknown setting \"\"" },
                { "Max-Connections", "1", "unknown setting \"Max-Connections\"" },
                /* Command-line only. */
                { "listen", "/run/x.sock", "unknown setting \"listen\"" },
                { "stdio", "yes", "unknown setting \"stdio\"" },
                { "network", "perhaps", "network: \"perhaps\" is not a boolean (use yes or no)" },
                { "max-message-size", "lots", "max-message-size: \"lots\" is not a size (e.g. 512K, 16M, 2G)" },
                { "max-message-size", "-1", "max-message-size: \"-1\" is not a size" },
                { "max-connections", "1k", "max-connections: \"1k\" is not a whole number" },
                { "max-connections", "-3", "max-connections: \"-3\" is not a whole number" },
                { "max-connections", "", "max-connections: \"\" is not a whole number" },
                { "max-connections", "99999999999999999999", "is not a whole number" },
                { "default-timeout", "soon", "default-timeout: \"soon\" is not a duration" },
                { "log-level", "loud", "log-level: \"loud\" is not a log level" },
                { "sandbox-uid-range", "0-100",
                  "sandbox-uid-range: \"0-100\" is not a safe range: it must hold at least 16 uids, not 0, not 65534 "
                  "(nobody), all below 2147483647" },
                { "sandbox-uid-range", "65000-70000", "sandbox-uid-range: \"65000-70000\" is not a safe range" },
                { "sandbox-uid-range", "5-3", "sandbox-uid-range: \"5-3\" is not a safe range" },
                { "sandbox-uid-range", "100000-100014", "\"100000-100014\" is not a safe range: it must hold at least 16" },
                { "sandbox-uid-range", "100-4294967295", "\"100-4294967295\" is not a safe range" },
                { "sandbox-uid-range", "abc",
                  "sandbox-uid-range: \"abc\" is not a uid range (FIRST-LAST, e.g. 2063597568-2063663103)" },
                { "sandbox-uid-range", "10-", "sandbox-uid-range: \"10-\" is not a uid range (FIRST-LAST" },
                { "sandbox-uid-range", "", "sandbox-uid-range: \"\" is not a uid range" },
        };

        config_init(&c);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *error = NULL;

                ck_assert_msg(config_set(&c, cases[i].key, cases[i].value, &error) == -EINVAL, "%s=%s", cases[i].key,
                              cases[i].value);
                ck_assert_ptr_nonnull(error);
                ck_assert_msg(strstr(error, cases[i].message), "\"%s\" lacks \"%s\"", error, cases[i].message);
        }

        /* A bad value leaves the old one. */
        ck_assert_uint_eq(c.max_connections, 256);
        ck_assert(!c.network);
        ck_assert_uint_eq(c.sandbox_uids.first, 2063597568);
        ck_assert_uint_eq(c.sandbox_uids.last, 2063663103);
}
END_TEST

START_TEST(test_data_dirs) {
        _cleanup_(config_done) Config c;
        static const char *const bad[] = {
                "noequals", "=/srv", "Upper=/srv", "a.b=/srv", "a=srv", "a=/", "a=/srv/", "a=/srv//x", "a=/srv/./x",
                "a=/srv/..", "a=/proc", "a=/proc/self", "a=/sys/x", "a=/dev", "a=/run/user", "a=/etc", "a=/boot",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=/srv",
        };

        config_init(&c);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *error = NULL, *name = NULL;
                const char *path = NULL;

                ck_assert_msg(data_dir_split(bad[i], &name, &path, &error) == -EINVAL, "%s", bad[i]);
                ck_assert_ptr_nonnull(error);
                ck_assert_ptr_null(name);
                free(error);
                error = NULL;
                ck_assert_msg(config_set(&c, "data-dirs", bad[i], &error) == -EINVAL, "%s", bad[i]);
                ck_assert(strstr(error, "data-dirs: "));
        }
        ck_assert_uint_eq(strv_length(c.data_dirs), 0);

        {
                _cleanup_free_ char *error = NULL, *name = NULL;
                const char *path = NULL;
                ck_assert_int_eq(data_dir_split("my_data-2=/srv/my data/x..y", &name, &path, &error), 0);
                ck_assert_str_eq(name, "my_data-2");
                ck_assert_str_eq(path, "/srv/my data/x..y");
                /* A path that only starts like a refused one is fine. */
                free(name);
                name = NULL;
                ck_assert_int_eq(data_dir_split("p=/procedures", &name, &path, &error), 0);
        }

        /* Together: unique names, nothing in or above the cache. */
        free(c.cache_dir);
        c.cache_dir = strdup("/var/cache/mcp");
        ck_assert_int_eq(config_set(&c, "data-dirs", "a=/srv/a b=/srv/b", &(char *) { NULL }), 0);
        ck_assert_int_eq(config_verify(&c), 0);
        ck_assert_int_eq(config_set(&c, "data-dirs", "a=/srv/c", &(char *) { NULL }), 0);
        ck_assert_int_eq(config_verify(&c), -EINVAL);
        ck_assert_int_eq(config_set(&c, "data-dirs", "", &(char *) { NULL }), 0);
        ck_assert_int_eq(config_set(&c, "data-dirs", "c=/var/cache/mcp/envs", &(char *) { NULL }), 0);
        ck_assert_int_eq(config_verify(&c), -EINVAL);
        ck_assert_int_eq(config_set(&c, "data-dirs", "", &(char *) { NULL }), 0);
        ck_assert_int_eq(config_set(&c, "data-dirs", "c=/var", &(char *) { NULL }), 0);
        ck_assert_int_eq(config_verify(&c), -EINVAL);
        ck_assert_int_eq(config_set(&c, "data-dirs", "", &(char *) { NULL }), 0);
        ck_assert_int_eq(config_set(&c, "data-dirs", "c=/var/cache/mcp-data", &(char *) { NULL }), 0);
        ck_assert_int_eq(config_verify(&c), 0);
}
END_TEST

/* ---- files ------------------------------------------------------------- */

START_TEST(test_parse_file) {
        _cleanup_(config_done) Config c;
        _cleanup_free_ char *log = NULL;
        static const char text[] = "# comment\n"
                                   "; another comment\n"
                                   "\n"
                                   "[Daemon]\n"
                                   "  max-connections = 10  \n"
                                   "network=yes\n"
                                   "cache-dir = \"/srv/cache with space\"\n"
                                   "python-versions = 3.12\n"
                                   "python-versions = 3.13\n"
                                   "warmup = numpy\n"
                                   "warmup = rich click\n"
                                   "index-url = https://example.org/simple?a=b\n"
                                   "default-timeout = 45s\r\n"
                                   "max-message-size = 2M";   /* no newline at the end */

        config_init(&c);
        ck_assert_int_eq(parse_text(&c, "test.conf", text, &log), 0);
        ck_assert_str_eq(log, "");
        ck_assert_uint_eq(c.max_connections, 10);
        ck_assert(c.network);
        ck_assert_str_eq(c.cache_dir, "/srv/cache with space");
        static const char *const v[] = { "3.12", "3.13" };
        assert_strv(c.python_versions, v, 2);
        static const char *const w[] = { "numpy", "rich click" };
        assert_strv(c.warmup, w, 2);
        ck_assert_str_eq(c.index_url, "https://example.org/simple?a=b");
        ck_assert_uint_eq(c.default_timeout_usec, 45 * USEC_PER_SEC);
        ck_assert_uint_eq(c.max_message_size, 2 << 20);
}
END_TEST

START_TEST(test_parse_file_errors) {
        _cleanup_(config_done) Config c;
        _cleanup_free_ char *log = NULL;
        static const char text[] = "[Daemon]\n"
                                   "bogus = 1\n"
                                   "max-connections = many\n"
                                   "no equals sign here\n"
                                   "[Other]\n"
                                   "listen = /tmp/x.sock\n"
                                   "max-calls-per-connection = 9\n";

        config_init(&c);
        ck_assert_int_eq(parse_text(&c, "/etc/x/daemon.conf", text, &log), -EINVAL);

        /* Every error is reported, each naming file:line. */
        ck_assert_msg(strstr(log, "/etc/x/daemon.conf:2: unknown setting \"bogus\""), "%s", log);
        ck_assert_msg(strstr(log, "/etc/x/daemon.conf:3: max-connections: \"many\" is not a whole number"), "%s", log);
        ck_assert_msg(strstr(log, "/etc/x/daemon.conf:4: expected \"key = value\""), "%s", log);
        ck_assert_msg(strstr(log, "/etc/x/daemon.conf:5: unknown section [Other]"), "%s", log);
        ck_assert_msg(strstr(log, "/etc/x/daemon.conf:6: unknown setting \"listen\""), "%s", log);

        /* With journald's priority prefix, one line each. */
        ck_assert_msg(startswith(log, "<3>"), "%s", log);
        size_t lines = 0;
        for (const char *p = log; *p; p++)
                lines += *p == '\n';
        ck_assert_uint_eq(lines, 5);

        /* Parsing went on after the errors. */
        ck_assert_uint_eq(c.max_calls_per_connection, 9);
        ck_assert_uint_eq(c.max_connections, 256);
        ck_assert_ptr_null(c.listen_path);
}
END_TEST

START_TEST(test_load_dropins) {
        _cleanup_(config_done) Config c;
        char dir[] = "/tmp/test-config-XXXXXX", main_conf[PATH_MAX], dropins[PATH_MAX];

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(main_conf, sizeof(main_conf), "%s/daemon.conf", dir);
        snprintf(dropins, sizeof(dropins), "%s/daemon.conf.d", dir);
        ck_assert_int_eq(mkdir(dropins, 0755), 0);

        write_file(dir, "daemon.conf", "max-connections = 1\nmax-queue = 1\nwarmup = main\nmax-runs = 1\n");
        write_file(dropins, "20-b.conf", "max-connections = 20\nwarmup = b\n");
        write_file(dropins, "10-a.conf", "max-connections = 10\nmax-queue = 10\nwarmup = a\n");
        write_file(dropins, "30-c.conf", "warmup =\nwarmup = c\n");
        write_file(dropins, "99-z.conf.disabled", "max-connections = 99\n");
        write_file(dropins, "README", "max-connections = 98\n");
        write_file(dropins, ".hidden.conf", "max-connections = 97\n");
        char subdir[PATH_MAX + 32];
        snprintf(subdir, sizeof(subdir), "%s/50-dir.conf.x", dropins);
        ck_assert_int_eq(mkdir(subdir, 0755), 0);

        config_init(&c);
        ck_assert_int_eq(config_load(&c, main_conf), 0);
        /* The main file, then the drop-ins in lexical order; later wins. */
        ck_assert_uint_eq(c.max_connections, 20);
        ck_assert_uint_eq(c.max_queue, 10);
        ck_assert_uint_eq(c.max_runs, 1);
        static const char *const w[] = { "c" };
        assert_strv(c.warmup, w, 1);

        /* Without the main file the drop-ins still apply. */
        config_done(&c);
        ck_assert_int_eq(unlink(main_conf), 0);
        config_init(&c);
        ck_assert_int_eq(config_load(&c, main_conf), 0);
        ck_assert_uint_eq(c.max_connections, 20);
        ck_assert_uint_eq(c.max_runs, 0);

        rm_rf(dir);
}
END_TEST

START_TEST(test_load_missing) {
        _cleanup_(config_done) Config c;

        /* Neither file nor directory: the defaults, no error. */
        config_init(&c);
        ck_assert_int_eq(config_load(&c, "/nonexistent/mcp-python-sandboxd.conf"), 0);
        ck_assert_uint_eq(c.max_connections, 256);
}
END_TEST

START_TEST(test_file_list_replaces_default) {
        _cleanup_(config_done) Config c;
        _cleanup_free_ char *log = NULL;

        config_init(&c);
        ck_assert_int_ge(strv_length(c.python_search_path), 1);
        /* The first occurrence replaces the built-in default; the next one adds. */
        ck_assert_int_eq(parse_text(&c, "a.conf", "python-search-path = /opt/a\npython-search-path = /opt/b\n", &log), 0);
        ck_assert_int_eq(strv_length(c.python_search_path), 2);
        ck_assert_str_eq(c.python_search_path[0], "/opt/a");
        ck_assert_str_eq(c.python_search_path[1], "/opt/b");
        /* A later file (a drop-in) adds to what the files said so far. */
        free(log);
        log = NULL;
        ck_assert_int_eq(parse_text(&c, "b.conf", "python-search-path = /opt/c\n", &log), 0);
        ck_assert_int_eq(strv_length(c.python_search_path), 3);
}
END_TEST

START_TEST(test_load_errors) {
        _cleanup_(config_done) Config c;
        char dir[] = "/tmp/test-config-XXXXXX", main_conf[PATH_MAX], dropins[PATH_MAX];
        Redirect rd;
        int r;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(main_conf, sizeof(main_conf), "%s/daemon.conf", dir);
        snprintf(dropins, sizeof(dropins), "%s/daemon.conf.d", dir);
        ck_assert_int_eq(mkdir(dropins, 0755), 0);
        write_file(dir, "daemon.conf", "max-connections = 5\n");
        write_file(dropins, "10-bad.conf", "\n\nmax-queue = nope\n");
        write_file(dropins, "20-good.conf", "max-runs = 3\n");

        /* An error in a drop-in names it, and the rest is still read. */
        config_init(&c);
        redirect_begin(&rd, 2);
        r = config_load(&c, main_conf);
        _cleanup_free_ char *log = redirect_end(&rd);
        ck_assert_int_eq(r, -EINVAL);
        char want[PATH_MAX + 64];
        snprintf(want, sizeof(want), "%s/10-bad.conf:3: max-queue: \"nope\" is not a whole number", dropins);
        ck_assert_msg(strstr(log, want), "%s", log);
        ck_assert_uint_eq(c.max_connections, 5);
        ck_assert_uint_eq(c.max_runs, 3);

        rm_rf(dir);
}
END_TEST

/* ---- command line ------------------------------------------------------ */

static int parse_argv(Config *c, const char *const *args, const char **ret_config, bool *ret_check, char **ret_err) {
        char *argv[32];
        int argc = 0, r;
        Redirect out, err;

        argv[argc++] = (char *) "mcp-python-sandboxd";
        for (size_t i = 0; args[i]; i++)
                argv[argc++] = (char *) args[i];
        argv[argc] = NULL;

        redirect_begin(&out, 1);
        redirect_begin(&err, 2);
        r = config_parse_argv(c, argc, argv, ret_config, ret_check);
        _cleanup_free_ char *e = redirect_end(&err);
        _cleanup_free_ char *o = redirect_end(&out);
        if (ret_err)
                *ret_err = TAKE_PTR(e);
        return r;
}

START_TEST(test_argv) {
        _cleanup_(config_done) Config c;
        const char *config_file = NULL;
        bool check = false;

        config_init(&c);
        ck_assert_int_eq(parse_argv(&c,
                                    (const char *const[]) { "--listen=/run/t.sock", "--stdio", "--network",
                                                            "--max-connections", "7", "--default-timeout=2min",
                                                            "--python-versions=3.12", "--config=/etc/t.conf",
                                                            "--check-config", "--log-level=debug",
                                                            "--sandbox-uid-range", "300000-300015", NULL },
                                    &config_file, &check, NULL),
                         0);
        ck_assert_str_eq(c.listen_path, "/run/t.sock");
        ck_assert(c.stdio);
        ck_assert(c.network);
        ck_assert_uint_eq(c.max_connections, 7);
        ck_assert_uint_eq(c.default_timeout_usec, 120 * USEC_PER_SEC);
        static const char *const v[] = { "3.12" };
        assert_strv(c.python_versions, v, 1);
        ck_assert_str_eq(config_file, "/etc/t.conf");
        ck_assert(check);
        ck_assert_int_eq(c.log_level, LOG_DEBUG);
        ck_assert_uint_eq(c.sandbox_uids.first, 300000);
        ck_assert_uint_eq(c.sandbox_uids.last, 300015);

        /* A boolean takes an optional value. */
        ck_assert_int_eq(parse_argv(&c, (const char *const[]) { "--network=no", NULL }, &config_file, &check, NULL), 0);
        ck_assert(!c.network);
}
END_TEST

START_TEST(test_argv_errors) {
        _cleanup_(config_done) Config c;
        const char *config_file = NULL;
        bool check = false;
        char *err = NULL;

        config_init(&c);
        ck_assert_int_eq(parse_argv(&c, (const char *const[]) { "--no-such-option", NULL }, &config_file, &check, &err),
                         -EINVAL);
        free(err);

        ck_assert_int_eq(parse_argv(&c, (const char *const[]) { "--max-connections=x", NULL }, &config_file, &check,
                                    &err),
                         -EINVAL);
        ck_assert_msg(strstr(err, "--max-connections: \"x\" is not a whole number"), "%s", err);
        free(err);

        ck_assert_int_eq(parse_argv(&c, (const char *const[]) { "--sandbox-uid-range=0-100", NULL }, &config_file,
                                    &check, &err),
                         -EINVAL);
        ck_assert_msg(strstr(err, "--sandbox-uid-range: \"0-100\" is not a safe range"), "%s", err);
        free(err);
        ck_assert_uint_eq(c.sandbox_uids.first, 2063597568);

        ck_assert_int_eq(parse_argv(&c, (const char *const[]) { "stray", NULL }, &config_file, &check, &err), -EINVAL);
        ck_assert_msg(strstr(err, "Unexpected argument \"stray\""), "%s", err);
        free(err);

        ck_assert_int_eq(parse_argv(&c, (const char *const[]) { "--max-connections", NULL }, &config_file, &check, &err),
                         -EINVAL);
        free(err);

        /* --help and --version end the program successfully. */
        ck_assert_int_eq(parse_argv(&c, (const char *const[]) { "--help", NULL }, &config_file, &check, NULL), 1);
        ck_assert_int_eq(parse_argv(&c, (const char *const[]) { "--version", NULL }, &config_file, &check, NULL), 1);
}
END_TEST

START_TEST(test_command_line_beats_file) {
        _cleanup_(config_done) Config c;
        char dir[] = "/tmp/test-config-XXXXXX", main_conf[PATH_MAX];
        const char *config_file = NULL;
        bool check = false;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(main_conf, sizeof(main_conf), "%s/daemon.conf", dir);
        write_file(dir, "daemon.conf",
                   "max-connections = 10\nnetwork = yes\noutput-cap = 1K\nmax-queue = 3\nwarmup = from-file\n"
                   "python-versions = 3.12\nfind-links = /srv/wheels\n");

        /* The order main() uses: the file, then the command line over it. */
        config_init(&c);
        ck_assert_int_eq(config_load(&c, main_conf), 0);
        ck_assert_int_eq(parse_argv(&c,
                                    (const char *const[]) { "--max-connections=20", "--network=no", "--output-cap=2K",
                                                            "--warmup=from-cli", "--warmup=second",
                                                            "--python-versions=3.13", NULL },
                                    &config_file, &check, NULL),
                         0);
        ck_assert_uint_eq(c.max_connections, 20);
        ck_assert(!c.network);
        ck_assert_uint_eq(c.output_cap, 2048);
        ck_assert_uint_eq(c.max_queue, 3);       /* not on the command line: the file's */
        /* A list on the command line replaces the file's; repeating the option adds. */
        static const char *const w[] = { "from-cli", "second" };
        assert_strv(c.warmup, w, 2);
        static const char *const v[] = { "3.13" };
        assert_strv(c.python_versions, v, 1);
        static const char *const fl[] = { "/srv/wheels" };
        assert_strv(c.find_links, fl, 1);

        rm_rf(dir);
}
END_TEST

/* ---- --check-config ---------------------------------------------------- */

static void assert_round_trip(const Config *c) {
        _cleanup_(config_done) Config again;
        _cleanup_free_ char *first = dump(c), *second = NULL, *log = NULL;

        config_init(&again);
        ck_assert_int_eq(parse_text(&again, "dump.conf", first, &log), 0);
        ck_assert_str_eq(log, "");
        second = dump(&again);
        ck_assert_str_eq(second, first);
}

START_TEST(test_dump_round_trip_defaults) {
        _cleanup_(config_done) Config c;

        config_init(&c);
        assert_round_trip(&c);

        _cleanup_free_ char *text = dump(&c);
        ck_assert_msg(strstr(text, "\nsandbox-uid-range = 2063597568-2063663103\n"), "%s", text);
}
END_TEST

START_TEST(test_dump_round_trip_changed) {
        _cleanup_(config_done) Config c;
        _cleanup_free_ char *log = NULL;

        config_init(&c);
        ck_assert_int_eq(parse_text(&c, "t.conf",
                                    "max-message-size = 3M\n"
                                    "default-timeout = 1500ms\n"
                                    "max-timeout = 10min\n"
                                    "exit-idle-time = 0\n"
                                    "log-level = warning\n"
                                    "network = yes\n"
                                    "index-url = https://example.org/simple\n"
                                    "extra-index-urls = https://a.example/simple https://b.example/simple\n"
                                    "python-search-path =\n"
                                    "python-search-path = /opt/py/bin /usr/bin\n"
                                    "python-versions = 3.12 3.13\n"
                                    "warmup = numpy pandas\n"
                                    "warmup = rich\n"
                                    "store-max-size = 0\n"
                                    "sandbox-uid-range = 100000-165535\n",
                                    &log),
                         0);
        ck_assert_str_eq(log, "");
        assert_round_trip(&c);

        /* And what it says is what was set. */
        _cleanup_free_ char *text = dump(&c);
        ck_assert(startswith(text, "[Daemon]\n"));
        ck_assert_msg(strstr(text, "\nmax-message-size = 3145728\n"), "%s", text);
        ck_assert_msg(strstr(text, "\ndefault-timeout = 1500ms\n"), "%s", text);
        ck_assert_msg(strstr(text, "\nmax-timeout = 600s\n"), "%s", text);
        ck_assert_msg(strstr(text, "\nlog-level = warning\n"), "%s", text);
        ck_assert_msg(strstr(text, "\nnetwork = yes\n"), "%s", text);
        ck_assert_msg(strstr(text, "\nwarmup = numpy pandas\n"), "%s", text);
        ck_assert_msg(strstr(text, "\nwarmup = rich\n"), "%s", text);
        ck_assert_msg(strstr(text, "\nsandbox-uid-range = 100000-165535\n"), "%s", text);
        /* Command-line only settings are not file keys. */
        ck_assert_ptr_null(strstr(text, "listen"));
        ck_assert_ptr_null(strstr(text, "stdio"));
}
END_TEST

START_TEST(test_dump_uid_range_set_back) {
        _cleanup_(config_done) Config c, again;
        _cleanup_free_ char *text = NULL, *error = NULL;
        const char *line, *value;
        char buf[64];
        size_t n;

        /* What --check-config prints is what config_set() takes. */
        config_init(&c);
        ck_assert_int_eq(config_set(&c, "sandbox-uid-range", "70000-70015", &error), 0);
        text = dump(&c);
        line = strstr(text, "\nsandbox-uid-range = ");
        ck_assert_ptr_nonnull(line);
        value = line + strlen("\nsandbox-uid-range = ");
        n = strcspn(value, "\n");
        ck_assert_uint_lt(n, sizeof(buf));
        memcpy(buf, value, n);
        buf[n] = 0;
        ck_assert_str_eq(buf, "70000-70015");

        config_init(&again);
        ck_assert_int_eq(config_set(&again, "sandbox-uid-range", buf, &error), 0);
        ck_assert_ptr_null(error);
        ck_assert_uint_eq(again.sandbox_uids.first, 70000);
        ck_assert_uint_eq(again.sandbox_uids.last, 70015);
}
END_TEST

START_TEST(test_help_uid_range) {
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        ck_assert_ptr_nonnull(f);
        config_help(f, "mcp-python-sandboxd");
        ck_assert_int_eq(fclose(f), 0);
        ck_assert_msg(strstr(text, "--sandbox-uid-range=FIRST-LAST"), "%s", text);
}
END_TEST

/* ---- reload ------------------------------------------------------------ */

static int reload(Config *live, Config *fresh, char **ret_log) {
        Redirect rd;
        int n;

        redirect_begin(&rd, 2);
        n = config_apply_reload(live, fresh);
        *ret_log = redirect_end(&rd);
        return n;
}

START_TEST(test_reload_uid_range_restart_only) {
        _cleanup_(config_done) Config live, fresh;
        _cleanup_free_ char *log = NULL, *again = NULL, *error = NULL;

        config_init(&live);
        config_init(&fresh);
        /* Nothing changed: nothing taken over, nothing said. */
        ck_assert_int_eq(reload(&live, &fresh, &log), 0);
        ck_assert_str_eq(log, "");
        free(log);

        /* The uid range is read once, when the pool is made: it stays, with a warning; the rest is taken over. */
        ck_assert_int_eq(config_set(&fresh, "sandbox-uid-range", "100000-165535", &error), 0);
        ck_assert_int_eq(config_set(&fresh, "max-queue", "5", &error), 0);
        ck_assert_int_eq(reload(&live, &fresh, &log), 1);
        ck_assert_uint_eq(live.sandbox_uids.first, 2063597568);
        ck_assert_uint_eq(live.sandbox_uids.last, 2063663103);
        ck_assert_uint_eq(live.max_queue, 5);
        ck_assert_msg(strstr(log, "<4>sandbox-uid-range changed, but takes effect only after a restart.\n"), "%s",
                      log);
        ck_assert_msg(strstr(log, "max-queue changed."), "%s", log);
        ck_assert_ptr_null(strstr(log, "sandbox-uid-range changed.\n"));

        /* And again at the next reload (a configuration read afresh), for as long as the file says otherwise. */
        config_done(&fresh);
        config_init(&fresh);
        ck_assert_int_eq(config_set(&fresh, "sandbox-uid-range", "100000-165535", &error), 0);
        ck_assert_int_eq(config_set(&fresh, "max-queue", "5", &error), 0);
        ck_assert_int_eq(reload(&live, &fresh, &again), 0);
        ck_assert_msg(strstr(again, "sandbox-uid-range changed, but takes effect only after a restart."), "%s", again);
        ck_assert_uint_eq(live.sandbox_uids.first, 2063597568);
}
END_TEST

START_TEST(test_resolve_access) {
        _cleanup_(config_done) Config c, fresh;
        _cleanup_free_ char *error = NULL, *log = NULL;

        config_init(&c);
        ck_assert(!config_access_restricted(&c));
        ck_assert_int_eq(config_resolve_access(&c), 0);
        ck_assert_uint_eq(c.n_allowed_uids, 0);
        ck_assert_uint_eq(c.n_allowed_gids, 0);

        /* Numbers as they are, names resolved now; a name that is nobody matches nobody. */
        ck_assert_int_eq(config_set(&c, "allowed-users", "1234 root no-such-user-xyz", &error), 0);
        ck_assert_int_eq(config_set(&c, "allowed-groups", "77 root", &error), 0);
        ck_assert_int_eq(config_resolve_access(&c), 0);
        ck_assert(config_access_restricted(&c));
        ck_assert_uint_eq(c.n_allowed_uids, 2);
        ck_assert_uint_eq(c.allowed_uids[0], 1234);
        ck_assert_uint_eq(c.allowed_uids[1], 0);
        ck_assert_uint_eq(c.n_allowed_gids, 2);
        ck_assert_uint_eq(c.allowed_gids[0], 77);
        ck_assert_uint_eq(c.allowed_gids[1], 0);

        /* A reload takes the ids resolved from the fresh configuration. */
        config_init(&fresh);
        ck_assert_int_eq(config_set(&fresh, "allowed-users", "42", &error), 0);
        ck_assert_int_eq(config_resolve_access(&fresh), 0);
        (void) reload(&c, &fresh, &log);
        ck_assert_uint_eq(c.n_allowed_uids, 1);
        ck_assert_uint_eq(c.allowed_uids[0], 42);
        ck_assert_uint_eq(c.n_allowed_gids, 0);
}
END_TEST

static Suite *config_suite(void) {
        Suite *s = suite_create("config");
        TCase *tc = tcase_create("values");

        tcase_add_checked_fixture(tc, setup, NULL);
        tcase_add_test(tc, test_defaults);
        tcase_add_test(tc, test_cache_directory_env);
        tcase_add_test(tc, test_parse_size);
        tcase_add_test(tc, test_parse_seconds);
        tcase_add_test(tc, test_parse_bool);
        tcase_add_test(tc, test_parse_uid_range);
        tcase_add_test(tc, test_set_each_type);
        tcase_add_test(tc, test_lists);
        tcase_add_test(tc, test_list_lines);
        tcase_add_test(tc, test_set_errors);
        tcase_add_test(tc, test_data_dirs);
        suite_add_tcase(s, tc);

        tc = tcase_create("files");
        tcase_add_checked_fixture(tc, setup, NULL);
        tcase_add_test(tc, test_parse_file);
        tcase_add_test(tc, test_parse_file_errors);
        tcase_add_test(tc, test_load_dropins);
        tcase_add_test(tc, test_load_missing);
        tcase_add_test(tc, test_load_errors);
        tcase_add_test(tc, test_file_list_replaces_default);
        suite_add_tcase(s, tc);

        tc = tcase_create("command-line");
        tcase_add_checked_fixture(tc, setup, NULL);
        tcase_add_test(tc, test_argv);
        tcase_add_test(tc, test_argv_errors);
        tcase_add_test(tc, test_command_line_beats_file);
        tcase_add_test(tc, test_dump_round_trip_defaults);
        tcase_add_test(tc, test_dump_round_trip_changed);
        tcase_add_test(tc, test_dump_uid_range_set_back);
        tcase_add_test(tc, test_help_uid_range);
        suite_add_tcase(s, tc);

        tc = tcase_create("reload");
        tcase_add_checked_fixture(tc, setup, NULL);
        tcase_add_test(tc, test_reload_uid_range_restart_only);
        tcase_add_test(tc, test_resolve_access);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(config_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
