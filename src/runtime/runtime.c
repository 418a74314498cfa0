/* SPDX-License-Identifier: MIT */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <grp.h>
#include <pwd.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "runtime.h"
#include "envstore/pyinstall.h"
#include "sandbox/seccomp.h"
#include "sandbox/uidpool.h"
#include "sha256.h"
#include "strv.h"

#define TOML_CACHE_SIZE 256

/* Reads a PEP 723 block with the interpreter's own TOML parser, inside the sandbox; the file is argv[1]. */
static const char toml_helper[] =
        "import json, sys, tomllib\n"
        "try:\n"
        "    with open(sys.argv[1], 'rb') as f:\n"
        "        doc = tomllib.load(f)\n"
        "except tomllib.TOMLDecodeError as e:\n"
        "    print(json.dumps({'error': str(e)}))\n"
        "else:\n"
        "    print(json.dumps({'doc': doc}, default=str))\n";

typedef struct TomlCacheEntry {
        char hash[65];
        json_object *result;    /* {"doc": ...} or {"error": ...} */
} TomlCacheEntry;

struct TomlRequest {
        Runtime *runtime;
        TomlRequest *next, *prev;
        char hash[65];
        Process *proc;
        sd_event_source *defer;
        json_object *result;
        TomlParsedFunc cb;
        void *userdata;
        SchedTicket helper;             /* the metadata reader's place (SCHED_HELPER), charged to the caller */
        char *toml;                     /* kept while it waits for that place */
};


struct Runtime {
        sd_event *event;
        const Config *config;
        Reaper *reaper;                 /* the manager's */
        SandboxCgroups *cgroups;        /* the manager's */
        SandboxSeccomp *seccomp;        /* the runs' system call filter, built at the first */

        char *uv_path, *uv_version, *bwrap_version;
        char *uv_refused;               /* why uv is not used (older than the store needs), or NULL */
        char *etc_dir;
        char **data_binds;              /* the data-dirs entries a sandbox can read (runtime_check_data_dirs()) */
        EnvStore *store;

        /* Start-up probes */
        Pythons pythons;
        Process **probes;
        size_t n_probes;
        unsigned pending;
        bool started, ready;
        WaitQueue ready_waiters;

        /* Sandbox self-test */
        Process *self_test;
        char *sandbox_error;
        WaitQueue self_test_waiters;

        /* unsafe-no-sandbox */
        char *user;                     /* who the daemon, and then every script, runs as */
        char *unsandboxed_banner;
        bool unsandboxed;               /* as last announced in the log */
        bool source_builds_announced;   /* allow-source-builds, likewise */

        TomlCacheEntry toml_cache[TOML_CACHE_SIZE];
        size_t toml_cache_next;
        TomlRequest *toml_requests;

        /* The one scheduler (scheduler/scheduler.h): runs, helpers, builds, compiles, walks, sandboxes. */
        Scheduler *sched;
        unsigned max_runs;

        /* Sandboxes started ahead (prestart=); they count neither as running nor against idleness. */
        Pool *pool;
        RuntimePrestartFunc prestart;   /* starts one (execute_python's), NULL: none */

        /* A root daemon's sandboxes each run as a host uid of their own (sandbox-uid-range=); NULL otherwise. */
        UidPool *uids;

        /* Pythons installed on demand (python-downloads=) into the store's pythons/; NULL without uv. */
        PyInstaller *pyinstaller;
        /* network-allow=: the proxy that is the runs' only way out. */
        NetProxyContext *netproxy;
};

static void set_sched_limits(Runtime *r);

static char *find_in_path(const char *name) {
        _cleanup_strv_free_ char **dirs = NULL;

        if (strchr(name, '/'))
                return access(name, X_OK) >= 0 ? strdup(name) : NULL;
        dirs = strv_split(getenv("PATH") ?: "/usr/local/bin:/usr/bin:/bin", ":");
        for (size_t i = 0; dirs && dirs[i]; i++) {
                char *p = NULL;
                if (asprintf(&p, "%s/%s", dirs[i], name) < 0)
                        return NULL;
                if (access(p, X_OK) >= 0)
                        return p;
                free(p);
        }
        return NULL;
}

SandboxPolicy runtime_sandbox_policy(const Runtime *r) {
        return (SandboxPolicy) {
                .bwrap = r->config->bwrap_path,
                .network = r->config->network,
                .tmpfs_size = r->config->tmpfs_size,
                .etc_dir = r->etc_dir,
                .data_dirs = r->data_binds,
                .seccomp_fd = -EBADF,
        };
}

int runtime_data_dir_problem(const Runtime *r, const char *path, char **ret) {
        struct stat st;
        int k;

        *ret = NULL;
        if (stat(path, &st) < 0)
                return asprintf(ret, "cannot be used: %s", strerror(errno)) < 0 ? -ENOMEM : 0;
        if (!S_ISDIR(st.st_mode))
                return asprintf(ret, "is not a directory") < 0 ? -ENOMEM : 0;
        if (r->uids) {
                /* The sandboxes' uids are nobody's: they get what any other user gets. */
                k = path_reachable_by_others(path);
                if (k < 0)
                        return asprintf(ret, "cannot be examined: %s", strerror(-k)) < 0 ? -ENOMEM : 0;
                if (k == 0)
                        return asprintf(ret, "is not readable by the sandboxes, which run as uids of "
                                        "sandbox-uid-range: it and every directory above it must be readable and "
                                        "searchable by others (chmod o+rx)") < 0 ? -ENOMEM : 0;
                return 0;
        }
        /* Sandboxes run as the daemon's uid. */
        if (access(path, R_OK | X_OK) < 0)
                return asprintf(ret, "is not readable by the daemon's user, whom the sandboxes run as: %s",
                                strerror(errno)) < 0 ? -ENOMEM : 0;
        return 0;
}

/* Which data-dirs a sandbox can read, bound from now on; a warning for each it cannot, rather than an empty or
 * failing mount in every run. */
static int runtime_check_data_dirs(Runtime *r) {
        _cleanup_strv_free_ char **binds = strv_new();

        if (!binds)
                return -ENOMEM;
        for (size_t i = 0; r->config->data_dirs && r->config->data_dirs[i]; i++) {
                _cleanup_free_ char *name = NULL, *why = NULL, *problem = NULL;
                const char *path;

                if (data_dir_split(r->config->data_dirs[i], &name, &path, &why) < 0)
                        continue;       /* config_verify() said so already */
                if (runtime_data_dir_problem(r, path, &problem) < 0)
                        return -ENOMEM;
                if (problem) {
                        log_warning("data-dirs: %s (%s) %s; sandboxes will not have %s/%s.", path, name, problem,
                                    SANDBOX_DATA_DIR, name);
                        continue;
                }
                if (strv_extend(&binds, r->config->data_dirs[i]) < 0)
                        return -ENOMEM;
        }
        strv_free(r->data_binds);
        r->data_binds = TAKE_PTR(binds);
        return 0;
}

int memfd_with(const char *name, const void *data, size_t n) {
        _cleanup_close_ int fd = memfd_create(name, MFD_CLOEXEC);
        int k;

        if (fd < 0)
                return -errno;
        k = write_all(fd, data, n);
        if (k < 0)
                return k;
        if (lseek(fd, 0, SEEK_SET) < 0)
                return -errno;
        return TAKE_FD(fd);
}

/* The daemon's user: without the sandbox, every script's. */
static char *user_name(void) {
        struct passwd *pw = getpwuid(geteuid());
        char *s = NULL;

        if (pw)
                return strdup(pw->pw_name);
        if (asprintf(&s, "uid %u", (unsigned) geteuid()) < 0)
                return NULL;
        return s;
}

/* The uids of sandbox-uid-range (and their gids) must be nobody's: a user or group of one of them could reach into
 * a sandbox of that uid (signal, trace, or write where it may write). One pass over the accounts, at start-up. */
static int check_uid_range_unused(const UidRange *range) {
        struct passwd *pw;
        struct group *gr;
        int r = 0;

        setpwent();
        while (r == 0 && (pw = getpwent()))
                if (pw->pw_uid >= range->first && pw->pw_uid <= range->last) {
                        log_error("sandbox-uid-range=%" PRIu32 "-%" PRIu32 " holds the uid %u of the user %s: choose "
                                  "a range no account uses.",
                                  range->first, range->last, (unsigned) pw->pw_uid, pw->pw_name);
                        r = -EADDRINUSE;
                }
        endpwent();
        setgrent();
        while (r == 0 && (gr = getgrent()))
                if (gr->gr_gid >= range->first && gr->gr_gid <= range->last) {
                        log_error("sandbox-uid-range=%" PRIu32 "-%" PRIu32 " holds the gid %u of the group %s: "
                                  "choose a range no account uses.",
                                  range->first, range->last, (unsigned) gr->gr_gid, gr->gr_name);
                        r = -EADDRINUSE;
                }
        endgrent();
        return r;
}

static int pythons_dir_setup(Runtime *r);
static void on_python_installed(const char *version, const char *executable, const char *prefix, void *userdata);

/* network-allow= as the configuration says now (the entries were checked when it was read). */
static void configure_netproxy(Runtime *r) {
        NetAllowlist l = {};
        _cleanup_free_ char *error = NULL;

        if (net_allowlist_parse(r->config->network_allow, &l, &error) < 0)
                log_error("%s", strempty(error));
        net_proxy_context_configure(r->netproxy, &l, r->config->network_allow_private,
                                    (unsigned) MIN(r->config->network_max_connections_per_user, 65536u));
        if (net_proxy_context_enabled(r->netproxy) && !net_proxy_context_bridge(r->netproxy))
                log_error("network-allow is set, but mcp-python-sandbox-netbridge is not installed (looked beside the "
                          "daemon and in " PKGLIBEXECDIR "): runs that want the network will fail.");
}

