/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envstore/layout.h"
#include "fs-util.h"
#include "macro.h"

#define SP "lib/python3.11/site-packages"

/* A scratch directory per test, with a fake virtual environment in it: TOP/env. */
static char top[] = "/tmp/test-layout-XXXXXX";
static char env_path[PATH_MAX];
static int env_fd = -EBADF;

/* ---- building trees with plain syscalls -------------------------------- */

static void mkdirs(int dirfd, const char *path) {
        char buf[PATH_MAX];

        ck_assert_uint_lt(strlen(path), sizeof(buf));
        strcpy(buf, path);
        for (char *s = buf;; s++) {
                if (*s != '/' && *s != 0)
                        continue;
                char c = *s;
                *s = 0;
                ck_assert_msg(mkdirat(dirfd, buf, 0755) == 0 || errno == EEXIST, "mkdir %s: %m", buf);
                *s = c;
                if (!c)
                        break;
        }
}

static void put(int dirfd, const char *path, const char *text, mode_t mode) {
        _cleanup_close_ int fd = openat(dirfd, path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);

        ck_assert_msg(fd >= 0, "create %s: %m", path);
        ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t) strlen(text));
        ck_assert_int_eq(fchmod(fd, mode), 0);
}

static void link_to(int dirfd, const char *path, const char *target) {
        ck_assert_msg(symlinkat(target, dirfd, path) == 0, "symlink %s: %m", path);
}

static mode_t mode_of(int dirfd, const char *path) {
        struct stat st;

        ck_assert_msg(fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0, "stat %s: %m", path);
        return st.st_mode;
}

static bool exists(int dirfd, const char *path) {
        struct stat st;

        if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0)
                return true;
        ck_assert_int_eq(errno, ENOENT);
        return false;
}

/* What `uv venv` makes, in short. */
static void make_venv(int fd) {
        put(fd, "pyvenv.cfg", "home = /usr/bin\nimplementation = CPython\nversion_info = 3.11.2\n"
                              "include-system-site-packages = false\n", 0644);
        mkdirs(fd, "bin");
        link_to(fd, "bin/python", "/usr/bin/python3.11");
        link_to(fd, "bin/python3", "python");
        link_to(fd, "bin/python3.11", "python");
        put(fd, "bin/activate", "# activate\n", 0644);
        mkdirs(fd, SP);
        put(fd, SP "/_virtualenv.pth", "import _virtualenv\n", 0644);
        put(fd, SP "/_virtualenv.py", "# uv's virtualenv patches\n", 0644);
        link_to(fd, "lib64", "lib");
        put(fd, ".gitignore", "*\n", 0644);
}

static void setup(void) {
        strcpy(top, "/tmp/test-layout-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(top));
        snprintf(env_path, sizeof(env_path), "%s/env", top);
        ck_assert_int_eq(mkdir(env_path, 0755), 0);
        env_fd = open(env_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        ck_assert_int_ge(env_fd, 0);
        make_venv(env_fd);
}

static void teardown(void) {
        env_fd = safe_close(env_fd);
        /* Makes the read-only directories writable again before it removes what they hold. */
        ck_assert_int_eq(rm_rf_untrusted(top), 0);
}

/* ---- snapshot ---------------------------------------------------------- */

static const EnvLayoutEntry *find(const EnvLayout *l, const char *path) {
        for (size_t i = 0; i < l->n; i++)
                if (streq(l->entries[i].path, path))
                        return &l->entries[i];
        return NULL;
}

START_TEST(test_snapshot) {
        _cleanup_(env_layout_done) EnvLayout l = {};
        const EnvLayoutEntry *e;

        ck_assert_int_eq(env_layout_snapshot(env_fd, &l), 0);
        ck_assert_str_eq(l.site_packages, SP);

        e = find(&l, "pyvenv.cfg");
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->type, S_IFREG);
        ck_assert_uint_eq(strlen(e->digest), 64);
        e = find(&l, "bin/python");
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->type, S_IFLNK);
        ck_assert_uint_eq(strlen(e->digest), 64);
        e = find(&l, "lib64");
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->type, S_IFLNK);
        e = find(&l, SP);
        ck_assert_ptr_nonnull(e);
        ck_assert_uint_eq(e->type, S_IFDIR);
        ck_assert_ptr_nonnull(find(&l, SP "/_virtualenv.pth"));
        ck_assert_ptr_nonnull(find(&l, "bin/activate"));
        /* Symlinks are recorded, not followed. */
        ck_assert_ptr_null(find(&l, "lib64/python3.11"));
        /* 5 files, 4 directories, 4 symlinks. */
        ck_assert_uint_eq(l.n, 13);
}
END_TEST

