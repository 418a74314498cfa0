/* SPDX-License-Identifier: MIT */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"

json_object *json_get(json_object *obj, const char *key, json_type type) {
        json_object *v;

        if (!obj || !json_object_is_type(obj, json_type_object))
                return NULL;
        if (!json_object_object_get_ex(obj, key, &v) || !v)
                return NULL;
        if (!json_object_is_type(v, type))
                return NULL;
        return v;
}

const char *json_get_string(json_object *obj, const char *key) {
        json_object *v = json_get(obj, key, json_type_string);
        const char *s;

        if (!v)
                return NULL;
        /* A string with an escaped NUL ("a\u0000b") would read as "a" in C: not a string we take. */
        s = json_object_get_string(v);
        if (strlen(s) != (size_t) json_object_get_string_len(v))
                return NULL;
        return s;
}

bool json_is_integer(json_object *j) {
        if (!j || !json_object_is_type(j, json_type_int))
                return false;
        /* json-c saturates values beyond int64 silently: treat the saturated
         * ends (and anything stored as a larger unsigned) as out of range. */
        int64_t v = json_object_get_int64(j);
        return v != INT64_MAX && v != INT64_MIN;
}

bool json_get_int64(json_object *obj, const char *key, int64_t *ret) {
        json_object *v = json_get(obj, key, json_type_int);
        if (!v || !json_is_integer(v))
                return false;
        *ret = json_object_get_int64(v);
        return true;
}

int json_add(json_object *obj, const char *key, json_object *value) {
        /* NULL is JSON null in json-c (json_object_new_null() returns it). */
        if (json_object_object_add(obj, key, value) < 0) {
                json_object_put(value);
                return -ENOMEM;
        }
        return 0;
}

int json_add_string(json_object *obj, const char *key, const char *value) {
        return json_add(obj, key, json_object_new_string(value ?: ""));
}

int json_add_int(json_object *obj, const char *key, int64_t value) {
        return json_add(obj, key, json_object_new_int64(value));
}

int json_add_bool(json_object *obj, const char *key, bool value) {
        return json_add(obj, key, json_object_new_boolean(value));
}

json_object *json_parse_static(const char *text) {
        json_object *j = json_tokener_parse(text);
        if (!j) {
                fprintf(stderr, "BUG: built-in JSON does not parse: %.80s\n", text);
                abort();
        }
        return j;
}

const char *json_to_line(json_object *obj, size_t *ret_len) {
        return json_object_to_json_string_length(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                                 ret_len);
}
