#!/usr/bin/env bash
# ci/gpu_pipeline.sh compare on a runner whose machine has no runs in the history yet: the
# history holds other machines' documents only (as the repository's results/history does on
# a new runner). The gate has no baseline and passes with a line saying so, instead of
# handing `fsdpp results compare` a history without this machine (exit 2).
# Usage: gpu_pipeline_first_run.sh FSDPP_BUILD_DIR PYTHON
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
some_doc=$(ls "$repo"/results/history/*/*.json | head -n1)
"$2" -c 'import json, sys
d = json.load(open(sys.argv[1])); d["machine"]["fingerprint"] = "0123456789abcdef"
json.dump(d, open(sys.argv[2], "w"))' "$some_doc" "$work/smoke.json"
code=0
output=$(FSDPP_OUT=$work FSDPP_HISTORY=$repo/results/history FSDPP_BUILD_DIR=$1 PYTHON=$2 \
         bash "$repo/ci/gpu_pipeline.sh" compare 2>&1) || code=$?
echo "$output"
[ "$code" -eq 0 ] || { echo "FAILED: compare exited $code on a machine with no history"; exit 1; }
grep -q "no history for machine 0123456789abcdef" <<<"$output" || { echo "FAILED: no first-run line"; exit 1; }
echo "ok: a new machine's first run passes the gate with no baseline"
