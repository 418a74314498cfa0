/* SPDX-License-Identifier: MIT */
/*
 * One PEP 508 specifier, parsed and made canonical: the name, extras, version clauses and the environment marker.
 * Over 800 lines, one file: the marker's parser and the specifier's share the lexer, the Parser, the string they
 * build and the error messages, which splitting would turn into an interface of their own. Lists of requirements
 * are in requirements.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "macro.h"
#include "strv.h"
#include "pep440.h"
#include "pep508.h"

#define MARKER_DEPTH_MAX 32
#define ECHO_MAX 80     /* bytes of a rejected specifier quoted back when it is unprintable */

static int vset_error(char **ret_error, const char *prefix, const char *fmt, va_list ap) _printf_(3, 0);
static int vset_error(char **ret_error, const char *prefix, const char *fmt, va_list ap) {
        va_list aq;
        size_t np = strlen(prefix);
        char *m;
        int n;

        if (!ret_error)
                return -EINVAL;

        va_copy(aq, ap);
        n = vsnprintf(NULL, 0, fmt, aq);
        va_end(aq);
        if (n < 0)
                return -ENOMEM;

        m = malloc(np + (size_t) n + 1);
        if (!m)
                return -ENOMEM;
        memcpy(m, prefix, np);
        (void) vsnprintf(m + np, (size_t) n + 1, fmt, ap);

        *ret_error = m;
        return -EINVAL;
}


static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

