#!/usr/bin/env bash
# docs/architecture.md against the tree, as check_settings_docs checks the
# settings: its module table names every module of the product's folders
# and of tools/, under its folder, and no module that does not exist; its
# data flow goes through the group body (scripts/check_layers.py --docs).
set -eu
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
exec python3 "$top_srcdir/scripts/check_layers.py" --docs "$top_srcdir"
