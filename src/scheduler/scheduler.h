/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The scheduler: the one place that decides whether work a client asked for
 * may start now. Every spawn and every held process of the daemon — runs,
 * metadata helpers, environment builds (uv), bytecode compiles, disk walks,
 * persistent sandboxes, sandboxes started ahead, the /work a persistent sandbox carries over to a new environment
 * (its tar passes through the daemon's memory) — takes a SchedTicket of its kind, charged to a uid:
 * the peer's for work done for a call, SCHEDULER_DAEMON_UID for what the
 * daemon does for itself (garbage collection, warm-up). Each kind has a cap
 * for all uids together and one for a single uid. (The sandbox self-test
 * takes none: one runs at a time, and check_environment starts one at most
 * every RUNTIME_SELF_TEST_FRESH_USEC.)
 *
 * Over a cap, a ticket either waits (scheduler_acquire()) or is refused
 * (scheduler_try_acquire()). Waiting tickets are served round robin among
 * the uids that have waiters, oldest first within one uid: a uid with a
 * backlog of a hundred delays another uid's first ticket by at most one
 * turnover of a slot. The waiting queue of a kind can be capped too, for all
 * uids and for one uid; beyond it, SCHEDULER_QUEUE_FULL. Over-cap outcomes
 * are documented positive values, never errors, and change nothing.
 *
 * Amounts (connections, queued reply and input bytes, the network proxy's
 * connections and buffers) are charged in the scheduler's one per-uid
 * account, scheduler_charges() (see charge.h); tickets count processes and
 * what holds them.
 *
 * A granted ticket's callback runs from within the release (or limit change)
 * that freed its slot; it may release or acquire tickets itself.
 *
 * Runs wait for their clients as well: while a uid's connections leave more
 * unread reply bytes (CHARGE_REPLY_BYTES) than the reply gate, none of its
 * SCHED_RUN tickets is granted, at once or from the queue; they are served
 * in turn once the clients have read. A run's reply is not known before it
 * ends, so what its clients do not read must stop new runs, not only new
 * replies. Falling back under the gate happens inside whatever shrank the
 * charge (a connection's write): the scheduler then calls the wake function,
 * which must come back through the event loop (scheduler_retry()), or, with
 * none set, serves the waiters at once.
 *
 * The event loop's own time is shared too. What runs in the loop for a uid (a
 * connection's callbacks, a persistent sandbox's messages) reports the thread
 * CPU time it took (scheduler_loop_charge()), kept per uid as a decaying sum
 * (half of it gone every SCHEDULER_LOOP_HALF_LIFE_USEC). A uid whose sum is
 * above SCHEDULER_LOOP_THRESHOLD_USEC and above its fair share (the total over
 * the uids that have something in the loop, divided by their number) has its
 * event sources moved down to SCHEDULER_LOOP_LOW until it falls back under
 * half the threshold or its share: everyone else's ready events are served
 * first. sd-event's priorities are strict, so the busy uid still gets every
 * moment nobody else needs; nothing is refused, only ordered. Whoever runs
 * callbacks for a uid holds a SchedLoop and asks scheduler_loop_priority()
 * after each.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "charge.h"
#include "macro.h"

typedef enum SchedKind {
        SCHED_RUN,              /* a script's run, or a persistent sandbox's executing cell */
        SCHED_HELPER,           /* a metadata-reader sandbox */
        SCHED_BUILD,            /* an environment build: its uv processes */
        SCHED_COMPILE,          /* a sandboxed bytecode compile */
        SCHED_WALK,             /* a disk-usage walk or collection */
        SCHED_WORKSPACE,        /* a live workspace (a persistent sandbox) */
        SCHED_PRESTART,         /* a sandbox started ahead (prestart=), the daemon's until a run takes it */
        SCHED_CARRY,            /* a persistent sandbox's /work carried to a new environment through the daemon */
        _SCHED_KIND_MAX,
} SchedKind;

/* The daemon's own work: never a peer (no process has uid -1). */
#define SCHEDULER_DAEMON_UID ((uid_t) -1)

enum {
        SCHEDULER_QUEUED = 1,           /* the ticket waits; its callback runs when it is granted */
        SCHEDULER_QUOTA,                /* try_acquire: over the uid's or the global cap; nothing taken */
        SCHEDULER_QUEUE_FULL,           /* acquire: the kind's waiting queue is full */
        SCHEDULER_USER_QUEUE_FULL,      /* acquire: the uid's share of that queue is */
        SCHEDULER_REPLIES_UNREAD,       /* acquire: either of those, while the uid's runs wait for its clients to
                                         * read their replies (scheduler_set_reply_gate()): the reason to name */
};

#define SCHEDULER_UNLIMITED UINT32_MAX

/* The event loop's own CPU (see above); the priorities are sd-event's (SD_EVENT_PRIORITY_NORMAL is 0). */
#define SCHEDULER_LOOP_HALF_LIFE_USEC (100 * USEC_PER_MSEC)
#define SCHEDULER_LOOP_THRESHOLD_USEC (10 * USEC_PER_MSEC)
enum {
        SCHEDULER_LOOP_NORMAL = 0,
        SCHEDULER_LOOP_LOW = 10,
};

typedef struct Scheduler Scheduler;
typedef struct SchedUser SchedUser;
typedef struct SchedTicket SchedTicket;
typedef void (*SchedGrantFunc)(SchedTicket *t, void *userdata);
typedef struct SchedLoopUser SchedLoopUser;

/* Embedded in what runs callbacks in the loop for a uid (a connection, a persistent sandbox); all zero: none. */
typedef struct SchedLoop {
        SchedLoopUser *user;
} SchedLoop;

/* Embedded in what holds or waits for the slot; all zero is "nothing". */
struct SchedTicket {
        SchedUser *user;                /* NULL: neither held nor waiting */
        SchedKind kind;
        bool held;
        SchedTicket *next, *prev;       /* in the user's waiters of this kind */
        SchedGrantFunc cb;
        void *userdata;
};

typedef struct SchedLimits {
        unsigned total, per_user;               /* slots; 0: unlimited */
        unsigned queue, queue_per_user;         /* waiting tickets; 0: unlimited */
} SchedLimits;

int scheduler_new(Scheduler **ret);
/* Every ticket must be released first, and every charge. */
Scheduler *scheduler_free(Scheduler *s);
/* What is held in amounts rather than processes (connections, queued bytes, proxy connections): the one
 * per-uid account of the scheduler's (charge.h), for who holds such things. */
ChargeRegistry *scheduler_charges(const Scheduler *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(Scheduler *, scheduler_free);

/* Raising a cap grants waiters at once; holdings over a lowered cap stay. */
void scheduler_set_limits(Scheduler *s, SchedKind kind, const SchedLimits *l);

/* Runs of a uid whose clients leave this many unread reply bytes or more wait (above); 0: no gate. */
void scheduler_set_reply_gate(Scheduler *s, uint64_t bytes);
/* Whether uid's runs wait for its clients to read their replies now. */
bool scheduler_replies_unread(const Scheduler *s, uid_t uid);
/* The gate set above. */
uint64_t scheduler_reply_gate(const Scheduler *s);
/* How the scheduler asks for a turn of the loop to serve runs that may go now (above); NULL: none, serve at once. */
void scheduler_set_wake(Scheduler *s, void (*wake)(void *userdata), void *userdata);
/* Serve waiters of a kind that may go now: what wake() asks for. */
void scheduler_retry(Scheduler *s, SchedKind kind);

/* t must be empty. 0: held now; SCHEDULER_QUEUED: cb runs later with it held; SCHEDULER_QUEUE_FULL,
 * SCHEDULER_USER_QUEUE_FULL or SCHEDULER_REPLIES_UNREAD (t stays empty); -ENOMEM. A uid gets a slot at once only
 * when no other ticket of its own waits before it and the caps allow: waiting tickets of other uids do not hold it
 * back while slots are free. */
int scheduler_acquire(Scheduler *s, SchedTicket *t, SchedKind kind, uid_t uid, SchedGrantFunc cb, void *userdata);
/* Never waits: 0 (held) or SCHEDULER_QUOTA. */
int scheduler_try_acquire(Scheduler *s, SchedTicket *t, SchedKind kind, uid_t uid);
/* Give back a held slot (and hand it on) or stop waiting. An empty t is fine. */
void scheduler_release(SchedTicket *t);

static inline bool sched_ticket_held(const SchedTicket *t) {
        return t->user && t->held;
}
static inline bool sched_ticket_waiting(const SchedTicket *t) {
        return t->user && !t->held;
}
/* For tests: whose ticket it is. */
uid_t sched_ticket_uid(const SchedTicket *t);

unsigned scheduler_held(const Scheduler *s, SchedKind kind);
unsigned scheduler_held_by(const Scheduler *s, SchedKind kind, uid_t uid);
unsigned scheduler_waiting(const Scheduler *s, SchedKind kind);
unsigned scheduler_waiting_for(const Scheduler *s, SchedKind kind, uid_t uid);
/* For tests: the most ever held at once (since scheduler_new()), to prove a cap held. */
unsigned scheduler_peak(const Scheduler *s, SchedKind kind);

/* l must be empty. 0 or -ENOMEM. Every uid with a SchedLoop counts in the fair share, busy or not. */
int scheduler_loop_join(Scheduler *s, SchedLoop *l, uid_t uid);
/* An empty l is fine. */
void scheduler_loop_leave(SchedLoop *l);
/* cpu_usec of the loop's thread was spent for l's uid, up to now_usec (CLOCK_MONOTONIC). An empty l: nothing. */
void scheduler_loop_charge(SchedLoop *l, uint64_t cpu_usec, uint64_t now_usec);
/* The sd-event priority l's sources should have now: SCHEDULER_LOOP_NORMAL or SCHEDULER_LOOP_LOW. */
int scheduler_loop_priority(SchedLoop *l, uint64_t now_usec);
/* Both for one callback: cpu_usec charged, then the priority l's sources should have now into *priority (what they
 * have). True when that changed: the caller moves its sources and may say so. */
bool scheduler_loop_account(SchedLoop *l, uint64_t cpu_usec, uint64_t now_usec, int *priority);
/* For tests: what is left of a uid's charges at now_usec (0 for a uid with no SchedLoop), and how many uids have
 * one. */
uint64_t scheduler_loop_load(const Scheduler *s, uid_t uid, uint64_t now_usec);
unsigned scheduler_loop_n_users(const Scheduler *s);
