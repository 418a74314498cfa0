/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "framing.h"
#include "macro.h"

void framing_init(Framing *f, size_t max_line) {
        *f = (Framing) { .buf = BUF_INIT, .max_line = max_line };
}

void framing_done(Framing *f) {
        buf_clear(&f->buf);
}

int framing_reserve(Framing *f, size_t n, char **ret) {
        /* +1 so that a complete line can always be NUL-terminated in place. */
        return buf_reserve(&f->buf, n + 1, ret);
}

void framing_commit(Framing *f, size_t n) {
        buf_commit(&f->buf, n);
}

int framing_feed(Framing *f, const void *p, size_t n) {
        char *dst;
        int r;

        r = framing_reserve(f, n, &dst);
        if (r < 0)
                return r;
        memcpy(dst, p, n);
        framing_commit(f, n);
        return 0;
}

size_t framing_pending(const Framing *f) {
        return buf_size(&f->buf);
}

void framing_discard_line(Framing *f) {
        buf_consume(&f->buf, buf_size(&f->buf));
        f->scanned = 0;
        f->discarding = true;
}

static int emit_line(Framing *f, char *line, size_t len, char **ret_line, size_t *ret_len) {
        if (len > 0 && line[len - 1] == '\r')
                len--;
        line[len] = 0;
        *ret_line = line;
        *ret_len = len;
        return FRAMING_LINE;
}

int framing_next(Framing *f, char **ret_line, size_t *ret_len) {
        for (;;) {
                char *start = f->buf.data ? f->buf.data + f->buf.start : NULL;
                size_t avail = buf_size(&f->buf);
                char *nl = NULL;

                if (avail > f->scanned)
                        nl = memchr(start + f->scanned, '\n', avail - f->scanned);

                if (!nl) {
                        f->scanned = avail;
                        if (f->discarding) {
                                buf_consume(&f->buf, avail);
                                f->scanned = 0;
                                return FRAMING_NEED_MORE;
                        }
                        if (avail > f->max_line) {
                                buf_consume(&f->buf, avail);
                                f->scanned = 0;
                                f->discarding = true;
                                return FRAMING_OVERSIZE;
                        }
                        return FRAMING_NEED_MORE;
                }

                size_t len = (size_t) (nl - start);
                buf_consume(&f->buf, len + 1);    /* memory stays valid until the next reserve */
                f->scanned = 0;

                if (f->discarding) {
                        f->discarding = false;
                        continue;
                }
                if (len > f->max_line)
                        return FRAMING_OVERSIZE;

                return emit_line(f, start, len, ret_line, ret_len);
        }
}

int framing_finish(Framing *f, char **ret_line, size_t *ret_len) {
        int r;

        r = framing_next(f, ret_line, ret_len);
        if (r != FRAMING_NEED_MORE)
                return r;

        size_t avail = buf_size(&f->buf);
        if (avail == 0 || f->discarding)
                return FRAMING_NEED_MORE;

        /* There is always room for the terminating NUL (see framing_reserve()). */
        char *start = f->buf.data + f->buf.start;
        buf_consume(&f->buf, avail);
        f->scanned = 0;
        return emit_line(f, start, avail, ret_line, ret_len);
}
