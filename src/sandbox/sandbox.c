/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs-util.h"
#include "macro.h"
#include "sandbox.h"
#include "strv.h"

/* Host files a Python run may read when present: the dynamic loader's cache,
 * CA certificates (for network use), the time zone, and fontconfig's
 * configuration and the cache the system's fc-cache keeps (so a library that
 * asks fontconfig, as matplotlib does through fc-list, finds the fonts under
 * /usr without an error or a rescan). All read-only. */
static const char *const etc_passthrough[] = {
        "/etc/ld.so.cache",
        "/etc/ssl",
        "/etc/ca-certificates",
        "/etc/pki",
        "/etc/localtime",
        "/etc/fonts",
        "/var/cache/fontconfig",
};

/* The files of etc_dir (sandbox_write_etc()). */
static const char *const etc_files[] = { "passwd", "group", "hosts" };

/* etc_dir, bound at /etc, holds an empty mount point for each of these, of the kind the host's is (a directory or
 * not; when the host has none, the kind it usually is): what is bound over it when the host has it. */
static const struct {
        const char *name;
        bool dir;
} etc_mount_points[] = {
        { "ld.so.cache", false },
        { "ssl", true },
        { "ca-certificates", true },
        { "pki", true },
        { "localtime", false },
        { "fonts", true },
};

/* Besides /proc/sys, the parts of /proc that steer the host rather than show the sandbox: the magic SysRq key,
 * interrupt affinities, devices' configuration. Some kernels have not all of them. */
static const char *const proc_host_controls[] = { "/proc/sysrq-trigger", "/proc/irq", "/proc/bus" };

/* Top-level directories that are /usr symlinks on merged-/usr systems, or real directories elsewhere. */
static const char *const usr_aliases[] = { "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32" };

static int add(char ***argv, const char *a) {
        return strv_extend(argv, a);
}

static int add2(char ***argv, const char *a, const char *b) {
        return add(argv, a) < 0 || add(argv, b) < 0 ? -ENOMEM : 0;
}

static int add3(char ***argv, const char *a, const char *b, const char *c) {
        return add(argv, a) < 0 || add2(argv, b, c) < 0 ? -ENOMEM : 0;
}

static int add_tmpfs(char ***argv, const char *path, uint64_t size) {
        char s[32];

        if (size > 0) {
                snprintf(s, sizeof(s), "%" PRIu64, size);
                if (add2(argv, "--size", s) < 0)
                        return -ENOMEM;
        }
        return add3(argv, "--perms", "0755", "--tmpfs") < 0 || add(argv, path) < 0 ? -ENOMEM : 0;
}

char **sandbox_run_env(const char *env_dir) {
        char **env = strv_new();

        if (!env ||
            strv_extendf(&env, "PATH=%s%s/usr/local/bin:/usr/bin:/bin", strempty(env_dir), env_dir ? "/bin:" : "") < 0 ||
            strv_extend(&env, "HOME=" SANDBOX_WORK_DIR) < 0 ||
            strv_extend(&env, "TMPDIR=/tmp") < 0 ||
            strv_extend(&env, "USER=nobody") < 0 ||
            strv_extend(&env, "LANG=C.UTF-8") < 0 ||
            strv_extend(&env, "PYTHONDONTWRITEBYTECODE=1") < 0 ||
            strv_extend(&env, "MPLBACKEND=Agg") < 0 ||
            strv_extend(&env, "MPLCONFIGDIR=/tmp/.matplotlib") < 0 ||
            (env_dir && strv_extendf(&env, "VIRTUAL_ENV=%s", env_dir) < 0))
                return strv_free(env);
        return env;
}

