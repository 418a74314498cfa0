/* SPDX-License-Identifier: MIT */
/*
 * The environment store's build state machine, its collection and its budget, driven through envstore.h with a
 * fake uv: a shell script given as the uv path that makes what `uv venv` and `uv pip install` would make (a
 * pyvenv.cfg, bin/python, a package directory in site-packages per requirement), or fails, or hangs, as the
 * requirement's name says, and logs each call in the store's directory. No real uv, Python or network: what is
 * tested is the store (queueing, joining, failing cleanly, finding, collecting), not uv.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-event.h>
#include <time.h>
#include <unistd.h>

#include "alloc-fail.h"
#include "config/config.h"
#include "envstore/envstore-internal.h"
#include "envstore/envstore.h"
#include "fs-util.h"
#include "macro.h"
#include "pep723/pep508.h"
#include "scheduler/scheduler.h"
#include "strv.h"

#define MARKER ".mcp-python-sandbox-env.json"

/*
 * The fake uv. HOME is the store's directory (the store sets it for uv). A requirement named fail* installs part of
 * itself and then fails as uv does when nothing resolves; hang* waits until HOME/release exists; evil* rewrites the
 * venv's pyvenv.cfg (what the layout check must refuse); big* writes 256 KiB of its own.
 */
static const char fake_uv[] =
        "#!/bin/sh\n"
        "log=\"$HOME/uv.log\"\n"
        "args=\"$*\"\n"
        "echo \"start $args\" >> \"$log\"\n"
        "case \"$1 $2\" in\n"
        "\"venv \"*)\n"
        "        for a; do dir=$a; done\n"
        "        mkdir -p \"$dir/bin\" \"$dir/lib/python3.99/site-packages\" || exit 1\n"
        "        printf 'home = /usr/bin\\nversion_info = 3.99.0\\n' > \"$dir/pyvenv.cfg\"\n"
        "        printf '#!/bin/sh\\n' > \"$dir/bin/python\" && chmod 755 \"$dir/bin/python\"\n"
        "        ;;\n"
        "\"pip install\")\n"
        "        shift 2\n"
        "        while [ $# -gt 0 ]; do\n"
        "                case \"$1\" in\n"
        "                --python) py=$2; shift 2 ;;\n"
        "                --default-index|--index|--find-links) shift 2 ;;\n"
        "                -*) shift ;;\n"
        "                *) break ;;\n"
        "                esac\n"
        "        done\n"
        "        dir=${py%/bin/python}\n"
        "        sp=\"$dir/lib/python3.99/site-packages\"\n"
        "        for req; do\n"
        "                name=${req%%[=<>!~ ;[]*}\n"
        "                mkdir -p \"$sp/$name\" \"$sp/$name-1.0.dist-info\" || exit 1\n"
        "                echo 'x = 1' > \"$sp/$name/__init__.py\"\n"
        "                printf 'Name: %s\\n' \"$name\" > \"$sp/$name-1.0.dist-info/METADATA\"\n"
        "                case \"$name\" in\n"
        "                fail*) echo 'Resolved 3 packages in 5ms' >&2\n"
        "                       echo \"error: No solution found when resolving dependencies: $name was not found\" >&2\n"
        "                       exit 1 ;;\n"
        "                hang*) while [ ! -e \"$HOME/release\" ]; do sleep 0.05; done ;;\n"
        "                evil*) echo 'home = /tmp/elsewhere' > \"$dir/pyvenv.cfg\" ;;\n"
        "                big*) head -c 262144 /dev/zero > \"$sp/$name/data.bin\" ;;\n"
        "                esac\n"
        "        done\n"
        "        ;;\n"
        "esac\n"
        "echo \"end $args\" >> \"$log\"\n"
        "exit 0\n";