START_TEST(test_snapshot_errors) {
        _cleanup_(env_layout_done) EnvLayout l = {};

        /* Without lib/pythonX.Y/site-packages it is no virtual environment. */
        ck_assert_int_eq(renameat(env_fd, SP, env_fd, "lib/python3.11/elsewhere"), 0);
        ck_assert_int_eq(env_layout_snapshot(env_fd, &l), -ENOENT);
        ck_assert_ptr_null(l.entries);
        ck_assert_int_eq(renameat(env_fd, "lib/python3.11/elsewhere", env_fd, SP), 0);

        /* Nothing but files, directories and symlinks. */
        ck_assert_int_eq(mkfifoat(env_fd, "bin/fifo", 0644), 0);
        ck_assert_int_lt(env_layout_snapshot(env_fd, &l), 0);
        ck_assert_ptr_null(l.entries);
        ck_assert_int_eq(unlinkat(env_fd, "bin/fifo", 0), 0);

        ck_assert_int_eq(env_layout_snapshot(env_fd, &l), 0);
}
END_TEST

/* ---- verify ------------------------------------------------------------ */

static void record(const char *dist, const char *lines) {
        _cleanup_free_ char *dir = NULL, *path = NULL;

        ck_assert_int_ge(asprintf(&dir, SP "/%s.dist-info", dist), 0);
        ck_assert_int_ge(asprintf(&path, "%s/RECORD", dir), 0);
        mkdirs(env_fd, dir);
        put(env_fd, path, lines, 0644);
}

static void change_pyvenv_cfg(void) {
        put(env_fd, "pyvenv.cfg", "home = /tmp/evil\n", 0644);
        record("evil-1.0", "evil/__init__.py,sha256=AAAA,5\n"
                           "../../../pyvenv.cfg,sha256=BBBB,12\n"
                           "evil-1.0.dist-info/RECORD,,\n");
}

static void change_pyvenv_cfg_unlisted(void) {
        put(env_fd, "pyvenv.cfg", "home = /tmp/evil\n", 0644);
        record("other-2.0", "other/__init__.py,sha256=AAAA,5\n"
                            "../../../pyvenv.cfg.orig,sha256=BBBB,12\n");
}

static void change_pth(void) {
        put(env_fd, SP "/_virtualenv.pth", "import evil\n", 0644);
        record("evil-1.0", "_virtualenv.pth,sha256=AAAA,12\n");
}

static void stdlib_package(void) {
        mkdirs(env_fd, "lib/python3.11/encodings");
        put(env_fd, "lib/python3.11/encodings/__init__.py", "import evil\n", 0644);
        /* As uv writes it. */
        record("shadow-2.0", "../encodings/__init__.py,sha256=AAAA,12\n");
}

static void stdlib_module(void) {
        put(env_fd, "lib/python3.11/os.py", "import evil\n", 0644);
        record("shadow-2.0", "shadow/__init__.py,sha256=AAAA,5\n../os.py,sha256=BBBB,12\n");
}

static void new_interpreter(void) {
        put(env_fd, "bin/python3.99", "#!/bin/sh\n", 0755);
        record("py-3.99", "../../../bin/python3.99,sha256=AAAA,10\n../../../bin/python3.9,sha256=AAAA,10\n");
}

static void changed_interpreter(void) {
        ck_assert_int_eq(unlinkat(env_fd, "bin/python", 0), 0);
        link_to(env_fd, "bin/python", "/tmp/evil/python");
}

static void symlink_in_site_packages(void) {
        link_to(env_fd, SP "/evil.py", "/etc/passwd");
        record("evil-1.0", "evil.pyc,,\nevil.py,,\n");
}

static void symlink_in_bin(void) {
        link_to(env_fd, "bin/tool", "../lib");
}

static void symlink_in_share(void) {
        mkdirs(env_fd, "share/doc");
        link_to(env_fd, "share/doc/x", "/");
}

static void symlink_at_top(void) {
        link_to(env_fd, "evil", "/");
}

