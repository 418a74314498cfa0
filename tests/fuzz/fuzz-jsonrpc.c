/* SPDX-License-Identifier: MIT */
/* A line parsed a slice at a time (src/jsonrpc/jsonrpc.h, JsonrpcParser) gives what jsonrpc_parse() gives it whole:
 * the same value, or the same reason, whatever the slice. The first byte of the input picks the slice (1 to 64
 * bytes: every place a piece can end is tried somewhere), the rest is the line. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jsonrpc/jsonrpc.h"

#define DEPTH 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *why_whole = NULL, *why_sliced = NULL, *line;
        json_object *whole, *sliced;
        size_t slice;

        if (size == 0)
                return 0;
        slice = 1 + data[0] % 64;
        line = (const char *) data + 1;
        whole = jsonrpc_parse(line, size - 1, DEPTH, &why_whole);
        sliced = jsonrpc_parse_sliced(line, size - 1, DEPTH, slice, &why_sliced);
        if (!whole != !sliced)
                abort();
        if (!whole) {
                if (!why_whole || !why_sliced || strcmp(why_whole, why_sliced) != 0)
                        abort();
                return 0;
        }
        if (strcmp(json_object_to_json_string_ext(whole, JSON_C_TO_STRING_PLAIN),
                   json_object_to_json_string_ext(sliced, JSON_C_TO_STRING_PLAIN)) != 0)
                abort();
        json_object_put(whole);
        json_object_put(sliced);
        return 0;
}
