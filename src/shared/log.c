/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

static int max_level = LOG_INFO;
/* Where log lines go: stderr itself, or, when stderr is a pipe, a non-blocking descriptor of our own for it. */
static int log_fd = -EBADF;
static bool log_fd_opened;
/* Log lines dropped because stderr (a pipe) was full, since the last one that got through. */
static uint64_t n_dropped;

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

/*
 * A --stdio daemon's stderr is often a pipe that nobody reads (MCP clients start servers with stderr piped
 * and ignore it). A blocking write there stops the event loop, and with it every call, once the pipe is full.
 * So when stderr is a pipe, log lines go through a second open file description of that pipe, opened
 * O_NONBLOCK (fd 2 itself, shared with whoever gave it to us, keeps its flags), and a line that does not fit
 * is dropped and counted. Lines up to PIPE_BUF bytes are written whole or not at all.
 */
static int log_target(void) {
        struct stat st;
        char path[64];
        int fd;

        if (log_fd_opened)
                return log_fd;
        log_fd_opened = true;
        log_fd = STDERR_FILENO;
        if (fstat(STDERR_FILENO, &st) < 0 || !S_ISFIFO(st.st_mode))
                return log_fd;
        snprintf(path, sizeof(path), "/proc/self/fd/%d", STDERR_FILENO);
        fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        if (fd >= 0)
                log_fd = fd;
        return log_fd;
}

static int write_all_blocking(int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t k = write(fd, p, n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return -errno;
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

void log_write_line(const char *line, size_t n) {
        int fd = log_target();
        ssize_t k;

        if (n == 0)
                return;
        if (fd != STDERR_FILENO && n > PIPE_BUF) {
                /* Longer ones could be cut anywhere by a full pipe: the first PIPE_BUF bytes, whole. */
                char cut[PIPE_BUF];
                memcpy(cut, line, PIPE_BUF - 1);
                cut[PIPE_BUF - 1] = '\n';
                log_write_line(cut, PIPE_BUF);
                return;
        }
        if (fd == STDERR_FILENO) {
                /* Not a pipe (a file, the journal's stream, a terminal): as it always was. */
                (void) write_all_blocking(fd, line, n);
                return;
        }

        if (n_dropped > 0 && fd != STDERR_FILENO) {
                char note[128];
                int m = snprintf(note, sizeof(note), "<4>%" PRIu64 " log messages were dropped: stderr was full.\n",
                                 n_dropped);
                do
                        k = write(fd, note, (size_t) m);
                while (k < 0 && errno == EINTR);
                if (k < 0) {
                        n_dropped++;
                        return;
                }
                n_dropped = 0;
        }
        do
                k = write(fd, line, n);
        while (k < 0 && errno == EINTR);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                n_dropped++;
}

int log_internal(int level, int error, const char *func, const char *format, ...) {
        int saved = errno;
        char buf[2048], line[PIPE_BUF];
        va_list ap;
        int n;

        if (error < 0)
                error = -error;

        if (level <= max_level) {
                /* %m in the format shows the error we were given, not a stale errno. */
                errno = error;
                va_start(ap, format);
                (void) vsnprintf(buf, sizeof(buf), format, ap);
                va_end(ap);
                n = snprintf(line, sizeof(line), "<%d>%s\n", level, buf);
                if (n >= (int) sizeof(line)) {
                        n = (int) sizeof(line) - 1;
                        line[n - 1] = '\n';
                }
                if (n > 0)
                        log_write_line(line, (size_t) n);
        }

        errno = saved;
        return error > 0 ? -error : -EIO;
}
