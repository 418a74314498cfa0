/* SPDX-License-Identifier: MIT */
#include <stdlib.h>

#include "waitq.h"

WaitEntry *waitq_push(WaitQueue *q, WaitFunc cb, void *userdata) {
        WaitEntry *e = calloc(1, sizeof(*e));

        if (!e)
                return NULL;
        *e = (WaitEntry) { .prev = q->tail, .queue = q, .cb = cb, .userdata = userdata };
        if (q->tail)
                q->tail->next = e;
        else
                q->head = e;
        q->tail = e;
        q->n++;
        return e;
}

static void unlink_entry(WaitEntry *e) {
        WaitQueue *q = e->queue;

        if (e->prev)
                e->prev->next = e->next;
        else
                q->head = e->next;
        if (e->next)
                e->next->prev = e->prev;
        else
                q->tail = e->prev;
        q->n--;
}

void waitq_cancel(WaitEntry *e) {
        if (!e)
                return;
        unlink_entry(e);
        free(e);
}

/* Take e out and call it. */
static void waitq_call(WaitEntry *e) {
        WaitFunc cb = e->cb;
        void *ud = e->userdata;

        unlink_entry(e);
        free(e);
        cb(ud);
}

/* Call and drop the oldest entry; returns whether there was one. */
static int waitq_pop_call(WaitQueue *q) {
        if (!q->head)
                return 0;
        waitq_call(q->head);
        return 1;
}

void waitq_call_all(WaitQueue *q) {
        while (waitq_pop_call(q))
                ;
}

void waitq_clear(WaitQueue *q) {
        while (q->head)
                waitq_cancel(q->head);
}
