/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "preimport.h"
#include "strv.h"
#include "utf8.h"

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

typedef struct Cursor {
        const char *p, *end;
} Cursor;

/* A comment runs to the end of the physical line, which Python ends at "\n", "\r\n" and a lone "\r". */
static void skip_comment(Cursor *c) {
        while (c->p < c->end && *c->p != '\n' && *c->p != '\r')
                c->p++;
}

/* Spaces and tabs (not a form feed: it resets the indentation); inside brackets also newlines and comments. */
static void skip_blank(Cursor *c, bool in_brackets) {
        while (c->p < c->end) {
                if (*c->p == ' ' || *c->p == '\t')
                        c->p++;
                else if (in_brackets && (*c->p == '\n' || *c->p == '\r'))
                        c->p++;
                else if (in_brackets && *c->p == '#') {
                        skip_comment(c);
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
                skip_comment(c);
        if (c->p >= c->end)
                return true;
        if (*c->p == '\r') {
                c->p++;
                if (c->p < c->end && *c->p == '\n')
                        c->p++;
                return true;
        }
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

/* Each item once: a statement run again does nothing new. */
static int add_item(char ***l, const char *item) {
        if (strv_contains(*l, item))
                return 0;
        return strv_extend(l, item);
}

static int add_module(char ***l, const char *m) {
        if (is_always_loaded(m))
                return 0;
        return add_item(l, m);
}

/* One statement "import a.b as c, d": its modules added, only if all of it is of that form. Of a statement of
 * thousands of names only those the list has room for are kept: each is looked for in the list and the statement's
 * names kept so far, which would otherwise take time quadratic in the statement's length, in the event loop. */
static bool import_statement(Cursor *c, char ***l, int *error) {
        char buf[PREIMPORT_MAX_NAME + 1];
        _cleanup_strv_free_ char **names = strv_new();
        size_t room = PREIMPORT_MAX_MODULES - MIN(strv_length(*l), (size_t) PREIMPORT_MAX_MODULES), n = 0;

        if (!names) {
                *error = -1;
                return false;
        }
        for (;;) {
                skip_blank(c, false);
                if (!name(c, true, buf) || !alias(c, false))
                        return false;
                if (n < room && !is_always_loaded(buf) && !strv_contains(*l, buf) && !strv_contains(names, buf)) {
                        if (strv_extend(&names, buf) < 0)
                                return false;
                        n++;
                }
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

/* "from a.b import x as y, z" (also "from a import (x,\n y)", a comma before the bracket): one item, "a.b:x:z",
 * the module and the names it takes in order (preimport.h), never left out; "from a.b import *": the module, as
 * "import a.b" (a package's __all__ is imported by the script). "from __future__ import ...": nothing. A relative
 * import is not taken (no package for __main__), nor an item longer than PREIMPORT_MAX_ITEM. */
static bool from_statement(Cursor *c, char ***l, int *error) {
        char buf[PREIMPORT_MAX_NAME + 1], name_buf[PREIMPORT_MAX_NAME + 1], item[PREIMPORT_MAX_ITEM + 1];
        bool brackets = false, future, star = false;
        size_t n;

        skip_blank(c, false);
        if (!name(c, true, buf))
                return false;
        future = streq(buf, "__future__");
        n = strlen(buf);
        memcpy(item, buf, n + 1);
        skip_blank(c, false);
        if (!keyword(c, "import"))
                return false;
        skip_blank(c, false);
        if (c->p < c->end && *c->p == '*') {
                c->p++;
                star = true;
        } else {
                if (c->p < c->end && *c->p == '(') {
                        brackets = true;
                        c->p++;
                }
                for (;;) {
                        size_t k;

                        skip_blank(c, brackets);
                        if (!name(c, false, name_buf) || !alias(c, brackets))
                                return false;
                        k = strlen(name_buf);
                        if (n + 1 + k > PREIMPORT_MAX_ITEM)
                                return false;
                        item[n++] = PREIMPORT_NAMES_SEPARATOR;
                        memcpy(item + n, name_buf, k + 1);
                        n += k;
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
        if (future)
                return true;
        if ((star ? add_module(l, buf) : add_item(l, item)) < 0) {
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
        /* A statement cut by a cap may have imported more: what was taken whole stays. The items, joined with
         * commas, stay within PREIMPORT_MAX_LINE. */
        size_t n = 0, line = 0;
        for (; l[n] && n < PREIMPORT_MAX_MODULES; n++) {
                line += (n > 0) + strlen(l[n]);
                if (line > PREIMPORT_MAX_LINE)
                        break;
        }
        for (size_t i = n; l[i]; i++)
                l[i] = mfree(l[i]);
        return TAKE_PTR(l);
}

/* A PEP 263 declaration on line: "^[ \t\f]*#.*?coding[:=][ \t]*([-_.a-zA-Z0-9]+)". False when there is one that
 * names anything but UTF-8, ASCII or Latin-1 (under which ASCII text reads as the parser reads it); with text
 * beyond ASCII (!ascii), anything but UTF-8. */
static bool coding_plain(const char *line, const char *end, bool ascii) {
        static const char *const plain[] = {
                "utf-8", "utf8", "ascii", "us-ascii", "latin-1", "latin1", "iso-8859-1", "iso8859-1", "iso-latin-1",
        };
        const size_t n_plain = ascii ? ELEMENTSOF(plain) : 2;   /* text beyond ASCII: UTF-8 only */
        const char *p = line;

        while (p < end && (*p == ' ' || *p == '\t' || *p == '\f'))
                p++;
        if (p >= end || *p != '#')
                return true;
        for (; p + 7 <= end; p++) {
                const char *q = p + 6, *v;
                char buf[16];
                size_t n = 0;

                if (memcmp(p, "coding", 6) != 0 || (*q != ':' && *q != '='))
                        continue;
                for (q++; q < end && (*q == ' ' || *q == '\t'); q++)
                        ;
                for (v = q; q < end && (id_char(*q) || *q == '-' || *q == '.'); q++)
                        ;
                if (q == v)
                        continue;   /* the regex looks further along the line */
                if ((size_t) (q - v) >= sizeof(buf))
                        return false;
                for (; v < q; v++)
                        buf[n++] = *v == '_' ? '-' : (char) ((*v >= 'A' && *v <= 'Z') ? *v - 'A' + 'a' : *v);
                buf[n] = 0;
                for (size_t i = 0; i < n_plain; i++)
                        if (streq(plain[i], buf))
                                return true;
                return false;
        }
        return true;
}

/* Characters people put in comments and strings (±, °, ×, —, “”, …, →, ≤, box drawing, ✓, emoji) that can be no
 * part of a Python identifier (none is XID_Continue; checked against Python's str.isidentifier()): outside a
 * comment or a string they are a syntax error, so with them a script can spell no name in another way (an
 * identifier is NFKC-normalised: a fullwidth or mathematical letter reads as an ASCII one). Line and paragraph
 * separators, bidirectional controls and zero-width characters are not among them. */
static bool outside_identifiers(uint32_t cp) {
        static const struct {
                uint32_t first, last;
        } symbols[] = {
                { 0x00a0, 0x00a9 }, { 0x00ab, 0x00b4 }, { 0x00b6, 0x00b6 }, { 0x00b8, 0x00b9 },
                { 0x00bb, 0x00bf }, { 0x00d7, 0x00d7 }, { 0x00f7, 0x00f7 }, { 0x2010, 0x2027 },
                { 0x2030, 0x203e }, { 0x2041, 0x2053 }, { 0x2055, 0x205e }, { 0x2190, 0x23ff },
                { 0x2500, 0x27bf }, { 0x2b00, 0x2bff }, { 0x1f300, 0x1faff },
        };

        for (size_t i = 0; i < ELEMENTSOF(symbols); i++)
                if (cp >= symbols[i].first && cp <= symbols[i].last)
                        return true;
        return false;
}

bool preimport_script_plain_enough(const char *script, size_t len) {
        /* Ways to reach sys.modules, the import machinery, the frames or what a module did at import time without
         * naming them, and the state imports set up (warnings filters, signal handlers, atexit). Too many rather
         * than too few: a script refused only gets a fresh sandbox. */
        static const char *const words[] = {
                "modules", "sys.path", "meta_path", "path_hooks", "path_importer_cache", "importlib",
                "import_module", "__import__", "environ", "putenv", "unsetenv", "chdir", "setdlopenflags",
                "get_objects", "get_referrers", "get_referents", "_getframe", "_current_frames", "getattr",
                "attrgetter", "__getattribute__", "__dict__", "vars(", "globals(", "locals(", "__builtins__",
                "builtins", "eval(", "exec(", "compile(", "inspect", "ctypes", "warnings", "signal", "faulthandler",
                "atexit", "__loader__", "__spec__", "settrace", "setprofile", "addaudithook",
        };
        const char *end = script + len, *line = script;
        bool ascii = true;

        if (len >= 3 && memcmp(script, "\xef\xbb\xbf", 3) == 0)
                script += 3, len -= 3, line = script;
        for (size_t i = 0; i < len;) {
                unsigned char b = (unsigned char) script[i];
                uint32_t cp;
                size_t n;

                /* NUL, a form feed, a lone carriage return (other line ends). */
                if (b == 0 || b == '\f' || (b == '\r' && (i + 1 >= len || script[i + 1] != '\n')))
                        return false;
                if (b < 0x80) {
                        i++;
                        continue;
                }
                /* Beyond ASCII: UTF-8 (other encodings) and only characters that are no part of a name. */
                n = utf8_decode(script + i, len - i, &cp);
                if (n == 0 || !outside_identifiers(cp))
                        return false;
                ascii = false;
                i += n;
        }
        /* An encoding declaration counts on either of the first two lines; with text beyond ASCII, only UTF-8's. */
        for (int n = 0; n < 2 && line < end; n++) {
                const char *nl = memchr(line, '\n', (size_t) (end - line));
                if (!coding_plain(line, nl ?: end, ascii))
                        return false;
                if (!nl)
                        break;
                line = nl + 1;
        }
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
                size_t n = strcspn(script[i], (const char[]) { '.', PREIMPORT_NAMES_SEPARATOR, 0 });
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
