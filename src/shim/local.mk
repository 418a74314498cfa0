# SPDX-License-Identifier: MIT
# src/shim: the stdio shim MCP clients launch. libc and src/shared/macro.h only.
bin_PROGRAMS += mcp-python-sandbox
mcp_python_sandbox_SOURCES = src/shim/shim.c
