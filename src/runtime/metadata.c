/* SPDX-License-Identifier: MIT */
/*
 * The metadata reader: a PEP 723 block read by the interpreter's own TOML parser (tomllib, metadata-reader.py)
 * in a process the owner's spawn function starts (the Runtime's: a sandbox), one at a time per helper place of the
 * scheduler, with the answers cached by the block's hash and always delivered through the event loop. At the end,
 * the Runtime's reader (runtime_parse_toml()).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs-util.h"
#include "json-util.h"
#include "jsonrpc/jsonrpc.h"
#include "log.h"
#include "macro.h"
#include "metadata.h"
#include "pep723/toml-subset.h"
#include "programs.h"
#include "runtime-internal.h"
#include "sha256.h"

typedef struct TomlCacheEntry {
        char hash[65];
        json_object *result;    /* {"doc": ...} or {"error": ...} */
        size_t cost;            /* bytes, as metadata.h counts them */
} TomlCacheEntry;

struct MetadataReader {
        sd_event *event;
        Scheduler *sched;
        const Pythons *pythons;
        MetadataSpawnFunc spawn;
        void *userdata;

        TomlCacheEntry toml_cache[METADATA_CACHE_SIZE];
        size_t toml_cache_next;
        size_t toml_cache_cost;         /* of all entries; at most METADATA_CACHE_MAX_COST */
        TomlRequest *toml_requests;
};

struct TomlRequest {
        MetadataReader *reader;
        TomlRequest *next, *prev;
        char hash[65];
        Process *proc;
        sd_event_source *defer;
        json_object *result;
        TomlParsedFunc cb;
        void *userdata;
        SchedTicket helper;             /* the metadata reader's place (SCHED_HELPER), charged to the caller */
        char *toml;                     /* kept while it waits for that place */
};

int metadata_reader_new(MetadataReader **ret, sd_event *event, Scheduler *sched, const Pythons *pythons,
                        MetadataSpawnFunc spawn, void *userdata) {
        MetadataReader *m = calloc(1, sizeof(*m));

        if (!m)
                return -ENOMEM;
        *m = (MetadataReader) { .event = sd_event_ref(event), .sched = sched, .pythons = pythons, .spawn = spawn,
                                .userdata = userdata };
        *ret = m;
        return 0;
}

static void toml_request_free(TomlRequest *q) {
        MetadataReader *r = q->reader;

        if (q->prev)
                q->prev->next = q->next;
        else
                r->toml_requests = q->next;
        if (q->next)
                q->next->prev = q->prev;
        process_free(q->proc);
        scheduler_release(&q->helper);
        sd_event_source_disable_unref(q->defer);
        json_object_put(q->result);
        free(q->toml);
        free(q);
}

MetadataReader *metadata_reader_free(MetadataReader *r) {
        if (!r)
                return NULL;
        /* Waiting readers first: cancelling a running one must not start them. */
        for (TomlRequest *q = r->toml_requests; q; q = q->next)
                if (sched_ticket_waiting(&q->helper))
                        scheduler_release(&q->helper);
        while (r->toml_requests)
                runtime_toml_cancel(r->toml_requests);
        for (size_t i = 0; i < METADATA_CACHE_SIZE; i++)
                json_object_put(r->toml_cache[i].result);
        sd_event_unref(r->event);
        free(r);
        return NULL;
}

void runtime_toml_cancel(TomlRequest *q) {
        if (q)
                toml_request_free(q);
}

static void toml_deliver(TomlRequest *q) {
        json_object *doc = json_get(q->result, "doc", json_type_object);
        const char *error = json_get_string(q->result, "error");

        if (!doc && !error)
                error = "the metadata could not be read";
        q->cb(doc, error, q->userdata);
        toml_request_free(q);
}

static int on_toml_defer(sd_event_source *s, void *userdata) {
        toml_deliver(userdata);
        return 0;
}

