/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Why the cgroups cannot be used, for people (sandbox_limits_mechanism_detail()): the cgroup files of the sandbox
 * module (cgroup.c, cgroup-mode.c) return an error and put the sentence that explains it in *ret_reason.
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "macro.h"

/* r, with *ret_reason (when ret_reason is not NULL) replaced by the formatted sentence (NULL without memory). */
static inline int reason(char **ret_reason, int r, const char *format, ...) _printf_(3, 4);
static inline int reason(char **ret_reason, int r, const char *format, ...) {
        va_list ap;

        if (ret_reason) {
                free(*ret_reason);
                va_start(ap, format);
                if (vasprintf(ret_reason, format, ap) < 0)
                        *ret_reason = NULL;
                va_end(ap);
        }
        return r;
}
