# SPDX-License-Identifier: MIT
# Unit tests: one Check suite per module.
UNIT_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SYSTEMD_CFLAGS) $(JSONC_CFLAGS)
UNIT_LIBS = $(CORE_LIBS) $(CHECK_LIBS)
