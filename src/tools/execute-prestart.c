/* SPDX-License-Identifier: MIT */
/*
 * Sandboxes started ahead for execute_python (the executor's pool, through the runtime): what decides one (a
 * Prestart: the environment, its Python, the limits, the output caps), the warm imports learnt per user, how one
 * is spawned, and what a job takes from the pool and gives back after its run. check_environment's view of the
 * pool is here too.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "execute-job.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "preimport.h"
#include "strv.h"
#include "time-util.h"
#include "tools.h"

/*
 * What a pre-started sandbox is: all that decides its policy. It is started exactly as a run's sandbox (the
 * same argv builder, limits, cgroup, system call filter), only without the script, and used for one run. The
 * timeout starts at the hand-over; RLIMIT_CPU cannot be reset, so the CPU Python spent starting (a few ms,
 * against a limit counted in seconds) counts towards it, as the memory it holds counts towards memory.max.
 */
/* Warm imports are learnt and kept per user: one user's runs neither show nor change what another's import. */
#define PRESTART_MAX_USERS 64

typedef struct PrestartUser {
        uid_t uid;
        char **imports;                 /* learnt from this user's last run in the environment (preimport.h) */
        bool imports_failed;            /* a sandbox that imported them went unused: none for this user, until */
        char *failed;                   /* ... a run teaches a list other than this one (NULL: any) */
        uint64_t imports_kib;           /* the memory the last one used held once it had imported them ('P') */
        uint64_t used;                  /* when last learnt from: the least recent goes when the table is full */
} PrestartUser;

typedef struct Prestart {
        Runtime *runtime;
        char *env_path, *python, *prefix;
        dev_t dev;
        ino_t ino;
        SandboxLimits limits;
        size_t head_max, tail_max;
        uint64_t import_max_kib;        /* prestart-memory: 0 (or the network on), no warm imports */
        bool learnt;                    /* a new spec: users[0]'s imports is what a run just taught */
        PrestartUser users[PRESTART_MAX_USERS];
        size_t n_users;
} Prestart;

static void prestart_free(void *userdata) {
        Prestart *ps = userdata;

        if (!ps)
                return;
        free(ps->env_path);
        free(ps->python);
        free(ps->prefix);
        for (size_t i = 0; i < ps->n_users; i++) {
                strv_free(ps->users[i].imports);
                free(ps->users[i].failed);
        }
        free(ps);
}

/* uid's entry; with create, made (in place of the least recently used one when the table is full). The daemon
 * has none: what it starts for whoever comes first imports nothing. */
static PrestartUser *prestart_user(Prestart *ps, uid_t uid, bool create) {
        size_t oldest = 0;

        if (uid == SCHEDULER_DAEMON_UID)
                return NULL;
        for (size_t i = 0; i < ps->n_users; i++)
                if (ps->users[i].uid == uid)
                        return &ps->users[i];
        if (!create)
                return NULL;
        if (ps->n_users < PRESTART_MAX_USERS)
                oldest = ps->n_users++;
        else
                for (size_t i = 1; i < ps->n_users; i++)
                        if (ps->users[i].used < ps->users[oldest].used)
                                oldest = i;
        strv_free(ps->users[oldest].imports);
        free(ps->users[oldest].failed);
        ps->users[oldest] = (PrestartUser) { .uid = uid, .used = now_usec() };
        return &ps->users[oldest];
}

/* What a sandbox of ps started for owner imports ahead, comma-separated ("" for nothing): the boot program's
 * MODULES. */
static char *prestart_imports(Prestart *ps, uid_t owner) {
        PrestartUser *u = prestart_user(ps, owner, false);

        if (ps->import_max_kib == 0 || !u || u->imports_failed || !u->imports || !u->imports[0])
                return strdup("");
        return strv_join(u->imports, ",");
}

