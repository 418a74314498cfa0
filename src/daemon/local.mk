# SPDX-License-Identifier: MIT
sbin_PROGRAMS += mcp-python-sandboxd
mcp_python_sandboxd_SOURCES = src/daemon/main.c
mcp_python_sandboxd_CFLAGS = $(AM_CFLAGS) $(SYSTEMD_CFLAGS) $(JSONC_CFLAGS)
mcp_python_sandboxd_LDADD = $(CORE_LIBS)
