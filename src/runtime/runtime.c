/* SPDX-License-Identifier: MIT */
/*
 * The Runtime itself: made at start-up (the cache directory, the uid range, the store, the pool, the network
 * proxy), freed, reloaded; the sandbox policy every spawn starts from and the data directories it binds; the
 * accessors the tools read; the scheduler's caps from the configuration and the run slots. The rest is in the
 * files beside it (runtime-internal.h lists them).
 */

#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs-util.h"
#include "log.h"
#include "macro.h"
#include "nss-child.h"
#include "runtime-internal.h"
#include "strv.h"
#include "time-util.h"

static void set_sched_limits(Runtime *r);
static void runs_wake(void *userdata);

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

char *const *runtime_data_binds(const Runtime *r) {
        return r ? r->data_binds : NULL;
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

static int user_name_child(int fd, void *userdata) {
        struct passwd *pw = getpwuid(geteuid());

        return pw && pw->pw_name ? write_all(fd, pw->pw_name, strlen(pw->pw_name)) : 0;
}

/* The daemon's user: without the sandbox, every script's. */
static char *user_name(void) {
        char *s = NULL;

        if (nss_child_run(user_name_child, NULL, &s) >= 0 && s && s[0])
                return s;
        free(s);
        if (asprintf(&s, "uid %u", (unsigned) geteuid()) < 0)
                return NULL;
        return s;
}

/* The uids of sandbox-uid-range (and their gids) must be nobody's: a user or group of one of them could reach into
 * a sandbox of that uid (signal, trace, or write where it may write). One pass over the accounts, at start-up, in a
 * child (nss-child.h). */
static int check_uid_range_unused_child(int fd, void *userdata) {
        const UidRange *range = userdata;
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

static int check_uid_range_unused(const UidRange *range) {
        return nss_child_run(check_uid_range_unused_child, (void *) range, NULL);
}

int runtime_new(Runtime **ret, sd_event *event, const Config *config, Reaper *reaper, SandboxCgroups *cgroups) {
        Runtime *r;
        long ncpu;
        int k;

        if (!cgroups)
                return -EINVAL;   /* every spawn asks it where runs go */
        r = calloc(1, sizeof(*r));
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
        scheduler_set_wake(r->sched, runs_wake, r);
        set_sched_limits(r);
        k = runtime_metadata_setup(r);
        if (k < 0) {
                runtime_free(r);
                return k;
        }
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
        runtime_configure_netproxy(r);
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
                k = runtime_pythons_dir_setup(r);
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
        r->metadata = metadata_reader_free(r->metadata);
        for (size_t i = 0; i < r->n_probes; i++)
                process_free(r->probes[i]);
        free(r->probes);
        process_free(r->self_test);
        for (size_t i = 0; i < r->n_codes; i++)
                runtime_code_free(r->codes[i]);
        free(r->codes);
        waitq_clear(&r->ready_waiters);
        waitq_clear(&r->self_test_waiters);
        pyinstaller_free(r->pyinstaller);
        envstore_free(r->store);
        /* What the frees above kept (cgroups still busy) is released while the scheduler and the uids are here. */
        reaper_finish(r->reaper);
        /* Its connections hold charges in the scheduler's account. */
        r->netproxy = net_proxy_context_free(r->netproxy);
        r->runs_retry = sd_event_source_disable_unref(r->runs_retry);
        scheduler_free(r->sched);
        pythons_done(&r->pythons);
        free(r->uv_path);
        free(r->uv_version);
        free(r->uv_refused);
        free(r->service_limits);
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

bool runtime_is_ready(const Runtime *r) {
        return r->ready;
}

WaitEntry *runtime_when_ready(Runtime *r, WaitFunc cb, void *userdata) {
        return waitq_push(&r->ready_waiters, cb, userdata);
}

bool runtime_is_idle(const Runtime *r) {
        for (SchedKind k = 0; k < _SCHED_KIND_MAX; k++)
                /* Open sandboxes have their own idleness (workspace_registry_busy()); those started ahead have none. */
                if (k != SCHED_WORKSPACE && k != SCHED_PRESTART &&
                    (scheduler_held(r->sched, k) > 0 || scheduler_waiting(r->sched, k) > 0))
                        return false;
        return envstore_n_building(r->store) == 0;
}

void runtime_reload(Runtime *r) {
        runtime_announce_unsandboxed(r);
        /* The directories' permissions may have changed (data-dirs itself takes a restart). */
        if (runtime_check_data_dirs(r) < 0)
                log_oom();
        /* Started under the old settings (sandboxed or not, too): their policy may not be the one that holds now. */
        if (pool_n_ready(r->pool) > 0)
                log_debug("Stopping %u pre-started sandbox%s.", pool_n_ready(r->pool),
                          pool_n_ready(r->pool) == 1 ? "" : "es");
        pool_flush(r->pool);
        pool_set_size(r->pool, (unsigned) MIN(r->config->prestart, 16u));
        runtime_configure_netproxy(r);
        /* The caps may have gone up: waiters are served at once. */
        set_sched_limits(r);
        log_debug("Re-running the sandbox self-test.");
        (void) runtime_start_self_test(r);
}

/* A memory size as MemoryMax= takes it: mebibytes, rounded up. */
static void format_mib(char *buf, size_t size, uint64_t v) {
        if (v == SANDBOX_SERVICE_UNLIMITED)
                snprintf(buf, size, "infinity");
        else
                snprintf(buf, size, "%" PRIu64 "M", v / (1024 * 1024) + (v % (1024 * 1024) != 0));
}

static void format_count(char *buf, size_t size, uint64_t v) {
        if (v == SANDBOX_SERVICE_UNLIMITED)
                snprintf(buf, size, "infinity");
        else
                snprintf(buf, size, "%" PRIu64, v);
}

bool runtime_check_service_limits(Runtime *r) {
        const Config *c = r->config;
        uint64_t sandboxes = c->persistent_sandboxes ? c->max_sandboxes : 0, scripts = r->max_runs + sandboxes;
        long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
        _cleanup_free_ char *why = NULL, *field = NULL;
        SandboxServiceLimits have, need;
        size_t why_len = 0, field_len = 0;
        char h[32], n[32];
        int k;

        r->service_limits = mfree(r->service_limits);
        k = sandbox_cgroup_service_limits("/proc/self/mountinfo", "/proc/self/cgroup", &have);
        if (k < 0) {
                log_debug_errno(k, "Cannot read the limits of the daemon's cgroup: %m");
                r->service_limits = strdup("unknown: the daemon's cgroup cannot be read");
                return true;
        }
        sandbox_service_need(scripts, c->max_processes, c->max_memory,
                             pages > 0 && page_size > 0 ? (uint64_t) pages * (uint64_t) page_size : 0, &need);

        if (need.tasks > have.tasks) {
                format_count(h, sizeof(h), have.tasks);
                format_count(n, sizeof(n), need.tasks);
                strextendf_len(&why, &why_len,
                               "TasksMax= (pids.max) is %s, and (max-runs %u + max-sandboxes %" PRIu64
                               ") x max-processes %" PRIu64 " + %u for the daemon is %s: raise it ",
                               h, r->max_runs, sandboxes, c->max_processes, SANDBOX_SERVICE_TASKS_MARGIN, n);
                if (need.tasks == SANDBOX_SERVICE_UNLIMITED)
                        strextendf_len(&why, &why_len, "to infinity");
                else
                        strextendf_len(&why, &why_len, "by %" PRIu64, need.tasks - have.tasks);
                strextendf_len(&field, &field_len, "TasksMax= %s, %s needed", h, n);
        }
        /* Less than a mebibyte short is rounding: systemd takes MemoryMax=80% in whole pages. */
        if (need.memory > have.memory && need.memory - have.memory >= 1024 * 1024) {
                format_mib(h, sizeof(h), have.memory);
                format_mib(n, sizeof(n), need.memory);
                strextendf_len(&why, &why_len,
                               "%sMemoryMax= is %s, and (max-runs %u + max-sandboxes %" PRIu64
                               ") x max-memory, at most %u%% of the machine's memory, is %s: raise it ",
                               why ? "; " : "", h, r->max_runs, sandboxes, SANDBOX_SERVICE_MEMORY_SHARE, n);
                if (need.memory == SANDBOX_SERVICE_UNLIMITED)
                        strextendf_len(&why, &why_len, "to infinity");
                else
                        strextendf_len(&why, &why_len, "by %" PRIu64 "M",
                                       (need.memory - have.memory + 1024 * 1024 - 1) / (1024 * 1024));
                strextendf_len(&field, &field_len, "%sMemoryMax= %s, %s needed", field ? "; " : "", h, n);
        }
        if (why) {
                log_warning("The service's own limits are below what the configuration's caps let it hold: %s "
                            "(systemctl edit mcp-python-sandboxd.service), or lower the caps.", why);
                if (asprintf(&r->service_limits, "too small: %s", field) < 0)
                        r->service_limits = NULL;
                return false;
        }
        format_count(h, sizeof(h), have.tasks);
        format_count(n, sizeof(n), need.tasks);
        strextendf_len(&field, &field_len, "enough: TasksMax= %s, %s needed", h, n);
        format_mib(h, sizeof(h), have.memory);
        format_mib(n, sizeof(n), need.memory);
        strextendf_len(&field, &field_len, "; MemoryMax= %s, %s needed", h, n);
        r->service_limits = TAKE_PTR(field);
        return true;
}

const char *runtime_service_limits(const Runtime *r) {
        return r->service_limits;
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

unsigned runtime_self_test_age_sec(const Runtime *r) {
        return r->self_test_usec > 0 ? (unsigned) ((now_usec() - r->self_test_usec) / USEC_PER_SEC) : 0;
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
        scheduler_set_limits(r->sched, SCHED_WORKSPACE,
                             &(SchedLimits) { .total = cap(c->max_sandboxes), .per_user = cap(c->max_sandboxes_per_user) });
        /* A carry holds the snapshot of a sandbox's /work (up to 16 MiB of tar, as base64 some 21 MiB, parsed and
         * sent on again: ~50 MB at its peak): one at a time in all, the users' turns round robin. */
        scheduler_set_limits(r->sched, SCHED_CARRY, &(SchedLimits) { .total = 1, .per_user = 1 });
        /* A user's runs wait while its clients leave a quarter of max-reply-buffer-per-user unread. The replies of
         * the runs already in flight go into empty queues up to twice that bound (see session.c): room for seven
         * of the largest (10 MiB of files each, some 14 MB of JSON) when no client reads. */
        scheduler_set_reply_gate(r->sched, c->max_reply_buffer_per_user / 4);
}

static int on_runs_retry(sd_event_source *s, void *userdata) {
        Runtime *r = userdata;

        scheduler_retry(r->sched, SCHED_RUN);
        return 0;
}

/* A user's clients have read their replies: serve its runs from the loop, not from within the write that did. */
static void runs_wake(void *userdata) {
        Runtime *r = userdata;

        /* Without a source (no memory), the runs go at the next release of a run slot. */
        if (!r->runs_retry && sd_event_add_defer(r->event, &r->runs_retry, on_runs_retry, r) < 0)
                return;
        (void) sd_event_source_set_enabled(r->runs_retry, SD_EVENT_ONESHOT);
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
                if (k != SCHEDULER_QUOTA)
                        return k;
                return scheduler_replies_unread(r->sched, uid) ? SCHEDULER_REPLIES_UNREAD : SCHEDULER_QUEUE_FULL;
        }
        return scheduler_acquire(r->sched, t, SCHED_RUN, uid, cb, userdata);
}

char *runtime_replies_unread_message(const Runtime *r, uid_t uid) {
        uint64_t unread = charge_registry_used(scheduler_charges(r->sched), uid, CHARGE_REPLY_BYTES);
        char *m = NULL;

        if (asprintf(&m, "your clients have not read %.1f MiB of replies to earlier calls: no script of yours starts "
                     "while %.1f MiB or more of them wait unread (a quarter of max-reply-buffer-per-user), and the "
                     "queue has no room for this call to wait (max-queue). Read those replies, or close the "
                     "connections that hold them, then try again",
                     (double) unread / (1024 * 1024),
                     (double) scheduler_reply_gate(r->sched) / (1024 * 1024)) < 0)
                return NULL;
        return m;
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