/* The fake interpreter: what `python -I -B -m venv --without-pip DIR` makes, for a bare environment. */
static const char fake_python[] =
        "#!/bin/sh\n"
        "echo \"$*\" >> \"$0.log\"\n"
        "for a; do dir=$a; done\n"
        "mkdir -p \"$dir/bin\" \"$dir/lib/python3.99/site-packages\" || exit 1\n"
        "printf 'home = /usr/bin\\n' > \"$dir/pyvenv.cfg\"\n"
        "printf '#!/bin/sh\\n' > \"$dir/bin/python\" && chmod 755 \"$dir/bin/python\"\n";

static char top[] = "/tmp/test-envstore-XXXXXX";
static char uv_path[PATH_MAX], cache[PATH_MAX], python_path[PATH_MAX];
static Config config;
static sd_event *event;
static Scheduler *sched;
static EnvStore *store;
static Python python = { .executable = python_path, .version = (char *) "3.99.0" };

static void write_script(const char *path, const char *text) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write_all(fd, text, strlen(text)), 0);
        close(fd);
}

static void setup(void) {
        sigset_t ss;

        /* sd-event watches children through SIGCHLD: it must be blocked. */
        sigemptyset(&ss);
        sigaddset(&ss, SIGCHLD);
        ck_assert_int_eq(sigprocmask(SIG_BLOCK, &ss, NULL), 0);

        strcpy(top, "/tmp/test-envstore-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(top));
        snprintf(uv_path, sizeof(uv_path), "%s/uv", top);
        snprintf(cache, sizeof(cache), "%s/cache", top);
        snprintf(python_path, sizeof(python_path), "%s/python3.99", top);
        write_script(uv_path, fake_uv);
        write_script(python_path, fake_python);

        config_init(&config);
        free(config.cache_dir);
        config.cache_dir = strdup(cache);
        ck_assert_ptr_nonnull(config.cache_dir);
        config.uv_prune_delay_usec = 0;
        config.store_max_size = 0;
        config.store_max_age_usec = 0;

        ck_assert_int_ge(sd_event_new(&event), 0);
        ck_assert_int_eq(scheduler_new(&sched), 0);
        ck_assert_int_eq(envstore_new(&store, event, &config, sched, NULL, uv_path, false), 0);
}

static void teardown(void) {
        store = envstore_free(store);
        sched = scheduler_free(sched);
        event = sd_event_unref(event);
        config_done(&config);
        (void) rm_rf_untrusted(top);
}

/* What one waiter heard. */
typedef struct Heard {
        unsigned n;
        int error;
        char *path;
        char *message;
} Heard;

static void heard_done(Heard *h) {
        free(h->path);
        free(h->message);
}

static void on_ready(const EnvResult *res, void *userdata) {
        Heard *h = userdata;

        h->n++;
        h->error = res->error;
        free(h->path);
        free(h->message);
        h->path = res->path ? strdup(res->path) : NULL;
        h->message = res->message ? strdup(res->message) : NULL;
}

/* The key of these requirements (one spec per string, NULL-terminated) on the fake Python. */
static void key_of(const char *const *specs, RequirementList *ret_reqs, char ret_key[65]) {
        *ret_reqs = (RequirementList) {};
        for (size_t i = 0; specs[i]; i++)
                ck_assert_int_eq(requirement_list_append(ret_reqs, specs[i], NULL), 0);
        envstore_key(store, &python, ret_reqs, ret_key);
}

static int prepare(uid_t uid, const char *spec, char ret_key[65], Heard *h, EnvWaiter **ret_waiter) {
        _cleanup_(requirement_list_done) RequirementList reqs = {};
        const char *specs[] = { spec, NULL };

        key_of(specs, &reqs, ret_key);
        return envstore_prepare(store, uid, ret_key, &python, &reqs, on_ready, h, ret_waiter);
}

/* Run the loop until *n reaches want. */
static void run_until(const unsigned *n, unsigned want) {
        while (*n < want)
                ck_assert_int_ge(sd_event_run(event, UINT64_MAX), 0);
}

static void run_until_no_walk(void) {
        while (envstore_n_walks(store) > 0)
                ck_assert_int_ge(sd_event_run(event, UINT64_MAX), 0);
}

/* Lines of the fake uv's log that begin with prefix and contain word (NULL: any). */
static unsigned uv_calls(const char *prefix, const char *word) {
        _cleanup_free_ char *log = NULL, *path = NULL;
        unsigned n = 0;

        ck_assert_int_ge(asprintf(&path, "%s/uv.log", cache), 0);
        if (read_small_file(path, 1024 * 1024, &log) < 0)
                return 0;
        for (char *line = log, *end; line && *line; line = end ? end + 1 : NULL) {
                end = strchr(line, '\n');
                if (end)
                        *end = 0;
                if (startswith(line, prefix) && (!word || strstr(line, word)))
                        n++;
        }
        return n;
}

/* The line number (from 0) in the fake uv's log of the first line that begins with prefix and contains word. */
static int uv_line(const char *prefix, const char *word) {
        _cleanup_free_ char *log = NULL, *path = NULL;
        int i = 0;

        ck_assert_int_ge(asprintf(&path, "%s/uv.log", cache), 0);
        ck_assert_int_ge(read_small_file(path, 1024 * 1024, &log), 0);
        for (char *line = log, *end; line && *line; line = end ? end + 1 : NULL, i++) {
                end = strchr(line, '\n');
                if (end)
                        *end = 0;
                if (startswith(line, prefix) && strstr(line, word))
                        return i;
        }
        return -1;
}

static bool env_exists(const char *key) {
        char p[PATH_MAX + 80];

        snprintf(p, sizeof(p), "%s/envs/%s", cache, key);
        return access(p, F_OK) >= 0;
}

/* Names in envs/ that are neither an environment nor a lock file nor a venv template: what a build left. */
static unsigned leftovers(void) {
        _cleanup_free_ char *envs = NULL;
        struct dirent *de;
        unsigned n = 0;
        DIR *d;

        ck_assert_int_ge(asprintf(&envs, "%s/envs", cache), 0);
        d = opendir(envs);
        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d)))
                if (de->d_name[0] == '.' && !streq(de->d_name, ".") && !streq(de->d_name, "..") &&
                    !startswith(de->d_name, ".lock-") && !startswith(de->d_name, ".venv-"))
                        n++;
        closedir(d);
        return n;
}

