#!/bin/sh
# SPDX-License-Identifier: MIT
# No globals: no writable data exported by libcore.a or libshared.a (scripts/check-globals; HACKING.md, "State").
# Runs in the build directory, where the libraries are.
exec sh "${TOP_SRCDIR:-$(dirname "$0")/../..}/scripts/check-globals"
