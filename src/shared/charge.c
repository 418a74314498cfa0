/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "charge.h"

struct ChargeUser {
        ChargeRegistry *registry;
        ChargeUser *next, *prev;
        uid_t uid;
        unsigned n_charges;       /* the user is freed when the last is released */
        uint64_t used[_CHARGE_SLOT_MAX];
};

struct ChargeRegistry {
        ChargeUser *users;
        unsigned n_users;
        uint64_t total[_CHARGE_SLOT_MAX];
        uint64_t per_user[_CHARGE_SLOT_MAX];
        uint64_t limit_total[_CHARGE_SLOT_MAX];
        struct {
                uint64_t threshold;
                ChargeUnderFunc f;
                void *userdata;
        } watch[_CHARGE_SLOT_MAX];
};

int charge_registry_new(ChargeRegistry **ret) {
        ChargeRegistry *r;

        r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        for (size_t i = 0; i < _CHARGE_SLOT_MAX; i++)
                r->per_user[i] = r->limit_total[i] = CHARGE_UNLIMITED;
        *ret = r;
        return 0;
}

ChargeRegistry *charge_registry_free(ChargeRegistry *r) {
        if (!r)
                return NULL;
        /* Every charge must be gone; a leftover user would point at freed memory. */
        while (r->users) {
                ChargeUser *u = r->users;
                r->users = u->next;
                free(u);
        }
        free(r);
        return NULL;
}

uint64_t charge_registry_limit(const ChargeRegistry *r, ChargeSlot slot) {
        return r->per_user[slot];
}

void charge_registry_set_limit(ChargeRegistry *r, ChargeSlot slot, uint64_t per_user, uint64_t total) {
        r->per_user[slot] = per_user == 0 ? CHARGE_UNLIMITED : per_user;
        r->limit_total[slot] = total == 0 ? CHARGE_UNLIMITED : total;
}

void charge_registry_watch(ChargeRegistry *r, ChargeSlot slot, uint64_t threshold, ChargeUnderFunc f, void *userdata) {
        r->watch[slot].threshold = threshold;
        r->watch[slot].f = f;
        r->watch[slot].userdata = userdata;
}

static ChargeUser *user_find(const ChargeRegistry *r, uid_t uid) {
        for (ChargeUser *u = r->users; u; u = u->next)
                if (u->uid == uid)
                        return u;
        return NULL;
}

uint64_t charge_registry_used(const ChargeRegistry *r, uid_t uid, ChargeSlot slot) {
        ChargeUser *u = user_find(r, uid);

        return u ? u->used[slot] : 0;
}

uint64_t charge_registry_total(const ChargeRegistry *r, ChargeSlot slot) {
        return r->total[slot];
}

unsigned charge_registry_n_users(const ChargeRegistry *r) {
        return r->n_users;
}

static void user_unref(ChargeUser *u) {
        ChargeRegistry *r = u->registry;

        if (--u->n_charges > 0)
                return;
        if (u->prev)
                u->prev->next = u->next;
        else
                r->users = u->next;
        if (u->next)
                u->next->prev = u->prev;
        r->n_users--;
        free(u);
}

static bool fits(uint64_t used, uint64_t more, uint64_t limit) {
        return more <= limit && used <= limit - more;
}

int charge_take(ChargeRegistry *r, Charge *c, uid_t uid, ChargeSlot slot, uint64_t amount) {
        ChargeUser *u;

        if (c->user || slot >= _CHARGE_SLOT_MAX)
                return -EINVAL;

        u = user_find(r, uid);
        if (!fits(u ? u->used[slot] : 0, amount, r->per_user[slot]) ||
            !fits(r->total[slot], amount, r->limit_total[slot]))
                return CHARGE_QUOTA;

        if (!u) {
                u = calloc(1, sizeof(*u));
                if (!u)
                        return -ENOMEM;
                *u = (ChargeUser) { .registry = r, .uid = uid, .next = r->users };
                if (r->users)
                        r->users->prev = u;
                r->users = u;
                r->n_users++;
        }
        u->n_charges++;
        u->used[slot] += amount;
        r->total[slot] += amount;
        *c = (Charge) { .user = u, .slot = slot, .amount = amount };
        return 0;
}

int charge_resize(Charge *c, uint64_t amount, bool force) {
        ChargeUser *u = c->user;
        ChargeRegistry *r;

        if (!u)
                return -EINVAL;
        r = u->registry;
        if (amount > c->amount && !force) {
                uint64_t more = amount - c->amount;

                if (!fits(u->used[c->slot], more, r->per_user[c->slot]) ||
                    !fits(r->total[c->slot], more, r->limit_total[c->slot]))
                        return CHARGE_QUOTA;
        }
        uint64_t was = u->used[c->slot];
        u->used[c->slot] = was - c->amount + amount;
        r->total[c->slot] = r->total[c->slot] - c->amount + amount;
        c->amount = amount;
        if (r->watch[c->slot].f && was >= r->watch[c->slot].threshold &&
            u->used[c->slot] < r->watch[c->slot].threshold)
                r->watch[c->slot].f(u->uid, r->watch[c->slot].userdata);
        return 0;
}

void charge_release(Charge *c) {
        if (!c->user)
                return;
        (void) charge_resize(c, 0, true);
        user_unref(c->user);
        *c = CHARGE_NULL;
}

void charge_move(Charge *dst, Charge *src) {
        *dst = *src;
        *src = CHARGE_NULL;
}
