/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "config/config.h"
#include "limits.h"
#include "macro.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

#define CPU_PERIOD_USEC 100000

void sandbox_limits_from_config(const Config *c, SandboxLimits *ret) {
        *ret = (SandboxLimits) {
                .memory = c->max_memory,
                .processes = c->max_processes,
                /* Wall-clock time is capped by the timeout; CPU time only adds up faster with threads. */
                .cpu_usec = c->max_cpu_time_usec ?: c->max_timeout_usec + SANDBOX_CPU_MARGIN_USEC,
                .file_size = c->max_file_size ?: c->tmpfs_size,
                .open_files = c->max_open_files,
                .cpu_quota = c->cpu_quota,
        };
}

static uint64_t lower_one(uint64_t max, uint64_t want, unsigned bit, unsigned *raised) {
        if (want == 0)
                return max;
        if (max != 0 && want > max) {
                *raised |= bit;
                return max;
        }
        return want;
}

unsigned sandbox_limits_lower(const SandboxLimits *max, const SandboxLimits *want, SandboxLimits *ret) {
        unsigned raised = 0;
        SandboxLimits l = *max;

        l.memory = lower_one(max->memory, want->memory, SANDBOX_LIMIT_MEMORY, &raised);
        l.processes = lower_one(max->processes, want->processes, SANDBOX_LIMIT_PROCESSES, &raised);
        l.cpu_usec = lower_one(max->cpu_usec, want->cpu_usec, SANDBOX_LIMIT_CPU, &raised);
        l.file_size = lower_one(max->file_size, want->file_size, SANDBOX_LIMIT_FILE_SIZE, &raised);
        *ret = l;
        return raised;
}

size_t sandbox_limits_rlimits(const SandboxLimits *l, bool cgroup, ProcessLimit ret[static SANDBOX_N_RLIMITS]) {
        size_t n = 0;

        ret[n++] = (ProcessLimit) { .resource = RLIMIT_CORE, .value = 0 };
        if (l->cpu_usec > 0) {
                rlim_t s = (rlim_t) ((l->cpu_usec + 999999) / 1000000);
                /* SIGXCPU at the soft limit (it ends Python), SIGKILL a little later for whoever ignores it. */
                ret[n++] = (ProcessLimit) { .resource = RLIMIT_CPU, .value = s, .hard = s + 5 };
        }
        /* Python ignores SIGXFSZ: a write past the limit fails with EFBIG. */
        if (l->file_size > 0)
                ret[n++] = (ProcessLimit) { .resource = RLIMIT_FSIZE, .value = (rlim_t) l->file_size };
        if (l->open_files > 0)
                ret[n++] = (ProcessLimit) { .resource = RLIMIT_NOFILE, .value = (rlim_t) l->open_files };
        if (!cgroup && l->memory > 0)
                ret[n++] = (ProcessLimit) { .resource = RLIMIT_AS, .value = (rlim_t) l->memory };
        if (!cgroup && l->processes > 0)
                ret[n++] = (ProcessLimit) { .resource = RLIMIT_NPROC, .value = (rlim_t) l->processes };
        return n;
}

/* ---- what hit a limit --------------------------------------------------- */

/* "numpy.core._exceptions._ArrayMemoryError: ..." or "MemoryError": a dotted name ending in MemoryError. */
static bool is_memory_error(const char *line, size_t n) {
        static const char name[] = "MemoryError";
        size_t i = 0;

        while (i < n && (isalnum((unsigned char) line[i]) || line[i] == '_' || line[i] == '.'))
                i++;
        if (i < sizeof(name) - 1 || memcmp(line + i - (sizeof(name) - 1), name, sizeof(name) - 1) != 0)
                return false;
        return i == n || line[i] == ':' || isspace((unsigned char) line[i]);
}

static bool line_has(const char *line, size_t n, const char *s) {
        size_t l = strlen(s);

        for (size_t i = 0; i + l <= n; i++)
                if (memcmp(line + i, s, l) == 0)
                        return true;
        return false;
}

