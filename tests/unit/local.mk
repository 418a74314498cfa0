# SPDX-License-Identifier: MIT
# Unit tests: one Check suite per module.
UNIT_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SYSTEMD_CFLAGS) $(JSONC_CFLAGS)
UNIT_LIBS = $(CORE_LIBS) $(CHECK_LIBS)

check_PROGRAMS += test-framing
TESTS += test-framing
test_framing_SOURCES = src/protocol/test-framing.c
test_framing_CFLAGS = $(UNIT_CFLAGS)
test_framing_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-fdqueue
TESTS += test-fdqueue
test_fdqueue_SOURCES = src/protocol/test-fdqueue.c src/shim/files.c src/shim/files.h
test_fdqueue_CFLAGS = $(UNIT_CFLAGS)
test_fdqueue_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-jsonrpc
TESTS += test-jsonrpc
test_jsonrpc_SOURCES = src/jsonrpc/test-jsonrpc.c
test_jsonrpc_CFLAGS = $(UNIT_CFLAGS)
test_jsonrpc_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-jsonrpc-parser
TESTS += test-jsonrpc-parser
test_jsonrpc_parser_SOURCES = src/jsonrpc/test-jsonrpc-parser.c
test_jsonrpc_parser_CFLAGS = $(UNIT_CFLAGS)
test_jsonrpc_parser_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-close-fds
TESTS += test-close-fds
test_close_fds_SOURCES = src/shared/test-close-fds.c
test_close_fds_CFLAGS = $(UNIT_CFLAGS)
test_close_fds_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-sha256
TESTS += test-sha256
test_sha256_SOURCES = src/shared/test-sha256.c
test_sha256_CFLAGS = $(UNIT_CFLAGS)
test_sha256_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-shared
TESTS += test-shared
test_shared_SOURCES = src/shared/test-shared.c
test_shared_CFLAGS = $(UNIT_CFLAGS)
test_shared_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-capture
TESTS += test-capture
test_capture_SOURCES = src/executor/test-capture.c
test_capture_CFLAGS = $(UNIT_CFLAGS)
test_capture_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-schema
TESTS += test-schema
test_schema_SOURCES = src/mcp/test-schema.c
test_schema_CFLAGS = $(UNIT_CFLAGS)
test_schema_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-config
TESTS += test-config
test_config_SOURCES = src/config/test-config.c
test_config_CFLAGS = $(UNIT_CFLAGS)
test_config_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-mcp
TESTS += test-mcp
test_mcp_SOURCES = src/mcp/test-mcp.c
test_mcp_CFLAGS = $(UNIT_CFLAGS)
test_mcp_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-sandbox
TESTS += test-sandbox
test_sandbox_SOURCES = src/sandbox/test-sandbox.c
test_sandbox_CFLAGS = $(UNIT_CFLAGS)
test_sandbox_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-outputs
TESTS += test-outputs
test_outputs_SOURCES = src/tools/test-outputs.c
test_outputs_CFLAGS = $(UNIT_CFLAGS)
test_outputs_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-process
TESTS += test-process
test_process_SOURCES = src/executor/test-process.c
test_process_CFLAGS = $(UNIT_CFLAGS)
test_process_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-runlog
TESTS += test-runlog
test_runlog_SOURCES = src/tools/test-runlog.c
test_runlog_CFLAGS = $(UNIT_CFLAGS)
test_runlog_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-uidpool
TESTS += test-uidpool
test_uidpool_SOURCES = src/sandbox/test-uidpool.c
test_uidpool_CFLAGS = $(UNIT_CFLAGS)
test_uidpool_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-cpu-share
TESTS += test-cpu-share
test_cpu_share_SOURCES = src/scheduler/test-cpu-share.c
test_cpu_share_CFLAGS = $(UNIT_CFLAGS)
test_cpu_share_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-layout
TESTS += test-layout
test_layout_SOURCES = src/envstore/test-layout.c
test_layout_CFLAGS = $(UNIT_CFLAGS)
test_layout_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-driver-input
TESTS += test-driver-input
test_driver_input_SOURCES = src/workspace/test-driver-input.c
test_driver_input_CFLAGS = $(UNIT_CFLAGS)
test_driver_input_LDADD = $(UNIT_LIBS)

# Every unit suite under valgrind, in one process (CK_FORK=no): no errors, no leaks. A child forked to run
# daemon code (offloop.h) would fail its own leak check at _exit(): MCP_SANDBOX_VALGRIND=1 tells those tests.
check-valgrind: $(check_PROGRAMS)
	@for t in $(filter test-%,$(check_PROGRAMS)); do \
		printf '%s ' "valgrind $$t:"; \
		if CK_FORK=no MCP_SANDBOX_VALGRIND=1 valgrind -q --error-exitcode=1 --leak-check=full \
			--show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
			./$$t > $$t.valgrind.log 2>&1; then echo ok; \
		else echo FAILED; cat $$t.valgrind.log; exit 1; fi; \
	done
.PHONY: check-valgrind
CLEANFILES += *.valgrind.log

