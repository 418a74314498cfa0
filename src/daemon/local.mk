# SPDX-License-Identifier: MIT
sbin_PROGRAMS += mcp-python-sandboxd
mcp_python_sandboxd_SOURCES = src/daemon/main.c
mcp_python_sandboxd_CFLAGS = $(AM_CFLAGS) $(SYSTEMD_CFLAGS) $(JSONC_CFLAGS)
mcp_python_sandboxd_LDADD = $(CORE_LIBS)

# The network bridge, the first program of a sandbox when network-allow= is set (src/netproxy/proxy.h).
pkglibexec_PROGRAMS = mcp-python-sandbox-netbridge
mcp_python_sandbox_netbridge_SOURCES = src/netproxy/netbridge.c
# Small and plain: no sanitizer runtime inside the sandbox.
mcp_python_sandbox_netbridge_CFLAGS = $(WARN_CFLAGS)
mcp_python_sandbox_netbridge_LDFLAGS =