static const char *classify_line(const char *line, size_t n) {
        if (is_memory_error(line, n) || line_has(line, n, "[Errno 12] Cannot allocate memory"))
                return "memory";
        if ((line_has(line, n, "BlockingIOError") && line_has(line, n, "[Errno 11]")) ||
            line_has(line, n, "can't start new thread") || line_has(line, n, "can't create new thread") ||
            (n > 6 && memcmp(line, "bwrap:", 6) == 0 && line_has(line, n, "Resource temporarily unavailable")))
                return "processes";
        if (line_has(line, n, "[Errno 27] File too large"))
                return "file_size";
        if (line_has(line, n, "[Errno 28] No space left on device"))
                return "disk_space";
        if (line_has(line, n, "[Errno 24] Too many open files"))
                return "open_files";
        return NULL;
}

int sandbox_exit_signal(int exit_code) {
        return exit_code > 128 && exit_code < 128 + NSIG ? exit_code - 128 : 0;
}

const char *sandbox_limit_hit(const SandboxOutcome *o) {
        const char *found = NULL;
        int sig = o->signal ?: o->decoded ? 0 : sandbox_exit_signal(o->exit_code);

        if (o->timed_out)
                return "timeout";
        if (sig == SIGXCPU)
                return "cpu_time";
        if (sig == SIGXFSZ)
                return "file_size";
        if (o->oom_killed)
                return "memory";
        if (o->pids_max)
                return "processes";

        /* The last line naming an exhausted resource: the exception that ended the script comes last. */
        for (const char *l = o->stderr_text; l && *l;) {
                const char *e = strchrnul(l, '\n');
                const char *what = classify_line(l, (size_t) (e - l));
                if (what)
                        found = what;
                l = *e ? e + 1 : e;
        }
        return found;
}

/* ---- cgroup v2 ---------------------------------------------------------- */

static int reason(char **ret_reason, int r, const char *format, ...) _printf_(3, 4);
static int reason(char **ret_reason, int r, const char *format, ...) {
        va_list ap;

        if (ret_reason) {
                free(*ret_reason);
                va_start(ap, format);
                if (vasprintf(ret_reason, format, ap) < 0)
                        *ret_reason = NULL;
                va_end(ap);
        }
        return r;
}

/* Write a short string to dir/name, as cgroupfs wants it: one write, no creation. */
static int write_at(const char *dir, const char *name, const char *value) {
        char path[PATH_MAX];
        _cleanup_close_ int fd = -EBADF;
        size_t n = strlen(value);

        if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
                return -ENAMETOOLONG;
        fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (fd < 0)
                return -errno;
        ssize_t k = write(fd, value, n);
        if (k < 0)
                return -errno;
        return (size_t) k == n ? 0 : -EIO;
}

static int read_at(const char *dir, const char *name, char *buf, size_t size) {
        char path[PATH_MAX];
        _cleanup_close_ int fd = -EBADF;
        size_t have = 0;

        if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
                return -ENAMETOOLONG;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        while (have + 1 < size) {
                ssize_t k = read(fd, buf + have, size - 1 - have);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                have += (size_t) k;
        }
        buf[have] = 0;
        return (int) have;
}

/* Is word one of the space-separated words of list? */
static bool has_word(const char *list, const char *word) {
        size_t l = strlen(word);

        for (const char *p = list; (p = strstr(p, word)); p += l)
                if ((p == list || isspace((unsigned char) p[-1])) && (!p[l] || isspace((unsigned char) p[l])))
                        return true;
        return false;
}

