/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "driver-input.h"
#include "macro.h"

#define JSON_DEPTH_MAX 64

void driver_input_done(DriverInput *in) {
        free(in->buf);
        *in = (DriverInput) { .max = in->max };
}

static size_t message_max(const DriverInput *in) {
        return MIN(in->max ?: (size_t) DRIVER_RECORD_MAX - 1, (size_t) DRIVER_MESSAGE_MAX);
}

/* Room for need bytes (at most the cap): doubling, so a long message costs few copies, but never past the cap. */
static int grow(DriverInput *in, size_t need) {
        size_t a = MAX(in->allocated, (size_t) DRIVER_RECORD_MAX);
        char *b;

        if (need <= in->allocated)
                return 0;
        while (a < need)
                a *= 2;
        a = MAX(MIN(a, message_max(in)), need);
        b = realloc(in->buf, a);
        if (!b)
                return -ENOMEM;
        in->buf = b;
        in->allocated = a;
        return 0;
}

/* One JSON object from s (n bytes, not NUL-terminated); NULL if it is anything else. */
static json_object *parse_object(const char *s, size_t n) {
        json_tokener *tok;
        json_object *j;

        if (n == 0)
                return NULL;
        tok = json_tokener_new_ex(JSON_DEPTH_MAX);
        if (!tok)
                return NULL;
        j = json_tokener_parse_ex(tok, s, (int) n);
        json_tokener_free(tok);
        if (j && !json_object_is_type(j, json_type_object)) {
                json_object_put(j);
                j = NULL;
        }
        return j;
}

DriverRecord driver_input_feed(DriverInput *in, const char *rec, size_t n, json_object **ret) {
        json_object *j;

        *ret = NULL;
        if (n == 0)
                return DRIVER_RECORD_NONE;
        if (n > DRIVER_RECORD_MAX || (rec[0] != 'H' && rec[0] != 'C' && rec[0] != 'E')) {
                driver_input_done(in);
                return DRIVER_RECORD_INVALID;
        }
        if (rec[0] == 'H') {
                /* A fresh worker: what its predecessor left half sent is gone. */
                driver_input_done(in);
                j = parse_object(rec + 1, n - 1);
                if (!j)
                        return DRIVER_RECORD_INVALID;
                *ret = j;
                return DRIVER_RECORD_HELLO;
        }

        if (in->len + (n - 1) > message_max(in) || grow(in, in->len + (n - 1)) < 0) {
                driver_input_done(in);
                return DRIVER_RECORD_INVALID;
        }
        if (n > 1) {
                memcpy(in->buf + in->len, rec + 1, n - 1);
                in->len += n - 1;
        }
        if (rec[0] == 'C')
                return DRIVER_RECORD_NONE;

        /* 'E': the message is complete. */
        j = parse_object(in->buf, in->len);
        driver_input_done(in);
        if (!j)
                return DRIVER_RECORD_INVALID;
        *ret = j;
        return DRIVER_RECORD_MESSAGE;
}
