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

static int split_lines(const char *script, size_t len, Line **ret, size_t *ret_n) {
        _cleanup_free_ Line *lines = NULL;
        size_t n = 0, k = 0;
        const char *p = script, *end = script + len;

        for (size_t i = 0; i < len; i++)
                if (script[i] == '\n')
                        n++;
        if (len > 0 && script[len - 1] != '\n')
                n++; /* a last line without "\n" */

        lines = calloc(MAX(n, (size_t) 1), sizeof(Line));
        if (!lines)
                return -ENOMEM;

        while (p < end) {
                const char *e = memchr(p, '\n', (size_t) (end - p)) ?: end;
                size_t l = (size_t) (e - p);

                if (e < end && l > 0 && p[l - 1] == '\r')
                        l--; /* "\r\n"; a lone "\r" at the very end stays, as for uv and the regex */
                lines[k++] = (Line) { .s = p, .n = l };
                p = e + 1;
        }

        *ret = TAKE_PTR(lines);
        *ret_n = k;
        return 0;
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

/* Why the script block opened on line i (0-based), whose content run ends before line j, has no end. */
static int unclosed_error(const Line *lines, size_t n_lines, size_t i, size_t j, char **ret) {
        _cleanup_free_ char *why = NULL;
        int r;

        /* uv's hint too: a "# ///" with something after it is not a closing line. */
        for (size_t k = j; k > i + 1; k--)
                if (lines[k - 1].n > 5 && memcmp(lines[k - 1].s, "# ///", 5) == 0)
                        return format(ret,
                                      "the '# /// script' metadata block on line %zu is not closed: line %zu is not "
                                      "a closing line because it has more after '# ///'; make the block's last line "
                                      "exactly '# ///'",
                                      i + 1, k);

        if (j >= n_lines)
                r = format(&why, "the script ends before a line that is exactly '# ///'");
        else if (lines[j].n > 0 && lines[j].s[0] == '#')
                r = format(&why, "line %zu ends it because it starts with '#' but not with '# '", j + 1);
        else
                r = format(&why, "line %zu ends it because it does not start with '#'", j + 1);
        if (r < 0)
                return r;

        return format(ret,
                      "the '# /// script' metadata block on line %zu is not closed: %s; start every line of the block "
                      "with '# ' (or a bare '#', for an empty line) and end it with a line that is exactly '# ///'",
                      i + 1, why);
}

int pep723_extract(const char *script, size_t len, Pep723Block *ret, char **ret_error) {
        _cleanup_free_ Line *lines = NULL;
        _cleanup_free_ char *toml = NULL, *problem = NULL;
        size_t n_lines = 0, start = 0, end = 0;
        bool found = false;
        const char *nul;
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

        r = split_lines(script, len, &lines, &n_lines);
        if (r < 0)
                return r;

        for (size_t i = 0; i < n_lines;) {
                const char *why;
                bool is_script;
                size_t j, close = 0;

                if (!line_is_open(&lines[i], &is_script)) {
                        if (!problem && line_is_near_open(&lines[i], &why)) {
                                r = near_open_error(i, why, &problem);
                                if (r < 0)
                                        return r;
                        }
                        i++;
                        continue;
                }

                /* The run of content lines after the opening line closes at its last "# ///" line, as the
                 * PEP's reference regex (greedy, then backtracking) and uv read it: comment lines after the
                 * closing line ("# ruff: noqa") are not part of the block. */
                for (j = i + 1; j < n_lines && line_is_content(&lines[j]); j++)
                        ;
                for (size_t k = j; k > i + 1; k--)
                        if (line_is_close(&lines[k - 1])) {
                                close = k - 1;
                                break;
                        }

                if (close > 0) {
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
                                end = close;
                        }
                        /* Go on after the closing line: what follows it in the run is outside the block. */
                        i = close + 1;
                        continue;
                }

                /* The spec says to ignore an unclosed block; uv refuses the script, and so do we: running without
                 * the dependencies the author meant to declare only fails later, and less clearly. Unclosed
                 * blocks of other types are not ours to judge. */
                if (is_script && !problem) {
                        r = unclosed_error(lines, n_lines, i, j, &problem);
                        if (r < 0)
                                return r;
                }
                /* Nothing in the run is closed either (its runs are suffixes of this one): look at each of its
                 * lines once, for a script block inside a block of another type, and go on after the run. Going
                 * on line by line would make a script of many opening lines cost quadratic time. */
                for (size_t k = i + 1; k < j && !problem; k++) {
                        if (line_is_open(&lines[k], &is_script) && is_script)
                                r = unclosed_error(lines, n_lines, k, j, &problem);
                        else if (line_is_near_open(&lines[k], &why))
                                r = near_open_error(k, why, &problem);
                        else
                                r = 0;
                        if (r < 0)
                                return r;
                }
                i = j;
        }

        if (problem) {
                if (ret_error)
                        *ret_error = TAKE_PTR(problem);
                return -EINVAL;
        }

        if (found) {
                size_t total = 1, k = 0;

                for (size_t i = start + 1; i < end; i++)
                        total += lines[i].n + 1;

                toml = malloc(total);
                if (!toml)
                        return -ENOMEM;

                for (size_t i = start + 1; i < end; i++) {
                        size_t skip = lines[i].n >= 2 ? 2 : 1; /* "# " or a bare "#" */

                        memcpy(toml + k, lines[i].s + skip, lines[i].n - skip);
                        k += lines[i].n - skip;
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
