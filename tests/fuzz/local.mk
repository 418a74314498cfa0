# SPDX-License-Identifier: MIT
# libFuzzer targets, built with ./configure --enable-fuzzer CC=clang.
# Run each for a while: make fuzz FUZZ_SECONDS=30
FUZZ_TARGETS = fuzz-framing fuzz-mcp fuzz-pep723 fuzz-config fuzz-driver fuzz-outputs fuzz-fdqueue fuzz-netproxy \
	fuzz-preimport fuzz-jsonrpc
EXTRA_DIST += $(addprefix tests/fuzz/,$(addsuffix .c,$(FUZZ_TARGETS))) tests/fuzz/corpus
if ENABLE_FUZZER
noinst_PROGRAMS += $(FUZZ_TARGETS)
FUZZ_CFLAGS = $(AM_CFLAGS) $(SYSTEMD_CFLAGS) $(JSONC_CFLAGS)
FUZZ_LDADD = $(CORE_LIBS) $(SECCOMP_LIBS)
fuzz_framing_SOURCES = tests/fuzz/fuzz-framing.c
fuzz_framing_CFLAGS = $(FUZZ_CFLAGS)
fuzz_framing_LDFLAGS = $(AM_LDFLAGS) $(FUZZER_LDFLAGS)
fuzz_framing_LDADD = $(FUZZ_LDADD)
fuzz_mcp_SOURCES = tests/fuzz/fuzz-mcp.c
fuzz_mcp_CFLAGS = $(FUZZ_CFLAGS)
fuzz_mcp_LDFLAGS = $(AM_LDFLAGS) $(FUZZER_LDFLAGS)
fuzz_mcp_LDADD = $(FUZZ_LDADD)
fuzz_pep723_SOURCES = tests/fuzz/fuzz-pep723.c
fuzz_pep723_CFLAGS = $(FUZZ_CFLAGS)
fuzz_pep723_LDFLAGS = $(AM_LDFLAGS) $(FUZZER_LDFLAGS)
fuzz_pep723_LDADD = $(FUZZ_LDADD)
fuzz_config_SOURCES = tests/fuzz/fuzz-config.c
fuzz_config_CFLAGS = $(FUZZ_CFLAGS)
fuzz_config_LDFLAGS = $(AM_LDFLAGS) $(FUZZER_LDFLAGS)
fuzz_config_LDADD = $(FUZZ_LDADD)
fuzz_driver_SOURCES = tests/fuzz/fuzz-driver.c
fuzz_driver_CFLAGS = $(FUZZ_CFLAGS)
fuzz_driver_LDFLAGS = $(AM_LDFLAGS) $(FUZZER_LDFLAGS)
fuzz_driver_LDADD = $(FUZZ_LDADD)
fuzz_outputs_SOURCES = tests/fuzz/fuzz-outputs.c
fuzz_outputs_CFLAGS = $(FUZZ_CFLAGS)
fuzz_outputs_LDFLAGS = $(AM_LDFLAGS) $(FUZZER_LDFLAGS)
fuzz_outputs_LDADD = $(FUZZ_LDADD)
fuzz_fdqueue_SOURCES = tests/fuzz/fuzz-fdqueue.c
fuzz_fdqueue_CFLAGS = $(FUZZ_CFLAGS)
fuzz_fdqueue_LDFLAGS = $(AM_LDFLAGS) $(FUZZER_LDFLAGS)
fuzz_fdqueue_LDADD = $(FUZZ_LDADD)

fuzz_netproxy_SOURCES = tests/fuzz/fuzz-netproxy.c
fuzz_netproxy_CFLAGS = $(FUZZ_CFLAGS)
fuzz_netproxy_LDFLAGS = $(AM_LDFLAGS) $(FUZZER_LDFLAGS)
fuzz_netproxy_LDADD = $(FUZZ_LDADD)
fuzz_preimport_SOURCES = tests/fuzz/fuzz-preimport.c
fuzz_preimport_CFLAGS = $(FUZZ_CFLAGS)
fuzz_preimport_LDFLAGS = $(AM_LDFLAGS) $(FUZZER_LDFLAGS)
fuzz_preimport_LDADD = $(FUZZ_LDADD)
fuzz_jsonrpc_SOURCES = tests/fuzz/fuzz-jsonrpc.c
fuzz_jsonrpc_CFLAGS = $(FUZZ_CFLAGS)
fuzz_jsonrpc_LDFLAGS = $(AM_LDFLAGS) $(FUZZER_LDFLAGS)
fuzz_jsonrpc_LDADD = $(FUZZ_LDADD)

FUZZ_SECONDS ?= 20
fuzz: $(FUZZ_TARGETS)
	@for t in $(FUZZ_TARGETS); do \
		name=$${t#fuzz-}; work=$(abs_builddir)/fuzz-corpus/$$name; \
		mkdir -p $$work; \
		echo "== $$t for $(FUZZ_SECONDS)s"; \
		./$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 -print_final_stats=1 \
			$$work $(abs_top_srcdir)/tests/fuzz/corpus/$$name > $$t.log 2>&1; \
		status=$$?; tail -n 4 $$t.log; \
		if [ $$status -ne 0 ]; then cat $$t.log; exit 1; fi; \
	done
endif
