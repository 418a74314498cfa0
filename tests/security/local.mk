# SPDX-License-Identifier: MIT
# Escape tests: scripts that try to get out of the sandbox, each checked for the
# refusal. Python programs like the integration tests, on the same harness
# (tests/integration/mcptest.py, on PYTHONPATH there).
# The quick ones are in make check, the others in make check-integration (tests/integration/local.mk).
SECURITY_QUICK = \
	tests/security/test-escape.py \
	tests/security/test-root.py \
	tests/security/test-sandbox-failures.py
SECURITY_SLOW = \
	tests/security/test-package-code.py \
	tests/security/test-unprivileged.sh \
	tests/security/test-sandbox-protocol.py
SECURITY_TESTS = $(SECURITY_QUICK) $(SECURITY_SLOW)
TESTS += $(SECURITY_QUICK)
EXTRA_DIST += $(SECURITY_TESTS)
