/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The administrator's network allowlist (network-allow=) and what the proxy
 * decides from it: which request targets are allowed, and which addresses a
 * name may lead to. Pure functions; nothing here resolves, connects or logs.
 *
 * Entries, separated by white space:
 *   files.example.org          that host, ports 80 and 443
 *   api.example.net:8443       that host, that port only
 *   *.example.com              every name below example.com (not example.com itself), ports 80 and 443
 *   10.0.0.5  [2001:db8::1]:8080  an address; only such a literal entry reaches a private address
 * Names compare without case and without a trailing dot.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define NET_HOST_MAX 253

typedef struct NetAllowEntry {
        char *host;             /* normalized (net_host_normalize()); for a wildcard the suffix after "*." */
        bool wildcard;
        bool literal;           /* an IP address */
        uint16_t port;          /* 0: 80 and 443 */
} NetAllowEntry;

typedef struct NetAllowlist {
        NetAllowEntry *items;
        size_t n;
} NetAllowlist;

/* Parse the entries (each one a string of the setting's strv); on a bad entry -EINVAL and *ret_error says which. */
int net_allowlist_parse(char *const *entries, NetAllowlist *ret, char **ret_error);
void net_allowlist_done(NetAllowlist *l);

/* The entry that allows host (normalized) at port, or NULL. */
const NetAllowEntry *net_allowlist_match(const NetAllowlist *l, const char *host, uint16_t port);

/*
 * A host as a request or an entry names it (n bytes, no port) in the one form the list compares: a name in lower
 * case without a trailing dot, an IPv4 address dotted, an IPv6 address in its canonical form without brackets
 * ("[::1]" and "::1" alike). -EINVAL for anything else (empty labels, characters no host name has, too long).
 * *ret_literal: it is an address.
 */
int net_host_normalize(const char *host, size_t n, char **ret, bool *ret_literal);

typedef enum NetAddrClass {
        NET_ADDR_PUBLIC,
        NET_ADDR_PRIVATE,       /* RFC 1918, shared address space (100.64/10), unique local (fc00::/7) */
        NET_ADDR_FORBIDDEN,     /* loopback, unspecified, link-local, multicast, broadcast, reserved */
} NetAddrClass;

/* What an address is; IPv4-mapped and NAT64 IPv6 addresses count as the IPv4 address in them. */
NetAddrClass net_addr_class(const struct sockaddr *sa);
