#!/bin/sh
# SPDX-License-Identifier: MIT
# Arrows only point down: no module includes one of its own layer or above
# (scripts/check-includes; the layers are in HACKING.md).
exec python3 "${TOP_SRCDIR:-$(dirname "$0")/../..}/scripts/check-includes" "${TOP_SRCDIR:-$(dirname "$0")/../..}/src"
