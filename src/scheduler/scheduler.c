/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "scheduler.h"

typedef struct SchedQueue {
        SchedTicket *head, *tail;       /* waiting, oldest first */
        unsigned n_waiting, n_held;
        SchedUser *rr_next, *rr_prev;   /* in the kind's round of users with waiters */
        bool in_round;
} SchedQueue;

struct SchedUser {
        Scheduler *scheduler;
        SchedUser *next, *prev;
        uid_t uid;
        unsigned n_refs;                /* tickets held or waiting, all kinds: freed at 0 */
        SchedQueue q[_SCHED_KIND_MAX];
};

typedef struct SchedKindState {
        SchedLimits limits;             /* 0 made SCHEDULER_UNLIMITED */
        unsigned n_held, n_waiting, peak;
        SchedUser *round_head, *round_tail;     /* the next to be served first */
        bool dispatching, again;
} SchedKindState;

struct SchedLoopUser {
        Scheduler *scheduler;
        SchedLoopUser *next, *prev;
        uid_t uid;
        unsigned n_refs;                /* SchedLoops: freed at 0 */
        uint64_t load;                  /* the decaying sum of its loop CPU, usec, as of stamp */
        uint64_t stamp;
        bool low;                       /* moved down: over its share */
};

struct Scheduler {
        ChargeRegistry *charges;        /* amounts: connections, queued bytes (charge.h) */
        uint64_t reply_gate;            /* SCHED_RUN waits while its uid's unread replies are this much; 0: never */
        void (*wake)(void *userdata);
        void *wake_userdata;
        SchedUser *users;
        SchedLoopUser *loop_users;
        unsigned n_loop_users;
        SchedKindState k[_SCHED_KIND_MAX];
};

int scheduler_new(Scheduler **ret) {
        Scheduler *s = calloc(1, sizeof(*s));

        int r;

        if (!s)
                return -ENOMEM;
        r = charge_registry_new(&s->charges);
        if (r < 0) {
                free(s);
                return r;
        }
        for (size_t i = 0; i < _SCHED_KIND_MAX; i++)
                scheduler_set_limits(s, i, &(SchedLimits) {});
        *ret = s;
        return 0;
}

ChargeRegistry *scheduler_charges(const Scheduler *s) {
        return s->charges;
}

Scheduler *scheduler_free(Scheduler *s) {
        if (!s)
                return NULL;
        /* Every ticket must be gone; a leftover user would point at freed memory. */
        while (s->users) {
                SchedUser *u = s->users;
                s->users = u->next;
                free(u);
        }
        while (s->loop_users) {
                SchedLoopUser *u = s->loop_users;
                s->loop_users = u->next;
                free(u);
        }
        charge_registry_free(s->charges);
        free(s);
        return NULL;
}

static unsigned concrete(unsigned v) {
        return v == 0 ? SCHEDULER_UNLIMITED : v;
}

static SchedUser *user_find(const Scheduler *s, uid_t uid) {
        for (SchedUser *u = s->users; u; u = u->next)
                if (u->uid == uid)
                        return u;
        return NULL;
}

static SchedUser *user_get(Scheduler *s, uid_t uid) {
        SchedUser *u = user_find(s, uid);

        if (u)
                return u;
        u = calloc(1, sizeof(*u));
        if (!u)
                return NULL;
        u->scheduler = s;
        u->uid = uid;
        u->next = s->users;
        if (s->users)
                s->users->prev = u;
        s->users = u;
        return u;
}

static void user_unref(SchedUser *u) {
        Scheduler *s = u->scheduler;

        if (--u->n_refs > 0)
                return;
        if (u->prev)
                u->prev->next = u->next;
        else
                s->users = u->next;
        if (u->next)
                u->next->prev = u->prev;
        free(u);
}

/* An empty user (just made, nothing taken) goes again. */
static void user_drop_if_empty(SchedUser *u) {
        if (u->n_refs == 0) {
                u->n_refs = 1;
                user_unref(u);
        }
}

uid_t sched_ticket_uid(const SchedTicket *t) {
        return t->user ? t->user->uid : SCHEDULER_DAEMON_UID;
}

