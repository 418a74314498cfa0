/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "macro.h"

/* Deep enough for any real request; a deeper line just goes as it is. */
#define MAX_DEPTH 64

typedef struct Opened {
        int fds[SHIM_FILES_MAX];
        size_t n;
} Opened;

/* Open path as whoever runs us. -errno, with what to tell in *ret_why. */
static int open_file(const char *path, int *ret_fd, const char **ret_why) {
        struct stat st;
        int fd;

        if (path[0] != '/') {
                *ret_why = "the path must be absolute";
                return -EINVAL;
        }
        /* Not a link as the last component (say what to give instead); no blocking open of a FIFO. */
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
                int r = -errno;
                *ret_why = r == -ELOOP ? "it is a symbolic link: give the path of the file itself"
                         : r == -EACCES || r == -EPERM ? "the user running mcp-python-sandbox cannot read it"
                         : r == -ENOENT ? "no such file"
                                        : strerror(-r);
                return r;
        }
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                *ret_why = "not a regular file";
                close(fd);
                return -EINVAL;
        }
        *ret_fd = fd;
        return 0;
}

static const char *base_name(const char *path) {
        const char *s = strrchr(path, '/');
        return s ? s + 1 : path;
}

/* One entry of "files": replaced in place. */
static int rewrite_entry(json_object *e, Opened *o) {
        json_object *path_o = NULL, *as_o = NULL;
        const char *why = NULL;
        char *as = NULL;
        int fd = -EBADF, r = 0;

        if (!json_object_is_type(e, json_type_object))
                return 0;
        (void) json_object_object_get_ex(e, "path", &path_o);
        (void) json_object_object_get_ex(e, "as", &as_o);
        if (json_object_object_get_ex(e, "fd", NULL) || json_object_object_get_ex(e, "error", NULL))
                why = "\"fd\" and \"error\" are for mcp-python-sandbox to fill in";
        else if (!path_o)
                return 0;       /* the daemon says what is missing */
        else if (!json_object_is_type(path_o, json_type_string))
                why = "\"path\" must be a string";
        else if (as_o && !json_object_is_type(as_o, json_type_string))
                why = "\"as\" must be a string";
        else if (o->n >= SHIM_FILES_MAX)
                why = "more files than one message may carry (16)";
        else if (open_file(json_object_get_string(path_o), &fd, &why) >= 0)
                o->fds[o->n] = fd;

        as = strdup(as_o && json_object_is_type(as_o, json_type_string) ? json_object_get_string(as_o)
                    : path_o && json_object_is_type(path_o, json_type_string) ? base_name(json_object_get_string(path_o))
                                                                               : "");
        if (!as) {
                safe_close(fd);
                return -ENOMEM;
        }
        /* Nothing of the path goes on: the daemon gets the open file, or why there is none. */
        json_object_object_del(e, "path");
        json_object_object_del(e, "fd");
        json_object_object_del(e, "error");
        json_object_object_del(e, "as");
        r = json_object_object_add(e, "as", json_object_new_string(as));
        if (r == 0)
                r = json_object_object_add(e, why ? "error" : "fd",
                                           why ? json_object_new_string(why) : json_object_new_int((int) o->n));
        free(as);
        if (r < 0) {
                safe_close(fd);
                return -ENOMEM;
        }
        if (!why)
                o->n++;
        return 1;
}

/* One JSON-RPC message: a tools/call with arguments.files. Returns > 0 when something changed. */
static int rewrite_message(json_object *m, Opened *o) {
        json_object *method, *params, *args, *files;
        int changed = 0, r;

        if (!json_object_is_type(m, json_type_object) || !json_object_object_get_ex(m, "method", &method) ||
            !json_object_is_type(method, json_type_string) || strcmp(json_object_get_string(method), "tools/call") != 0 ||
            !json_object_object_get_ex(m, "params", &params) || !json_object_is_type(params, json_type_object) ||
            !json_object_object_get_ex(params, "arguments", &args) || !json_object_is_type(args, json_type_object) ||
            !json_object_object_get_ex(args, "files", &files) || !json_object_is_type(files, json_type_array))
                return 0;
        for (size_t i = 0; i < json_object_array_length(files); i++) {
                r = rewrite_entry(json_object_array_get_idx(files, i), o);
                if (r < 0)
                        return r;
                changed |= r;
        }
        return changed;
}

int shim_files_rewrite(const char *line, size_t len, char **ret_line, size_t *ret_len, int *ret_fds, size_t *ret_n) {
        json_tokener *tok;
        json_object *msg;
        Opened o = {};
        int r = 0;

        *ret_line = NULL;
        *ret_len = 0;
        *ret_n = 0;
        /* Most lines: no need to parse. */
        if (!memmem(line, len, "\"files\"", 7) || memchr(line, 0, len))
                return 0;

        tok = json_tokener_new_ex(MAX_DEPTH);
        if (!tok)
                return -ENOMEM;
        msg = json_tokener_parse_ex(tok, line, (int) MIN(len, (size_t) INT32_MAX));
        /* Not one whole JSON value: the daemon answers it as it is. */
        if (!msg || json_tokener_get_error(tok) != json_tokener_success || len > INT32_MAX) {
                json_object_put(msg);
                json_tokener_free(tok);
                return 0;
        }
        json_tokener_free(tok);

        if (json_object_is_type(msg, json_type_array))
                for (size_t i = 0; r >= 0 && i < json_object_array_length(msg); i++) {
                        int k = rewrite_message(json_object_array_get_idx(msg, i), &o);
                        r = k < 0 ? k : (r | k);
                }
        else
                r = rewrite_message(msg, &o);

        if (r > 0) {
                size_t n;
                const char *s = json_object_to_json_string_length(msg, JSON_C_TO_STRING_PLAIN |
                                                                       JSON_C_TO_STRING_NOSLASHESCAPE, &n);
                char *out = s ? malloc(n + 2) : NULL;   /* NUL-terminated too */
                if (!out)
                        r = -ENOMEM;
                else {
                        memcpy(out, s, n);
                        out[n] = '\n';
                        out[n + 1] = 0;
                        *ret_line = out;
                        *ret_len = n + 1;
                        memcpy(ret_fds, o.fds, o.n * sizeof(int));
                        *ret_n = o.n;
                        r = 1;
                }
        }
        json_object_put(msg);
        if (r < 0)
                for (size_t i = 0; i < o.n; i++)
                        safe_close(o.fds[i]);
        return r;
}