static void fifo_in_site_packages(void) {
        ck_assert_int_eq(mkfifoat(env_fd, SP "/evil.fifo", 0644), 0);
}

/* A fifo where a RECORD is looked for: open(2) on it would wait for a writer, forever. */
static void fifo_as_record(void) {
        mkdirs(env_fd, SP "/evil-1.0.dist-info");
        ck_assert_int_eq(mkfifoat(env_fd, SP "/evil-1.0.dist-info/RECORD", 0644), 0);
        put(env_fd, "pyvenv.cfg", "home = /tmp/evil\n", 0644);
}

/* A .dist-info that leads out of the environment is not consulted. */
static void symlinked_dist_info(void) {
        _cleanup_free_ char *outside = NULL;
        _cleanup_close_ int top_fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        ck_assert_int_ge(top_fd, 0);
        mkdirs(top_fd, "elsewhere");
        put(top_fd, "elsewhere/RECORD", "../../../pyvenv.cfg,sha256=BBBB,12\n", 0644);
        ck_assert_int_ge(asprintf(&outside, "%s/elsewhere", top), 0);
        link_to(env_fd, SP "/evil-1.0.dist-info", outside);
        put(env_fd, "pyvenv.cfg", "home = /tmp/evil\n", 0644);
}

static void remove_pyvenv_cfg(void) {
        ck_assert_int_eq(unlinkat(env_fd, "pyvenv.cfg", 0), 0);
}

static void remove_python(void) {
        ck_assert_int_eq(unlinkat(env_fd, "bin/python", 0), 0);
}

static void replace_lib64(void) {
        ck_assert_int_eq(unlinkat(env_fd, "lib64", 0), 0);
        mkdirs(env_fd, "lib64");
}

static void new_file_at_top(void) {
        put(env_fd, "sitecustomize.py", "import evil\n", 0644);
}

static void new_dir_at_top(void) {
        mkdirs(env_fd, "srv/jupyter");
        put(env_fd, "srv/jupyter/x.json", "{}\n", 0644);
        /* A directory whose name only begins like the offending one's. */
        record("a-1.0", "../../../srvetc/x,sha256=AAAA,3\n");
        record("jupyter-1.0", "../../../srv/jupyter/x.json,sha256=AAAA,3\n");
}

/* Where jupyter's packages put their configuration: allowed. */
static void etc_files(void) {
        mkdirs(env_fd, "etc/jupyter/nbconfig");
        put(env_fd, "etc/jupyter/nbconfig/x.json", "{}\n", 0644);
}

static void lookalike_site_packages(void) {
        mkdirs(env_fd, "lib/python3.11/site-packagesX");
        record("x-1.0", "../../../lib/python3.11/site-packagesX,,\n../site-packagesX/y,,\n");
}

static void nothing(void) {
}

static void wheel_install(void) {
        mkdirs(env_fd, SP "/pkg/sub");
        put(env_fd, SP "/pkg/__init__.py", "", 0644);
        put(env_fd, SP "/pkg/sub/_native.so", "ELF", 0755);
        put(env_fd, SP "/pkg.pth", "/opt/elsewhere\n", 0644);
        record("pkg-1.0", "pkg/__init__.py,sha256=AAAA,0\n../../../bin/foo,sha256=BBBB,10\n");
        put(env_fd, "bin/foo", "#!/bin/sh\n", 0755);
        put(env_fd, "bin/pip", "#!/bin/sh\n", 0755);
        mkdirs(env_fd, "include/site/python3.11/pkg");
        put(env_fd, "include/x.h", "#pragma once\n", 0644);
        put(env_fd, "include/site/python3.11/pkg/pkg.h", "#pragma once\n", 0644);
        mkdirs(env_fd, "share/man/man1");
        put(env_fd, "share/y", "data\n", 0644);
        put(env_fd, "share/man/man1/foo.1", ".TH FOO 1\n", 0644);
}

