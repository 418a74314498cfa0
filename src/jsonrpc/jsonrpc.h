/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * JSON-RPC 2.0 as MCP uses it: classify one decoded message, and build
 * replies. Protocol faults become error replies here; nothing is logged.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

enum {
        JSONRPC_PARSE_ERROR = -32700,
        JSONRPC_INVALID_REQUEST = -32600,
        JSONRPC_METHOD_NOT_FOUND = -32601,
        JSONRPC_INVALID_PARAMS = -32602,
        JSONRPC_INTERNAL_ERROR = -32603,
        JSONRPC_SERVER_LIMIT = -32000,    /* a per-connection or per-user limit of this server */
        MCP_ERROR_HEADER_MISMATCH = -32020,
        MCP_ERROR_MISSING_CAPABILITY = -32021,
        MCP_ERROR_UNSUPPORTED_VERSION = -32022,
};

typedef enum JsonrpcKind {
        JSONRPC_REQUEST,
        JSONRPC_NOTIFICATION,
        JSONRPC_RESPONSE,          /* a reply from the client; we send no requests, so it is dropped */
        JSONRPC_INVALID,
} JsonrpcKind;

typedef struct JsonrpcMessage {
        JsonrpcKind kind;
        const char *method;        /* borrowed from the message */
        bool method_has_nul;       /* the name goes on past a NUL: it is no method of ours */
        json_object *id;           /* borrowed; NULL when absent or unusable */
        json_object *params;       /* borrowed; NULL when absent */
        int error_code;            /* for JSONRPC_INVALID */
        const char *error_message;
} JsonrpcMessage;

/* Parse one line; returns the value, or NULL with a reason for -32700. */
json_object *jsonrpc_parse(const char *line, size_t len, int max_depth, const char **ret_reason);

/*
 * One complete line parsed a slice at a time, so that a long line does not hold the event loop: each step looks at
 * about slice more bytes (a little more, to end the piece where the tokener may resume: inside a string, or after
 * white space or structure) and returns. Whatever the slices, the outcome is the one jsonrpc_parse() gives the line
 * whole. The line is borrowed and must stay in place until the parser is freed. While it works the parser holds
 * json-c's tokener and the value so far: for a long string, up to about twice the line (the string as it is read,
 * and its copy in the value).
 */
typedef struct JsonrpcParser JsonrpcParser;
enum {
        JSONRPC_PARSER_DONE = 1,        /* jsonrpc_parser_step(): the whole line was looked at */
};
/* max_elements: the count of values over which the line is refused (jsonrpc_parser_too_many_elements()); 0: none. */
int jsonrpc_parser_new(JsonrpcParser **ret, const char *line, size_t len, int max_depth, size_t max_elements);
JsonrpcParser *jsonrpc_parser_free(JsonrpcParser *p);
static inline void jsonrpc_parser_freep(JsonrpcParser **p) {
        if (*p)
                jsonrpc_parser_free(*p);
}
/* Returns 0 while bytes are left, JSONRPC_PARSER_DONE once the line is done. */
int jsonrpc_parser_step(JsonrpcParser *p, size_t slice);
/* Once done: the line held only blanks (spaces, tabs, CRs), and no message. */
bool jsonrpc_parser_blank(const JsonrpcParser *p);
/* Once done: the line holds more values than max_elements (decided before anything the parser found). */
bool jsonrpc_parser_too_many_elements(const JsonrpcParser *p);
/* Once done: the value (the caller's), or NULL with the reason for -32700, as jsonrpc_parse() says them. */
json_object *jsonrpc_parser_finish(JsonrpcParser *p, const char **ret_reason);
/* For tests: jsonrpc_parse() a slice at a time. */
json_object *jsonrpc_parse_sliced(const char *line, size_t len, int max_depth, size_t slice, const char **ret_reason);
/*
 * Count the JSON values a line would make (brackets, braces, commas and colons
 * outside strings, plus one), without parsing it; stops counting past limit.
 * Cheap, so a message of millions of tiny values can be refused before json-c
 * builds an object for each.
 */
size_t jsonrpc_count_elements(const char *line, size_t len, size_t limit);
/*
 * The same count, of a line that arrives in pieces: each piece fed as it comes, in order. A line's values are
 * counted once whatever it is cut into, so a line over the budget is known as soon as its bytes are, before it ends.
 */
/* No number or literal is longer than this: a longer one makes the line invalid (long_token), found as it is
 * counted, before a parser is given a token of megabytes to take in one piece. */
#define JSONRPC_TOKEN_MAX 4096

typedef struct JsonrpcElementCount {
        size_t n;
        bool in_string, escaped;
        size_t token;                   /* bytes of the number or literal it is in */
        bool long_token;                /* one was over JSONRPC_TOKEN_MAX */
        size_t long_token_start;        /* where the first such began, in bytes from the start */
        size_t offset;                  /* bytes fed so far */
} JsonrpcElementCount;
#define JSONRPC_ELEMENT_COUNT_INIT ((JsonrpcElementCount) { .n = 1 })
/* Count len more bytes, stopping past limit; returns the count so far. */
size_t jsonrpc_count_elements_feed(JsonrpcElementCount *c, const char *p, size_t len, size_t limit);
void jsonrpc_classify(json_object *msg, JsonrpcMessage *ret);
bool jsonrpc_id_valid(json_object *id);
/* A stable key for an id ("s:abc", "i:42"), for finding in-flight requests. */
char *jsonrpc_id_key(json_object *id);

/* Build a reply; id may be NULL (then "id": null, as for a request whose id could not be read); data
 * and result are stolen. */
json_object *jsonrpc_result_new(json_object *id, json_object *result);
json_object *jsonrpc_error_new(json_object *id, int code, const char *message, json_object *data);
json_object *jsonrpc_notification_new(const char *method, json_object *params);
