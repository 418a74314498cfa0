/* SPDX-License-Identifier: MIT */
/* Warm imports' reading of a script (src/tools/preimport.h) from arbitrary text: the items it finds go on the boot
 * program's line, so none may hold a ',', a space or a newline, and they stay within their caps. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strv.h"
#include "tools/preimport.h"

static bool item_ok(const char *item) {
        size_t n = strlen(item);
        bool names = false;

        if (n == 0 || n > PREIMPORT_MAX_ITEM)
                return false;
        for (const char *p = item; *p; p++) {
                bool id = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                          *p == '_';
                if (*p == PREIMPORT_NAMES_SEPARATOR)
                        names = true;
                else if (*p == '.' && names)   /* a name after the module is never dotted */
                        return false;
                else if (!id && *p != '.')
                        return false;
        }
        return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *s = (const char *) data;
        char **l = preimport_leading_modules(s, size), **learnt;
        char *joined;

        (void) preimport_script_plain_enough(s, size);
        if (!l)
                return 0;
        if (strv_length(l) > PREIMPORT_MAX_MODULES)
                abort();
        for (size_t i = 0; l[i]; i++)
                if (!item_ok(l[i]))
                        abort();
        joined = strv_join(l, ",");
        if (joined && strlen(joined) > PREIMPORT_MAX_LINE)
                abort();
        free(joined);
        /* A list is a prefix of itself; what a run teaches is a prefix of its list. */
        if (!preimport_is_prefix(l, l))
                abort();
        learnt = preimport_learn(l, "a b numpy pydantic");
        if (learnt && !preimport_is_prefix(learnt, l))
                abort();
        strv_free(learnt);
        strv_free(l);
        return 0;
}
