/* SPDX-License-Identifier: MIT */
/* Framing with fds as the session files them (session.c, protocol/fdqueue.h): arbitrary bytes in arbitrary
 * chunks, some of them carrying a number of descriptors, never crash it, never hand a line more than
 * FDQUEUE_MAX_FDS, and never lose count of what waits. The descriptors are -1: nothing is opened or closed. */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/fdqueue.h"
#include "protocol/framing.h"

static size_t waiting(const FdQueue *q) {
        size_t n = 0;
        for (size_t i = 0; i < q->n_batches; i++)
                n += q->batches[i].n;
        return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fake[FDQUEUE_MAX_FDS + 4], got[FDQUEUE_MAX_FDS];
        uint64_t total = 0;
        FdQueue q = {};
        Framing f;
        size_t i = 1;

        if (size < 1)
                return 0;
        for (size_t k = 0; k < sizeof(fake) / sizeof(fake[0]); k++)
                fake[k] = -1;
        framing_init(&f, 256);
        while (i < size) {
                /* A chunk: one byte says how long and how many fds come with it. */
                size_t chunk = (size_t) (data[i] & 0x3f) + 1, n_fds = data[i] >> 6 == 3 ? data[i] % 19 : 0;
                i++;
                size_t n = size - i < chunk ? size - i : chunk;
                if (n == 0)
                        break;
                if (framing_feed(&f, data + i, n) < 0)
                        break;
                i += n;
                if (n_fds > 0 && fdqueue_push(&q, total + n - 1, fake, n_fds) < 0)
                        break;   /* the session closes the connection */
                total += n;
                assert(waiting(&q) == fdqueue_n_fds(&q) && fdqueue_n_fds(&q) <= FDQUEUE_MAX_FDS);
                for (;;) {
                        uint64_t start = total - framing_pending(&f);
                        char *line;
                        size_t len;
                        int r = framing_next(&f, &line, &len);
                        if (r == FRAMING_NEED_MORE)
                                break;
                        uint64_t end = total - framing_pending(&f);
                        assert(start <= end);
                        assert(fdqueue_take(&q, start, end, got) <= FDQUEUE_MAX_FDS);
                        assert(waiting(&q) == fdqueue_n_fds(&q));
                        /* What waits came after this line. */
                        for (size_t b = 0; b < q.n_batches; b++)
                                assert(q.batches[b].offset >= end);
                }
        }
        fdqueue_done(&q);
        framing_done(&f);
        return 0;
}
