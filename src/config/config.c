/* SPDX-License-Identifier: MIT */
/*
 * The table of settings and what goes through it: defaults, one key set from text, the configuration file and its
 * drop-ins, the command line, --help, the dump, and a reload taking over what may change while running. What one
 * value means on its own (sizes, durations, uid ranges, data-dirs entries) and what the settings say together is
 * in values.c.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "config.h"
#include "netproxy/allowlist.h"
#include "log.h"
#include "macro.h"
#include "strv.h"

typedef enum SettingType {
        SETTING_STRING,
        SETTING_BOOL,
        SETTING_SIZE,
        SETTING_UINT,
        SETTING_SECONDS,
        SETTING_STRV,       /* white-space separated; a repeated key adds; an empty value resets */
        SETTING_STRV_LINES, /* each occurrence is one entry */
        SETTING_LOG_LEVEL,
        SETTING_UID_RANGE,  /* FIRST-LAST */
        SETTING_AUTO_BOOL,  /* yes, no or auto (CONFIG_AUTO) */
} SettingType;

typedef struct Setting {
        const char *name;
        SettingType type;
        size_t offset;
        const char *help;
        bool cli_only;      /* not accepted in the configuration file */
} Setting;

#define S(n, t, f, h) { n, t, offsetof(Config, f), h, false }
#define CLI(n, t, f, h) { n, t, offsetof(Config, f), h, true }

