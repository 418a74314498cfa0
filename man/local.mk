# SPDX-License-Identifier: MIT
# Man pages, in mdoc. The daemon's pages are generated from *.in with the
# configured paths (edit_paths, in systemd/local.mk). mcp-python-sandbox(1)
# names only the packaged paths (/usr/sbin, /run) and is installed as it is;
# to give it configured paths too, rename it to mcp-python-sandbox.1.in, write
# @sbindir@ and @runstatedir@ in it, and move it to nodist_man1_MANS below.

man/%.8: man/%.8.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(edit_paths) $< >$@.tmp && mv -f $@.tmp $@
man/%.5: man/%.5.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(edit_paths) $< >$@.tmp && mv -f $@.tmp $@
man/%.1: man/%.1.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(edit_paths) $< >$@.tmp && mv -f $@.tmp $@

dist_man1_MANS = man/mcp-python-sandbox.1
nodist_man5_MANS = man/mcp-python-sandboxd.conf.5
nodist_man8_MANS = man/mcp-python-sandboxd.8

CLEANFILES += $(nodist_man5_MANS) $(nodist_man8_MANS)
EXTRA_DIST += man/mcp-python-sandboxd.conf.5.in man/mcp-python-sandboxd.8.in