static const struct {
        const char *name;
        void (*mutate)(void);
        int verdict;
        const char *message[3];         /* substrings of the message */
} verify_cases[] = {
        { "changed pyvenv.cfg, listed", change_pyvenv_cfg, 1,
          { "evil-1.0 installed \"pyvenv.cfg\"", "changes what the virtual environment itself is made of" } },
        { "changed pyvenv.cfg, unlisted", change_pyvenv_cfg_unlisted, 1,
          { "none of their RECORD files lists it", "\"pyvenv.cfg\"", "changes" } },
        { "changed _virtualenv.pth", change_pth, 1,
          { "evil-1.0 installed \"" SP "/_virtualenv.pth\"", "changes" } },
        { "new stdlib package", stdlib_package, 1,
          { "shadow-2.0 installed \"lib/python3.11/encodings\"", "would shadow the standard library" } },
        { "new stdlib module", stdlib_module, 1,
          { "shadow-2.0 installed \"lib/python3.11/os.py\"", "would shadow the standard library" } },
        { "new interpreter", new_interpreter, 1,
          { "py-3.99 installed \"bin/python3.99\"", "would replace the environment's interpreter" } },
        { "changed interpreter", changed_interpreter, 1,
          { "\"bin/python\"", "changes what the virtual environment itself is made of" } },
        { "symlink in site-packages", symlink_in_site_packages, 1,
          { "evil-1.0 installed \"" SP "/evil.py\"", "is not a plain file or directory" } },
        { "symlink in bin", symlink_in_bin, 1, { "\"bin/tool\"", "is not a plain file or directory" } },
        { "symlink in share", symlink_in_share, 1, { "\"share/doc/x\"", "is not a plain file or directory" } },
        { "symlink at the top", symlink_at_top, 1, { "\"evil\"", "is not a plain file or directory" } },
        { "fifo", fifo_in_site_packages, 1, { "\"" SP "/evil.fifo\"", "is not a plain file or directory" } },
        { "fifo as a RECORD", fifo_as_record, 1, { "none of their RECORD files lists it" } },
        { "symlinked .dist-info", symlinked_dist_info, 1, { "none of their RECORD files lists it" } },
        { "removed pyvenv.cfg", remove_pyvenv_cfg, 1,
          { "\"pyvenv.cfg\"", "removes a part of the virtual environment itself" } },
        { "removed bin/python", remove_python, 1, { "\"bin/python\"", "removes a part" } },
        { "lib64 replaced", replace_lib64, 1, { "\"lib64\"", "replaces what the virtual environment" } },
        { "new file at the top", new_file_at_top, 1,
          { "\"sitecustomize.py\"", "is outside the places where wheels install" } },
        { "new directory at the top", new_dir_at_top, 1, { "jupyter-1.0 installed \"srv\"", "is outside the places" } },
        { "jupyter's etc/", etc_files, 0, {} },
        { "beside site-packages", lookalike_site_packages, 1,
          { "x-1.0 installed \"lib/python3.11/site-packagesX\"", "would shadow the standard library" } },
        { "nothing installed", nothing, 0, {} },
        { "what wheels install", wheel_install, 0, {} },
};

START_TEST(test_verify) {
        _cleanup_(env_layout_done) EnvLayout l = {};
        _cleanup_free_ char *message = NULL;
        int r;

        ck_assert_int_eq(env_layout_snapshot(env_fd, &l), 0);
        /* The venv step's own tree passes. */
        ck_assert_int_eq(env_layout_verify(env_fd, &l, &message), 0);
        ck_assert_ptr_null(message);

        verify_cases[_i].mutate();
        r = env_layout_verify(env_fd, &l, &message);
        ck_assert_msg(r == verify_cases[_i].verdict, "%s: %d (%s)", verify_cases[_i].name, r, strempty(message));
        if (r == 0) {
                ck_assert_ptr_null(message);
                return;
        }
        ck_assert_ptr_nonnull(message);
        ck_assert_msg(startswith(message, "refused to use the environment: "), "%s", message);
        for (size_t i = 0; i < ELEMENTSOF(verify_cases[_i].message) && verify_cases[_i].message[i]; i++)
                ck_assert_msg(strstr(message, verify_cases[_i].message[i]), "%s: \"%s\" lacks \"%s\"",
                              verify_cases[_i].name, message, verify_cases[_i].message[i]);
}
END_TEST

