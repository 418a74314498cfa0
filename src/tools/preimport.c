/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "preimport.h"
#include "strv.h"

/* Loaded by every interpreter before the first line of any program (python -I -S included): importing one of
 * these again only binds a name. */
static const char *const always_loaded[] = {
        "sys", "os", "os.path", "builtins", "io", "abc", "codecs", "stat", "posixpath", "genericpath", "time",
        "marshal", "posix", "zipimport", "encodings",
};

static bool is_always_loaded(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(always_loaded); i++)
                if (streq(always_loaded[i], name))
                        return true;
        return false;
}

static bool id_start(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool id_char(char c) {
        return id_start(c) || (c >= '0' && c <= '9');
}

bool preimport_name_valid(const char *name) {
        size_t n = strlen(name);

        if (n == 0 || n > PREIMPORT_MAX_NAME)
                return false;
        for (const char *p = name; *p;) {
                if (!id_start(*p))
                        return false;
                while (id_char(*p))
                        p++;
                if (*p == '.')
                        p++;
                else if (*p)
                        return false;
                if (*p == 0 && p[-1] == '.')
                        return false;
        }
        return true;
}

typedef struct Cursor {
        const char *p, *end;
} Cursor;

/* Spaces and tabs; inside brackets also newlines and comments. */
static void skip_blank(Cursor *c, bool in_brackets) {
        while (c->p < c->end) {
                if (*c->p == ' ' || *c->p == '\t' || *c->p == '\f')
                        c->p++;
                else if (in_brackets && (*c->p == '\n' || *c->p == '\r'))
                        c->p++;
                else if (in_brackets && *c->p == '#') {
                        while (c->p < c->end && *c->p != '\n')
                                c->p++;
                } else
                        break;
        }
}

static bool keyword(Cursor *c, const char *kw) {
        size_t n = strlen(kw);

        if ((size_t) (c->end - c->p) < n || memcmp(c->p, kw, n) != 0)
                return false;
        if (c->p + n < c->end && id_char(c->p[n]))
                return false;
        c->p += n;
        return true;
}

/* An identifier (or a dotted name): copied to buf, false if there is none or it is too long. */
static bool name(Cursor *c, bool dotted, char buf[static PREIMPORT_MAX_NAME + 1]) {
        size_t n = 0;

        for (;;) {
                if (c->p >= c->end || !id_start(*c->p))
                        return false;
                while (c->p < c->end && id_char(*c->p)) {
                        if (n >= PREIMPORT_MAX_NAME)
                                return false;
                        buf[n++] = *c->p++;
                }
                if (!dotted || c->p >= c->end || *c->p != '.')
                        break;
                if (n >= PREIMPORT_MAX_NAME)
                        return false;
                buf[n++] = *c->p++;
        }
        buf[n] = 0;
        return true;
}

/* The end of a logical line: blanks, an optional comment, a newline or the end. */
static bool line_end(Cursor *c) {
        skip_blank(c, false);
        if (c->p < c->end && *c->p == '#')
                while (c->p < c->end && *c->p != '\n')
                        c->p++;
        if (c->p < c->end && *c->p == '\r')
                c->p++;
        if (c->p >= c->end)
                return true;
        if (*c->p != '\n')
                return false;
        c->p++;
        return true;
}

/* "as NAME", if there. */
static bool alias(Cursor *c, bool in_brackets) {
        char buf[PREIMPORT_MAX_NAME + 1];
        Cursor save = *c;

        skip_blank(c, in_brackets);
        if (!keyword(c, "as")) {
                *c = save;
                return true;
        }
        skip_blank(c, in_brackets);
        return name(c, false, buf);
}

static int add_module(char ***l, const char *m) {
        if (is_always_loaded(m) || strv_contains(*l, m))
                return 0;
        return strv_extend(l, m);
}

/* One statement "import a.b as c, d": its modules added, only if all of it is of that form. */
static bool import_statement(Cursor *c, char ***l, int *error) {
        char buf[PREIMPORT_MAX_NAME + 1];
        _cleanup_strv_free_ char **names = strv_new();

        if (!names) {
                *error = -1;
                return false;
        }
        for (;;) {
                skip_blank(c, false);
                if (!name(c, true, buf) || !alias(c, false) || strv_extend(&names, buf) < 0)
                        return false;
                skip_blank(c, false);
                if (c->p < c->end && *c->p == ',') {
                        c->p++;
                        continue;
                }
                if (!line_end(c))
                        return false;
                for (size_t i = 0; names[i]; i++)
                        if (add_module(l, names[i]) < 0) {
                                *error = -1;
                                return false;
                        }
                return true;
        }
}

/* "from a.b import x as y, z", "from a import (x,\n y)", "from a import *". */
static bool from_statement(Cursor *c, char ***l, int *error) {
        char buf[PREIMPORT_MAX_NAME + 1], item[PREIMPORT_MAX_NAME + 1];
        bool brackets = false, future;

        skip_blank(c, false);
        if (!name(c, true, buf))   /* relative imports too: no package for __main__ */
                return false;
        future = streq(buf, "__future__");
        skip_blank(c, false);
        if (!keyword(c, "import"))
                return false;
        skip_blank(c, false);
        if (c->p < c->end && *c->p == '*') {
                c->p++;
        } else {
                if (c->p < c->end && *c->p == '(') {
                        brackets = true;
                        c->p++;
                }
                for (;;) {
                        skip_blank(c, brackets);
                        if (!name(c, false, item) || !alias(c, brackets))
                                return false;
                        skip_blank(c, brackets);
                        if (c->p < c->end && *c->p == ',') {
                                c->p++;
                                skip_blank(c, brackets);
                                if (brackets && c->p < c->end && *c->p == ')')
                                        break;
                                continue;
                        }
                        break;
                }
                if (brackets) {
                        if (c->p >= c->end || *c->p != ')')
                                return false;
                        c->p++;
                }
        }
        if (!line_end(c))
                return false;
        if (!future && add_module(l, buf) < 0) {
                *error = -1;
                return false;
        }
        return true;
}

/* A docstring as the first statement: """...""" or '''...''' without a prefix, then the end of the line. */
static bool docstring(Cursor *c) {
        const char *q;
        size_t left = (size_t) (c->end - c->p);

        if (left < 6 || (memcmp(c->p, "\"\"\"", 3) != 0 && memcmp(c->p, "'''", 3) != 0))
                return false;
        q = c->p;
        for (const char *p = c->p + 3; p + 3 <= c->end; p++) {
                if (*p == '\\') {
                        p++;
                        continue;
                }
                if (memcmp(p, q, 3) == 0) {
                        c->p = p + 3;
                        return line_end(c);
                }
        }
        return false;
}

char **preimport_leading_modules(const char *script, size_t len) {
        _cleanup_strv_free_ char **l = strv_new();
        Cursor c = { script, script + len };
        bool first = true;
        int error = 0;

        if (!l)
                return NULL;
        if (len >= 3 && memcmp(script, "\xef\xbb\xbf", 3) == 0)
                c.p += 3;
        while (c.p < c.end && strv_length(l) < PREIMPORT_MAX_MODULES) {
                Cursor s = c;

                /* Blank lines and comment lines. */
                skip_blank(&s, false);
                if (s.p >= s.end || *s.p == '\n' || *s.p == '\r' || *s.p == '#') {
                        if (!line_end(&s))
                                break;
                        c = s;
                        continue;
                }
                if (s.p != c.p)   /* an indented statement: not an import at the top */
                        break;
                if (first && docstring(&s)) {
                        first = false;
                        c = s;
                        continue;
                }
                first = false;
                if (keyword(&s, "import")) {
                        if (!import_statement(&s, &l, &error))
                                break;
                } else if (keyword(&s, "from")) {
                        if (!from_statement(&s, &l, &error))
                                break;
                } else
                        break;
                c = s;
        }
        if (error < 0)
                return NULL;
        /* A statement cut by the cap may have imported more: what was taken whole stays. */
        while (strv_length(l) > PREIMPORT_MAX_MODULES) {
                size_t n = strv_length(l);
                free(l[n - 1]);
                l[n - 1] = NULL;
        }
        return TAKE_PTR(l);
}

bool preimport_script_plain_enough(const char *script, size_t len) {
        static const char *const words[] = {
                "sys.modules", "sys.path", "meta_path", "path_hooks", "path_importer_cache", "importlib",
                "__import__", "environ", "putenv", "unsetenv", "chdir", "setdlopenflags", "get_objects",
                "get_referrers", "_getframe",
        };

        for (size_t i = 0; i < ELEMENTSOF(words); i++)
                if (memmem(script, len, words[i], strlen(words[i])))
                        return false;
        return true;
}

bool preimport_is_prefix(char *const *pre, char *const *script) {
        size_t i = 0;

        for (; pre && pre[i]; i++)
                if (!script || !script[i] || !streq(pre[i], script[i]))
                        return false;
        return true;
}

char **preimport_learn(char *const *script, const char *loaded) {
        _cleanup_strv_free_ char **top = strv_split(strempty(loaded), " ");
        char **l = strv_new();
        size_t last = 0;

        if (!top || !l)
                return strv_free(l);
        for (size_t i = 0; script && script[i]; i++) {
                char t[PREIMPORT_MAX_NAME + 1];
                size_t n = strcspn(script[i], ".");
                if (n > PREIMPORT_MAX_NAME)
                        continue;
                memcpy(t, script[i], n);
                t[n] = 0;
                if (strv_contains(top, t))
                        last = i + 1;
        }
        for (size_t i = 0; i < last; i++)
                if (strv_extend(&l, script[i]) < 0)
                        return strv_free(l);
        return l;
}