/* bwrap's options for the policy: everything between bwrap and the "--" before the command. */
static int build_options(const SandboxPolicy *p, char ***ret) {
        _cleanup_strv_free_ char **argv = strv_new();
        int r = 0;

        if (!argv)
                return -ENOMEM;

        /* Every namespace, the network too unless allowed; no way to make more user namespaces. */
        r |= add2(&argv, "--unshare-all", "--unshare-user");
        if (p->network)
                r |= add(&argv, "--share-net");
        r |= add(&argv, "--disable-userns");
        r |= add2(&argv, "--uid", "65534");
        r |= add2(&argv, "--gid", "65534");
        r |= add2(&argv, "--cap-drop", "ALL");
        r |= add2(&argv, "--new-session", "--die-with-parent");
        r |= add(&argv, "--clearenv");
        for (size_t i = 0; p->env && p->env[i]; i++) {
                const char *eq = strchr(p->env[i], '=');
                _cleanup_free_ char *k = NULL;
                if (!eq)
                        return -EINVAL;
                k = strndup(p->env[i], (size_t) (eq - p->env[i]));
                if (!k)
                        return -ENOMEM;
                r |= add3(&argv, "--setenv", k, eq + 1);
        }

        /* The system, read-only. */
        r |= add3(&argv, "--ro-bind", "/usr", "/usr");
        for (size_t i = 0; i < ELEMENTSOF(usr_aliases); i++) {
                char target[PATH_MAX];
                struct stat st;
                ssize_t n;

                if (lstat(usr_aliases[i], &st) < 0)
                        continue;
                if (S_ISLNK(st.st_mode)) {
                        n = readlink(usr_aliases[i], target, sizeof(target) - 1);
                        if (n <= 0)
                                continue;
                        target[n] = 0;
                        r |= add3(&argv, "--symlink", target, usr_aliases[i]);
                } else if (S_ISDIR(st.st_mode))
                        r |= add3(&argv, "--ro-bind", usr_aliases[i], usr_aliases[i]);
        }
        r |= add2(&argv, "--proc", "/proc");
        /*
         * The kernel's settings (kernel.core_pattern runs a program as root on the host) and the rest of what
         * steers the host, read-only whatever host uid the sandbox's user is. bwrap covers these only where
         * access(W_OK) says it could write them: never /proc/sys itself (no directory of sysctls is writable),
         * nothing when it runs unprivileged, irq and bus when the sandbox's user is the host's root. bwrap binds
         * from outside, the host's /proc: the same settings (the namespaced ones are those of the process that
         * looks). /proc/sys must be there.
         */
        r |= add3(&argv, "--ro-bind", "/proc/sys", "/proc/sys");
        for (size_t i = 0; i < ELEMENTSOF(proc_host_controls); i++)
                r |= add3(&argv, "--ro-bind-try", proc_host_controls[i], proc_host_controls[i]);
        r |= add2(&argv, "--dev", "/dev");
        /* POSIX shared memory (multiprocessing) lives here: size-capped like /tmp. */
        r |= add_tmpfs(&argv, "/dev/shm", p->tmpfs_size);
        /* /dev itself is a tmpfs bwrap made, without a size: nothing may be written there. */
        r |= add2(&argv, "--remount-ro", "/dev");

        /* A minimal /etc: nobody's passwd and group, localhost, and what TLS and ld.so need. etc_dir as a whole,
         * with the mount points for the rest in it (sandbox_write_etc()): one bind where a file each were three,
         * and bwrap reads the mount table anew for every bind. With the network, /etc gets resolv.conf too, which
         * a sandbox without one must not even see empty: then a directory of bwrap's, the files bound one by one. */
        if (p->etc_dir && !p->network)
                r |= add3(&argv, "--ro-bind", p->etc_dir, "/etc");
        else {
                r |= add3(&argv, "--perms", "0755", "--dir");
                r |= add(&argv, "/etc");
                for (size_t i = 0; p->etc_dir && i < ELEMENTSOF(etc_files); i++) {
                        char src[PATH_MAX], dst[64];
                        snprintf(src, sizeof(src), "%s/%s", p->etc_dir, etc_files[i]);
                        snprintf(dst, sizeof(dst), "/etc/%s", etc_files[i]);
                        r |= add3(&argv, "--ro-bind", src, dst);
                }
        }
        for (size_t i = 0; i < ELEMENTSOF(etc_passthrough); i++)
                r |= add3(&argv, "--ro-bind-try", etc_passthrough[i], etc_passthrough[i]);
        if (p->network)
                r |= add3(&argv, "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf");

        /* Private, size-capped writable space: the work dir (the cwd) and /tmp. */
        r |= add_tmpfs(&argv, "/tmp", p->tmpfs_size);
        r |= add_tmpfs(&argv, SANDBOX_WORK_DIR, p->tmpfs_size);

        /* The environment and its base interpreter, read-only, where they live on the host. */
        for (size_t i = 0; p->ro_paths && p->ro_paths[i]; i++)
                r |= add3(&argv, "--ro-bind", p->ro_paths[i], p->ro_paths[i]);
        if (p->env_dir)
                r |= add3(&argv, "--ro-bind", p->env_dir, SANDBOX_ENV_DIR);
        for (size_t i = 0; p->rw_paths && p->rw_paths[i]; i++)
                r |= add3(&argv, "--bind", p->rw_paths[i], p->rw_paths[i]);
        if (p->bridge)
                r |= add3(&argv, "--ro-bind", p->bridge, SANDBOX_BRIDGE_PATH);

        /* The administrator's data, read-only (bwrap makes the mounts below it read-only too). A directory that
         * went away since it was checked is left out rather than failing the run. */
        for (size_t i = 0; p->data_dirs && p->data_dirs[i]; i++) {
                const char *eq = strchr(p->data_dirs[i], '=');
                _cleanup_free_ char *dest = NULL;
                if (!eq)
                        return -EINVAL;
                if (asprintf(&dest, SANDBOX_DATA_DIR "/%.*s", (int) (eq - p->data_dirs[i]), p->data_dirs[i]) < 0)
                        return -ENOMEM;
                r |= add3(&argv, "--ro-bind-try", eq + 1, dest);
        }

        for (size_t i = 0; i < p->n_data; i++) {
                char fd[16];
                snprintf(fd, sizeof(fd), "%d", p->data[i].fd);
                r |= add3(&argv, "--ro-bind-data", fd, p->data[i].dest);
        }

        /* The system call filter, applied last, just before the command runs. */
        if (p->seccomp_fd >= 0) {
                char fd[16];
                snprintf(fd, sizeof(fd), "%d", p->seccomp_fd);
                r |= add2(&argv, "--seccomp", fd);
        }

        /* Nothing else is writable: not the root bwrap built, nor the mount points in it. */
        r |= add2(&argv, "--remount-ro", "/");
        r |= add2(&argv, "--chdir", SANDBOX_WORK_DIR);
        if (r < 0)
                return -ENOMEM;

        *ret = TAKE_PTR(argv);
        return 0;
}

