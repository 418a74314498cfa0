/* SPDX-License-Identifier: MIT */
/*
 * Cgroups on either version, given the directories to work in (tests point them at a fake tree): the cgroup files
 * read and written as cgroupfs wants them, where the hierarchies are mounted and which cgroup is ours, the events a
 * run's cgroups counted, groups of runs and run cgroups made with their limits (v2: memory.max, pids.max, cpu.max;
 * v1: a cgroup in each of the pids, memory and cpu hierarchies), processes moved, leftovers removed.
 * Over 800 lines, one file: the v1 code (some 180 lines at the end) writes through the same private helpers
 * (write_at(), write_limit(), own_cgroup(), cgroup_dir(), has_file()) as the v2 code and the cpu quota switches
 * between the two per path; a split would turn those helpers into an interface of their own.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs-util.h"
#include "limits.h"
#include "macro.h"
#include "reason.h"
#include "strv.h"

#define CPU_PERIOD_USEC 100000

/* ---- cgroups, either version ------------------------------------------ */


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
        _cleanup_free_ char *text = NULL;
        size_t have;
        int r;

        if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
                return -ENAMETOOLONG;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        r = read_full_fd(fd, size - 1, &text, &have);
        if (r < 0)
                return r;
        memcpy(buf, text, have + 1);
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
        return startswith(name, "uid-") || streq(name, "daemon") || streq(name, "idle");
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
        else if (owner == SANDBOX_OWNER_IDLE)
                snprintf(buf, size, "idle");
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
        int r;

        if ((size_t) snprintf(path, sizeof(path), "%s/cgroup.procs", dir) >= sizeof(path))
                return -ENAMETOOLONG;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        /* A bound never reached: pids have at most 7 digits (pid_max is at most 2^22), 32 MiB for all of them. */
        r = read_full_fd(fd, 64 * 1024 * 1024, &buf, NULL);
        if (r < 0)
                return r;
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

/* The smallest value of file in dir and its ancestors up to mount (v1 memory's "unlimited" is a number near 2^63);
 * SANDBOX_SERVICE_UNLIMITED when none has one. */
static uint64_t smallest_up_to(const char *mount, char *dir, const char *file) {
        uint64_t found = SANDBOX_SERVICE_UNLIMITED;
        size_t top = strlen(mount);

        for (;;) {
                char buf[64];
                uint64_t v;

                if (read_at(dir, file, buf, sizeof(buf)) > 0 && sscanf(buf, "%" SCNu64, &v) == 1 &&
                    v < (UINT64_C(1) << 62))
                        found = MIN(found, v);
                char *slash = strrchr(dir, '/');
                if (strlen(dir) <= top || !slash || (size_t) (slash - dir) < top)
                        return found;
                *slash = 0;
        }
}

/* The smallest limit in file over our cgroup and its ancestors in the v1 hierarchy of controller, else in the v2
 * one (file2 there). */
static int service_limit(const char *mountinfo, const char *proc_cgroup, const char *controller, const char *file,
                         const char *file2, uint64_t *ret) {
        _cleanup_free_ char *mount = NULL, *root = NULL, *path = NULL, *dir = NULL;
        int r;

        *ret = SANDBOX_SERVICE_UNLIMITED;
        r = sandbox_cgroup_mount(mountinfo, controller, &mount, &root);
        if (r == -ENOENT) {
                file = file2;
                controller = NULL;
                r = sandbox_cgroup_mount(mountinfo, NULL, &mount, &root);
        }
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        r = own_cgroup(proc_cgroup, controller, &path);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        r = cgroup_dir(mount, root, path, &dir);
        if (r == -EXDEV)
                return 0;
        if (r < 0)
                return r;
        *ret = smallest_up_to(mount, dir, file);
        return 0;
}

