/* SPDX-License-Identifier: MIT */
/*
 * network-allow=: the proxy context configured from the settings, and the wrapping of a run's command behind the
 * bridge, with a proxy made now for a known uid or later for a sandbox started ahead.
 */

#include <errno.h>
#include <stdio.h>

#include "fs-util.h"
#include "log.h"
#include "macro.h"
#include "runtime-internal.h"
#include "strv.h"

/* network-allow= as the configuration says now (the entries were checked when it was read). */
void runtime_configure_netproxy(Runtime *r) {
        NetAllowlist l = {};
        _cleanup_free_ char *error = NULL;

        if (net_allowlist_parse(r->config->network_allow, &l, &error) < 0)
                log_error("%s", strempty(error));
        net_proxy_context_configure(r->netproxy, &l, r->config->network_allow_private,
                                    (unsigned) MIN(r->config->network_max_connections_per_user, 65536u));
        if (net_proxy_context_enabled(r->netproxy) && !net_proxy_context_bridge(r->netproxy))
                log_error("network-allow is set, but mcp-python-sandbox-netbridge is not installed (looked beside the "
                          "daemon and in " PKGLIBEXECDIR "): runs that want the network will fail.");
}

bool runtime_network_allowlisted(const Runtime *r) {
        return net_proxy_context_enabled(r->netproxy) && !r->config->network && !runtime_unsandboxed(r);
}

/* The command behind the bridge, which gets the sandbox's end of the socket pair at fd. */
static char **bridge_command(Runtime *r, int fd, char *const *command) {
        _cleanup_strv_free_ char **cmd = strv_new();
        char s[16], port[16];

        snprintf(s, sizeof(s), "%d", fd);
        snprintf(port, sizeof(port), "%d", NET_PROXY_PORT);
        if (!cmd || strv_extend(&cmd, SANDBOX_BRIDGE_PATH) < 0 || strv_extend(&cmd, s) < 0 ||
            strv_extend(&cmd, port) < 0 || strv_extend_strv(&cmd, command) < 0)
                return NULL;
        return TAKE_PTR(cmd);
}

int runtime_network_wrap(Runtime *r, uid_t uid, char *const *command, NetProxy **ret_proxy, int *ret_fd,
                         char ***ret_command) {
        NetProxy *p = NULL;
        int fd = -EBADF, k;

        *ret_proxy = NULL;
        *ret_fd = -EBADF;
        *ret_command = NULL;
        if (!runtime_network_allowlisted(r))
                return 0;
        k = net_proxy_new(r->netproxy, uid, &p, &fd);
        if (k < 0)
                return k;
        *ret_command = bridge_command(r, fd, command);
        if (!*ret_command) {
                net_proxy_free(p);
                safe_close(fd);
                return -ENOMEM;
        }
        *ret_proxy = p;
        *ret_fd = fd;
        return 1;
}

int runtime_network_wrap_later(Runtime *r, char *const *command, int *ret_ctl_fd, int *ret_fd, char ***ret_command) {
        int ctl = -EBADF, fd = -EBADF, k;

        *ret_ctl_fd = *ret_fd = -EBADF;
        *ret_command = NULL;
        if (!runtime_network_allowlisted(r))
                return 0;
        if (!net_proxy_context_bridge(r->netproxy))
                return -ENOENT;
        k = net_proxy_socket_pair(&ctl, &fd);
        if (k < 0)
                return k;
        *ret_command = bridge_command(r, fd, command);
        if (!*ret_command) {
                safe_close(ctl);
                safe_close(fd);
                return -ENOMEM;
        }
        *ret_ctl_fd = ctl;
        *ret_fd = fd;
        return 1;
}

int runtime_network_adopt(Runtime *r, uid_t uid, int ctl_fd, NetProxy **ret) {
        return net_proxy_adopt(r->netproxy, uid, ctl_fd, ret);
}
