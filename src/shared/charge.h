/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Per-user accounting: every resource a client makes the daemon hold
 * (connections, queued reply bytes, ...) is charged to the peer's uid.
 *
 * A ChargeRegistry keeps one ChargeUser per uid that holds anything, and a
 * limit per slot for one user and for all users together. A Charge is one
 * holding: taken against a uid when the resource is created, resized while it
 * lives, released by cleanup. Going over a limit is not an error but the
 * documented outcome CHARGE_QUOTA, and it changes nothing: the caller refuses
 * the resource, and other users never notice.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"

typedef enum ChargeSlot {
        CHARGE_CONNECTIONS,
        CHARGE_REPLY_BYTES,
        CHARGE_INPUT_BYTES,
        CHARGE_CALL_BYTES,              /* what the tool calls in progress hold: their scripts and arguments */
        CHARGE_PROXY_CONNECTIONS,       /* network-allow: connections through the daemon's proxy */
        CHARGE_PROXY_BYTES,             /* and the bytes they buffer */
        CHARGE_PROXY_LOOKUPS,           /* and their name lookups: resolver children at once */
        CHARGE_PARSES,                  /* lines parsed a slice at a time (no limit: the count says whether to wait) */
        _CHARGE_SLOT_MAX,
} ChargeSlot;

enum {
        CHARGE_QUOTA = 1,         /* over the user's or the global limit; nothing was charged */
};

#define CHARGE_UNLIMITED UINT64_MAX

typedef struct ChargeRegistry ChargeRegistry;
typedef struct ChargeUser ChargeUser;

typedef struct Charge {
        ChargeUser *user;         /* NULL: nothing held */
        ChargeSlot slot;
        uint64_t amount;
} Charge;

#define CHARGE_NULL ((Charge) {})

int charge_registry_new(ChargeRegistry **ret);
ChargeRegistry *charge_registry_free(ChargeRegistry *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(ChargeRegistry *, charge_registry_free);
/* 0 or CHARGE_UNLIMITED: no limit. Holdings over a lowered limit stay; new ones are refused. */
void charge_registry_set_limit(ChargeRegistry *r, ChargeSlot slot, uint64_t per_user, uint64_t total);
/* One user's limit in a slot; CHARGE_UNLIMITED when there is none. */
uint64_t charge_registry_limit(const ChargeRegistry *r, ChargeSlot slot);
/* What one uid, or everybody, holds in a slot. */
uint64_t charge_registry_used(const ChargeRegistry *r, uid_t uid, ChargeSlot slot);
/* For tests: what everybody holds, and how many uids have an entry (they go when they hold nothing). */
uint64_t charge_registry_total(const ChargeRegistry *r, ChargeSlot slot);
unsigned charge_registry_n_users(const ChargeRegistry *r);

/* Called when what a uid holds in a slot falls from at least threshold to under it (after the change; it must not
 * take or resize charges of that slot). One per slot; NULL: none. */
typedef void (*ChargeUnderFunc)(uid_t uid, void *userdata);
void charge_registry_watch(ChargeRegistry *r, ChargeSlot slot, uint64_t threshold, ChargeUnderFunc f, void *userdata);

/* c must hold nothing. Returns 0, CHARGE_QUOTA, or -ENOMEM. */
int charge_take(ChargeRegistry *r, Charge *c, uid_t uid, ChargeSlot slot, uint64_t amount);
/* Change what c holds to amount. Shrinking always works; growing may give CHARGE_QUOTA
 * (then c is unchanged). With force, the limits are not checked. */
int charge_resize(Charge *c, uint64_t amount, bool force);
void charge_release(Charge *c);
/* Move a holding: *dst must hold nothing; *src holds nothing after. */
void charge_move(Charge *dst, Charge *src);