static void prestart_update(void *userdata, void *new_userdata) {
        Prestart *ps = userdata, *n = new_userdata;
        PrestartUser *u;

        if (n->n_users == 0)
                return;
        u = prestart_user(ps, n->users[0].uid, true);
        if (!u)
                return;
        if (n->users[0].imports_kib > 0)
                u->imports_kib = n->users[0].imports_kib;
        if (!n->learnt)
                return;
        u->used = n->users[0].used;
        /* A list other than the one that failed (the script was changed: a name that was missing is not asked for
         * any more) is tried: one sandbox for each run that teaches one. */
        if (u->imports_failed && u->failed && n->users[0].imports && n->users[0].imports[0]) {
                _cleanup_free_ char *now = strv_join(n->users[0].imports, ",");
                if (now && !streq(now, u->failed)) {
                        u->imports_failed = false;
                        u->failed = mfree(u->failed);
                }
        }
        strv_free(u->imports);
        u->imports = TAKE_PTR(n->users[0].imports);
}

/* A waiting sandbox is kept while it imported what its owner's would import now. */
static bool prestart_keep(void *userdata, const PoolItem *it) {
        _cleanup_free_ char *want = prestart_imports(userdata, it->owner);

        return want && streq(want, strempty(it->tag));
}

/* One that imported modules ended or printed before use: most likely their doing (boot.py exits when an import
 * fails); its owner's import nothing from now on, until a run teaches another list. */
static void prestart_dropped(void *userdata, const PoolItem *it) {
        Prestart *ps = userdata;
        PrestartUser *u;

        if (!it->tag || !it->tag[0] || !(u = prestart_user(ps, it->owner, true)))
                return;
        if (!u->imports_failed)
                log_info("A pre-started sandbox of %s for uid " UID_FMT " went unused after importing %s; its next "
                         "ones import nothing ahead until a run imports otherwise.", ps->env_path, it->owner, it->tag);
        u->imports_failed = true;
        free(u->failed);
        u->failed = strdup(it->tag);   /* NULL: no list is tried again */
}

/* The environment it binds is still the one in the store (not collected, not rebuilt). */
static bool prestart_check(void *userdata) {
        Prestart *ps = userdata;
        struct stat st;

        return stat(ps->env_path, &st) >= 0 && st.st_dev == ps->dev && st.st_ino == ps->ino;
}

static int prestart_spawn(void *userdata, uid_t owner, ProcessDoneFunc done, void *done_userdata, PoolItem *ret) {
        Prestart *ps = userdata;
        SandboxLimits limits = ps->limits;
        _cleanup_close_ int out_r = -EBADF, out_w = -EBADF, in_r = -EBADF, in_w = -EBADF;
        int fds[2];
        _cleanup_free_ char *arg = NULL, *loader = NULL;
        _cleanup_close_ int code_fd = -EBADF;
        int k;

        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        out_r = fds[0];
        out_w = fds[1];
        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        in_r = fds[0];
        in_w = fds[1];
        _cleanup_free_ char *imports = prestart_imports(ps, owner);
        if (!imports)
                return -ENOMEM;
        /* FD:IN:LEARN:CAP (boot.py). The modules go first on IN, not on a command line every local user can read. */
        if (asprintf(&arg, "%d:%d:1:%" PRIu64, out_w, in_r, ps->import_max_kib) < 0) {
                arg = NULL;
                return -ENOMEM;
        }

        const char *boot = execute_boot_arg(ps->runtime, ps->python, &code_fd, &loader);
        char *command[] = { ps->python,         (char *) "-I",
                            (char *) "-B",      (char *) "-c", (char *) boot,
                            arg,                (char *) SANDBOX_WORK_DIR "/script.py", NULL };
        /* network-allow: behind the bridge; the proxy is made for whoever takes the sandbox, from ctl. */
        _cleanup_strv_free_ char **wrapped = NULL;
        _cleanup_close_ int ctl = -EBADF, net_fd = -EBADF;
        k = runtime_network_wrap_later(ps->runtime, command, &ctl, &net_fd, &wrapped);
        if (k < 0)
                return k;
        char *ro[] = { ps->prefix, NULL };
        int pass[4] = { out_w, in_r };
        size_t n_pass = 2;
        if (net_fd >= 0)
                pass[n_pass++] = net_fd;
        if (code_fd >= 0)
                pass[n_pass++] = code_fd;
        limits.owner = owner;   /* in the cgroup group of the user it is for, or the daemon's */
        k = runtime_spawn_sandboxed_with_fds(ps->runtime, ps->env_path, streq(ps->prefix, "/usr") ? NULL : ro, NULL,
                                             0, pass, n_pass, wrapped ?: command, 0, &limits,
                                             ps->head_max, ps->tail_max, done, done_userdata, &ret->proc);
        if (k != 0)
                return k;   /* RUNTIME_NO_SANDBOX (PoolSpawnFunc's outcome): the pool has nothing to start */
        ret->ctl_fd = TAKE_FD(ctl);
        (void) fcntl(out_r, F_SETFL, O_NONBLOCK);
        (void) fcntl(in_w, F_SETFL, O_NONBLOCK);
        /* A line of at most PREIMPORT_MAX_LINE bytes: far less than the pipe holds. */
        size_t n = strlen(imports);
        imports[n] = '\n';
        if (write(in_w, imports, n + 1) != (ssize_t) (n + 1))
                return -EIO;
        imports[n] = 0;
        ret->in_fd = TAKE_FD(in_w);
        ret->out_fd = TAKE_FD(out_r);
        ret->tag = TAKE_PTR(imports);
        return 0;
}