int sandbox_cgroup_find(const char *proc_cgroup, const char *mount, char **ret_dir, char **ret_reason) {
        _cleanup_free_ char *line = NULL, *dir = NULL;
        size_t allocated = 0;
        char *path = NULL;
        FILE *f;

        f = fopen(proc_cgroup, "re");
        if (!f)
                return reason(ret_reason, -errno, "%s cannot be read: %s", proc_cgroup, strerror(errno));
        while (getline(&line, &allocated, f) >= 0)
                if (startswith(line, "0::")) {
                        path = line + 3;
                        path[strcspn(path, "\n")] = 0;
                        break;
                }
        fclose(f);
        if (!path || path[0] != '/')
                return reason(ret_reason, -EOPNOTSUPP, "the daemon is in no cgroup v2 (no \"0::\" line in %s)",
                              proc_cgroup);

        /* Our own leaf (systemd's DelegateSubgroup=supervisor, or where we moved ourselves) stands for its parent. */
        size_t l = strlen(path);
        if (l > 11 && streq(path + l - 11, "/supervisor"))
                path[l - 11] = 0;
        if (streq(path, "/") || !*path)
                return reason(ret_reason, -EOPNOTSUPP,
                              "the daemon runs in the root cgroup, which is not a delegated subtree "
                              "(set Delegate=yes in its unit)");
        if (asprintf(&dir, "%s%s", mount, path) < 0)
                return -ENOMEM;

        char sc[PATH_MAX];
        snprintf(sc, sizeof(sc), "%s/cgroup.subtree_control", dir);
        if (access(sc, W_OK) < 0)
                return reason(ret_reason, -EOPNOTSUPP,
                              "the daemon's cgroup %s is not delegated to it (%s is not writable; set "
                              "Delegate=yes in its unit)",
                              dir, sc);
        /* Root may write anywhere: only systemd's mark says the subtree is ours. */
        if (geteuid() == 0 && getxattr(dir, "trusted.delegate", NULL, 0) < 0 &&
            getxattr(dir, "user.delegate", NULL, 0) < 0)
                return reason(ret_reason, -EOPNOTSUPP,
                              "the daemon's cgroup %s is not marked as delegated (set Delegate=yes in its unit)", dir);

        *ret_dir = TAKE_PTR(dir);
        return 0;
}

int sandbox_cgroup_prepare(const char *dir, char **ret_reason) {
        char controllers[1024], enable[64] = "", sup[PATH_MAX];
        int r;

        r = read_at(dir, "cgroup.controllers", controllers, sizeof(controllers));
        if (r < 0)
                return reason(ret_reason, r, "%s/cgroup.controllers cannot be read: %s", dir, strerror(-r));
        if (!has_word(controllers, "memory") || !has_word(controllers, "pids"))
                return reason(ret_reason, -EOPNOTSUPP,
                              "the memory and pids controllers are not available in %s (it offers: %.200s)", dir,
                              controllers);
        strcat(enable, "+memory +pids");
        if (has_word(controllers, "cpu"))
                strcat(enable, " +cpu");

        r = write_at(dir, "cgroup.subtree_control", enable);
        if (r == -EBUSY) {
                /* "No internal processes": ours go into a leaf of their own, then the controllers can be enabled. */
                char procs[4096];
                snprintf(sup, sizeof(sup), "%s/supervisor", dir);
                if (mkdir(sup, 0755) < 0 && errno != EEXIST)
                        return reason(ret_reason, -errno, "%s cannot be created: %s", sup, strerror(errno));
                r = read_at(dir, "cgroup.procs", procs, sizeof(procs));
                if (r < 0)
                        return reason(ret_reason, r, "%s/cgroup.procs cannot be read: %s", dir, strerror(-r));
                for (char *p = procs, *e; *p; p = e) {
                        long pid = strtol(p, &e, 10);
                        if (e == p)
                                break;
                        if (pid > 0)
                                (void) sandbox_cgroup_attach(sup, (pid_t) pid);
                }
                r = write_at(dir, "cgroup.subtree_control", enable);
        }
        if (r < 0)
                return reason(ret_reason, r, "the controllers cannot be enabled in %s/cgroup.subtree_control: %s",
                              dir, strerror(-r));
        return 0;
}

static int write_limit(const char *dir, const char *name, uint64_t v, bool optional) {
        char s[32];
        int r;

        if (v > 0)
                snprintf(s, sizeof(s), "%" PRIu64, v);
        else
                strcpy(s, "max");
        r = write_at(dir, name, s);
        return optional && r == -ENOENT ? 0 : r;
}

