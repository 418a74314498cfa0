/* SPDX-License-Identifier: MIT */
#pragma once

/* The registry: every tool the daemon serves, in tools/list order. */

#include "mcp/tool.h"

extern const Tool tool_execute_python;
extern const Tool tool_validate_script;
extern const Tool tool_check_environment;

extern const Tool *const tools_all[];