int runtime_new(Runtime **ret, sd_event *event, const Config *config, Reaper *reaper, SandboxCgroups *cgroups) {
        Runtime *r = calloc(1, sizeof(*r));
        long ncpu;
        int k;

        if (!r)
                return -ENOMEM;
        r->event = sd_event_ref(event);
        r->config = config;
        r->reaper = reaper;
        r->cgroups = cgroups;
        r->uv_path = find_in_path(config->uv_path);
        ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        /* A run slot is a sandbox and an interpreter, not a CPU: scripts that sleep or wait on I/O use none, and
         * those that compute share the CPUs through the kernel, each run's cgroup with one equal weight
         * (see max-runs in mcp-python-sandboxd.conf). Four per CPU by default. */
        r->max_runs = config->max_runs > 0 ? (unsigned) MIN(config->max_runs, 4096u)
                                              : (unsigned) MIN(4 * (ncpu > 0 ? ncpu : 1), 4096);
        k = scheduler_new(&r->sched);
        if (k < 0) {
                free(r);
                return k;
        }
        set_sched_limits(r);
        if (geteuid() == 0) {
                k = uid_pool_new(&r->uids, config->sandbox_uids.first, config->sandbox_uids.last);
                if (k >= 0)
                        k = check_uid_range_unused(&config->sandbox_uids);
                if (k < 0) {
                        runtime_free(r);
                        return k;
                }
        }
        /* Who an unsandboxed script runs as: a root daemon's, a uid of its own. */
        r->user = r->uids ? strdup("an unprivileged uid of sandbox-uid-range") : user_name();
        if (!r->user || asprintf(&r->unsandboxed_banner,
                                 "WARNING: this run was not sandboxed: the server runs with unsafe-no-sandbox=yes "
                                 "(development only); the script ran as %s with access to the host's files and "
                                 "network.",
                                 r->user) < 0) {
                r->unsandboxed_banner = NULL;
                runtime_free(r);
                return -ENOMEM;
        }

        if (asprintf(&r->etc_dir, "%s/sandbox-etc", config->cache_dir) < 0) {
                runtime_free(r);
                return -ENOMEM;
        }
        k = pool_new(&r->pool, event, r->sched, (unsigned) MIN(config->prestart, 16u));
        if (k >= 0)
                k = net_proxy_context_new(&r->netproxy, event, scheduler_charges(r->sched));
        if (k < 0) {
                runtime_free(r);
                return k;
        }
        configure_netproxy(r);
        /* A root daemon's sandbox uids pass through it to their environments and /etc files, and see nothing
         * else; an unprivileged daemon's sandboxes are its own uid: nobody else needs in. */
        mode_t cache_mode = r->uids ? 0711 : 0700;
        k = mkdir_p(config->cache_dir, cache_mode);
        if (k >= 0 && chmod(config->cache_dir, cache_mode) < 0)
                k = -errno;
        /* Root works on the store by path: nobody else may be able to swap a directory on the way for a link. */
        if (k >= 0 && geteuid() == 0 && path_held_by(config->cache_dir, 0) == 0) {
                log_error("The cache directory %s is below a directory another user owns or may write: as root the "
                          "daemon would follow what they put there. Choose a cache directory only root can change "
                          "the path to (e.g. /var/cache/mcp-python-sandbox).",
                          config->cache_dir);
                runtime_free(r);
                return -EPERM;
        }
        if (k >= 0)
                k = sandbox_write_etc(r->etc_dir, r->uids != NULL);
        if (k >= 0)
                k = envstore_new(&r->store, event, config, r->sched, r->reaper, r->uv_path, r->uids != NULL);
        if (k >= 0 && r->uv_path)
                k = pythons_dir_setup(r);
        if (k >= 0)
                k = runtime_check_data_dirs(r);
        if (k < 0) {
                log_error_errno(k, "Failed to set up the cache directory %s: %m", config->cache_dir);
                runtime_free(r);
                return k;
        }
        *ret = r;
        return 0;
}

Runtime *runtime_free(Runtime *r) {
        if (!r)
                return NULL;
        /* The waiting sandboxes die with the daemon; those of answered runs, still dying, are reaped now. */
        pool_free(r->pool);
        reaper_finish(r->reaper);
        /* Waiting readers first: cancelling a running one must not start them. */
        for (TomlRequest *q = r->toml_requests; q; q = q->next)
                if (sched_ticket_waiting(&q->helper))
                        scheduler_release(&q->helper);
        while (r->toml_requests)
                runtime_toml_cancel(r->toml_requests);
        for (size_t i = 0; i < TOML_CACHE_SIZE; i++)
                json_object_put(r->toml_cache[i].result);
        for (size_t i = 0; i < r->n_probes; i++)
                process_free(r->probes[i]);
        free(r->probes);
        process_free(r->self_test);
        waitq_clear(&r->ready_waiters);
        waitq_clear(&r->self_test_waiters);
        pyinstaller_free(r->pyinstaller);
        envstore_free(r->store);
        /* What the frees above kept (cgroups still busy) is released while the scheduler and the uids are here. */
        reaper_finish(r->reaper);
        /* Its connections hold charges in the scheduler's account. */
        r->netproxy = net_proxy_context_free(r->netproxy);
        scheduler_free(r->sched);
        pythons_done(&r->pythons);
        free(r->uv_path);
        free(r->uv_version);
        free(r->uv_refused);
        free(r->bwrap_version);
        free(r->sandbox_error);
        free(r->user);
        free(r->unsandboxed_banner);
        free(r->etc_dir);
        strv_free(r->data_binds);
        uid_pool_unref(r->uids);
        net_proxy_context_free(r->netproxy);
        sandbox_seccomp_free(r->seccomp);
        sd_event_unref(r->event);
        free(r);
        return NULL;
}

/* ---- start-up probes ------------------------------------------------- */

static void warm_up(Runtime *r);
static int spawn_compile(void *userdata, EnvCompileStep step, const char *env_dir, const char *python,
                         const char *out_dir, uid_t uid, uint64_t timeout_usec, ProcessDoneFunc done,
                         void *done_userdata, Process **ret);

static void probe_finished(Runtime *r) {
        if (--r->pending > 0)
                return;
        if (r->pyinstaller)
                (void) pyinstall_scan(pyinstaller_dir(r->pyinstaller), on_python_installed, r);
        pythons_filter(&r->pythons, r->config->python_versions);
        {
                _cleanup_free_ char *list = pythons_list(&r->pythons);
                if (r->pythons.n == 0)
                        log_warning("No Python interpreter found in python-search-path; scripts cannot run.");
                else
                        log_info("Pythons: %s.", strempty(list));
        }
        envstore_set_uv_version(r->store, r->uv_version);
        /* Pythons known, sandbox tested: environments' bytecode can be compiled in it. */
        envstore_set_compiler(r->store, spawn_compile, r);
        r->ready = true;
        waitq_call_all(&r->ready_waiters);
        warm_up(r);
}

static char *first_line(const Capture *cap) {
        _cleanup_free_ char *t = capture_text(cap, NULL);
        if (!t)
                return NULL;
        t[strcspn(t, "\n")] = 0;
        return strdup(t);
}

/* A finished probe lets go of its pipes and pidfd at once. */
static void drop_probe(Runtime *r, Process *p) {
        for (size_t i = 0; i < r->n_probes; i++)
                if (r->probes[i] == p)
                        r->probes[i] = NULL;
        process_free(p);
}

static void on_python_probe(Process *p, void *userdata) {
        Runtime *r = userdata;
        _cleanup_free_ char *line = first_line(&p->out);

        if (p->exit_code == 0 && line && pythons_add_probe(&r->pythons, line) < 0)
                log_debug("Ignoring an interpreter whose probe said: %s", line);
        drop_probe(r, p);
        probe_finished(r);
}

static void on_uv_probe(Process *p, void *userdata) {
        Runtime *r = userdata;
        _cleanup_free_ char *line = first_line(&p->out);

        /* "uv 0.13.9 (...)" */
        if (p->exit_code == 0 && line && startswith(line, "uv ")) {
                char *v = line + 3;
                v[strcspn(v, " ")] = 0;
                r->uv_version = strdup(v);
                /* Refused at start, not at the first install: an older uv ignores some of our settings silently
                 * (system-certs=) and answers others with a usage error. */
                _cleanup_free_ char *reason = NULL;
                if (r->uv_version && envstore_check_uv_version(r->uv_version, &reason) > 0) {
                        log_error("%s: %s. Scripts without dependencies still run.", r->uv_path, reason);
                        if (envstore_refuse_uv(r->store, reason) >= 0)
                                r->uv_refused = TAKE_PTR(reason);
                }
        } else
                log_warning("%s --version failed; packages cannot be installed.", r->uv_path);
        drop_probe(r, p);
        probe_finished(r);
}

static void on_bwrap_probe(Process *p, void *userdata) {
        Runtime *r = userdata;

        if (p->exit_code == 0)
                r->bwrap_version = first_line(&p->out);
        drop_probe(r, p);
        probe_finished(r);
}

static int spawn_probe(Runtime *r, char **argv, ProcessDoneFunc done) {
        static char *env[] = { (char *) "PATH=/usr/local/bin:/usr/bin:/bin", (char *) "LANG=C.UTF-8", NULL };
        ProcessOptions o = {
                .argv = argv,
                .env = env,
                .stdin_fd = -EBADF,
                .timeout_usec = 15 * USEC_PER_SEC,
                .head_max = 4096,
        };
        Process **l = realloc(r->probes, (r->n_probes + 1) * sizeof(Process *));
        int k;

        if (!l)
                return -ENOMEM;
        r->probes = l;
        k = process_spawn(r->event, &o, done, r, &r->probes[r->n_probes]);
        if (k < 0)
                return k;
        r->n_probes++;
        r->pending++;
        return 0;
}


/*
 * python-search-path, expanded: a "*" pattern lists the directories it matches, "~/" is the daemon's user's home.
 * A root daemon skips "~/" entries: its sandboxes could not reach root's home, and it is no place for shared
 * interpreters. Builds with a "+" in their directory's name (uv's "+freethreaded", "+debug") are not the one
 * calls ask for.
 */
