#!/usr/bin/env bash
# Lints and format-checks the Python of harness/, ci/ and suites/ with ruff and the repository's
# ruff.toml, changing no file: exit 0 when both pass; 1 when ruff reports a finding or a
# file it would reformat (each named), or ruff is missing. ctest's lint.ruff runs it;
# ci/format.sh applies ruff's formatting and safe fixes.
#
#   ci/lint/ruff_check.sh            the files ruff.toml includes (harness/, ci/, suites/)
#   ci/lint/ruff_check.sh FILE...    these files (any path), with the same rules
set -euo pipefail
# shellcheck source=ci/lint/tools.sh
source "$(dirname "$0")/tools.sh"
ruff=$(lint_ruff) || exit 1
config=(--config "$lint_repo/ruff.toml")
if (($# == 0)); then
  cd "$lint_repo"
  set -- .
fi
status=0
"$ruff" check --no-cache --output-format concise "${config[@]}" "$@" || status=1
"$ruff" format --no-cache --check "${config[@]}" "$@" || status=1
if [ "$status" -ne 0 ]; then
  echo "ci/lint/ruff_check.sh: ruff found the above (bash ci/format.sh applies the formatting and safe fixes)"
fi
exit "$status"
