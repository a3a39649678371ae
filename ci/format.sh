#!/usr/bin/env bash
# Formats the tree in place: clang-format (the repository's .clang-format) on every C, C++
# and CUDA source and header that ci/lint/cxx_files.sh lists (tracked files less generated
# ones), then ruff's formatter and its safe fixes (ruff.toml) on the Python of harness/ and
# ci/. What it leaves for a person is what `ruff check` still reports, printed at the end.
# ctest's lint.format and lint.ruff check that nothing here would change anything.
#
#   bash ci/format.sh          run from anywhere; changes files, commits nothing
set -euo pipefail
# shellcheck source=ci/lint/tools.sh
source "$(dirname "$0")/lint/tools.sh"
lint_need clang-format "Debian package clang-format"
ruff=$(lint_ruff) || exit 1
cd "$lint_repo"

mapfile -t cxx < <(bash ci/lint/cxx_files.sh)
printf '%s\0' "${cxx[@]}" | xargs -0 -n 50 -P 2 clang-format --style="file:$lint_repo/.clang-format" -i
echo "ci/format.sh: clang-format applied to ${#cxx[@]} C++ file(s)"

"$ruff" format --config ruff.toml .
# Safe fixes only (import order, pyupgrade's mechanical ones); what remains is printed.
"$ruff" check --config ruff.toml --fix --output-format concise . ||
  echo "ci/format.sh: ruff check still reports the above: fix those by hand"
