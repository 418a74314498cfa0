/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json-util.h"
#include "macro.h"
#include "pythons.h"
#include "strv.h"

const char python_probe_code[] =
        "import json, sys; print(json.dumps({'version': '%d.%d.%d' % sys.version_info[:3], "
        "'executable': sys.executable, 'prefix': sys.base_prefix, "
        "'implementation': sys.implementation.name}))";

static Python *python_free(Python *py) {
        if (!py)
                return NULL;
        free(py->executable);
        free(py->prefix);
        free(py->version);
        free(py);
        return NULL;
}

void pythons_done(Pythons *p) {
        for (size_t i = 0; i < p->n; i++)
                python_free(p->items[i]);
        free(p->items);
        *p = (Pythons) {};
}

static int compare_newest_first(const void *a, const void *b) {
        const Python *const *x = a, *const *y = b;
        return -pep440_version_compare(&(*x)->parsed, &(*y)->parsed);
}

int pythons_add(Pythons *p, const char *version, const char *executable, const char *prefix) {
        Python *py;
        Python **n;

        for (size_t i = 0; i < p->n; i++)
                if (streq(p->items[i]->executable, executable))
                        return 0;
        py = calloc(1, sizeof(Python));
        if (!py)
                return -ENOMEM;
        if (pep440_version_parse(version, &py->parsed) < 0) {
                free(py);
                return -EINVAL;
        }
        py->executable = strdup(executable);
        py->prefix = strdup(prefix);
        py->version = strdup(version);
        n = realloc(p->items, (p->n + 1) * sizeof(Python *));
        if (!n || !py->executable || !py->prefix || !py->version) {
                if (n)
                        p->items = n;
                python_free(py);
                return -ENOMEM;
        }
        p->items = n;
        p->items[p->n++] = py;
        qsort(p->items, p->n, sizeof(Python *), compare_newest_first);
        return 1;
}

int pythons_add_probe(Pythons *p, const char *json_line) {
        _cleanup_json_ json_object *j = json_tokener_parse(json_line);
        const char *version, *exe, *prefix, *impl;
        char real[PATH_MAX];

        if (!j)
                return -EINVAL;
        version = json_get_string(j, "version");
        exe = json_get_string(j, "executable");
        prefix = json_get_string(j, "prefix");
        impl = json_get_string(j, "implementation");
        if (!version || !exe || !prefix || !*exe || !impl || !streq(impl, "cpython"))
                return -EINVAL;
        if (!realpath(exe, real))
                return -errno;
        return pythons_add(p, version, real, prefix);
}

bool python_version_matches(const Python *py, const char *want) {
        size_t l = strlen(want);

        /* "3.12" matches 3.12.x; "3.12.1" only itself. */
        return strncmp(py->version, want, l) == 0 && (py->version[l] == 0 || py->version[l] == '.');
}

void pythons_filter(Pythons *p, char *const *allowed) {
        size_t k = 0;

        if (!allowed || !allowed[0])
                return;
        for (size_t i = 0; i < p->n; i++) {
                bool ok = false;
                for (size_t j = 0; allowed[j]; j++)
                        if (python_version_matches(p->items[i], allowed[j]))
                                ok = true;
                if (ok)
                        p->items[k++] = p->items[i];
                else
                        python_free(p->items[i]);
        }
        p->n = k;
}

char *pythons_list(const Pythons *p) {
        size_t n = 1;
        char *s;

        for (size_t i = 0; i < p->n; i++)
                n += strlen(p->items[i]->version) + 2;
        s = malloc(n);
        if (!s)
                return NULL;
        *s = 0;
        for (size_t i = 0; i < p->n; i++) {
                if (i > 0)
                        strcat(s, ", ");
                strcat(s, p->items[i]->version);
        }
        return s;
}

const Python *pythons_choose(const Pythons *p, const char *want, const char *requires_python, char **ret_error) {
        _cleanup_(pep440_specifier_set_freep) Pep440SpecifierSet *set = NULL;
        _cleanup_free_ char *list = pythons_list(p), *err = NULL;

        *ret_error = NULL;
        if (requires_python && pep440_specifier_set_parse(requires_python, &set, &err) < 0) {
                if (asprintf(ret_error, "requires-python \"%s\" is not a valid version specifier: %s", requires_python,
                             err ?: "parse error") < 0)
                        *ret_error = NULL;
                return NULL;
        }

        /* Newest first: the first fit is the one the spec recommends. */
        for (size_t i = 0; i < p->n; i++) {
                const Python *py = p->items[i];
                if (want && !python_version_matches(py, want))
                        continue;
                if (set && !pep440_specifier_set_contains(set, &py->parsed))
                        continue;
                return py;
        }

        int r;
        if (p->n == 0)
                r = asprintf(ret_error, "no Python interpreter is available to the sandbox service (the administrator "
                                        "can set python-search-path)");
        else if (want && requires_python)
                r = asprintf(ret_error, "no available Python is both %s and within requires-python \"%s\"; available: %s",
                             want, requires_python, strempty(list));
        else if (want)
                r = asprintf(ret_error, "Python %s is not available; available: %s", want, strempty(list));
        else
                r = asprintf(ret_error, "no available Python satisfies requires-python \"%s\"; available: %s",
                             requires_python, strempty(list));
        if (r < 0)
                *ret_error = NULL;
        return NULL;
}

char **pythons_search_dirs(char *const *search_path, const char *home) {
        _cleanup_strv_free_ char **dirs = strv_new();

        for (size_t i = 0; dirs && search_path && search_path[i]; i++) {
                const char *entry = search_path[i], *rest;
                _cleanup_free_ char *expanded = NULL;
                glob_t g = {};
                int k = 0;

                if ((rest = startswith(entry, "~/"))) {
                        if (!home)
                                continue;
                        if (asprintf(&expanded, "%s/%s", home, rest) < 0)
                                return NULL;
                        entry = expanded;
                }
                if (!strchr(entry, '*')) {
                        if (strv_extend(&dirs, entry) < 0)
                                return NULL;
                        continue;
                }
                if (glob(entry, GLOB_ONLYDIR, NULL, &g) == 0)
                        for (size_t j = 0; k >= 0 && j < g.gl_pathc; j++)
                                if (!strchr(g.gl_pathv[j], '+'))
                                        k = strv_extend(&dirs, g.gl_pathv[j]);
                globfree(&g);
                if (k < 0)
                        return NULL;
        }
        return TAKE_PTR(dirs);
}

int pythons_candidates(char *const *dirs, char ***ret) {
        _cleanup_strv_free_ char **found = strv_new();
        regex_t re;
        int k = 0;

        if (!found)
                return -ENOMEM;
        if (regcomp(&re, "^python3(\\.[0-9]+)?$", REG_EXTENDED | REG_NOSUB) != 0)
                return -ENOMEM;
        for (size_t i = 0; dirs[i]; i++) {
                struct dirent **list = NULL;
                int n = scandir(dirs[i], &list, NULL, alphasort);

                for (int j = 0; j < n; j++) {
                        char path[PATH_MAX], real[PATH_MAX];

                        if (k >= 0 && regexec(&re, list[j]->d_name, 0, NULL, 0) == 0 &&
                            snprintf(path, sizeof(path), "%s/%s", dirs[i], list[j]->d_name) < (int) sizeof(path) &&
                            realpath(path, real) && access(real, X_OK) >= 0 && !strv_contains(found, real))
                                k = strv_extend(&found, real);
                        free(list[j]);
                }
                free(list);
        }
        regfree(&re);
        if (k < 0)
                return k;
        *ret = TAKE_PTR(found);
        return 0;
}
