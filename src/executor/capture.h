/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Capture: keeps the first head_max and the last tail_max bytes of a stream
 * and counts the rest, so memory stays bounded whatever a process prints.
 * Where bytes are dropped, the cut moves to a line boundary when one is near
 * (within capture_near() bytes): the head then ends with a whole line and the
 * tail starts with one, and the bytes of the partial lines count as omitted.
 */

#include <stddef.h>
#include <stdint.h>

typedef struct Capture {
        char *head;
        size_t head_len, head_max;
        char *tail;                /* ring buffer */
        size_t tail_pos, tail_len, tail_max;
        uint64_t total;
        int dropped_last;          /* the last byte dropped from the tail, -1 before any */
} Capture;

int capture_init(Capture *c, size_t head_max, size_t tail_max);
void capture_done(Capture *c);
void capture_add(Capture *c, const char *p, size_t n);
/* How far from a cut a line boundary is looked for, in a part that keeps max bytes. */
static inline size_t capture_near(size_t max) {
        return max / 4 < 512 ? max / 4 : 512;
}
/* Bytes dropped between head and tail, the partial lines at the cut included. */
uint64_t capture_omitted(const Capture *c);
/*
 * The kept text; when bytes were dropped, a marker line stating how many
 * stands between head and tail. malloc'd, NUL-terminated.
 */
char *capture_text(const Capture *c, size_t *ret_len);
