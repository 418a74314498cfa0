/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "schema.h"

static int fail(char **ret_error, const char *format, ...) __attribute__((format(printf, 2, 3)));
static int fail(char **ret_error, const char *format, ...) {
        va_list ap;
        char *s = NULL;

        va_start(ap, format);
        if (vasprintf(&s, format, ap) < 0)
                s = NULL;
        va_end(ap);
        free(*ret_error);
        *ret_error = s;
        return -EINVAL;
}

static const char *type_of(json_object *v) {
        switch (json_object_get_type(v)) {
        case json_type_null:
                return "null";
        case json_type_boolean:
                return "boolean";
        case json_type_double:
                return "number";
        case json_type_int:
                return "integer";
        case json_type_object:
                return "object";
        case json_type_array:
                return "array";
        case json_type_string:
                return "string";
        }
        return "unknown";
}

static bool type_matches(const char *want, json_object *v) {
        const char *have = type_of(v);

        if (streq(want, have))
                return true;
        if (streq(want, "number") && streq(have, "integer"))
                return true;
        /* 3.0 is an integer in JSON Schema. */
        if (streq(want, "integer") && streq(have, "number")) {
                double d = json_object_get_double(v);
                return isfinite(d) && d == floor(d) && fabs(d) < 9.0e15;
        }
        return false;
}

/* A numeric keyword (minimum, maximum): an integer or a fraction. */
static json_object *get_number(json_object *schema, const char *key) {
        return json_get(schema, key, json_type_int) ?: json_get(schema, key, json_type_double);
}

/* JSON Schema string lengths count characters; strings here are valid UTF-8. */
static size_t utf8_length(const char *s, size_t n) {
        size_t len = 0;
        for (size_t i = 0; i < n; i++)
                if (((unsigned char) s[i] & 0xC0) != 0x80)
                        len++;
        return len;
}

static int check(json_object *schema, json_object *v, const char *path, char **ret_error) {
        json_object *t, *x;

        t = json_get(schema, "type", json_type_string);
        if (t && !type_matches(json_object_get_string(t), v))
                return fail(ret_error, "%s must be of type %s, not %s", path, json_object_get_string(t), type_of(v));
        t = json_get(schema, "type", json_type_array);
        if (t) {
                bool ok = false;
                for (size_t i = 0; i < json_object_array_length(t); i++) {
                        json_object *e = json_object_array_get_idx(t, i);
                        if (json_object_is_type(e, json_type_string) && type_matches(json_object_get_string(e), v))
                                ok = true;
                }
                if (!ok)
                        return fail(ret_error, "%s must be of type %s, not %s", path,
                                    json_object_to_json_string_ext(t, JSON_C_TO_STRING_PLAIN), type_of(v));
        }

        x = json_get(schema, "enum", json_type_array);
        if (x) {
                bool ok = false;
                for (size_t i = 0; i < json_object_array_length(x); i++)
                        if (json_object_equal(json_object_array_get_idx(x, i), v))
                                ok = true;
                if (!ok)
                        return fail(ret_error, "%s must be one of %s", path,
                                    json_object_to_json_string_ext(x, JSON_C_TO_STRING_PLAIN));
        }

        if (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) {
                double d = json_object_get_double(v);
                if ((x = get_number(schema, "minimum")) && d < json_object_get_double(x))
                        return fail(ret_error, "%s must be at least %s", path, json_object_get_string(x));
                if ((x = get_number(schema, "maximum")) && d > json_object_get_double(x))
                        return fail(ret_error, "%s must be at most %s", path, json_object_get_string(x));
                if (json_object_is_type(v, json_type_int) && !json_is_integer(v))
                        return fail(ret_error, "%s is out of range", path);
                if (!isfinite(d))
                        return fail(ret_error, "%s must be a finite number", path);
        }

        if (json_object_is_type(v, json_type_string) &&
            memchr(json_object_get_string(v), 0, (size_t) json_object_get_string_len(v)))
                return fail(ret_error, "%s must not contain NUL characters", *path ? path : "the value");

        if (json_object_is_type(v, json_type_string)) {
                int64_t n;
                size_t len = utf8_length(json_object_get_string(v), (size_t) json_object_get_string_len(v));
                if (json_get_int64(schema, "maxLength", &n) && len > (size_t) n)
                        return fail(ret_error, "%s is longer than %" PRIi64 " characters", path, n);
                if (json_get_int64(schema, "minLength", &n) && len < (size_t) n)
                        return fail(ret_error, "%s must not be shorter than %" PRIi64 " characters", path, n);
        }

        if (json_object_is_type(v, json_type_array)) {
                int64_t n;
                size_t len = json_object_array_length(v);
                if (json_get_int64(schema, "maxItems", &n) && len > (size_t) n)
                        return fail(ret_error, "%s has more than %" PRIi64 " items", path, n);
                x = json_get(schema, "items", json_type_object);
                if (x)
                        for (size_t i = 0; i < len; i++) {
                                char p[256];
                                int r;
                                snprintf(p, sizeof(p), "%s[%zu]", path, i);
                                r = check(x, json_object_array_get_idx(v, i), p, ret_error);
                                if (r < 0)
                                        return r;
                        }
        }

        if (json_object_is_type(v, json_type_object)) {
                json_object *props = json_get(schema, "properties", json_type_object);
                json_object *req = json_get(schema, "required", json_type_array);
                json_object *addl = json_get(schema, "additionalProperties", json_type_boolean);

                if (req)
                        for (size_t i = 0; i < json_object_array_length(req); i++) {
                                const char *k = json_object_get_string(json_object_array_get_idx(req, i));
                                if (!json_object_object_get_ex(v, k, NULL))
                                        return fail(ret_error, "%s%s\"%s\" is required", path, *path ? ": " : "", k);
                        }

                json_object_object_foreach(v, key, val) {
                        json_object *ps = props ? json_get(props, key, json_type_object) : NULL;
                        char p[256];
                        int r;

                        if (!ps) {
                                if (addl && !json_object_get_boolean(addl))
                                        return fail(ret_error, "unknown argument \"%s\"%s", key,
                                                    props ? " (see the tool's inputSchema)" : "");
                                continue;
                        }
                        snprintf(p, sizeof(p), "%s%s%s", path, *path ? "." : "", key);
                        r = check(ps, val, p, ret_error);
                        if (r < 0)
                                return r;
                }
        }

        return 0;
}

int schema_validate(json_object *schema, json_object *value, char **ret_error) {
        *ret_error = NULL;
        return check(schema, value, "", ret_error);
}
