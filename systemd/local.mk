# SPDX-License-Identifier: MIT
# systemd units, the sysusers.d and tmpfiles.d fragments, and the shipped
# configuration file.
#
# The *.in files name paths as @sbindir@, @runstatedir@ and so on; make fills
# them in from configure's directory variables, fully expanded, so they follow
# --prefix, --runstatedir=/run (Debian and Fedora pass it) and any
# "make prefix=..." override. man/local.mk uses the same edit_paths.

edit_paths = sed \
	-e 's|@bindir[@]|$(bindir)|g' \
	-e 's|@sbindir[@]|$(sbindir)|g' \
	-e 's|@sysconfdir[@]|$(sysconfdir)|g' \
	-e 's|@localstatedir[@]|$(localstatedir)|g' \
	-e 's|@runstatedir[@]|$(runstatedir)|g' \
	-e 's|@BWRAP_PATH[@]|$(BWRAP_PATH)|g' \
	-e 's|@UV_PATH[@]|$(UV_PATH)|g' \
	-e 's|@pkglibexecdir[@]|$(pkglibexecdir)|g' \
	-e 's|@PACKAGE_VERSION[@]|$(PACKAGE_VERSION)|g'

systemd/%.socket: systemd/%.socket.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(edit_paths) $< >$@.tmp && mv -f $@.tmp $@
systemd/%.service: systemd/%.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(edit_paths) $< >$@.tmp && mv -f $@.tmp $@
conf/%.conf: conf/%.conf.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(edit_paths) $< >$@.tmp && mv -f $@.tmp $@
# Installed under the package's name; built under it in a directory of their own.
systemd/sysusers.d/mcp-python-sandbox.conf: systemd/sysusers.conf Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(edit_paths) $< >$@.tmp && mv -f $@.tmp $@
systemd/tmpfiles.d/mcp-python-sandbox.conf: systemd/tmpfiles.conf Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && $(edit_paths) $< >$@.tmp && mv -f $@.tmp $@

systemdsystemunit_DATA = \
	systemd/mcp-python-sandboxd.socket \
	systemd/mcp-python-sandboxd.service
systemduserunit_DATA = \
	systemd/user/mcp-python-sandboxd.socket \
	systemd/user/mcp-python-sandboxd.service

# systemd.pc's sysusersdir and tmpfilesdir are /usr/lib/...; these follow the
# prefix instead (systemd also reads /usr/local/lib/{sysusers,tmpfiles}.d), so
# that an unprivileged "make install" and distcheck work.
sysusersdir = $(prefix)/lib/sysusers.d
tmpfilesdir = $(prefix)/lib/tmpfiles.d
sysusers_DATA = systemd/sysusers.d/mcp-python-sandbox.conf
tmpfiles_DATA = systemd/tmpfiles.d/mcp-python-sandbox.conf

# /etc/mcp-python-sandbox/mcp-python-sandboxd.conf and its empty drop-in
# directory. "make install" replaces the file; packages mark it a conffile.
pkgsysconfdir = $(sysconfdir)/mcp-python-sandbox
pkgsysconf_DATA = conf/mcp-python-sandboxd.conf

install-data-local: install-data-local-dropins
install-data-local-dropins:
	$(MKDIR_P) '$(DESTDIR)$(pkgsysconfdir)/mcp-python-sandboxd.conf.d'
uninstall-local: uninstall-local-dropins
uninstall-local-dropins:
	rmdir '$(DESTDIR)$(pkgsysconfdir)/mcp-python-sandboxd.conf.d' 2>/dev/null || :
.PHONY: install-data-local-dropins uninstall-local-dropins

CLEANFILES += \
	$(systemdsystemunit_DATA) \
	$(systemduserunit_DATA) \
	$(sysusers_DATA) \
	$(tmpfiles_DATA) \
	$(pkgsysconf_DATA)

EXTRA_DIST += \
	systemd/mcp-python-sandboxd.socket.in \
	systemd/mcp-python-sandboxd.service.in \
	systemd/user/mcp-python-sandboxd.socket.in \
	systemd/user/mcp-python-sandboxd.service.in \
	systemd/sysusers.conf \
	systemd/tmpfiles.conf \
	conf/mcp-python-sandboxd.conf.in

# The unit directories come from systemd.pc and are absolute (/lib/systemd/...);
# distcheck installs as an unprivileged user under its own prefix.
AM_DISTCHECK_CONFIGURE_FLAGS = \
	--with-systemdsystemunitdir='$${prefix}/lib/systemd/system' \
	--with-systemduserunitdir='$${prefix}/lib/systemd/user'

# Units, configuration file and man pages: systemd-analyze verify and
# security, --check-config, mandoc -Tlint. An executable shell script.
TESTS += tests/integration/test-units.sh
EXTRA_DIST += tests/integration/test-units.sh
