/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The run sandbox as policy: a description of what a run may see, turned
 * into a bwrap command line. Nothing here executes anything; the executor
 * runs the argv and hands over the data fds named in the policy.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SANDBOX_WORK_DIR "/work"
/* Where a run sees its environment: the same for every environment, so that nothing the run prints (sys.prefix,
 * tracebacks, VIRTUAL_ENV) names the store's path on the host. */
#define SANDBOX_ENV_DIR "/venv"
/* Where the administrator's data directories (data-dirs=) are, each at SANDBOX_DATA_DIR/NAME. */
#define SANDBOX_DATA_DIR "/data"
/* Where the network bridge (network-allow) is in a sandbox that has it. */
#define SANDBOX_BRIDGE_PATH "/run/mcp-python-sandbox-netbridge"
#define SANDBOX_UID 65534
#define SANDBOX_GID 65534

typedef struct SandboxData {
        int fd;                 /* contents, read by bwrap from its current offset */
        const char *dest;       /* mounted read-only at this path */
} SandboxData;

typedef struct SandboxPolicy {
        const char *bwrap;
        bool network;
        uint64_t tmpfs_size;            /* size of /work and of /tmp; 0: kernel default */
        const char *etc_dir;            /* the sandbox's /etc (sandbox_write_etc()), bound read-only */
        const char *env_dir;            /* the environment: bound read-only at SANDBOX_ENV_DIR; NULL: none */
        char *const *ro_paths;          /* bound read-only at the same absolute paths */
        char *const *rw_paths;          /* bound writable at the same absolute paths (after ro_paths) */
        char *const *data_dirs;         /* NAME=PATH each: PATH bound read-only at SANDBOX_DATA_DIR/NAME */
        const char *bridge;             /* the network bridge's host path, bound read-only at SANDBOX_BRIDGE_PATH */
        const SandboxData *data;        /* files created from fds (the script) */
        size_t n_data;
        int seccomp_fd;                 /* the BPF program for --seccomp (sandbox_seccomp_export()); -EBADF: none */
        char *const *env;               /* extra KEY=VALUE pairs */
        char *const *command;           /* what runs inside, argv[0] an absolute path */
} SandboxPolicy;

/* The environment variables a run sees: PATH (with env_dir/bin first), HOME=/work, TMPDIR, LANG,
 * no bytecode writes, a headless matplotlib. env_dir (where the run sees its environment:
 * SANDBOX_ENV_DIR in the sandbox) may be NULL. A strv. */
char **sandbox_run_env(const char *env_dir);

/* For tests: the bwrap argv (a strv) with the options inline: bwrap, its options, "--" and the command. */
int sandbox_build_argv(const SandboxPolicy *p, char ***ret);

/* The same command line with the options out of sight: *ret_args_fd a new memfd (O_CLOEXEC) holding them
 * for bwrap's --args, positioned at its start, and *ret_argv "bwrap --args FD -- command...". The whole policy
 * (paths, environment) is then not in the command line that the sandbox's pid 1, a copy of bwrap, shows. The
 * caller hands the memfd to bwrap at the same number. */
int sandbox_build_args(const SandboxPolicy *p, char ***ret_argv, int *ret_args_fd);

/* Write passwd, group and hosts for the sandbox into dir (created if missing). */
/* for_other_uids: the sandboxes run as uids other than ours, so the files are made readable by all. */
int sandbox_write_etc(const char *dir, bool for_other_uids);
/* The empty mount points in dir (bound at /etc) for what of host_etc ("/etc" but in tests) the sandbox sees: each of
 * the kind the host's is now. Called by sandbox_write_etc(). */
int sandbox_write_etc_mount_points(const char *dir, const char *host_etc);