static void round_remove(Scheduler *s, SchedKind kind, SchedUser *u) {
        SchedKindState *k = &s->k[kind];
        SchedQueue *q = &u->q[kind];

        if (!q->in_round)
                return;
        if (q->rr_prev)
                q->rr_prev->q[kind].rr_next = q->rr_next;
        else
                k->round_head = q->rr_next;
        if (q->rr_next)
                q->rr_next->q[kind].rr_prev = q->rr_prev;
        else
                k->round_tail = q->rr_prev;
        q->rr_next = q->rr_prev = NULL;
        q->in_round = false;
}

static void round_append(Scheduler *s, SchedKind kind, SchedUser *u) {
        SchedKindState *k = &s->k[kind];
        SchedQueue *q = &u->q[kind];

        if (q->in_round)
                return;
        q->rr_prev = k->round_tail;
        q->rr_next = NULL;
        if (k->round_tail)
                k->round_tail->q[kind].rr_next = u;
        else
                k->round_head = u;
        k->round_tail = u;
        q->in_round = true;
}

static void hold(Scheduler *s, SchedKind kind, SchedUser *u) {
        SchedKindState *k = &s->k[kind];

        u->q[kind].n_held++;
        k->n_held++;
        if (k->n_held > k->peak)
                k->peak = k->n_held;
}

bool scheduler_replies_unread(const Scheduler *s, uid_t uid) {
        return s->reply_gate > 0 && charge_registry_used(s->charges, uid, CHARGE_REPLY_BYTES) >= s->reply_gate;
}

/* Whether a uid's runs wait for its clients to read their replies. */
static bool replies_unread(const Scheduler *s, SchedKind kind, const SchedUser *u) {
        return kind == SCHED_RUN && u && scheduler_replies_unread(s, u->uid);
}

static bool fits(const Scheduler *s, SchedKind kind, const SchedUser *u) {
        const SchedKindState *k = &s->k[kind];

        return k->n_held < k->limits.total && (!u || u->q[kind].n_held < k->limits.per_user) &&
               !replies_unread(s, kind, u);
}

/* Hand free slots of a kind to waiters: round robin among the uids with waiters (skipping those at their own cap),
 * oldest first within a uid. A callback may come back here; then the loop runs once more instead. */
static void dispatch(Scheduler *s, SchedKind kind) {
        SchedKindState *k = &s->k[kind];

        if (k->dispatching) {
                k->again = true;
                return;
        }
        k->dispatching = true;
        do {
                k->again = false;
                while (fits(s, kind, NULL)) {
                        SchedUser *u;
                        SchedTicket *t;

                        for (u = k->round_head; u; u = u->q[kind].rr_next)
                                if (fits(s, kind, u))
                                        break;
                        if (!u)
                                break;

                        SchedQueue *q = &u->q[kind];
                        t = q->head;
                        q->head = t->next;
                        if (q->head)
                                q->head->prev = NULL;
                        else
                                q->tail = NULL;
                        t->next = t->prev = NULL;
                        q->n_waiting--;
                        k->n_waiting--;
                        t->held = true;
                        hold(s, kind, u);

                        /* Served: to the back of the round, or out of it. */
                        round_remove(s, kind, u);
                        if (q->head)
                                round_append(s, kind, u);

                        t->cb(t, t->userdata);   /* may release, acquire, come back here */
                }
        } while (k->again);
        k->dispatching = false;
}

static void on_replies_read(uid_t uid, void *userdata) {
        Scheduler *s = userdata;

        if (s->wake)
                s->wake(s->wake_userdata);
        else
                dispatch(s, SCHED_RUN);
}

uint64_t scheduler_reply_gate(const Scheduler *s) {
        return s->reply_gate;
}

void scheduler_set_reply_gate(Scheduler *s, uint64_t bytes) {
        s->reply_gate = bytes;
        charge_registry_watch(s->charges, CHARGE_REPLY_BYTES, bytes, bytes > 0 ? on_replies_read : NULL, s);
        dispatch(s, SCHED_RUN);
}

void scheduler_set_wake(Scheduler *s, void (*wake)(void *userdata), void *userdata) {
        s->wake = wake;
        s->wake_userdata = userdata;
}

void scheduler_retry(Scheduler *s, SchedKind kind) {
        dispatch(s, kind);
}

