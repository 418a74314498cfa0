/* SPDX-License-Identifier: MIT */
#include <stddef.h>

#include "tools.h"

const Tool *const tools_all[] = {
        &tool_execute_python,
        &tool_validate_script,
        &tool_check_environment,
        &tool_create_sandbox,
        &tool_execute_code,
        &tool_install_package,
        &tool_list_installed_packages,
        &tool_reset_sandbox,
        &tool_get_sandbox_info,
        &tool_get_sandbox_status,
        &tool_close_sandbox,
        &tool_list_files,
        &tool_read_file,
        &tool_write_file,
        NULL,
};

/* unsafe-no-sandbox=yes: what runs without the sandbox, described as such; no persistent sandboxes. */
const Tool *const tools_unsandboxed[] = {
        &tool_execute_python_unsandboxed,
        &tool_validate_script,
        &tool_check_environment,
        NULL,
};
