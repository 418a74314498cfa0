/* SPDX-License-Identifier: MIT */
/*
 * Requirements as a list (pep508.h): one parsed and appended at a time, the script's merged with the call's into a
 * sorted list without duplicates (a stable cache key), and the canonical strings joined.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "pep508.h"
#include "strv.h"

void requirement_done(Requirement *r) {
        if (!r)
                return;
        free(r->name);
        free(r->canonical);
        *r = (Requirement) {};
}

static int requirement_copy(const Requirement *from, Requirement *ret) {
        _cleanup_free_ char *name = NULL, *canonical = NULL;

        name = strdup(from->name);
        canonical = strdup(from->canonical);
        if (!name || !canonical)
                return -ENOMEM;

        *ret = (Requirement) {
                .name = TAKE_PTR(name),
                .canonical = TAKE_PTR(canonical),
        };
        return 0;
}

int requirement_list_append(RequirementList *l, const char *spec, char **ret_error) {
        Requirement req, *items;
        int r;

        if (!l)
                return -EINVAL;

        r = pep508_parse(spec, &req, ret_error);
        if (r < 0)
                return r;

        items = realloc(l->items, (l->n + 1) * sizeof(Requirement));
        if (!items) {
                requirement_done(&req);
                return -ENOMEM;
        }

        items[l->n++] = req;
        l->items = items;
        return 0;
}

void requirement_list_done(RequirementList *l) {
        if (!l)
                return;
        for (size_t i = 0; i < l->n; i++)
                requirement_done(&l->items[i]);
        free(l->items);
        *l = (RequirementList) {};
}

typedef struct MergeEntry {
        const Requirement *req;
        size_t order;           /* inline entries first, then parameters */
} MergeEntry;

static int cmp_merge_entries(const void *a, const void *b) {
        const MergeEntry *x = a, *y = b;
        int c;

        c = strcmp(x->req->name, y->req->name);
        if (c != 0)
                return c;
        return x->order < y->order ? -1 : x->order > y->order ? 1 : 0;
}

int requirement_list_merge(const RequirementList *inline_deps,
                           const RequirementList *param_deps,
                           RequirementList *ret) {
        const RequirementList *lists[] = { inline_deps, param_deps };
        _cleanup_(requirement_list_done) RequirementList result = {};
        _cleanup_free_ MergeEntry *entries = NULL;
        size_t n = 0;
        int r;

        if (!ret)
                return -EINVAL;

        for (size_t i = 0; i < ELEMENTSOF(lists); i++)
                if (lists[i])
                        n += lists[i]->n;

        if (n > 0) {
                entries = calloc(n, sizeof(MergeEntry));
                result.items = calloc(n, sizeof(Requirement));
                if (!entries || !result.items)
                        return -ENOMEM;
        }

        n = 0;
        for (size_t i = 0; i < ELEMENTSOF(lists); i++)
                for (size_t j = 0; lists[i] && j < lists[i]->n; j++, n++)
                        entries[n] = (MergeEntry) { .req = &lists[i]->items[j], .order = n };

        if (n > 0)
                qsort(entries, n, sizeof(MergeEntry), cmp_merge_entries);

        /* Sorted by name, then by order: keep the last entry of each name. Names
         * are then unique, so the result is also sorted by name and canonical. */
        for (size_t i = 0; i < n; i++) {
                if (i + 1 < n && streq(entries[i].req->name, entries[i + 1].req->name))
                        continue;

                r = requirement_copy(entries[i].req, &result.items[result.n]);
                if (r < 0)
                        return r;
                result.n++;
        }

        *ret = result;
        result = (RequirementList) {};
        return 0;
}

int requirement_list_join(const RequirementList *l, const char *separator, char **ret) {
        _cleanup_free_ char *s = NULL;
        size_t len = 0;
        int r;

        if (!ret)
                return -EINVAL;

        s = strdup("");
        if (!s)
                return -ENOMEM;

        for (size_t i = 0; l && i < l->n; i++) {
                r = strextendf_len(&s, &len, "%s%s", i > 0 ? strempty(separator) : "", l->items[i].canonical);
                if (r < 0)
                        return r;
        }

        *ret = TAKE_PTR(s);
        return 0;
}
