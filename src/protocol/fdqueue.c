/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdqueue.h"
#include "macro.h"

static void close_all(const int *fds, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0)
                        (void) close(fds[i]);
}

int fdqueue_push(FdQueue *q, uint64_t offset, const int *fds, size_t n) {
        if (n == 0)
                return 0;
        if (q->n_batches > 0 && offset < q->batches[q->n_batches - 1].offset) {
                close_all(fds, n);
                return -EINVAL;
        }
        if (q->n_batches >= FDQUEUE_MAX_BATCHES || n > FDQUEUE_MAX_FDS - q->n_fds) {
                close_all(fds, n);
                return -EMFILE;
        }
        FdBatch *b = &q->batches[q->n_batches++];
        b->offset = offset;
        memcpy(b->fds, fds, n * sizeof(int));
        b->n = n;
        q->n_fds += n;
        return 0;
}

size_t fdqueue_take(FdQueue *q, uint64_t line_start, uint64_t line_end, int *ret_fds) {
        size_t i = 0, got = 0;

        /* At most FDQUEUE_MAX_FDS wait in all: they fit. */
        for (; i < q->n_batches && q->batches[i].offset < line_end; i++) {
                FdBatch *b = &q->batches[i];
                if (b->offset >= line_start) {
                        memcpy(ret_fds + got, b->fds, b->n * sizeof(int));
                        got += b->n;
                } else
                        close_all(b->fds, b->n);
                q->n_fds -= b->n;
        }
        memmove(q->batches, q->batches + i, (q->n_batches - i) * sizeof(FdBatch));
        q->n_batches -= i;
        return got;
}

void fdqueue_done(FdQueue *q) {
        for (size_t i = 0; i < q->n_batches; i++)
                close_all(q->batches[i].fds, q->batches[i].n);
        *q = (FdQueue) {};
}

size_t fdqueue_n_fds(const FdQueue *q) {
        return q->n_fds;
}

ssize_t fdqueue_recv(int fd, void *buf, size_t size, int *ret_fds, size_t *ret_n) {
        /* Room for more than we keep, so that a sender of too many is told, not silently cut short. */
        union {
                struct cmsghdr h;
                char space[CMSG_SPACE(sizeof(int) * FDQUEUE_MAX_FDS * 2)];
        } control;
        struct iovec iov = { .iov_base = buf, .iov_len = size };
        struct msghdr mh = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = &control,
                .msg_controllen = sizeof(control),
        };
        size_t n = 0;
        bool too_many = false;
        ssize_t k;

        *ret_n = 0;
        k = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (k < 0)
                return -errno;

        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t m = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                const unsigned char *data = CMSG_DATA(c);
                for (size_t i = 0; i < m; i++) {
                        int x;
                        memcpy(&x, data + i * sizeof(int), sizeof(int));
                        if (n < FDQUEUE_MAX_FDS)
                                ret_fds[n++] = x;
                        else {
                                (void) close(x);
                                too_many = true;
                        }
                }
        }
        if (too_many || (mh.msg_flags & MSG_CTRUNC)) {
                close_all(ret_fds, n);
                return -EMFILE;
        }
        *ret_n = n;
        return k;
}
