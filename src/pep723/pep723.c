/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "pep723.h"

typedef struct Line {
        const char *s;
        size_t n;               /* without "\n" and a trailing "\r" */
} Line;

static int format(char **ret, const char *fmt, ...) _printf_(2, 3);
static int format(char **ret, const char *fmt, ...) {
        va_list ap;
        char *m;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        if (n < 0)
                return -ENOMEM;

        m = malloc((size_t) n + 1);
        if (!m)
                return -ENOMEM;

        va_start(ap, fmt);
        (void) vsnprintf(m, (size_t) n + 1, fmt, ap);
        va_end(ap);

        *ret = m;
        return 0;
}

/*
 * The script's lines, read one after another where they are: nothing is allocated per line, so a script of
 * millions of empty lines costs a pass over its bytes and no more (it came in one message: the event loop reads it).
 */
typedef struct Cursor {
        const char *p, *end;    /* the next line starts at p */
        size_t line;            /* its number, 0-based */
} Cursor;

/* The next line, or false at the end. */
static bool next_line(Cursor *c, Line *ret) {
        const char *e;
        size_t l;

        if (c->p >= c->end)
                return false;
        /* An empty line without a call: a script of nothing but line breaks is read at memory's pace. */
        e = *c->p == '\n' ? c->p : memchr(c->p, '\n', (size_t) (c->end - c->p)) ?: c->end;
        l = (size_t) (e - c->p);
        if (e < c->end && l > 0 && c->p[l - 1] == '\r')
                l--; /* "\r\n"; a lone "\r" at the very end stays, as for uv and the regex */
        *ret = (Line) { .s = c->p, .n = l };
        c->p = e < c->end ? e + 1 : c->end;
        c->line++;
        return true;
}

/* "#" alone, or "# " followed by anything. */
static bool line_is_content(const Line *l) {
        return l->n >= 1 && l->s[0] == '#' && (l->n == 1 || l->s[1] == ' ');
}

static bool line_is_close(const Line *l) {
        return l->n == 5 && memcmp(l->s, "# ///", 5) == 0;
}

/* "# /// TYPE", TYPE of ASCII letters, digits and hyphens; returns whether TYPE is "script". */
static bool line_is_open(const Line *l, bool *ret_script) {
        if (l->n <= 6 || memcmp(l->s, "# /// ", 6) != 0)
                return false;

        for (size_t i = 6; i < l->n; i++) {
                char c = l->s[i];

                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'))
                        return false;
        }

        *ret_script = l->n == 12 && memcmp(l->s + 6, "script", 6) == 0;
        return true;
}

/* A line that is "# /// script" once leading and trailing blanks are gone, but not exactly: a block that
 * every reader ignores, which its author meant to be read. */
static bool line_is_near_open(const Line *l, const char **ret_why) {
        size_t a = 0, b = l->n;

        while (a < b && (l->s[a] == ' ' || l->s[a] == '\t'))
                a++;
        while (b > a && (l->s[b - 1] == ' ' || l->s[b - 1] == '\t' || l->s[b - 1] == '\r'))
                b--;
        if (b - a != 12 || memcmp(l->s + a, "# /// script", 12) != 0 || (a == 0 && b == l->n))
                return false;

        *ret_why = a > 0 ? "it is indented" : "it has blanks after 'script'";
        return true;
}

static int near_open_error(size_t i, const char *why, char **ret) {
        return format(ret,
                      "line %zu looks like the start of a '# /// script' metadata block, but %s, so uv and every "
                      "other reader ignore the block; write that line as exactly '# /// script', at the start of "
                      "the line",
                      i + 1, why);
}

/* What a run of content lines (the lines after an opening line that are "#" or "# " + text) was found to hold. */
typedef struct Run {
        size_t end;             /* the first line after it */
        Line end_line;          /* that line, unless the script ended (has_end) */
        bool has_end;
        size_t close;           /* its last line that is exactly "# ///"; 0: none (the opening line comes first) */
        const char *close_s;
        Cursor after_close;     /* where the line after that one starts */
        size_t last_more;       /* its last line that is "# ///" and more; 0: none */
} Run;

/* The run after the opening line that c has just read. */
static Run run_after(Cursor c) {
        Run r = {};
        Line l;

        for (;;) {
                Cursor before = c;
                if (!next_line(&c, &l) || !line_is_content(&l)) {
                        r.end = before.line;
                        r.has_end = before.p < before.end;
                        r.end_line = r.has_end ? l : (Line) {};
                        return r;
                }
                if (line_is_close(&l)) {
                        r.close = c.line - 1;
                        r.close_s = l.s;
                        r.after_close = c;
                }
                if (l.n > 5 && memcmp(l.s, "# ///", 5) == 0)
                        r.last_more = c.line - 1;
        }
}

