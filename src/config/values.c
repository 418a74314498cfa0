/* SPDX-License-Identifier: MIT */
/*
 * Settings' values outside the table of settings: the parsers of one value (a size, a duration, a boolean, a uid
 * range, a data-dirs entry), the checks of what the settings say together (config_verify()), and allowed-users and
 * allowed-groups resolved to ids.
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "macro.h"
#include "nss-child.h"
#include "strv.h"

int parse_uid_range(const char *s, UidRange *ret) {
        unsigned long long a, b;
        char *end;

        if (!isdigit((unsigned char) s[0]))
                return -EINVAL;
        errno = 0;
        a = strtoull(s, &end, 10);
        if (errno || *end != '-' || !isdigit((unsigned char) end[1]))
                return -EINVAL;
        b = strtoull(end + 1, &end, 10);
        if (errno || *end)
                return -EINVAL;
        /* Never root, nobody or (uid_t) -1; below 2^31; and room for a few sandboxes at least. */
        if (a == 0 || b < a || b >= INT32_MAX || (a <= 65534 && b >= 65534) || b - a < 15)
                return -ERANGE;
        *ret = (UidRange) { .first = (uint32_t) a, .last = (uint32_t) b };
        return 0;
}

int parse_bool(const char *s, bool *ret) {
        static const char *const yes[] = { "1", "yes", "true", "on", "y" };
        static const char *const no[] = { "0", "no", "false", "off", "n" };

        for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
                if (strcasecmp(s, yes[i]) == 0) {
                        *ret = true;
                        return 0;
                }
                if (strcasecmp(s, no[i]) == 0) {
                        *ret = false;
                        return 0;
                }
        }
        return -EINVAL;
}

static bool path_in(const char *path, const char *dir) {
        size_t n = strlen(dir);

        if (streq(dir, "/"))
                return true;
        return strncmp(path, dir, n) == 0 && (path[n] == 0 || path[n] == '/');
}

/* The host's own machinery: nothing a sandbox should be handed by a slip of the pen. */
static const char *const data_dir_refused[] = { "/proc", "/sys", "/dev", "/run", "/etc", "/boot" };

int data_dir_split(const char *entry, char **ret_name, const char **ret_path, char **ret_error) {
        const char *eq = strchr(entry, '='), *path;
        size_t n;

        if (!eq)
                return error_setf(ret_error, "\"%s\" is not NAME=PATH", entry);
        n = (size_t) (eq - entry);
        if (n == 0 || n > 64)
                return error_setf(ret_error, "\"%s\": the name must have 1 to 64 characters", entry);
        for (size_t i = 0; i < n; i++)
                if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789_-", entry[i]))
                        return error_setf(ret_error, "\"%s\": a name is made of a-z, 0-9, _ and - only", entry);
        path = eq + 1;
        if (path[0] != '/')
                return error_setf(ret_error, "\"%s\": the path must be absolute", entry);
        if (streq(path, "/"))
                return error_setf(ret_error, "\"%s\": not the whole file system", entry);
        for (const char *c = path; *c; ) {
                const char *e = strchrnul(c + 1, '/');
                size_t l = (size_t) (e - c - 1);
                /* c is at a '/', the component is c+1..e */
                if (l == 0 || (l == 1 && c[1] == '.') || (l == 2 && c[1] == '.' && c[2] == '.'))
                        return error_setf(ret_error, "\"%s\": the path must be plain (no //, /./, /../ or "
                                          "trailing /)", entry);
                c = e;
        }
        for (size_t i = 0; i < ELEMENTSOF(data_dir_refused); i++)
                if (path_in(path, data_dir_refused[i]))
                        return error_setf(ret_error, "\"%s\": nothing in %s may be a data directory", entry,
                                          data_dir_refused[i]);
        *ret_name = strndup(entry, n);
        if (!*ret_name)
                return -ENOMEM;
        *ret_path = path;
        return 0;
}

int config_verify(const Config *c) {
        _cleanup_free_ char *cache = c->cache_dir ? realpath(c->cache_dir, NULL) : NULL;
        int ret = 0;

        for (size_t i = 0; c->data_dirs && c->data_dirs[i]; i++) {
                _cleanup_free_ char *name = NULL, *why = NULL, *real = NULL;
                const char *path;

                if (data_dir_split(c->data_dirs[i], &name, &path, &why) < 0) {
                        log_error("data-dirs: %s", why ?: "out of memory");
                        ret = -EINVAL;
                        continue;
                }
                for (size_t j = 0; j < i; j++)
                        if (strncmp(c->data_dirs[j], name, strlen(name)) == 0 &&
                            c->data_dirs[j][strlen(name)] == '=') {
                                log_error("data-dirs: the name %s is given twice.", name);
                                ret = -EINVAL;
                        }
                /* The store and the uv cache are the daemon's: no sandbox may read them whole, nor a directory that
                 * holds them. Both as written and with links resolved (where they exist already). */
                real = realpath(path, NULL);
                /* Nor through a symbolic link. */
                for (size_t j = 0; real && j < ELEMENTSOF(data_dir_refused); j++)
                        if (streq(real, "/") || path_in(real, data_dir_refused[j])) {
                                log_error("data-dirs: %s=%s leads to %s: nothing in %s may be a data directory.",
                                          name, path, real, data_dir_refused[j]);
                                ret = -EINVAL;
                                break;
                        }
                if ((c->cache_dir && (path_in(path, c->cache_dir) || path_in(c->cache_dir, path))) ||
                    (cache && real && (path_in(real, cache) || path_in(cache, real)))) {
                        log_error("data-dirs: %s=%s: the cache directory %s may not be in a data directory, nor a "
                                  "data directory in it.", name, path, c->cache_dir);
                        ret = -EINVAL;
                }
        }
        return ret;
}

