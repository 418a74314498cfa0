/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static int max_level = LOG_INFO;
static bool with_prefix = true;

static const char *const level_names[] = {
        [LOG_EMERG] = "emerg",     [LOG_ALERT] = "alert",   [LOG_CRIT] = "crit",
        [LOG_ERR] = "err",         [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info",       [LOG_DEBUG] = "debug",
};

int log_get_max_level(void) {
        return max_level;
}

void log_set_max_level(int level) {
        max_level = level;
}

void log_set_prefix(bool on) {
        with_prefix = on;
}

int log_level_from_string(const char *s) {
        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(level_names); i++)
                if (streq(s, level_names[i]))
                        return (int) i;
        if (streq(s, "error"))
                return LOG_ERR;
        if (streq(s, "warn"))
                return LOG_WARNING;
        if (s[0] >= '0' && s[0] <= '7' && s[1] == 0)
                return s[0] - '0';
        return -EINVAL;
}

const char *log_level_to_string(int level) {
        if (level < 0 || level >= (int) ELEMENTSOF(level_names))
                return NULL;
        return level_names[level];
}

int log_internal(int level, int error, const char *func, const char *format, ...) {
        int saved = errno;
        char buf[2048];
        va_list ap;

        if (error < 0)
                error = -error;

        if (level <= max_level) {
                /* %m in the format shows the error we were given, not a stale errno. */
                errno = error;
                va_start(ap, format);
                (void) vsnprintf(buf, sizeof(buf), format, ap);
                va_end(ap);
                if (with_prefix)
                        fprintf(stderr, "<%d>%s\n", level, buf);
                else
                        fprintf(stderr, "%s\n", buf);
        }

        errno = saved;
        return error > 0 ? -error : -EIO;
}
