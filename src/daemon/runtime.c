/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "manager.h"
#include "runtime.h"
#include "strv.h"

struct Runtime {
        Manager *manager;
        char *uv_path;
};

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

int runtime_new(Runtime **ret, Manager *m) {
        Runtime *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        r->manager = m;
        r->uv_path = find_in_path(m->config->uv_path);
        *ret = r;
        return 0;
}

Runtime *runtime_free(Runtime *r) {
        if (!r)
                return NULL;
        free(r->uv_path);
        free(r);
        return NULL;
}

void runtime_start(Runtime *r) {
        if (!r->uv_path)
                log_warning("uv (%s) was not found: scripts with dependencies cannot run. Install uv or set uv= "
                            "in the configuration.",
                            r->manager->config->uv_path);
}

bool runtime_is_idle(const Runtime *r) {
        return true;
}

void runtime_reload(Runtime *r) {
        log_info("SIGHUP: nothing to reload yet.");
}

const char *runtime_uv_path(const Runtime *r) {
        return r->uv_path;
}
