#!/usr/bin/env bash
# README command 1: set up, build, and run the main job, the default demo:
#   1. fetch the pinned corpora and GPT-2 tokenizer (ci/fetch_assets.sh),
#   2. tokenize them into fsdpp token shards with held-out splits (fsdpp data prepare),
#   3. pretrain a small GPT-2 from scratch on the King James Old Testament,
#   4. fine-tune it on the New Testament with 2 ranks, FULL_SHARD, scoring held-out New
#      Testament perplexity before and after, and export the result as a Hugging Face folder,
#   5. load that folder with `fsdpp eval` and `fsdpp generate`,
#   6. run the equivalence check (`fsdpp equiv`: sharded vs unsharded) at its default size.
# Everything is written under $FSDPP_DEMO_DIR (default .cache/demo, replaced each run).
# FSDPP_DEMO_STEPS=<pretrain>,<finetune> changes the step counts (default 200,100).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
bash ci/setup.sh
# Only the `fsdpp` binary the demo runs (the tests and benchmarks are ci/test.sh's); the
# first build of it compiles the core and the harness, several minutes on 2 cores: ninja
# shows its progress. The assets are fetched beside it.
echo "== building fsdpp (ci/build.sh, target fsdpp only; the first build takes about 6 minutes on 2 cores)" \
  "and fetching the assets (ci/fetch_assets.sh)"
FSDPP_BUILD_TARGETS=fsdpp bash ci/lib/assets_and_build.sh

assets=${FSDPP_ASSETS_DIR:-$repo/.cache/assets}
work=${FSDPP_DEMO_DIR:-$repo/.cache/demo}
IFS=, read -r pretrain_steps finetune_steps <<< "${FSDPP_DEMO_STEPS:-200,100}"
fsdpp=$repo/build/fsdpp
rm -rf "$work"
mkdir -p "$work"
start=$(date +%s)

echo "== 1/5 data: tokenizing the corpora with GPT-2's BPE"
"$fsdpp" data prepare --input "$assets/corpora/kjv-old-testament" --output "$work/data/old" \
  --tokenizer "$assets/gpt2" --eval-fraction 0.02
"$fsdpp" data prepare --input "$assets/corpora/kjv-new-testament" --output "$work/data/new" \
  --tokenizer "$assets/gpt2" --eval-fraction 0.1

common=(--nproc 2 --strategy full_shard --seq-len 128 --batch-size 8 --warmup-steps 20
        --log-freq 25 --save-dir "$work/runs" --tokenizer "$assets/gpt2")

echo "== 2/5 pretraining GPT-2 mini (4 layers, d=128) from scratch on the Old Testament"
"$fsdpp" train "${common[@]}" --experiment-name pretrain-old \
  --from-scratch --model-type gpt2 --model-size mini --lr 2e-3 --min-lr 2e-4 --weight-decay 0.1 \
  --max-steps "$pretrain_steps" --data "$work/data/old/train_*.tok" \
  --eval-data "$work/data/old/eval_*.tok" --eval-max-windows 64

echo "== 3/5 fine-tuning on the New Testament, 2 ranks FULL_SHARD (held-out perplexity before -> after)"
"$fsdpp" train "${common[@]}" --experiment-name finetune-new \
  --model "$work/runs/pretrain-old/hf" --lr 1e-3 --min-lr 1e-4 --grad-clip 1.0 \
  --max-steps "$finetune_steps" --data "$work/data/new/train_*.tok" --eval-data "$work/data/new/eval_*.tok"

model=$work/runs/finetune-new/hf
echo "== 4/5 the exported Hugging Face folder: $model"
"$fsdpp" eval --model "$model" --data "$work/data/new/eval_*.tok" --seq-len 128
for prompt in "And Jesus said" "Blessed are" "In the beginning"; do
  "$fsdpp" generate --model "$model" --prompt "$prompt" --max-new-tokens 24 --top-k 40 --temperature 0.8 --seed 1
done

echo "== 5/5 equivalence: FULL_SHARD on 2 ranks vs one unsharded process"
"$fsdpp" equiv --nproc 2

echo "demo finished in $(( $(date +%s) - start )) s; outputs in $work"
