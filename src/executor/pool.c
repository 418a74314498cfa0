/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "macro.h"
#include "pool.h"
#include "time-util.h"

#define SWEEP_INTERVAL_USEC (5 * USEC_PER_SEC)
#define MAX_FAILURES 3
#define FAILURE_PAUSE_USEC (60 * USEC_PER_SEC)
/* Users whose call rate a target follows at once; past that, the one that called least recently is forgotten. */
#define MAX_OWNERS 64

typedef struct PoolTarget PoolTarget;

/* One user's pace for a target: how many of their processes wait for it. */
typedef struct PoolOwner {
        uid_t uid;
        unsigned depth;         /* processes kept waiting now: 1 to the pool's size, following the call rate */
        uint64_t last_take;     /* the last pool_take() of this uid that asked for the target */
        uint64_t last_short;    /* the last take that found none ready, soon after another */
} PoolOwner;

typedef struct PoolEntry {
        PoolTarget *target;
        PoolItem item;
        uid_t owner;            /* whose next run it is for; SCHEDULER_DAEMON_UID: whoever comes first */
        SchedTicket ticket;     /* SCHED_PRESTART, the owner's, until a run takes the process */
} PoolEntry;

struct PoolTarget {
        Pool *pool;
        char *key;
        PoolTargetOps ops;
        void *spec;
        uint64_t last_used;
        uid_t last_uid;         /* who used it last: a new target of that uid may take its place */
        uid_t shared_taker;     /* who took the daemon's process last: not again before somebody else */
        PoolEntry **entries;
        size_t n_entries;
        unsigned failures;      /* in a row: a target whose processes die before use pauses refilling */
        uint64_t failed_at;
        PoolOwner *owners;      /* each user's depth: one user's burst deepens only their own */
        size_t n_owners;
};

struct Pool {
        sd_event *event;
        Scheduler *sched;       /* NULL: no accounting */
        unsigned size;
        PoolTarget *targets[POOL_MAX_TARGETS];
        size_t n_targets;
        sd_event_source *sweep;
};

void pool_item_done(PoolItem *it) {
        if (!it)
                return;
        it->proc = process_free(it->proc);
        it->in_fd = safe_close(it->in_fd);
        it->out_fd = safe_close(it->out_fd);
        it->ctl_fd = safe_close(it->ctl_fd);
        it->tag = mfree(it->tag);
}

static void entry_free(PoolEntry *e) {
        if (!e)
                return;
        /* Killed and reaped in the background: a sandbox's teardown is no wait for the event loop. */
        process_detach(TAKE_PTR(e->item.proc));
        pool_item_done(&e->item);
        scheduler_release(&e->ticket);
        free(e);
}

static void target_remove_entry(PoolTarget *t, PoolEntry *e) {
        for (size_t i = 0; i < t->n_entries; i++)
                if (t->entries[i] == e) {
                        t->entries[i] = t->entries[--t->n_entries];
                        break;
                }
}

static void target_free(PoolTarget *t) {
        if (!t)
                return;
        for (size_t i = 0; i < t->n_entries; i++)
                entry_free(t->entries[i]);
        free(t->entries);
        free(t->owners);
        if (t->ops.free_spec)
                t->ops.free_spec(t->spec);
        free(t->key);
        free(t);
}

static void pool_drop_target(Pool *p, size_t i) {
        target_free(p->targets[i]);
        p->targets[i] = p->targets[--p->n_targets];
        p->targets[p->n_targets] = NULL;
}

/* A waiting process ended before anyone took it: bwrap failed, or it was killed. */
static void on_entry_died(Process *proc, void *userdata) {
        PoolEntry *e = userdata;
        PoolTarget *t = e->target;

        if (t->ops.dropped)
                t->ops.dropped(t->spec, &e->item);
        log_debug("A process started ahead ended before anyone took it (%u in a row).", t->failures + 1);
        t->failures++;
        t->failed_at = now_usec();
        target_remove_entry(t, e);
        entry_free(e);
}

static unsigned target_n_owned(const PoolTarget *t, uid_t uid) {
        unsigned n = 0;

        for (size_t i = 0; i < t->n_entries; i++)
                if (t->entries[i]->owner == uid)
                        n++;
        return n;
}

static PoolOwner *target_owner(const PoolTarget *t, uid_t uid) {
        for (size_t i = 0; i < t->n_owners; i++)
                if (t->owners[i].uid == uid)
                        return &t->owners[i];
        return NULL;
}

