#!/usr/bin/env bash
# README command 1: set up, build, and run the main job, the default demo:
#   1. fetch the pinned corpora and GPT-2 tokenizer (ci/fetch_assets.sh),
#   2. tokenize them into fsdpp token shards with held-out splits (fsdpp data prepare),
#   3. pretrain a small GPT-2 from scratch on the State of the Union addresses,
#   4. fine-tune it on Moby-Dick with 2 ranks, FULL_SHARD, scoring held-out Moby-Dick
#      perplexity before and after, and export the result as a Hugging Face folder,
#   5. load that folder with `fsdpp eval` and `fsdpp generate`,
#   6. run the equivalence check (`fsdpp equiv`: sharded vs unsharded) at its default size.
# Everything is written under $FSDPP_DEMO_DIR (default .cache/demo, replaced each run).
# FSDPP_DEMO_STEPS=<pretrain>,<finetune> changes the step counts (default 200,100).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
bash ci/setup.sh
bash ci/fetch_assets.sh
bash ci/build.sh >/dev/null

assets=${FSDPP_ASSETS_DIR:-$repo/.cache/assets}
work=${FSDPP_DEMO_DIR:-$repo/.cache/demo}
IFS=, read -r pretrain_steps finetune_steps <<< "${FSDPP_DEMO_STEPS:-200,100}"
fsdpp=$repo/build/fsdpp
rm -rf "$work"
mkdir -p "$work"
start=$(date +%s)

echo "== 1/5 data: tokenizing the corpora with GPT-2's BPE"
"$fsdpp" data prepare --input "$assets/corpora/sotu" --output "$work/data/sotu" \
  --tokenizer "$assets/gpt2" --eval-fraction 0.02
"$fsdpp" data prepare --input "$assets/corpora/moby-dick" --output "$work/data/moby-dick" \
  --tokenizer "$assets/gpt2" --eval-fraction 0.1

common=(--nproc 2 --strategy full_shard --seq-len 128 --batch-size 8 --warmup-steps 20
        --log-freq 25 --save-dir "$work/runs" --tokenizer "$assets/gpt2")

echo "== 2/5 pretraining GPT-2 mini (4 layers, d=128) from scratch on the State of the Union"
"$fsdpp" train "${common[@]}" --experiment-name pretrain-sotu \
  --from-scratch --model-type gpt2 --model-size mini --lr 2e-3 --min-lr 2e-4 --weight-decay 0.1 \
  --max-steps "$pretrain_steps" --data "$work/data/sotu/train_*.tok" \
  --eval-data "$work/data/sotu/eval_*.tok" --eval-max-windows 64

echo "== 3/5 fine-tuning on Moby-Dick, 2 ranks FULL_SHARD (held-out perplexity before -> after)"
"$fsdpp" train "${common[@]}" --experiment-name finetune-moby \
  --model "$work/runs/pretrain-sotu/hf" --lr 1e-3 --min-lr 1e-4 --grad-clip 1.0 \
  --max-steps "$finetune_steps" --data "$work/data/moby-dick/train_*.tok" --eval-data "$work/data/moby-dick/eval_*.tok"

model=$work/runs/finetune-moby/hf
echo "== 4/5 the exported Hugging Face folder: $model"
"$fsdpp" eval --model "$model" --data "$work/data/moby-dick/eval_*.tok" --seq-len 128
for prompt in "Call me" "The whale" "Captain Ahab said"; do
  "$fsdpp" generate --model "$model" --prompt "$prompt" --max-new-tokens 24 --top-k 40 --temperature 0.8 --seed 1
done

echo "== 5/5 equivalence: FULL_SHARD on 2 ranks vs one unsharded process"
"$fsdpp" equiv --nproc 2

echo "demo finished in $(( $(date +%s) - start )) s; outputs in $work"
