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
#include "sha256.h"
#include "strv.h"

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
                .owner = SANDBOX_OWNER_DAEMON,
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

bool sandbox_limits_equal(const SandboxLimits *a, const SandboxLimits *b) {
        return a->memory == b->memory && a->processes == b->processes && a->cpu_usec == b->cpu_usec &&
               a->file_size == b->file_size && a->open_files == b->open_files && a->cpu_quota == b->cpu_quota &&
               a->cpu_usec_without_cgroup == b->cpu_usec_without_cgroup;
}

size_t sandbox_limits_rlimits(const SandboxLimits *l, bool cgroup, ProcessLimit ret[static SANDBOX_N_RLIMITS]) {
        size_t n = 0;

        ret[n++] = (ProcessLimit) { .resource = RLIMIT_CORE, .value = 0 };
        if (l->cpu_usec > 0 && !(cgroup && l->cpu_usec_without_cgroup)) {
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

        /* What the run's cgroup counted comes first, before the timeout too: a fork bomb that swallows EAGAIN
         * runs into the timeout, but the process limit it kept hitting is what explains the run. */
        if (o->oom_killed)
                return "memory";
        if (o->pids_max)
                return "processes";
        if (o->timed_out)
                return "timeout";
        if (sig == SIGXCPU)
                return "cpu_time";
        if (sig == SIGXFSZ)
                return "file_size";

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

/* ---- cgroups, either version ------------------------------------------ */

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

/* Is word one of the words of list, separated by any of seps? */
static bool has_word_sep(const char *list, const char *word, const char *seps) {
        size_t l = strlen(word);

        for (const char *p = list; (p = strstr(p, word)); p += l)
                if ((p == list || strchr(seps, p[-1])) && (!p[l] || strchr(seps, p[l])))
                        return true;
        return false;
}

static bool has_word(const char *list, const char *word) {
        return has_word_sep(list, word, " \t\n");
}

/* "key N" lines, as in memory.events: N of key, when there is such a line. */
static bool event_value(const char *text, const char *key, uint64_t *ret) {
        size_t l = strlen(key);

        for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
                if (strncmp(p, key, l) == 0 && p[l] == ' ') {
                        *ret = strtoull(p + l + 1, NULL, 10);
                        return true;
                }
        return false;
}

int sandbox_cgroup_read_events(char *const *paths, SandboxCgroupEvents *ret) {
        char buf[1024];
        bool found = false;
        uint64_t v;

        *ret = (SandboxCgroupEvents) {};
        for (size_t i = 0; paths && paths[i]; i++) {
                const char *path = paths[i];

                if (read_at(path, "memory.events", buf, sizeof(buf)) >= 0) {
                        found = true;
                        if (event_value(buf, "oom_kill", &v))
                                ret->oom_kill += v;
                } else if (read_at(path, "memory.oom_control", buf, sizeof(buf)) >= 0) {
                        found = true;
                        if (event_value(buf, "oom_kill", &v))
                                ret->oom_kill += v;
                        else {
                                /* Before Linux 4.13 no count of kills: that the limit was hit is what there is. */
                                static const char *const failcnt[] = { "memory.failcnt", "memory.memsw.failcnt" };
                                for (size_t j = 0; j < ELEMENTSOF(failcnt); j++)
                                        if (read_at(path, failcnt[j], buf, sizeof(buf)) >= 0)
                                                ret->oom_kill += strtoull(buf, NULL, 10);
                        }
                }
                if (read_at(path, "pids.events", buf, sizeof(buf)) >= 0) {
                        found = true;
                        if (event_value(buf, "max", &v))
                                ret->pids_max += v;
                }
        }
        return found ? 0 : -ENOENT;
}

static bool is_group_name(const char *name) {
        return startswith(name, "uid-") || streq(name, "daemon");
}

/*
 * A run's cgroup is named run-PID-... by the daemon PID that made it (runtime.c, manager.c). Two daemons may share
 * one instance (two --stdio daemons on one cache): each removes only its own and those of daemons that are gone,
 * never one that another daemon has just made for a child that has not entered it yet.
 */
static bool run_cgroup_removable(const char *name) {
        const char *p = startswith(name, "run-");
        char *end;
        long pid;

        if (!p)
                return false;
        errno = 0;
        pid = strtol(p, &end, 10);
        if (errno != 0 || end == p || *end != '-' || pid <= 0 || pid > INT_MAX)
                return true;    /* not a daemon's name: a leftover of an older layout */
        return pid == getpid() || (kill((pid_t) pid, 0) < 0 && errno == ESRCH);
}

static void remove_in(const char *dir, bool runs, bool groups) {
        DIR *d = opendir(dir);
        struct dirent *de;

        if (!d)
                return;
        /* A run still going keeps its cgroup busy, and a group with a run in it: rmdir fails for them. */
        while ((de = readdir(d))) {
                if (de->d_type != DT_DIR)
                        continue;
                if (runs && run_cgroup_removable(de->d_name))
                        (void) unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
                else if (groups && is_group_name(de->d_name)) {
                        char sub[PATH_MAX];
                        if (runs && (size_t) snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name) < sizeof(sub))
                                remove_in(sub, true, false);
                        (void) unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
                }
        }
        closedir(d);
}

void sandbox_cgroup_remove_stale(const char *dir) {
        remove_in(dir, true, true);
}


const char *sandbox_cgroup_group_name(uid_t owner, char *buf, size_t size) {
        if (owner == SANDBOX_OWNER_DAEMON)
                snprintf(buf, size, "daemon");
        else
                snprintf(buf, size, "uid-%u", (unsigned) owner);
        return buf;
}

/* The whole of a cgroup's process list, however long: a fixed buffer could end in the middle of a pid, and moving
 * what a cut-off number names would move someone else's process. */
static int read_procs(const char *dir, char **ret) {
        char path[PATH_MAX];
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *buf = NULL;
        size_t have = 0, size = 0;

        if ((size_t) snprintf(path, sizeof(path), "%s/cgroup.procs", dir) >= sizeof(path))
                return -ENAMETOOLONG;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        for (;;) {
                if (have + 1 >= size) {
                        size_t n = size ? size * 2 : 8192;
                        char *b = realloc(buf, n);
                        if (!b)
                                return -ENOMEM;
                        buf = b;
                        size = n;
                }
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
        if (!buf && !(buf = strdup("")))
                return -ENOMEM;
        buf[have] = 0;
        /* Each pid ends in a newline: whatever follows the last one is no whole pid, and is left alone. */
        char *end = strrchr(buf, '\n');
        *(end ? end + 1 : buf) = 0;
        *ret = TAKE_PTR(buf);
        return 0;
}

int sandbox_cgroup_move_procs(const char *from, const char *to) {
        _cleanup_free_ char *procs = NULL;
        int r, n = 0;

        r = read_procs(from, &procs);
        if (r < 0)
                return r;
        for (char *p = procs, *e; *p; p = e) {
                long pid = strtol(p, &e, 10);
                if (e == p)
                        break;
                if (pid <= 0)
                        continue;
                r = sandbox_cgroup_attach(to, (pid_t) pid);
                /* Gone meanwhile: nothing to move. */
                if (r == -ESRCH)
                        continue;
                if (r < 0)
                        return r;
                n++;
        }
        return n;
}

/* mountinfo writes a space, a tab, a newline and a backslash in octal (\040): undone in place. */
static void unoctal(char *s) {
        char *w = s;

        for (const char *r = s; *r;)
                if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' &&
                    r[3] <= '7') {
                        *w++ = (char) ((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
                        r += 4;
                } else
                        *w++ = *r++;
        *w = 0;
}

int sandbox_cgroup_mount(const char *mountinfo, const char *controller, char **ret_mount, char **ret_root) {
        _cleanup_free_ char *line = NULL;
        size_t allocated = 0;
        int r = -ENOENT;
        FILE *f;

        f = fopen(mountinfo, "re");
        if (!f)
                return -errno;
        while (getline(&line, &allocated, f) >= 0) {
                /* "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory" */
                char *fields[5], *fstype, *options, *p = line, *sep;
                size_t n = 0;

                line[strcspn(line, "\n")] = 0;
                sep = strstr(line, " - ");
                if (!sep)
                        continue;
                *sep = 0;
                while (n < ELEMENTSOF(fields) && (fields[n] = strsep(&p, " ")))
                        n++;
                p = sep + 3;
                fstype = strsep(&p, " ");
                (void) strsep(&p, " ");         /* the source */
                options = p;
                if (n < ELEMENTSOF(fields) || !fstype || !options)
                        continue;
                if (controller ? !streq(fstype, "cgroup") || !has_word_sep(options, controller, ",")
                               : !streq(fstype, "cgroup2"))
                        continue;
                unoctal(fields[3]);
                unoctal(fields[4]);
                *ret_mount = strdup(fields[4]);
                *ret_root = strdup(fields[3]);
                if (!*ret_mount || !*ret_root) {
                        free(*ret_mount);
                        free(*ret_root);
                        *ret_mount = *ret_root = NULL;
                        r = -ENOMEM;
                } else
                        r = 0;
                break;
        }
        fclose(f);
        return r;
}

/*
 * Our cgroup in one hierarchy, from proc_cgroup ("ID:CONTROLLERS:PATH" lines): the "0::" line for controller
 * NULL (v2), else the v1 line that lists controller. -ENOENT when there is none.
 */
static int own_cgroup(const char *proc_cgroup, const char *controller, char **ret_path) {
        _cleanup_free_ char *line = NULL;
        size_t allocated = 0;
        int r = -ENOENT;
        FILE *f;

        f = fopen(proc_cgroup, "re");
        if (!f)
                return -errno;
        while (getline(&line, &allocated, f) >= 0) {
                char *p = line, *id, *list;

                line[strcspn(line, "\n")] = 0;
                id = strsep(&p, ":");
                list = strsep(&p, ":");
                if (!id || !list || !p || p[0] != '/')
                        continue;
                if (controller ? !has_word_sep(list, controller, ",") : !streq(id, "0") || *list)
                        continue;
                *ret_path = strdup(p);
                r = *ret_path ? 0 : -ENOMEM;
                break;
        }
        fclose(f);
        return r;
}

/* The directory of the cgroup path of a hierarchy whose cgroup root is mounted at mount; -EXDEV when it is not
 * below root. */
static int cgroup_dir(const char *mount, const char *root, const char *path, char **ret) {
        const char *rest = path;

        if (!streq(root, "/")) {
                rest = startswith(path, root);
                if (!rest || (*rest && *rest != '/'))
                        return -EXDEV;
        }
        if (streq(rest, "/"))
                rest = "";
        return asprintf(ret, "%s%s", mount, rest) < 0 ? -ENOMEM : 0;
}

/* ---- cgroup v2 ---------------------------------------------------------- */

static bool has_file(const char *dir, const char *name);

/* Our cgroup v2 path, from proc_cgroup's "0::" line; -EOPNOTSUPP or the error, with the reason, otherwise. */
static int own_v2_cgroup(const char *proc_cgroup, char **ret_path, char **ret_reason) {
        int r = own_cgroup(proc_cgroup, NULL, ret_path);

        if (r == -ENOENT)
                return reason(ret_reason, -EOPNOTSUPP, "the daemon is in no cgroup v2 (no \"0::\" line in %s)",
                              proc_cgroup);
        if (r < 0)
                return reason(ret_reason, r, "%s cannot be read: %s", proc_cgroup, strerror(-r));
        return 0;
}

int sandbox_cgroup_find(const char *proc_cgroup, const char *mount, char **ret_dir, char **ret_reason) {
        _cleanup_free_ char *path = NULL, *dir = NULL;
        int r;

        r = own_v2_cgroup(proc_cgroup, &path, ret_reason);
        if (r < 0)
                return r;

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
        controllers[strcspn(controllers, "\n")] = 0;
        if (!has_word(controllers, "memory") || !has_word(controllers, "pids"))
                return reason(ret_reason, -EOPNOTSUPP,
                              "the memory and pids controllers are not available in %s (it offers: %.200s)", dir,
                              controllers);
        strcat(enable, "+memory +pids");
        if (has_word(controllers, "cpu"))
                strcat(enable, " +cpu");

        r = write_at(dir, "cgroup.subtree_control", enable);
        /* "No internal processes": ours go into a leaf of their own, then the controllers can be enabled. A child
         * of ours may fork while they move (a start-up probe's bwrap): then again, a few times. */
        for (unsigned attempt = 0; r == -EBUSY && attempt < 50; attempt++) {
                _cleanup_free_ char *procs = NULL;
                if (attempt > 0)
                        (void) usleep(10 * 1000);
                snprintf(sup, sizeof(sup), "%s/supervisor", dir);
                if (mkdir(sup, 0755) < 0 && errno != EEXIST)
                        return reason(ret_reason, -errno, "%s cannot be created: %s", sup, strerror(errno));
                r = read_procs(dir, &procs);
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

int sandbox_cgroup_v2_create(const char *proc_cgroup, const char *mount, const char *mount_root, const char *name,
                             char **ret_dir, char **ret_reason) {
        _cleanup_free_ char *path = NULL, *ours = NULL, *dir = NULL;
        char controllers[1024], subtree[1024];
        int r;

        r = own_v2_cgroup(proc_cgroup, &path, ret_reason);
        if (r < 0)
                return r;
        r = cgroup_dir(mount, mount_root, path, &ours);
        if (r == -EXDEV)
                return reason(ret_reason, -EOPNOTSUPP, "the daemon's cgroup %s is not in the part of cgroup v2 "
                              "mounted at %s", path, mount);
        if (r < 0)
                return r;

        r = read_at(ours, "cgroup.controllers", controllers, sizeof(controllers));
        if (r < 0)
                return reason(ret_reason, r, "%s/cgroup.controllers cannot be read: %s", ours, strerror(-r));
        controllers[strcspn(controllers, "\n")] = 0;
        if (!has_word(controllers, "memory") || !has_word(controllers, "pids"))
                return reason(ret_reason, -EOPNOTSUPP,
                              "cgroup v2 offers no memory and pids controllers to the daemon's cgroup %s (it "
                              "offers: %.200s)",
                              ours, *controllers ? controllers : "none");
        r = read_at(ours, "cgroup.subtree_control", subtree, sizeof(subtree));
        if (r < 0)
                return reason(ret_reason, r, "%s/cgroup.subtree_control cannot be read: %s", ours, strerror(-r));
        if (!has_word(subtree, "memory") || !has_word(subtree, "pids")) {
                r = write_at(ours, "cgroup.subtree_control", "+memory +pids");
                if (r == -EBUSY)
                        return reason(ret_reason, -EOPNOTSUPP,
                                      "the daemon's cgroup %s holds processes, and cgroup v2 enables controllers "
                                      "for the children of a cgroup only when it has none (start the daemon with "
                                      "Delegate=yes in its unit)",
                                      ours);
                if (r < 0)
                        return reason(ret_reason, r,
                                      "the controllers cannot be enabled in %s/cgroup.subtree_control: %s", ours,
                                      strerror(-r));
                /* Best effort: the cpu controller refuses while a real-time process is around. */
                if (has_word(controllers, "cpu"))
                        (void) write_at(ours, "cgroup.subtree_control", "+cpu");
        }

        if (asprintf(&dir, "%s/%s", ours, name) < 0)
                return -ENOMEM;
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return reason(ret_reason, -errno, "%s cannot be created: %s", dir, strerror(errno));
        r = sandbox_cgroup_prepare(dir, ret_reason);
        if (r < 0) {
                (void) rmdir(dir);
                return r;
        }
        *ret_dir = TAKE_PTR(dir);
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

int sandbox_cgroup_new_group(const char *dir, const char *name, unsigned weight, char **ret_path) {
        _cleanup_free_ char *path = NULL;
        char controllers[1024], enable[64] = "", v[32];
        int r;

        if (asprintf(&path, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return -errno;

        /* cgroup v2: the run cgroups below get the controllers of their own limits. */
        if (has_file(path, "cgroup.subtree_control")) {
                r = read_at(path, "cgroup.controllers", controllers, sizeof(controllers));
                if (r < 0)
                        return r;
                strcat(enable, "+memory +pids");
                if (has_word(controllers, "cpu"))
                        strcat(enable, " +cpu");
                r = write_at(path, "cgroup.subtree_control", enable);
                if (r < 0)
                        return r;
        }
        if (has_file(path, "cpu.weight")) {
                snprintf(v, sizeof(v), "%u", MAX(weight, 1u));
                r = write_at(path, "cpu.weight", v);
        } else if (has_file(path, "cpu.shares")) {
                snprintf(v, sizeof(v), "%u", MAX(weight * 1024 / 100, 2u));
                r = write_at(path, "cpu.shares", v);
        } else
                r = 0;
        if (r < 0)
                return r;
        *ret_path = TAKE_PTR(path);
        return 0;
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

/* ---- cgroup v1 ---------------------------------------------------------- */

static const char *const v1_controllers[_SANDBOX_CGROUP_V1_MAX] = {
        [SANDBOX_CGROUP_V1_PIDS] = "pids",
        [SANDBOX_CGROUP_V1_MEMORY] = "memory",
        [SANDBOX_CGROUP_V1_CPU] = "cpu",
};

const char *sandbox_cgroup_v1_controller(SandboxCgroupV1 c) {
        return c >= 0 && c < _SANDBOX_CGROUP_V1_MAX ? v1_controllers[c] : NULL;
}

int sandbox_cgroup_v1_find(const char *mountinfo, const char *proc_cgroup, const char *controller, char **ret_dir,
                           char **ret_reason) {
        _cleanup_free_ char *mount = NULL, *root = NULL, *path = NULL;
        int r;

        r = sandbox_cgroup_mount(mountinfo, controller, &mount, &root);
        if (r == -ENOENT)
                return reason(ret_reason, -EOPNOTSUPP, "no cgroup v1 hierarchy with the %s controller is mounted",
                              controller);
        if (r < 0)
                return reason(ret_reason, r, "%s cannot be read: %s", mountinfo, strerror(-r));
        r = own_cgroup(proc_cgroup, controller, &path);
        if (r == -ENOENT)
                return reason(ret_reason, -EOPNOTSUPP, "%s names no cgroup of the daemon in the v1 %s hierarchy",
                              proc_cgroup, controller);
        if (r < 0)
                return reason(ret_reason, r, "%s cannot be read: %s", proc_cgroup, strerror(-r));
        r = cgroup_dir(mount, root, path, ret_dir);
        if (r == -EXDEV)
                return reason(ret_reason, -EOPNOTSUPP,
                              "the daemon's cgroup %s of the v1 %s hierarchy is not in the part mounted at %s", path,
                              controller, mount);
        return r;
}

int sandbox_cgroup_v1_create(const char *dir, const char *name, char **ret_dir, char **ret_reason) {
        _cleanup_free_ char *path = NULL;

        if (asprintf(&path, "%s/%s", dir, name) < 0)
                return -ENOMEM;
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return reason(ret_reason, -errno, "%s cannot be created: %s", path, strerror(errno));
        *ret_dir = TAKE_PTR(path);
        return 0;
}

static int v1_write_memory(const char *path, uint64_t memory) {
        char s[32];
        int r;

        if (memory > 0)
                snprintf(s, sizeof(s), "%" PRIu64, memory);
        else
                strcpy(s, "-1");
        /* Memory and swap (memsw) may never be below memory alone: raised, memsw goes first. */
        r = write_at(path, "memory.limit_in_bytes", s);
        if (r == -EINVAL) {
                r = write_at(path, "memory.memsw.limit_in_bytes", s);
                if (r >= 0)
                        r = write_at(path, "memory.limit_in_bytes", s);
        }
        if (r < 0)
                return r;
        /* Swap would let a run go past its limit. Without swap accounting, no swapping is the next best. */
        r = write_at(path, "memory.memsw.limit_in_bytes", s);
        if (r == -ENOENT && memory > 0) {
                r = write_at(path, "memory.swappiness", "0");
                if (r == -ENOENT)
                        r = 0;
        }
        if (r < 0 && r != -ENOENT)
                return r;
        /* A new cgroup inherits oom_kill_disable: a run at its limit is killed, never left waiting. */
        r = write_at(path, "memory.oom_control", "0");
        return r == -ENOENT ? 0 : r;
}

static int v1_write_cpu(const char *path, uint64_t quota) {
        char s[32];
        int r;

        /* The quota off first: a new period is checked against the quota in place. */
        r = write_at(path, "cpu.cfs_quota_us", "-1");
        if (r >= 0) {
                snprintf(s, sizeof(s), "%u", CPU_PERIOD_USEC);
                r = write_at(path, "cpu.cfs_period_us", s);
        }
        if (r >= 0 && quota > 0) {
                snprintf(s, sizeof(s), "%" PRIu64, quota * CPU_PERIOD_USEC / 100);
                r = write_at(path, "cpu.cfs_quota_us", s);
        }
        /* No CFS bandwidth control in this kernel: fine unless a cap was asked for. */
        return r == -ENOENT && quota == 0 ? 0 : r;
}

static bool has_file(const char *dir, const char *name) {
        char p[PATH_MAX];

        snprintf(p, sizeof(p), "%s/%s", dir, name);
        return access(p, F_OK) >= 0;
}

int sandbox_cgroup_set_cpu_quota(char *const *paths, uint64_t quota) {
        char cpu[64];

        if (quota > 0)
                snprintf(cpu, sizeof(cpu), "%" PRIu64 " %u", quota * CPU_PERIOD_USEC / 100, CPU_PERIOD_USEC);
        else
                snprintf(cpu, sizeof(cpu), "max %u", CPU_PERIOD_USEC);
        for (size_t i = 0; paths && paths[i]; i++) {
                if (has_file(paths[i], "cpu.max"))
                        return write_at(paths[i], "cpu.max", cpu);
                if (has_file(paths[i], "cpu.cfs_quota_us"))
                        return v1_write_cpu(paths[i], quota);
        }
        return -ENOENT;
}

int sandbox_cgroup_v1_new_run(char *const dirs[static _SANDBOX_CGROUP_V1_MAX], const char *name,
                              const SandboxLimits *l, char ***ret_paths) {
        _cleanup_strv_free_ char **paths = NULL;
        char *run[_SANDBOX_CGROUP_V1_MAX] = {};
        int r = 0;

        if (!dirs[SANDBOX_CGROUP_V1_PIDS] || !dirs[SANDBOX_CGROUP_V1_MEMORY])
                return -EINVAL;
        if (l->cpu_quota > 0 && !dirs[SANDBOX_CGROUP_V1_CPU])
                return -EOPNOTSUPP;

        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX && r >= 0; c++) {
                if (!dirs[c])
                        continue;
                if (asprintf(&run[c], "%s/%s", dirs[c], name) < 0) {
                        run[c] = NULL;
                        r = -ENOMEM;
                        break;
                }
                /* Controllers mounted together share one hierarchy, and one run cgroup. */
                if (strv_contains(paths, run[c]))
                        continue;
                if (mkdir(run[c], 0755) < 0 && errno != EEXIST)
                        r = -errno;
                else if (strv_extend(&paths, run[c]) < 0) {
                        (void) rmdir(run[c]);
                        r = -ENOMEM;
                }
        }
        if (r >= 0)
                r = write_limit(run[SANDBOX_CGROUP_V1_PIDS], "pids.max", l->processes, false);
        if (r >= 0)
                r = v1_write_memory(run[SANDBOX_CGROUP_V1_MEMORY], l->memory);
        if (r >= 0 && run[SANDBOX_CGROUP_V1_CPU])
                r = v1_write_cpu(run[SANDBOX_CGROUP_V1_CPU], l->cpu_quota);
        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++)
                free(run[c]);
        if (r < 0) {
                for (size_t i = 0; paths && paths[i]; i++)
                        (void) rmdir(paths[i]);
                return r;
        }
        *ret_paths = TAKE_PTR(paths);
        return 0;
}

/* ---- the daemon's mechanism ------------------------------------------- */

static struct {
        bool probed;
        SandboxCgroupMode mode;
        char *dirs[_SANDBOX_CGROUP_V1_MAX];     /* where runs go; v2: dirs[0] */
        char *name;                             /* of the cgroups a root daemon creates */
        char *detail;
        struct { uid_t owner; unsigned n; } *groups;    /* runs with cgroups, per owner */
        size_t n_groups;
} state;

static void group_count(uid_t owner, int delta) {
        char name[32];
        size_t i;

        for (i = 0; i < state.n_groups && state.groups[i].owner != owner; i++)
                ;
        if (i == state.n_groups) {
                if (delta < 0)
                        return;
                void *g = realloc(state.groups, (state.n_groups + 1) * sizeof(*state.groups));
                if (!g)
                        return;   /* uncounted: its group goes at the next sweep or at exit */
                state.groups = g;
                state.groups[state.n_groups++] = (typeof(*state.groups)) { .owner = owner };
        }
        if (delta > 0) {
                state.groups[i].n++;
                return;
        }
        if (--state.groups[i].n > 0)
                return;
        state.groups[i] = state.groups[--state.n_groups];
        (void) sandbox_cgroup_group_name(owner, name, sizeof(name));
        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++) {
                char path[PATH_MAX];
                if (state.dirs[c] && (size_t) snprintf(path, sizeof(path), "%s/%s", state.dirs[c], name) < sizeof(path))
                        (void) rmdir(path);
        }
}

void sandbox_cgroup_run_done(uid_t owner) {
        group_count(owner, -1);
}

int sandbox_cgroup_set_instance(const char *key) {
        char hex[65];

        sha256_hex(key, strlen(key), hex);
        free(state.name);
        if (asprintf(&state.name, "mcp-python-sandbox-%.16s", hex) < 0) {
                state.name = NULL;
                return -ENOMEM;
        }
        return 0;
}

static const char *instance_name(void) {
        return state.name ?: "mcp-python-sandbox";
}

static int probe_v2_delegated(char **why) {
        _cleanup_free_ char *dir = NULL;
        struct statfs fs;
        int r;

        if (statfs("/sys/fs/cgroup", &fs) < 0 || (uint64_t) fs.f_type != CGROUP2_SUPER_MAGIC)
                return reason(why, -EOPNOTSUPP,
                              "/sys/fs/cgroup is not a cgroup v2 hierarchy (cgroup v1 or a hybrid layout)");
        r = sandbox_cgroup_find("/proc/self/cgroup", "/sys/fs/cgroup", &dir, why);
        if (r >= 0)
                r = sandbox_cgroup_prepare(dir, why);
        if (r < 0)
                return r;
        sandbox_cgroup_remove_stale(dir);
        state.dirs[0] = TAKE_PTR(dir);
        return 0;
}

static int probe_v2_own(char **why) {
        _cleanup_free_ char *mount = NULL, *root = NULL, *dir = NULL;
        int r;

        r = sandbox_cgroup_mount("/proc/self/mountinfo", NULL, &mount, &root);
        if (r == -ENOENT)
                return reason(why, -EOPNOTSUPP, "no cgroup v2 hierarchy is mounted");
        if (r < 0)
                return reason(why, r, "/proc/self/mountinfo cannot be read: %s", strerror(-r));
        r = sandbox_cgroup_v2_create("/proc/self/cgroup", mount, root, instance_name(), &dir, why);
        if (r < 0)
                return r;
        sandbox_cgroup_remove_stale(dir);
        state.dirs[0] = TAKE_PTR(dir);
        return 0;
}

static int probe_v1(char **why) {
        char *dirs[_SANDBOX_CGROUP_V1_MAX] = {};
        int r = 0;

        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++) {
                _cleanup_free_ char *ours = NULL, *cpu_why = NULL;
                bool optional = c == SANDBOX_CGROUP_V1_CPU;

                r = sandbox_cgroup_v1_find("/proc/self/mountinfo", "/proc/self/cgroup", v1_controllers[c], &ours,
                                           optional ? &cpu_why : why);
                if (r >= 0)
                        r = sandbox_cgroup_v1_create(ours, instance_name(), &dirs[c], optional ? &cpu_why : why);
                if (r < 0 && optional)
                        r = 0;
                if (r < 0)
                        break;
        }
        if (r < 0) {
                for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++)
                        if (dirs[c]) {
                                (void) rmdir(dirs[c]);
                                free(dirs[c]);
                        }
                return r;
        }
        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++) {
                if (dirs[c])
                        sandbox_cgroup_remove_stale(dirs[c]);
                state.dirs[c] = dirs[c];
        }
        return 0;
}

static int describe(bool root, const char *why_v2, const char *why_own, const char *why_v1) {
        const char *pids = state.dirs[SANDBOX_CGROUP_V1_PIDS], *memory = state.dirs[SANDBOX_CGROUP_V1_MEMORY],
                   *cpu = state.dirs[SANDBOX_CGROUP_V1_CPU];
        static const char rest[] = "plus rlimits for CPU time, file size, open files and core dumps";
        char memsw[PATH_MAX];

        switch (state.mode) {
        case SANDBOX_CGROUP_V2_DELEGATED:
                return asprintf(&state.detail,
                                "cgroup v2: every run gets a cgroup of its own under %s, in a group per user "
                                "that shares the CPUs among users (memory.max, pids.max, cpu.max), %s",
                                state.dirs[0], rest);
        case SANDBOX_CGROUP_V2_OWN:
                return asprintf(&state.detail,
                                "cgroup v2, created by the daemon as root: every run gets a cgroup of its own under "
                                "%s, in a group per user that shares the CPUs among users (memory.max, pids.max, "
                                "cpu.max), %s",
                                state.dirs[0], rest);
        case SANDBOX_CGROUP_V1_OWN:
                snprintf(memsw, sizeof(memsw), "%s/memory.memsw.limit_in_bytes", memory);
                return asprintf(&state.detail,
                                "cgroup v1 (pids, memory%s), created by the daemon as root: every run gets a cgroup "
                                "of its own in each hierarchy, under %s%s%s and %s, in a group per user%s (pids.max, "
                                "memory.limit_in_bytes%s%s), %s",
                                cpu ? ", cpu" : "", pids, cpu ? ", " : "", cpu ? memory : "", cpu ?: memory,
                                cpu ? " that shares the CPUs among users" : "",
                                access(memsw, F_OK) >= 0 ? " with swap in memory.memsw.limit_in_bytes"
                                                         : " with swappiness 0, as this kernel does not account swap",
                                cpu ? ", cpu.cfs_quota_us" : "", rest);
        case SANDBOX_CGROUP_NONE:
                break;
        }
        if (!root)
                return asprintf(&state.detail,
                                "rlimits on the sandbox (RLIMIT_AS per process, RLIMIT_NPROC per user, RLIMIT_CPU, "
                                "RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE); no cgroup of its own for each run "
                                "because %s, and only a daemon running as root creates cgroups itself",
                                why_v2 ?: "cgroup v2 could not be used");
        return asprintf(&state.detail,
                        "rlimits on the sandbox (RLIMIT_AS per process, RLIMIT_NPROC per user, RLIMIT_CPU, "
                        "RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE); no cgroup of its own for each run because %s; "
                        "and as root the daemon could not create cgroups itself: on cgroup v2, %s; on cgroup v1, %s",
                        why_v2 ?: "cgroup v2 could not be used", why_own ?: "it could not",
                        why_v1 ?: "it could not");
}

int sandbox_cgroup_probe(void) {
        _cleanup_free_ char *why_v2 = NULL, *why_own = NULL, *why_v1 = NULL;

        if (state.probed)
                return state.mode != SANDBOX_CGROUP_NONE;
        state.probed = true;

        if (probe_v2_delegated(&why_v2) >= 0)
                state.mode = SANDBOX_CGROUP_V2_DELEGATED;
        else if (geteuid() == 0) {
                if (probe_v2_own(&why_own) >= 0)
                        state.mode = SANDBOX_CGROUP_V2_OWN;
                else if (probe_v1(&why_v1) >= 0)
                        state.mode = SANDBOX_CGROUP_V1_OWN;
        }
        if (describe(geteuid() == 0, why_v2, why_own, why_v1) < 0)
                state.detail = NULL;
        return state.mode != SANDBOX_CGROUP_NONE;
}

SandboxCgroupMode sandbox_cgroup_mode(void) {
        (void) sandbox_cgroup_probe();
        return state.mode;
}

static bool group_counted(uid_t owner) {
        for (size_t i = 0; i < state.n_groups; i++)
                if (state.groups[i].owner == owner)
                        return true;
        return false;
}

/* The group of owner in each hierarchy (NULL where there is none), made if needed: not while it has runs. */
static int new_groups(uid_t owner, char *ret[static _SANDBOX_CGROUP_V1_MAX]) {
        bool made = group_counted(owner);
        char name[32];
        int r = 0;

        (void) sandbox_cgroup_group_name(owner, name, sizeof(name));
        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++) {
                ret[c] = NULL;
                if (!state.dirs[c] || r < 0)
                        continue;
                if (made) {
                        if (asprintf(&ret[c], "%s/%s", state.dirs[c], name) < 0) {
                                ret[c] = NULL;
                                r = -ENOMEM;
                        }
                } else
                        r = sandbox_cgroup_new_group(state.dirs[c], name,
                                                     owner == SANDBOX_OWNER_DAEMON ? SANDBOX_CGROUP_DAEMON_WEIGHT : 100,
                                                     &ret[c]);
        }
        if (r < 0)
                for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++)
                        ret[c] = mfree(ret[c]);
        return r;
}

static void free_groups(char *groups[static _SANDBOX_CGROUP_V1_MAX]) {
        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++)
                groups[c] = mfree(groups[c]);
}