/* uid's record, made when it has none (NULL: no memory for it; the depth is 1 then). */
static PoolOwner *target_owner_get(PoolTarget *t, uid_t uid) {
        PoolOwner *o = target_owner(t, uid);

        if (o)
                return o;
        if (t->n_owners >= MAX_OWNERS) {
                /* A bounded list: the user who called least recently starts again at depth 1. */
                o = &t->owners[0];
                for (size_t i = 1; i < t->n_owners; i++)
                        if (t->owners[i].last_take < o->last_take)
                                o = &t->owners[i];
        } else {
                PoolOwner *l = realloc(t->owners, (t->n_owners + 1) * sizeof(*l));
                if (!l)
                        return NULL;
                t->owners = l;
                o = &t->owners[t->n_owners++];
        }
        *o = (PoolOwner) { .uid = uid, .depth = 1 };
        return o;
}

/* How many of uid's processes wait for t: their depth, 1 for a user with no burst (and for the daemon). */
static unsigned target_depth(const PoolTarget *t, uid_t uid) {
        const PoolOwner *o = uid == SCHEDULER_DAEMON_UID ? NULL : target_owner(t, uid);

        return MIN(o ? o->depth : 1, t->pool->size);
}

/* The deepest of the target's users: what its report shows. */
static unsigned target_max_depth(const PoolTarget *t) {
        unsigned d = MIN(1u, t->pool->size);

        for (size_t i = 0; i < t->n_owners; i++)
                d = MAX(d, MIN(t->owners[i].depth, t->pool->size));
        return d;
}

/* Start what is missing of uid's processes for t: as many as uid's depth (the daemon's: one). */
static int target_fill(PoolTarget *t, uid_t uid) {
        Pool *p = t->pool;
        unsigned n = target_n_owned(t, uid);

        /* Sandboxes that keep dying unused (a broken environment, a policy that fails) are not restarted in a
         * loop: after a few, wait a minute. */
        if (t->failures >= MAX_FAILURES) {
                if (now_usec() - t->failed_at < FAILURE_PAUSE_USEC)
                        return 0;
                t->failures = 0;
        }
        /* The one for whoever comes first stays one: the depth follows a user's calls, each user's their own. */
        for (unsigned want = target_depth(t, uid); n < want; n++) {
                PoolEntry *e = calloc(1, sizeof(*e)), **l;
                int k;

                if (!e)
                        return -ENOMEM;
                l = realloc(t->entries, (t->n_entries + 1) * sizeof(*l));
                if (!l) {
                        free(e);
                        return -ENOMEM;
                }
                t->entries = l;
                e->target = t;
                e->owner = uid;
                e->item = (PoolItem) { .in_fd = -EBADF, .out_fd = -EBADF, .ctl_fd = -EBADF, .owner = uid,
                                      .started = now_usec() };
                /* Charged to whom it is for (the daemon's own for whoever comes first), capped like the rest. */
                if (p->sched && scheduler_try_acquire(p->sched, &e->ticket, SCHED_PRESTART, uid) != 0) {
                        free(e);
                        return 0;
                }
                k = t->ops.spawn(t->spec, uid, on_entry_died, e, &e->item);
                if (k != 0) {
                        scheduler_release(&e->ticket);
                        free(e);
                        t->failures++;
                        t->failed_at = now_usec();
                        return k;
                }
                t->entries[t->n_entries++] = e;
        }
        return 0;
}

static void pool_sweep(Pool *p) {
        uint64_t now = now_usec();

        for (size_t i = p->n_targets; i-- > 0;) {
                PoolTarget *t = p->targets[i];
                if (now - t->last_used > POOL_TARGET_IDLE_USEC || (t->ops.check && !t->ops.check(t->spec))) {
                        pool_drop_target(p, i);
                        continue;
                }
                /* A user's burst is over: one fewer of theirs waits (the newest goes, the oldest is the readiest). */
                for (size_t j = t->n_owners; j-- > 0;) {
                        PoolOwner *o = &t->owners[j];
                        uid_t uid = o->uid;
                        if (o->depth <= 1 || now - o->last_short <= POOL_DEPTH_DECAY_USEC)
                                continue;
                        o->depth--;
                        o->last_short = now;
                        for (;;) {
                                PoolEntry *newest = NULL;
                                for (size_t k = 0; k < t->n_entries; k++) {
                                        PoolEntry *e = t->entries[k];
                                        if (e->owner == uid && (!newest || e->item.started > newest->item.started))
                                                newest = e;
                                }
                                if (!newest || target_n_owned(t, uid) <= target_depth(t, uid))
                                        break;
                                target_remove_entry(t, newest);
                                entry_free(newest);
                        }
                }
        }
}

static int on_sweep(sd_event_source *s, uint64_t usec, void *userdata) {
        Pool *p = userdata;

        pool_sweep(p);
        if (p->n_targets == 0)
                return sd_event_source_set_enabled(s, SD_EVENT_OFF);
        (void) sd_event_source_set_time_relative(s, SWEEP_INTERVAL_USEC);
        return sd_event_source_set_enabled(s, SD_EVENT_ON);
}

