# SPDX-License-Identifier: MIT
# Benchmark: our service against the reference server (mcp-python-exec-sandbox
# from PyPI), side by side. Not part of "make check": it prints, it never fails
# on a timing. BENCH_QUICK=1 for a smoke run. Results land in the source tree:
# bench/RESULTS.md, bench/results/latest.json, bench/results/latest.svg.
BENCH_WORK = $(abs_top_builddir)/bench-work

bench: mcp-python-sandboxd$(EXEEXT) mcp-python-sandbox$(EXEEXT)
	$(PYTHON3) $(top_srcdir)/bench/run.py \
		--daemon $(abs_top_builddir)/mcp-python-sandboxd$(EXEEXT) \
		--shim $(abs_top_builddir)/mcp-python-sandbox$(EXEEXT) \
		--work $(BENCH_WORK) \
		--out $(abs_top_srcdir)/bench

# Only what a conversation pays for each server: tool list and result sizes.
bench-model-cost: mcp-python-sandboxd$(EXEEXT) mcp-python-sandbox$(EXEEXT)
	$(PYTHON3) $(top_srcdir)/bench/model-cost.py \
		--daemon $(abs_top_builddir)/mcp-python-sandboxd$(EXEEXT) \
		--shim $(abs_top_builddir)/mcp-python-sandbox$(EXEEXT) \
		--work $(BENCH_WORK) \
		--out $(abs_top_srcdir)/bench

bench-clean:
	-rm -rf $(BENCH_WORK)

# Noisy neighbour: user B's hello world beside each abuse of one user A (issue 14). Root only.
bench-noisy: mcp-python-sandboxd$(EXEEXT) mcp-python-sandbox$(EXEEXT)
	$(PYTHON3) $(top_srcdir)/bench/noisy.py \
		--daemon $(abs_top_builddir)/mcp-python-sandboxd$(EXEEXT) \
		--shim $(abs_top_builddir)/mcp-python-sandbox$(EXEEXT) \
		--work $(BENCH_WORK) \
		--out $(abs_top_srcdir)/bench

# A run forked from a pre-started interpreter with fresh namespaces, against a sandbox per run (issue 18):
# a prototype, measured; not the daemon's code. Root only.
bench-fork-prototype:
	$(PYTHON3) $(top_srcdir)/bench/fork-prototype.py

.PHONY: bench bench-noisy bench-model-cost bench-fork-prototype bench-clean

EXTRA_DIST += bench/run.py bench/mcpclient.py bench/noisy.py bench/model-cost.py bench/fork-prototype.py \
	bench/README.md
EXTRA_DIST += \
	bench/corpus/classifier.py \
	bench/corpus/curve_fit.py \
	bench/corpus/disk_report.py \
	bench/corpus/polars_lazy.py \
	bench/corpus/release_notes.py \
	bench/corpus/sales_report.py \
	bench/corpus/symbolic.py \
	bench/corpus/temperature_chart.py \
	bench/corpus/tune.py \
	bench/corpus/validate_orders.py
