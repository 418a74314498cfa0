/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "json-util.h"
#include "jsonrpc.h"
#include "utf8.h"

/* Whether no number in j is a NaN or Infinity literal; depth bounds the recursion as the tokener bounded nesting. */
static bool json_no_nan_literals(json_object *j, int depth) {
        if (depth < 0)
                return false;
        switch (json_object_get_type(j)) {
        case json_type_double:
                /* 1e400 is a JSON number that overflows a double; a value written without a digit is a NaN or
                 * Infinity literal. The tokener keeps the text a number was read from. */
                return isfinite(json_object_get_double(j)) || strpbrk(json_object_to_json_string(j), "0123456789");
        case json_type_array:
                for (size_t i = 0, n = json_object_array_length(j); i < n; i++)
                        if (!json_no_nan_literals(json_object_array_get_idx(j, i), depth - 1))
                                return false;
                return true;
        case json_type_object: {
                json_object_object_foreach(j, key, value) {
                        (void) key;
                        if (!json_no_nan_literals(value, depth - 1))
                                return false;
                }
                return true;
        }
        default:
                return true;
        }
}

json_object *jsonrpc_parse(const char *line, size_t len, int max_depth, const char **ret_reason) {
        _cleanup_(json_tokener_freep_) json_tokener *tok = NULL;
        json_object *j;

        if (memchr(line, 0, len)) {
                *ret_reason = "Parse error: the message contains a NUL byte";
                return NULL;
        }
        /* json-c's own check lets overlong forms and surrogates through. */
        if (!utf8_is_valid(line, len)) {
                *ret_reason = "Parse error: the message is not valid UTF-8";
                return NULL;
        }

        tok = json_tokener_new_ex(max_depth);
        if (!tok) {
                *ret_reason = "Parse error: out of memory";
                return NULL;
        }
        /* No JSON_TOKENER_VALIDATE_UTF8: utf8_is_valid() has refused all it would, and more. */
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT);

        j = json_tokener_parse_ex(tok, line, (int) len);
        enum json_tokener_error e = json_tokener_get_error(tok);
        size_t end = json_tokener_get_parse_end(tok);
        if (!j && e == json_tokener_continue) {
                /* A number or literal that runs to the end of the line ends only when the
                 * tokener sees the end of input: give it the terminating NUL. */
                j = json_tokener_parse_ex(tok, "", 1);
                e = json_tokener_get_error(tok);
                end = len;
        }
        if (!j || e != json_tokener_success) {
                json_object_put(j);
                switch (e) {
                case json_tokener_error_depth:
                        *ret_reason = "Parse error: nested too deeply";
                        break;
                case json_tokener_continue:
                case json_tokener_error_parse_eof:
                        *ret_reason = "Parse error: the message ends in the middle of a JSON value";
                        break;
                default:
                        *ret_reason = e == json_tokener_success ? "Parse error: empty message"
                                                                 : "Parse error: not valid JSON";
                }
                return NULL;
        }

        /* Only white space may follow the value. */
        for (size_t i = end; i < len; i++)
                if (!strchr(" \t\r\n", line[i])) {
                        json_object_put(j);
                        *ret_reason = "Parse error: text after the JSON value";
                        return NULL;
                }

        /* json-c takes NaN and Infinity, which JSON does not have. */
        if (!json_no_nan_literals(j, max_depth)) {
                json_object_put(j);
                *ret_reason = "Parse error: not valid JSON (NaN and Infinity are not JSON numbers)";
                return NULL;
        }

        return j;
}

size_t jsonrpc_count_elements_feed(JsonrpcElementCount *c, const char *p, size_t len, size_t limit) {
        /* Inside a string only its end matters: skip to the next quote or backslash at memchr's pace. The next
         * quote is looked for once and kept while backslashes come before it, so a string of escapes costs one
         * pass, not one per escape. */
        const char *quote = NULL;
        size_t i = 0;

        while (i < len && c->n <= limit) {
                if (c->escaped) {
                        c->escaped = false;
                        i++;
                        continue;
                }
                if (c->in_string) {
                        if (!quote || quote < p + i) {
                                /* None left in this piece: p + len stands for "not here". */
                                quote = memchr(p + i, '"', len - i);
                                if (!quote)
                                        quote = p + len;
                        }
                        size_t stop = (size_t) (quote - p);
                        const char *bs = memchr(p + i, '\\', stop - i);
                        if (bs) {
                                c->escaped = true;
                                i = (size_t) (bs - p) + 1;
                                continue;
                        }
                        if (stop == len)
                                return c->n;
                        c->in_string = false;
                        i = stop + 1;
                        continue;
                }
                char ch = p[i++];
                if (ch == '"')
                        c->in_string = true;
                else if (ch == '[' || ch == '{' || ch == ',' || ch == ':')
                        c->n++;
        }
        return c->n;
}

size_t jsonrpc_count_elements(const char *line, size_t len, size_t limit) {
        JsonrpcElementCount c = JSONRPC_ELEMENT_COUNT_INIT;

        return jsonrpc_count_elements_feed(&c, line, len, limit);
}