int sandbox_cgroup_new_run(const char *dir, const char *name, const SandboxLimits *l, char **ret_path) {
        _cleanup_free_ char *path = NULL;
        char cpu[64];
        int r;

        if (asprintf(&path, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return -errno;

        r = write_limit(path, "memory.max", l->memory, false);
        /* Swap would let a run go past memory.max; and an OOM kill takes the whole run, not one victim. */
        if (r >= 0 && l->memory > 0)
                r = write_at(path, "memory.swap.max", "0");
        if (r == -ENOENT)
                r = 0;
        if (r >= 0) {
                r = write_at(path, "memory.oom.group", "1");
                if (r == -ENOENT)
                        r = 0;
        }
        if (r >= 0)
                r = write_limit(path, "pids.max", l->processes, false);
        if (r >= 0) {
                if (l->cpu_quota > 0)
                        snprintf(cpu, sizeof(cpu), "%" PRIu64 " %u", l->cpu_quota * CPU_PERIOD_USEC / 100,
                                 CPU_PERIOD_USEC);
                else
                        snprintf(cpu, sizeof(cpu), "max %u", CPU_PERIOD_USEC);
                r = write_at(path, "cpu.max", cpu);
                /* No cpu controller: fine unless a cap was asked for. */
                if (r == -ENOENT && l->cpu_quota == 0)
                        r = 0;
        }
        if (r < 0) {
                (void) rmdir(path);
                return r;
        }
        *ret_path = TAKE_PTR(path);
        return 0;
}

int sandbox_cgroup_attach(const char *path, pid_t pid) {
        char s[32];

        snprintf(s, sizeof(s), "%d", pid > 0 ? (int) pid : (int) getpid());
        return write_at(path, "cgroup.procs", s);
}

static uint64_t event_value(const char *text, const char *key) {
        size_t l = strlen(key);

        for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
                if (strncmp(p, key, l) == 0 && p[l] == ' ')
                        return strtoull(p + l + 1, NULL, 10);
        return 0;
}

int sandbox_cgroup_read_events(const char *path, SandboxCgroupEvents *ret) {
        char buf[1024];
        int r;

        *ret = (SandboxCgroupEvents) {};
        r = read_at(path, "memory.events", buf, sizeof(buf));
        if (r < 0)
                return r;
        ret->oom_kill = event_value(buf, "oom_kill");
        r = read_at(path, "pids.events", buf, sizeof(buf));
        if (r < 0)
                return r;
        ret->pids_max = event_value(buf, "max");
        return 0;
}

void sandbox_cgroup_remove_stale(const char *dir) {
        DIR *d = opendir(dir);
        struct dirent *de;

        if (!d)
                return;
        /* A run still going keeps its cgroup busy: rmdir fails for it. */
        while ((de = readdir(d)))
                if (de->d_type == DT_DIR && startswith(de->d_name, "run-"))
                        (void) unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
        closedir(d);
}

/* ---- the daemon's mechanism ------------------------------------------- */

static struct {
        bool probed;
        char *dir;
        char *detail;
} state;

int sandbox_cgroup_probe(void) {
        _cleanup_free_ char *why = NULL, *dir = NULL;
        struct statfs fs;
        int r;

        if (state.probed)
                return !!state.dir;
        state.probed = true;

        if (statfs("/sys/fs/cgroup", &fs) < 0 || (uint64_t) fs.f_type != CGROUP2_SUPER_MAGIC)
                why = strdup("/sys/fs/cgroup is not a cgroup v2 hierarchy (cgroup v1 or a hybrid layout)");
        else {
                r = sandbox_cgroup_find("/proc/self/cgroup", "/sys/fs/cgroup", &dir, &why);
                if (r >= 0)
                        r = sandbox_cgroup_prepare(dir, &why);
                if (r >= 0) {
                        sandbox_cgroup_remove_stale(dir);
                        state.dir = TAKE_PTR(dir);
                }
        }

        if (state.dir)
                r = asprintf(&state.detail,
                             "cgroup v2: every run gets a cgroup of its own under %s (memory.max, pids.max, "
                             "cpu.max), plus rlimits for CPU time, file size, open files and core dumps",
                             state.dir);
        else
                r = asprintf(&state.detail,
                             "rlimits on the sandbox (RLIMIT_AS per process, RLIMIT_NPROC per user, RLIMIT_CPU, "
                             "RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE); no cgroup of its own for each run "
                             "because %s",
                             why ?: "cgroup v2 could not be used");
        if (r < 0)
                state.detail = NULL;
        return !!state.dir;
}

const char *sandbox_cgroup_dir(void) {
        (void) sandbox_cgroup_probe();
        return state.dir;
}

const char *sandbox_limits_mechanism(void) {
        return sandbox_cgroup_probe() > 0 ? "cgroup" : "rlimit";
}

const char *sandbox_limits_mechanism_detail(void) {
        (void) sandbox_cgroup_probe();
        return state.detail ?: sandbox_limits_mechanism();
}
