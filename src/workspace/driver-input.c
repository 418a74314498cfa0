/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "driver-input.h"
#include "macro.h"

#define JSON_DEPTH_MAX 64

void driver_input_done(DriverInput *in) {
        if (in->tok)
                json_tokener_free(in->tok);
        json_object_put(in->done);
        *in = (DriverInput) { .max = in->max };
}

static size_t message_max(const DriverInput *in) {
        return MIN(in->max ?: (size_t) DRIVER_RECORD_MAX - 1, (size_t) DRIVER_MESSAGE_MAX);
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

        if (in->len + (n - 1) > message_max(in)) {
                driver_input_done(in);
                return DRIVER_RECORD_INVALID;
        }
        in->len += n - 1;
        if (n > 1 && !in->done) {
                if (!in->tok) {
                        in->tok = json_tokener_new_ex(JSON_DEPTH_MAX);
                        if (!in->tok) {
                                driver_input_done(in);
                                return DRIVER_RECORD_INVALID;
                        }
                        in->values = JSONRPC_ELEMENT_COUNT_INIT;
                }
                if (jsonrpc_count_elements_feed(&in->values, rec + 1, n - 1, DRIVER_MESSAGE_MAX_VALUES) >
                    DRIVER_MESSAGE_MAX_VALUES) {
                        driver_input_done(in);
                        return DRIVER_RECORD_INVALID;
                }
                j = json_tokener_parse_ex(in->tok, rec + 1, (int) (n - 1));
                if (j)
                        in->done = j;
                else if (json_tokener_get_error(in->tok) != json_tokener_continue) {
                        driver_input_done(in);
                        return DRIVER_RECORD_INVALID;
                }
        }
        if (rec[0] == 'C')
                return DRIVER_RECORD_NONE;

        /* 'E': the message is complete. */
        j = TAKE_PTR(in->done);
        driver_input_done(in);
        if (!j || !json_object_is_type(j, json_type_object)) {
                json_object_put(j);
                return DRIVER_RECORD_INVALID;
        }
        *ret = j;
        return DRIVER_RECORD_MESSAGE;
}
