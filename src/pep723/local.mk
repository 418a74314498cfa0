# SPDX-License-Identifier: MIT
# src/pep723: PEP 723 block extraction, PEP 508 requirements, PEP 440 versions.
libcore_a_SOURCES += src/pep723/pep723.c src/pep723/pep723.h src/pep723/pep508.c src/pep723/pep508.h src/pep723/pep440.c src/pep723/pep440.h
libcore_a_SOURCES += src/pep723/requirements.c src/pep723/toml-subset.c src/pep723/toml-subset.h
check_PROGRAMS += test-pep723 test-pep508 test-pep440
TESTS += test-pep723 test-pep508 test-pep440
test_pep723_SOURCES = src/pep723/test-pep723.c
test_pep723_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JSONC_CFLAGS)
test_pep723_LDADD = libcore.a libshared.a $(CHECK_LIBS) $(JSONC_LIBS)
test_pep508_SOURCES = src/pep723/test-pep508.c
test_pep508_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_pep508_LDADD = libcore.a libshared.a $(CHECK_LIBS)
test_pep440_SOURCES = src/pep723/test-pep440.c
test_pep440_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_pep440_LDADD = libcore.a libshared.a $(CHECK_LIBS)
# The parser against the PEP's reference regex and uv, on a corpus of shapes. Its helper is built by
# "make check" but is not a test itself: not in check_PROGRAMS, which packaging runs as the unit tests.
EXTRA_PROGRAMS = pep723-dump
check_DATA = pep723-dump$(EXEEXT)
CLEANFILES += pep723-dump$(EXEEXT)
pep723_dump_SOURCES = tests/unit/pep723-dump.c
pep723_dump_CFLAGS = $(AM_CFLAGS) $(JSONC_CFLAGS)
pep723_dump_LDADD = libcore.a libshared.a $(JSONC_LIBS)
TESTS += tests/unit/test-pep723-regex.py tests/unit/test-toml-subset.py
EXTRA_DIST += tests/unit/test-pep723-regex.py tests/unit/test-toml-subset.py tests/unit/pep723dump.py