/* The environment of key last used days ago: its marker's time, which the collection goes by. */
static void age(const char *key, unsigned days) {
        char p[PATH_MAX + 128];
        struct timespec ts[2] = {};

        ts[0].tv_sec = ts[1].tv_sec = time(NULL) - (time_t) days * 86400;
        snprintf(p, sizeof(p), "%s/envs/%s/" MARKER, cache, key);
        ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
}

/* Build spec for uid and wait for it: the environment's key. */
static void build(const char *spec, char ret_key[65]) {
        Heard h = {};

        ck_assert_int_eq(prepare(1000, spec, ret_key, &h, NULL), 0);
        run_until(&h.n, 1);
        ck_assert_int_eq(h.error, 0);
        heard_done(&h);
}

START_TEST(test_two_requests_one_build) {
        char key1[65], key2[65];
        Heard a = {}, b = {};
        _cleanup_free_ char *found = NULL;
        struct stat st;

        ck_assert_ptr_null(envstore_lookup(store, "0123"));
        ck_assert_int_eq(prepare(1000, "numpy", key1, &a, NULL), 0);
        /* The second request for the same key joins the build under way. */
        ck_assert_int_eq(prepare(1001, "numpy", key2, &b, NULL), 0);
        ck_assert_str_eq(key1, key2);
        ck_assert_uint_eq(envstore_n_building(store), 1);
        /* Never called back from inside envstore_prepare(). */
        ck_assert_uint_eq(a.n + b.n, 0);

        run_until(&b.n, 1);
        ck_assert_uint_eq(a.n, 1);
        ck_assert_uint_eq(b.n, 1);
        ck_assert_int_eq(a.error, 0);
        ck_assert_int_eq(b.error, 0);
        ck_assert_ptr_nonnull(a.path);
        ck_assert_str_eq(a.path, b.path);
        ck_assert_uint_eq(uv_calls("start pip install", "numpy"), 1);
        ck_assert_uint_eq(envstore_n_building(store), 0);

        /* In place, complete and read-only. */
        ck_assert_int_eq(stat(a.path, &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0555);
        ck_assert_str_eq(strrchr(a.path, '/') + 1, key1);
        found = envstore_lookup(store, key1);
        ck_assert_ptr_nonnull(found);
        ck_assert_str_eq(found, a.path);
        ck_assert_uint_eq(leftovers(), 0);
        heard_done(&a);
        heard_done(&b);
}
END_TEST

START_TEST(test_found_without_build) {
        char key[65], other[65];
        _cleanup_free_ char *p1 = NULL, *p2 = NULL;
        Heard h = {};

        build("requests", key);
        ck_assert_uint_eq(uv_calls("start ", NULL), 2);   /* uv venv, uv pip install */

        p1 = envstore_lookup(store, key);
        p2 = envstore_lookup(store, key);
        ck_assert_ptr_nonnull(p1);
        ck_assert_ptr_nonnull(p2);
        ck_assert_str_eq(p1, p2);
        ck_assert_uint_eq(envstore_n_building(store), 0);
        ck_assert_uint_eq(uv_calls("start ", NULL), 2);

        /* Another set of requirements is not found, and builds from the venv template: no second uv venv. */
        ck_assert_int_eq(prepare(1000, "requests==2.0", other, &h, NULL), 0);
        ck_assert_str_ne(key, other);
        run_until(&h.n, 1);
        ck_assert_int_eq(h.error, 0);
        ck_assert_uint_eq(uv_calls("start venv", NULL), 1);
        ck_assert_uint_eq(uv_calls("start pip install", NULL), 2);
        ck_assert_uint_eq(envstore_n_ready(store), 2);
        heard_done(&h);
}
END_TEST

START_TEST(test_failed_build_leaves_nothing) {
        char key[65];
        Heard a = {}, b = {};

        ck_assert_int_eq(prepare(1000, "fail-pkg", key, &a, NULL), 0);
        ck_assert_int_eq(prepare(1000, "fail-pkg", key, &b, NULL), 0);
        run_until(&b.n, 1);
        /* Every waiter hears the failure, with what uv said that explains it (not its progress lines). */
        ck_assert_uint_eq(a.n, 1);
        ck_assert_int_lt(a.error, 0);
        ck_assert_int_lt(b.error, 0);
        ck_assert_ptr_null(a.path);
        ck_assert_ptr_nonnull(a.message);
        ck_assert_ptr_nonnull(strstr(a.message, "No solution found"));
        ck_assert_ptr_null(strstr(a.message, "Resolved"));
        ck_assert_uint_eq(envstore_n_building(store), 0);

        /* The half-installed slot is gone, nothing is found, and the next request builds again. */
        ck_assert(!env_exists(key));
        ck_assert_ptr_null(envstore_lookup(store, key));
        ck_assert_uint_eq(leftovers(), 0);
        ck_assert_int_eq(prepare(1000, "fail-pkg", key, &a, NULL), 0);
        run_until(&a.n, 2);
        ck_assert_int_lt(a.error, 0);
        ck_assert_uint_eq(uv_calls("start pip install", "fail-pkg"), 2);
        heard_done(&a);
        heard_done(&b);
}
END_TEST

START_TEST(test_refused_layout_leaves_nothing) {
        char key[65];
        Heard h = {};

        /* uv succeeds, but what it installed rewrote a file of the venv: refused before anything can use it. */
        ck_assert_int_eq(prepare(1000, "evil-pkg", key, &h, NULL), 0);
        run_until(&h.n, 1);
        ck_assert_int_eq(h.error, -EPERM);
        ck_assert_ptr_nonnull(h.message);
        ck_assert_ptr_nonnull(strstr(h.message, "pyvenv.cfg"));
        ck_assert(!env_exists(key));
        ck_assert_ptr_null(envstore_lookup(store, key));
        ck_assert_uint_eq(leftovers(), 0);
        heard_done(&h);
}
END_TEST

START_TEST(test_hung_build_stopped) {
        char key[65];
        Heard h = {};

        config.prepare_timeout_usec = USEC_PER_SEC;
        ck_assert_int_eq(prepare(1000, "hang-pkg", key, &h, NULL), 0);
        run_until(&h.n, 1);
        ck_assert_int_lt(h.error, 0);
        ck_assert_ptr_nonnull(strstr(h.message, "took longer than 1s"));
        ck_assert(!env_exists(key));
        ck_assert_uint_eq(leftovers(), 0);
        heard_done(&h);
}
END_TEST

START_TEST(test_cancelled_waiter) {
        char key[65];
        Heard a = {}, b = {};
        EnvWaiter *w = NULL;

        ck_assert_int_eq(prepare(1000, "numpy", key, &a, &w), 0);
        ck_assert_ptr_nonnull(w);
        ck_assert_int_eq(prepare(1001, "numpy", key, &b, NULL), 0);
        envstore_waiter_cancel(w);
        run_until(&b.n, 1);
        /* The build went on for the other waiter; the cancelled one heard nothing. */
        ck_assert_int_eq(b.error, 0);
        ck_assert_uint_eq(a.n, 0);
        ck_assert(env_exists(key));
        heard_done(&a);
        heard_done(&b);
}
END_TEST

START_TEST(test_global_cap_queues) {
        char ka[65], kb[65];
        Heard a = {}, b = {};

        scheduler_set_limits(sched, SCHED_BUILD, &(SchedLimits) { .total = 1 });
        ck_assert_int_eq(prepare(1000, "alpha", ka, &a, NULL), 0);
        ck_assert_int_eq(prepare(1001, "beta", kb, &b, NULL), 0);
        /* Both are the store's builds; one runs, the other waits its turn. */
        ck_assert_uint_eq(envstore_n_building(store), 2);
        ck_assert_uint_eq(scheduler_held(sched, SCHED_BUILD), 1);
        ck_assert_uint_eq(scheduler_waiting(sched, SCHED_BUILD), 1);
        ck_assert_uint_eq(scheduler_held_by(sched, SCHED_BUILD, 1000), 1);

        run_until(&b.n, 1);
        run_until(&a.n, 1);
        ck_assert_int_eq(a.error, 0);
        ck_assert_int_eq(b.error, 0);
        /* One after the other: beta's uv started after alpha's ended. */
        ck_assert_int_ge(uv_line("end pip install", "alpha"), 0);
        ck_assert_int_gt(uv_line("start pip install", "beta"), uv_line("end pip install", "alpha"));
        ck_assert_uint_eq(scheduler_peak(sched, SCHED_BUILD), 1);
        ck_assert_uint_eq(scheduler_held(sched, SCHED_BUILD), 0);
        heard_done(&a);
        heard_done(&b);
}
END_TEST

START_TEST(test_per_user_cap_queues) {
        char ka[65], kc[65], kd[65];
        Heard a = {}, c = {}, d = {};

        scheduler_set_limits(sched, SCHED_BUILD, &(SchedLimits) { .total = 4, .per_user = 1 });
        ck_assert_int_eq(prepare(1000, "alpha", ka, &a, NULL), 0);
        ck_assert_int_eq(prepare(1000, "gamma", kc, &c, NULL), 0);
        ck_assert_int_eq(prepare(1001, "delta", kd, &d, NULL), 0);
        /* uid 1000's second build waits; uid 1001's runs at once, beside uid 1000's first. */
        ck_assert_uint_eq(envstore_n_building(store), 3);
        ck_assert_uint_eq(scheduler_held(sched, SCHED_BUILD), 2);
        ck_assert_uint_eq(scheduler_held_by(sched, SCHED_BUILD, 1001), 1);
        ck_assert_uint_eq(scheduler_waiting_for(sched, SCHED_BUILD, 1000), 1);
        ck_assert_uint_eq(scheduler_waiting_for(sched, SCHED_BUILD, 1001), 0);

        run_until(&a.n, 1);
        run_until(&c.n, 1);
        run_until(&d.n, 1);
        ck_assert_int_eq(a.error, 0);
        ck_assert_int_eq(c.error, 0);
        ck_assert_int_eq(d.error, 0);
        ck_assert_int_gt(uv_line("start pip install", "gamma"), uv_line("end pip install", "alpha"));
        ck_assert_uint_eq(scheduler_peak(sched, SCHED_BUILD), 2);
        heard_done(&a);
        heard_done(&c);
        heard_done(&d);
}
END_TEST

START_TEST(test_slots_full) {
        SchedTicket mine = {};
        char key[65];
        Heard h[257] = {};

        /* Every build queues behind our ticket, each holding its slot: 256 of them, then there is none. */
        scheduler_set_limits(sched, SCHED_BUILD, &(SchedLimits) { .total = 1 });
        ck_assert_int_eq(scheduler_try_acquire(sched, &mine, SCHED_BUILD, 0), 0);
        for (unsigned i = 0; i < 256; i++) {
                char spec[32];
                snprintf(spec, sizeof(spec), "pkg%u", i);
                ck_assert_int_eq(prepare(1000, spec, key, &h[i], NULL), 0);
        }
        ck_assert_uint_eq(envstore_n_building(store), 256);
        ck_assert_int_eq(prepare(1000, "one-more", key, &h[256], NULL), ENVSTORE_SLOTS_FULL);
        ck_assert_uint_eq(envstore_n_building(store), 256);
        /* A bare environment needs no slot. */
        ck_assert_uint_eq(uv_calls("start ", NULL), 0);

        /* Freed with its builds waiting: nobody is called back, nothing was started. */
        store = envstore_free(store);
        scheduler_release(&mine);
        for (unsigned i = 0; i < ELEMENTSOF(h); i++)
                ck_assert_uint_eq(h[i].n, 0);
        ck_assert_uint_eq(uv_calls("start ", NULL), 0);
}
END_TEST

START_TEST(test_gc_old_and_held) {
        char ka[65], kb[65], kc[65];
        _cleanup_free_ char *pb = NULL;
        EnvHold *hold;

        build("alpha", ka);
        build("beta", kb);
        build("gamma", kc);
        run_until_no_walk();   /* the walks each build started */
        age(ka, 3);
        age(kb, 3);
        /* beta is in use: a run holds it. gamma was used just now. */
        pb = envstore_lookup(store, kb);
        ck_assert_ptr_nonnull(pb);
        age(kb, 3);
        hold = envstore_hold(store, pb);
        ck_assert_ptr_nonnull(hold);
        ck_assert(envstore_held(store, kb));

        config.store_max_age_usec = 24 * 3600 * USEC_PER_SEC;
        ck_assert_int_eq(envstore_gc(store, NULL), 0);
        ck_assert_uint_eq(envstore_n_walks(store), 1);
        run_until_no_walk();
        ck_assert(!env_exists(ka));
        ck_assert_ptr_null(envstore_lookup(store, ka));
        ck_assert(env_exists(kb));
        ck_assert(env_exists(kc));

        /* Released, it is collected by the next walk. */
        hold = envstore_hold_release(hold);
        ck_assert(!envstore_held(store, kb));
        age(kb, 3);
        ck_assert_int_eq(envstore_gc(store, NULL), 0);
        run_until_no_walk();
        ck_assert(!env_exists(kb));
        ck_assert(env_exists(kc));
        ck_assert_uint_eq(envstore_n_ready(store), 1);
}
END_TEST

START_TEST(test_bare_and_warm_slot) {
        _cleanup_free_ char *log_path = NULL, *log = NULL;
        RequirementList none = {};
        char bare[65], key[65];
        Heard h = {};

        envstore_key(store, &python, &none, bare);
        ck_assert_int_eq(envstore_prepare(store, 1000, bare, &python, &none, on_ready, &h, NULL), 0);
        run_until(&h.n, 1);
        ck_assert_int_eq(h.error, 0);
        ck_assert(env_exists(bare));
        /* Made by the interpreter's own venv module, no uv. */
        ck_assert_int_ge(asprintf(&log_path, "%s.log", python_path), 0);
        ck_assert_int_ge(read_small_file(log_path, 4096, &log), 0);
        ck_assert_ptr_nonnull(startswith(log, "-I -B -m venv --without-pip "));
        ck_assert_ptr_eq(strchr(log, '\n'), log + strlen(log) - 1);   /* once */
        ck_assert_uint_eq(uv_calls("start pip install", NULL), 0);

        /* The first call on the Python warmed a build slot beside it: uv venv, then uv pip freeze, in its turn. */
        while (scheduler_held(sched, SCHED_BUILD) > 0)
                ck_assert_int_ge(sd_event_run(event, UINT64_MAX), 0);
        ck_assert_uint_eq(uv_calls("end venv", NULL), 1);
        ck_assert_uint_eq(uv_calls("end pip freeze", NULL), 1);

        /* Once per Python (a warm-up's build of the bare environment again, with no one waiting, finds it there); and
         * the next build with packages copies the template that made: no uv venv of its own. */
        ck_assert_int_eq(envstore_prepare(store, 1000, bare, &python, &none, NULL, NULL, NULL), 0);
        build("numpy", key);
        while (envstore_n_building(store) > 0)
                ck_assert_int_ge(sd_event_run(event, UINT64_MAX), 0);
        ck_assert(env_exists(bare));
        ck_assert_uint_eq(uv_calls("start venv", NULL), 1);
        ck_assert_uint_eq(uv_calls("start pip freeze", NULL), 1);
        ck_assert_uint_eq(uv_calls("end pip install", "numpy"), 1);
        ck_assert_uint_eq(envstore_n_building(store), 0);
        ck_assert_uint_eq(leftovers(), 0);
        heard_done(&h);
}
END_TEST

typedef struct SizesHeard {
        unsigned n;
        EnvSizes sizes;
} SizesHeard;

static void on_sizes(const EnvSizes *sizes, void *userdata) {
        SizesHeard *h = userdata;
        h->n++;
        h->sizes = *sizes;
}

START_TEST(test_budget) {
        char ka[65], kb[65], kc[65];
        EnvSizesWaiter *w = NULL;
        EnvSizes cached = {};
        SizesHeard h = {};

        build("big-a", ka);
        build("big-b", kb);
        build("big-c", kc);
        run_until_no_walk();
        /* What the three take; then a budget that two of them fit in. */
        ck_assert_int_eq(envstore_sizes(store, &cached, on_sizes, &h, &w), ENVSTORE_SIZES_CACHED);
        ck_assert(cached.known);
        ck_assert_uint_ge(cached.total_bytes, 3 * 262144);
        ck_assert_uint_eq(cached.total_bytes, cached.store_bytes + cached.cache_bytes);
        ck_assert_uint_eq(h.n, 0);

        /* Least recently used first: b, then a, then c. */
        age(kb, 3);
        age(ka, 2);
        age(kc, 1);
        config.store_max_size = cached.total_bytes - 262144 / 2;
        ck_assert_int_eq(envstore_gc(store, NULL), 0);
        run_until_no_walk();
        ck_assert(!env_exists(kb));
        ck_assert(env_exists(ka));
        ck_assert(env_exists(kc));

        /* The sizes after it: under the budget. */
        ck_assert_int_eq(envstore_sizes(store, &cached, on_sizes, &h, &w), ENVSTORE_SIZES_CACHED);
        ck_assert(cached.known);
        ck_assert_uint_le(cached.total_bytes, config.store_max_size);
}
END_TEST

START_TEST(test_walks_full) {
        SchedTicket mine = {};
        EnvSizesWaiter *w = NULL;
        EnvSizes cached = {};
        SizesHeard h = {};

        /* max-walks reached by someone else: no walk, no callback, and no error either. */
        scheduler_set_limits(sched, SCHED_WALK, &(SchedLimits) { .total = 1 });
        ck_assert_int_eq(scheduler_try_acquire(sched, &mine, SCHED_WALK, SCHEDULER_DAEMON_UID), 0);
        ck_assert_int_eq(envstore_gc(store, NULL), ENVSTORE_WALKS_FULL);
        ck_assert_int_eq(envstore_sizes(store, &cached, on_sizes, &h, &w), ENVSTORE_WALKS_FULL);
        ck_assert_uint_eq(envstore_n_walks(store), 0);
        ck_assert_int_eq(sd_event_run(event, 0), 0);
        ck_assert_uint_eq(h.n, 0);
        scheduler_release(&mine);

        /* Then a walk: its sizes come through the callback. */
        ck_assert_int_eq(envstore_sizes(store, &cached, on_sizes, &h, &w), 0);
        ck_assert_ptr_nonnull(w);
        run_until(&h.n, 1);
        ck_assert(h.sizes.known);
}
END_TEST

/* uv's environment comes back whole or not at all: one short of UV_NO_BUILD=1 would let uv build (run) a source
 * package. Each of its appends fails in turn. */
START_TEST(test_uv_environment_whole_or_none) {
        _cleanup_strv_free_ char **full = NULL;
        unsigned n;

        alloc_fail_nth(0);
        full = uv_environment(store);
        n = alloc_fail_calls();
        ck_assert_ptr_nonnull(full);
        ck_assert(strv_contains(full, "UV_NO_BUILD=1"));
        ck_assert_uint_ge(n, 5);
        for (unsigned i = 1; i <= n + 1; i++) {
                _cleanup_strv_free_ char **l = NULL;

                alloc_fail_nth(i);
                l = uv_environment(store);
                alloc_fail_nth(0);
                if (i <= n) {
                        ck_assert_msg(!l, "with allocation %u of %u failed, %zu variables of %zu", i, n,
                                      strv_length(l), strv_length(full));
                        continue;
                }
                ck_assert_ptr_nonnull(l);
                ck_assert_uint_eq(strv_length(l), strv_length(full));
                for (size_t k = 0; full[k]; k++)
                        ck_assert_str_eq(l[k], full[k]);
        }
}
END_TEST

static Suite *envstore_suite(void) {
        Suite *s = suite_create("envstore");
        TCase *tc = tcase_create("builds");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_two_requests_one_build);
        tcase_add_test(tc, test_uv_environment_whole_or_none);
        tcase_add_test(tc, test_found_without_build);
        tcase_add_test(tc, test_failed_build_leaves_nothing);
        tcase_add_test(tc, test_refused_layout_leaves_nothing);
        tcase_add_test(tc, test_hung_build_stopped);
        tcase_add_test(tc, test_cancelled_waiter);
        tcase_add_test(tc, test_global_cap_queues);
        tcase_add_test(tc, test_per_user_cap_queues);
        tcase_add_test(tc, test_slots_full);
        tcase_add_test(tc, test_bare_and_warm_slot);
        suite_add_tcase(s, tc);

        tc = tcase_create("collection");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_gc_old_and_held);
        tcase_add_test(tc, test_budget);
        tcase_add_test(tc, test_walks_full);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(envstore_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