static const PoolTargetOps prestart_ops = {
        .spawn = prestart_spawn,
        .check = prestart_check,
        .free_spec = prestart_free,
        .update = prestart_update,
        .keep = prestart_keep,
        .dropped = prestart_dropped,
};

void execute_output_caps(const Config *c, size_t *ret_head, size_t *ret_tail) {
        size_t cap = c->output_cap / 2;   /* per stream */

        *ret_head = cap / 4;
        *ret_tail = cap - cap / 4;
}

/* What decides a pre-started sandbox beyond the settings (a reload flushes the pool): NULL if none fits. */
static char *prestart_key(const Config *c, const char *env_path, const char *prefix, const struct stat *st) {
        size_t head, tail;
        char *key = NULL;

        execute_output_caps(c, &head, &tail);
        if (asprintf(&key, "%s\n%s\n%" PRIu64 ":%" PRIu64 "\n%zu:%zu", env_path, prefix, (uint64_t) st->st_dev,
                     (uint64_t) st->st_ino, head, tail) < 0)
                return NULL;
        return key;
}

static int prestart_learnt(Runtime *r, const char *env_path, const char *prefix, uid_t uid, char **imports,
                           uint64_t imports_kib) {
        const Config *c = runtime_config(r);
        _cleanup_free_ char *key = NULL;
        Prestart *ps;
        struct stat st;

        if (pool_size(runtime_pool(r)) == 0) {
                strv_free(imports);
                return 0;
        }
        if (stat(env_path, &st) < 0) {
                strv_free(imports);
                return -errno;
        }
        key = prestart_key(c, env_path, prefix, &st);
        ps = calloc(1, sizeof(*ps));
        if (!key || !ps) {
                free(ps);
                strv_free(imports);
                return -ENOMEM;
        }
        ps->learnt = imports != NULL;
        if (uid != SCHEDULER_DAEMON_UID) {
                ps->users[0] = (PrestartUser) { .uid = uid, .imports = imports, .imports_kib = imports_kib,
                                                .used = now_usec() };
                ps->n_users = 1;
        } else
                strv_free(imports);
        /* With the network on, no warm imports: nothing a module does at import time runs before its user's
         * connections are theirs (network-allow's proxy is made at the hand-over). */
        ps->import_max_kib = c->network || runtime_network_allowlisted(r) ? 0 : c->prestart_memory / 1024;
        ps->runtime = r;
        ps->env_path = strdup(env_path);
        ps->prefix = strdup(prefix);
        if (asprintf(&ps->python, "%s/bin/python", env_path) < 0)
                ps->python = NULL;
        if (!ps->env_path || !ps->prefix || !ps->python) {
                prestart_free(ps);
                return -ENOMEM;
        }
        ps->dev = st.st_dev;
        ps->ino = st.st_ino;
        sandbox_limits_from_config(c, &ps->limits);
        execute_output_caps(c, &ps->head_max, &ps->tail_max);
        return pool_refill(runtime_pool(r), key, uid, &prestart_ops, ps);
}

int execute_python_prestart(Runtime *r, const char *env_path, const char *prefix) {
        return prestart_learnt(r, env_path, prefix, SCHEDULER_DAEMON_UID, NULL, 0);
}

