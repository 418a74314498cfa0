/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * Checks tool arguments against the subset of JSON Schema our tools declare:
 * type (one or a list), properties, required, additionalProperties: false,
 * items, enum, minimum/maximum, minLength/maxLength, maxItems. The
 * inputSchema each tool publishes is the one that is enforced.
 */

#include <json-c/json.h>

/* 0 if value conforms; -EINVAL with a sentence for the model in *ret_error. */
int schema_validate(json_object *schema, json_object *value, char **ret_error);
