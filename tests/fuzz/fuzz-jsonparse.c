/* SPDX-License-Identifier: MIT */
/* A line parsed piece by piece, cut into arbitrary chunk sizes (what the parser holds back given again with the next
 * piece, as the session does), gives what jsonrpc_parse() gives it whole: the same value or the same reason; and its
 * values counted piece by piece, what jsonrpc_count_elements() counts. */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jsonrpc/jsonrpc.h"

static bool blank(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
                        return false;
        return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *line = (const char *) data + 1, *reason = NULL, *want_reason = NULL;
        size_t len, chunk;
        JsonrpcParser p;
        JsonrpcElementCount c = JSONRPC_ELEMENT_COUNT_INIT;
        json_object *got, *want;

        if (size < 1)
                return 0;
        chunk = (size_t) data[0] % 16 + 1;
        len = size - 1;
        if (jsonrpc_parser_init(&p, 16) < 0)
                return 0;
        /* As a reader gives it: what the parser held back, again, with what came after. */
        size_t taken = 0;
        for (size_t i = 0; i < len; i += chunk) {
                size_t n = len - i < chunk ? len - i : chunk;
                taken += jsonrpc_parser_feed(&p, line + taken, i + n - taken, i + n == len);
                (void) jsonrpc_count_elements_feed(&c, line + i, n, 1000);
        }
        if (len == 0)
                (void) jsonrpc_parser_feed(&p, line, 0, true);
        else
                assert(taken == len);
        assert(c.n == jsonrpc_count_elements(line, len, 1000));
        got = jsonrpc_parser_finish(&p, &reason);
        if (blank(line, len)) {
                assert(!got && !reason);
                return 0;
        }
        want = jsonrpc_parse(line, len, 16, &want_reason);
        assert(!got == !want);
        if (want)
                assert(strcmp(json_object_to_json_string(got), json_object_to_json_string(want)) == 0);
        else
                assert(reason && want_reason && strcmp(reason, want_reason) == 0);
        json_object_put(got);
        json_object_put(want);
        return 0;
}
