/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Every daemon setting lives in one table: the same name is a key in the
 * configuration file and a --long-option on the command line (which wins).
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <stdio.h>

/* A range of host uids, first..last inclusive. */
typedef struct UidRange {
        uint32_t first, last;
} UidRange;

/* A yes/no setting whose default follows from others ("auto"). */
#define CONFIG_AUTO (-1)

typedef struct Config {
        /* Serving */
        char *listen_path;              /* --listen: create and serve this socket */
        bool stdio;                     /* --stdio: one session on stdin/stdout */
        uint64_t exit_idle_usec;        /* 0: never */
        uint64_t max_connections;
        char **allowed_users;           /* names or uids; with allowed_groups empty too: anyone who can connect */
        char **allowed_groups;          /* names or gids (primary or supplementary) */
        /* The two above as ids, resolved when the configuration is read (config_resolve_access()): connecting
         * clients are checked against these, with no NSS lookup in the event loop. */
        uid_t *allowed_uids;
        size_t n_allowed_uids;
        gid_t *allowed_gids;
        size_t n_allowed_gids;
        uint64_t max_message_size;
        uint64_t max_calls_per_connection;
        uint64_t max_connections_per_user;      /* 0: max_connections */
        uint64_t max_message_elements;  /* JSON values in one message; 0: no limit */
        uint64_t max_reply_buffer;      /* unread reply bytes per connection; 0: no limit */
        uint64_t max_reply_buffer_per_user;     /* the same for all of one uid's connections; 0: no limit */
        uint64_t max_input_buffer_per_user;     /* bytes of unfinished lines of one uid's connections; 0: no limit */
        uint64_t max_call_buffer_per_user;      /* bytes the tool calls in progress of one uid hold; 0: no limit */
        uint64_t initialize_timeout_usec;       /* a connection must start a session this soon; 0: never */
        uint64_t line_timeout_usec;     /* a line begun must end this soon; 0: never */
        uint64_t connection_idle_timeout_usec;  /* nothing in flight and no request this long; 0: never */
        int log_level;

        /* Paths and tools */
        char *cache_dir;
        char *bwrap_path;
        char *uv_path;

        /* Running scripts */
        uint64_t default_timeout_usec;
        uint64_t max_timeout_usec;
        uint64_t output_cap;
        uint64_t max_runs;              /* concurrent runs; 0 = four per CPU */
        uint64_t max_runs_per_user;     /* concurrent runs of one uid; 0 = half of max_runs, at least 1 */
        uint64_t max_queue;
        /* The scheduler's other kinds (scheduler/scheduler.h): all users, one uid; 0 = no limit / the global one */
        uint64_t max_builds, max_builds_per_user;
        uint64_t max_helpers, max_helpers_per_user;
        uint64_t max_compiles, max_compiles_per_user;
        uint64_t max_walks, max_walks_per_user;
        uint64_t prestart;              /* most sandboxes started ahead per recently used environment; 0: none */
        uint64_t prestart_memory;       /* bytes one may fill with warm imports (src/tools/preimport.h); 0: none */
        uint64_t tmpfs_size;
        bool network;
        char **network_allow;           /* network-allow: hosts reachable through the daemon's proxy */
        bool network_allow_private;
        uint64_t network_max_connections_per_user;
        bool unsafe_no_sandbox;         /* development only: scripts run as the daemon's user, no bwrap */
        uint64_t max_memory;            /* bytes per run; 0 = no limit */
        uint64_t max_processes;         /* processes and threads per run; 0 = no limit */
        uint64_t max_cpu_time_usec;     /* CPU time per run; 0 = max-timeout plus 10 s */
        uint64_t max_file_size;         /* largest file a run may write; 0 = tmpfs-size */
        uint64_t max_open_files;        /* per process; 0 = inherited */
        uint64_t cpu_quota;             /* percent of one CPU per run (cgroup only); 0 = no cap */
        UidRange sandbox_uids;          /* a root daemon's sandboxes run as these host uids, one each */
        char **python_search_path;      /* directories searched for python3.N */
        char **python_versions;         /* allowed versions (prefixes); empty = all */
        int python_downloads;           /* install uv-managed Pythons a call asks for: CONFIG_AUTO (unless offline), 0, 1 */
        char *python_install_mirror;    /* replaces uv's default download site; empty: uv's default */
        char *python_downloads_json_url;        /* the list of Pythons uv may install; empty: uv's built-in one */
        char **data_dirs;               /* NAME=PATH each: bound read-only at /data/NAME in every sandbox */

        /* Preparing environments */
        char *index_url;
        char **extra_index_urls;
        char **find_links;
        bool offline;
        bool system_certs;              /* uv trusts the system CA store */
        bool allow_source_builds;
        bool allow_tool_table;
        uint64_t prepare_timeout_usec;
        char **warmup;                  /* requirement sets, "a b c" each */
        uint64_t store_max_size;        /* bytes, 0 = no limit */
        uint64_t store_max_age_usec;    /* unused environments older than this are removed */
        uint64_t uv_prune_delay_usec;   /* uv cache prune after builds go quiet this long; 0: never */

        /* Persistent sandboxes */
        bool persistent_sandboxes;              /* offer their tools (with max_sandboxes > 0) */
        uint64_t sandbox_idle_timeout_usec;     /* reaped after this long unused */
        uint64_t max_sandboxes_per_user;
        uint64_t max_sandboxes;

        /* Private: which list settings a configuration file has set (the first
         * occurrence replaces the default, later ones add). */
        bool lists_seen[64];
} Config;