typedef struct PoolJson {
        json_object *targets;
        uid_t uid;
} PoolJson;

/* An environment's pool as uid may see it: its own warm imports only. */
static void prestart_target_json(void *userdata, unsigned n_waiting, unsigned depth, void *arg) {
        Prestart *ps = userdata;
        PoolJson *pj = arg;
        json_object *o = json_object_new_object(), *imports = json_object_new_array();
        _cleanup_free_ char *now = prestart_imports(ps, pj->uid);
        PrestartUser *u = prestart_user(ps, pj->uid, false);
        const char *slash = strrchr(ps->env_path, '/');

        json_add_string(o, "environment", slash ? slash + 1 : ps->env_path);
        json_add_int(o, "waiting", n_waiting);
        json_add_int(o, "depth", depth);
        for (size_t i = 0; now && now[0] && u && u->imports && u->imports[i]; i++)
                json_object_array_add(imports, json_object_new_string(u->imports[i]));
        json_add(o, "warm_imports", imports);
        if (u && u->imports_kib > 0)   /* what one held, the last time one was used */
                json_add_int(o, "warm_imports_memory_bytes", (int64_t) (u->imports_kib * 1024));
        if (u && u->imports_failed)
                json_add_bool(o, "warm_imports_off", true);
        json_object_array_add(pj->targets, o);
}

json_object *execute_python_pool_json(Runtime *r, uid_t uid) {
        const Config *c = runtime_config(r);
        Pool *p = runtime_pool(r);
        json_object *o = json_object_new_object();
        PoolJson pj = { .targets = json_object_new_array(), .uid = uid };
        bool network = c->network || runtime_network_allowlisted(r);

        json_add_int(o, "max_per_environment", pool_size(p));
        json_add_int(o, "waiting", pool_n_ready(p));
        json_add_int(o, "wanted", pool_n_wanted(p));
        json_add_int(o, "warm_import_memory_max_bytes", network ? 0 : (int64_t) c->prestart_memory);
        pool_foreach_target(p, prestart_target_json, &pj);
        json_add(o, "environments", pj.targets);
        return o;
}

void execute_job_pool_key(Job *j) {
        const Config *c = runtime_config(j->runtime);
        SandboxLimits configured;
        struct stat st;

        if (pool_size(runtime_pool(j->runtime)) == 0)
                return;
        sandbox_limits_from_config(c, &configured);
        if (!sandbox_limits_equal(&configured, &j->limits) || stat(j->env_path, &st) < 0)
                return;
        j->pool_key = prestart_key(c, j->env_path, j->plan->python->prefix, &st);
}

void execute_job_refill(Job *j) {
        char **imports = NULL;
        const char *loaded;
        int k;

        if (!j->pool_key)
                return;
        /* A script that starts with imports says what the environment's scripts import; one that does not, nothing. */
        loaded = outputs_loaded_modules(j->outputs);
        if (loaded && j->script_modules && j->script_modules[0])
                imports = preimport_learn(j->script_modules, loaded);
        uint64_t kib = 0;
        (void) outputs_preimported(j->outputs, &kib);
        /* The caller's next run gets one of its own; an environment without dependencies, everybody's hello world,
         * also keeps one for whoever comes first (as at start-up), unless it has one. */
        k = prestart_learnt(j->runtime, j->env_path, j->plan->python->prefix, j->call->uid, imports,
                            j->prestarted ? kib : 0);
        if (k == 0 && j->plan->requirements.n == 0)
                k = prestart_learnt(j->runtime, j->env_path, j->plan->python->prefix, SCHEDULER_DAEMON_UID, NULL, 0);
        if (k < 0)
                log_debug_errno(k, "Failed to start a sandbox ahead for the next run: %m");
}

/* The environment's site-packages directory, lib/pythonX.Y/site-packages, whichever X.Y uv made. NULL: none, or out
 * of memory. */
static char *site_packages_dir(const char *env_path) {
        _cleanup_free_ char *lib = NULL;
        char *site = NULL;
        struct dirent *de;
        DIR *d;

        if (asprintf(&lib, "%s/lib", env_path) < 0 || !(d = opendir(lib)))
                return NULL;
        while (!site && (de = readdir(d)))
                if (startswith(de->d_name, "python") && asprintf(&site, "%s/%s/site-packages", lib, de->d_name) < 0)
                        site = NULL;
        closedir(d);
        return site;
}

