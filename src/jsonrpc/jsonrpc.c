/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

struct JsonrpcParser {
        const char *line;
        size_t len;
        size_t pos;                     /* the first byte not given to the checks and the tokener */
        size_t counted;                 /* the first byte not counted (the count may run ahead of pos) */
        int max_depth;
        size_t max_elements;            /* 0: no limit */
        JsonrpcElementCount count;
        json_tokener *tok;
        json_object *value;
        bool complete;                  /* the tokener found the value's end (value NULL: a JSON null) */
        bool blank, nul, bad_utf8, trailing;
        bool done;                      /* the whole line was looked at */
        enum json_tokener_error error;  /* the tokener's first error */
};

/* Outside strings, what ends a number or a literal: white space and structure. */
static bool ends_token(char ch) {
        return ch != 0 && strchr(" \t\r\n,:[]{}\"", ch);
}

static bool only_white(const char *s, size_t n, const char *white) {
        for (size_t i = 0; i < n; i++)
                if (!strchr(white, s[i]) || s[i] == 0)
                        return false;
        return true;
}

int jsonrpc_parser_new(JsonrpcParser **ret, const char *line, size_t len, int max_depth, size_t max_elements) {
        JsonrpcParser *p = calloc(1, sizeof(*p));

        if (!p)
                return -ENOMEM;
        *p = (JsonrpcParser) {
                .line = line,
                .len = len,
                .max_depth = max_depth,
                .max_elements = max_elements,
                .count = JSONRPC_ELEMENT_COUNT_INIT,
                .blank = true,
                .error = json_tokener_success,
        };
        p->tok = json_tokener_new_ex(max_depth);
        if (!p->tok) {
                free(p);
                return -ENOMEM;
        }
        /* No JSON_TOKENER_VALIDATE_UTF8: utf8_is_valid() has refused all it would, and more. */
        json_tokener_set_flags(p->tok, JSON_TOKENER_STRICT);
        *ret = p;
        return 0;
}

JsonrpcParser *jsonrpc_parser_free(JsonrpcParser *p) {
        if (!p)
                return NULL;
        json_tokener_free(p->tok);
        json_object_put(p->value);
        free(p);
        return NULL;
}

static bool parser_too_many(const JsonrpcParser *p) {
        return p->max_elements > 0 && p->count.n > p->max_elements;
}

static void parser_count_to(JsonrpcParser *p, size_t end) {
        if (end <= p->counted)
                return;
        (void) jsonrpc_count_elements_feed(&p->count, p->line + p->counted, end - p->counted,
                                           p->max_elements > 0 ? p->max_elements : SIZE_MAX);
        p->counted = end;
}

/*
 * Where the piece that starts at p->pos ends, about slice bytes on. The tokener is given no number or literal cut
 * in two (given "8" and then "-" it takes 8, where given "8-" it finds a bad number), and our UTF-8 check no
 * character cut in two: a piece ends inside a string, or after white space or structure, and never before a
 * continuation byte. Where strings are is known from the element count, which runs up to the end.
 */
static size_t parser_piece_end(JsonrpcParser *p, size_t slice) {
        size_t end = p->len - p->pos <= slice ? p->len : p->pos + slice, continuation = 0;

        parser_count_to(p, end);
        while (end < p->len) {
                unsigned char next = (unsigned char) p->line[end];

                if ((next & 0xc0) != 0x80) {
                        /* A number or literal too long to be taken is not waited for (jsonrpc_parser_step()). */
                        if (p->count.in_string || ends_token(p->line[end - 1]) || p->count.long_token)
                                break;
                        continuation = 0;
                } else if (++continuation > 3)
                        break;   /* no character has more: the line is not UTF-8, wherever it is cut */
                end++;
                parser_count_to(p, end);
        }
        return end;
}