int pool_new(Pool **ret, sd_event *e, Scheduler *sched, unsigned size) {
        Pool *p = calloc(1, sizeof(*p));

        if (!p)
                return -ENOMEM;
        p->event = sd_event_ref(e);
        p->sched = sched;
        p->size = size;
        *ret = p;
        return 0;
}

void pool_flush(Pool *p) {
        if (!p)
                return;
        while (p->n_targets > 0)
                pool_drop_target(p, p->n_targets - 1);
}

Pool *pool_free(Pool *p) {
        if (!p)
                return NULL;
        pool_flush(p);
        sd_event_source_disable_unref(p->sweep);
        sd_event_unref(p->event);
        free(p);
        return NULL;
}

void pool_set_size(Pool *p, unsigned size) {
        if (p->size != size)
                pool_flush(p);
        p->size = size;
}

unsigned pool_size(const Pool *p) {
        return p ? p->size : 0;
}

static PoolTarget *pool_find(const Pool *p, const char *key, size_t *ret_index) {
        for (size_t i = 0; i < p->n_targets; i++)
                if (streq(p->targets[i]->key, key)) {
                        if (ret_index)
                                *ret_index = i;
                        return p->targets[i];
                }
        return NULL;
}

int pool_refill(Pool *p, const char *key, uid_t uid, const PoolTargetOps *ops, void *spec) {
        PoolTarget *t;

        if (!p || p->size == 0) {
                if (ops->free_spec)
                        ops->free_spec(spec);
                return 0;
        }
        t = pool_find(p, key, NULL);
        if (t) {
                if (t->ops.update)
                        t->ops.update(t->spec, spec);
                if (ops->free_spec)
                        ops->free_spec(spec);
                /* Waiting processes the spec would not start now (it learnt something) make room for ones it would. */
                for (size_t i = t->n_entries; t->ops.keep && i-- > 0;)
                        if (!t->ops.keep(t->spec, &t->entries[i]->item)) {
                                PoolEntry *e = t->entries[i];
                                target_remove_entry(t, e);
                                entry_free(e);
                        }
        } else {
                /* Room for it: the least recently used target of the same uid goes, else the least recently used. */
                if (p->n_targets >= POOL_MAX_TARGETS) {
                        size_t oldest = SIZE_MAX;
                        for (int same = 1; same >= 0 && oldest == SIZE_MAX; same--)
                                for (size_t i = 0; i < p->n_targets; i++)
                                        if ((!same || p->targets[i]->last_uid == uid) &&
                                            (oldest == SIZE_MAX ||
                                             p->targets[i]->last_used < p->targets[oldest]->last_used))
                                                oldest = i;
                        pool_drop_target(p, oldest);
                }
                t = calloc(1, sizeof(*t));
                if (!t || !(t->key = strdup(key))) {
                        free(t);
                        if (ops->free_spec)
                                ops->free_spec(spec);
                        return -ENOMEM;
                }
                t->pool = p;
                t->last_uid = t->shared_taker = SCHEDULER_DAEMON_UID;
                t->ops = *ops;
                t->spec = spec;
                p->targets[p->n_targets++] = t;
        }
        t->last_used = now_usec();
        if (uid != SCHEDULER_DAEMON_UID)
                t->last_uid = uid;

        if (!p->sweep) {
                if (sd_event_add_time_relative(p->event, &p->sweep, CLOCK_MONOTONIC, SWEEP_INTERVAL_USEC,
                                               USEC_PER_SEC, on_sweep, p) >= 0)
                        (void) sd_event_source_set_priority(p->sweep, SD_EVENT_PRIORITY_IDLE);
        } else if (sd_event_source_get_enabled(p->sweep, NULL) == 0) {
                (void) sd_event_source_set_time_relative(p->sweep, SWEEP_INTERVAL_USEC);
                (void) sd_event_source_set_enabled(p->sweep, SD_EVENT_ON);
        }
        return target_fill(t, uid);
}

static bool entry_ready(const PoolEntry *e) {
        struct pollfd pfd = { .fd = e->item.out_fd, .events = POLLIN };

        return e->item.out_fd >= 0 && poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN);
}

/* Not as good as a new one: it ended, or it said something. */
static bool entry_spoilt(const PoolEntry *e) {
        const Process *proc = e->item.proc;

        return !proc || proc->exited || proc->out.total > 0 || proc->err.total > 0;
}

