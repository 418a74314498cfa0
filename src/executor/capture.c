/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "macro.h"

int capture_init(Capture *c, size_t head_max, size_t tail_max) {
        *c = (Capture) { .head_max = head_max, .tail_max = tail_max, .dropped_last = -1 };
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

        /* Remember the last byte that falls out (of the ring, or of p): it says whether the tail starts a line. */
        if (c->tail_len + n > c->tail_max) {
                size_t k = c->tail_len + n - c->tail_max - 1;
                c->dropped_last = (unsigned char) (k < c->tail_len ? c->tail[(c->tail_pos + k) % c->tail_max]
                                                                   : p[k - c->tail_len]);
        }
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

static char tail_at(const Capture *c, size_t i) {
        return c->tail[(c->tail_pos + i) % c->tail_max];
}

/* Where the kept text is cut when bytes were dropped: the head's bytes kept, and the tail's bytes skipped. */
static void capture_cut(const Capture *c, size_t *ret_head, size_t *ret_skip) {
        size_t head = c->head_len, skip = 0, near;

        if (c->total - c->head_len - c->tail_len > 0) {
                /* The head ends mid-line: back to the end of the line before, if near. */
                near = capture_near(c->head_max);
                if (head > 0 && c->head[head - 1] != '\n')
                        for (size_t i = head - 1; i > 0 && head - i <= near; i--)
                                if (c->head[i - 1] == '\n') {
                                        head = i;
                                        break;
                                }

                /* The tail starts mid-line: on to the start of the next line, if near and some is left. */
                near = capture_near(c->tail_max);
                if (c->dropped_last >= 0 && c->dropped_last != '\n')
                        for (size_t i = 0; i < c->tail_len && i < near; i++)
                                if (tail_at(c, i) == '\n') {
                                        if (i + 1 < c->tail_len)
                                                skip = i + 1;
                                        break;
                                }
        }
        *ret_head = head;
        *ret_skip = skip;
}

uint64_t capture_omitted(const Capture *c) {
        size_t head, skip;

        capture_cut(c, &head, &skip);
        return c->total - head - (c->tail_len - skip);
}

char *capture_text(const Capture *c, size_t *ret_len) {
        char marker[128] = "";
        uint64_t omitted = capture_omitted(c);
        size_t ml, n, head, skip;
        char *s, *p;

        capture_cut(c, &head, &skip);
        if (omitted > 0)
                snprintf(marker, sizeof(marker), "%s[... %" PRIu64 " bytes omitted ...]\n",
                         head > 0 && c->head[head - 1] != '\n' ? "\n" : "", omitted);
        ml = strlen(marker);
        n = head + ml + c->tail_len - skip;
        s = p = malloc(n + 1);
        if (!s)
                return NULL;
        memcpy(p, c->head, head);
        p += head;
        memcpy(p, marker, ml);
        p += ml;
        for (size_t i = skip; i < c->tail_len; i++)
                *p++ = tail_at(c, i);
        s[n] = 0;
        if (ret_len)
                *ret_len = n;
        return s;
}
