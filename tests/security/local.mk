# SPDX-License-Identifier: MIT
# Escape tests: scripts that try to get out of the sandbox, each checked for the
# refusal. Python programs like the integration tests, on the same harness
# (tests/integration/mcptest.py, on PYTHONPATH there).
SECURITY_TESTS = \
	tests/security/test-escape.py \
	tests/security/test-package-code.py \
	tests/security/test-root.py \
	tests/security/test-unprivileged.sh \
	tests/security/test-sandbox-failures.py \
	tests/security/test-sandbox-protocol.py
TESTS += $(SECURITY_TESTS)
EXTRA_DIST += $(SECURITY_TESTS)
