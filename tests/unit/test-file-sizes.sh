#!/bin/sh
# SPDX-License-Identifier: MIT
# No file over 800 lines without a reason at its top (scripts/check-file-sizes;
# the rule is in HACKING.md).
exec sh "${TOP_SRCDIR:-$(dirname "$0")/../..}/scripts/check-file-sizes" "${TOP_SRCDIR:-$(dirname "$0")/../..}"
