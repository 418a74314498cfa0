/* SPDX-License-Identifier: MIT */
/* Signals to a process's processes: through its cgroups, or, without cgroups, through /proc. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fs-util.h"
#include "macro.h"
#include "process-signal.h"

/* Write a short string into a cgroup's file: one write, no creation. */
int cgroup_write(const char *cgroup, const char *name, const char *value) {
        char path[PATH_MAX];
        int fd, r = 0;

        if ((size_t) snprintf(path, sizeof(path), "%s/%s", cgroup, name) >= sizeof(path))
                return -ENAMETOOLONG;
        fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (fd < 0)
                return -errno;
        if (write(fd, value, strlen(value)) != (ssize_t) strlen(value))
                r = errno ? -errno : -EIO;
        close(fd);
        return r;
}

/* The pids cgroup.procs lists, in a new array. */
static int cgroup_pids(const char *cgroup, pid_t **ret, size_t *ret_n) {
        char path[PATH_MAX];
        pid_t *pids = NULL;
        size_t n = 0, allocated = 0;
        long v;
        FILE *f;

        if ((size_t) snprintf(path, sizeof(path), "%s/cgroup.procs", cgroup) >= sizeof(path))
                return -ENAMETOOLONG;
        f = fopen(path, "re");
        if (!f)
                return -errno;
        while (fscanf(f, "%ld", &v) == 1) {
                if (n == allocated) {
                        pid_t *np = realloc(pids, (allocated = allocated * 2 + 64) * sizeof(pid_t));
                        if (!np) {
                                free(pids);
                                fclose(f);
                                return -ENOMEM;
                        }
                        pids = np;
                }
                pids[n++] = (pid_t) v;
        }
        fclose(f);
        *ret = pids;
        *ret_n = n;
        return 0;
}

static bool has_pid(const pid_t *pids, size_t n, pid_t pid) {
        for (size_t i = 0; i < n; i++)
                if (pids[i] == pid)
                        return true;
        return false;
}

/*
 * Signal the processes cgroup.procs lists (at most 256 a call): cgroup v1 has no cgroup.kill. A pid read there
 * may belong to someone else by the time it is signalled, so each is pinned with a pidfd first and signalled only
 * when the list, read again, still has it. Returns how many were signalled.
 */
int cgroup_signal_listed(const char *cgroup, int sig) {
        _cleanup_free_ pid_t *listed = NULL, *again = NULL;
        size_t n_listed = 0, n_again = 0;
        int fds[256], r, killed = 0;

        r = cgroup_pids(cgroup, &listed, &n_listed);
        if (r < 0)
                return r;
        n_listed = MIN(n_listed, ELEMENTSOF(fds));
        for (size_t i = 0; i < n_listed; i++)
                fds[i] = (int) syscall(SYS_pidfd_open, listed[i], 0);
        r = cgroup_pids(cgroup, &again, &n_again);
        for (size_t i = 0; i < n_listed; i++) {
                if (r < 0 || !has_pid(again, n_again, listed[i])) {
                        if (fds[i] >= 0)
                                close(fds[i]);
                        continue;
                }
                /* Without pidfds (old kernels, valgrind): by pid, listed twice in the cgroup just now. */
                if (fds[i] < 0 ? kill(listed[i], sig) >= 0
                               : syscall(SYS_pidfd_send_signal, fds[i], sig, NULL, 0) >= 0)
                        killed++;
                if (fds[i] >= 0)
                        close(fds[i]);
        }
        return r < 0 ? r : killed;
}

/*
 * Signal every descendant of root (not root itself), without a cgroup to list them: the processes in /proc whose
 * chain of parents reaches root, each through a pidfd opened while its parent was still the one found (a pid used
 * again since is never signalled). The sandbox's processes may be in a session of their own, out of reach of
 * root's process group. Returns how many were signalled.
 */
int signal_descendants(pid_t root, int sig) {
        _cleanup_free_ pid_t *found = NULL;
        size_t n = 0, cap = 0;
        int killed = 0;
        struct dirent *de;
        DIR *d;

        if (root <= 0 || !(found = malloc(sizeof(pid_t))))
                return 0;
        found[n++] = root;
        cap = 1;
        /* Rounds until nothing new: a child listed before its parent in /proc is found in the next round. */
        for (bool more = true; more;) {
                more = false;
                d = opendir("/proc");
                if (!d)
                        break;
                while ((de = readdir(d))) {
                        char *end;
                        long v = strtol(de->d_name, &end, 10);
                        pid_t pid = (pid_t) v, parent;

                        if (*end || v <= 0 || has_pid(found, n, pid) || (parent = proc_ppid(pid)) <= 0 ||
                            !has_pid(found, n, parent))
                                continue;
                        if (n == cap) {
                                pid_t *a = reallocarray(found, cap * 2, sizeof(pid_t));
                                if (!a)
                                        break;
                                found = a;
                                cap *= 2;
                        }
                        found[n++] = pid;
                        more = true;
                        /* Without pidfds (old kernels, valgrind): by pid, its parent checked once more. */
                        int fd = (int) syscall(SYS_pidfd_open, pid, 0);
                        if (proc_ppid(pid) == parent &&
                            (fd >= 0 ? syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) >= 0 : kill(pid, sig) >= 0))
                                killed++;
                        if (fd >= 0)
                                close(fd);
                }
                closedir(d);
        }
        return killed;
}

/* Kill all a cgroup holds: cgroup.kill on cgroup v2 (Linux 5.14 and later), one by one otherwise. */
void cgroup_kill(const char *cgroup) {
        if (cgroup_write(cgroup, "cgroup.kill", "1") < 0)
                (void) cgroup_signal_listed(cgroup, SIGKILL);
}
