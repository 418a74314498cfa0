/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hints.h"
#include "macro.h"

/* Import names that differ from the name to install: the ones models and people trip over most. */
static const struct {
        const char *module, *distribution;
} module_distributions[] = {
        { "Bio", "biopython" },
        { "Crypto", "pycryptodome" },
        { "OpenSSL", "pyopenssl" },
        { "PIL", "pillow" },
        { "attr", "attrs" },
        { "bs4", "beautifulsoup4" },
        { "cv2", "opencv-python" },
        { "dateutil", "python-dateutil" },
        { "dns", "dnspython" },
        { "docx", "python-docx" },
        { "distutils", "setuptools" },  /* gone from the standard library in 3.12; setuptools brings it back */
        { "dotenv", "python-dotenv" },
        { "fitz", "pymupdf" },
        { "git", "gitpython" },
        { "jwt", "pyjwt" },
        { "magic", "python-magic" },
        { "mpl_toolkits", "matplotlib" },
        { "pkg_resources", "setuptools" },
        { "pptx", "python-pptx" },
        { "serial", "pyserial" },
        { "skimage", "scikit-image" },
        { "sklearn", "scikit-learn" },
        { "slugify", "python-slugify" },
        { "umap", "umap-learn" },
        { "yaml", "pyyaml" },
        { "zmq", "pyzmq" },
};

const char *hint_distribution_for_module(const char *module) {
        if (!module)
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(module_distributions); i++)
                if (streq(module_distributions[i].module, module))
                        return module_distributions[i].distribution;
        return NULL;
}

static bool requirements_have(const RequirementList *l, const char *name) {
        _cleanup_free_ char *n = NULL;

        if (!l || pep508_normalize_name(name, &n) < 0)
                return false;
        for (size_t i = 0; i < l->n; i++)
                if (streq(l->items[i].name, n))
                        return true;
        return false;
}

/* The top-level module of the last "ModuleNotFoundError: No module named 'x.y'" in text, or NULL. */
static char *missing_module(const char *text) {
        static const char needle[] = "ModuleNotFoundError: No module named '";
        const char *last = NULL, *p = text;
        size_t n;

        while ((p = strstr(p, needle))) {
                last = p + strlen(needle);
                p = last;
        }
        if (!last)
                return NULL;
        n = strcspn(last, ".'\n");
        if (n == 0 || n > 100 || last[n] == '\n' || last[n] == 0)
                return NULL;
        for (size_t i = 0; i < n; i++)
                if (!(last[i] == '_' || (last[i] >= '0' && last[i] <= '9') || (last[i] >= 'a' && last[i] <= 'z') ||
                      (last[i] >= 'A' && last[i] <= 'Z')))
                        return NULL; /* not an identifier we can name a package after */
        return strndup(last, n);
}

static char *hint_module(const char *stderr_text, const RequirementList *requirements, bool persistent) {
        _cleanup_free_ char *module = missing_module(stderr_text);
        const char *dist;
        char *s = NULL;
        int r;

        if (!module)
                return NULL;

        /* Parts of the standard library an interpreter may be built without: no package brings them. */
        static const char *const builtin[] = { "tkinter", "_tkinter", "turtle", "turtledemo", "idlelib" };
        for (size_t i = 0; i < ELEMENTSOF(builtin); i++)
                if (streq(module, builtin[i]))
                        return NULL;

        dist = hint_distribution_for_module(module);
        if (requirements_have(requirements, dist ?: module))
                return NULL; /* declared: something else is wrong, and the traceback says what */

        if (persistent && dist)
                r = asprintf(&s,
                             "The module '%s' is not installed in this sandbox: it comes from the package '%s', so "
                             "install it with install_package (packages: [\"%s\"]).",
                             module, dist, dist);
        else if (persistent)
                r = asprintf(&s,
                             "The module '%s' is not installed in this sandbox: if it comes from a package on PyPI, "
                             "install that package (often also named \"%s\") with install_package.",
                             module, module);
        else if (dist)
                r = asprintf(&s,
                             "The module '%s' is not installed: it comes from the package '%s', so declare \"%s\" in "
                             "the script's '# /// script' block (dependencies = [\"%s\"]) or in the dependencies "
                             "argument.",
                             module, dist, dist, dist);
        else
                r = asprintf(&s,
                             "The module '%s' is not installed: if it comes from a package on PyPI, declare that "
                             "package (often also named \"%s\") in the script's '# /// script' block or in the "
                             "dependencies argument; the sandbox holds only the script, so other local files cannot "
                             "be imported.",
                             module, module);
        return r < 0 ? NULL : s;
}