static const Setting settings[] = {
        CLI("listen", SETTING_STRING, listen_path, "Create and serve a Unix socket at PATH (instead of systemd's)"),
        CLI("stdio", SETTING_BOOL, stdio, "Serve one MCP session on stdin/stdout; exit at end of input"),
        S("exit-idle-time", SETTING_SECONDS, exit_idle_usec, "Exit after this long without a connection (0: never)"),
        S("max-connections", SETTING_UINT, max_connections, "Connections served at once; more are refused with an error"),
        S("max-connections-per-user", SETTING_UINT, max_connections_per_user,
          "Connections one user (uid) may hold at once; more are refused with an error (0: max-connections)"),
        S("allowed-users", SETTING_STRV, allowed_users, "Users (names or uids) who may connect (empty: anyone the socket lets in)"),
        S("allowed-groups", SETTING_STRV, allowed_groups, "Groups (names or gids) whose members may connect"),
        S("max-message-size", SETTING_SIZE, max_message_size, "Largest JSON-RPC message (line) accepted"),
        S("max-calls-per-connection", SETTING_UINT, max_calls_per_connection, "Tool calls in flight per connection"),
        S("max-message-elements", SETTING_UINT, max_message_elements,
          "JSON values (objects, arrays, strings, numbers, literals) in one message (0: no limit)"),
        S("max-reply-buffer", SETTING_SIZE, max_reply_buffer,
          "Reply bytes a connection may leave unread before further replies are replaced by errors"),
        S("max-reply-buffer-per-user", SETTING_SIZE, max_reply_buffer_per_user,
          "Unread reply bytes of all of one user's connections together (0: no limit)"),
        S("max-input-buffer-per-user", SETTING_SIZE, max_input_buffer_per_user,
          "Bytes of unfinished messages all of one user's connections may hold, a long message being parsed "
          "counting three times its length (0: no limit)"),
        S("max-call-buffer-per-user", SETTING_SIZE, max_call_buffer_per_user,
          "Bytes of scripts and arguments that the tool calls in progress of one user may hold (0: no limit)"),
        S("initialize-timeout", SETTING_SECONDS, initialize_timeout_usec,
          "Close a connection that has not started an MCP session this long after connecting (0: never)"),
        S("line-timeout", SETTING_SECONDS, line_timeout_usec,
          "Close a connection whose message (line) is still incomplete after this long (0: never)"),
        S("connection-idle-timeout", SETTING_SECONDS, connection_idle_timeout_usec,
          "Close a connection with nothing in flight and no request for this long (0: never)"),
        S("log-level", SETTING_LOG_LEVEL, log_level, "Log level: err, warning, notice, info, debug"),
        S("cache-dir", SETTING_STRING, cache_dir, "Environment store and uv cache"),
        S("bwrap", SETTING_STRING, bwrap_path, "bubblewrap binary"),
        S("uv", SETTING_STRING, uv_path, "uv binary (a bare name is looked up in PATH)"),
        S("default-timeout", SETTING_SECONDS, default_timeout_usec, "Run time limit when a call names none"),
        S("max-timeout", SETTING_SECONDS, max_timeout_usec, "Longest run time a call may ask for"),
        S("output-cap", SETTING_SIZE, output_cap, "Bytes of stdout+stderr kept per run (head and tail)"),
        S("max-runs", SETTING_UINT, max_runs, "Scripts running at once (0: four per CPU)"),
        S("max-runs-per-user", SETTING_UINT, max_runs_per_user,
          "Scripts one user (uid) may run at once; more wait their turn (0: half of max-runs, at least 1)"),
        S("max-queue", SETTING_UINT, max_queue, "Runs waiting for a slot before calls are refused"),
        S("max-builds", SETTING_UINT, max_builds,
          "Environment builds (uv processes) at once, all users together; more wait their turn (0: no limit)"),
        S("max-builds-per-user", SETTING_UINT, max_builds_per_user,
          "Environment builds one user's calls may have going at once (0: max-builds)"),
        S("max-helpers", SETTING_UINT, max_helpers,
          "Metadata-reader sandboxes at once, all users together; more wait their turn (0: no limit)"),
        S("max-helpers-per-user", SETTING_UINT, max_helpers_per_user,
          "Metadata-reader sandboxes one user's calls may have going at once (0: max-helpers)"),
        S("max-compiles", SETTING_UINT, max_compiles, "Sandboxed bytecode compiles at once (0: no limit)"),
        S("max-compiles-per-user", SETTING_UINT, max_compiles_per_user,
          "Bytecode compiles for one user's builds at once (0: max-compiles)"),
        S("max-walks", SETTING_UINT, max_walks, "Disk-usage walks and collections at once (0: no limit)"),
        S("max-walks-per-user", SETTING_UINT, max_walks_per_user,
          "Disk-usage walks one user (or the daemon itself) may have going at once (0: max-walks)"),
        S("prestart", SETTING_UINT, prestart,
          "Most sandboxes kept started ahead for each recently used environment, as the call rate asks (0: none)"),
        S("prestart-memory", SETTING_SIZE, prestart_memory,
          "Memory a sandbox started ahead may fill importing modules the environment's scripts import (0: none)"),
        S("tmpfs-size", SETTING_SIZE, tmpfs_size, "Size of a run's writable work dir and of its /tmp"),
        S("network", SETTING_BOOL, network, "Give scripts network access"),
        S("network-allow", SETTING_STRV, network_allow,
          "Hosts scripts may reach through the daemon's proxy (HOST[:PORT], *.DOMAIN, ADDRESS); empty: none"),
        S("network-allow-private", SETTING_BOOL, network_allow_private,
          "Let allowlisted names lead to private addresses (10/8, 172.16/12, 192.168/16, fc00::/7)"),
        S("network-max-connections-per-user", SETTING_UINT, network_max_connections_per_user,
          "Proxy connections (network-allow) one user's runs may hold open at once"),
        S("unsafe-no-sandbox", SETTING_BOOL, unsafe_no_sandbox,
          "Run scripts WITHOUT a sandbox, as the daemon's user (development only)"),
        /* Without a cgroup per run: RLIMIT_AS, which counts address space per process (numpy's thread pools
         * reserve much more than they use: keep it at 1G or more), and RLIMIT_NPROC, which counts all of the
         * service user's processes and does not bind root. */
        S("max-memory", SETTING_SIZE, max_memory, "Memory of a run: its cgroup's limit, else RLIMIT_AS (0: no limit)"),
        S("max-processes", SETTING_UINT, max_processes,
          "Processes and threads of a run: pids.max, else RLIMIT_NPROC (0: no limit)"),
        S("max-cpu-time", SETTING_SECONDS, max_cpu_time_usec,
          "CPU time of a process in a run (0: max-timeout plus 10s)"),
        S("max-file-size", SETTING_SIZE, max_file_size, "Largest file a run may write (0: tmpfs-size)"),
        S("max-open-files", SETTING_UINT, max_open_files, "Open files of a process in a run"),
        S("cpu-quota", SETTING_UINT, cpu_quota, "CPU of a run in % of one CPU, with cgroups only (0: no cap)"),
        S("sandbox-uid-range", SETTING_UID_RANGE, sandbox_uids,
          "Host uids a root daemon runs sandboxes as, one each, FIRST-LAST"),
        S("python-search-path", SETTING_STRV, python_search_path, "Directories (* patterns, ~/) searched for python3.N interpreters"),
        S("python-versions", SETTING_STRV, python_versions, "Allowed Python versions, e.g. \"3.12 3.13\" (empty: all found)"),
        S("python-downloads", SETTING_AUTO_BOOL, python_downloads,
          "Install a Python a call asks for that the host lacks (uv python install; auto: unless offline)"),
        S("python-install-mirror", SETTING_STRING, python_install_mirror,
          "Where uv downloads Pythons from instead of its default site (URL or file://)"),
        S("python-downloads-json-url", SETTING_STRING, python_downloads_json_url,
          "The list of installable Pythons uv reads (URL or file://); empty: uv's own"),
        S("data-dirs", SETTING_STRV, data_dirs,
          "Directories every sandbox sees read-only at /data/NAME, NAME=PATH each (empty: none)"),
        S("index-url", SETTING_STRING, index_url, "Package index (uv --default-index); empty: PyPI"),
        S("extra-index-urls", SETTING_STRV, extra_index_urls, "Additional package indexes"),
        S("find-links", SETTING_STRV, find_links, "Directories or URLs of flat wheel lists"),
        S("offline", SETTING_BOOL, offline, "Never reach an index; use only what the cache holds"),
        S("system-certs", SETTING_BOOL, system_certs, "uv trusts the system's CA certificates (for a private CA)"),
        S("allow-source-builds", SETTING_BOOL, allow_source_builds, "Let uv build sdists (runs their build code)"),
        S("allow-tool-table", SETTING_BOOL, allow_tool_table, "Accept a [tool] table in script metadata (it is ignored)"),
        S("prepare-timeout", SETTING_SECONDS, prepare_timeout_usec, "Longest time an environment build may take"),
        S("warmup", SETTING_STRV_LINES, warmup, "A requirement set to prepare after start-up (repeatable)"),
        S("store-max-size", SETTING_SIZE, store_max_size, "Budget of the environment store and the uv cache, each inode once (0: no limit)"),
        S("store-max-age", SETTING_SECONDS, store_max_age_usec, "Remove environments unused for this long (0: never)"),
        S("uv-prune-delay", SETTING_SECONDS, uv_prune_delay_usec,
          "Run uv cache prune once no environment was built for this long (0: never)"),
        S("persistent-sandboxes", SETTING_BOOL, persistent_sandboxes,
          "Offer the persistent-sandbox tools (create_sandbox, execute_code, ...) besides one-shot execute_python"),
        S("sandbox-idle-timeout", SETTING_SECONDS, sandbox_idle_timeout_usec, "Close a persistent sandbox unused for this long"),
        S("max-sandboxes-per-user", SETTING_UINT, max_sandboxes_per_user, "Persistent sandboxes one user may have open"),
        S("max-sandboxes", SETTING_UINT, max_sandboxes, "Persistent sandboxes open at once, all users together"),
};

