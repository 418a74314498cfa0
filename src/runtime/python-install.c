/* SPDX-License-Identifier: MIT */
/*
 * Pythons installed on demand (python-downloads=): the store's pythons/ directory, the interpreters uv installed
 * there added to the list, and the install requests of calls, charged to their uid.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fs-util.h"
#include "log.h"
#include "macro.h"
#include "runtime-internal.h"

/* ---- Pythons installed on demand ---------------------------------------- */

typedef struct PythonInstallRequest {
        Runtime *runtime;
        PyInstallWaiter *waiter;
        RuntimePythonFunc cb;
        void *userdata;
} PythonInstallRequest;

int runtime_pythons_dir_setup(Runtime *r) {
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

void runtime_on_python_installed(const char *version, const char *executable, const char *prefix,
                                 void *userdata) {
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
                (void) pyinstall_scan(pyinstaller_dir(r->pyinstaller), runtime_on_python_installed, r);
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