/*
 * The top-level names an environment's site-packages provides (a package directory, a module's file, an extension
 * module), separated by spaces: what a run of it could report as loaded from there ('M'). Read from the store,
 * which the daemon built and no sandbox can change. NULL: none, or out of memory.
 */
static char *site_packages_names(const char *env_path) {
        _cleanup_free_ char *site = site_packages_dir(env_path);
        char *names = NULL;
        size_t len_names = 0;
        struct dirent *de;
        DIR *d;

        if (!site || !(d = opendir(site)))
                return NULL;
        while ((de = readdir(d))) {
                const char *n = de->d_name, *dot = strchr(n, '.');
                size_t len = dot ? (size_t) (dot - n) : strlen(n);

                /* name/, name.py, name.cpython-311-x86_64-linux-gnu.so, name.abi3.so; not metadata, not .pth. */
                if (len == 0 || streq(n, "__pycache__") || (dot && !streq(dot, ".py") && !endswith(dot, ".so")))
                        continue;
                if (strextendf_len(&names, &len_names, "%s%.*s", names ? " " : "", (int) len, n) < 0) {
                        names = mfree(names);
                        break;
                }
        }
        closedir(d);
        return names;
}

void execute_job_warm_early(Job *j, const char *taken) {
        Runtime *r = j->runtime;
        const Config *c = runtime_config(r);
        _cleanup_free_ char *names = NULL, *joined = NULL;
        char **imports;

        /* Only where the next sandbox would import something ahead: a pool, a script that may be handed one, no
         * network, memory for it. */
        if (!j->pool_key || !j->plain_enough || !j->script_modules || !j->script_modules[0] ||
            c->prestart_memory == 0 || c->network || runtime_network_allowlisted(r))
                return;
        names = site_packages_names(j->env_path);
        if (!names)
                return;
        imports = preimport_learn(j->script_modules, names);
        joined = imports && imports[0] ? strv_join(imports, ",") : NULL;
        /* Nothing of the environment's, or what the sandbox the run took had imported already: after the reply, as
         * before. */
        if (!joined || streq(joined, strempty(taken))) {
                strv_free(imports);
                return;
        }
        if (prestart_learnt(r, j->env_path, j->plan->python->prefix, j->call->uid, imports, 0) < 0)
                log_debug("Failed to start a sandbox ahead, importing %s, beside the run that does.", joined);
}

/* A waiting sandbox suits the job when what it imported is what the script imports first (preimport.h). One
 * started for whoever comes first must have gone into its cgroups first: it moves into the taker's group whole,
 * or not at all (runtime_move_to_owner()); one still on its way stays for the next. */
static int job_accept(const PoolItem *it, void *userdata) {
        Job *j = userdata;
        _cleanup_strv_free_ char **pre = NULL;

        if (it->owner != j->call->uid && !process_settled(it->proc)) {
                log_debug("execute_python for uid " UID_FMT ": the sandbox started ahead for whoever comes first "
                          "is still entering its cgroups, a fresh sandbox instead.", j->call->uid);
                return -1;
        }
        if (!it->tag || !it->tag[0])
                return 0;
        if (!j->plain_enough)
                return -1;
        pre = strv_split(it->tag, ",");
        if (!pre || !preimport_is_prefix(pre, j->script_modules))
                return -1;
        return (int) strv_length(pre);
}

