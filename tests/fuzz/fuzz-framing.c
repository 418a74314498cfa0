/* SPDX-License-Identifier: MIT */
/* Framing: arbitrary bytes in arbitrary chunk sizes never crash it or grow memory past the limit. */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/framing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Framing f;
        size_t chunk, i = 0;

        if (size < 1)
                return 0;
        chunk = (size_t) data[0] % 64 + 1;
        framing_init(&f, 256);
        for (i = 1; i < size; i += chunk) {
                size_t n = size - i < chunk ? size - i : chunk;
                char *line;
                size_t len;

                if (framing_feed(&f, data + i, n) < 0)
                        break;
                while (framing_next(&f, &line, &len) != FRAMING_NEED_MORE)
                        ;
                assert(framing_pending(&f) <= 256 + 64);
        }
        {
                char *line;
                size_t len;
                while (framing_finish(&f, &line, &len) != FRAMING_NEED_MORE)
                        ;
        }
        framing_done(&f);
        return 0;
}
