/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs-util.h"
#include "macro.h"
#include "nss-child.h"

/* The child's result follows what it wrote: a NUL, then the result in decimal. Not its exit status, which a tool
 * such as valgrind may replace with its own. */
int nss_child_run(NssChildFunc f, void *userdata, char **ret) {
        _cleanup_free_ char *out = NULL;
        int p[2], status, r;
        size_t n = 0;
        pid_t pid;

        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        pid = fork();
        if (pid < 0) {
                r = -errno;
                close(p[0]);
                close(p[1]);
                return r;
        }
        if (pid == 0) {
                char tail[32];
                (void) close_all_fds_except(&p[1], 1);
                r = f(p[1], userdata);
                snprintf(tail, sizeof(tail), "%c%d", 0, r);
                _exit(write_all(p[1], tail, 1 + strlen(tail + 1)) < 0 ? 1 : 0);
        }
        close(p[1]);
        r = read_full_fd(p[0], NSS_CHILD_MAX + 32, &out, &n);
        close(p[0]);
        /* All it wrote is read (or more than we take, and it would wait on the pipe for ever). */
        (void) kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (r < 0)
                return r;
        /* The last NUL in what came: the result after it. */
        char *nul = n > 0 ? memrchr(out, 0, n) : NULL;
        char *end;
        long v;
        if (!nul || nul == out + n - 1)
                return -EIO;   /* it died (or wrote too much) before it said how it went */
        errno = 0;
        v = strtol(nul + 1, &end, 10);
        if (errno != 0 || *end || v < INT32_MIN || v > INT32_MAX)
                return -EIO;
        if (ret) {
                *nul = 0;
                *ret = TAKE_PTR(out);
        }
        return (int) v;
}