int sandbox_cgroup_new_run_cgroups(const char *name, const SandboxLimits *l, char ***ret_paths) {
        _cleanup_strv_free_ char **paths = NULL;
        _cleanup_free_ char *path = NULL;
        char *groups[_SANDBOX_CGROUP_V1_MAX];
        int r;

        if (sandbox_cgroup_mode() == SANDBOX_CGROUP_NONE)
                return -EOPNOTSUPP;
        r = new_groups(l->owner, groups);
        if (r < 0)
                return r;

        switch (sandbox_cgroup_mode()) {
        case SANDBOX_CGROUP_V2_DELEGATED:
        case SANDBOX_CGROUP_V2_OWN:
                r = sandbox_cgroup_new_run(groups[0], name, l, &path);
                free_groups(groups);
                if (r < 0)
                        return r;
                if (strv_extend(&paths, path) < 0) {
                        (void) rmdir(path);
                        return -ENOMEM;
                }
                *ret_paths = TAKE_PTR(paths);
                group_count(l->owner, +1);
                return 0;
        case SANDBOX_CGROUP_V1_OWN:
                r = sandbox_cgroup_v1_new_run(groups, name, l, ret_paths);
                free_groups(groups);
                if (r >= 0)
                        group_count(l->owner, +1);
                return r;
        case SANDBOX_CGROUP_NONE:
                break;
        }
        free_groups(groups);
        return -EOPNOTSUPP;
}