int jsonrpc_parser_step(JsonrpcParser *p, size_t slice) {
        size_t end;

        if (p->done)
                return JSONRPC_PARSER_DONE;

        end = parser_piece_end(p, slice > 0 ? slice : 1);
        const char *s = p->line + p->pos;
        size_t n = end - p->pos;
        /* A number or literal over JSONRPC_TOKEN_MAX in this piece: the tokener is given what comes before it,
         * whole or in slices alike (so that an error before it is the one reported), and the token is refused. */
        bool long_here = p->count.long_token && p->count.long_token_start < end;
        size_t n_tok = long_here ? (size_t) (MAX(p->count.long_token_start, p->pos) - p->pos) : n;

        if (p->blank)
                p->blank = only_white(s, n, " \t\r");
        if (!p->nul && memchr(s, 0, n))
                p->nul = true;
        /* json-c's own check lets overlong forms and surrogates through. */
        if (!p->nul && !p->bad_utf8 && !utf8_is_valid(s, n))
                p->bad_utf8 = true;

        /* Decided already (the reason is one of those, whatever the tokener would say): the tokener is spared. */
        if (!p->nul && !p->bad_utf8 && !parser_too_many(p) && p->error == json_tokener_success) {
                if (p->complete) {
                        /* Only white space may follow the value. The strict tokener, given the line whole, eats
                         * the white space after the value and finds anything else unexpected: so it is here. */
                        if (!only_white(s, n, " \t\r\n"))
                                p->error = json_tokener_error_parse_unexpected;
                } else if (n_tok > 0) {
                        json_object *j = json_tokener_parse_ex(p->tok, s, (int) n_tok);
                        enum json_tokener_error e = json_tokener_get_error(p->tok);

                        if (e == json_tokener_success) {
                                size_t stop = json_tokener_get_parse_end(p->tok);
                                p->value = j;
                                p->complete = true;
                                if (stop < n && !only_white(s + stop, n - stop, " \t\r\n"))
                                        p->trailing = true;
                        } else {
                                json_object_put(j);
                                if (e != json_tokener_continue)
                                        p->error = e;
                        }
                }
                if (long_here && p->error == json_tokener_success)
                        p->error = json_tokener_error_parse_unexpected;
        }
        p->pos = end;
        if (p->pos < p->len)
                return 0;

        /* The end of the line. A number or literal that runs to it ends only when the tokener sees the end of
         * input: give it the terminating NUL. */
        if (!p->nul && !p->bad_utf8 && !parser_too_many(p) && p->error == json_tokener_success && !p->complete) {
                json_object *j = json_tokener_parse_ex(p->tok, "", 1);
                enum json_tokener_error e = json_tokener_get_error(p->tok);

                if (e == json_tokener_success) {
                        p->value = j;
                        p->complete = true;
                } else {
                        json_object_put(j);
                        p->error = e == json_tokener_continue ? json_tokener_error_parse_eof : e;
                }
        }
        p->done = true;
        return JSONRPC_PARSER_DONE;
}

bool jsonrpc_parser_blank(const JsonrpcParser *p) {
        return p->blank;
}

bool jsonrpc_parser_too_many_elements(const JsonrpcParser *p) {
        return parser_too_many(p);
}

json_object *jsonrpc_parser_finish(JsonrpcParser *p, const char **ret_reason) {
        if (p->nul) {
                *ret_reason = "Parse error: the message contains a NUL byte";
                return NULL;
        }
        if (p->bad_utf8) {
                *ret_reason = "Parse error: the message is not valid UTF-8";
                return NULL;
        }
        switch (p->error) {
        case json_tokener_success:
                break;
        case json_tokener_error_depth:
                *ret_reason = "Parse error: nested too deeply";
                return NULL;
        case json_tokener_continue:
        case json_tokener_error_parse_eof:
                *ret_reason = "Parse error: the message ends in the middle of a JSON value";
                return NULL;
        default:
                *ret_reason = "Parse error: not valid JSON";
                return NULL;
        }
        if (!p->value) {
                *ret_reason = "Parse error: empty message";
                return NULL;
        }
        if (p->trailing) {
                *ret_reason = "Parse error: text after the JSON value";
                return NULL;
        }
        /* json-c takes NaN and Infinity, which JSON does not have. */
        if (!json_no_nan_literals(p->value, p->max_depth)) {
                *ret_reason = "Parse error: not valid JSON (NaN and Infinity are not JSON numbers)";
                return NULL;
        }
        return TAKE_PTR(p->value);
}

json_object *jsonrpc_parse_sliced(const char *line, size_t len, int max_depth, size_t slice, const char **ret_reason) {
        _cleanup_(jsonrpc_parser_freep) JsonrpcParser *p = NULL;

        if (jsonrpc_parser_new(&p, line, len, max_depth, 0) < 0) {
                *ret_reason = "Parse error: out of memory";
                return NULL;
        }
        while (jsonrpc_parser_step(p, slice) != JSONRPC_PARSER_DONE)
                ;
        return jsonrpc_parser_finish(p, ret_reason);
}

json_object *jsonrpc_parse(const char *line, size_t len, int max_depth, const char **ret_reason) {
        return jsonrpc_parse_sliced(line, len, max_depth, SIZE_MAX, ret_reason);
}

static size_t count_piece(JsonrpcElementCount *c, const char *p, size_t len, size_t limit) {
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
                if (ch == '"') {
                        c->in_string = true;
                        c->token = 0;
                } else if (ch == '[' || ch == '{' || ch == ',' || ch == ':') {
                        c->n++;
                        c->token = 0;
                } else if (ch == ']' || ch == '}' || ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n')
                        c->token = 0;
                else if (++c->token > JSONRPC_TOKEN_MAX && !c->long_token) {
                        c->long_token = true;
                        c->long_token_start = c->offset + i - c->token;
                }
        }
        return c->n;
}

size_t jsonrpc_count_elements_feed(JsonrpcElementCount *c, const char *p, size_t len, size_t limit) {
        size_t n = count_piece(c, p, len, limit);

        c->offset += len;
        return n;
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
