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
        *in = (DriverInput) {};
}

/* Room for need bytes: doubling, so a long message costs few copies. */
static int grow(DriverInput *in, size_t need) {
        size_t a = MAX(in->allocated, (size_t) DRIVER_RECORD_MAX);
        char *b;

        if (need <= in->allocated)
                return 0;
        while (a < need)
                a *= 2;
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

        if (n == 0 || n > DRIVER_MESSAGE_MAX)
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
                /* Not the driver's: the message half received goes with it. */
                driver_input_done(in);
                return DRIVER_RECORD_NONE;
        }
        if (rec[0] == 'H') {
                driver_input_done(in);
                j = parse_object(rec + 1, n - 1);
                if (!j)
                        return DRIVER_RECORD_NONE;
                *ret = j;
                return DRIVER_RECORD_HELLO;
        }

        if (!in->discarding && n > 1) {
                if (in->len + (n - 1) > DRIVER_MESSAGE_MAX) {
                        driver_input_done(in);
                        in->discarding = true;
                } else if (grow(in, in->len + (n - 1)) < 0) {
                        driver_input_done(in);
                        in->discarding = true;
                } else {
                        memcpy(in->buf + in->len, rec + 1, n - 1);
                        in->len += n - 1;
                }
        }
        if (rec[0] == 'C')
                return DRIVER_RECORD_NONE;

        /* 'E': the message is complete, or was dropped. */
        j = in->discarding ? NULL : parse_object(in->buf, in->len);
        driver_input_done(in);
        if (!j)
                return DRIVER_RECORD_NONE;
        *ret = j;
        return DRIVER_RECORD_MESSAGE;
}