static bool is_alpha(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_alnum(char c) {
        return is_digit(c) || is_alpha(c);
}

static bool is_wsp(char c) {
        return c == ' ' || c == '\t';
}

static bool is_name_char(char c) {
        return is_alnum(c) || c == '-' || c == '_' || c == '.';
}

static const char *skip_wsp(const char *p) {
        while (is_wsp(*p))
                p++;
        return p;
}

/* [A-Za-z0-9] or [A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9] */
static bool name_is_valid(const char *s, size_t n) {
        if (n == 0 || !is_alnum(s[0]) || !is_alnum(s[n - 1]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!is_name_char(s[i]))
                        return false;
        return true;
}

static int normalize_name(const char *s, size_t n, char **ret) {
        char *t;
        size_t k = 0;

        t = malloc(n + 1);
        if (!t)
                return -ENOMEM;

        for (size_t i = 0; i < n; i++) {
                if (s[i] == '-' || s[i] == '_' || s[i] == '.') {
                        if (k == 0 || t[k - 1] != '-')
                                t[k++] = '-';
                } else
                        t[k++] = s[i] >= 'A' && s[i] <= 'Z' ? (char) (s[i] - 'A' + 'a') : s[i];
        }
        t[k] = 0;

        *ret = t;
        return 0;
}

int pep508_normalize_name(const char *name, char **ret) {
        if (!name || !ret)
                return -EINVAL;
        return normalize_name(name, strlen(name), ret);
}

/* Something uv would read as a URL, a VCS reference or a file instead of a name. */
static bool looks_like_location(const char *s) {
        const char *p;
        size_t n;

        if (s[0] && strchr("/.~\\", s[0]))
                return true;

        /* A URL scheme ("git+https:", "file:") or a drive letter. */
        if (is_alpha(s[0])) {
                for (p = s + 1; is_alnum(*p) || *p == '+' || *p == '-' || *p == '.'; p++)
                        ;
                if (*p == ':')
                        return true;
        }

        n = strcspn(s, ";");
        for (size_t i = 0; i + 3 <= n; i++)
                if (memcmp(s + i, "://", 3) == 0)
                        return true;

        return false;
}

static bool name_is_archive(const char *s, size_t n) {
        static const char *const suffixes[] = {
                ".whl", ".zip", ".egg", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz",
                ".tar.xz", ".txz", ".tar.zst",
        };

        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++) {
                size_t l = strlen(suffixes[i]);

                if (n > l && strncasecmp(s + n - l, suffixes[i], l) == 0)
                        return true;
        }
        return false;
}

static int direct_reference_error(char **ret_error, const char *spec) {
        return error_setf(ret_error,
                         "direct references (name @ URL, VCS or local paths) are not allowed: %s",
                         spec);
}

/* ---- environment markers ---- */

typedef enum TokenType {
        TOKEN_END,
        TOKEN_VARIABLE,
        TOKEN_STRING,
        TOKEN_OP,
        TOKEN_AND,
        TOKEN_OR,
        TOKEN_NOT,
        TOKEN_IN,
        TOKEN_LPAREN,
        TOKEN_RPAREN,
} TokenType;

typedef struct Token {
        TokenType type;
        const char *start;      /* the token's text; for strings, the content */
        size_t len;
} Token;

typedef struct Parser {
        const char *spec;       /* the whole specifier, quoted in messages */
        const char *p;
        char **ret_error;
} Parser;

static const char *const marker_variables[] = {
        "python_version",
        "python_full_version",
        "os_name",
        "sys_platform",
        "platform_release",
        "platform_system",
        "platform_version",
        "platform_machine",
        "platform_python_implementation",
        "implementation_name",
        "implementation_version",
        "extra",
};

static int marker_error(Parser *P, const char *fmt, ...) _printf_(2, 3);
static int marker_error(Parser *P, const char *fmt, ...) {
        _cleanup_free_ char *prefix = NULL;
        va_list ap;
        size_t n;
        int r;

        if (!P->ret_error)
                return -EINVAL;

        n = strlen(P->spec) + 64;
        prefix = malloc(n);
        if (!prefix)
                return -ENOMEM;
        (void) snprintf(prefix, n, "invalid environment marker in '%s': ", P->spec);

        va_start(ap, fmt);
        r = vset_error(P->ret_error, prefix, fmt, ap);
        va_end(ap);
        return r;
}

static bool token_is(const Token *t, const char *word) {
        return t->len == strlen(word) && memcmp(t->start, word, t->len) == 0;
}

static bool string_char_ok(char c) {
        /* PEP 508 python_str_c, plus the quote that does not end the string. */
        return is_alnum(c) || strchr(" \t().{}-_*#:;,/?[]!~`@$%^&=+|<>\"'", c);
}

static int lex(Parser *P, Token *ret) {
        static const char *const ops[] = { "===", "==", "!=", "<=", ">=", "~=", "<", ">" };
        const char *p = skip_wsp(P->p);
        Token t = { .start = p };

        if (!*p)
                t.type = TOKEN_END;
        else if (*p == '(') {
                t.type = TOKEN_LPAREN;
                t.len = 1;
        } else if (*p == ')') {
                t.type = TOKEN_RPAREN;
                t.len = 1;
        } else if (*p == '\'' || *p == '"') {
                const char *e = strchr(p + 1, *p);

                if (!e)
                        return marker_error(P, "the string starting at %s is not closed", p);

                for (const char *c = p + 1; c < e; c++) {
                        if (!string_char_ok(*c))
                                return marker_error(P, "'%c' is not allowed in the string %.*s",
                                                    *c, (int) (e - p + 1), p);
                        /* Requirement files expand ${VAR} and cut comments at " #". */
                        if ((c[0] == '$' && c[1] == '{') || (is_wsp(c[0]) && c[1] == '#'))
                                return marker_error(P, "the string %.*s must not contain '${' or ' #'",
                                                    (int) (e - p + 1), p);
                }

                t.type = TOKEN_STRING;
                t.start = p + 1;
                t.len = (size_t) (e - p - 1);
                p = e + 1;
                P->p = p;
                *ret = t;
                return 0;
        } else if (strchr("=!<>~", *p)) {
                for (size_t i = 0; i < ELEMENTSOF(ops); i++)
                        if (startswith(p, ops[i])) {
                                t.type = TOKEN_OP;
                                t.len = strlen(ops[i]);
                                break;
                        }
                if (t.len == 0)
                        return marker_error(P, "expected a comparison operator at %s", p);
        } else if (is_alnum(*p) || *p == '_' || *p == '.') {
                while (is_alnum(p[t.len]) || p[t.len] == '_' || p[t.len] == '.')
                        t.len++;

                if (token_is(&t, "and"))
                        t.type = TOKEN_AND;
                else if (token_is(&t, "or"))
                        t.type = TOKEN_OR;
                else if (token_is(&t, "not"))
                        t.type = TOKEN_NOT;
                else if (token_is(&t, "in"))
                        t.type = TOKEN_IN;
                else {
                        bool known = false;

                        for (size_t i = 0; i < ELEMENTSOF(marker_variables); i++)
                                if (token_is(&t, marker_variables[i])) {
                                        known = true;
                                        break;
                                }
                        if (!known)
                                return marker_error(P, "'%.*s' is not a marker variable", (int) t.len, p);
                        t.type = TOKEN_VARIABLE;
                }
        } else
                return marker_error(P, "unexpected '%c' at %s", *p, p);

        P->p = p + t.len;
        *ret = t;
        return 0;
}

static int peek(Parser *P, Token *ret) {
        const char *saved = P->p;
        int r;

        r = lex(P, ret);
        P->p = saved;
        return r;
}

static bool token_is_value(const Token *t) {
        return t->type == TOKEN_VARIABLE || t->type == TOKEN_STRING;
}

/* Where the token's text starts, including a string's opening quote. */
static const char *token_text(const Token *t) {
        return t->type == TOKEN_STRING ? t->start - 1 : t->start;
}

static const char *rest_or_end(const Token *t) {
        return t->type == TOKEN_END ? "the end" : token_text(t);
}

static int add_value(char **out, const Token *t) {
        const char *q;
        int r;

        if (t->type == TOKEN_VARIABLE)
                return strextendf(out, "%.*s", (int) t->len, t->start);

        /* Double quotes unless the string holds one. */
        q = memchr(t->start, '"', t->len) ? "'" : "\"";
        r = strextendf(out, "%s", q);
        if (r < 0)
                return r;
        r = strextendf(out, "%.*s", (int) t->len, t->start);
        if (r < 0)
                return r;
        return strextendf(out, "%s", q);
}

static bool is_version_variable(const Token *t) {
        return t->type == TOKEN_VARIABLE &&
                (token_is(t, "python_version") || token_is(t, "python_full_version") ||
                 token_is(t, "implementation_version"));
}

/* python_version >= "3.x" would silently compare as text; insist on a real version. */
static int check_version_comparison(Parser *P, const Token *op, const Token *value) {
        _cleanup_(pep440_specifier_set_freep) Pep440SpecifierSet *set = NULL;
        _cleanup_free_ char *clause = NULL, *error = NULL;
        int r;

        if (value->len == 0 || memchr(value->start, ',', value->len))
                return marker_error(P, "\"%.*s\" is not a valid version",
                                    (int) value->len, value->start);

        clause = malloc(op->len + value->len + 1);
        if (!clause)
                return -ENOMEM;
        memcpy(clause, op->start, op->len);
        memcpy(clause + op->len, value->start, value->len);
        clause[op->len + value->len] = 0;

        r = pep440_specifier_set_parse(clause, &set, &error);
        if (r == -EINVAL)
                return marker_error(P, "%s", strempty(error));
        return r;
}

static int parse_or(Parser *P, char **out, unsigned depth);

static int parse_atom(Parser *P, char **out, unsigned depth) {
        Token lhs, op, rhs, t;
        const char *op_text;
        int r;

        r = lex(P, &lhs);
        if (r < 0)
                return r;

        if (lhs.type == TOKEN_LPAREN) {
                if (depth >= MARKER_DEPTH_MAX)
                        return marker_error(P, "parentheses are nested too deeply");

                r = strextendf(out, "(");
                if (r < 0)
                        return r;
                r = parse_or(P, out, depth + 1);
                if (r < 0)
                        return r;

                r = lex(P, &t);
                if (r < 0)
                        return r;
                if (t.type != TOKEN_RPAREN)
                        return marker_error(P, "expected 'and', 'or' or ')' at %s", rest_or_end(&t));
                return strextendf(out, ")");
        }

        if (!token_is_value(&lhs))
                return marker_error(P, "expected a marker variable, a quoted string or '(' at %s",
                                    rest_or_end(&lhs));

        r = lex(P, &op);
        if (r < 0)
                return r;
        if (op.type == TOKEN_OP)
                op_text = NULL;
        else if (op.type == TOKEN_IN)
                op_text = "in";
        else if (op.type == TOKEN_NOT) {
                r = lex(P, &t);
                if (r < 0)
                        return r;
                if (t.type != TOKEN_IN)
                        return marker_error(P, "expected 'in' after 'not' at %s", rest_or_end(&t));
                op_text = "not in";
        } else
                return marker_error(P, "expected a comparison operator after '%.*s'",
                                    (int) (token_text(&op) - token_text(&lhs)), token_text(&lhs));

        r = lex(P, &rhs);
        if (r < 0)
                return r;
        if (!token_is_value(&rhs))
                return marker_error(P, "expected a marker variable or a quoted string at %s",
                                    rest_or_end(&rhs));

        if (lhs.type == rhs.type)
                return marker_error(P, "'%.*s' must compare a marker variable with a quoted string",
                                    (int) (P->p - token_text(&lhs)), token_text(&lhs));

        /* Version variables compare as versions, and "~=" only works on versions. */
        if (!op_text) {
                const Token *value = lhs.type == TOKEN_STRING ? &lhs : &rhs;
                const Token *variable = lhs.type == TOKEN_STRING ? &rhs : &lhs;

                if (is_version_variable(variable) || token_is(&op, "~=")) {
                        r = check_version_comparison(P, &op, value);
                        if (r < 0)
                                return r;
                }
        }

        r = add_value(out, &lhs);
        if (r < 0)
                return r;
        r = strextendf(out, " ");
        if (r < 0)
                return r;
        r = op_text ? strextendf(out, "%s", op_text) : strextendf(out, "%.*s", (int) op.len, op.start);
        if (r < 0)
                return r;
        r = strextendf(out, " ");
        if (r < 0)
                return r;
        return add_value(out, &rhs);
}

static int parse_and(Parser *P, char **out, unsigned depth) {
        Token t;
        int r;

        r = parse_atom(P, out, depth);
        if (r < 0)
                return r;

        for (;;) {
                r = peek(P, &t);
                if (r < 0)
                        return r;
                if (t.type != TOKEN_AND)
                        return 0;
                (void) lex(P, &t);

                r = strextendf(out, " and ");
                if (r < 0)
                        return r;
                r = parse_atom(P, out, depth);
                if (r < 0)
                        return r;
        }
}

static int parse_or(Parser *P, char **out, unsigned depth) {
        Token t;
        int r;

        r = parse_and(P, out, depth);
        if (r < 0)
                return r;

        for (;;) {
                r = peek(P, &t);
                if (r < 0)
                        return r;
                if (t.type != TOKEN_OR)
                        return 0;
                (void) lex(P, &t);

                r = strextendf(out, " or ");
                if (r < 0)
                        return r;
                r = parse_and(P, out, depth);
                if (r < 0)
                        return r;
        }
}

static int parse_marker(Parser *P, char **out) {
        Token t;
        int r;

        r = peek(P, &t);
        if (r < 0)
                return r;
        if (t.type == TOKEN_END)
                return marker_error(P, "the marker after ';' is empty");

        r = parse_or(P, out, 0);
        if (r < 0)
                return r;

        r = lex(P, &t);
        if (r < 0)
                return r;
        if (t.type == TOKEN_RPAREN)
                return marker_error(P, "')' at %s has no matching '('", t.start);
        if (t.type != TOKEN_END)
                return marker_error(P, "expected 'and' or 'or' at %s", t.start);

        return 0;
}

/* ---- the specifier ---- */

static int cmp_strings(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

static void strv_free_n(char **v, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

/* "[a, b]" with p just after '['; appends "[a,b]" (normalized, sorted, unique) unless empty. */
static int parse_extras(Parser *P, char **out) {
        char **extras = NULL;
        size_t n = 0, allocated = 0;
        const char *p = skip_wsp(P->p);
        int r;

        if (*p != ']')
                for (;;) {
                        const char *e = p;

                        while (is_name_char(*e))
                                e++;
                        if (!name_is_valid(p, (size_t) (e - p))) {
                                if (e == p)
                                        r = error_setf(P->ret_error,
                                                      "'%s' is not a valid dependency: expected an extra name at '%s'",
                                                      P->spec, p);
                                else
                                        r = error_setf(P->ret_error,
                                                      "'%s' is not a valid dependency: '%.*s' is not a valid extra name",
                                                      P->spec, (int) (e - p), p);
                                goto finish;
                        }

                        if (n == allocated) {
                                char **t;

                                allocated = MAX((size_t) 4, allocated * 2);
                                t = realloc(extras, allocated * sizeof(char *));
                                if (!t) {
                                        r = -ENOMEM;
                                        goto finish;
                                }
                                extras = t;
                        }
                        r = normalize_name(p, (size_t) (e - p), &extras[n]);
                        if (r < 0)
                                goto finish;
                        n++;

                        p = skip_wsp(e);
                        if (*p == ']')
                                break;
                        if (*p != ',') {
                                r = error_setf(P->ret_error,
                                              "'%s' is not a valid dependency: expected ',' or ']' in the extras at '%s'",
                                              P->spec, *p ? p : "the end");
                                goto finish;
                        }
                        p = skip_wsp(p + 1);
                }

        P->p = p + 1;

        if (n > 0) {
                qsort(extras, n, sizeof(char *), cmp_strings);

                r = strextendf(out, "[");
                for (size_t i = 0; r >= 0 && i < n; i++) {
                        if (i > 0 && streq(extras[i], extras[i - 1]))
                                continue;
                        if (i > 0)
                                r = strextendf(out, ",");
                        if (r >= 0)
                                r = strextendf(out, "%s", extras[i]);
                }
                if (r >= 0)
                        r = strextendf(out, "]");
                if (r < 0)
                        goto finish;
        }
        r = 0;

finish:
        strv_free_n(extras, n);
        return r;
}

static int parse_versions(Parser *P, const char *start, size_t len, char **out) {
        _cleanup_(pep440_specifier_set_freep) Pep440SpecifierSet *set = NULL;
        _cleanup_free_ char *text = NULL, *error = NULL, *canonical = NULL;
        int r;

        text = strndup(start, len);
        if (!text)
                return -ENOMEM;

        r = pep440_specifier_set_parse(text, &set, &error);
        if (r == -EINVAL)
                return error_setf(P->ret_error, "'%s' is not a valid dependency: %s",
                                 P->spec, strempty(error));
        if (r < 0)
                return r;
        if (set->n == 0)
                return error_setf(P->ret_error, "'%s' is not a valid dependency: the version specifier is empty",
                                 P->spec);

        r = pep440_specifier_set_to_string(set, &canonical);
        if (r < 0)
                return r;

        return strextendf(out, "%s", canonical);
}

static void sanitize_for_message(const char *s, char buf[static ECHO_MAX + 4]) {
        size_t i;

        for (i = 0; s[i] && i < ECHO_MAX; i++)
                buf[i] = (unsigned char) s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
        strcpy(buf + i, s[i] ? "..." : "");
}

int pep508_parse(const char *spec, Requirement *ret, char **ret_error) {
        _cleanup_free_ char *out = NULL, *name = NULL;
        _cleanup_free_ char *trimmed = NULL;
        const char *p, *e;
        size_t len;
        Parser P = { .ret_error = ret_error };
        int r;

        if (!spec || !ret)
                return -EINVAL;

        len = strnlen(spec, PEP508_SPEC_MAX + 1);
        if (len > PEP508_SPEC_MAX)
                return error_setf(ret_error, "the dependency specifier '%.40s...' is longer than %d bytes",
                                 spec, PEP508_SPEC_MAX);

        for (p = spec; *p; p++) {
                unsigned char c = (unsigned char) *p;

                if ((c < 0x20 && c != '\t') || c == 0x7f) {
                        char buf[ECHO_MAX + 4];

                        sanitize_for_message(spec, buf);
                        return error_setf(ret_error, "the dependency specifier '%s' contains a control character",
                                         buf);
                }
                if (c >= 0x80)
                        return error_setf(ret_error, "the dependency specifier '%s' contains a non-ASCII character",
                                         spec);
        }

        p = skip_wsp(spec);
        e = spec + len;
        while (e > p && is_wsp(e[-1]))
                e--;
        if (p == e)
                return error_setf(ret_error, "a dependency specifier is empty");

        trimmed = strndup(p, (size_t) (e - p));
        if (!trimmed)
                return -ENOMEM;
        P.spec = trimmed;

        if (looks_like_location(trimmed))
                return direct_reference_error(ret_error, trimmed);

        /* The name. */
        p = trimmed;
        for (e = p; is_name_char(*e); e++)
                ;
        if (e == p)
                return error_setf(ret_error, "'%s' is not a valid dependency: it must start with a package name",
                                 trimmed);
        if (name_is_archive(p, (size_t) (e - p)))
                return direct_reference_error(ret_error, trimmed);
        if (!name_is_valid(p, (size_t) (e - p)))
                return error_setf(ret_error,
                                 "'%s' is not a valid dependency: the name '%.*s' must start and end with a letter or digit",
                                 trimmed, (int) (e - p), p);

        r = normalize_name(p, (size_t) (e - p), &name);
        if (r < 0)
                return r;
        r = strextendf(&out, "%s", name);
        if (r < 0)
                return r;

        p = skip_wsp(e);
        if (*p == '[') {
                P.p = p + 1;
                r = parse_extras(&P, &out);
                if (r < 0)
                        return r;
                p = skip_wsp(P.p);
        }

        if (*p == '@')
                return direct_reference_error(ret_error, trimmed);

        /* Version clauses, bare or in parentheses. */
        if (*p == '(') {
                e = strchr(p, ')');
                if (!e)
                        return error_setf(ret_error, "'%s' is not a valid dependency: the '(' has no matching ')'",
                                         trimmed);
                r = parse_versions(&P, p + 1, (size_t) (e - p - 1), &out);
                if (r < 0)
                        return r;
                p = skip_wsp(e + 1);
        } else if (*p && strchr("<>=!~", *p)) {
                e = p + strcspn(p, ";");
                r = parse_versions(&P, p, (size_t) (e - p), &out);
                if (r < 0)
                        return r;
                p = e;
        }

        if (*p == ';') {
                r = strextendf(&out, "; ");
                if (r < 0)
                        return r;
                P.p = p + 1;
                r = parse_marker(&P, &out);
                if (r < 0)
                        return r;
        } else if (*p)
                return error_setf(ret_error,
                                 "'%s' is not a valid dependency: unexpected '%s' after the name",
                                 trimmed, p);

        *ret = (Requirement) {
                .name = TAKE_PTR(name),
                .canonical = TAKE_PTR(out),
        };
        return 0;
}