void scheduler_set_limits(Scheduler *s, SchedKind kind, const SchedLimits *l) {
        SchedLimits *m = &s->k[kind].limits;

        *m = (SchedLimits) {
                .total = concrete(l->total),
                .per_user = concrete(l->per_user),
                .queue = concrete(l->queue),
                .queue_per_user = concrete(l->queue_per_user),
        };
        if (m->per_user > m->total)
                m->per_user = m->total;
        if (m->queue_per_user > m->queue)
                m->queue_per_user = m->queue;
        dispatch(s, kind);
}

int scheduler_try_acquire(Scheduler *s, SchedTicket *t, SchedKind kind, uid_t uid) {
        SchedUser *u;

        if (t->user || kind >= _SCHED_KIND_MAX)
                return -EINVAL;
        u = user_get(s, uid);
        if (!u)
                return -ENOMEM;
        /* Nobody jumps the uid's own queue. */
        if (u->q[kind].n_waiting > 0 || !fits(s, kind, u)) {
                user_drop_if_empty(u);
                return SCHEDULER_QUOTA;
        }
        u->n_refs++;
        hold(s, kind, u);
        *t = (SchedTicket) { .user = u, .kind = kind, .held = true };
        return 0;
}

int scheduler_acquire(Scheduler *s, SchedTicket *t, SchedKind kind, uid_t uid, SchedGrantFunc cb, void *userdata) {
        SchedKindState *k;
        SchedUser *u;
        SchedQueue *q;
        int r;

        r = scheduler_try_acquire(s, t, kind, uid);
        if (r != SCHEDULER_QUOTA)
                return r;

        k = &s->k[kind];
        u = user_get(s, uid);
        if (!u)
                return -ENOMEM;
        q = &u->q[kind];
        if (k->n_waiting >= k->limits.queue || q->n_waiting >= k->limits.queue_per_user) {
                /* A uid whose runs wait for its clients to read hears that, not only that the queue is full: its
                 * own clients are why it cannot go now. */
                r = replies_unread(s, kind, u)                  ? SCHEDULER_REPLIES_UNREAD :
                    k->n_waiting >= k->limits.queue             ? SCHEDULER_QUEUE_FULL :
                                                                  SCHEDULER_USER_QUEUE_FULL;
                user_drop_if_empty(u);
                return r;
        }

        u->n_refs++;
        *t = (SchedTicket) { .user = u, .kind = kind, .cb = cb, .userdata = userdata, .prev = q->tail };
        if (q->tail)
                q->tail->next = t;
        else
                q->head = t;
        q->tail = t;
        q->n_waiting++;
        k->n_waiting++;
        round_append(s, kind, u);
        return SCHEDULER_QUEUED;
}

void scheduler_release(SchedTicket *t) {
        SchedUser *u = t->user;
        SchedKind kind = t->kind;
        Scheduler *s;

        if (!u)
                return;
        s = u->scheduler;
        if (t->held) {
                u->q[kind].n_held--;
                s->k[kind].n_held--;
        } else {
                SchedQueue *q = &u->q[kind];

                if (t->prev)
                        t->prev->next = t->next;
                else
                        q->head = t->next;
                if (t->next)
                        t->next->prev = t->prev;
                else
                        q->tail = t->prev;
                q->n_waiting--;
                s->k[kind].n_waiting--;
                if (!q->head)
                        round_remove(s, kind, u);
        }
        *t = (SchedTicket) {};
        user_unref(u);
        dispatch(s, kind);
}

unsigned scheduler_held(const Scheduler *s, SchedKind kind) {
        return s->k[kind].n_held;
}

unsigned scheduler_held_by(const Scheduler *s, SchedKind kind, uid_t uid) {
        SchedUser *u = user_find(s, uid);

        return u ? u->q[kind].n_held : 0;
}

unsigned scheduler_waiting(const Scheduler *s, SchedKind kind) {
        return s->k[kind].n_waiting;
}

unsigned scheduler_waiting_for(const Scheduler *s, SchedKind kind, uid_t uid) {
        SchedUser *u = user_find(s, uid);

        return u ? u->q[kind].n_waiting : 0;
}

unsigned scheduler_peak(const Scheduler *s, SchedKind kind) {
        return s->k[kind].peak;
}

