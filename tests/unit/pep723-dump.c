/* SPDX-License-Identifier: MIT */
/*
 * For tests only, never installed: reads a JSON array of scripts on stdin and
 * writes a JSON array of what pep723_extract() made of each:
 * {"toml": ..., "start": N, "end": N} for a block, {"toml": null} for none,
 * {"error": "..."} for a refusal. test-pep723-regex.py compares it with the
 * PEP's reference regex. A block also has "subset": what toml_subset_parse()
 * read in it, or null where it left the block to tomllib
 * (test-toml-subset.py compares that with tomllib).
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "pep723/pep723.h"
#include "pep723/toml-subset.h"

static json_object *dump_one(const char *script, size_t len) {
        _cleanup_(pep723_block_done) Pep723Block b = {};
        _cleanup_free_ char *error = NULL;
        json_object *o = json_object_new_object();
        int r;

        r = pep723_extract(script, len, &b, &error);
        if (r < 0) {
                json_object_object_add(o, "error", json_object_new_string(error ?: strerror(-r)));
                return o;
        }
        if (!b.toml) {
                json_object_object_add(o, "toml", NULL);
                return o;
        }
        json_object_object_add(o, "toml", json_object_new_string(b.toml));
        json_object_object_add(o, "start", json_object_new_int((int) b.start_line));
        json_object_object_add(o, "end", json_object_new_int((int) b.end_line));
        json_object *doc = NULL;
        r = toml_subset_parse(b.toml, &doc);
        if (r < 0) {
                fprintf(stderr, "pep723-dump: %s\n", strerror(-r));
                exit(EXIT_FAILURE);
        }
        json_object_object_add(o, "subset", doc);   /* NULL (JSON null) when left to tomllib */
        return o;
}

int main(void) {
        _cleanup_free_ char *in = NULL;
        size_t len = 0, cap = 0;
        json_tokener *tok;
        json_object *scripts, *out;

        for (;;) {
                if (len + 65536 > cap) {
                        char *n = realloc(in, cap = (cap + 65536) * 2);
                        if (!n)
                                return EXIT_FAILURE;
                        in = n;
                }
                size_t k = fread(in + len, 1, cap - len - 1, stdin);
                if (k == 0)
                        break;
                len += k;
        }
        if (!in)
                return EXIT_FAILURE;
        in[len] = 0;

        tok = json_tokener_new_ex(4);
        if (!tok)
                return EXIT_FAILURE;
        scripts = json_tokener_parse_ex(tok, in, (int) len);
        json_tokener_free(tok);
        if (!json_object_is_type(scripts, json_type_array)) {
                fprintf(stderr, "pep723-dump: expected a JSON array of strings on stdin\n");
                return EXIT_FAILURE;
        }

        out = json_object_new_array();
        for (size_t i = 0; i < json_object_array_length(scripts); i++) {
                json_object *s = json_object_array_get_idx(scripts, i);
                json_object_array_add(out, dump_one(json_object_get_string(s), (size_t) json_object_get_string_len(s)));
        }
        fputs(json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN), stdout);
        fputc('\n', stdout);
        json_object_put(out);
        json_object_put(scripts);
        return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
