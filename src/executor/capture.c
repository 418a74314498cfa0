/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "macro.h"

int capture_init(Capture *c, size_t head_max, size_t tail_max) {
        *c = (Capture) { .head_max = head_max, .tail_max = tail_max };
        c->head = malloc(head_max + 1);
        c->tail = malloc(tail_max + 1);
        if (!c->head || !c->tail) {
                capture_done(c);
                return -ENOMEM;
        }
        return 0;
}

void capture_done(Capture *c) {
        free(c->head);
        free(c->tail);
        *c = (Capture) {};
}

void capture_add(Capture *c, const char *p, size_t n) {
        c->total += n;

        size_t h = MIN(n, c->head_max - c->head_len);
        memcpy(c->head + c->head_len, p, h);
        c->head_len += h;
        p += h;
        n -= h;

        if (n == 0 || c->tail_max == 0)
                return;
        if (n >= c->tail_max) {
                memcpy(c->tail, p + n - c->tail_max, c->tail_max);
                c->tail_pos = 0;
                c->tail_len = c->tail_max;
                return;
        }
        /* Append to the ring at tail_pos + tail_len. */
        for (size_t done = 0; done < n;) {
                size_t at = (c->tail_pos + c->tail_len) % c->tail_max;
                size_t chunk = MIN(n - done, c->tail_max - at);
                memcpy(c->tail + at, p + done, chunk);
                done += chunk;
                c->tail_len += chunk;
                if (c->tail_len > c->tail_max) {
                        c->tail_pos = (c->tail_pos + c->tail_len - c->tail_max) % c->tail_max;
                        c->tail_len = c->tail_max;
                }
        }
}

uint64_t capture_omitted(const Capture *c) {
        return c->total - c->head_len - c->tail_len;
}

char *capture_text(const Capture *c, size_t *ret_len) {
        char marker[128] = "";
        uint64_t omitted = capture_omitted(c);
        size_t ml, n;
        char *s, *p;

        if (omitted > 0)
                snprintf(marker, sizeof(marker), "%s[... %" PRIu64 " bytes omitted ...]\n",
                         c->head_len > 0 && c->head[c->head_len - 1] != '\n' ? "\n" : "", omitted);
        ml = strlen(marker);
        n = c->head_len + ml + c->tail_len;
        s = p = malloc(n + 1);
        if (!s)
                return NULL;
        memcpy(p, c->head, c->head_len);
        p += c->head_len;
        memcpy(p, marker, ml);
        p += ml;
        size_t first = MIN(c->tail_len, c->tail_max - c->tail_pos);
        memcpy(p, c->tail + c->tail_pos, first);
        memcpy(p + first, c->tail, c->tail_len - first);
        s[n] = 0;
        if (ret_len)
                *ret_len = n;
        return s;
}
