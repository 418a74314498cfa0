# SPDX-License-Identifier: MIT
# Man pages, in mdoc, generated from *.in with the configured paths
# (edit_paths, in systemd/local.mk), so that they name the paths of the build
# under any prefix.

man/%.8: man/%.8.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(edit_paths) $< >$@.tmp && mv -f $@.tmp $@
man/%.5: man/%.5.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(edit_paths) $< >$@.tmp && mv -f $@.tmp $@
man/%.1: man/%.1.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(edit_paths) $< >$@.tmp && mv -f $@.tmp $@

nodist_man1_MANS = man/mcp-python-sandbox.1
nodist_man5_MANS = man/mcp-python-sandboxd.conf.5
nodist_man8_MANS = man/mcp-python-sandboxd.8

CLEANFILES += $(nodist_man1_MANS) $(nodist_man5_MANS) $(nodist_man8_MANS)
EXTRA_DIST += man/mcp-python-sandbox.1.in man/mcp-python-sandboxd.conf.5.in man/mcp-python-sandboxd.8.in