static const Setting *setting_find(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(settings); i++)
                if (streq(settings[i].name, name))
                        return &settings[i];
        return NULL;
}

/* Where Pythons are on a host, without configuration: the system's, /opt's, and (for a daemon that is not root)
 * those its own user installed with uv or pyenv. */
#define DEFAULT_PYTHON_SEARCH_PATH \
        "/usr/local/bin /usr/bin /opt/python*/bin ~/.local/share/uv/python/cpython-*/bin ~/.pyenv/versions/*/bin"

void config_init(Config *c) {
        const char *cache = getenv("CACHE_DIRECTORY");   /* systemd's CacheDirectory= */

        *c = (Config) {
                .exit_idle_usec = 0,
                .max_connections = 256,
                .allowed_users = strv_new(),
                .allowed_groups = strv_new(),
                .max_message_size = 16 * 1024 * 1024,
                .max_calls_per_connection = 64,
                .max_connections_per_user = 64,
                .max_message_elements = 100000,
                .max_reply_buffer = 8 * 1024 * 1024,
                .max_reply_buffer_per_user = 32 * 1024 * 1024,
                /* A long line being parsed counts 3x (line, json-c's copy of a string, the string): one user holds
                 * at most this + 2 x max-message-size = 20 + 32 = 52 MiB, and the daemon stays under 64 MiB. */
                .max_input_buffer_per_user = 20 * 1024 * 1024,
                /* Two calls of the largest message's script at once; thousands of the scripts people write. */
                .max_call_buffer_per_user = 32 * 1024 * 1024,
                .initialize_timeout_usec = 30 * USEC_PER_SEC,
                .line_timeout_usec = 30 * USEC_PER_SEC,
                .connection_idle_timeout_usec = 8 * 3600 * USEC_PER_SEC,
                .log_level = LOG_INFO,
                .cache_dir = strdup(cache && *cache && !strchr(cache, ':') ? cache
                                                                         : LOCALSTATEDIR "/cache/mcp-python-sandbox"),
                .bwrap_path = strdup(BWRAP_PATH),
                .uv_path = strdup(UV_PATH),
                .default_timeout_usec = 30 * USEC_PER_SEC,
                .max_timeout_usec = 300 * USEC_PER_SEC,
                .output_cap = 24 * 1024,
                .max_runs = 0,
                .max_runs_per_user = 0,
                .max_queue = 64,
                .max_builds = 4,
                .max_builds_per_user = 2,
                .max_helpers = 4,
                .max_helpers_per_user = 2,
                .max_compiles = 1,
                .max_compiles_per_user = 1,
                .max_walks = 1,
                .max_walks_per_user = 1,
                .prestart = 2,
                .prestart_memory = 256 * 1024 * 1024,
                .tmpfs_size = 128 * 1024 * 1024,
                .network = false,
                .unsafe_no_sandbox = false,
                /* RLIMIT_AS counts reserved address space, not memory in use: numpy with OpenBLAS reserves
                 * buffers per thread and glibc 64 MiB arenas per thread, so much less than 2G breaks imports
                 * on many-core machines while little of it is ever resident. */
                .max_memory = 2ULL * 1024 * 1024 * 1024,
                .max_processes = 256,
                .max_cpu_time_usec = 0,
                .max_file_size = 0,
                .max_open_files = 1024,
                .cpu_quota = 0,
                /* 0x7B000000-0x7B00FFFF: above what Debian, Fedora and systemd give accounts, DynamicUser= and
                 * containers (nspawn's range ends at 0x6FFFFFFF), below 2^31, where some tools turn negative. */
                .sandbox_uids = { .first = 2063597568, .last = 2063663103 },
                .python_search_path = strv_split(DEFAULT_PYTHON_SEARCH_PATH, " "),
                .python_versions = strv_new(),
                .python_downloads = CONFIG_AUTO,
                .data_dirs = strv_new(),
                .network_allow = strv_new(),
                .network_max_connections_per_user = 64,
                .extra_index_urls = strv_new(),
                .find_links = strv_new(),
                .prepare_timeout_usec = 600 * USEC_PER_SEC,
                .system_certs = true,
                .warmup = strv_new(),
                .store_max_size = 10ULL * 1024 * 1024 * 1024,
                .store_max_age_usec = 30ULL * 24 * 3600 * USEC_PER_SEC,
                .uv_prune_delay_usec = 10 * 60 * USEC_PER_SEC,
                .sandbox_idle_timeout_usec = 30 * 60 * USEC_PER_SEC,
                .max_sandboxes_per_user = 8,
                .max_sandboxes = 64,
        };
}

