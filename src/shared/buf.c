/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "buf.h"
#include "macro.h"

void buf_clear(Buf *b) {
        free(b->data);
        *b = BUF_INIT;
}

int buf_reserve(Buf *b, size_t n, char **ret) {
        if (b->start == b->end)
                b->start = b->end = 0;

        if (b->allocated - b->end < n) {
                /* Compact first; grow only if that is not enough. */
                if (b->start > 0) {
                        memmove(b->data, b->data + b->start, b->end - b->start);
                        b->end -= b->start;
                        b->start = 0;
                }
                if (b->allocated - b->end < n) {
                        size_t want = b->end + n;
                        if (want < b->end)
                                return -ENOMEM;
                        size_t a = MAX(b->allocated * 2, (size_t) 4096);
                        while (a < want) {
                                if (a > SIZE_MAX / 2)
                                        return -ENOMEM;
                                a *= 2;
                        }
                        char *d = realloc(b->data, a);
                        if (!d)
                                return -ENOMEM;
                        b->data = d;
                        b->allocated = a;
                }
        }
        *ret = b->data + b->end;
        return 0;
}

void buf_commit(Buf *b, size_t n) {
        b->end += n;
}

int buf_append(Buf *b, const void *p, size_t n) {
        char *dst;
        int r;

        if (n == 0)
                return 0;
        r = buf_reserve(b, n, &dst);
        if (r < 0)
                return r;
        memcpy(dst, p, n);
        buf_commit(b, n);
        return 0;
}

void buf_consume(Buf *b, size_t n) {
        /* Never moves or frees memory: a pointer into consumed bytes stays
         * valid until the next buf_reserve(). */
        b->start += MIN(n, buf_size(b));
}

/* Give memory back once empty, after a burst. */
static void buf_trim(Buf *b) {
        if (buf_size(b) == 0 && b->allocated > 256 * 1024) {
                free(b->data);
                *b = BUF_INIT;
        }
}

ssize_t buf_flush_fd(Buf *b, int fd) {
        size_t total = 0;

        while (buf_size(b) > 0) {
                ssize_t n = send(fd, buf_data(b), buf_size(b), MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == ENOTSOCK)
                        n = write(fd, buf_data(b), buf_size(b));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        return -errno;
                }
                buf_consume(b, (size_t) n);
                total += (size_t) n;
        }
        buf_trim(b);
        return (ssize_t) total;
}