static int parse_number_suffix(const char *s, const char *const *suffixes, const uint64_t *factors, size_t n,
                               uint64_t *ret) {
        char *end;
        uint64_t v;

        if (!s || !isdigit((unsigned char) s[0]))
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno)
                return -ERANGE;
        while (*end == ' ')
                end++;
        for (size_t i = 0; i < n; i++)
                if (strcasecmp(end, suffixes[i]) == 0) {
                        if (factors[i] && v > UINT64_MAX / factors[i])
                                return -ERANGE;
                        *ret = v * factors[i];
                        return 0;
                }
        return -EINVAL;
}

int parse_size(const char *s, uint64_t *ret) {
        static const char *const suf[] = { "", "B", "K", "KiB", "M", "MiB", "G", "GiB", "T", "TiB" };
        static const uint64_t fac[] = { 1, 1, 1ULL << 10, 1ULL << 10, 1ULL << 20, 1ULL << 20,
                                        1ULL << 30, 1ULL << 30, 1ULL << 40, 1ULL << 40 };
        return parse_number_suffix(s, suf, fac, ELEMENTSOF(suf), ret);
}

int parse_seconds(const char *s, uint64_t *ret_usec) {
        static const char *const suf[] = { "", "s", "sec", "ms", "min", "m", "h", "d" };
        static const uint64_t fac[] = { USEC_PER_SEC, USEC_PER_SEC, USEC_PER_SEC, USEC_PER_MSEC,
                                        60 * USEC_PER_SEC, 60 * USEC_PER_SEC, 3600 * USEC_PER_SEC,
                                        86400 * USEC_PER_SEC };
        return parse_number_suffix(s, suf, fac, ELEMENTSOF(suf), ret_usec);
}

static int parse_id(const char *s, unsigned long *ret) {
        char *end;
        unsigned long v;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno != 0 || *end != 0 || v >= (unsigned long) (uid_t) -1)
                return -EINVAL;
        *ret = v;
        return 0;
}

/* The names (not numbers) of allowed-users and allowed-groups. */
typedef struct AccessNames {
        char **users, **groups;
} AccessNames;

/* In the child (nss-child.h): a "u ID" or "g ID" line for each name found. */
static int resolve_access_child(int fd, void *userdata) {
        const AccessNames *a = userdata;
        int r = 0;

        for (size_t i = 0; r >= 0 && a->users[i]; i++) {
                struct passwd *pw = getpwnam(a->users[i]);
                if (pw)
                        r = dprintf(fd, "u %u\n", (unsigned) pw->pw_uid) < 0 ? -EIO : 0;
                else
                        log_warning("allowed-users: no user %s; it matches nobody.", a->users[i]);
        }
        for (size_t i = 0; r >= 0 && a->groups[i]; i++) {
                struct group *gr = getgrnam(a->groups[i]);
                if (gr)
                        r = dprintf(fd, "g %u\n", (unsigned) gr->gr_gid) < 0 ? -EIO : 0;
                else
                        log_warning("allowed-groups: no group %s; it matches nobody.", a->groups[i]);
        }
        return r;
}

int config_resolve_access(Config *c) {
        size_t nu = strv_length(c->allowed_users), ng = strv_length(c->allowed_groups);
        _cleanup_free_ uid_t *uids = calloc(nu + 1, sizeof(uid_t));
        _cleanup_free_ gid_t *gids = calloc(ng + 1, sizeof(gid_t));
        _cleanup_strv_free_ char **users = strv_new(), **groups = strv_new();
        _cleanup_free_ char *found = NULL;
        size_t ku = 0, kg = 0;
        unsigned long id;
        int r;

        if (!uids || !gids || !users || !groups)
                return -ENOMEM;
        /* Numbers as they are; names looked up in a child, all at once. */
        for (size_t i = 0; i < nu; i++)
                if (parse_id(c->allowed_users[i], &id) >= 0)
                        uids[ku++] = (uid_t) id;
                else if (strv_extend(&users, c->allowed_users[i]) < 0)
                        return -ENOMEM;
        for (size_t i = 0; i < ng; i++)
                if (parse_id(c->allowed_groups[i], &id) >= 0)
                        gids[kg++] = (gid_t) id;
                else if (strv_extend(&groups, c->allowed_groups[i]) < 0)
                        return -ENOMEM;
        if (users[0] || groups[0]) {
                r = nss_child_run(resolve_access_child, &(AccessNames) { users, groups }, &found);
                if (r < 0)
                        return log_error_errno(r, "Failed to look up the accounts of allowed-users and allowed-groups: "
                                               "%m");
                for (char *line = found, *next; line && *line; line = next) {
                        char kind;
                        unsigned v;
                        next = strchr(line, '\n');
                        if (next)
                                *next++ = 0;
                        if (sscanf(line, "%c %u", &kind, &v) != 2)
                                continue;
                        if (kind == 'u' && ku < nu)
                                uids[ku++] = (uid_t) v;
                        else if (kind == 'g' && kg < ng)
                                gids[kg++] = (gid_t) v;
                }
        }
        free(c->allowed_uids);
        free(c->allowed_gids);
        c->allowed_uids = TAKE_PTR(uids);
        c->n_allowed_uids = ku;
        c->allowed_gids = TAKE_PTR(gids);
        c->n_allowed_gids = kg;
        return 0;
}

bool config_access_restricted(const Config *c) {
        return strv_length(c->allowed_users) > 0 || strv_length(c->allowed_groups) > 0;
}