/* Keep an answer that costs cost (no more than an answer may), the oldest ones going to make room. */
static void toml_cache_add(MetadataReader *r, const char *hash, json_object *result, size_t cost) {
        TomlCacheEntry *e;

        for (size_t i = 0; i < METADATA_CACHE_SIZE; i++) {
                e = &r->toml_cache[r->toml_cache_next++ % METADATA_CACHE_SIZE];
                r->toml_cache_cost -= e->cost;
                json_object_put(e->result);
                *e = (TomlCacheEntry) {};
                if (r->toml_cache_cost + cost <= METADATA_CACHE_MAX_COST)
                        break;
        }
        memcpy(e->hash, hash, 65);
        e->result = json_object_get(result);
        e->cost = cost;
        r->toml_cache_cost += cost;
}

static void on_toml_done(Process *p, void *userdata) {
        TomlRequest *q = userdata;
        MetadataReader *r = q->reader;
        size_t len = 0, cost = 0;
        _cleanup_free_ char *out = capture_text(&p->out, &len);

        if (out && p->exit_code == 0) {
                /* Counted before it is parsed: what the parse would build is the cost. */
                size_t values = len > METADATA_ANSWER_MAX_BYTES ? 0 :
                                jsonrpc_count_elements(out, len, METADATA_ANSWER_MAX_VALUES);
                if (len <= METADATA_ANSWER_MAX_BYTES && values <= METADATA_ANSWER_MAX_VALUES) {
                        q->result = json_tokener_parse(out);
                        cost = len + values * METADATA_VALUE_COST;
                } else {
                        char error[200];
                        snprintf(error, sizeof(error), "it is too large: the service reads at most %u values and "
                                 "%u KiB from a block, enough for some hundreds of dependencies",
                                 METADATA_ANSWER_MAX_VALUES, METADATA_ANSWER_MAX_BYTES / 1024);
                        q->result = json_object_new_object();
                        json_add_string(q->result, "error", error);
                        cost = sizeof(error);
                }
        }
        if (!q->result) {
                _cleanup_free_ char *err = capture_text(&p->err, NULL);
                log_warning("The metadata reader failed (exit %d): %s", p->exit_code, strempty(err));
                q->result = json_object_new_object();
                json_add_string(q->result, "error", "the metadata reader failed; see the daemon's log");
        } else
                /* Remember the answer: a block seen before costs no process. */
                toml_cache_add(r, q->hash, q->result, cost);
        q->proc = NULL;
        process_free(p);
        scheduler_release(&q->helper);
        toml_deliver(q);
}

static const Python *toml_python(const MetadataReader *r) {
        /* tomllib arrived in 3.11. */
        for (size_t i = 0; i < r->pythons->n; i++)
                if (r->pythons->items[i]->parsed.n_release >= 2 && r->pythons->items[i]->parsed.release[0] == 3 &&
                    r->pythons->items[i]->parsed.release[1] >= 11)
                        return r->pythons->items[i];
        return NULL;
}

/* Through the loop: never a callback from inside metadata_reader_parse(). */
static void toml_fail(TomlRequest *q, const char *error) {
        json_object_put(q->result);
        q->result = json_object_new_object();
        json_add_string(q->result, "error", error);
        scheduler_release(&q->helper);
        if (sd_event_add_defer(q->reader->event, &q->defer, on_toml_defer, q) < 0)
                toml_deliver(q);
}

/* The reader's place is ours: start it. */
static void on_toml_helper(SchedTicket *t, void *userdata) {
        TomlRequest *q = userdata;
        MetadataReader *r = q->reader;
        const Python *py = toml_python(r);
        int k;

        if (!py)
                return toml_fail(q, "reading script metadata needs Python 3.11 or newer on the server, and there is none");
        _cleanup_close_ int fd = memfd_with("metadata.toml", q->toml, strlen(q->toml));
        if (fd < 0)
                return toml_fail(q, "the metadata reader could not be started");
        SandboxData data = { .fd = fd, .dest = METADATA_READER_PATH };
        char *command[] = { py->executable, (char *) "-I", (char *) "-S", (char *) "-c",
                            (char *) metadata_reader_code, (char *) data.dest, NULL };
        log_debug("Reading a metadata block (%.12s) with %s's tomllib.", q->hash, command[0]);
        k = r->spawn(r->userdata, py, &data, command, on_toml_done, q, &q->proc);
        if (k == RUNTIME_NO_SANDBOX) {
                log_warning("Failed to start the metadata reader: the sandbox does not work.");
                toml_fail(q, "the sandbox does not work on this server");
        } else if (k < 0) {
                log_warning_errno(k, "Failed to start the metadata reader: %m");
                toml_fail(q, "the metadata reader could not be started");
        } else if (k > 0)
                toml_fail(q, "the metadata reader could not be started");   /* no other outcome is documented */
}

