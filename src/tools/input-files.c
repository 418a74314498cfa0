/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "input-files.h"
#include "json-util.h"
#include "macro.h"
#include "strv.h"

void input_files_done(InputFiles *f) {
        for (size_t i = 0; i < f->n; i++) {
                safe_close(f->fds[i]);
                free(f->dests[i]);
        }
        *f = (InputFiles) {};
}

/* A file name of its own in /work/in: letters, digits, '.', '_', '-'; not hidden, not "." or "..". */
static bool name_ok(const char *s) {
        size_t n = strlen(s);

        if (n == 0 || n > 128 || s[0] == '.')
                return false;
        for (size_t i = 0; i < n; i++)
                if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", s[i]))
                        return false;
        return true;
}

int input_files_take(const ToolCall *call, json_object *args, uint64_t max_bytes, InputFiles *ret, char **ret_error) {
        json_object *files = json_get(args, "files", json_type_array);
        bool used[INPUT_FILES_MAX] = {};
        InputFiles f = {};
        size_t n;
        int r;

        *ret = (InputFiles) {};
        *ret_error = NULL;
        /* tmpfs-size=0 leaves the size to the kernel (half the memory): then the memory limits bind alone. */
        if (max_bytes == 0)
                max_bytes = UINT64_MAX;
        n = files ? json_object_array_length(files) : 0;
        if (n == 0)
                return 0;
        if (n > INPUT_FILES_MAX)
                return error_setf(ret_error, "files: at most %d files per call", INPUT_FILES_MAX);

        for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(files, i);
                const char *as = json_get_string(e, "as"), *error = json_get_string(e, "error");
                json_object *slot = json_object_object_get(e, "fd");
                struct stat st;
                int64_t k;
                int fl, fd;

                if (error) {
                        r = error_setf(ret_error, "files[%zu]%s%s%s: %s", i, as ? " (" : "", strempty(as),
                                       as ? ")" : "", error);
                        goto fail;
                }
                if (!slot) {
                        r = error_setf(ret_error,
                                       "files[%zu]: this server never opens a path for you: the mcp-python-sandbox "
                                       "command your MCP client runs opens each file, as you, and passes it on. %s",
                                       i,
                                       call->fds.supported
                                               ? "This connection did not come through it (or through an older "
                                                 "version): configure the client to run mcp-python-sandbox."
                                               : "This session runs without the server's socket (mcp-python-sandbox "
                                                 "fell back to mcp-python-sandboxd --stdio), which cannot take "
                                                 "files: put them in a data directory (data-dirs) or use a "
                                                 "persistent sandbox's write_file.");
                        goto fail;
                }
                if (!json_object_is_type(slot, json_type_int) || (k = json_object_get_int64(slot)) < 0 ||
                    (size_t) k >= call->fds.n) {
                        r = error_setf(ret_error, "files[%zu]: no file descriptor came with the message for slot %s",
                                       i, json_object_to_json_string(slot));
                        goto fail;
                }
                if (used[k]) {
                        r = error_setf(ret_error, "files[%zu]: slot %" PRId64 " is used twice", i, k);
                        goto fail;
                }
                used[k] = true;
                if (!as || !name_ok(as)) {
                        r = error_setf(ret_error,
                                       "files[%zu]: \"as\" must name a file in /work/in: 1 to 128 of A-Z, a-z, 0-9, "
                                       "'.', '_' and '-', not starting with '.'", i);
                        goto fail;
                }
                for (size_t j = 0; j < f.n; j++)
                        if (streq(f.dests[j] + strlen(INPUT_FILES_DIR "/"), as)) {
                                r = error_setf(ret_error, "files[%zu]: the name %s is given twice", i, as);
                                goto fail;
                        }
                /* What came must be a regular file open for reading: not a path-only fd, a pipe, a socket. */
                fd = call->fds.fds[k];
                fl = fcntl(fd, F_GETFL);
                if (fl < 0 || fstat(fd, &st) < 0 || (fl & O_PATH) || (fl & O_ACCMODE) == O_WRONLY ||
                    !S_ISREG(st.st_mode)) {
                        r = error_setf(ret_error, "files[%zu] (%s): not a regular file open for reading", i, as);
                        goto fail;
                }
                if ((uint64_t) st.st_size > max_bytes - MIN(f.bytes, max_bytes)) {
                        r = error_setf(ret_error,
                                       "files: %s takes the files of this call over %" PRIu64 " MiB in all (the "
                                       "server's tmpfs-size): put large data in a data directory (data-dirs)",
                                       as, max_bytes >> 20);
                        goto fail;
                }
                f.bytes += (uint64_t) st.st_size;
                f.fds[f.n] = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                if (f.fds[f.n] < 0) {
                        r = -errno;
                        goto fail;
                }
                if (asprintf(&f.dests[f.n], INPUT_FILES_DIR "/%s", as) < 0) {
                        safe_close(f.fds[f.n]);
                        r = -ENOMEM;
                        goto fail;
                }
                f.n++;
        }
        *ret = f;
        return 0;
fail:
        input_files_done(&f);
        return r;
}

int input_files_data(const InputFiles *f, SandboxData *data) {
        for (size_t i = 0; i < f->n; i++) {
                if (lseek(f->fds[i], 0, SEEK_SET) < 0)
                        return -errno;
                data[i] = (SandboxData) { .fd = f->fds[i], .dest = f->dests[i] };
        }
        return 0;
}
