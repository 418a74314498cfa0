/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Make text safe for JSON: invalid UTF-8 sequences (including a character
 * cut in half by truncation) become U+FFFD. Returns a malloc'd string and
 * its length; NUL bytes are kept (JSON escapes them).
 */
char *utf8_sanitize(const char *s, size_t n, size_t *ret_len);

/*
 * Text from someone we do not trust, made safe for one line of our log:
 * control characters (C0, DEL and C1, line breaks included), bytes that are
 * not UTF-8, and a backslash become \xNN escapes, and so does a leading '<',
 * which could pass for a syslog priority prefix. The rest is kept as it is.
 * Returns a malloc'd string (at most 4n + 1 bytes), NULL when out of memory.
 */
char *utf8_escape_line(const char *s, size_t n);

/* The strict UTF-8 sequence (or ASCII byte) at s: its length and *ret_cp, its code point; 0 when s holds none. */
size_t utf8_decode(const char *s, size_t n, uint32_t *ret_cp);

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. */
bool utf8_is_valid(const char *s, size_t n);
