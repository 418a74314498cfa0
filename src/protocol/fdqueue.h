/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * File descriptors that come over the stream socket with SCM_RIGHTS (the
 * shim's "files" extension, see mcp-python-sandbox(1)). The kernel hands a
 * batch of fds over with the first byte of the sendmsg() that carried them and
 * never merges bytes from before that point into the same read, so each batch
 * is filed under the stream offset of the first byte read with it. A line
 * takes the batch filed at the offset where it starts; a batch filed anywhere
 * else belongs to no line and is closed when the line after it is taken. At
 * most FDQUEUE_MAX_FDS wait at once: more is a protocol error.
 */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FDQUEUE_MAX_FDS 16
#define FDQUEUE_MAX_BATCHES 4

typedef struct FdBatch {
        uint64_t offset;
        int fds[FDQUEUE_MAX_FDS];
        size_t n;
} FdBatch;

typedef struct FdQueue {
        FdBatch batches[FDQUEUE_MAX_BATCHES];
        size_t n_batches;
        size_t n_fds;
} FdQueue;

/* File n fds (taken over, closed on failure) under offset. -EMFILE when too many would wait, -EINVAL when offset is
 * below that of a batch already waiting. */
int fdqueue_push(FdQueue *q, uint64_t offset, const int *fds, size_t n);
/* The fds filed at line_start move to ret_fds (room for FDQUEUE_MAX_FDS; the caller closes them); those filed
 * before it are closed. Returns how many moved. */
size_t fdqueue_take(FdQueue *q, uint64_t line_start, int *ret_fds);
/* Close every fd still waiting. */
void fdqueue_done(FdQueue *q);
size_t fdqueue_n_fds(const FdQueue *q);

/*
 * recvmsg() from a stream socket: up to size bytes into buf, and the fds that came with them (O_CLOEXEC) into
 * ret_fds (room for FDQUEUE_MAX_FDS), their number in *ret_n. Returns the bytes read (0: end of file) or -errno;
 * -EMFILE when more fds came than fit (all that came are closed).
 */
ssize_t fdqueue_recv(int fd, void *buf, size_t size, int *ret_fds, size_t *ret_n);
