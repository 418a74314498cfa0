/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "strv.h"

char **strv_new(void) {
        return calloc(1, sizeof(char *));
}

char **strv_free(char **l) {
        for (size_t i = 0; l && l[i]; i++)
                free(l[i]);
        free(l);
        return NULL;
}

size_t strv_length(char *const *l) {
        size_t n = 0;
        while (l && l[n])
                n++;
        return n;
}

static int strv_push(char ***l, char *value) {
        size_t n = strv_length(*l);
        char **nl = realloc(*l, (n + 2) * sizeof(char *));
        if (!nl)
                return -ENOMEM;
        nl[n] = value;
        nl[n + 1] = NULL;
        *l = nl;
        return 0;
}

int strv_extend(char ***l, const char *value) {
        char *v = strdup(value);
        if (!v || strv_push(l, v) < 0) {
                free(v);
                return -ENOMEM;
        }
        return 0;
}

int strv_extendf(char ***l, const char *format, ...) {
        char *v;
        va_list ap;
        int r;

        va_start(ap, format);
        r = vasprintf(&v, format, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        if (strv_push(l, v) < 0) {
                free(v);
                return -ENOMEM;
        }
        return 0;
}

int strv_extend_strv(char ***l, char *const *other) {
        for (size_t i = 0; other && other[i]; i++)
                if (strv_extend(l, other[i]) < 0)
                        return -ENOMEM;
        return 0;
}

char **strv_split(const char *s, const char *separators) {
        char **l = strv_new();

        if (!l)
                return NULL;
        while (s && *s) {
                size_t skip = strspn(s, separators), len;
                s += skip;
                if (!*s)
                        break;
                len = strcspn(s, separators);
                char *v = strndup(s, len);
                if (!v || strv_push(&l, v) < 0) {
                        free(v);
                        return strv_free(l);
                }
                s += len;
        }
        return l;
}

bool strv_contains(char *const *l, const char *s) {
        for (size_t i = 0; l && l[i]; i++)
                if (streq(l[i], s))
                        return true;
        return false;
}

char *strv_join(char *const *l, const char *separator) {
        size_t n = 0, sl = strlen(separator);
        char *r, *p;

        for (size_t i = 0; l && l[i]; i++)
                n += strlen(l[i]) + sl;
        r = p = malloc(n + 1);
        if (!r)
                return NULL;
        for (size_t i = 0; l && l[i]; i++) {
                if (i > 0)
                        p = stpcpy(p, separator);
                p = stpcpy(p, l[i]);
        }
        *p = 0;
        return r;
}

int strextendf_len(char **s, size_t *len, const char *format, ...) {
        size_t have = len ? *len : (*s ? strlen(*s) : 0);
        char *add = NULL, *n;
        va_list ap;
        int k;

        va_start(ap, format);
        k = vasprintf(&add, format, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        n = realloc(*s, have + (size_t) k + 1);
        if (!n) {
                free(add);
                return -ENOMEM;
        }
        memcpy(n + have, add, (size_t) k + 1);
        free(add);
        *s = n;
        if (len)
                *len = have + (size_t) k;
        return 0;
}

int error_setf(char **ret_error, const char *format, ...) {
        va_list ap;
        int k;

        if (!ret_error)
                return -EINVAL;
        va_start(ap, format);
        k = vasprintf(ret_error, format, ap);
        va_end(ap);
        if (k < 0) {
                *ret_error = NULL;
                return -ENOMEM;
        }
        return -EINVAL;
}
