# SPDX-License-Identifier: MIT
# The Debian package in a virtual machine under a real systemd: builds the
# .deb, boots a cached Debian 12 image with qemu and runs
# tests/systemd/vm-test.sh there. Needs root; not part of make check (it
# takes minutes); .ci/run runs it.
check-systemd:
	TOP_SRCDIR='$(abs_top_srcdir)' $(SHELL) '$(abs_top_srcdir)/tests/systemd/check-systemd.sh'
.PHONY: check-systemd
EXTRA_DIST += tests/systemd/check-systemd.sh tests/systemd/vm-test.sh tests/systemd/vm-client.py
