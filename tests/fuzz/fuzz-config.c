/* SPDX-License-Identifier: MIT */
/* The configuration file parser on arbitrary text. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Config c;
        FILE *f;

        log_set_max_level(-1);   /* errors are expected; keep the output quiet */
        f = fmemopen((void *) data, size, "r");
        if (!f)
                return 0;
        config_init(&c);
        (void) config_parse_file(&c, "fuzz.conf", f);
        config_done(&c);
        fclose(f);
        return 0;
}