void config_done(Config *c) {
        for (size_t i = 0; i < ELEMENTSOF(settings); i++) {
                void *p = (char *) c + settings[i].offset;
                if (settings[i].type == SETTING_STRING)
                        free(*(char **) p);
                else if (settings[i].type == SETTING_STRV || settings[i].type == SETTING_STRV_LINES)
                        strv_free(*(char ***) p);
        }
        free(c->allowed_uids);
        free(c->allowed_gids);
        *c = (Config) {};
}

bool config_python_downloads(const Config *c) {
        return c->python_downloads == CONFIG_AUTO ? !c->offline : c->python_downloads > 0;
}

static int setting_apply(Config *c, const Setting *st, const char *value, char **ret_error) {
        void *p = (char *) c + st->offset;
        uint64_t u;
        bool b;
        int r;

        switch (st->type) {
        case SETTING_STRING: {
                char *s = strdup(value);
                if (!s)
                        return -ENOMEM;
                free(*(char **) p);
                *(char **) p = s;
                return 0;
        }
        case SETTING_BOOL:
                if (parse_bool(value, &b) < 0)
                        return error_setf(ret_error, "%s: \"%s\" is not a boolean (use yes or no)", st->name, value);
                *(bool *) p = b;
                return 0;
        case SETTING_SIZE:
                if (parse_size(value, &u) < 0)
                        return error_setf(ret_error, "%s: \"%s\" is not a size (e.g. 512K, 16M, 2G)", st->name, value);
                *(uint64_t *) p = u;
                return 0;
        case SETTING_UINT: {
                char *end;
                errno = 0;
                u = strtoull(value, &end, 10);
                if (errno || !isdigit((unsigned char) value[0]) || *end)
                        return error_setf(ret_error, "%s: \"%s\" is not a whole number", st->name, value);
                *(uint64_t *) p = u;
                return 0;
        }
        case SETTING_SECONDS:
                if (parse_seconds(value, &u) < 0)
                        return error_setf(ret_error, "%s: \"%s\" is not a duration (e.g. 30, 30s, 500ms, 5min)", st->name,
                                         value);
                *(uint64_t *) p = u;
                return 0;
        case SETTING_UID_RANGE:
                r = parse_uid_range(value, (UidRange *) p);
                if (r == -ERANGE)
                        return error_setf(ret_error,
                                          "%s: \"%s\" is not a safe range: it must hold at least 16 uids, not 0, "
                                          "not 65534 (nobody), all below 2147483647",
                                          st->name, value);
                if (r < 0)
                        return error_setf(ret_error, "%s: \"%s\" is not a uid range (FIRST-LAST, e.g. "
                                          "2063597568-2063663103)", st->name, value);
                return 0;
        case SETTING_AUTO_BOOL:
                if (streq(value, "auto")) {
                        *(int *) p = CONFIG_AUTO;
                        return 0;
                }
                if (parse_bool(value, &b) < 0)
                        return error_setf(ret_error, "%s: \"%s\" is not yes, no or auto", st->name, value);
                *(int *) p = b;
                return 0;
        case SETTING_LOG_LEVEL:
                r = log_level_from_string(value);
                if (r < 0)
                        return error_setf(ret_error, "%s: \"%s\" is not a log level (err, warning, notice, info, debug)",
                                         st->name, value);
                *(int *) p = r;
                return 0;
        case SETTING_STRV: {
                char ***l = p;
                if (streq(st->name, "network-allow")) {
                        /* Refused when read, not when a run needs it. */
                        _cleanup_strv_free_ char **words = strv_split(value, " \t,");
                        NetAllowlist allow = {};
                        if (!words)
                                return -ENOMEM;
                        r = net_allowlist_parse(words, &allow, ret_error);
                        net_allowlist_done(&allow);
                        if (r < 0)
                                return r;
                }
                if (!*value) {
                        strv_free(*l);
                        *l = strv_new();
                        return *l ? 0 : -ENOMEM;
                }
                /* Not ':' — index URLs and find-links contain it. */
                char **add = strv_split(value, " \t,");
                if (!add)
                        return -ENOMEM;
                if (streq(st->name, "data-dirs"))
                        for (size_t i = 0; add[i]; i++) {
                                _cleanup_free_ char *name = NULL, *why = NULL;
                                const char *path;
                                if (data_dir_split(add[i], &name, &path, &why) < 0) {
                                        strv_free(add);
                                        return why ? error_setf(ret_error, "%s: %s", st->name, why) : -ENOMEM;
                                }
                        }
                r = strv_extend_strv(l, add);
                strv_free(add);
                return r;
        }
        case SETTING_STRV_LINES:
                if (!*value) {
                        strv_free(*(char ***) p);
                        *(char ***) p = strv_new();
                        return 0;
                }
                return strv_extend((char ***) p, value);
        }
        return -EINVAL;
}

