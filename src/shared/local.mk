# SPDX-License-Identifier: MIT
# src/shared: helpers with no dependency beyond libc; the shim links only this.
noinst_LIBRARIES += libshared.a
libshared_a_SOURCES = \
	src/shared/macro.h \
	src/shared/log.c src/shared/log.h \
	src/shared/buf.c src/shared/buf.h
libshared_a_SOURCES += \
	src/shared/strv.c src/shared/strv.h \
	src/shared/json-util.c src/shared/json-util.h
libshared_a_CFLAGS = $(AM_CFLAGS) $(JSONC_CFLAGS)
