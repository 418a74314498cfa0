/* SPDX-License-Identifier: MIT */
#pragma once
/* Signals to a process's processes: those its cgroups list, or those below it in /proc (src/executor/signal.c).
 * Internal to the executor. */
#include <sys/types.h>

/* Write a short string into a cgroup's file: one write, no creation. 0 or -errno. */
int cgroup_write(const char *cgroup, const char *name, const char *value);
/* Send sig to each process cgroup.procs lists (twice, so that none is a pid used again): how many, or -errno. */
int cgroup_signal_listed(const char *cgroup, int sig);
/* Send sig to every descendant of root (not root), found through /proc: how many. */
int signal_descendants(pid_t root, int sig);
/* Kill all a cgroup holds: cgroup.kill on cgroup v2 (Linux 5.14 and later), one by one otherwise. */
void cgroup_kill(const char *cgroup);