bool execute_job_take_prestarted(Job *j) {
        Runtime *r = j->runtime;
        PoolItem it = { .in_fd = -EBADF, .out_fd = -EBADF, .ctl_fd = -EBADF };
        ssize_t n;
        int size;

        /* A script larger than a pipe holds goes to a fresh sandbox: the hand-over is one write. */
        if (!j->pool_key || j->script_len > 65536)
                return false;
        j->script_modules = preimport_leading_modules(j->script, j->script_len);
        j->plain_enough = j->script_modules && preimport_script_plain_enough(j->script, j->script_len);
        if (pool_take(runtime_pool(r), j->pool_key, j->call->uid, job_accept, j, &it, &j->prestart_shared) <= 0)
                return false;
        /* The script must fit the pipe in one write: the loop never waits on a sandbox. Else a fresh one. (The line
         * of modules before it may still be in the pipe.) */
        size = fcntl(it.in_fd, F_GETPIPE_SZ);
        if (size < 0 || j->script_len + strlen(strempty(it.tag)) + 1 > (size_t) size) {
                log_debug("execute_python for uid " UID_FMT ": the script does not fit the pre-started sandbox's "
                          "pipe, a fresh sandbox instead.", j->call->uid);
                pool_item_done(&it);
                return false;
        }
        /* One started for whoever came first waited in the daemon's group: it goes into its user's before it has
         * the script (which then starts, and may fork), so that all the run does is charged to its user. A sandbox
         * that cannot move is no sandbox of theirs: dropped (torn down off the loop), and a fresh one instead. */
        if (j->prestart_shared && runtime_move_to_owner(r, it.proc, j->call->uid) < 0) {
                process_detach(TAKE_PTR(it.proc));
                pool_item_done(&it);
                return false;
        }
        /* network-allow: the sandbox's proxy becomes the caller's now (a reload flushes the pool: the two agree). */
        if ((it.ctl_fd >= 0) != runtime_network_allowlisted(r) ||
            (it.ctl_fd >= 0 && runtime_network_adopt(r, j->call->uid, TAKE_FD(it.ctl_fd), &j->netproxy) < 0)) {
                log_debug("execute_python for uid " UID_FMT ": the pre-started sandbox's network does not match the "
                          "settings, a fresh sandbox instead.", j->call->uid);
                pool_item_done(&it);
                return false;
        }
        it.proc->done = execute_job_on_run_done;
        it.proc->userdata = j;
        if (pool_item_start(&it, runtime_event(r), j->timeout_usec) < 0) {
                log_debug("execute_python for uid " UID_FMT ": the pre-started sandbox could not be started on the "
                          "run, a fresh sandbox instead.", j->call->uid);
                pool_item_done(&it);
                j->netproxy = net_proxy_free(j->netproxy);
                return false;
        }
        n = j->script_len > 0 ? write(it.in_fd, j->script, j->script_len) : 0;
        if (n < 0 || (size_t) n != j->script_len ||
            sd_event_add_io(runtime_event(r), &j->out_source, it.out_fd, EPOLLIN, execute_job_on_outputs, j) < 0) {
                log_debug("execute_python for uid " UID_FMT ": the script could not be handed to the pre-started "
                          "sandbox, a fresh sandbox instead.", j->call->uid);
                j->out_source = sd_event_source_disable_unref(j->out_source);
                pool_item_done(&it);
                j->netproxy = net_proxy_free(j->netproxy);
                return false;
        }
        it.in_fd = safe_close(it.in_fd);   /* EOF: the script is all there */
        j->proc = TAKE_PTR(it.proc);
        j->proc->flush_on_timeout = true;   /* stdout is buffered (boot.py's flush()) */
        j->out_fd = TAKE_FD(it.out_fd);
        j->prestarted = true;
        /* During a burst the replacement starts now, beside the run: a client calling back to back finds it further
         * along. Otherwise after the reply (job_refill(), which also brings in what the run taught), so that its
         * start-up does not compete with the run for the CPU. */
        if (pool_in_burst(runtime_pool(r), j->pool_key, j->call->uid) &&
            prestart_learnt(r, j->env_path, j->plan->python->prefix, j->call->uid, NULL, 0) != 0)
                log_debug("Failed to start a sandbox ahead for the next run.");
        log_debug("execute_python for uid " UID_FMT ": running in a pre-started sandbox (warm imports: %s).",
                  j->call->uid, it.tag && it.tag[0] ? it.tag : "none");
        execute_job_warm_early(j, it.tag);
        it.tag = mfree(it.tag);
        /* It was there for whoever came first: another goes back now, for the next user to come. */
        if (j->prestart_shared &&
            prestart_learnt(r, j->env_path, j->plan->python->prefix, SCHEDULER_DAEMON_UID, NULL, 0) != 0)
                log_debug("Failed to start a sandbox ahead for the next user.");
        return true;
}
