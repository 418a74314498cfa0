/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "toml-subset.h"

/* Outside the subset: not an error, tomllib decides. */
#define OUTSIDE 0

/* The key if the text at key (key_len bytes) is that of the subset's: "requires-python" or "dependencies". */
static const char *subset_key(const char *key, size_t key_len) {
        static const char *const keys[] = { "requires-python", "dependencies" };

        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                if (key_len == strlen(keys[i]) && memcmp(key, keys[i], key_len) == 0)
                        return keys[i];
        return NULL;
}

static bool is_blank(char c) {
        return c == ' ' || c == '\t';
}

static bool is_bare_key(char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static void skip_blanks(const char **p) {
        while (is_blank(**p))
                (*p)++;
}

/* Blanks, then a comment if there is one: up to the end of the line (not past it). */
static void skip_blanks_and_comment(const char **p) {
        skip_blanks(p);
        if (**p == '#')
                while (**p && **p != '\n')
                        (*p)++;
}

/* Inside an array: blanks, comments and line ends. */
static void skip_space(const char **p) {
        for (;;) {
                skip_blanks_and_comment(p);
                if (**p != '\n')
                        return;
                (*p)++;
        }
}

/* A one-line string, basic without escapes or literal: 1 and *ret; OUTSIDE; -ENOMEM. */
static int parse_string(const char **p, json_object **ret) {
        const char *s = *p, *end;
        char quote = *s;

        if (quote != '"' && quote != '\'')
                return OUTSIDE;
        if (s[1] == quote && s[2] == quote)
                return OUTSIDE;   /* a multi-line string */
        for (end = s + 1; *end != quote; end++)
                if (!*end || *end == '\n' || (quote == '"' && *end == '\\'))
                        return OUTSIDE;
        *ret = json_object_new_string_len(s + 1, (int) (end - s - 1));
        if (!*ret)
                return -ENOMEM;
        *p = end + 1;
        return 1;
}

static int parse_string_array(const char **p, json_object **ret) {
        _cleanup_json_ json_object *a = NULL;
        int k;

        if (**p != '[')
                return OUTSIDE;
        (*p)++;
        a = json_object_new_array();
        if (!a)
                return -ENOMEM;
        for (;;) {
                json_object *s = NULL;

                skip_space(p);
                if (**p == ']')
                        break;   /* empty, or after a trailing comma */
                k = parse_string(p, &s);
                if (k <= 0)
                        return k;
                if (json_object_array_length(a) >= TOML_SUBSET_MAX_ITEMS) {
                        json_object_put(s);
                        return OUTSIDE;
                }
                if (json_object_array_add(a, s) < 0) {
                        json_object_put(s);
                        return -ENOMEM;
                }
                skip_space(p);
                if (**p == ']')
                        break;
                if (**p != ',')
                        return OUTSIDE;
                (*p)++;
        }
        (*p)++;
        *ret = TAKE_PTR(a);
        return 1;
}

int toml_subset_parse(const char *text, json_object **ret) {
        _cleanup_json_ json_object *doc = NULL;
        const char *p = text;
        int k;

        /* Plain ASCII only: no control characters but tab and newline (no carriage return), nothing above 0x7e;
         * and no longer than the daemon reads itself. */
        for (const unsigned char *c = (const unsigned char *) text; *c; c++)
                if ((*c < 0x20 && *c != '\t' && *c != '\n') || *c >= 0x7f ||
                    (size_t) (c - (const unsigned char *) text) >= TOML_SUBSET_MAX_BYTES)
                        return OUTSIDE;

        doc = json_object_new_object();
        if (!doc)
                return -ENOMEM;
        for (;;) {
                json_object *value = NULL;
                const char *key, *name;

                skip_blanks_and_comment(&p);
                if (*p == '\n') {
                        p++;
                        continue;
                }
                if (!*p)
                        break;

                /* A bare key: not quoted, not dotted, not a table header, and one of the two. */
                key = p;
                while (is_bare_key(*p))
                        p++;
                name = subset_key(key, (size_t) (p - key));
                if (!name)
                        return OUTSIDE;
                if (json_object_object_get_ex(doc, name, NULL))
                        return OUTSIDE;   /* twice: tomllib's error to give */
                skip_blanks(&p);
                if (*p != '=')
                        return OUTSIDE;
                p++;
                skip_blanks(&p);

                k = streq(name, "requires-python") ? parse_string(&p, &value) : parse_string_array(&p, &value);
                if (k <= 0)
                        return k;
                if (json_object_object_add(doc, name, value) < 0) {
                        json_object_put(value);
                        return -ENOMEM;
                }

                /* Then nothing but a comment on the line. */
                skip_blanks_and_comment(&p);
                if (*p && *p != '\n')
                        return OUTSIDE;
        }
        *ret = TAKE_PTR(doc);
        return 1;
}
