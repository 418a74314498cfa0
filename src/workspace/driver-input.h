/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * What a persistent sandbox's driver (driver.py) sends the daemon, record by
 * record, as recv() returns them from the SOCK_SEQPACKET socket. Each record
 * is a kind byte and a payload:
 *   'H' hello: one JSON object, {"hello": PID, "python": VERSION}
 *   'C' a piece of a message         'E' the message's last piece
 * A message (a reply) is one JSON object in its pieces' payloads, parsed as
 * each piece arrives (a long reply costs the event loop one piece at a time,
 * never the whole message at once), at most max bytes, a cap the daemon sets from what it asked for (the driver keeps to
 * it: see workspace_message_max() in wire.c). The sandbox controls all of it:
 * anything else is a broken protocol, and memory stays bounded whatever
 * arrives.
 */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "jsonrpc/jsonrpc.h"

#define DRIVER_RECORD_MAX 65536                         /* one record: kind byte + payload */
#define DRIVER_MESSAGE_MAX (64u * 1024 * 1024)          /* no cap may be larger than this */
/* JSON values in a message (jsonrpc_count_elements()), counted before each piece is parsed: the largest reply the
 * driver sends, a listing of 1000 entries, has some 9000; 16384 empty objects would cost json-c some 13 MB and the
 * loop a second to turn into a result. */
#define DRIVER_MESSAGE_MAX_VALUES 16384

typedef struct DriverInput {
        size_t max;                     /* bytes a message may have; 0: one record's payload */
        json_tokener *tok;              /* the message being parsed, piece by piece as it arrives */
        json_object *done;              /* its object, once complete (what follows it up to 'E' is ignored) */
        size_t len;                     /* bytes of it so far */
        JsonrpcElementCount values;     /* its values so far */
} DriverInput;

typedef enum DriverRecord {
        DRIVER_RECORD_NONE,             /* nothing complete (yet) */
        DRIVER_RECORD_HELLO,
        DRIVER_RECORD_MESSAGE,
        DRIVER_RECORD_INVALID,          /* not what the driver sends: the sandbox broke the protocol */
} DriverRecord;

/*
 * Take one record of n bytes (n as recv() with MSG_TRUNC reports it; rec
 * holds at least MIN(n, DRIVER_RECORD_MAX) of them). Returns
 * DRIVER_RECORD_HELLO or DRIVER_RECORD_MESSAGE with *ret the object (the
 * caller's reference) when the record completes one; DRIVER_RECORD_INVALID
 * for a record too long or of an unknown kind, a message past max bytes, or
 * one that is not a JSON object (what was half received is dropped); else
 * DRIVER_RECORD_NONE.
 */
DriverRecord driver_input_feed(DriverInput *in, const char *rec, size_t n, json_object **ret);
/* Forget a message half received (the sandbox stopped); max stays. */
void driver_input_done(DriverInput *in);
