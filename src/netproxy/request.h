/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The head of a request a proxy client sends: "CONNECT host:port HTTP/1.1"
 * or a plain HTTP request with an absolute URI ("GET http://host/path
 * HTTP/1.1"), then header lines up to an empty line. Bounded, strict, no
 * allocation before the head is complete. Pure: the parser reads a buffer.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most a request head may take, request line and headers together. */
#define NET_REQUEST_HEAD_MAX 16384
#define NET_REQUEST_HEADERS_MAX 100

typedef struct NetRequest {
        bool connect;           /* CONNECT: a tunnel; else a plain HTTP request to forward */
        char *host;             /* normalized (net_host_normalize()) */
        uint16_t port;
        char *upstream;         /* plain HTTP: the head to send the origin (origin-form, Host, Connection: close) */
        size_t upstream_len;
} NetRequest;

enum {
        NET_REQUEST_MORE = 0,           /* no complete head yet */
        NET_REQUEST_DONE = 1,           /* *ret filled; *ret_consumed bytes were the head */
};

/*
 * Parse the head at the start of buf. NET_REQUEST_MORE, NET_REQUEST_DONE, -EBADMSG (not a request a proxy takes:
 * malformed, a scheme other than http for a plain request, user info in the URI), -E2BIG (the head is over
 * NET_REQUEST_HEAD_MAX or has too many headers), -ENOMEM.
 */
int net_request_parse(const char *buf, size_t n, NetRequest *ret, size_t *ret_consumed);
void net_request_done(NetRequest *r);