int pool_take(Pool *p, const char *key, uid_t uid, PoolAcceptFunc accept, void *userdata, PoolItem *ret,
              bool *ret_shared) {
        PoolTarget *t;
        PoolEntry *best = NULL;
        bool best_ready = false, best_own = false;
        int best_score = -1;
        size_t idx;
        uint64_t now = now_usec();

        if (!p || p->size == 0)
                return 0;
        t = pool_find(p, key, &idx);
        if (!t) {
                log_debug("No process is started ahead for the target uid " UID_FMT " asks for.", uid);
                return 0;
        }
        if (t->ops.check && !t->ops.check(t->spec)) {
                log_debug("The processes started ahead for a target that changed since are dropped.");
                pool_drop_target(p, idx);
                return 0;
        }
        t->last_used = now;
        t->last_uid = uid;
        for (size_t i = t->n_entries; i-- > 0;) {
                PoolEntry *e = t->entries[i];
                if (entry_spoilt(e)) {
                        log_debug("A process started ahead %s before anyone took it: dropped.",
                                  e->item.proc && !e->item.proc->exited ? "wrote" : "ended");
                        target_remove_entry(t, e);
                        if (t->ops.dropped && e->item.proc && !e->item.proc->exited)
                                t->ops.dropped(t->spec, &e->item);
                        entry_free(e);
                }
        }
        /* The uid's own or the daemon's (unless this uid was the last to take one of those), never another uid's;
         * a ready one before one still starting, then the uid's own before the daemon's, then the best suited. */
        for (size_t i = 0; i < t->n_entries; i++) {
                PoolEntry *e = t->entries[i];
                bool own = e->owner == uid, ready, better;
                int score;

                if (!own && (e->owner != SCHEDULER_DAEMON_UID ||
                             (uid != SCHEDULER_DAEMON_UID && t->shared_taker == uid)))
                        continue;
                score = accept ? accept(&e->item, userdata) : 0;
                if (score < 0)
                        continue;
                ready = entry_ready(e);
                if (!best)
                        better = true;
                else if (ready != best_ready)
                        better = ready;
                else if (own != best_own)
                        better = own;
                else
                        better = score > best_score;
                if (better) {
                        best = e;
                        best_ready = ready;
                        best_own = own;
                        best_score = score;
                }
        }
        /* This user's calls come faster than sandboxes start: keep one more of theirs waiting from now on. */
        PoolOwner *o = uid != SCHEDULER_DAEMON_UID ? target_owner_get(t, uid) : NULL;
        if (o) {
                if ((!best || !best_ready) && o->last_take > 0 && now - o->last_take < POOL_DEPTH_BURST_USEC) {
                        if (o->depth < p->size)
                                o->depth++;
                        o->last_short = now;
                }
                o->last_take = now;
        }
        if (!best) {
                log_debug("None of the %zu process%s started ahead for the target suits uid " UID_FMT ".",
                          t->n_entries, t->n_entries == 1 ? "" : "es", uid);
                return 0;
        }

        Process *proc = best->item.proc;
        target_remove_entry(t, best);
        t->failures = 0;
        proc->done = NULL;
        proc->userdata = NULL;
        *ret = best->item;
        if (!best_own)
                t->shared_taker = uid;
        if (ret_shared)
                *ret_shared = best->owner == SCHEDULER_DAEMON_UID && uid != SCHEDULER_DAEMON_UID;
        scheduler_release(&best->ticket);   /* the taker's run slot covers it from now on */
        free(best);
        return 1;
}

bool pool_in_burst(const Pool *p, const char *key, uid_t uid) {
        PoolTarget *t = p ? pool_find(p, key, NULL) : NULL;

        return t && target_depth(t, uid) > 1;
}

unsigned pool_n_ready(const Pool *p) {
        unsigned n = 0;

        for (size_t i = 0; p && i < p->n_targets; i++)
                n += (unsigned) p->targets[i]->n_entries;
        return n;
}

unsigned pool_n_targets(const Pool *p) {
        return p ? (unsigned) p->n_targets : 0;
}

unsigned pool_n_wanted(const Pool *p) {
        unsigned n = 0;

        for (size_t i = 0; p && i < p->n_targets; i++)
                n += target_max_depth(p->targets[i]);
        return n;
}

void pool_foreach_target(const Pool *p, void (*f)(void *spec, unsigned n_waiting, unsigned depth, void *userdata),
                         void *userdata) {
        for (size_t i = 0; p && i < p->n_targets; i++)
                f(p->targets[i]->spec, (unsigned) p->targets[i]->n_entries, target_max_depth(p->targets[i]),
                  userdata);
}

static int on_item_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        (void) process_timeout(userdata);
        return 0;
}

int pool_item_start(PoolItem *it, sd_event *e, uint64_t timeout_usec) {
        Process *proc = it->proc;

        proc->start_usec = now_usec();
        proc->timer_source = sd_event_source_disable_unref(proc->timer_source);
        if (timeout_usec == 0)
                return 0;
        /* process_free() and the end of the process drop it, as they do the timer process_spawn() makes. */
        return sd_event_add_time_relative(e, &proc->timer_source, CLOCK_MONOTONIC, timeout_usec, 0, on_item_timeout,
                                          proc);
}
