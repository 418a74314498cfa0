/* SPDX-License-Identifier: MIT */
#pragma once

/* A FIFO of callbacks waiting for something (a run slot, start-up probes). */

#include <stddef.h>

typedef struct WaitQueue WaitQueue;
typedef void (*WaitFunc)(void *userdata);

typedef struct WaitEntry {
        struct WaitEntry *next, *prev;
        WaitQueue *queue;
        WaitFunc cb;
        void *userdata;
} WaitEntry;

struct WaitQueue {
        WaitEntry *head, *tail;
        size_t n;
};

WaitEntry *waitq_push(WaitQueue *q, WaitFunc cb, void *userdata);
/* Take an entry out without calling it (cancellation). NULL is fine. */
void waitq_cancel(WaitEntry *e);
/* Call and drop every entry, including ones added by the callbacks. */
void waitq_call_all(WaitQueue *q);
void waitq_clear(WaitQueue *q);
