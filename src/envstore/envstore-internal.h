/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What the pieces of the environment store share, and nothing outside src/envstore/ includes: the store's and a
 * build's state, the markers in an environment, the lock files of work directories (envstore.c), uv's environment
 * (build.c), build slots and the warm-up (slot.c), the compile queue (compile.c) and the cache's upkeep (gc.c).
 * The interface others use is envstore.h.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "envstore.h"
#include "envstore/layout.h"
#include "executor/offloop.h"
#include "envstore/storewalk.h"
#include "executor/process.h"
#include "scheduler/scheduler.h"
#include "sha256.h"

#define MARKER ".mcp-python-sandbox-env.json"
/* The bytecode of the environment was compiled (after it was put in place, see envstore_compile_later()). */
#define COMPILED ".mcp-python-sandbox-compiled"

typedef struct Build Build;

/* The environments held (envstore_hold()): shared with the holds, which may outlive the store. */
typedef struct EnvHoldList {
        unsigned n_ref;
        EnvHold *first;
} EnvHoldList;

struct EnvHold {
        EnvHoldList *list;
        EnvHold *prev, *next;
        char name[65];
        int lock_fd;            /* the environment's directory, flock()ed shared: other daemons' walks leave it
                                 * alone too; one of the holds of a name has it */
};

struct EnvWaiter {
        EnvWaiter *next;
        Build *build;
        EnvReadyFunc cb;
        void *userdata;
};

struct Build {
        EnvStore *store;
        Build *next;
        char key[65];
        char *tmp, *final;
        char *lock_path;
        int lock_fd;            /* flock()ed while the build runs: other daemons on this store leave tmp alone */
        char *python;
        char **requirements;
        Process *proc;
        uid_t uid;              /* whose call asked first: the build, then its compile, are charged to it */
        SchedTicket ticket;     /* SCHED_BUILD, charged to the uid of the call that asked first; waits, then held */
        bool installing;        /* second step: uv pip install */
        char *venv_template;    /* what `uv venv` makes for this Python, kept to copy (uv builds); NULL: bare */
        char **names;           /* the requirements' names */
        bool offline;           /* this install resolves from the uv cache only (build_offline_first()) */
        bool online;            /* the offline install failed: this is the build again, online */
        EnvLayout layout;       /* what the venv step made (layout.h) */
        OffLoopJob *preparing;  /* the first step with packages (the slot emptied, the template copied), in a child */
        OffLoopJob *finishing;  /* the last step (build_complete()), in a child */
        EnvWaiter *waiters;
        uint64_t start_usec;
        sd_event_source *defer;
        int error;
        char *message;
};

struct EnvSizesWaiter {
        EnvSizesWaiter *next;
        EnvStore *store;
        EnvSizesFunc cb;
        void *userdata;
};

struct EnvStore {
        sd_event *event;
        const Config *config;
        Scheduler *sched;
        Reaper *reaper;
        char *uv;
        char *uv_version;
        char *uv_refused;               /* why uv is not used (too old), or NULL */
        char *root, *envs, *uv_cache, *empty;
        Build *builds;
        unsigned n_building;
        uint64_t n_tmp;
        sd_event_source *prune_timer;
        Process *prune;
        EnvHoldList *holds;
        Process *shrink;                /* uv cache clean: the store is over its budget with nothing more to collect */
        char **shrink_packages;         /* what it is to clean when no build runs; NULL with shrink_all: all */
        bool shrink_all, shrink_pending;
        unsigned n_shrinks;             /* since the store was last under its budget or a build ended */
        bool over_logged;               /* "over its budget" said once, until it is under again */
        StoreWalkJob *walk;             /* the one disk walk (and collection) in flight */
        bool walk_again;                /* something changed meanwhile: walk once more after it */
        EnvSizesWaiter *sizes_waiters;
        EnvSizes sizes;                 /* from the last walk */
        uint64_t sizes_usec;            /* when it ended; 0: never */
        sd_event_source *gc_timer;
        char *compile_lock_path;
        int compile_lock_fd;
        char **compile_queue;           /* environments whose bytecode is still to be compiled, oldest first */
        char **compile_pythons;         /* the interpreter of each */
        uid_t *compile_uids;            /* and whose call built it: the compile is charged to them */
        uid_t compiling_uid;            /* whose the compile under way is */
        SchedTicket compile_ticket;     /* SCHED_COMPILE for the compile at the head of the queue, then running */
        SchedTicket walk_ticket;        /* SCHED_WALK, the daemon's: held while the walk runs */
        char *compiling;
        char *compiling_python;
        char *compile_out;              /* the scratch directory the sandboxed compile writes to */
        Process *compile;
        OffLoopJob *adopt;              /* then its bytecode put in place, in a child */
        uint64_t compile_usec;
        bool compile_partial;
        EnvCompileFunc compile_spawn;
        void *compile_userdata;
        Process *warm;                  /* slot_warm(): uv venv, then uv pip freeze, in a slot of its own */
        bool warm_freezing;
        char *warm_slot, *warm_template, *warm_lock_path;
        int warm_lock_fd;
        char **warmed;                  /* the Pythons (executables) done */
        char *warm_python, *warm_python_version;
        SchedTicket warm_ticket;        /* SCHED_BUILD, charged to whose call started it */
};

/* envstore.c */
int lock_entry(EnvStore *s, const char *name, char **ret_path);
void unlock_entry(char **path, int *fd);
void hash_str(Sha256 *h, const char *label, const char *value);

/* build.c */
void build_free(Build *b);
char **uv_environment(const EnvStore *s);

/* slot.c */
int build_take_slot(Build *b, const Python *py);
int venv_template_copy(Build *b);
void venv_template_save(Build *b);
void slot_warm(EnvStore *s, uid_t uid, const Python *py);
void slot_warm_clear(EnvStore *s);

/* compile.c */
void envstore_compile_later(EnvStore *s, const char *path, const char *python, uid_t uid);
void envstore_compile_next(EnvStore *s);
void compile_clear(EnvStore *s);

/* gc.c */
void envstore_prune_later(EnvStore *s);
void shrink_start(EnvStore *s);
