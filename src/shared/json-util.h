/* SPDX-License-Identifier: MIT */
#pragma once

/* json-c helpers: cleanup, typed getters that do not guess, compact output. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "macro.h"

static inline void json_object_putp(json_object **j) {
        if (*j)
                json_object_put(*j);
}
#define _cleanup_json_ _cleanup_(json_object_putp)

/* The member if it exists and has that type, else NULL. */
json_object *json_get(json_object *obj, const char *key, json_type type);
const char *json_get_string(json_object *obj, const char *key);
/* True only for an integer that fits int64 (not a double, bool or string). */
bool json_get_int64(json_object *obj, const char *key, int64_t *ret);
bool json_is_integer(json_object *j);

/* Add helpers that steal nothing from the caller but the new values. */
int json_add_string(json_object *obj, const char *key, const char *value);
int json_add_int(json_object *obj, const char *key, int64_t value);
int json_add_bool(json_object *obj, const char *key, bool value);
int json_add(json_object *obj, const char *key, json_object *value);   /* steals value */

/* Parse JSON text that is compiled into the program; aborts on a bug. */
json_object *json_parse_static(const char *text);

/* One line of compact JSON, no escaping of '/'. Owned by obj. */
const char *json_to_line(json_object *obj, size_t *ret_len);

static inline void json_tokener_freep_(json_tokener **t) {
        if (*t)
                json_tokener_free(*t);
}
