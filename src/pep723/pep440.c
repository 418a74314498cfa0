/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "macro.h"
#include "strv.h"
#include "pep440.h"

/* Longest normalized version text: epoch, release, pre, post, dev, local, NUL. */
#define VERSION_STRING_MAX (21 + PEP440_RELEASE_MAX * 21 + 23 + 26 + 25 + PEP440_LOCAL_MAX + 1)


static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

static bool is_alnum(char c) {
        return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static char lower(char c) {
        return c >= 'A' && c <= 'Z' ? (char) (c - 'A' + 'a') : c;
}

static bool is_sep(char c) {
        return c == '-' || c == '_' || c == '.';
}

static bool is_space(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int parse_number(const char **p, uint64_t *ret) {
        const char *s = *p;
        uint64_t n = 0;

        if (!is_digit(*s))
                return -EINVAL;

        for (; is_digit(*s); s++) {
                unsigned d = (unsigned) (*s - '0');

                if (n > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                n = n * 10 + d;
        }

        *p = s;
        *ret = n;
        return 0;
}

/* Case-insensitive prefix match; returns the end of the match or NULL. */
static const char *match_word(const char *p, const char *word) {
        for (; *word; p++, word++)
                if (lower(*p) != *word)
                        return NULL;
        return p;
}

/* The optional "[-_.]?[0-9]+" after a pre/post/dev label; absent means 0. */
static int parse_optional_number(const char **p, uint64_t *ret) {
        const char *s = *p;
        int r;

        if (is_sep(*s) && is_digit(s[1]))
                s++;
        if (!is_digit(*s)) {
                *ret = 0;
                return 0;
        }

        r = parse_number(&s, ret);
        if (r < 0)
                return r;

        *p = s;
        return 0;
}

static int parse_local(const char **p, char local[static PEP440_LOCAL_MAX]) {
        const char *s = *p;
        size_t n = 0;

        for (;;) {
                const char *seg = s;
                bool numeric = true;

                while (is_alnum(*s)) {
                        if (!is_digit(*s))
                                numeric = false;
                        s++;
                }
                if (s == seg)
                        return -EINVAL;

                if (numeric) /* numeric segments compare as integers: drop leading zeros */
                        while (s - seg > 1 && *seg == '0')
                                seg++;

                if (n + (size_t) (s - seg) + 2 > PEP440_LOCAL_MAX)
                        return -EINVAL;
                if (n > 0)
                        local[n++] = '.';
                for (; seg < s; seg++)
                        local[n++] = lower(*seg);

                if (!is_sep(*s))
                        break;
                s++;
        }

        local[n] = 0;
        *p = s;
        return 0;
}

int pep440_version_parse(const char *s, Pep440Version *ret) {
        static const struct {
                const char *word;
                Pep440PreKind kind;
        } pre_labels[] = {
                /* Longer spellings first, so "alpha" is not read as "a" + "lpha". */
                { "alpha", PEP440_PRE_ALPHA },
                { "beta", PEP440_PRE_BETA },
                { "preview", PEP440_PRE_RC },
                { "pre", PEP440_PRE_RC },
                { "rc", PEP440_PRE_RC },
                { "a", PEP440_PRE_ALPHA },
                { "b", PEP440_PRE_BETA },
                { "c", PEP440_PRE_RC },
        };
        static const char *const post_labels[] = { "post", "rev", "r" };
        Pep440Version v = {};
        const char *p = s, *q, *e;
        uint64_t n;
        int r;

        if (!s || !ret)
                return -EINVAL;

        while (is_space(*p))
                p++;
        if (*p == 'v' || *p == 'V')
                p++;

        r = parse_number(&p, &n);
        if (r < 0)
                return -EINVAL;
        if (*p == '!') {
                v.epoch = n;
                p++;
                r = parse_number(&p, &n);
                if (r < 0)
                        return -EINVAL;
        }
        v.release[v.n_release++] = n;

        while (*p == '.' && is_digit(p[1])) {
                if (v.n_release >= PEP440_RELEASE_MAX)
                        return -EINVAL;
                p++;
                r = parse_number(&p, &v.release[v.n_release++]);
                if (r < 0)
                        return -EINVAL;
        }

        /* Pre-release: [-_.]?(a|b|rc|alpha|beta|c|pre|preview)[-_.]?N? */
        q = is_sep(*p) ? p + 1 : p;
        for (size_t i = 0; i < ELEMENTSOF(pre_labels); i++) {
                e = match_word(q, pre_labels[i].word);
                if (!e)
                        continue;
                p = e;
                v.pre_kind = pre_labels[i].kind;
                r = parse_optional_number(&p, &v.pre);
                if (r < 0)
                        return -EINVAL;
                break;
        }

        /* Post-release: -N, or [-_.]?(post|rev|r)[-_.]?N? */
        if (*p == '-' && is_digit(p[1])) {
                p++;
                r = parse_number(&p, &v.post);
                if (r < 0)
                        return -EINVAL;
                v.has_post = true;
        } else {
                q = is_sep(*p) ? p + 1 : p;
                for (size_t i = 0; i < ELEMENTSOF(post_labels); i++) {
                        e = match_word(q, post_labels[i]);
                        if (!e)
                                continue;
                        p = e;
                        v.has_post = true;
                        r = parse_optional_number(&p, &v.post);
                        if (r < 0)
                                return -EINVAL;
                        break;
                }
        }

        /* Development release: [-_.]?dev[-_.]?N? */
        q = is_sep(*p) ? p + 1 : p;
        e = match_word(q, "dev");
        if (e) {
                p = e;
                v.has_dev = true;
                r = parse_optional_number(&p, &v.dev);
                if (r < 0)
                        return -EINVAL;
        }

        if (*p == '+') {
                p++;
                r = parse_local(&p, v.local);
                if (r < 0)
                        return -EINVAL;
        }

        while (is_space(*p))
                p++;
        if (*p)
                return -EINVAL;

        *ret = v;
        return 0;
}

static int cmp_u64(uint64_t a, uint64_t b) {
        return a < b ? -1 : a > b ? 1 : 0;
}

/* Epoch and release, the shorter release padded with zeros. */
static int compare_base(const Pep440Version *a, const Pep440Version *b) {
        int c;

        c = cmp_u64(a->epoch, b->epoch);
        if (c != 0)
                return c;

        for (size_t i = 0; i < MAX(a->n_release, b->n_release); i++) {
                c = cmp_u64(i < a->n_release ? a->release[i] : 0,
                            i < b->n_release ? b->release[i] : 0);
                if (c != 0)
                        return c;
        }

        return 0;
}

/* Rank of the pre-release part: a dev release of a final (1.0.dev1) sorts before
 * its pre-releases, and a release without pre-release after them. */
static int pre_rank(const Pep440Version *v) {
        if (v->pre_kind == PEP440_PRE_NONE)
                return !v->has_post && v->has_dev ? 0 : 4;
        return (int) v->pre_kind; /* 1..3 */
}

static bool segment_is_numeric(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!is_digit(s[i]))
                        return false;
        return true;
}

/* Local labels: segment by segment, numbers numerically and above words. */
static int compare_local(const char *a, const char *b) {
        if (!*a || !*b)
                return *a ? 1 : *b ? -1 : 0; /* no label sorts first */

        for (;;) {
                size_t na = strcspn(a, "."), nb = strcspn(b, ".");
                bool da = segment_is_numeric(a, na), db = segment_is_numeric(b, nb);
                int c;

                if (da != db)
                        return da ? 1 : -1;
                if (da) /* normalized: no leading zeros, so longer is larger */
                        c = na != nb ? (na < nb ? -1 : 1) : memcmp(a, b, na);
                else {
                        c = memcmp(a, b, MIN(na, nb));
                        if (c == 0)
                                c = na < nb ? -1 : na > nb ? 1 : 0;
                }
                if (c != 0)
                        return c < 0 ? -1 : 1;

                a += na;
                b += nb;
                if (!*a || !*b)
                        return *a ? 1 : *b ? -1 : 0;
                a++;
                b++;
        }
}

int pep440_version_compare(const Pep440Version *a, const Pep440Version *b) {
        int c;

        c = compare_base(a, b);
        if (c != 0)
                return c;

        c = pre_rank(a) - pre_rank(b);
        if (c != 0)
                return c < 0 ? -1 : 1;
        if (a->pre_kind != PEP440_PRE_NONE) {
                c = cmp_u64(a->pre, b->pre);
                if (c != 0)
                        return c;
        }

        if (a->has_post != b->has_post)
                return a->has_post ? 1 : -1;
        if (a->has_post) {
                c = cmp_u64(a->post, b->post);
                if (c != 0)
                        return c;
        }

        if (a->has_dev != b->has_dev)
                return a->has_dev ? -1 : 1;
        if (a->has_dev) {
                c = cmp_u64(a->dev, b->dev);
                if (c != 0)
                        return c;
        }

        return compare_local(a->local, b->local);
}

bool pep440_version_is_prerelease(const Pep440Version *v) {
        return v->pre_kind != PEP440_PRE_NONE || v->has_dev;
}

static void version_format(const Pep440Version *v, char buf[static VERSION_STRING_MAX]) {
        static const char *const pre_names[] = {
                [PEP440_PRE_ALPHA] = "a",
                [PEP440_PRE_BETA] = "b",
                [PEP440_PRE_RC] = "rc",
        };
        size_t n = 0;

#define APPEND(...) n += (size_t) snprintf(buf + n, VERSION_STRING_MAX - n, __VA_ARGS__)
        if (v->epoch > 0)
                APPEND("%" PRIu64 "!", v->epoch);
        for (size_t i = 0; i < v->n_release; i++)
                APPEND(i > 0 ? ".%" PRIu64 : "%" PRIu64, v->release[i]);
        if (v->pre_kind != PEP440_PRE_NONE)
                APPEND("%s%" PRIu64, pre_names[v->pre_kind], v->pre);
        if (v->has_post)
                APPEND(".post%" PRIu64, v->post);
        if (v->has_dev)
                APPEND(".dev%" PRIu64, v->dev);
        if (v->local[0])
                APPEND("+%s", v->local);
#undef APPEND
}

int pep440_version_to_string(const Pep440Version *v, char **ret) {
        char buf[VERSION_STRING_MAX];
        char *s;

        version_format(v, buf);
        s = strdup(buf);
        if (!s)
                return -ENOMEM;

        *ret = s;
        return 0;
}

static const struct {
        const char *text;
        Pep440Operator op;
} operators[] = {
        /* "===" before "==", two-character operators before "<" and ">". */
        { "===", PEP440_OP_ARBITRARY },
        { "~=", PEP440_OP_COMPATIBLE },
        { "==", PEP440_OP_EQUAL },
        { "!=", PEP440_OP_NOT_EQUAL },
        { "<=", PEP440_OP_LESS_EQUAL },
        { ">=", PEP440_OP_GREATER_EQUAL },
        { "<", PEP440_OP_LESS },
        { ">", PEP440_OP_GREATER },
};

static const char *operator_text(Pep440Operator op) {
        for (size_t i = 0; i < ELEMENTSOF(operators); i++)
                if (operators[i].op == op)
                        return operators[i].text;
        return "?";
}

static void specifier_done(Pep440Specifier *s) {
        free(s->arbitrary);
        s->arbitrary = NULL;
}

/* One clause, already trimmed and non-empty. */
static int specifier_parse(const char *clause, Pep440Specifier *ret, char **ret_error) {
        Pep440Specifier s = {};
        const char *p = NULL, *version;
        _cleanup_free_ char *text = NULL;
        size_t n;
        int r;

        for (size_t i = 0; i < ELEMENTSOF(operators); i++) {
                p = startswith(clause, operators[i].text);
                if (p) {
                        s.op = operators[i].op;
                        break;
                }
        }
        if (!p)
                return error_setf(ret_error,
                                 "'%s' is not a valid version specifier: it must start with one of ~= == != <= >= < > ===",
                                 clause);

        while (*p == ' ' || *p == '\t')
                p++;
        version = p;
        if (!*version)
                return error_setf(ret_error,
                                 "'%s' is not a valid version specifier: the version after '%s' is missing",
                                 clause, operator_text(s.op));

        for (p = version; *p; p++)
                if (*p == ' ' || *p == '\t')
                        return error_setf(ret_error,
                                         "'%s' is not a valid version specifier: '%s' is not a valid version",
                                         clause, version);

        if (s.op == PEP440_OP_ARBITRARY) {
                /* Arbitrary equality compares text; allow only characters a version could have. */
                for (p = version; *p; p++)
                        if (!is_alnum(*p) && !strchr("-_.*+!", *p))
                                return error_setf(ret_error,
                                                 "'%s' is not a valid version specifier: '%c' is not allowed in a version",
                                                 clause, *p);
                s.arbitrary = strdup(version);
                if (!s.arbitrary)
                        return -ENOMEM;
                *ret = s;
                return 0;
        }

        n = strlen(version);
        if (n >= 2 && streq(version + n - 2, ".*")) {
                if (s.op != PEP440_OP_EQUAL && s.op != PEP440_OP_NOT_EQUAL)
                        return error_setf(ret_error,
                                         "'%s' is not a valid version specifier: '.*' is only allowed after == and !=",
                                         clause);
                s.wildcard = true;
                n -= 2;
        }

        text = strndup(version, n);
        if (!text)
                return -ENOMEM;

        r = pep440_version_parse(text, &s.version);
        if (r < 0)
                return error_setf(ret_error,
                                 "'%s' is not a valid version specifier: '%s' is not a valid version",
                                 clause, version);

        if (s.wildcard && (s.version.pre_kind != PEP440_PRE_NONE || s.version.has_post ||
                           s.version.has_dev || s.version.local[0]))
                return error_setf(ret_error,
                                 "'%s' is not a valid version specifier: '.*' may only follow release numbers, as in ==3.12.*",
                                 clause);

        if (s.version.local[0] && s.op != PEP440_OP_EQUAL && s.op != PEP440_OP_NOT_EQUAL)
                return error_setf(ret_error,
                                 "'%s' is not a valid version specifier: a local version label (+...) is only allowed after == and !=",
                                 clause);

        if (s.op == PEP440_OP_COMPATIBLE && s.version.n_release < 2)
                return error_setf(ret_error,
                                 "'%s' is not a valid version specifier: '~=' needs a version with at least two parts, as in ~=3.11",
                                 clause);

        *ret = s;
        return 0;
}

Pep440SpecifierSet *pep440_specifier_set_free(Pep440SpecifierSet *s) {
        if (!s)
                return NULL;

        for (size_t i = 0; i < s->n; i++)
                specifier_done(&s->items[i]);
        free(s->items);
        free(s);
        return NULL;
}

static bool is_blank(char c) {
        return c == ' ' || c == '\t';
}

int pep440_specifier_set_parse(const char *s, Pep440SpecifierSet **ret, char **ret_error) {
        _cleanup_(pep440_specifier_set_freep) Pep440SpecifierSet *set = NULL;
        size_t len, n_clauses = 1;
        const char *p;
        int r;

        if (!s || !ret)
                return -EINVAL;

        len = strlen(s);
        if (len > PEP440_SPECIFIER_SET_MAX)
                return error_setf(ret_error,
                                 "the version specifier '%.40s...' is longer than %d bytes",
                                 s, PEP440_SPECIFIER_SET_MAX);
        for (p = s; *p; p++)
                if ((unsigned char) *p < 0x20 ? *p != '\t' : *p == 0x7f)
                        return error_setf(ret_error,
                                         "the version specifier contains a control character");
                else if (*p == ',')
                        n_clauses++;

        set = calloc(1, sizeof(*set));
        if (!set)
                return -ENOMEM;

        p = s;
        while (is_blank(*p))
                p++;
        if (!*p) {
                *ret = TAKE_PTR(set);
                return 0;
        }

        set->items = calloc(n_clauses, sizeof(*set->items));
        if (!set->items)
                return -ENOMEM;

        p = s;
        for (;;) {
                const char *end = p + strcspn(p, ",");
                const char *a = p, *b = end;
                _cleanup_free_ char *clause = NULL;

                while (a < b && is_blank(*a))
                        a++;
                while (b > a && is_blank(b[-1]))
                        b--;
                if (a == b)
                        return error_setf(ret_error,
                                         "'%s' is not a valid version specifier: it has an empty clause between commas",
                                         s);

                clause = strndup(a, (size_t) (b - a));
                if (!clause)
                        return -ENOMEM;

                r = specifier_parse(clause, &set->items[set->n], ret_error);
                if (r < 0)
                        return r;
                set->n++;

                if (!*end)
                        break;
                p = end + 1;
        }

        *ret = TAKE_PTR(set);
        return 0;
}

static Pep440Version public_version(const Pep440Version *v) {
        Pep440Version p = *v;

        p.local[0] = 0;
        return p;
}

/* ==X.*: same epoch and the candidate's release, zero-padded, starts with X's release. */
static bool prefix_match(const Pep440Version *prefix, const Pep440Version *v) {
        if (prefix->epoch != v->epoch)
                return false;

        for (size_t i = 0; i < prefix->n_release; i++)
                if ((i < v->n_release ? v->release[i] : 0) != prefix->release[i])
                        return false;

        return true;
}

static bool specifier_contains(const Pep440Specifier *s, const Pep440Version *v) {
        const Pep440Version *sv = &s->version;
        Pep440Version pub = public_version(v);

        switch (s->op) {

        case PEP440_OP_EQUAL:
        case PEP440_OP_NOT_EQUAL: {
                bool eq;

                if (s->wildcard)
                        eq = prefix_match(sv, v);
                else if (sv->local[0])
                        eq = pep440_version_compare(v, sv) == 0;
                else
                        eq = pep440_version_compare(&pub, sv) == 0;

                return s->op == PEP440_OP_EQUAL ? eq : !eq;
        }

        case PEP440_OP_COMPATIBLE: {
                Pep440Version prefix = *sv;

                /* ~=X.Y.Z means >=X.Y.Z and ==X.Y.* */
                prefix.n_release--;
                return pep440_version_compare(&pub, sv) >= 0 && prefix_match(&prefix, v);
        }

        case PEP440_OP_LESS_EQUAL:
                return pep440_version_compare(&pub, sv) <= 0;

        case PEP440_OP_GREATER_EQUAL:
                return pep440_version_compare(&pub, sv) >= 0;

        case PEP440_OP_LESS:
                if (pep440_version_compare(v, sv) >= 0)
                        return false;
                /* <3.13 does not admit 3.13.0rc1. */
                if (!pep440_version_is_prerelease(sv) && pep440_version_is_prerelease(v) &&
                    compare_base(v, sv) == 0)
                        return false;
                return true;

        case PEP440_OP_GREATER:
                if (pep440_version_compare(v, sv) <= 0)
                        return false;
                /* >3.12 admits neither 3.12.post1 nor 3.12+local. */
                if (compare_base(v, sv) == 0 &&
                    ((!sv->has_post && v->has_post) || v->local[0]))
                        return false;
                return true;

        case PEP440_OP_ARBITRARY: {
                char buf[VERSION_STRING_MAX];

                version_format(v, buf);
                return strcasecmp(buf, s->arbitrary) == 0;
        }
        }

        return false;
}

bool pep440_specifier_set_contains(const Pep440SpecifierSet *set, const Pep440Version *v) {
        if (!set)
                return true;

        for (size_t i = 0; i < set->n; i++)
                if (!specifier_contains(&set->items[i], v))
                        return false;

        return true;
}

static int cmp_strings(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

int pep440_specifier_set_to_string(const Pep440SpecifierSet *set, char **ret) {
        char **clauses = NULL;
        size_t n = 0, total = 1, k = 0;
        char *s = NULL;
        int r = -ENOMEM;

        if (!set || set->n == 0) {
                s = strdup("");
                if (!s)
                        return -ENOMEM;
                *ret = s;
                return 0;
        }

        clauses = calloc(set->n, sizeof(char *));
        if (!clauses)
                return -ENOMEM;

        for (; n < set->n; n++) {
                const Pep440Specifier *sp = &set->items[n];
                char buf[VERSION_STRING_MAX];
                const char *version = sp->arbitrary;
                size_t l;

                if (!version) {
                        version_format(&sp->version, buf);
                        version = buf;
                }

                l = strlen(operator_text(sp->op)) + strlen(version) + 3;
                clauses[n] = malloc(l);
                if (!clauses[n])
                        goto finish;
                (void) snprintf(clauses[n], l, "%s%s%s", operator_text(sp->op), version,
                                sp->wildcard ? ".*" : "");
                total += strlen(clauses[n]) + 1;
        }

        qsort(clauses, n, sizeof(char *), cmp_strings);

        s = malloc(total);
        if (!s)
                goto finish;
        for (size_t i = 0; i < n; i++) {
                if (i > 0 && streq(clauses[i], clauses[i - 1]))
                        continue;
                if (k > 0)
                        s[k++] = ',';
                strcpy(s + k, clauses[i]);
                k += strlen(clauses[i]);
        }
        s[k] = 0;

        *ret = TAKE_PTR(s);
        r = 0;

finish:
        for (size_t i = 0; i < n; i++)
                free(clauses[i]);
        free(clauses);
        return r;
}
