/* SPDX-License-Identifier: MIT */
/*
 * What a run hands back (outputs.h), all of it the sandbox's to choose: the record stream its boot code writes
 * (figures, files, the end-of-run record), fed in arbitrary chunks, and the base64 of a persistent sandbox's files.
 * Nothing crashes or leaks, and what comes out is well-formed. The first byte picks: bit 7 set, lines "NAME\tBASE64"
 * for outputs_add_base64(); else the record stream, in chunks of (byte & 63) + 1 bytes.
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "tools/outputs.h"

static void add_base64_lines(Outputs *o, const char *p, size_t size) {
        char *text = strndup(p, size);
        unsigned k = 0;

        if (!text)
                return;
        for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save), k++) {
                char *tab = strchr(line, '\t');
                if (!tab)
                        continue;
                *tab = 0;
                outputs_add_base64(o, k % 2 ? OUTPUT_FIGURE : OUTPUT_FILE, line, strlen(tab + 1), tab + 1);
        }
        free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Outputs *o = NULL;
        json_object *content, *figures, *files;
        int status;

        if (size < 1 || outputs_new(&o) < 0)
                return 0;
        if (data[0] & 0x80)
                add_base64_lines(o, (const char *) data + 1, size - 1);
        else {
                size_t chunk = (size_t) (data[0] & 63) + 1;
                for (size_t i = 1; i < size; i += chunk)
                        outputs_feed(o, data + i, size - i < chunk ? size - i : chunk);
        }

        (void) outputs_finished(o, &status);
        content = json_object_new_array();
        outputs_append_content(o, content);
        figures = outputs_figures_json(o);
        files = outputs_files_json(o);
        assert(json_object_array_length(figures) <= OUTPUTS_MAX_FIGURES + OUTPUTS_MAX_LISTED);
        assert(json_object_array_length(files) <= OUTPUTS_MAX_FILES + OUTPUTS_MAX_LISTED);
        /* Everything serializes (names and text are valid UTF-8 by now). */
        assert(json_object_to_json_string(content));
        assert(json_object_to_json_string(figures));
        assert(json_object_to_json_string(files));
        json_object_put(content);
        json_object_put(figures);
        json_object_put(files);
        outputs_free(o);
        return 0;
}