START_TEST(test_verify_too_deep) {
        _cleanup_(env_layout_done) EnvLayout l = {};
        _cleanup_free_ char *message = NULL;
        _cleanup_close_ int fd = -EBADF;

        ck_assert_int_eq(env_layout_snapshot(env_fd, &l), 0);
        fd = openat(env_fd, SP, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        for (unsigned i = 0; i < 64; i++) {
                int sub;

                ck_assert_int_eq(mkdirat(fd, "d", 0755), 0);
                sub = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                ck_assert_int_ge(sub, 0);
                close(fd);
                fd = sub;
        }
        ck_assert_int_eq(env_layout_verify(env_fd, &l, &message), 1);
        ck_assert_ptr_nonnull(message);
        ck_assert_msg(strstr(message, "deeper than the daemon accepts"), "%s", message);
}
END_TEST

/* ---- read-only --------------------------------------------------------- */

static int check_readonly(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) flag;
        (void) ftw;
        if (S_ISLNK(st->st_mode))
                return 0;
        ck_assert_msg((st->st_mode & 0222) == 0, "%s is writable: %o", path, st->st_mode & 07777);
        if (S_ISDIR(st->st_mode))
                ck_assert_msg((st->st_mode & 07777) == 0555, "%s: %o", path, st->st_mode & 07777);
        else
                ck_assert_msg((st->st_mode & 07777) == 0555 || (st->st_mode & 07777) == 0444, "%s: %o", path,
                              st->st_mode & 07777);
        return 0;
}

START_TEST(test_make_readonly) {
        _cleanup_close_ int top_fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        ck_assert_int_ge(top_fd, 0);
        mkdirs(env_fd, SP "/pkg/sub");
        put(env_fd, SP "/pkg/__init__.py", "", 0644);
        put(env_fd, SP "/pkg/sub/_native.so", "ELF", 0755);
        put(env_fd, SP "/pkg/secret", "", 0600);
        put(env_fd, SP "/pkg/group", "", 0664);
        put(env_fd, SP "/pkg/suid", "", 04755);
        put(env_fd, SP "/pkg/owner-x", "", 0700);
        put(env_fd, SP "/pkg/other-x", "", 0601);
        ck_assert_int_eq(fchmodat(env_fd, SP "/pkg/sub", 0700, 0), 0);
        mkdirs(env_fd, "share");
        ck_assert_int_eq(fchmodat(env_fd, "share", 01777, 0), 0);
        put(env_fd, "share/y", "", 0666);
        /* Symlinks out of the tree: what they point to stays as it is. */
        put(top_fd, "outside", "", 0644);
        mkdirs(top_fd, "outdir");
        link_to(env_fd, SP "/to-file", "../../../../outside");
        link_to(env_fd, SP "/to-dir", "../../../../outdir");

        ck_assert_int_eq(env_make_readonly(env_fd), 0);

        ck_assert_int_eq(nftw(env_path, check_readonly, 16, FTW_PHYS), 0);
        ck_assert_uint_eq(mode_of(top_fd, "env") & 07777, 0555);
        ck_assert_uint_eq(mode_of(env_fd, "pyvenv.cfg") & 07777, 0444);
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg/__init__.py") & 07777, 0444);
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg/secret") & 07777, 0444);
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg/group") & 07777, 0444);
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg/sub/_native.so") & 07777, 0555);
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg/owner-x") & 07777, 0555);
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg/other-x") & 07777, 0555);
        /* No set-uid bit survives. */
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg/suid") & 07777, 0555);
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg/sub") & 07777, 0555);
        ck_assert_uint_eq(mode_of(env_fd, "share") & 07777, 0555);
        ck_assert_uint_eq(mode_of(env_fd, "share/y") & 07777, 0444);
        ck_assert(S_ISLNK(mode_of(env_fd, "bin/python")));
        ck_assert(S_ISLNK(mode_of(env_fd, SP "/to-file")));
        ck_assert_uint_eq(mode_of(top_fd, "outside") & 07777, 0644);
        ck_assert_uint_eq(mode_of(top_fd, "outdir") & 07777, 0755);

        /* Again: nothing to do, no error. */
        ck_assert_int_eq(env_make_readonly(env_fd), 0);
        ck_assert_int_eq(nftw(env_path, check_readonly, 16, FTW_PHYS), 0);

        /* Read-only for the owner too, unless it is root. */
        if (geteuid() != 0) {
                ck_assert_int_lt(openat(env_fd, "new", O_WRONLY | O_CREAT | O_CLOEXEC, 0644), 0);
                ck_assert_int_eq(errno, EACCES);
                ck_assert_int_lt(openat(env_fd, "pyvenv.cfg", O_WRONLY | O_CLOEXEC), 0);
                ck_assert_int_eq(errno, EACCES);
        }
}
END_TEST