int config_set(Config *c, const char *key, const char *value, char **ret_error) {
        const Setting *st = setting_find(key);

        *ret_error = NULL;
        if (!st || st->cli_only)
                return error_setf(ret_error, "unknown setting \"%s\"", key);
        if (st->type == SETTING_STRV || st->type == SETTING_STRV_LINES) {
                size_t idx = (size_t) (st - settings);
                /* The first occurrence in the files replaces the built-in default; later ones add. */
                if (idx < ELEMENTSOF(c->lists_seen) && !c->lists_seen[idx]) {
                        c->lists_seen[idx] = true;
                        (void) setting_apply(c, st, "", ret_error);
                }
        }
        return setting_apply(c, st, value, ret_error);
}

static char *strip(char *s) {
        char *e;

        while (isspace((unsigned char) *s))
                s++;
        e = s + strlen(s);
        while (e > s && isspace((unsigned char) e[-1]))
                *--e = 0;
        return s;
}

int config_parse_file(Config *c, const char *path, FILE *f) {
        _cleanup_free_ char *line = NULL;
        size_t allocated = 0;
        unsigned n = 0;
        int ret = 0;

        while (getline(&line, &allocated, f) >= 0) {
                _cleanup_free_ char *error = NULL;
                char *l = strip(line), *eq, *key, *value;

                n++;
                if (!*l || *l == '#' || *l == ';')
                        continue;
                if (*l == '[') {
                        if (!streq(l, "[Daemon]")) {
                                log_error("%s:%u: unknown section %s (only [Daemon] exists)", path, n, l);
                                ret = -EINVAL;
                        }
                        continue;
                }
                eq = strchr(l, '=');
                if (!eq) {
                        log_error("%s:%u: expected \"key = value\", got \"%s\"", path, n, l);
                        ret = -EINVAL;
                        continue;
                }
                *eq = 0;
                key = strip(l);
                value = strip(eq + 1);
                /* Allow "value" in quotes. */
                size_t vl = strlen(value);
                if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"') {
                        value[vl - 1] = 0;
                        value++;
                }
                if (config_set(c, key, value, &error) < 0) {
                        log_error("%s:%u: %s", path, n, error ?: "out of memory");
                        ret = -EINVAL;
                }
        }
        return ret;
}

