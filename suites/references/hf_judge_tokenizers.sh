#!/usr/bin/env bash
# Hugging Face `tokenizers` judges fsdpp's tokenizers: on every document of both demo
# corpora (the King James Old and New Testament), `fsdpp data prepare` with the GPT-2
# vocabulary and with the Llama-2 tokenizer.json that transformers built must give exactly
# the ids that HF gives (harness/references/hf_tokenize.py --compare-tok: every id, the
# first difference named with its document and position).
#
# Usage: hf_judge_tokenizers.sh FSDPP_BINARY PYTHON
set -uo pipefail
[ $# -eq 2 ] && [ -x "$1" ] || { echo "usage: $0 FSDPP_BINARY PYTHON" >&2; exit 2; }
fsdpp=$1 python=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
assets=${FSDPP_ASSETS_DIR:-$repo/.cache/assets}
work=$(mktemp -d "${TMPDIR:-/tmp}/hf_judge_tok.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
for corpus in kjv-old-testament kjv-new-testament; do
  for tokenizer in gpt2 hf-llama-spm/tokenizer.json; do
    name="$corpus/$(dirname "$tokenizer" | sed 's/^\.$//')$(basename "$tokenizer")"
    out=$work/${corpus}-$(echo "$tokenizer" | tr '/.' '__')
    if ! "$fsdpp" data prepare --input "$assets/corpora/$corpus" --output "$out" --tokenizer "$assets/$tokenizer" \
         --eval-fraction 0 >"$work/prepare.log" 2>&1; then
      echo "FAIL $name: fsdpp data prepare failed:"; tail -n 5 "$work/prepare.log"; failed=$((failed + 1)); continue
    fi
    if "$python" "$repo/harness/references/hf_tokenize.py" --tokenizer "$assets/$tokenizer" \
         --input "$assets/corpora/$corpus" --compare-tok "$out"/train_*.tok >"$work/compare.log" 2>&1; then
      echo "ok   $name: $(tail -n 1 "$work/compare.log" | cut -c1-200)"; passed=$((passed + 1))
    else
      echo "FAIL $name:"; tail -n 8 "$work/compare.log"; failed=$((failed + 1))
    fi
  done
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