static char **python_search_dirs(const Runtime *r) {
        char **dirs = strv_new();
        const char *home = NULL;
        struct passwd *pw;

        if (geteuid() != 0) {
                pw = getpwuid(geteuid());
                home = pw && pw->pw_dir && pw->pw_dir[0] == '/' ? pw->pw_dir : NULL;
        }
        for (size_t i = 0; dirs && r->config->python_search_path[i]; i++) {
                const char *entry = r->config->python_search_path[i], *rest;
                _cleanup_free_ char *expanded = NULL;
                glob_t g = {};

                if ((rest = startswith(entry, "~/"))) {
                        if (!home || asprintf(&expanded, "%s/%s", home, rest) < 0)
                                continue;
                        entry = expanded;
                }
                if (!strchr(entry, '*')) {
                        (void) strv_extend(&dirs, entry);
                        continue;
                }
                if (glob(entry, GLOB_ONLYDIR, NULL, &g) == 0)
                        for (size_t j = 0; j < g.gl_pathc; j++)
                                if (!strchr(g.gl_pathv[j], '+'))
                                        (void) strv_extend(&dirs, g.gl_pathv[j]);
                globfree(&g);
        }
        return dirs;
}

static void discover_pythons(Runtime *r) {
        _cleanup_strv_free_ char **seen = strv_new();
        _cleanup_strv_free_ char **dirs = python_search_dirs(r);
        regex_t re;

        if (!dirs || regcomp(&re, "^python3(\\.[0-9]+)?$", REG_EXTENDED | REG_NOSUB) != 0)
                return;
        for (size_t i = 0; dirs[i]; i++) {
                const char *dir = dirs[i];
                struct dirent **list = NULL;
                int n = scandir(dir, &list, NULL, alphasort);

                for (int j = 0; j < n; j++) {
                        char path[PATH_MAX], real[PATH_MAX];
                        if (regexec(&re, list[j]->d_name, 0, NULL, 0) == 0) {
                                snprintf(path, sizeof(path), "%s/%s", dir, list[j]->d_name);
                                if (realpath(path, real) && access(real, X_OK) >= 0 && !strv_contains(seen, real)) {
                                        char *argv[] = { real, (char *) "-I", (char *) "-S", (char *) "-c",
                                                         (char *) python_probe_code, NULL };
                                        strv_extend(&seen, real);
                                        /* It runs here, on the host: only what nobody but root and we can
                                         * change. */
                                        if (path_held_by(real, geteuid()) <= 0)
                                                log_warning("Skipping %s: someone other than root and the daemon's "
                                                            "user can change it or a directory on its path.",
                                                            real);
                                        /* Under root, sandboxes run as uids of their own: they must reach it. */
                                        else if (r->uids && path_reachable_by_others(real) <= 0)
                                                log_warning("Skipping %s: the sandboxes' uids cannot reach it (a "
                                                            "directory on its path is not searchable by others, "
                                                            "e.g. a home directory of mode 0700).",
                                                            real);
                                        else if (spawn_probe(r, argv, on_python_probe) < 0)
                                                log_warning("Failed to probe %s.", real);
                                }
                        }
                        free(list[j]);
                }
                free(list);
        }
        regfree(&re);
}

/* ---- sandbox self-test ------------------------------------------------ */

/* Whether the sandbox works decides whether scripts run, unless they run without it anyway. */
static void log_sandbox_broken(Runtime *r) {
        if (runtime_unsandboxed(r))
                log_info("The sandbox does not work (%s); scripts run without it anyway (unsafe-no-sandbox=yes).",
                         strempty(r->sandbox_error));
        else
                log_error("Refusing to run scripts: %s.", strempty(r->sandbox_error));
}

/* Loud, at start-up and whenever a reload turns it on: nobody should run this way by accident. */
static void announce_unsandboxed(Runtime *r) {
        bool on = runtime_unsandboxed(r);

        /* The one place where a package's code runs outside the sandbox, by the administrator's choice. */
        if (r->config->allow_source_builds && !r->source_builds_announced)
                log_warning("allow-source-builds=yes: uv runs the build code of source distributions on the host, "
                            "as %s, with the store and the uv cache writable, outside the sandbox. Leave it off on "
                            "a shared machine.",
                            strempty(r->user));
        r->source_builds_announced = r->config->allow_source_builds;

        if (on && !r->unsandboxed)
                log_warning("Running scripts WITHOUT a sandbox (unsafe-no-sandbox=yes): for development only, never "
                            "on a shared machine. Scripts run as %s with the daemon's files and the host's network; "
                            "no namespaces, no read-only root, no system call filter. Only resource limits, timeouts "
                            "and a private temporary work directory remain.",
                            strempty(r->user));
        else if (!on && r->unsandboxed)
                log_notice("unsafe-no-sandbox turned off: scripts run in the sandbox again%s.",
                           r->sandbox_error ? " once its self-test passes" : "");
        r->unsandboxed = on;
}

static char *explain_sandbox_failure(const char *bwrap, const char *stderr_text, int exit_code) {
        const char *t = strempty(stderr_text);
        const char *fix;
        char *s = NULL;

        if (exit_code == 127 && strstr(t, "Failed to execute"))
                fix = "bubblewrap is not installed where configured: install it (apt install bubblewrap, "
                      "dnf install bubblewrap) or set bwrap= in the configuration";
        else if (strstr(t, "runs as host uid 0"))
                fix = "the sandbox must not be host root: run the daemon as root only with a working "
                      "sandbox-uid-range, or as an unprivileged user (the packaged units do)";
        else if (strstr(t, "writable from inside"))
                fix = "the kernel's settings must be read-only in the sandbox: use bubblewrap 0.8 or later, and do "
                      "not map the sandbox to host uid 0";
        else if (strstr(t, "Failed to become uid"))
                fix = "the daemon could not switch to a uid of sandbox-uid-range: check the setting, and that "
                      "the service may change its uid (no NoNewPrivileges= restriction on setuid, CAP_SETUID)";
        else if (strstr(t, "setting up uid map") || strstr(t, "No permissions to create") ||
                 strstr(t, "Creating new namespace failed") || strstr(t, "Operation not permitted"))
                fix = "user namespaces are not available to the service. On Ubuntu 23.10 and later set "
                      "kernel.apparmor_restrict_unprivileged_userns=0 (or give bwrap an AppArmor profile); elsewhere "
                      "check kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; and make sure the "
                      "unit sets neither RestrictNamespaces= nor PrivateUsers=";
        else if (strstr(t, "Can't find source path") || strstr(t, "Permission denied"))
                fix = "a sandbox uid cannot reach a path it needs: the cache directory and the Python "
                      "installations must be readable (directories searchable) by other users";
        else
                fix = "run check_environment again, and see the daemon's log (journalctl -u mcp-python-sandboxd)";
        if (asprintf(&s, "the sandbox (%s) does not work: %s; fix: %s", bwrap, *t ? t : "it failed without saying why",
                     fix) < 0)
                return NULL;
        return s;
}

static void on_self_test(Process *p, void *userdata) {
        Runtime *r = userdata;
        _cleanup_free_ char *err = capture_text(&p->err, NULL);

        free(r->sandbox_error);
        r->sandbox_error = NULL;
        /* Host root can only be seen from here: the uid the sandbox was started as. */
        if (p->uid == 0 && geteuid() == 0) {
                r->sandbox_error = explain_sandbox_failure(r->config->bwrap_path, "the sandbox runs as host uid 0", 1);
                log_sandbox_broken(r);
        } else if (p->exit_code != 0 || p->signal) {
                if (err)
                        err[strcspn(err, "\n")] = 0;
                r->sandbox_error = explain_sandbox_failure(r->config->bwrap_path, err, p->exit_code);
                log_sandbox_broken(r);
        } else
                log_debug("Sandbox self-test passed.");
        r->self_test = NULL;   /* freed by the owner below */
        process_free(p);
        if (!r->started) {
                r->started = true;
                probe_finished(r);
        }
        waitq_call_all(&r->self_test_waiters);
}

/*
 * What the self-test checks from inside: the kernel's knobs are out of reach. It only asks access(2): nothing is
 * ever written. A failure is one line on stderr that explain_sandbox_failure() turns into the cause and the fix.
 * (Whether the sandbox is host root cannot be seen from inside, where bwrap's nested user namespaces map every
 * uid; on_self_test() checks that from here.)
 */
static const char self_test_script[] =
        "for f in /proc/sys/kernel/core_pattern /proc/sys/kernel/modprobe /proc/sysrq-trigger; do\n"
        "        if [ -w \"$f\" ]; then echo \"$f is writable from inside the sandbox\" >&2; exit 1; fi\n"
        "done\n";

static int start_self_test(Runtime *r) {
        char *command[] = { (char *) "/bin/sh", (char *) "-c", (char *) self_test_script, NULL };
        int k;

        if (r->self_test)
                return 0;
        /* Bypass the "sandbox broken" check: this is what decides it. */
        k = runtime_spawn_sandboxed(r, NULL, NULL, NULL, 0, command, 15 * USEC_PER_SEC, NULL, 4096, 0, on_self_test,
                                    r, &r->self_test);
        if (k < 0) {
                free(r->sandbox_error);
                if (asprintf(&r->sandbox_error, "the sandbox (%s) could not be started: %s", r->config->bwrap_path,
                             strerror(-k)) < 0)
                        r->sandbox_error = NULL;
        }
        return k;
}

WaitEntry *runtime_self_test(Runtime *r, WaitFunc cb, void *userdata) {
        WaitEntry *e = waitq_push(&r->self_test_waiters, cb, userdata);
        if (!e)
                return NULL;
        if (start_self_test(r) < 0) {
                waitq_cancel(e);
                return NULL;
        }
        return e;
}