bool jsonrpc_id_valid(json_object *id) {
        if (!id)
                return false;
        if (json_object_is_type(id, json_type_string))
                return true;
        if (!json_is_integer(id))
                return false;
        /* json-c clamps integers beyond int64 to its ends without telling: such an
         * id could not be echoed as sent, and distinct ids would look the same. */
        int64_t v = json_object_get_int64(id);
        return v != INT64_MAX && v != INT64_MIN;
}

char *jsonrpc_id_key(json_object *id) {
        char *s = NULL;

        if (!jsonrpc_id_valid(id))
                return NULL;
        if (json_object_is_type(id, json_type_string)) {
                if (asprintf(&s, "s:%s", json_object_get_string(id)) < 0)
                        return NULL;
        } else if (asprintf(&s, "i:%" PRIi64, json_object_get_int64(id)) < 0)
                return NULL;
        return s;
}

static void set_invalid(JsonrpcMessage *m, int code, const char *message) {
        m->kind = JSONRPC_INVALID;
        m->error_code = code;
        m->error_message = message;
}

void jsonrpc_classify(json_object *msg, JsonrpcMessage *ret) {
        json_object *id = NULL, *method = NULL, *params = NULL;
        bool has_id;

        *ret = (JsonrpcMessage) {};

        if (!json_object_is_type(msg, json_type_object))
                return set_invalid(ret, JSONRPC_INVALID_REQUEST, "Invalid request: a message must be a JSON object");

        has_id = json_object_object_get_ex(msg, "id", &id);
        if (has_id && jsonrpc_id_valid(id))
                ret->id = id;

        const char *v = json_get_string(msg, "jsonrpc");
        if (!v || !streq(v, "2.0"))
                return set_invalid(ret, JSONRPC_INVALID_REQUEST, "Invalid request: \"jsonrpc\" must be \"2.0\"");

        if (!json_object_object_get_ex(msg, "method", &method)) {
                if (has_id && (json_object_object_get_ex(msg, "result", NULL) ||
                               json_object_object_get_ex(msg, "error", NULL))) {
                        ret->kind = JSONRPC_RESPONSE;
                        return;
                }
                return set_invalid(ret, JSONRPC_INVALID_REQUEST, "Invalid request: \"method\" is missing");
        }
        if (!json_object_is_type(method, json_type_string))
                return set_invalid(ret, JSONRPC_INVALID_REQUEST, "Invalid request: \"method\" must be a string");
        ret->method = json_object_get_string(method);
        /* "ping\u0000x" is not ping: no method has a NUL in its name. */
        ret->method_has_nul = strlen(ret->method) != (size_t) json_object_get_string_len(method);

        if (has_id && !ret->id)
                return set_invalid(ret, JSONRPC_INVALID_REQUEST,
                                   "Invalid request: \"id\" must be a string or an integer (null is not allowed)");

        if (json_object_object_get_ex(msg, "params", &params) && !json_object_is_type(params, json_type_object)) {
                ret->params = NULL;
                ret->kind = has_id ? JSONRPC_INVALID : JSONRPC_NOTIFICATION;
                ret->error_code = JSONRPC_INVALID_PARAMS;
                ret->error_message = "Invalid params: \"params\" must be an object";
                return;
        }
        ret->params = params;
        ret->kind = has_id ? JSONRPC_REQUEST : JSONRPC_NOTIFICATION;
}

/* with_id: a reply, whose "id" is null when the request's could not be read; else a notification. */
static json_object *reply_new(json_object *id, bool with_id) {
        json_object *r = json_object_new_object();
        if (!r)
                return NULL;
        if (json_add_string(r, "jsonrpc", "2.0") < 0)
                goto fail;
        if (with_id && json_object_object_add(r, "id", json_object_get(id)) < 0)
                goto fail;
        return r;
fail:
        json_object_put(r);
        return NULL;
}

json_object *jsonrpc_result_new(json_object *id, json_object *result) {
        json_object *r;

        /* MCP results are objects: NULL here means building one ran out of memory. */
        if (!result)
                return NULL;
        r = reply_new(id, true);
        if (!r || json_add(r, "result", result) < 0) {
                json_object_put(r);
                return NULL;
        }
        return r;
}

json_object *jsonrpc_error_new(json_object *id, int code, const char *message, json_object *data) {
        _cleanup_json_ json_object *d = data;
        json_object *r = reply_new(id, true), *e = json_object_new_object();

        if (!r || !e)
                goto fail;
        if (json_add_int(e, "code", code) < 0 || json_add_string(e, "message", message) < 0)
                goto fail;
        if (d && json_add(e, "data", TAKE_PTR(d)) < 0)
                goto fail;
        if (json_add(r, "error", TAKE_PTR(e)) < 0)
                goto fail;
        return r;
fail:
        json_object_put(e);
        json_object_put(r);
        return NULL;
}

json_object *jsonrpc_notification_new(const char *method, json_object *params) {
        json_object *r = reply_new(NULL, false);
        if (!r || json_add_string(r, "method", method) < 0 || (params && json_add(r, "params", params) < 0)) {
                json_object_put(r);
                return NULL;
        }
        return r;
}
