/* SPDX-License-Identifier: MIT */
#include <stddef.h>

#include "tools.h"

const Tool *const tools_all[] = {
        &tool_execute_python,
        &tool_validate_script,
        &tool_check_environment,
        NULL,
};
