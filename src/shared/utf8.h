/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/*
 * Make text safe for JSON: invalid UTF-8 sequences (including a character
 * cut in half by truncation) become U+FFFD. Returns a malloc'd string and
 * its length; NUL bytes are kept (JSON escapes them).
 */
char *utf8_sanitize(const char *s, size_t n, size_t *ret_len);

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. */
bool utf8_is_valid(const char *s, size_t n);
