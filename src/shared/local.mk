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
libshared_a_SOURCES += src/shared/sha256.c src/shared/sha256.h
libshared_a_SOURCES += src/shared/fs-util.c src/shared/fs-util.h
libshared_a_SOURCES += src/shared/waitq.c src/shared/waitq.h
libshared_a_SOURCES += src/shared/utf8.c src/shared/utf8.h
libshared_a_SOURCES += src/shared/charge.c src/shared/charge.h
libshared_a_SOURCES += src/shared/nss-child.c src/shared/nss-child.h
libshared_a_SOURCES += src/shared/time-util.h
