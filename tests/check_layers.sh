#!/usr/bin/env bash
# The folders' arrows run one way, over includes and over the calls the
# built objects make (scripts/check_layers.py; also `make check-layers`).
# Fails on an arrow against the order, on a circle between or within
# folders, and on the operations side reaching into a driver.
set -eu
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-.}
exec python3 "$top_srcdir/scripts/check_layers.py" "$top_srcdir" "$top_builddir"
