/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Buf: a byte queue. Bytes are appended at the end and consumed from the
 * front; memory is reused and compacted as it drains.
 */

#include <stddef.h>
#include <sys/types.h>

typedef struct Buf {
        char *data;
        size_t start;      /* first unconsumed byte */
        size_t end;        /* one past the last byte */
        size_t allocated;
} Buf;

#define BUF_INIT ((Buf) {})

void buf_clear(Buf *b);
static inline size_t buf_size(const Buf *b) {
        return b->end - b->start;
}
static inline const char *buf_data(const Buf *b) {
        return b->data ? b->data + b->start : "";
}
int buf_append(Buf *b, const void *p, size_t n);
/* Make room for at least n more bytes; returns a pointer to the free space. */
int buf_reserve(Buf *b, size_t n, char **ret);
void buf_commit(Buf *b, size_t n);
void buf_consume(Buf *b, size_t n);
/* Write as much as the fd takes; returns bytes written, 0 if it would block, or -errno. Once empty, a large
 * buffer gives its memory back (after a burst). */
ssize_t buf_flush_fd(Buf *b, int fd);