check_PROGRAMS += test-offloop
TESTS += test-offloop
test_offloop_SOURCES = src/executor/test-offloop.c
test_offloop_CFLAGS = $(UNIT_CFLAGS)
test_offloop_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-storewalk
TESTS += test-storewalk
test_storewalk_SOURCES = src/envstore/test-storewalk.c
test_storewalk_CFLAGS = $(UNIT_CFLAGS)
test_storewalk_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-charge
TESTS += test-charge
test_charge_SOURCES = src/shared/test-charge.c
test_charge_CFLAGS = $(UNIT_CFLAGS)
test_charge_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-hints
TESTS += test-hints
test_hints_SOURCES = src/tools/test-hints.c
test_hints_CFLAGS = $(UNIT_CFLAGS)
test_hints_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-uv-version
TESTS += test-uv-version
test_uv_version_SOURCES = src/envstore/test-uv-version.c
test_uv_version_CFLAGS = $(UNIT_CFLAGS)
test_uv_version_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-scheduler
TESTS += test-scheduler
test_scheduler_SOURCES = src/scheduler/test-scheduler.c
test_scheduler_CFLAGS = $(UNIT_CFLAGS)
test_scheduler_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-netproxy
TESTS += test-netproxy
test_netproxy_SOURCES = src/netproxy/test-netproxy.c
test_netproxy_CFLAGS = $(UNIT_CFLAGS)
test_netproxy_LDADD = $(UNIT_LIBS)

# The include lines of src/ against the layer order (scripts/check-includes).
TESTS += tests/unit/test-includes.sh
EXTRA_DIST += tests/unit/test-includes.sh scripts/check-includes

check_PROGRAMS += test-waitq
TESTS += test-waitq
test_waitq_SOURCES = src/shared/test-waitq.c
test_waitq_CFLAGS = $(UNIT_CFLAGS)
test_waitq_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-preimport
TESTS += test-preimport
test_preimport_SOURCES = src/tools/test-preimport.c
test_preimport_CFLAGS = $(UNIT_CFLAGS)
test_preimport_LDADD = $(UNIT_LIBS)

# Embedded Python (src/tools/boot.py -> boot.c) is current.
TESTS += tests/unit/test-embedded.py tests/unit/test-metadata-reader.py tests/unit/test-driver-figures.py
EXTRA_DIST += tests/unit/test-embedded.py tests/unit/test-metadata-reader.py tests/unit/test-driver-figures.py

check_PROGRAMS += test-metadata
TESTS += test-metadata
test_metadata_SOURCES = src/runtime/test-metadata.c
test_metadata_CFLAGS = $(UNIT_CFLAGS)
test_metadata_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-pythons
TESTS += test-pythons
test_pythons_SOURCES = src/envstore/test-pythons.c
test_pythons_CFLAGS = $(UNIT_CFLAGS)
test_pythons_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-envstore
TESTS += test-envstore
test_envstore_SOURCES = src/envstore/test-envstore.c
test_envstore_CFLAGS = $(UNIT_CFLAGS)
test_envstore_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-workspace
TESTS += test-workspace
test_workspace_SOURCES = src/workspace/test-workspace.c
test_workspace_CFLAGS = $(UNIT_CFLAGS) -DPYTHON3='"$(PYTHON3)"'
test_workspace_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-execute-render
TESTS += test-execute-render
test_execute_render_SOURCES = src/tools/test-execute-render.c
test_execute_render_CFLAGS = $(UNIT_CFLAGS)
test_execute_render_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-execute-phase
TESTS += test-execute-phase
test_execute_phase_SOURCES = src/tools/test-execute-phase.c
test_execute_phase_CFLAGS = $(UNIT_CFLAGS)
test_execute_phase_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-session
TESTS += test-session
test_session_SOURCES = src/session/test-session.c
test_session_CFLAGS = $(UNIT_CFLAGS)
test_session_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-pool
TESTS += test-pool
test_pool_SOURCES = src/executor/test-pool.c
test_pool_CFLAGS = $(UNIT_CFLAGS)
test_pool_LDADD = $(UNIT_LIBS)

check_PROGRAMS += test-manager
TESTS += test-manager
test_manager_SOURCES = src/daemon/test-manager.c
test_manager_CFLAGS = $(UNIT_CFLAGS)
test_manager_LDADD = $(UNIT_LIBS)

# For unit suites: strdup() that fails on demand (src/shared/alloc-fail.h says how).
EXTRA_DIST += src/shared/alloc-fail.h

check_PROGRAMS += test-code
TESTS += test-code
test_code_SOURCES = src/runtime/test-code.c
test_code_CFLAGS = $(UNIT_CFLAGS)
test_code_LDADD = $(UNIT_LIBS)

# No file over 800 lines without a reason at its top (scripts/check-file-sizes).
TESTS += tests/unit/test-file-sizes.sh
EXTRA_DIST += tests/unit/test-file-sizes.sh scripts/check-file-sizes

# No writable exported data in the built libraries (scripts/check-globals).
TESTS += tests/unit/test-globals.sh
EXTRA_DIST += tests/unit/test-globals.sh scripts/check-globals
