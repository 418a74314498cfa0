/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "macro.h"
#include "uidpool.h"

struct UidPool {
        unsigned n_ref;
        uint32_t first, last;
        uint32_t next;          /* where the round robin goes on */
        uid_t *taken;           /* unordered; as many as sandboxes run at once */
        size_t n_taken, n_alloc;
};

int uid_pool_new(UidPool **ret, uint32_t first, uint32_t last) {
        UidPool *p;

        if (first == 0 || last < first || last >= (uint32_t) INT32_MAX || (first <= 65534 && last >= 65534))
                return -EINVAL;
        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        *p = (UidPool) { .n_ref = 1, .first = first, .last = last, .next = first };
        *ret = p;
        return 0;
}

UidPool *uid_pool_ref(UidPool *p) {
        if (p)
                p->n_ref++;
        return p;
}

UidPool *uid_pool_unref(UidPool *p) {
        if (!p || --p->n_ref > 0)
                return NULL;
        free(p->taken);
        free(p);
        return NULL;
}

static bool is_taken(const UidPool *p, uid_t uid) {
        for (size_t i = 0; i < p->n_taken; i++)
                if (p->taken[i] == uid)
                        return true;
        return false;
}

int uid_pool_take(UidPool *p, uid_t *ret) {
        uint64_t size = (uint64_t) p->last - p->first + 1;

        if (p->n_taken >= size)
                return UID_POOL_EXHAUSTED;
        if (p->n_taken == p->n_alloc) {
                size_t n = MAX(p->n_alloc * 2, (size_t) 16);
                uid_t *t = reallocarray(p->taken, n, sizeof(uid_t));
                if (!t)
                        return -ENOMEM;
                p->taken = t;
                p->n_alloc = n;
        }
        /* Fewer are taken than there are: the loop ends. */
        for (;;) {
                uid_t uid = p->next;

                p->next = p->next == p->last ? p->first : p->next + 1;
                if (!is_taken(p, uid)) {
                        p->taken[p->n_taken++] = uid;
                        *ret = uid;
                        return 0;
                }
        }
}

void uid_pool_release(UidPool *p, uid_t uid) {
        for (size_t i = 0; i < p->n_taken; i++)
                if (p->taken[i] == uid) {
                        p->taken[i] = p->taken[--p->n_taken];
                        return;
                }
}

unsigned uid_pool_n_taken(const UidPool *p) {
        return (unsigned) p->n_taken;
}