/* v after dt usec: halved each half life, and in between on the straight line from one halving to the next (a
 * little above the exponential, never below the next halving). */
static uint64_t loop_decay(uint64_t v, uint64_t dt) {
        uint64_t halves = dt / SCHEDULER_LOOP_HALF_LIFE_USEC, rest = dt % SCHEDULER_LOOP_HALF_LIFE_USEC;

        if (halves >= 64)
                return 0;
        v >>= halves;
        return v - v / 2 * rest / SCHEDULER_LOOP_HALF_LIFE_USEC;
}

static uint64_t loop_load_at(const SchedLoopUser *u, uint64_t now) {
        return now > u->stamp ? loop_decay(u->load, now - u->stamp) : u->load;
}

static void loop_advance(SchedLoopUser *u, uint64_t now) {
        u->load = loop_load_at(u, now);
        if (now > u->stamp)
                u->stamp = now;
}

static SchedLoopUser *loop_user_find(const Scheduler *s, uid_t uid) {
        for (SchedLoopUser *u = s->loop_users; u; u = u->next)
                if (u->uid == uid)
                        return u;
        return NULL;
}

int scheduler_loop_join(Scheduler *s, SchedLoop *l, uid_t uid) {
        SchedLoopUser *u;

        if (l->user)
                return -EINVAL;
        u = loop_user_find(s, uid);
        if (!u) {
                u = calloc(1, sizeof(*u));
                if (!u)
                        return -ENOMEM;
                u->scheduler = s;
                u->uid = uid;
                u->next = s->loop_users;
                if (s->loop_users)
                        s->loop_users->prev = u;
                s->loop_users = u;
                s->n_loop_users++;
        }
        u->n_refs++;
        l->user = u;
        return 0;
}

void scheduler_loop_leave(SchedLoop *l) {
        SchedLoopUser *u = l->user;
        Scheduler *s;

        if (!u)
                return;
        l->user = NULL;
        if (--u->n_refs > 0)
                return;
        s = u->scheduler;
        if (u->prev)
                u->prev->next = u->next;
        else
                s->loop_users = u->next;
        if (u->next)
                u->next->prev = u->prev;
        s->n_loop_users--;
        free(u);
}

void scheduler_loop_charge(SchedLoop *l, uint64_t cpu_usec, uint64_t now_usec) {
        SchedLoopUser *u = l->user;

        if (!u)
                return;
        loop_advance(u, now_usec);
        u->load += cpu_usec;
}

int scheduler_loop_priority(SchedLoop *l, uint64_t now_usec) {
        SchedLoopUser *u = l->user;
        uint64_t total = 0, load;
        Scheduler *s;

        if (!u)
                return SCHEDULER_LOOP_NORMAL;
        s = u->scheduler;
        load = loop_load_at(u, now_usec);
        for (SchedLoopUser *o = s->loop_users; o; o = o->next)
                total += loop_load_at(o, now_usec);
        /* Over its share: more than the total divided among the uids that are here. Alone, a uid is never over:
         * nobody waits behind it. Back once under half the threshold or its share, so that it does not flap. */
        bool over_share = load * s->n_loop_users > total;
        if (!u->low)
                u->low = load >= SCHEDULER_LOOP_THRESHOLD_USEC && over_share;
        else
                u->low = load >= SCHEDULER_LOOP_THRESHOLD_USEC / 2 && over_share;
        return u->low ? SCHEDULER_LOOP_LOW : SCHEDULER_LOOP_NORMAL;
}

bool scheduler_loop_account(SchedLoop *l, uint64_t cpu_usec, uint64_t now_usec, int *priority) {
        int p;

        scheduler_loop_charge(l, cpu_usec, now_usec);
        p = scheduler_loop_priority(l, now_usec);
        if (p == *priority)
                return false;
        *priority = p;
        return true;
}

uint64_t scheduler_loop_load(const Scheduler *s, uid_t uid, uint64_t now_usec) {
        SchedLoopUser *u = loop_user_find(s, uid);

        return u ? loop_load_at(u, now_usec) : 0;
}

unsigned scheduler_loop_n_users(const Scheduler *s) {
        return s->n_loop_users;
}