/* ---- bytecode ---------------------------------------------------------- */

/* The pycache_prefix tree: TOP/out/<TOP>/env/... */
static int make_out(void) {
        _cleanup_free_ char *pkg = NULL, *path = NULL;
        int fd;

        ck_assert_int_ge(asprintf(&pkg, "%s/out%s/" SP "/pkg", top, env_path), 0);
        ck_assert_int_eq(mkdir_p(pkg, 0755), 0);
        ck_assert_int_ge(asprintf(&path, "%s/out%s", top, env_path), 0);
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        return fd;
}

static int open_out(void) {
        char path[PATH_MAX];
        int fd;

        snprintf(path, sizeof(path), "%s/out", top);
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        return fd;
}

static void assert_file(int dirfd, const char *path, const char *text) {
        char buf[256];
        _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        ssize_t n;

        ck_assert_msg(fd >= 0, "%s: %m", path);
        n = read(fd, buf, sizeof(buf) - 1);
        ck_assert_int_ge(n, 0);
        buf[n] = 0;
        ck_assert_str_eq(buf, text);
}

START_TEST(test_adopt_bytecode) {
        _cleanup_close_ int mirror = -EBADF, out = -EBADF;
        struct stat st;

        /* The environment's sources, read-only as the store keeps them. */
        mkdirs(env_fd, SP "/pkg/data.py");      /* a directory, not a source */
        put(env_fd, SP "/pkg/__init__.py", "", 0644);
        put(env_fd, SP "/pkg/mod.py", "x = 1\n", 0644);
        put(env_fd, SP "/pkg/linked.py", "", 0644);
        put(env_fd, SP "/pkg/sym.py", "", 0644);
        put(env_fd, SP "/six.py", "", 0644);
        put(env_fd, "lib/python3.11/os.py", "", 0644);
        ck_assert_int_eq(env_make_readonly(env_fd), 0);

        mirror = make_out();
        out = open_out();
        /* Moved: a module, a package's __init__ at an optimization level, a top-level module. */
        put(mirror, SP "/pkg/mod.cpython-311.pyc", "bytecode of mod", 0644);
        put(mirror, SP "/pkg/__init__.cpython-311.opt-1.pyc", "bytecode of __init__", 0600);
        put(mirror, SP "/six.cpython-311.pyc", "bytecode of six", 0644);
        if (geteuid() == 0)
                ck_assert_int_eq(fchownat(mirror, SP "/pkg/mod.cpython-311.pyc", 12345, 12345, 0), 0);
        /* Not moved: no source; a source that is no file; linked elsewhere too; a symlink; outside site-packages. */
        put(mirror, SP "/pkg/orphan.cpython-311.pyc", "", 0644);
        put(mirror, SP "/pkg/data.cpython-311.pyc", "", 0644);
        put(mirror, SP "/pkg/linked.cpython-311.pyc", "", 0644);
        ck_assert_int_eq(linkat(mirror, SP "/pkg/linked.cpython-311.pyc", mirror, SP "/pkg/linked.other", 0), 0);
        put(mirror, SP "/pkg/target", "", 0644);
        link_to(mirror, SP "/pkg/sym.cpython-311.pyc", "target");
        put(mirror, "lib/python3.11/os.cpython-311.pyc", "", 0644);
        /* Not moved either: no TAG, so not a name Python looks for in __pycache__. */
        put(mirror, SP "/pkg/mod.pyc", "", 0644);
        put(mirror, SP "/pkg/mod..pyc", "", 0644);
        put(mirror, SP "/pkg/.pyc", "", 0644);

        ck_assert_int_eq(env_adopt_bytecode_shared(env_fd, env_path, SP, out, NULL, 0), 3);

        assert_file(env_fd, SP "/pkg/__pycache__/mod.cpython-311.pyc", "bytecode of mod");
        assert_file(env_fd, SP "/pkg/__pycache__/__init__.cpython-311.opt-1.pyc", "bytecode of __init__");
        assert_file(env_fd, SP "/__pycache__/six.cpython-311.pyc", "bytecode of six");
        ck_assert_int_eq(fstatat(env_fd, SP "/pkg/__pycache__/mod.cpython-311.pyc", &st, AT_SYMLINK_NOFOLLOW), 0);
        ck_assert(S_ISREG(st.st_mode));
        ck_assert_uint_eq(st.st_mode & 07777, 0444);
        ck_assert_uint_eq(st.st_nlink, 1);
        ck_assert_uint_eq(st.st_uid, geteuid());
        ck_assert_uint_eq(st.st_gid, getegid());
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg/__pycache__/__init__.cpython-311.opt-1.pyc") & 07777, 0444);
        /* The directories are read-only again. */
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg") & 07777, 0555);
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg/__pycache__") & 07777, 0555);
        ck_assert_uint_eq(mode_of(env_fd, SP) & 07777, 0555);
        ck_assert_uint_eq(mode_of(env_fd, SP "/__pycache__") & 07777, 0555);
        ck_assert(!exists(mirror, SP "/pkg/mod.cpython-311.pyc"));
        ck_assert(!exists(mirror, SP "/six.cpython-311.pyc"));

        /* What was not moved is where it was, and nowhere in the environment. */
        static const char *const stay[] = {
                "orphan.cpython-311.pyc", "data.cpython-311.pyc", "linked.cpython-311.pyc", "sym.cpython-311.pyc",
                "mod.pyc", "mod..pyc", ".pyc",
        };
        for (size_t i = 0; i < ELEMENTSOF(stay); i++) {
                _cleanup_free_ char *from = NULL, *to = NULL;

                ck_assert_int_ge(asprintf(&from, SP "/pkg/%s", stay[i]), 0);
                ck_assert_msg(exists(mirror, from), "%s was moved", from);
                ck_assert_int_ge(asprintf(&to, SP "/pkg/__pycache__/%s", stay[i]), 0);
                ck_assert_msg(!exists(env_fd, to), "%s was moved", from);
        }
        ck_assert(S_ISLNK(mode_of(mirror, SP "/pkg/sym.cpython-311.pyc")));
        ck_assert(exists(mirror, "lib/python3.11/os.cpython-311.pyc"));
        ck_assert(!exists(env_fd, "lib/python3.11/__pycache__"));

        /* Again, after an interrupted compile: into the __pycache__ that is there. */
        put(mirror, SP "/pkg/mod.cpython-311.opt-2.pyc", "bytecode of mod, -OO", 0644);
        ck_assert_int_eq(env_adopt_bytecode_shared(env_fd, env_path, SP, out, NULL, 0), 1);
        assert_file(env_fd, SP "/pkg/__pycache__/mod.cpython-311.opt-2.pyc", "bytecode of mod, -OO");
        ck_assert_uint_eq(mode_of(env_fd, SP "/pkg/__pycache__") & 07777, 0555);
        ck_assert_int_eq(env_adopt_bytecode_shared(env_fd, env_path, SP, out, NULL, 0), 0);
}
END_TEST

