# SPDX-License-Identifier: MIT
# libcore.a: everything of the daemon but main(), linked by the daemon, the
# unit tests and the fuzzers.
noinst_LIBRARIES += libcore.a
libcore_a_CFLAGS = $(AM_CFLAGS) $(SYSTEMD_CFLAGS) $(JSONC_CFLAGS) $(SECCOMP_CFLAGS)
libcore_a_SOURCES = \
	src/protocol/framing.c src/protocol/framing.h \
	src/protocol/fdqueue.c src/protocol/fdqueue.h \
	src/protocol/limits.h \
	src/jsonrpc/jsonrpc.c src/jsonrpc/jsonrpc.h \
	src/mcp/mcp.c src/mcp/mcp.h src/mcp/tool.h \
	src/mcp/schema.c src/mcp/schema.h \
	src/session/session.c src/session/session.h \
	src/config/config.c src/config/config.h \
	src/config/values.c \
	src/executor/capture.c src/executor/capture.h \
	src/executor/process.c src/executor/process.h \
	src/executor/signal.c src/executor/process-signal.h \
	src/executor/offloop.c src/executor/offloop.h \
	src/executor/cgroup-remove.c src/executor/cgroup-remove.h \
	src/executor/pool.c src/executor/pool.h \
	src/daemon/manager.c src/daemon/manager.h \
	src/scheduler/scheduler.c src/scheduler/scheduler.h \
	src/scheduler/cpu-share.c src/scheduler/cpu-share.h \
	src/runtime/runtime.c src/runtime/runtime.h src/runtime/runtime-internal.h \
	src/runtime/probes.c \
	src/runtime/spawn.c \
	src/runtime/code.c \
	src/runtime/unsandboxed.c \
	src/runtime/network.c \
	src/runtime/metadata.c src/runtime/metadata.h \
	src/runtime/programs.h src/runtime/metadata-reader.c src/runtime/font-list.c \
	src/runtime/python-install.c \
	src/runtime/script.c src/runtime/script.h \
	src/tools/tools.c src/tools/tools.h \
	src/tools/check-environment.c \
	src/tools/hints.c src/tools/hints.h \
	src/tools/execute-python.c src/tools/execute-job.h \
	src/tools/execute-phase.c src/tools/execute-phase.h \
	src/tools/execute-prestart.c \
	src/tools/execute-render.c src/tools/execute-render.h \
	src/tools/boot.c src/tools/boot.h \
	src/tools/preimport.c src/tools/preimport.h \
	src/tools/input-files.c src/tools/input-files.h \
	src/tools/validate-script.c \
	src/tools/sandbox-common.c src/tools/sandbox-common.h \
	src/tools/sandbox-lifecycle.c \
	src/tools/execute-code.c \
	src/tools/runlog.c src/tools/runlog.h \
	src/tools/outputs.c src/tools/outputs.h \
	src/tools/sandbox-packages.c \
	src/tools/sandbox-files.c \
	src/workspace/workspace.c src/workspace/workspace.h src/workspace/workspace-internal.h \
	src/workspace/ops.c src/workspace/spawn.c src/workspace/wire.c src/workspace/prepare.c \
	src/workspace/driver.c \
	src/workspace/driver-input.c src/workspace/driver-input.h \
	src/sandbox/sandbox.c src/sandbox/sandbox.h \
	src/sandbox/seccomp.c src/sandbox/seccomp.h \
	src/sandbox/limits.c src/sandbox/limits.h \
	src/sandbox/cgroup.c src/sandbox/cgroup-mode.c src/sandbox/reason.h \
	src/sandbox/uidpool.c src/sandbox/uidpool.h \
	src/netproxy/allowlist.c src/netproxy/allowlist.h \
	src/netproxy/request.c src/netproxy/request.h \
	src/netproxy/proxy.c src/netproxy/proxy.h \
	src/envstore/pythons.c src/envstore/pythons.h \
	src/envstore/envstore.c src/envstore/envstore.h src/envstore/envstore-internal.h \
	src/envstore/build.c src/envstore/slot.c src/envstore/compile.c src/envstore/gc.c \
	src/envstore/layout.c src/envstore/layout.h \
	src/envstore/storewalk.c src/envstore/storewalk-job.c src/envstore/storewalk.h \
	src/envstore/pyinstall.c src/envstore/pyinstall.h

CORE_LIBS = libcore.a libshared.a $(SYSTEMD_LIBS) $(JSONC_LIBS) $(SECCOMP_LIBS)

include src/pep723/local.mk

# The persistent sandboxes' driver is Python too: src/workspace/driver.py, made into src/workspace/driver.c by the
# same script and rule as boot.py below (and checked by tests/unit/test-embedded.py the same way).
EXTRA_DIST += src/workspace/driver.py
$(srcdir)/src/workspace/driver.c: $(srcdir)/src/workspace/driver.py $(srcdir)/src/tools/embed-python.py
	$(AM_V_GEN)$(PYTHON3) $(srcdir)/src/tools/embed-python.py workspace_driver_code $(srcdir)/src/workspace/driver.py $@ workspace.h

# execute_python's boot program is Python too: src/tools/boot.py, made into src/tools/boot.c (kept in the tree, so
# a build needs no Python) whenever boot.py is newer; tests/unit/test-embedded.py fails when the two disagree.
EXTRA_DIST += src/tools/boot.py src/tools/embed-python.py
$(srcdir)/src/tools/boot.c: $(srcdir)/src/tools/boot.py $(srcdir)/src/tools/embed-python.py
	$(AM_V_GEN)$(PYTHON3) $(srcdir)/src/tools/embed-python.py boot_code $(srcdir)/src/tools/boot.py $@ outputs.h boot.h

# The runtime's programs likewise (src/runtime/programs.h): the metadata reader and matplotlib's font list.
EXTRA_DIST += src/runtime/metadata-reader.py src/runtime/font-list.py
$(srcdir)/src/runtime/metadata-reader.c: $(srcdir)/src/runtime/metadata-reader.py $(srcdir)/src/tools/embed-python.py
	$(AM_V_GEN)$(PYTHON3) $(srcdir)/src/tools/embed-python.py metadata_reader_code $(srcdir)/src/runtime/metadata-reader.py $@ programs.h
$(srcdir)/src/runtime/font-list.c: $(srcdir)/src/runtime/font-list.py $(srcdir)/src/tools/embed-python.py
	$(AM_V_GEN)$(PYTHON3) $(srcdir)/src/tools/embed-python.py font_list_code $(srcdir)/src/runtime/font-list.py $@ programs.h