void runtime_start(Runtime *r) {
        char *uv_argv[] = { r->uv_path, (char *) "--version", NULL };
        char *bwrap_argv[] = { r->config->bwrap_path, (char *) "--version", NULL };

        envstore_cleanup(r->store);
        announce_unsandboxed(r);

        /* Also without the sandbox: check_environment tells whether it would work. */
        r->pending = 1;   /* the self-test */
        if (start_self_test(r) < 0) {
                r->pending--;
                r->started = true;
                log_sandbox_broken(r);
        }
        if (spawn_probe(r, bwrap_argv, on_bwrap_probe) < 0)
                log_warning("Failed to ask bwrap for its version.");
        if (r->uv_path) {
                if (spawn_probe(r, uv_argv, on_uv_probe) < 0)
                        log_warning("Failed to ask uv for its version.");
        } else
                log_warning("uv (%s) was not found: scripts with dependencies cannot run. Install uv or set uv= "
                            "in the configuration.",
                            r->config->uv_path);
        discover_pythons(r);

        if (r->pending == 0) {
                r->pending = 1;
                probe_finished(r);
        }
}

static void on_warm(const EnvResult *res, void *userdata) {
        (void) res;
        (void) userdata;
}

void runtime_set_prestart(Runtime *r, RuntimePrestartFunc f) {
        r->prestart = f;
}

/* The bare environment of the default Python, when it is built: the first hello world gets a sandbox ready. */
static void prestart_bare(Runtime *r) {
        _cleanup_free_ char *err = NULL, *path = NULL;
        const Python *py;
        char key[65];
        int k;

        if (r->config->prestart == 0 || !r->prestart || runtime_sandbox_error(r))
                return;
        py = pythons_choose(&r->pythons, NULL, NULL, &err);
        if (!py)
                return;
        envstore_key(r->store, py, &(RequirementList) {}, key);
        path = envstore_lookup(r->store, key);
        if (!path)
                return;
        k = r->prestart(r, path, py->prefix);
        if (k < 0)
                log_debug_errno(k, "Failed to start a sandbox ahead for the bare environment: %m");
}

static void warm_up(Runtime *r) {
        prestart_bare(r);
        for (size_t i = 0; r->config->warmup[i]; i++) {
                _cleanup_strv_free_ char **specs = strv_split(r->config->warmup[i], " \t");
                _cleanup_(requirement_list_done) RequirementList reqs = {};
                _cleanup_free_ char *err = NULL;
                const Python *py;
                char key[65];
                bool ok = true;

                for (size_t j = 0; specs && specs[j]; j++)
                        if (requirement_list_append(&reqs, specs[j], &err) < 0) {
                                log_warning("warmup \"%s\": %s; skipped.", r->config->warmup[i], strempty(err));
                                ok = false;
                                break;
                        }
                if (!ok)
                        continue;
                py = pythons_choose(&r->pythons, NULL, NULL, &err);
                if (!py)
                        continue;
                {
                        RequirementList sorted = {};
                        if (requirement_list_merge(&reqs, &(RequirementList) {}, &sorted) < 0)
                                continue;
                        envstore_key(r->store, py, &sorted, key);
                        _cleanup_free_ char *path = envstore_lookup(r->store, key);
                        if (!path)
                                (void) envstore_prepare(r->store, SCHEDULER_DAEMON_UID, key, py, &sorted, on_warm, NULL, NULL);
                        requirement_list_done(&sorted);
                }
        }
}

bool runtime_is_ready(const Runtime *r) {
        return r->ready;
}

WaitEntry *runtime_when_ready(Runtime *r, WaitFunc cb, void *userdata) {
        return waitq_push(&r->ready_waiters, cb, userdata);
}

bool runtime_is_idle(const Runtime *r) {
        for (SchedKind k = 0; k < _SCHED_KIND_MAX; k++)
                /* Open sandboxes have their own idleness (workspace_registry_busy()); those started ahead have none. */
                if (k != SCHED_SANDBOX && k != SCHED_PRESTART && (scheduler_held(r->sched, k) > 0 || scheduler_waiting(r->sched, k) > 0))
                        return false;
        return envstore_n_building(r->store) == 0;
}

void runtime_reload(Runtime *r) {
        announce_unsandboxed(r);
        /* The directories' permissions may have changed (data-dirs itself takes a restart). */
        if (runtime_check_data_dirs(r) < 0)
                log_oom();
        /* Started under the old settings (sandboxed or not, too): their policy may not be the one that holds now. */
        if (pool_n_ready(r->pool) > 0)
                log_debug("Stopping %u pre-started sandbox%s.", pool_n_ready(r->pool),
                          pool_n_ready(r->pool) == 1 ? "" : "es");
        pool_flush(r->pool);
        pool_set_size(r->pool, (unsigned) MIN(r->config->prestart, 16u));
        configure_netproxy(r);
        /* The caps may have gone up: waiters are served at once. */
        set_sched_limits(r);
        log_debug("Re-running the sandbox self-test.");
        (void) start_self_test(r);
}

bool runtime_network_allowlisted(const Runtime *r) {
        return net_proxy_context_enabled(r->netproxy) && !r->config->network && !runtime_unsandboxed(r);
}

/* The command behind the bridge, which gets the sandbox's end of the socket pair at fd. */
static char **bridge_command(Runtime *r, int fd, char *const *command) {
        _cleanup_strv_free_ char **cmd = strv_new();
        char s[16], port[16];

        snprintf(s, sizeof(s), "%d", fd);
        snprintf(port, sizeof(port), "%d", NET_PROXY_PORT);
        if (!cmd || strv_extend(&cmd, SANDBOX_BRIDGE_PATH) < 0 || strv_extend(&cmd, s) < 0 ||
            strv_extend(&cmd, port) < 0 || strv_extend_strv(&cmd, command) < 0)
                return NULL;
        return TAKE_PTR(cmd);
}

int runtime_network_wrap(Runtime *r, uid_t uid, char *const *command, NetProxy **ret_proxy, int *ret_fd,
                         char ***ret_command) {
        NetProxy *p = NULL;
        int fd = -EBADF, k;

        *ret_proxy = NULL;
        *ret_fd = -EBADF;
        *ret_command = NULL;
        if (!runtime_network_allowlisted(r))
                return 0;
        k = net_proxy_new(r->netproxy, uid, &p, &fd);
        if (k < 0)
                return k;
        *ret_command = bridge_command(r, fd, command);
        if (!*ret_command) {
                net_proxy_free(p);
                safe_close(fd);
                return -ENOMEM;
        }
        *ret_proxy = p;
        *ret_fd = fd;
        return 1;
}

int runtime_network_wrap_later(Runtime *r, char *const *command, int *ret_ctl_fd, int *ret_fd, char ***ret_command) {
        int ctl = -EBADF, fd = -EBADF, k;

        *ret_ctl_fd = *ret_fd = -EBADF;
        *ret_command = NULL;
        if (!runtime_network_allowlisted(r))
                return 0;
        if (!net_proxy_context_bridge(r->netproxy))
                return -ENOENT;
        k = net_proxy_socket_pair(&ctl, &fd);
        if (k < 0)
                return k;
        *ret_command = bridge_command(r, fd, command);
        if (!*ret_command) {
                safe_close(ctl);
                safe_close(fd);
                return -ENOMEM;
        }
        *ret_ctl_fd = ctl;
        *ret_fd = fd;
        return 1;
}

int runtime_network_adopt(Runtime *r, uid_t uid, int ctl_fd, NetProxy **ret) {
        return net_proxy_adopt(r->netproxy, uid, ctl_fd, ret);
}

const char *runtime_uv_path(const Runtime *r) {
        return r->uv_path;
}
const char *runtime_uv_version(const Runtime *r) {
        return r->uv_version;
}
const char *runtime_uv_refused(const Runtime *r) {
        return r->uv_refused;
}
const char *runtime_bwrap_version(const Runtime *r) {
        return r->bwrap_version;
}
const char *runtime_sandbox_error(const Runtime *r) {
        return runtime_unsandboxed(r) ? NULL : r->sandbox_error;
}
const char *runtime_self_test_error(const Runtime *r) {
        return r->sandbox_error;
}
bool runtime_unsandboxed(const Runtime *r) {
        return r->config->unsafe_no_sandbox;
}
const char *runtime_unsandboxed_banner(const Runtime *r) {
        return runtime_unsandboxed(r) ? r->unsandboxed_banner : NULL;
}
const char *runtime_user(const Runtime *r) {
        return r->user;
}
const Pythons *runtime_pythons(const Runtime *r) {
        return &r->pythons;
}
EnvStore *runtime_envstore(const Runtime *r) {
        return r->store;
}
const Config *runtime_config(const Runtime *r) {
        return r->config;
}
sd_event *runtime_event(const Runtime *r) {
        return r->event;
}
Pool *runtime_pool(const Runtime *r) {
        return r->pool;
}

/* ---- the sandbox -------------------------------------------------------- */

/* The cgroups of the next run (one, or one in each cgroup v1 hierarchy), when the daemon has cgroups; NULL: rlimits
 * only. */
/* A new run cgroup's name: unique across restarts too, so that a busy cgroup an earlier daemon left is never
 * joined. */
static void run_cgroup_name(char name[static 64]) {
        static unsigned long long n_runs;
        static uint64_t started;

        if (!started) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                started = (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
        }
        snprintf(name, 64, "run-%d-%" PRIx64 "-%llu", (int) getpid(), started, ++n_runs);
}

static char **new_run_cgroup(Runtime *r, const SandboxLimits *limits) {
        static bool logged;
        char **paths = NULL, name[64];
        int k;

        if (!logged) {
                logged = true;
                log_info("Resource limits: %s.", strempty(sandbox_limits_mechanism_detail(r->cgroups)));
        }
        if (sandbox_cgroup_probe(r->cgroups) <= 0)
                return NULL;
        run_cgroup_name(name);
        k = sandbox_cgroup_new_run_cgroups(r->cgroups, name, limits, &paths);
        if (k < 0) {
                log_warning_errno(k, "Failed to create the cgroup %s of a run, falling back to rlimits for this run: %m",
                                  name);
                return NULL;
        }
        return paths;
}