/* What Python and the libraries most used say when a name cannot be resolved or no route leads out. */
static bool network_refused(const char *text) {
        static const char *const signs[] = {
                "socket.gaierror",
                "Temporary failure in name resolution",
                "Name or service not known",
                "NameResolutionError",
                "Failed to resolve",
                "[Errno 101] Network is unreachable",
                "[Errno -3]",
                "[Errno -2]",
        };

        for (size_t i = 0; i < ELEMENTSOF(signs); i++)
                if (strstr(text, signs[i]))
                        return true;
        return false;
}

char *hint_for_run(const char *stderr_text, bool network_off, const RequirementList *requirements, bool persistent) {
        if (!stderr_text)
                return NULL;

        if (network_off && network_refused(stderr_text))
                return strdup("The script tried to reach the network, but the administrator of this server has "
                              "turned network access off for scripts (network=no): work with data the script "
                              "carries or computes, or ask the administrator to turn network access on.");

        return hint_module(stderr_text, requirements, persistent);
}

/* The name in "Wheels are required for `NAME` because building from source is disabled" or in
 * "all versions of NAME have no usable wheels", or NULL. */
static char *source_only_package(const char *text) {
        const char *p;
        size_t n;

        p = strstr(text, "Wheels are required for `");
        if (p) {
                p += strlen("Wheels are required for `");
                n = strcspn(p, "`\n");
                return p[n] == '`' && n > 0 ? strndup(p, n) : NULL;
        }
        p = strstr(text, "have no usable wheels");
        if (p) {
                /* Back to the name before it: "... all versions of NAME have no usable wheels". */
                const char *e = p;
                while (e > text && e[-1] == ' ')
                        e--;
                const char *b = e;
                while (b > text && b[-1] != ' ' && b[-1] != '\n')
                        b--;
                return e > b ? strndup(b, (size_t) (e - b)) : NULL;
        }
        return NULL;
}

char *hint_for_install(const char *uv_message, const RequirementList *requirements, bool source_builds) {
        _cleanup_free_ char *name = NULL;
        char *s = NULL;

        if (!uv_message)
                return NULL;

        /* An import name given as the package: say which package to declare instead. */
        for (size_t i = 0; requirements && i < requirements->n; i++)
                for (size_t k = 0; k < ELEMENTSOF(module_distributions); k++) {
                        _cleanup_free_ char *m = NULL;

                        if (pep508_normalize_name(module_distributions[k].module, &m) < 0 ||
                            !streq(m, requirements->items[i].name) || !strstr(uv_message, requirements->items[i].name) ||
                            streq(module_distributions[k].distribution, requirements->items[i].name))
                                continue;
                        if (asprintf(&s,
                                     "'%s' is the name to import, not the package to install: declare \"%s\" "
                                     "instead, then import %s.",
                                     requirements->items[i].name, module_distributions[k].distribution,
                                     module_distributions[k].module) < 0)
                                return NULL;
                        return s;
                }

        if (source_builds)
                return NULL;
        name = source_only_package(uv_message);
        if (!name)
                return NULL;
        if (asprintf(&s,
                     "'%s' has no wheel this server can use (it is published as source code only), and this server "
                     "installs wheels only: building from source runs the package's own code, so it is the "
                     "administrator's choice (allow-source-builds=yes); use a package that ships wheels, or ask the "
                     "administrator.",
                     name) < 0)
                return NULL;
        return s;
}
