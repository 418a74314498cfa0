/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The network proxy of network-allow=: a run's only way out of its empty
 * network namespace.
 *
 * Per run, net_proxy_new() makes a socket pair; the sandbox gets one end.
 * The bridge (src/netproxy/netbridge.c), the sandbox's first program, binds
 * a TCP socket to 127.0.0.1:NET_PROXY_PORT in the sandbox's own loopback,
 * sends that listening socket over the pair and execs the command. From
 * then on the daemon accepts the run's proxy connections itself, reads each
 * request head (CONNECT or plain HTTP), checks the host against the
 * allowlist, resolves names in a child process (never in the event loop),
 * refuses addresses no allowlist entry may lead to (loopback, link-local,
 * multicast, ...; private ones unless the entry is that address or
 * network-allow-private=yes) and relays bytes. Nothing from the sandbox
 * is trusted: the fd it sends is checked to be a listening TCP socket.
 *
 * Connections and the bytes they buffer are charged to the run's caller uid
 * (in the scheduler's account: CHARGE_PROXY_CONNECTIONS counts proxy
 * connections, CHARGE_PROXY_BYTES their buffers, CHARGE_PROXY_LOOKUPS their
 * resolver children: at most 8 of one uid and 32 of all at once, the rest are
 * answered 503 at once). Freeing a NetProxy closes all its connections.
 */

#include <stdbool.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "allowlist.h"
#include "charge.h"

/* The bridge's port on the sandbox's loopback, which HTTP_PROXY and HTTPS_PROXY name. */
#define NET_PROXY_PORT 3128

typedef struct NetProxyContext NetProxyContext;
typedef struct NetProxy NetProxy;

/* charges: where connections and their buffers are charged (the scheduler's account); it outlives the context. */
int net_proxy_context_new(NetProxyContext **ret, sd_event *e, ChargeRegistry *charges);
NetProxyContext *net_proxy_context_free(NetProxyContext *c);
/* Take the allowlist (*l is empty after); reloads call it again. max_per_user: proxy connections of one uid. */
void net_proxy_context_configure(NetProxyContext *c, NetAllowlist *l, bool allow_private, unsigned max_per_user);
/* Is there an allowlist at all? Without one, runs get neither bridge nor socket. */
bool net_proxy_context_enabled(const NetProxyContext *c);
/* The host path of the bridge program, NULL if it was not found. */
const char *net_proxy_context_bridge(const NetProxyContext *c);

/* A proxy for one run of uid; *ret_sandbox_fd (O_CLOEXEC) is the end for the sandbox's bridge. */
int net_proxy_new(NetProxyContext *c, uid_t uid, NetProxy **ret, int *ret_sandbox_fd);
/* The two ends without a proxy yet, for a sandbox started before it is known whose it is (prestart=): the
 * bridge's socket waits in *ret_ctl_fd until net_proxy_adopt() makes the proxy of uid from it (taking it). */
int net_proxy_socket_pair(int *ret_ctl_fd, int *ret_sandbox_fd);
int net_proxy_adopt(NetProxyContext *c, uid_t uid, int ctl_fd, NetProxy **ret);
NetProxy *net_proxy_free(NetProxy *p);
/* The hosts refused so far ("host:port", "[v6]:port"), at most NET_PROXY_REFUSED_MAX; a strv, never NULL. */
#define NET_PROXY_REFUSED_MAX 32
char *const *net_proxy_refused(const NetProxy *p);
/* The same, handed over (the caller frees it; NULL when out of memory); the proxy starts a new list. */
char **net_proxy_refused_take(NetProxy *p);
