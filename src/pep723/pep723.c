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

                if (l > 0 && p[l - 1] == '\r')
                        l--;
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

int pep723_extract(const char *script, size_t len, Pep723Block *ret, char **ret_error) {
        _cleanup_free_ Line *lines = NULL;
        _cleanup_free_ char *toml = NULL;
        size_t n_lines = 0, start = 0, end = 0, unclosed = 0, unclosed_close = 0;
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
                bool is_script;
                size_t j;

                if (!line_is_open(&lines[i], &is_script)) {
                        i++;
                        continue;
                }

                /* The run of content lines after the opening line; the block is closed
                 * only if the last line of that run is "# ///". */
                for (j = i + 1; j < n_lines && line_is_content(&lines[j]); j++)
                        ;

                if (j - 1 > i && line_is_close(&lines[j - 1])) {
                        if (is_script) {
                                if (found) {
                                        if (!ret_error)
                                                return -EINVAL;
                                        r = format(ret_error,
                                                   "the script has two '# /// script' metadata blocks (lines %zu and %zu)",
                                                   start + 1, i + 1);
                                        return r < 0 ? r : -EINVAL;
                                }
                                found = true;
                                start = i;
                                end = j - 1;
                        }
                        i = j; /* skip the whole block, whatever its type */
                        continue;
                }

                if (is_script && unclosed == 0) {
                        unclosed = i + 1;
                        /* A "# ///" inside the run means a comment line follows the intended end. */
                        for (size_t k = j; k > i + 1; k--)
                                if (line_is_close(&lines[k - 1])) {
                                        unclosed_close = k;
                                        break;
                                }
                }
                i++;
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
                .unclosed = unclosed > 0,
                .unclosed_line = (unsigned) unclosed,
                .unclosed_close_line = (unsigned) unclosed_close,
        };
        return 0;
}

int pep723_block_warning(const Pep723Block *b, char **ret) {
        if (!b || !ret)
                return -EINVAL;

        if (!b->unclosed) {
                *ret = NULL;
                return 0;
        }

        if (b->unclosed_close_line > 0)
                return format(ret,
                              "the '# /// script' block on line %u is ignored because its '# ///' on line %u "
                              "is followed by more '#' lines; end the block with '# ///' followed by a line not starting with '#'",
                              b->unclosed_line, b->unclosed_close_line);

        return format(ret, "the '# /// script' block on line %u is ignored because it has no closing '# ///' line",
                      b->unclosed_line);
}

void pep723_block_done(Pep723Block *b) {
        if (!b)
                return;
        free(b->toml);
        *b = (Pep723Block) {};
}