/* What a spawn in a cgroup gives back when its Process is freed (its cgroups removed by then): the group of runs
 * it was in goes once it is empty, then what was to be released. */
typedef struct CgroupSpawnHold {
        SandboxCgroups *cgroups;
        uid_t owner;
        ProcessReleaseFunc release;
        void *release_userdata;
} CgroupSpawnHold;

static void cgroup_spawn_hold_release(void *userdata) {
        CgroupSpawnHold *x = userdata;

        sandbox_cgroup_run_done(x->cgroups, x->owner);
        if (x->release)
                x->release(x->release_userdata);
        free(x);
}

int runtime_move_to_owner(Runtime *r, Process *p, uid_t uid) {
        _cleanup_strv_free_ char **paths = NULL;
        SandboxLimits limits;
        char name[64];
        int k;

        if (!p)
                return -EINVAL;
        if (!p->cgroups)
                return 0;   /* rlimits only: no group to be in */
        CgroupSpawnHold *x = p->release == cgroup_spawn_hold_release ? p->release_userdata : NULL;
        if (!x)
                return -EINVAL;   /* not one of spawn_limited()'s */
        if (x->owner == uid)
                return 0;
        /* Sandboxes started ahead have the configured limits: the new cgroups get the same. */
        sandbox_limits_from_config(r->config, &limits);
        limits.owner = uid;
        run_cgroup_name(name);
        k = sandbox_cgroup_move_run_cgroups(r->cgroups, p->cgroups, x->owner, name, &limits, &paths);
        if (k < 0)
                return log_warning_errno(k, "Failed to move a sandbox started ahead into the cgroup group of uid "
                                         UID_FMT ", not using it: %m", uid);
        strv_free(p->cgroups);
        p->cgroups = TAKE_PTR(paths);
        x->owner = uid;
        return 0;
}

/* Spawn o with the run's resource limits: a cgroup of its own when we can (and may), rlimits otherwise
 * (sandbox/limits.h). */
static int spawn_limited(Runtime *r, ProcessOptions *o, const SandboxLimits *limits, bool may_cgroup,
                         ProcessDoneFunc done, void *userdata, Process **ret) {
        _cleanup_strv_free_ char **cgroups = may_cgroup ? new_run_cgroup(r, limits) : NULL;
        ProcessLimit rlimits[SANDBOX_N_RLIMITS];
        int k;

        if (cgroups) {
                CgroupSpawnHold *x = calloc(1, sizeof(*x));
                if (!x) {
                        for (size_t i = 0; cgroups[i]; i++)
                                (void) rmdir(cgroups[i]);
                        sandbox_cgroup_run_done(r->cgroups, limits->owner);
                        if (o->release)
                                o->release(o->release_userdata);   /* as process_spawn() does when it fails */
                        return -ENOMEM;
                }
                *x = (CgroupSpawnHold) { .cgroups = r->cgroups, .owner = limits->owner, .release = o->release,
                                         .release_userdata = o->release_userdata };
                o->release = cgroup_spawn_hold_release;
                o->release_userdata = x;
        }
        o->limits = rlimits;
        o->n_limits = sandbox_limits_rlimits(limits, cgroups != NULL, rlimits);
        o->cgroups = cgroups;
        o->reaper = r->reaper;
        k = process_spawn(r->event, o, done, userdata, ret);
        for (size_t i = 0; k < 0 && cgroups && cgroups[i]; i++)
                (void) rmdir(cgroups[i]);
        return k;
}

/* What a spawn gives back when its Process is freed: its hold on the environment, then what was to be released. */
typedef struct EnvSpawnHold {
        EnvHold *hold;
        ProcessReleaseFunc release;
        void *release_userdata;
} EnvSpawnHold;

static void env_spawn_hold_release(void *userdata) {
        EnvSpawnHold *x = userdata;

        envstore_hold_release(x->hold);
        if (x->release)
                x->release(x->release_userdata);
        free(x);
}

/* The store never collects env_dir while o's process lives (envstore_hold()). */
static int runtime_hold_env(Runtime *r, ProcessOptions *o, const char *env_dir) {
        EnvSpawnHold *x;

        if (!env_dir || !r->store)
                return 0;
        x = calloc(1, sizeof(*x));
        if (!x)
                return -ENOMEM;
        x->hold = envstore_hold(r->store, env_dir);
        if (!x->hold) {
                free(x);
                return 0;   /* not one of the store's */
        }
        x->release = o->release;
        x->release_userdata = o->release_userdata;
        o->release = env_spawn_hold_release;
        o->release_userdata = x;
        return 0;
}

/* ---- without the sandbox (unsafe-no-sandbox) ---------------------------------- */

static int runtime_lease_uid(Runtime *r, ProcessOptions *o, char *const *own_dirs);

/* When path is the directory from or below it: 1, and *ret the same path below to. Else 0. */
static int path_moved(const char *path, const char *from, const char *to, char **ret) {
        const char *rest = startswith(path, from);

        if (!rest || (*rest && *rest != '/'))
                return 0;
        if (asprintf(ret, "%s%s", to, rest) < 0)
                return -ENOMEM;
        return 1;
}

/* A private directory for one run: top (mode 0700, in $TMPDIR) holding work, which stands for /work, and tmp,
 * which stands for /tmp. On failure nothing is left behind. */
static int make_run_dir(char **ret_top, char **ret_work, char **ret_tmp) {
        _cleanup_free_ char *top = NULL, *work = NULL, *tmp = NULL;
        const char *base = getenv("TMPDIR");
        int k;

        if (!base || base[0] != '/')
                base = "/tmp";
        if (asprintf(&top, "%s/mcp-python-sandbox-run-XXXXXX", base) < 0)
                return -ENOMEM;
        if (!mkdtemp(top))
                return -errno;
        if (asprintf(&work, "%s/work", top) < 0 || asprintf(&tmp, "%s/tmp", top) < 0)
                k = -ENOMEM;
        else
                k = mkdir(work, 0700) < 0 || mkdir(tmp, 0700) < 0 ? -errno : 0;
        if (k < 0) {
                (void) rm_rf_untrusted(top);
                return k;
        }
        *ret_top = TAKE_PTR(top);
        *ret_work = TAKE_PTR(work);
        *ret_tmp = TAKE_PTR(tmp);
        return 0;
}

/* A data file of the sandbox, written into the run's work directory (nothing runs there yet): the contents of
 * its fd from the current offset, read-only (0444) like the sandbox's. -EINVAL: not a plain path below /work. */