START_TEST(test_adopt_bytecode_errors) {
        _cleanup_close_ int out = -EBADF;
        char path[PATH_MAX];

        snprintf(path, sizeof(path), "%s/out", top);
        ck_assert_int_eq(mkdir(path, 0755), 0);
        out = open_out();

        /* The tree mirrors absolute paths. */
        ck_assert_int_eq(env_adopt_bytecode_shared(env_fd, "env", SP, out, NULL, 0), -EINVAL);
        /* Nothing was compiled for this environment: nothing to move. */
        ck_assert_int_eq(env_adopt_bytecode_shared(env_fd, env_path, SP, out, NULL, 0), 0);
}
END_TEST

static Suite *layout_suite(void) {
        Suite *s = suite_create("layout");
        TCase *tc;

        tc = tcase_create("snapshot");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_snapshot);
        tcase_add_test(tc, test_snapshot_errors);
        suite_add_tcase(s, tc);

        tc = tcase_create("verify");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_loop_test(tc, test_verify, 0, (int) ELEMENTSOF(verify_cases));
        tcase_add_test(tc, test_verify_too_deep);
        suite_add_tcase(s, tc);

        tc = tcase_create("readonly");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_make_readonly);
        suite_add_tcase(s, tc);

        tc = tcase_create("bytecode");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_adopt_bytecode);
        tcase_add_test(tc, test_adopt_bytecode_errors);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(layout_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
