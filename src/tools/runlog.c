/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <syslog.h>
#include <unistd.h>

#include <systemd/sd-journal.h>

#include "fs-util.h"
#include "log.h"
#include "runlog.h"
#include "sha256.h"
#include "strv.h"

#define VALUE_MAX 1024

bool runlog_to_journal(void) {
        static int cached = -1;

        /* systemd sets JOURNAL_STREAM to the device and inode of the stream it connects stdout and stderr to: if
         * fd 2 is still that stream, what we print ends up in the journal anyway, and natively it keeps fields. */
        if (cached < 0) {
                const char *e = getenv("JOURNAL_STREAM");
                unsigned long long dev, ino;
                struct stat st;

                cached = e && sscanf(e, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) >= 0 &&
                         (unsigned long long) st.st_dev == dev && (unsigned long long) st.st_ino == ino;
        }
        return cached;
}

void runlog_begin(RunLog *l, const ToolCall *call, const char *script, size_t script_len) {
        char hash[65];

        *l = (RunLog) {};
        if (log_get_max_level() < LOG_INFO)
                return;   /* nobody will see it */
        l->fields = strv_new();
        sha256_hex(script, script_len, hash);
        runlog_add(l, "MCP_TOOL", "%s", call->tool ? call->tool->name : "unknown");
        runlog_add(l, "MCP_PEER_UID", UID_FMT, call->uid);
        runlog_add(l, "MCP_PEER_PID", PID_FMT, call->pid);
        runlog_add(l, "MCP_SCRIPT_SHA256", "%s", hash);
        runlog_add(l, "MCP_SCRIPT_BYTES", "%zu", script_len);
}

void runlog_add(RunLog *l, const char *key, const char *format, ...) {
        _cleanup_free_ char *value = NULL;
        va_list ap;
        int n;

        if (!l->fields)
                return;
        va_start(ap, format);
        n = vasprintf(&value, format, ap);
        va_end(ap);
        if (n < 0)
                return;
        if (n > VALUE_MAX) {
                /* Cut at a character: a broken UTF-8 sequence would make journald keep the field as bytes. */
                size_t cut = VALUE_MAX - 3;
                while (cut > 0 && ((unsigned char) value[cut] & 0xc0) == 0x80)
                        cut--;
                strcpy(value + cut, "...");
        }
        (void) strv_extendf(&l->fields, "%s=%s", key, value);
}

static bool needs_quotes(const char *v) {
        if (!*v)
                return true;
        for (const unsigned char *p = (const unsigned char *) v; *p; p++)
                if (*p <= ' ' || *p == 0x7f || strchr("\"\\'", *p))
                        return true;
        return false;
}

/* A value as one shell-like word: bare if it can be, else in double quotes with C escapes. */
static int append_value(char **s, size_t *len, const char *v) {
        int k;

        if (!needs_quotes(v))
                return strextendf_len(s, len, "%s", v);
        k = strextendf_len(s, len, "\"");
        for (const unsigned char *p = (const unsigned char *) v; k >= 0 && *p;) {
                const unsigned char *q = p;

                /* What needs no escape goes in one piece. */
                while (*q && *q != '"' && *q != '\\' && *q >= 0x20 && *q != 0x7f)
                        q++;
                if (q > p) {
                        k = strextendf_len(s, len, "%.*s", (int) (q - p), (const char *) p);
                        p = q;
                        continue;
                }
                if (*p == '"' || *p == '\\')
                        k = strextendf_len(s, len, "\\%c", *p);
                else if (*p == '\n')
                        k = strextendf_len(s, len, "\\n");
                else if (*p == '\t')
                        k = strextendf_len(s, len, "\\t");
                else
                        k = strextendf_len(s, len, "\\%03o", *p);   /* octal: three digits at most, unlike \x */
                p++;
        }
        return k < 0 ? k : strextendf_len(s, len, "\"");
}

static void emit_stderr(const char *message, char **fields) {
        _cleanup_free_ char *line = NULL;
        size_t size = 0;
        int k;

        k = strextendf_len(&line, &size, "<%d>%s", LOG_INFO, message);
        for (char **i = fields; k >= 0 && i && *i; i++) {
                const char *eq = strchr(*i, '=');
                k = strextendf_len(&line, &size, " %.*s=", (int) (eq - *i), *i);
                if (k >= 0)
                        k = append_value(&line, &size, eq + 1);
        }
        if (k < 0 || strextendf_len(&line, &size, "\n") < 0)
                return;
        /* One write where it can be, so that lines of other writers (the daemon's children) do not cut into it. */
        log_write_line(line, size);
}

static int emit_journal(const char *message, char **fields) {
        size_t n = strv_length(fields), k = 0;
        _cleanup_free_ struct iovec *iov = calloc(n + 5, sizeof(*iov));
        _cleanup_free_ char *msg = NULL, *ident = NULL;
        char priority[16];

        if (!iov || asprintf(&msg, "MESSAGE=%s", message) < 0)
                return -ENOMEM;
        snprintf(priority, sizeof(priority), "PRIORITY=%d", LOG_INFO);
        iov[k++] = (struct iovec) { msg, strlen(msg) };
        iov[k++] = (struct iovec) { priority, strlen(priority) };
        iov[k++] = (struct iovec) { (char *) "MESSAGE_ID=" RUNLOG_MESSAGE_ID, strlen("MESSAGE_ID=" RUNLOG_MESSAGE_ID) };
        if (asprintf(&ident, "SYSLOG_IDENTIFIER=%s", program_invocation_short_name) >= 0)
                iov[k++] = (struct iovec) { ident, strlen(ident) };
        for (size_t i = 0; i < n; i++)
                iov[k++] = (struct iovec) { fields[i], strlen(fields[i]) };
        return sd_journal_sendv(iov, (int) k);
}

void runlog_emit(RunLog *l, const char *format, ...) {
        _cleanup_free_ char *message = NULL;
        va_list ap;
        int k;

        if (!l->fields)
                return;
        va_start(ap, format);
        if (vasprintf(&message, format, ap) < 0)
                message = NULL;
        va_end(ap);
        if (message) {
                k = runlog_to_journal() ? emit_journal(message, l->fields) : -ENOTCONN;
                if (k < 0)
                        emit_stderr(message, l->fields);
        }
        l->fields = strv_free(l->fields);
}