int sandbox_cgroup_service_limits(const char *mountinfo, const char *proc_cgroup, SandboxServiceLimits *ret) {
        SandboxServiceLimits l;
        int r;

        r = service_limit(mountinfo, proc_cgroup, "pids", "pids.max", "pids.max", &l.tasks);
        if (r < 0)
                return r;
        r = service_limit(mountinfo, proc_cgroup, "memory", "memory.limit_in_bytes", "memory.max", &l.memory);
        if (r < 0)
                return r;
        *ret = l;
        return 0;
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
        char controllers[1024], enable[64] = "";
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
        r = sandbox_cgroup_set_weight(path, weight);
        if (r < 0)
                return r;
        *ret_path = TAKE_PTR(path);
        return 0;
}

int sandbox_cgroup_set_weight(const char *path, unsigned weight) {
        char v[32];

        if (has_file(path, "cpu.weight")) {
                snprintf(v, sizeof(v), "%u", MAX(weight, 1u));
                return write_at(path, "cpu.weight", v);
        }
        if (has_file(path, "cpu.shares")) {
                snprintf(v, sizeof(v), "%u", MAX(weight * 1024 / 100, 2u));
                return write_at(path, "cpu.shares", v);
        }
        return 0;
}

int sandbox_cgroup_cpu_usage(const char *path, uint64_t *ret_usec) {
        char buf[1024], *p;
        unsigned long long v;
        int r;

        r = read_at(path, "cpu.stat", buf, sizeof(buf));
        for (p = r >= 0 ? buf : NULL; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
                if (sscanf(p, "usage_usec %llu", &v) == 1) {
                        *ret_usec = v;
                        return 0;
                }
        r = read_at(path, "cpuacct.usage", buf, sizeof(buf));
        if (r < 0)
                return r;
        if (sscanf(buf, "%llu", &v) != 1)
                return -EBADMSG;
        *ret_usec = v / 1000;
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
        [SANDBOX_CGROUP_V1_CPUACCT] = "cpuacct",
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

/* fresh: path was made just now, with the kernel's defaults (no quota, a period of CPU_PERIOD_USEC): only a quota
 * is written then. Each write of these files walks the whole tree of task groups (tg_set_bandwidth()): two of them
 * were some 5% of the daemon's CPU per run, to write what was there. */
static int v1_write_cpu(const char *path, uint64_t quota, bool fresh) {
        char s[32];
        int r;

        if (fresh && quota == 0)
                return 0;
        if (fresh) {
                snprintf(s, sizeof(s), "%" PRIu64, quota * CPU_PERIOD_USEC / 100);
                return write_at(path, "cpu.cfs_quota_us", s);
        }
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
                        return v1_write_cpu(paths[i], quota, false);
        }
        return -ENOENT;
}

int sandbox_cgroup_v1_new_run(char *const dirs[static _SANDBOX_CGROUP_V1_MAX], const char *name,
                              const SandboxLimits *l, char ***ret_paths) {
        _cleanup_strv_free_ char **paths = NULL;
        char *run[_SANDBOX_CGROUP_V1_MAX] = {};
        bool made[_SANDBOX_CGROUP_V1_MAX] = {};   /* by this call, not found there */
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
                if (strv_contains(paths, run[c])) {
                        for (size_t j = 0; j < c; j++)
                                if (run[j] && streq(run[j], run[c]))
                                        made[c] = made[j];
                        continue;
                }
                if (mkdir(run[c], 0755) >= 0)
                        made[c] = true;
                else if (errno != EEXIST)
                        r = -errno;
                if (r >= 0 && strv_extend(&paths, run[c]) < 0) {
                        (void) rmdir(run[c]);
                        r = -ENOMEM;
                }
        }
        if (r >= 0)
                r = write_limit(run[SANDBOX_CGROUP_V1_PIDS], "pids.max", l->processes, false);
        if (r >= 0)
                r = v1_write_memory(run[SANDBOX_CGROUP_V1_MEMORY], l->memory);
        if (r >= 0 && run[SANDBOX_CGROUP_V1_CPU])
                r = v1_write_cpu(run[SANDBOX_CGROUP_V1_CPU], l->cpu_quota, made[SANDBOX_CGROUP_V1_CPU]);
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