static int filter_conf(const struct dirent *d) {
        size_t l = strlen(d->d_name);
        return d->d_name[0] != '.' && l > 5 && streq(d->d_name + l - 5, ".conf");
}

int config_load(Config *c, const char *path) {
        _cleanup_free_ char *dropins = NULL;
        struct dirent **list = NULL;
        int n, r, ret = 0;
        FILE *f;

        f = fopen(path, "re");
        if (f) {
                r = config_parse_file(c, path, f);
                fclose(f);
                if (r < 0)
                        ret = r;
        } else if (errno != ENOENT)
                return log_error_errno(errno, "Failed to open %s: %m", path);

        /* /etc/.../mcp-python-sandboxd.conf -> /etc/.../mcp-python-sandboxd.conf.d/ */
        if (asprintf(&dropins, "%s.d", path) < 0)
                return -ENOMEM;
        n = scandir(dropins, &list, filter_conf, alphasort);
        if (n < 0)
                return errno == ENOENT ? ret : log_error_errno(errno, "Failed to read %s: %m", dropins);
        for (int i = 0; i < n; i++) {
                _cleanup_free_ char *p = NULL;
                if (ret == 0 || ret == -EINVAL) {
                        if (asprintf(&p, "%s/%s", dropins, list[i]->d_name) < 0)
                                ret = -ENOMEM;
                        else if ((f = fopen(p, "re"))) {
                                r = config_parse_file(c, p, f);
                                fclose(f);
                                if (r < 0)
                                        ret = r;
                        } else {
                                ret = log_error_errno(errno, "Failed to open %s: %m", p);
                        }
                }
                free(list[i]);
        }
        free(list);
        return ret;
}

