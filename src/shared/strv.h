/* SPDX-License-Identifier: MIT */
#pragma once

/* NULL-terminated string arrays. */

#include <stdbool.h>
#include <stddef.h>

char **strv_new(void);
char **strv_free(char **l);
static inline void strv_freep(char ***l) {
        strv_free(*l);
}
#define _cleanup_strv_free_ __attribute__((cleanup(strv_freep)))
size_t strv_length(char *const *l);
/* Split at any of the separator characters; empty fields are dropped. */
char **strv_split(const char *s, const char *separators);
int strv_extend(char ***l, const char *value);
int strv_extend_strv(char ***l, char *const *other);
int strv_extendf(char ***l, const char *format, ...) __attribute__((format(printf, 2, 3)));
bool strv_contains(char *const *l, const char *s);
/* Join with a separator; malloc'd. */
char *strv_join(char *const *l, const char *separator);

/* Append formatted text to a malloc'd string (NULL to start one); *len tracks its length. */
int strextendf_len(char **s, size_t *len, const char *format, ...) __attribute__((format(printf, 3, 4)));
#define strextendf(s, ...) strextendf_len((s), NULL, __VA_ARGS__)

/* For "char **ret_error" APIs: store a formatted message (if ret_error is not NULL), return -EINVAL
 * (-ENOMEM when the message could not be made). */
int error_setf(char **ret_error, const char *format, ...) __attribute__((format(printf, 2, 3)));
