# SPDX-License-Identifier: MIT
# src/shim: the stdio shim MCP clients launch. libc, src/shared/macro.h, and json-c for the one message it
# looks inside (a tools/call with "files", src/shim/files.c).
bin_PROGRAMS += mcp-python-sandbox
mcp_python_sandbox_SOURCES = src/shim/shim.c src/shim/files.c src/shim/files.h
mcp_python_sandbox_CFLAGS = $(AM_CFLAGS) $(JSONC_CFLAGS)
mcp_python_sandbox_LDADD = $(JSONC_LIBS)
