#!/usr/bin/env bash
# Measures the CPU cells whose planned peak falls in backward rather than at the loss: GPT-2
# mini256 with a vocabulary of 256 (the logits no longer dominate), 8 x 128 tokens per rank,
# across strategies, precisions, AC, offload, prefetch and world sizes. Each cell is one
# `fsdpp bench-step` run (tensor bytes from the counting CPU allocator); the records go into
# one `fsdpp.plan-cells` document (results/README.md) that PlanValidation reads beside the
# benchmark's.
#
#   suites/plan/measure_backward_cells.sh FSDPP_BINARY OUT_JSON
# Exit: 0 when every cell ran and OUT_JSON is written; 1 when a cell failed; 2 on bad usage.
set -euo pipefail
die() { echo "suites/plan/measure_backward_cells.sh: $*" >&2; exit 2; }
[ $# -eq 2 ] || die "usage: suites/plan/measure_backward_cells.sh FSDPP_BINARY OUT_JSON"
fsdpp=$(realpath "$1")
out=$2
[ -x "$fsdpp" ] || die "$1 is not an executable fsdpp binary"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# id|ranks|flags
cells=(
  "full_shard/fp32/n2|2|--strategy full_shard"
  "shard_grad_op/fp32/n2|2|--strategy shard_grad_op"
  "no_shard/fp32/n2|2|--strategy no_shard"
  "full_shard/fp32/n2/ac|2|--strategy full_shard --activation-checkpointing"
  "full_shard/bf16/n2|2|--strategy full_shard --mixed-precision bf16"
  "full_shard/fp16/n2/ac|2|--strategy full_shard --mixed-precision fp16 --activation-checkpointing"
  "full_shard/fp32/n2/offload|2|--strategy full_shard --cpu-offload"
  "full_shard/fp32/n2/no-prefetch|2|--strategy full_shard --no-prefetch"
  "full_shard/fp32/n4|4|--strategy full_shard"
  "hybrid_shard/fp32/n4|4|--strategy hybrid_shard"
)
records=()
for entry in "${cells[@]}"; do
  IFS='|' read -r id ranks flags <<<"$entry"
  record="$work/$(echo "$id" | tr '/' '_').json"
  # shellcheck disable=SC2086  # flags is a list of words
  "$fsdpp" bench-step --nproc "$ranks" --threads 1 --model-type gpt2 --model-size mini256 --vocab-size 256 \
    --batch-size 8 --seq-len 128 --warmup 2 --steps 3 --seed 0 --out "$record" $flags >"$work/log" 2>&1 ||
    { tail -5 "$work/log" >&2; echo "cell gpt2-mini256-v256/$id failed" >&2; exit 1; }
  records+=("gpt2-mini256-v256/$id=$record")
done
commit=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)
python3 - "$out" "$commit" "${records[@]}" <<'PY'
import datetime, json, os, sys
out, commit, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
cells = []
for pair in pairs:
    cell, path = pair.split("=", 1)
    with open(path) as f:
        cells.append({"cell": cell, "fsdpp": json.load(f)})
doc = {
    "format": "fsdpp.plan-cells",
    "version": 1,
    "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "git_commit": commit,
    "command": "suites/plan/measure_backward_cells.sh",
    "cpu_model": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), ""),
    "cpu_cores": os.cpu_count(),
    "cells": cells,
}
tmp = out + ".tmp"
with open(tmp, "w") as f:
    json.dump(doc, f, indent=1)
    f.flush()
    os.fsync(f.fileno())
os.replace(tmp, out)
print(f"wrote {out}: {len(cells)} cells")
PY