int metadata_reader_parse(MetadataReader *r, uid_t uid, const char *toml, TomlParsedFunc cb, void *userdata,
                          TomlRequest **ret) {
        TomlRequest *q;
        int k;

        q = calloc(1, sizeof(*q));
        if (!q)
                return -ENOMEM;
        *q = (TomlRequest) { .reader = r, .cb = cb, .userdata = userdata, .next = r->toml_requests };
        if (r->toml_requests)
                r->toml_requests->prev = q;
        r->toml_requests = q;
        sha256_hex(toml, strlen(toml), q->hash);

        for (size_t i = 0; i < METADATA_CACHE_SIZE; i++)
                if (r->toml_cache[i].result && streq(r->toml_cache[i].hash, q->hash)) {
                        q->result = json_object_get(r->toml_cache[i].result);
                        break;
                }
        if (!q->result) {
                /* The blocks people write are read here, as tomllib reads them (pep723/toml-subset.h): no reader. */
                json_object *doc = NULL;
                k = toml_subset_parse(toml, &doc);
                if (k > 0) {
                        q->result = json_object_new_object();
                        if (!q->result || json_object_object_add(q->result, "doc", doc) < 0)
                                k = -ENOMEM;
                        else
                                log_debug("Read a metadata block (%.12s) in the daemon.", q->hash);
                }
                if (k < 0) {
                        json_object_put(doc);
                        toml_request_free(q);
                        return k;
                }
        }
        if (!q->result && !toml_python(r)) {
                q->result = json_object_new_object();
                json_add_string(q->result, "error",
                                "reading script metadata needs Python 3.11 or newer on the server, and there is none");
        }
        if (q->result) {
                k = sd_event_add_defer(r->event, &q->defer, on_toml_defer, q);
                if (k < 0) {
                        toml_request_free(q);
                        return k;
                }
                *ret = q;
                return 0;
        }

        q->toml = strdup(toml);
        if (!q->toml) {
                toml_request_free(q);
                return -ENOMEM;
        }
        /* One reader sandbox per block, and no more of them at once than the caps allow: a flood of distinct
         * blocks waits here, round robin among the users who sent them. */
        *ret = q;
        k = scheduler_acquire(r->sched, &q->helper, SCHED_HELPER, uid, on_toml_helper, q);
        if (k == 0)
                on_toml_helper(&q->helper, q);   /* delivers through the loop only */
        else if (k != SCHEDULER_QUEUED) {
                toml_request_free(q);
                *ret = NULL;
                return k < 0 ? k : -ENOMEM;   /* the helper queue has no cap: not reached */
        }
        return 0;
}

/* ---- the Runtime's reader: in the sandbox ------------------------------------ */

static int spawn_reader(void *userdata, const Python *py, const SandboxData *data, char *const *command,
                        ProcessDoneFunc done, void *done_userdata, Process **ret) {
        Runtime *r = userdata;
        char *prefix[] = { py->prefix, NULL };

        return runtime_spawn_sandboxed(r, NULL, streq(py->prefix, "/usr") ? NULL : prefix, data, 1, command,
                                       15 * USEC_PER_SEC, NULL, 1024 * 1024, 0, done, done_userdata, ret);
}

int runtime_metadata_setup(Runtime *r) {
        return metadata_reader_new(&r->metadata, r->event, r->sched, &r->pythons, spawn_reader, r);
}

int runtime_parse_toml(Runtime *r, uid_t uid, const char *toml, TomlParsedFunc cb, void *userdata, TomlRequest **ret) {
        return metadata_reader_parse(r->metadata, uid, toml, cb, userdata, ret);
}
