/* SPDX-License-Identifier: MIT */
/*
 * A persistent sandbox's driver records (driver-input.h), all of them the sandbox's to choose: any sequence never
 * crashes, leaks or holds more than a message's worth. The input is records, each a 2-byte big-endian length and
 * that many bytes; the length 0xffff stands for a record longer than a record may be.
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "json-util.h"
#include "workspace/driver-input.h"

static char too_long[DRIVER_RECORD_MAX + 1];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        DriverInput in = { .max = 1 << 20 };   /* messages of several records, up to a cap */
        size_t i = 0;

        while (i + 2 <= size) {
                size_t n = (size_t) data[i] << 8 | data[i + 1];
                const char *rec = (const char *) data + i + 2;
                json_object *j = NULL;
                int64_t v;

                i += 2;
                if (n == 0xffff) {
                        too_long[0] = i < size ? (char) data[i] : 'E';
                        rec = too_long;
                        n = sizeof(too_long);
                } else {
                        n = n < size - i ? n : size - i;
                        i += n;
                }
                switch (driver_input_feed(&in, rec, n, &j)) {
                case DRIVER_RECORD_HELLO:
                        assert(json_object_is_type(j, json_type_object));
                        (void) json_get_int64(j, "hello", &v);
                        break;
                case DRIVER_RECORD_MESSAGE:
                        /* What the daemon reads of a reply before a tool looks at it. */
                        assert(json_object_is_type(j, json_type_object));
                        (void) json_get(j, "tar", json_type_string);
                        (void) json_get_string(j, "error");
                        (void) json_object_get_boolean(json_get(j, "ok", json_type_boolean));
                        break;
                case DRIVER_RECORD_NONE:
                        assert(!j);
                        break;
                case DRIVER_RECORD_INVALID:
                        /* What was half received is dropped with it. */
                        assert(!j && in.len == 0);
                        break;
                }
                json_object_put(j);
                assert(in.len <= DRIVER_MESSAGE_MAX);
                assert(in.max == 0 || in.len <= in.max);
        }
        driver_input_done(&in);
        return 0;
}
