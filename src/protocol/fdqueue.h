/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * File descriptors that come over the stream socket with SCM_RIGHTS (the
 * shim's "files" extension, see mcp-python-sandbox(1)). A read may join the
 * bytes of earlier sends to those of the send that carried fds, but it ends
 * within that send (Linux stops a read after the bytes that came with fds), so
 * the last byte of the read that brings fds is one of the bytes sent with
 * them. Each batch is filed under the stream offset of that byte, and a line
 * takes the batches filed at one of its own bytes. A sender that keeps the
 * bytes of a send with fds within one line thus gives them to that line. A
 * batch filed before a line (with a line that did not use them, or one too
 * long to keep) is closed when the next line is taken. At most
 * FDQUEUE_MAX_FDS wait at once: more is a protocol error.
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

/* File n fds (taken over, closed on failure) under offset, that of the last byte read with them. -EMFILE when too
 * many would wait, -EINVAL when offset is below that of a batch already waiting. */
int fdqueue_push(FdQueue *q, uint64_t offset, const int *fds, size_t n);
/* The fds filed at the bytes [line_start, line_end) of a line move to ret_fds in the order they came (room for
 * FDQUEUE_MAX_FDS; the caller closes them); those filed before line_start are closed. Returns how many moved. */
size_t fdqueue_take(FdQueue *q, uint64_t line_start, uint64_t line_end, int *ret_fds);
/* Close every fd still waiting. */
void fdqueue_done(FdQueue *q);
/* How many fds wait (for tests). */
size_t fdqueue_n_fds(const FdQueue *q);

/*
 * recvmsg() from a stream socket: up to size bytes into buf, and the fds that came with them (O_CLOEXEC) into
 * ret_fds (room for FDQUEUE_MAX_FDS), their number in *ret_n. Returns the bytes read (0: end of file) or -errno;
 * -EMFILE when more fds came than fit (all that came are closed).
 */
ssize_t fdqueue_recv(int fd, void *buf, size_t size, int *ret_fds, size_t *ret_n);