int sandbox_cgroup_move_run_cgroups(char *const *from, uid_t from_owner, const char *name, const SandboxLimits *l,
                                    char ***ret_paths) {
        _cleanup_strv_free_ char **paths = NULL;
        size_t n = strv_length((char **) from), i;
        int r;

        r = sandbox_cgroup_new_run_cgroups(name, l, &paths);
        if (r < 0)
                return r;
        /* Made from the same hierarchies in the same order: one for one. */
        if (strv_length(paths) != n)
                r = -EINVAL;
        for (i = 0; r >= 0 && i < n; i++) {
                r = sandbox_cgroup_move_procs(from[i], paths[i]);
                /* Once more, for a child forked meanwhile (a sandbox waiting for its script forks nothing). */
                if (r >= 0)
                        r = sandbox_cgroup_move_procs(from[i], paths[i]);
        }
        if (r < 0) {
                for (size_t j = 0; j <= i && j < n; j++)
                        (void) sandbox_cgroup_move_procs(paths[j], from[j]);
                for (size_t j = 0; paths && paths[j]; j++)
                        (void) rmdir(paths[j]);
                group_count(l->owner, -1);
                return r;
        }
        for (i = 0; i < n; i++)
                (void) rmdir(from[i]);
        group_count(from_owner, -1);
        *ret_paths = TAKE_PTR(paths);
        return 0;
}


void sandbox_cgroup_release(void) {
        bool own = state.mode == SANDBOX_CGROUP_V2_OWN || state.mode == SANDBOX_CGROUP_V1_OWN;

        for (size_t c = 0; c < _SANDBOX_CGROUP_V1_MAX; c++) {
                if (!state.dirs[c])
                        continue;
                sandbox_cgroup_remove_stale(state.dirs[c]);
                /* Ours to remove unless systemd delegated it; busy (a run still going): left for the next daemon. */
                if (own)
                        (void) rmdir(state.dirs[c]);
                free(state.dirs[c]);
        }
        free(state.name);
        free(state.detail);
        free(state.groups);
        memset(&state, 0, sizeof(state));
}

const char *sandbox_limits_mechanism(void) {
        return sandbox_cgroup_probe() > 0 ? "cgroup" : "rlimit";
}

const char *sandbox_limits_mechanism_detail(void) {
        (void) sandbox_cgroup_probe();
        return state.detail ?: sandbox_limits_mechanism();
}
