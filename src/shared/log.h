/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Logging for top-level code: one line per event on stderr, prefixed with the
 * sd-daemon priority (<3>, <6>, ...) that journald turns into a priority.
 * Library-like modules return -errno and leave the logging to their caller.
 */

#include <stdbool.h>
#include <stdint.h>
#include <syslog.h>

#include "macro.h"

int log_get_max_level(void);
void log_set_max_level(int level);
/* Parse "debug", "info", ... or a number 0..7; returns the level or -EINVAL. */
int log_level_from_string(const char *s);
const char *log_level_to_string(int level);

/* One whole line (ending in a newline) where log lines go: never blocks when that is a pipe (see log.c). */
void log_write_line(const char *line, size_t n);
int log_internal(int level, int error, const char *func, const char *format, ...) _printf_(4, 5);

/* Each returns -abs(error) so callers can "return log_error_errno(r, ...)". */
#define log_full_errno(level, error, ...) \
        log_internal((level), (error), __func__, __VA_ARGS__)
#define log_full(level, ...) (void) log_internal((level), 0, __func__, __VA_ARGS__)

#define log_debug(...)   log_full(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)    log_full(LOG_INFO, __VA_ARGS__)
#define log_notice(...)  log_full(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_error(...)   log_full(LOG_ERR, __VA_ARGS__)

#define log_debug_errno(e, ...)   log_full_errno(LOG_DEBUG, e, __VA_ARGS__)
#define log_info_errno(e, ...)    log_full_errno(LOG_INFO, e, __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, e, __VA_ARGS__)
#define log_error_errno(e, ...)   log_full_errno(LOG_ERR, e, __VA_ARGS__)

#define log_oom() log_full_errno(LOG_ERR, ENOMEM, "Out of memory.")
