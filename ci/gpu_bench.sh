#!/usr/bin/env bash
# The GPU benchmark cells, fsdpp and PyTorch side by side in one run on one machine:
# GPT-2 124M and Llama 3.2 1B (from-scratch presets), bf16 compute with fp32 masters and
# fp32 gradient reduction, FULL_SHARD on every local GPU, with and without activation
# checkpointing. The PyTorch side is harness/peers/torch_peer.py in fsdp2 mode
# (fully_shard per block and root, MixedPrecisionPolicy(bf16, reduce fp32)) on the same
# model config, batch, sequence length, AdamW (lr 3e-4, wd 0.1, the fused kernel on both
# sides: fsdpp's FusedAdamW, PyTorch's fused=True) and clipping (1.0). Cells alternate
# fsdpp / PyTorch so drift in clocks
# hits both. ci/gpu_results.py then writes one results document into OUT_DIR.
#
#   ci/gpu_bench.sh BUILD_DIR OUT_DIR
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?BUILD_DIR}
out=${2:?OUT_DIR}
python=${PYTHON:-python3}
steps=${FSDPP_BENCH_STEPS:-10}
warmup=${FSDPP_BENCH_WARMUP:-3}
gpus=$(nvidia-smi -L | wc -l)
mkdir -p "$out/cells"

#      name        type   size  batch seq
cells=("gpt2-124M  gpt2   124M  8     1024"
       "llama-1B   llama  1B    4     2048")
for cell in "${cells[@]}"; do
  read -r name type size batch seq <<<"$cell"
  for ac in off on; do
    ac_flag=()
    [ "$ac" = on ] && ac_flag=(--activation-checkpointing)
    tag="$name-ac-$ac"
    echo "== $tag: fsdpp"
    "$build/fsdpp" bench-step --nproc "$gpus" --device cuda --model-type "$type" --model-size "$size" \
      --batch-size "$batch" --seq-len "$seq" --steps "$steps" --warmup "$warmup" --mixed-precision bf16 \
      --strategy full_shard "${ac_flag[@]}" --out "$out/cells/fsdpp-$tag.json"
    "$python" -c 'import json,sys; json.dump(json.load(open(sys.argv[1]))["model_config"], open(sys.argv[2], "w"))' \
      "$out/cells/fsdpp-$tag.json" "$out/cells/$name.config.json"
    echo "== $tag: pytorch fsdp2"
    "$python" "$repo/harness/peers/torch_peer.py" --mode fsdp2 --nproc "$gpus" --device cuda \
      --model-config "$out/cells/$name.config.json" --batch-size "$batch" --seq-len "$seq" --steps "$steps" \
      --warmup "$warmup" --lr 3e-4 --lr-schedule constant --weight-decay 0.1 --grad-clip 1.0 \
      --mixed-precision bf16 --adam-impl fused "${ac_flag[@]}" --matmul-peak --out "$out/cells/torch-$tag.json" ||
      echo "pytorch fsdp2 failed for $tag (recorded as missing)"
  done
done
"$python" "$repo/ci/gpu_results.py" "$build" "$out/cells" "$out"