static int write_data_file(const char *work, const SandboxData *d) {
        const char *rel = startswith(d->dest, SANDBOX_WORK_DIR "/");
        _cleanup_free_ char *path = NULL;
        _cleanup_close_ int fd = -EBADF;
        char *slash;
        int k;

        if (!rel || !*rel)
                return -EINVAL;
        for (const char *c = rel; *c;) {
                size_t l = strcspn(c, "/");
                if (l == 0 || (l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
                        return -EINVAL;
                c += l;
                if (*c == '/' && !*++c)
                        return -EINVAL;
        }
        if (asprintf(&path, "%s/%s", work, rel) < 0)
                return -ENOMEM;
        slash = strrchr(path, '/');
        if (slash - path > (ptrdiff_t) strlen(work)) {
                *slash = 0;
                k = mkdir_p(path, 0755);
                *slash = '/';
                if (k < 0)
                        return k;
        }
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
        if (fd < 0)
                return -errno;
        for (;;) {
                char buf[65536];
                ssize_t n = read(d->fd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return 0;
                k = write_all(fd, buf, (size_t) n);
                if (k < 0)
                        return k;
        }
}

/* The run's environment: the sandbox's, with /work and /tmp where they are for this run, and the real user.
 * PATH and VIRTUAL_ENV name the environment where it is on the host (also when that is below /tmp): they stay. */
static char **unsandboxed_env(const Runtime *r, const char *env_dir, const char *work, const char *tmp) {
        _cleanup_strv_free_ char **env = sandbox_run_env(env_dir), **ret = strv_new();

        if (!env || !ret)
                return NULL;
        for (size_t i = 0; env[i]; i++) {
                const char *eq = strchr(env[i], '=');
                _cleanup_free_ char *v = NULL;
                int k;

                if (!eq)
                        continue;
                if (startswith(env[i], "PATH=") || startswith(env[i], "VIRTUAL_ENV=")) {
                        if (strv_extend(&ret, env[i]) < 0)
                                return NULL;
                        continue;
                }
                k = path_moved(eq + 1, SANDBOX_WORK_DIR, work, &v);
                if (k == 0)
                        k = path_moved(eq + 1, "/tmp", tmp, &v);
                if (k < 0)
                        return NULL;
                if (startswith(env[i], "USER="))
                        k = strv_extendf(&ret, "USER=%s", r->uids ? "nobody" : r->user);
                else if (k > 0)
                        k = strv_extendf(&ret, "%.*s=%s", (int) (eq - env[i]), env[i], v);
                else
                        k = strv_extend(&ret, env[i]);
                if (k < 0)
                        return NULL;
        }
        return TAKE_PTR(ret);
}

/* The command as the sandbox would run it, as the daemon's user, in a private directory that goes with the
 * Process: no namespaces, no read-only root, no system call filter, no tmpfs size; the same resource limits. */
static int spawn_in_run_dir(Runtime *r, const char *top, const char *work, const char *tmp, const char *env_dir,
                            const SandboxData *data, size_t n_data, const int *pass_fds, size_t n_pass,
                            char *const *command, uint64_t timeout_usec, const SandboxLimits *limits,
                            size_t head_max, size_t tail_max, ProcessDoneFunc done, void *userdata, Process **ret) {
        _cleanup_strv_free_ char **argv = strv_new(), **env = NULL;
        int k;

        for (size_t i = 0; i < n_data; i++) {
                k = write_data_file(work, &data[i]);
                if (k < 0)
                        return k;
        }
        /* Not the program: that is a host path, the same inside the sandbox (and may be below a host's /work). */
        for (size_t i = 0; command[i]; i++) {
                _cleanup_free_ char *a = NULL;
                k = i == 0 ? 0 : path_moved(command[i], SANDBOX_WORK_DIR, work, &a);
                if (k < 0 || strv_extend(&argv, k > 0 ? a : command[i]) < 0)
                        return -ENOMEM;
        }
        env = unsandboxed_env(r, env_dir, work, tmp);
        if (!argv || !env)
                return -ENOMEM;

        ProcessOptions o = {
                .argv = argv,
                .env = env,
                .cwd = work,
                .keep_fds = pass_fds,
                .n_keep_fds = n_pass,
                .stdin_fd = -EBADF,
                .timeout_usec = timeout_usec,
                .head_max = head_max,
                .tail_max = tail_max,
                .remove_dir = top,
        };
        /* Without a sandbox too, never as root: a uid of its own, which owns the run's directory. */
        char *own[] = { (char *) top, (char *) work, (char *) tmp, NULL };
        k = runtime_lease_uid(r, &o, own);
        if (k < 0)
                return k;
        k = runtime_hold_env(r, &o, env_dir);
        if (k < 0) {
                if (o.release)
                        o.release(o.release_userdata);
                return k;
        }
        return spawn_limited(r, &o, limits, true, done, userdata, ret);
}

static int spawn_unsandboxed(Runtime *r, const char *env_dir, const SandboxData *data, size_t n_data,
                             const int *pass_fds, size_t n_pass, char *const *command, uint64_t timeout_usec,
                             const SandboxLimits *limits, size_t head_max, size_t tail_max, ProcessDoneFunc done,
                             void *userdata, Process **ret) {
        _cleanup_free_ char *top = NULL, *work = NULL, *tmp = NULL;
        int k;

        k = make_run_dir(&top, &work, &tmp);
        if (k < 0)
                return k;
        k = spawn_in_run_dir(r, top, work, tmp, env_dir, data, n_data, pass_fds, n_pass, command, timeout_usec,
                             limits, head_max, tail_max, done, userdata, ret);
        if (k < 0)
                (void) rm_rf_untrusted(top);
        return k;
}

/* ---- in the sandbox ------------------------------------------------------------ */

typedef struct UidLease {
        UidPool *pool;
        uid_t uid;
} UidLease;

static void uid_lease_release(void *userdata) {
        UidLease *l = userdata;

        uid_pool_release(l->pool, l->uid);
        uid_pool_unref(l->pool);
        free(l);
}

/* Under a root daemon: o runs as a host uid of its own, given back when the Process is freed, and the directories
 * own_dirs (NULL-terminated, may be NULL) become that uid's: they are where it may write. */
static int runtime_lease_uid(Runtime *r, ProcessOptions *o, char *const *own_dirs) {
        UidLease *l;
        uid_t uid;
        int k;

        if (!r->uids)
                return 0;
        k = uid_pool_take(r->uids, &uid);
        if (k == -EUSERS)
                log_warning("All %u uids of sandbox-uid-range are in use; a sandbox cannot start.",
                            uid_pool_n_taken(r->uids));
        if (k < 0)
                return k;
        l = malloc(sizeof(*l));
        if (!l) {
                uid_pool_release(r->uids, uid);
                return -ENOMEM;
        }
        *l = (UidLease) { .pool = uid_pool_ref(r->uids), .uid = uid };
        for (size_t i = 0; own_dirs && own_dirs[i]; i++)
                if (chown(own_dirs[i], uid, (gid_t) uid) < 0) {
                        k = -errno;
                        uid_lease_release(l);
                        return k;
                }
        o->uid = uid;
        o->gid = (gid_t) uid;
        o->release = uid_lease_release;
        o->release_userdata = l;
        return 0;
}

int runtime_spawn_sandboxed(Runtime *r, const char *env_dir, char *const *ro_paths, const SandboxData *data,
                            size_t n_data, char *const *command, uint64_t timeout_usec, const SandboxLimits *limits,
                            size_t head_max, size_t tail_max, ProcessDoneFunc done, void *userdata, Process **ret) {
        return runtime_spawn_sandboxed_with_fd(r, env_dir, ro_paths, data, n_data, -EBADF, command, timeout_usec,
                                               limits, head_max, tail_max, done, userdata, ret);
}

int runtime_spawn_sandboxed_with_fd(Runtime *r, const char *env_dir, char *const *ro_paths, const SandboxData *data,
                                    size_t n_data, int pass_fd, char *const *command, uint64_t timeout_usec,
                                    const SandboxLimits *limits, size_t head_max, size_t tail_max,
                                    ProcessDoneFunc done, void *userdata, Process **ret) {
        return runtime_spawn_sandboxed_with_fds(r, env_dir, ro_paths, data, n_data, &pass_fd, pass_fd >= 0 ? 1 : 0,
                                                command, timeout_usec, limits, head_max, tail_max, done, userdata,
                                                ret);
}

/* runtime_spawn_in_bwrap(), and rw_dir (unless NULL) writable at its own path: it becomes the sandbox's. */
static int spawn_bwrap(Runtime *r, const char *env_dir, char *const *ro_paths, const char *rw_dir,
                       const SandboxData *data, size_t n_data, const int *pass_fds, size_t n_pass, int status_fd,
                       char *const *command, uint64_t timeout_usec, const SandboxLimits *limits, bool may_cgroup,
                       size_t head_max, size_t tail_max, ProcessDoneFunc done, void *userdata, Process **ret) {
        char *rw[] = { (char *) rw_dir, NULL };
        _cleanup_strv_free_ char **argv = NULL, **env = sandbox_run_env(env_dir ? SANDBOX_ENV_DIR : NULL),
                                 **inside = strv_new();
        static char *bwrap_env[] = { (char *) "PATH=/usr/bin:/bin", (char *) "LANG=C.UTF-8", NULL };
        _cleanup_close_ int seccomp_fd = -EBADF, args_fd = -EBADF;
        /* status, args, seccomp; the script and up to 16 of the user's files (tools/input-files.h); a few more. */
        int keep[32];
        size_t n_keep = 0;
        int k;

        if (n_data + n_pass + 3 > ELEMENTSOF(keep))
                return -E2BIG;
        /* No filter, no run: the sandbox never starts with less than it promises. Built at the first run. */
        if (!r->seccomp && (k = sandbox_seccomp_new(&r->seccomp)) < 0)
                return k;
        seccomp_fd = sandbox_seccomp_export(r->seccomp);
        if (seccomp_fd < 0)
                return seccomp_fd;

        /* The command as the run sees it: the environment at SANDBOX_ENV_DIR, not where it is on the host. */
        for (size_t i = 0; command && command[i]; i++) {
                _cleanup_free_ char *moved = NULL;
                k = env_dir ? path_moved(command[i], env_dir, SANDBOX_ENV_DIR, &moved) : 0;
                if (k < 0 || strv_extend(&inside, k > 0 ? moved : command[i]) < 0)
                        return -ENOMEM;
        }
        if (!env || !inside)
                return -ENOMEM;

        SandboxPolicy policy = runtime_sandbox_policy(r);
        policy.env_dir = env_dir;
        policy.ro_paths = ro_paths;
        policy.rw_paths = rw_dir ? rw : NULL;
        /* network-allow: a command behind the bridge (runtime_network_wrap()) gets the bridge. */
        if (inside[0] && streq(inside[0], SANDBOX_BRIDGE_PATH))
                policy.bridge = net_proxy_context_bridge(r->netproxy);
        policy.data = data;
        policy.n_data = n_data;
        policy.seccomp_fd = seccomp_fd;
        policy.env = env;
        policy.command = inside;
        /* The options through a memfd (--args): the sandbox's pid 1, a copy of bwrap, shows only the command. */
        k = sandbox_build_args(&policy, &argv, &args_fd);
        if (k < 0)
                return k;

        /* bwrap's own report (the sandbox's pid, then its exit code), which bwrap keeps from what it runs: one
         * more option in the memfd, out of sight like the others. */
        if (status_fd >= 0) {
                char opt[64];
                int n = snprintf(opt, sizeof(opt), "--json-status-fd%c%d", 0, status_fd);
                if (lseek(args_fd, 0, SEEK_END) < 0)
                        return -errno;
                k = write_all(args_fd, opt, (size_t) n + 1);
                if (k < 0)
                        return k;
                if (lseek(args_fd, 0, SEEK_SET) < 0)
                        return -errno;
                keep[n_keep++] = status_fd;
        }
        keep[n_keep++] = args_fd;
        for (size_t i = 0; i < n_data; i++)
                keep[n_keep++] = data[i].fd;
        keep[n_keep++] = seccomp_fd;
        for (size_t i = 0; i < n_pass; i++)
                keep[n_keep++] = pass_fds[i];
        ProcessOptions o = {
                .argv = argv,
                .env = bwrap_env,
                .keep_fds = keep,
                .n_keep_fds = n_keep,
                .stdin_fd = -EBADF,
                .timeout_usec = timeout_usec,
                .head_max = head_max,
                .tail_max = tail_max,
                /* The bytecode compile, the one sandbox with a directory to write to: it never slows a run. */
                .idle = rw_dir != NULL,
        };
        k = runtime_lease_uid(r, &o, rw_dir ? rw : NULL);
        if (k < 0)
                return k;
        k = runtime_hold_env(r, &o, env_dir);
        if (k < 0) {
                if (o.release)
                        o.release(o.release_userdata);
                return k;
        }
        return spawn_limited(r, &o, limits, may_cgroup, done, userdata, ret);
}

int runtime_spawn_in_bwrap(Runtime *r, const char *env_dir, char *const *ro_paths, const SandboxData *data,
                           size_t n_data, const int *pass_fds, size_t n_pass, int status_fd, char *const *command,
                           uint64_t timeout_usec, const SandboxLimits *limits, size_t head_max, size_t tail_max,
                           ProcessDoneFunc done, void *userdata, Process **ret) {
        return spawn_bwrap(r, env_dir, ro_paths, NULL, data, n_data, pass_fds, n_pass, status_fd, command,
                           timeout_usec, limits, true, head_max, tail_max, done, userdata, ret);
}

/* envstore's EnvCompileFunc: the base interpreter of the environment compiles its sources into out_dir, in the
 * sandbox, with the run's limits and no more than a run may have. */
static int spawn_compile(void *userdata, EnvCompileStep step, const char *env_dir, const char *python,
                         const char *out_dir, uid_t uid, uint64_t timeout_usec, ProcessDoneFunc done,
                         void *done_userdata, Process **ret) {
        Runtime *r = userdata;
        _cleanup_free_ char *prefix_arg = NULL, *lib = NULL, *env_python = NULL;
        const Python *py = NULL;
        SandboxLimits limits;

        if (runtime_sandbox_error(r) || runtime_unsandboxed(r))
                return -EPERM;   /* never outside the sandbox */
        for (size_t i = 0; i < r->pythons.n && !py; i++)
                if (streq(r->pythons.items[i]->executable, python))
                        py = r->pythons.items[i];
        if (!py)
                return -ENOENT;
        if (step == ENV_COMPILE_FONTS) {
                /* matplotlib's font list: its code runs, so as a run's would, the environment where runs see it,
                 * charged to uid, with nothing of the host to write to: the list is made in the sandbox's /tmp (a
                 * tmpfs of tmpfs-size) and handed back on stdout, its name first; more than ENV_FONTS_MAX bytes
                 * are not kept (envstore's fonts_adopt() refuses them). */
                static const char fonts_code[] =
                        "import os, sys\n"
                        "d = os.environ['MPLCONFIGDIR'] = '/tmp/mcp-python-sandbox-mpl'\n"
                        "import matplotlib.font_manager as fm\n"
                        "name = 'fontlist-v%s.json' % fm.FontManager.__version__\n"
                        "with open(os.path.join(d, name), 'rb') as f:\n"
                        "    data = f.read()\n"
                        "sys.stdout.buffer.write(name.encode() + b'\\n' + data)\n";
                char *ro_fonts[] = { streq(py->prefix, "/usr") ? NULL : py->prefix, NULL };
                if (out_dir)
                        return -EINVAL;   /* never a host directory to write to */
                if (asprintf(&env_python, "%s/bin/python", env_dir) < 0)
                        return -ENOMEM;
                char *command[] = { env_python, (char *) "-I", (char *) "-B", (char *) "-c", (char *) fonts_code,
                                    NULL };
                sandbox_limits_from_config(r->config, &limits);
                limits.cpu_usec = 0;    /* its own time limit stands */
                limits.owner = uid;
                return spawn_bwrap(r, env_dir, ro_fonts, NULL, NULL, 0, NULL, 0, -EBADF, command, timeout_usec,
                                   &limits, true, ENV_FONTS_MAX + 1, 4096, done, done_userdata, ret);
        }
        if (asprintf(&prefix_arg, "pycache_prefix=%s", out_dir) < 0 || asprintf(&lib, "%s/lib", env_dir) < 0)
                return -ENOMEM;
        /* The environment at its own path here, which the pycache_prefix tree then mirrors (nothing of it reaches a
         * model: co_filename is set anew when a run imports the .pyc). */
        char *ro[] = { (char *) env_dir, streq(py->prefix, "/usr") ? NULL : py->prefix, NULL };
        char *command[] = { py->executable, (char *) "-I", (char *) "-S", (char *) "-B", (char *) "-X", prefix_arg,
                            (char *) "-m", (char *) "compileall", (char *) "-q", lib, NULL };
        sandbox_limits_from_config(r->config, &limits);
        limits.cpu_usec = 0;    /* the build's own time limit stands */
        return spawn_bwrap(r, NULL, ro, out_dir, NULL, 0, NULL, 0, -EBADF, command, timeout_usec, &limits, true, 4096,
                           4096, done, done_userdata, ret);
}


int runtime_spawn_sandboxed_with_fds(Runtime *r, const char *env_dir, char *const *ro_paths, const SandboxData *data,
                                     size_t n_data, const int *pass_fds, size_t n_pass, char *const *command,
                                     uint64_t timeout_usec, const SandboxLimits *limits, size_t head_max,
                                     size_t tail_max, ProcessDoneFunc done, void *userdata, Process **ret) {
        SandboxLimits configured;
        bool self_test = ret == &r->self_test;

        if (!limits) {
                sandbox_limits_from_config(r->config, &configured);
                limits = &configured;
        }
        /* The self-test always tries the real thing. */
        if (runtime_unsandboxed(r) && !self_test)
                return spawn_unsandboxed(r, env_dir, data, n_data, pass_fds, n_pass, command, timeout_usec, limits,
                                         head_max, tail_max, done, userdata, ret);
        if (r->sandbox_error && !self_test)
                return -EPERM;
        return runtime_spawn_in_bwrap(r, env_dir, ro_paths, data, n_data, pass_fds, n_pass, -EBADF, command,
                                      timeout_usec, limits, head_max, tail_max, done, userdata, ret);
}

/* ---- TOML ------------------------------------------------------------------ */

static void toml_request_free(TomlRequest *q) {
        Runtime *r = q->runtime;

        if (q->prev)
                q->prev->next = q->next;
        else
                r->toml_requests = q->next;
        if (q->next)
                q->next->prev = q->prev;
        process_free(q->proc);
        scheduler_release(&q->helper);
        sd_event_source_disable_unref(q->defer);
        json_object_put(q->result);
        free(q->toml);
        free(q);
}

void runtime_toml_cancel(TomlRequest *q) {
        if (q)
                toml_request_free(q);
}

static void toml_deliver(TomlRequest *q) {
        json_object *doc = json_get(q->result, "doc", json_type_object);
        const char *error = json_get_string(q->result, "error");

        if (!doc && !error)
                error = "the metadata could not be read";
        q->cb(doc, error, q->userdata);
        toml_request_free(q);
}

static int on_toml_defer(sd_event_source *s, void *userdata) {
        toml_deliver(userdata);
        return 0;
}

static void on_toml_done(Process *p, void *userdata) {
        TomlRequest *q = userdata;
        Runtime *r = q->runtime;
        _cleanup_free_ char *out = capture_text(&p->out, NULL);

        q->result = out && p->exit_code == 0 ? json_tokener_parse(out) : NULL;
        if (!q->result) {
                _cleanup_free_ char *err = capture_text(&p->err, NULL);
                log_warning("The metadata reader failed (exit %d): %s", p->exit_code, strempty(err));
                q->result = json_object_new_object();
                json_add_string(q->result, "error", "the metadata reader failed; see the daemon's log");
        } else {
                /* Remember the answer: a block seen before costs no process. */
                TomlCacheEntry *e = &r->toml_cache[r->toml_cache_next++ % TOML_CACHE_SIZE];
                json_object_put(e->result);
                memcpy(e->hash, q->hash, 65);
                e->result = json_object_get(q->result);
        }
        q->proc = NULL;
        process_free(p);
        scheduler_release(&q->helper);
        toml_deliver(q);
}

static const Python *toml_python(const Runtime *r) {
        /* tomllib arrived in 3.11. */
        for (size_t i = 0; i < r->pythons.n; i++)
                if (r->pythons.items[i]->parsed.n_release >= 2 && r->pythons.items[i]->parsed.release[0] == 3 &&
                    r->pythons.items[i]->parsed.release[1] >= 11)
                        return r->pythons.items[i];
        return NULL;
}

/* Through the loop: never a callback from inside runtime_parse_toml(). */
static void toml_fail(TomlRequest *q, const char *error) {
        json_object_put(q->result);
        q->result = json_object_new_object();
        json_add_string(q->result, "error", error);
        scheduler_release(&q->helper);
        if (sd_event_add_defer(q->runtime->event, &q->defer, on_toml_defer, q) < 0)
                toml_deliver(q);
}

/* The reader's place is ours: start it. */
static void on_toml_helper(SchedTicket *t, void *userdata) {
        TomlRequest *q = userdata;
        Runtime *r = q->runtime;
        const Python *py = toml_python(r);
        int k;

        if (!py)
                return toml_fail(q, "reading script metadata needs Python 3.11 or newer on the server, and there is none");
        _cleanup_close_ int fd = memfd_with("metadata.toml", q->toml, strlen(q->toml));
        if (fd < 0)
                return toml_fail(q, "the metadata reader could not be started");
        SandboxData data = { .fd = fd, .dest = SANDBOX_WORK_DIR "/metadata.toml" };
        char *prefix[] = { py->prefix, NULL };
        char *command[] = { py->executable, (char *) "-I",        (char *) "-S",
                            (char *) "-c",  (char *) toml_helper, (char *) data.dest,
                            NULL };
        log_debug("Reading a metadata block (%.12s) with %s's tomllib %s.", q->hash, command[0],
                  runtime_unsandboxed(r) ? "without a sandbox" : "in the sandbox");
        k = runtime_spawn_sandboxed(r, NULL, streq(py->prefix, "/usr") ? NULL : prefix, &data, 1, command,
                                    15 * USEC_PER_SEC, NULL, 1024 * 1024, 0, on_toml_done, q, &q->proc);
        if (k < 0) {
                log_warning_errno(k, "Failed to start the metadata reader: %m");
                toml_fail(q, k == -EPERM ? "the sandbox does not work on this server"
                                         : "the metadata reader could not be started");
        }
}

int runtime_parse_toml(Runtime *r, uid_t uid, const char *toml, TomlParsedFunc cb, void *userdata, TomlRequest **ret) {
        TomlRequest *q;
        int k;

        q = calloc(1, sizeof(*q));
        if (!q)
                return -ENOMEM;
        *q = (TomlRequest) { .runtime = r, .cb = cb, .userdata = userdata, .next = r->toml_requests };
        if (r->toml_requests)
                r->toml_requests->prev = q;
        r->toml_requests = q;
        sha256_hex(toml, strlen(toml), q->hash);

        for (size_t i = 0; i < TOML_CACHE_SIZE; i++)
                if (r->toml_cache[i].result && streq(r->toml_cache[i].hash, q->hash)) {
                        q->result = json_object_get(r->toml_cache[i].result);
                        break;
                }
        if (!q->result && !toml_python(r)) {
                q->result = json_object_new_object();
                json_add_string(q->result, "error",
                                "reading script metadata needs Python 3.11 or newer on the server, and there is none");
        }
        if (q->result) {
                k = sd_event_add_defer(r->event, &q->defer, on_toml_defer, q);
                if (k < 0) {
                        toml_request_free(q);
                        return k;
                }
                *ret = q;
                return 0;
        }

        q->toml = strdup(toml);
        if (!q->toml) {
                toml_request_free(q);
                return -ENOMEM;
        }
        /* One reader sandbox per block, and no more of them at once than the caps allow: a flood of distinct
         * blocks waits here, round robin among the users who sent them. */
        *ret = q;
        k = scheduler_acquire(r->sched, &q->helper, SCHED_HELPER, uid, on_toml_helper, q);
        if (k == 0)
                on_toml_helper(&q->helper, q);   /* delivers through the loop only */
        else if (k != SCHEDULER_QUEUED) {
                toml_request_free(q);
                *ret = NULL;
                return k < 0 ? k : -ENOMEM;   /* the helper queue has no cap: not reached */
        }
        return 0;
}

/* ---- the scheduler's caps --------------------------------------------- */

SandboxCgroups *runtime_cgroups(const Runtime *r) {
        return r->cgroups;
}

Scheduler *runtime_scheduler(const Runtime *r) {
        return r->sched;
}

static unsigned cap(uint64_t v) {
        return (unsigned) MIN(v, (uint64_t) SCHEDULER_UNLIMITED - 1);
}

/* The caps of every kind from the configuration: at start and at each reload (max-runs itself stays). */
static void set_sched_limits(Runtime *r) {
        const Config *c = r->config;

        scheduler_set_limits(r->sched, SCHED_RUN,
                             &(SchedLimits) {
                                     .total = r->max_runs,
                                     .per_user = runtime_max_runs_per_user(r),
                                     .queue = cap(c->max_queue),   /* 0: see runtime_acquire_slot() */
                                     .queue_per_user = runtime_max_queued_per_user(r),
                             });
        scheduler_set_limits(r->sched, SCHED_BUILD,
                             &(SchedLimits) { .total = cap(c->max_builds), .per_user = cap(c->max_builds_per_user) });
        scheduler_set_limits(r->sched, SCHED_HELPER,
                             &(SchedLimits) { .total = cap(c->max_helpers), .per_user = cap(c->max_helpers_per_user) });
        scheduler_set_limits(r->sched, SCHED_COMPILE,
                             &(SchedLimits) { .total = cap(c->max_compiles), .per_user = cap(c->max_compiles_per_user) });
        scheduler_set_limits(r->sched, SCHED_WALK,
                             &(SchedLimits) { .total = cap(c->max_walks), .per_user = cap(c->max_walks_per_user) });
        /* The pool's own bound (prestart= per target, POOL_MAX_TARGETS targets) for each uid it starts sandboxes for
         * (the daemon's account for whoever comes first), and four times that in all. */
        unsigned prestart = MAX(MIN(c->prestart, 16u), 1u) * POOL_MAX_TARGETS;
        scheduler_set_limits(r->sched, SCHED_PRESTART, &(SchedLimits) { .total = 4 * prestart, .per_user = prestart });
        scheduler_set_limits(r->sched, SCHED_SANDBOX,
                             &(SchedLimits) { .total = cap(c->max_sandboxes), .per_user = cap(c->max_sandboxes_per_user) });
}

/* ---- run slots ---------------------------------------------------------- */

unsigned runtime_n_running_for(const Runtime *r, uid_t uid) {
        return scheduler_held_by(r->sched, SCHED_RUN, uid);
}

/* 0: half of max-runs (at least one), so that one user's backlog always leaves slots to everybody else. */
unsigned runtime_max_runs_per_user(const Runtime *r) {
        uint64_t cap = r->config->max_runs_per_user;

        if (cap == 0)
                return MAX(r->max_runs / 2, 1u);
        return cap < r->max_runs ? (unsigned) cap : r->max_runs;
}

unsigned runtime_n_queued_for(const Runtime *r, uid_t uid) {
        return scheduler_waiting_for(r->sched, SCHED_RUN, uid);
}

/* One user's share of the queue is that of the slots, so that one user's calls cannot fill it for everybody. */
unsigned runtime_max_queued_per_user(const Runtime *r) {
        uint64_t q = MIN(r->config->max_queue, (uint64_t) UINT32_MAX - 1);   /* no overflow below */

        return (unsigned) MIN((q * runtime_max_runs_per_user(r) + r->max_runs - 1) / r->max_runs, q);
}

int runtime_acquire_slot(Runtime *r, SchedTicket *t, uid_t uid, SchedGrantFunc cb, void *userdata) {
        /* max-queue=0: no run waits. */
        if (r->config->max_queue == 0) {
                int k = scheduler_try_acquire(r->sched, t, SCHED_RUN, uid);
                return k == SCHEDULER_QUOTA ? SCHEDULER_QUEUE_FULL : k;
        }
        return scheduler_acquire(r->sched, t, SCHED_RUN, uid, cb, userdata);
}

unsigned runtime_n_running(const Runtime *r) {
        return scheduler_held(r->sched, SCHED_RUN);
}
unsigned runtime_n_queued(const Runtime *r) {
        return scheduler_waiting(r->sched, SCHED_RUN);
}
unsigned runtime_max_runs(const Runtime *r) {
        return r->max_runs;
}

/* ---- Pythons installed on demand ---------------------------------------- */

typedef struct PythonInstallRequest {
        Runtime *runtime;
        PyInstallWaiter *waiter;
        RuntimePythonFunc cb;
        void *userdata;
} PythonInstallRequest;

static int pythons_dir_setup(Runtime *r) {
        _cleanup_free_ char *dir = NULL;
        /* Like envs/: sandboxes of other uids (a root daemon's) pass through to the interpreter they run. */
        mode_t mode = r->uids ? 0711 : 0700;
        int k;

        if (asprintf(&dir, "%s/pythons", r->config->cache_dir) < 0)
                return -ENOMEM;
        k = mkdir_p(dir, mode);
        if (k >= 0 && chmod(dir, mode) < 0)
                k = -errno;
        /* uv makes its lock file 0666: anyone who can name it (the directory is searchable under root) could
         * hold it and stall every install. Made here first, it stays ours alone. */
        if (k >= 0) {
                _cleanup_free_ char *lock = NULL;
                _cleanup_close_ int fd = -EBADF;
                if (asprintf(&lock, "%s/.lock", dir) < 0)
                        return -ENOMEM;
                fd = open(lock, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0 || fchmod(fd, 0600) < 0)
                        k = -errno;
        }
        if (k >= 0)
                k = pyinstaller_new(&r->pyinstaller, r->event, r->config, r->sched, r->reaper, r->uv_path, dir);
        return k;
}

static void on_python_installed(const char *version, const char *executable, const char *prefix, void *userdata) {
        Runtime *r = userdata;
        char real[PATH_MAX];
        char *const *allowed = r->config->python_versions;
        bool ok = !allowed || !allowed[0];

        if (!realpath(executable, real))
                return;
        for (size_t i = 0; !ok && allowed[i]; i++)
                ok = python_version_matches(&(Python) { .version = (char *) version }, allowed[i]);
        if (!ok) {
                log_debug("Not offering the installed Python %s: python-versions does not allow it.", version);
                return;
        }
        if (pythons_add(&r->pythons, version, real, prefix) > 0)
                log_info("Python %s (installed by uv, %s) is available.", version, real);
}

bool runtime_python_downloads(const Runtime *r) {
        /* uv that answered its probe and is new enough. */
        return r->pyinstaller && r->uv_version && !r->uv_refused && config_python_downloads(r->config);
}

bool runtime_python_installed(const Runtime *r, const Python *py) {
        return r->pyinstaller && pyinstall_owns(pyinstaller_dir(r->pyinstaller), py->executable);
}

static void on_install(const char *error, void *userdata) {
        PythonInstallRequest *req = userdata;
        Runtime *r = req->runtime;
        RuntimePythonFunc cb = req->cb;
        void *ud = req->userdata;

        free(req);
        if (!error)
                (void) pyinstall_scan(pyinstaller_dir(r->pyinstaller), on_python_installed, r);
        cb(error, ud);
}

int runtime_install_python(Runtime *r, uid_t uid, const char *request, RuntimePythonFunc cb, void *userdata,
                           RuntimePythonRequest **ret) {
        PythonInstallRequest *req;
        int k;

        if (!runtime_python_downloads(r))
                return -EPERM;
        req = calloc(1, sizeof(*req));
        if (!req)
                return -ENOMEM;
        *req = (PythonInstallRequest) { .runtime = r, .cb = cb, .userdata = userdata };
        k = pyinstaller_install(r->pyinstaller, uid, request, on_install, req, &req->waiter);
        if (k < 0) {
                free(req);
                return k;
        }
        *ret = (RuntimePythonRequest *) req;
        return 0;
}

void runtime_install_python_cancel(RuntimePythonRequest *p) {
        PythonInstallRequest *req = (PythonInstallRequest *) p;

        if (!req)
                return;
        pyinstall_waiter_cancel(req->waiter);
        free(req);
}