/* Why the script block opened on line i (0-based), whose content run is r (no line of it closes), has no end. */
static int unclosed_error(size_t i, const Run *r, char **ret) {
        _cleanup_free_ char *why = NULL;
        int k;

        /* uv's hint too: a "# ///" with something after it is not a closing line. */
        if (r->last_more > i)
                return format(ret,
                              "the '# /// script' metadata block on line %zu is not closed: line %zu is not "
                              "a closing line because it has more after '# ///'; make the block's last line "
                              "exactly '# ///'",
                              i + 1, r->last_more + 1);

        if (!r->has_end)
                k = format(&why, "the script ends before a line that is exactly '# ///'");
        else if (r->end_line.n > 0 && r->end_line.s[0] == '#')
                k = format(&why, "line %zu ends it because it starts with '#' but not with '# '", r->end + 1);
        else
                k = format(&why, "line %zu ends it because it does not start with '#'", r->end + 1);
        if (k < 0)
                return k;

        return format(ret,
                      "the '# /// script' metadata block on line %zu is not closed: %s; start every line of the block "
                      "with '# ' (or a bare '#', for an empty line) and end it with a line that is exactly '# ///'",
                      i + 1, why);
}

int pep723_extract(const char *script, size_t len, Pep723Block *ret, char **ret_error) {
        _cleanup_free_ char *toml = NULL, *problem = NULL;
        const char *block = NULL, *block_end = NULL;
        size_t start = 0, end = 0;
        bool found = false;
        const char *nul;
        Cursor c;
        Line l;
        int r;

        if ((!script && len > 0) || !ret)
                return -EINVAL;

        nul = len > 0 ? memchr(script, 0, len) : NULL;
        if (nul) {
                unsigned line = 1;

                for (const char *p = script; p < nul; p++)
                        if (*p == '\n')
                                line++;
                if (!ret_error)
                        return -EINVAL;
                r = format(ret_error, "the script contains a NUL byte on line %u", line);
                return r < 0 ? r : -EINVAL;
        }

        c = (Cursor) { .p = script, .end = script + len };
        while (next_line(&c, &l)) {
                size_t i = c.line - 1;
                const char *why;
                bool is_script;

                if (!line_is_open(&l, &is_script)) {
                        if (!problem && line_is_near_open(&l, &why)) {
                                r = near_open_error(i, why, &problem);
                                if (r < 0)
                                        return r;
                        }
                        continue;
                }

                /* The run of content lines after the opening line closes at its last "# ///" line, as the
                 * PEP's reference regex (greedy, then backtracking) and uv read it: comment lines after the
                 * closing line ("# ruff: noqa") are not part of the block. */
                Run run = run_after(c);
                if (run.close > 0) {
                        if (is_script) {
                                if (found) {
                                        if (!ret_error)
                                                return -EINVAL;
                                        r = format(ret_error,
                                                   "the script has two '# /// script' metadata blocks (lines %zu and %zu); "
                                                   "merge them into one",
                                                   start + 1, i + 1);
                                        return r < 0 ? r : -EINVAL;
                                }
                                found = true;
                                start = i;
                                end = run.close;
                                block = c.p;
                                block_end = run.close_s;
                        }
                        /* Go on after the closing line: what follows it in the run is outside the block (and,
                         * having no closing line, is read at most twice more). */
                        c = run.after_close;
                        continue;
                }

                /* The spec says to ignore an unclosed block; uv refuses the script, and so do we: running without
                 * the dependencies the author meant to declare only fails later, and less clearly. Unclosed
                 * blocks of other types are not ours to judge. */
                if (is_script && !problem) {
                        r = unclosed_error(i, &run, &problem);
                        if (r < 0)
                                return r;
                }
                /* Nothing in the run is closed either (its runs are suffixes of this one): look at each of its
                 * lines once, for a script block inside a block of another type, and go on after the run. Going
                 * on line by line would make a script of many opening lines cost quadratic time. */
                while (c.line < run.end && next_line(&c, &l)) {
                        size_t k = c.line - 1;
                        if (problem)
                                r = 0;
                        else if (line_is_open(&l, &is_script) && is_script)
                                r = unclosed_error(k, &run, &problem);
                        else if (line_is_near_open(&l, &why))
                                r = near_open_error(k, why, &problem);
                        else
                                r = 0;
                        if (r < 0)
                                return r;
                }
        }

        if (problem) {
                if (ret_error)
                        *ret_error = TAKE_PTR(problem);
                return -EINVAL;
        }

        if (found) {
                Cursor b = { .p = block, .end = block_end };
                size_t k = 0;

                /* At most the block's bytes: each line loses its "#" at least, and gains a "\n" at most. */
                toml = malloc((size_t) (block_end - block) + 2);
                if (!toml)
                        return -ENOMEM;
                while (next_line(&b, &l)) {
                        size_t skip = l.n >= 2 ? 2 : 1; /* "# " or a bare "#" */

                        memcpy(toml + k, l.s + skip, l.n - skip);
                        k += l.n - skip;
                        toml[k++] = '\n';
                }
                toml[k] = 0;
        }

        *ret = (Pep723Block) {
                .toml = TAKE_PTR(toml),
                .start_line = found ? (unsigned) start + 1 : 0,
                .end_line = found ? (unsigned) end + 1 : 0,
        };
        return 0;
}

void pep723_block_done(Pep723Block *b) {
        if (!b)
                return;
        free(b->toml);
        *b = (Pep723Block) {};
}