void config_init(Config *c);
/* Whether calls may install uv-managed Pythons: python-downloads, where auto means yes unless offline. */
bool config_python_downloads(const Config *c);
void config_done(Config *c);

/* Returns 1 if the program should exit successfully now (--help, --version), 0 to go on, -EINVAL after an error was printed. */
int config_parse_argv(Config *c, int argc, char **argv, const char **ret_config_file, bool *ret_check_config);
/* Parse one configuration file (INI: key = value, # comments, [Daemon] section optional). Errors name file:line. */
int config_parse_file(Config *c, const char *path, FILE *f);
/* The main file and then NAME.conf.d/\*.conf in lexical order; a missing main file is fine. */
int config_load(Config *c, const char *path);
/* Print the effective values as a configuration file would hold them. */
void config_dump(const Config *c, FILE *out);
/* Set one key from text (used by both parsers; for tests: one setting without a file). -EINVAL: unknown key or
 * bad value, reason in *ret_error. */
int config_set(Config *c, const char *key, const char *value, char **ret_error);

/* What --help prints (for tests: that every setting is there). */
void config_help(FILE *out, const char *program);
/* SIGHUP: take over what changed and can change while running; warn about the rest. Returns how many changed. */
int config_apply_reload(Config *live, Config *fresh);

/*
 * Resolve allowed-users and allowed-groups to uids and gids (numbers as they are, names through NSS, now). A
 * name that resolves to nothing matches nobody and is logged. -ENOMEM only.
 */
int config_resolve_access(Config *c);
/* With neither list set, anyone who can reach the socket may connect. */
bool config_access_restricted(const Config *c);

/*
 * One data-dirs entry, NAME=PATH: NAME of [a-z0-9_-] (1 to 64 of them), PATH absolute and plain (no empty, "."
 * or ".." component, no trailing slash) and not /, nor in or under /proc, /sys, /dev, /run, /etc or /boot.
 * *ret_path points into entry. -EINVAL with the reason in *ret_error.
 */
int data_dir_split(const char *entry, char **ret_name, const char **ret_path, char **ret_error);
/* What the settings say together (not one at a time): data-dirs names unique, none of the paths in or above
 * cache-dir. Logs each problem; -EINVAL when there is one. */
int config_verify(const Config *c);

int parse_size(const char *s, uint64_t *ret);
int parse_seconds(const char *s, uint64_t *ret_usec);
int parse_uid_range(const char *s, UidRange *ret);
int parse_bool(const char *s, bool *ret);