static void print_value(const Config *c, const Setting *st, FILE *out) {
        const void *p = (const char *) c + st->offset;

        switch (st->type) {
        case SETTING_STRING:
                fprintf(out, "%s = %s\n", st->name, strempty(*(char *const *) p));
                break;
        case SETTING_BOOL:
                fprintf(out, "%s = %s\n", st->name, yes_no(*(const bool *) p));
                break;
        case SETTING_SIZE:
        case SETTING_UINT:
                fprintf(out, "%s = %" PRIu64 "\n", st->name, *(const uint64_t *) p);
                break;
        case SETTING_SECONDS: {
                uint64_t u = *(const uint64_t *) p;
                if (u % USEC_PER_SEC == 0)
                        fprintf(out, "%s = %" PRIu64 "s\n", st->name, u / USEC_PER_SEC);
                else
                        fprintf(out, "%s = %" PRIu64 "ms\n", st->name, u / USEC_PER_MSEC);
                break;
        }
        case SETTING_AUTO_BOOL: {
                int v = *(const int *) p;
                fprintf(out, "%s = %s\n", st->name, v == CONFIG_AUTO ? "auto" : yes_no(v));
                break;
        }
        case SETTING_LOG_LEVEL:
                fprintf(out, "%s = %s\n", st->name, log_level_to_string(*(const int *) p));
                break;
        case SETTING_UID_RANGE:
                fprintf(out, "%s = %" PRIu32 "-%" PRIu32 "\n", st->name, ((const UidRange *) p)->first,
                        ((const UidRange *) p)->last);
                break;
        case SETTING_STRV: {
                char *const *l = *(char **const *) p;
                /* A list key adds to the default, so reset it first: read back, the dump gives the same values. */
                fprintf(out, "%s =\n", st->name);
                if (!l || !l[0])
                        break;
                fprintf(out, "%s =", st->name);
                for (size_t i = 0; l[i]; i++)
                        fprintf(out, " %s", l[i]);
                fputc('\n', out);
                break;
        }
        case SETTING_STRV_LINES: {
                char *const *l = *(char **const *) p;
                fprintf(out, "%s =\n", st->name);
                for (size_t i = 0; l && l[i]; i++)
                        fprintf(out, "%s = %s\n", st->name, l[i]);
                break;
        }
        }
}

void config_dump(const Config *c, FILE *out) {
        fprintf(out, "[Daemon]\n");
        for (size_t i = 0; i < ELEMENTSOF(settings); i++)
                if (!settings[i].cli_only)
                        print_value(c, &settings[i], out);
}

void config_help(FILE *out, const char *program) {
        fprintf(out,
                "Usage: %s [OPTION...]\n\n"
                "Serve MCP tools that run Python scripts in bubblewrap sandboxes.\n\n"
                "Started by systemd through mcp-python-sandboxd.socket, it serves the sockets it is\n"
                "given; --listen serves a socket of its own and --stdio one session on stdin/stdout.\n\n"
                "  -h --help                   Show this help\n"
                "     --version                Show the version\n"
                "     --config=FILE            Read this configuration file (default: %s)\n"
                "     --check-config           Check the configuration, print the effective values, exit\n",
                program, SYSCONFDIR "/mcp-python-sandbox/mcp-python-sandboxd.conf");
        for (size_t i = 0; i < ELEMENTSOF(settings); i++) {
                char opt[64];
                const char *arg = settings[i].type == SETTING_BOOL ? "[=BOOL]"
                                 : settings[i].type == SETTING_SECONDS ? "=SEC"
                                 : settings[i].type == SETTING_SIZE ? "=BYTES"
                                 : settings[i].type == SETTING_UINT ? "=N"
                                 : settings[i].type == SETTING_LOG_LEVEL ? "=LEVEL"
                                 : settings[i].type == SETTING_UID_RANGE ? "=FIRST-LAST"
                                 : settings[i].type == SETTING_AUTO_BOOL ? "=yes|no|auto"
                                 : settings[i].type == SETTING_STRING ? "=PATH"
                                                                      : "=LIST";
                snprintf(opt, sizeof(opt), "--%s%s", settings[i].name, arg);
                fprintf(out, "     %-36s %s\n", opt, settings[i].help);
        }
        fprintf(out,
                "\nEvery option but --listen and --stdio is also a key of the configuration file\n"
                "(key = value); the command line wins. See mcp-python-sandboxd(8) and\n"
                "mcp-python-sandboxd.conf(5).\n");
}