/* bwrap, then the given options, then the command after "--". */
static int build_command_line(const SandboxPolicy *p, char *const *options, char ***ret) {
        _cleanup_strv_free_ char **argv = strv_new();
        int r = 0;

        if (!argv)
                return -ENOMEM;
        r |= add(&argv, p->bwrap);
        r |= strv_extend_strv(&argv, options);
        r |= add(&argv, "--");
        for (size_t i = 0; p->command && p->command[i]; i++)
                r |= add(&argv, p->command[i]);
        if (r < 0)
                return -ENOMEM;

        *ret = TAKE_PTR(argv);
        return 0;
}

int sandbox_build_argv(const SandboxPolicy *p, char ***ret) {
        _cleanup_strv_free_ char **options = NULL;
        int r;

        r = build_options(p, &options);
        if (r < 0)
                return r;
        return build_command_line(p, options, ret);
}

int sandbox_build_args(const SandboxPolicy *p, char ***ret_argv, int *ret_args_fd) {
        _cleanup_strv_free_ char **options = NULL, **argv = NULL;
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *all = NULL;
        size_t n = 0;
        char s[16];
        int r;

        r = build_options(p, &options);
        if (r < 0)
                return r;

        /* Each option NUL-terminated, as bwrap's --args reads them, from the start of the file: one write (a write
         * per option was some 130 system calls a run). */
        for (size_t i = 0; options[i]; i++)
                n += strlen(options[i]) + 1;
        all = malloc(n ?: 1);
        if (!all)
                return -ENOMEM;
        n = 0;
        for (size_t i = 0; options[i]; i++) {
                size_t l = strlen(options[i]) + 1;
                memcpy(all + n, options[i], l);
                n += l;
        }
        fd = memfd_create("bwrap-args", MFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        r = write_all(fd, all, n);
        if (r < 0)
                return r;
        if (lseek(fd, 0, SEEK_SET) < 0)
                return -errno;

        snprintf(s, sizeof(s), "%d", fd);
        char *args_option[] = { (char *) "--args", s, NULL };
        r = build_command_line(p, args_option, &argv);
        if (r < 0)
                return r;

        *ret_argv = TAKE_PTR(argv);
        *ret_args_fd = TAKE_FD(fd);
        return 0;
}

static int write_file(const char *dir, const char *name, const char *content, mode_t mode) {
        char path[PATH_MAX], tmp[PATH_MAX];
        int fd;
        size_t n = strlen(content);

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (write(fd, content, n) != (ssize_t) n || (mode && fchmod(fd, mode) < 0)) {
                int r = errno ? -errno : -EIO;
                close(fd);
                return r;
        }
        if (close(fd) < 0 || rename(tmp, path) < 0)
                return -errno;
        return 0;
}

int sandbox_write_etc(const char *dir, bool for_other_uids) {
        /* Nothing secret; readable by the sandboxes' uids whatever the umask, when they are not ours. */
        mode_t file_mode = for_other_uids ? 0644 : 0;
        int r;

        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        if (for_other_uids && chmod(dir, 0755) < 0)
                return -errno;
        r = write_file(dir, "passwd", "nobody:x:65534:65534:nobody:" SANDBOX_WORK_DIR ":/usr/sbin/nologin\n",
                       file_mode);
        if (r < 0)
                return r;
        r = write_file(dir, "group", "nogroup:x:65534:\n", file_mode);
        if (r < 0)
                return r;
        r = write_file(dir, "hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
                       file_mode);
        if (r < 0)
                return r;
        return sandbox_write_etc_mount_points(dir, "/etc");
}

int sandbox_write_etc_mount_points(const char *dir, const char *host_etc) {
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        if (dfd < 0)
                return -errno;
        for (size_t i = 0; i < ELEMENTSOF(etc_mount_points); i++) {
                const char *name = etc_mount_points[i].name;
                char host[PATH_MAX];
                struct stat st;
                bool dir_wanted = etc_mount_points[i].dir;

                snprintf(host, sizeof(host), "%s/%s", host_etc, name);
                if (stat(host, &st) >= 0)
                        dir_wanted = S_ISDIR(st.st_mode);
                if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) >= 0) {
                        if (dir_wanted ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode))
                                continue;
                        /* The host's changed kind since: the old one goes (it is empty, or no mount point of ours). */
                        if (unlinkat(dfd, name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0)
                                return -errno;
                } else if (errno != ENOENT)
                        return -errno;
                if (dir_wanted) {
                        if (mkdirat(dfd, name, 0755) < 0)
                                return -errno;
                        if (fchmodat(dfd, name, 0755, 0) < 0)
                                return -errno;
                } else {
                        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
                        if (fd < 0)
                                return -errno;
                        int k = fchmod(fd, 0644) < 0 ? -errno : 0;
                        close(fd);
                        if (k < 0)
                                return k;
                }
        }
        return 0;
}
