/* SPDX-License-Identifier: MIT */
/* PEP 723 blocks, PEP 508 requirements and PEP 440 specifiers from arbitrary text. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pep723/pep440.h"
#include "pep723/pep508.h"
#include "pep723/pep723.h"
#include "pep723/toml-subset.h"

/* The block's TOML as the daemon reads it: a document (an object) or left to tomllib, nothing else. */
static void subset(const char *toml) {
        json_object *doc = NULL;
        int k;

        if (!toml)
                return;
        k = toml_subset_parse(toml, &doc);
        if (k < 0 && k != -ENOMEM)
                abort();
        if ((k > 0) != (doc != NULL) || (doc && !json_object_is_type(doc, json_type_object)))
                abort();
        json_object_put(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Pep723Block b = {};
        char *err = NULL, *text;
        int k;

        k = pep723_extract((const char *) data, size, &b, &err);
        if (k >= 0) {
                /* A block lies between its lines; a refusal always says why. */
                if (b.toml && !(b.start_line > 0 && b.start_line < b.end_line))
                        abort();
                if (err)
                        abort();
                subset(b.toml);
                pep723_block_done(&b);
        } else if (k == -EINVAL && !err)
                abort();
        free(err);
        err = NULL;

        /* Each line as a requirement and as a specifier set. */
        text = strndup((const char *) data, size);
        if (!text)
                return 0;
        subset(text);   /* the input itself as TOML */
        for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                Requirement r = {};
                Pep440SpecifierSet *set = NULL;
                Pep440Version v;

                if (pep508_parse(line, &r, &err) >= 0) {
                        /* The canonical form must parse to itself. */
                        Requirement again = {};
                        if (pep508_parse(r.canonical, &again, NULL) < 0 || strcmp(again.canonical, r.canonical) != 0)
                                abort();
                        requirement_done(&again);
                        requirement_done(&r);
                }
                free(err);
                err = NULL;
                if (pep440_specifier_set_parse(line, &set, &err) >= 0 && pep440_version_parse("3.12.1", &v) >= 0)
                        (void) pep440_specifier_set_contains(set, &v);
                pep440_specifier_set_free(set);
                free(err);
                err = NULL;
        }
        free(text);
        return 0;
}