int config_parse_argv(Config *c, int argc, char **argv, const char **ret_config_file, bool *ret_check_config) {
        enum { ARG_VERSION = 0x100, ARG_CONFIG, ARG_CHECK_CONFIG, ARG_SETTING_BASE = 0x200 };
        struct option options[ELEMENTSOF(settings) + 5];
        bool seen[ELEMENTSOF(settings)] = {};
        size_t n = 0;
        int opt;

        options[n++] = (struct option) { "help", no_argument, NULL, 'h' };
        options[n++] = (struct option) { "version", no_argument, NULL, ARG_VERSION };
        options[n++] = (struct option) { "config", required_argument, NULL, ARG_CONFIG };
        options[n++] = (struct option) { "check-config", no_argument, NULL, ARG_CHECK_CONFIG };
        for (size_t i = 0; i < ELEMENTSOF(settings); i++)
                options[n++] = (struct option) {
                        settings[i].name,
                        settings[i].type == SETTING_BOOL ? optional_argument : required_argument,
                        NULL,
                        ARG_SETTING_BASE + (int) i,
                };
        options[n] = (struct option) {};

        optind = 0;
        while ((opt = getopt_long(argc, argv, "h", options, NULL)) >= 0) {
                _cleanup_free_ char *error = NULL;

                switch (opt) {
                case 'h':
                        config_help(stdout, program_invocation_short_name);
                        return 1;
                case ARG_VERSION:
                        printf("%s %s\n", "mcp-python-sandboxd", PACKAGE_VERSION);
                        return 1;
                case ARG_CONFIG:
                        *ret_config_file = optarg;
                        break;
                case ARG_CHECK_CONFIG:
                        *ret_check_config = true;
                        break;
                case '?':
                        return -EINVAL;
                default: {
                        size_t idx = (size_t) (opt - ARG_SETTING_BASE);
                        const Setting *st = &settings[idx];
                        /* On the command line a list replaces what the file said; repeating the option adds. */
                        if ((st->type == SETTING_STRV || st->type == SETTING_STRV_LINES) && !seen[idx]) {
                                seen[idx] = true;
                                (void) setting_apply(c, st, "", &error);
                        }
                        if (setting_apply(c, st, optarg ?: "yes", &error) < 0) {
                                log_error("--%s", error ?: "out of memory");
                                return -EINVAL;
                        }
                }
                }
        }
        if (optind < argc) {
                log_error("Unexpected argument \"%s\"; see --help.", argv[optind]);
                return -EINVAL;
        }
        return 0;
}

/* Read once at start-up: a change takes a restart. */
static const char *const restart_only[] = {
        "cache-dir", "uv", "python-search-path", "python-versions", "max-runs", "warmup", "max-calls-per-connection",
        "sandbox-uid-range", "data-dirs",
};

static bool is_restart_only(const Setting *st) {
        for (size_t i = 0; i < ELEMENTSOF(restart_only); i++)
                if (streq(st->name, restart_only[i]))
                        return true;
        return st->cli_only;
}

static char *value_text(const Config *c, const Setting *st) {
        char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        if (!f)
                return NULL;
        print_value(c, st, f);
        fclose(f);
        return text;
}

int config_apply_reload(Config *live, Config *fresh) {
        int n = 0;

        /* Derived from the lists, resolved when fresh was read: always the fresh ones. */
        {
                uid_t *u = live->allowed_uids;
                gid_t *g = live->allowed_gids;
                size_t nu = live->n_allowed_uids, ng = live->n_allowed_gids;
                live->allowed_uids = fresh->allowed_uids;
                live->n_allowed_uids = fresh->n_allowed_uids;
                live->allowed_gids = fresh->allowed_gids;
                live->n_allowed_gids = fresh->n_allowed_gids;
                fresh->allowed_uids = u;
                fresh->n_allowed_uids = nu;
                fresh->allowed_gids = g;
                fresh->n_allowed_gids = ng;
        }

        for (size_t i = 0; i < ELEMENTSOF(settings); i++) {
                const Setting *st = &settings[i];
                _cleanup_free_ char *a = value_text(live, st), *b = value_text(fresh, st);
                size_t size;

                if (a && b && streq(a, b))
                        continue;
                if (is_restart_only(st)) {
                        log_warning("%s changed, but takes effect only after a restart.", st->name);
                        continue;
                }
                switch (st->type) {
                case SETTING_STRING:
                case SETTING_STRV:
                case SETTING_STRV_LINES:
                        size = sizeof(void *);
                        break;
                case SETTING_BOOL:
                        size = sizeof(bool);
                        break;
                case SETTING_LOG_LEVEL:
                case SETTING_AUTO_BOOL:
                        size = sizeof(int);
                        break;
                case SETTING_UID_RANGE:
                        size = sizeof(UidRange);
                        break;
                default:
                        size = sizeof(uint64_t);
                }
                /* Swap, so the old value is freed with the fresh configuration. */
                char tmp[sizeof(uint64_t)];
                memcpy(tmp, (char *) live + st->offset, size);
                memcpy((char *) live + st->offset, (char *) fresh + st->offset, size);
                memcpy((char *) fresh + st->offset, tmp, size);
                log_info("%s changed.", st->name);
                n++;
        }
        return n;
}
