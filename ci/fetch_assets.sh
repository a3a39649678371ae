#!/usr/bin/env bash
# Fetches the tokenizer and corpus assets that the suites and the demo read, pinned by
# ci/assets.lock, from PyPI and Debian only. Needs ci/setup.sh's .venv (pip, gguf,
# transformers) and Debian's `bible` reader (bible-kjv).
#
# Idempotent and quiet: when the assets of the current lock are present it prints nothing.
# They live outside the clone, in $FSDPP_CACHE_DIR (default ~/.cache/fsdpp)/assets-<hash of
# the lock>, so that a fresh clone reuses them; <repo>/.cache/assets links there. Setting
# $FSDPP_ASSETS_DIR puts them in that folder instead (the suites read the same variable).
#
#   gpt2/encoder.json, gpt2/vocab.bpe      GPT-2's BPE vocabulary and merges, copied out of
#                                          llama.cpp's ggml-vocab-gpt-2.gguf (ci/assets_from_gguf.py)
#   hf-{llama-spm,llama-bpe,qwen2,phi-3,falcon}/tokenizer.json
#                                          the Hugging Face tokenizer that transformers builds from
#                                          llama.cpp's ggml-vocab-*.gguf (Llama-2's, Llama 3's,
#                                          Qwen2's, Phi-3's, Falcon's vocabulary)
#   hf-{llama-bpe,qwen2,falcon}-hub/tokenizer.json
#                                          the same, in the shape of the Hub's Llama 3 / Qwen2.5 /
#                                          Falcon files (ignore_merges; NFC; Falcon's pre-tokenizer
#                                          Sequence), by ci/assets_from_gguf.py hub
#   hf-gemma-kjv/tokenizer.{model,json}    Gemma's tokenizer pipeline with a vocabulary of our own
#                                          (Gemma's is not reachable from here): a SentencePiece
#                                          BPE trained with Gemma's settings on the Old Testament
#                                          (PyPI's sentencepiece, pinned; deterministic, the
#                                          .model's sha256 pinned too), and the tokenizer.json
#                                          transformers' GemmaTokenizer makes of it
#                                          (ci/gemma_tokenizer.py)
#   llama.cpp/ggml-vocab-{gpt-2,llama-spm,llama-bpe,qwen2,phi-3,falcon}.gguf{,.inp,.out}
#                                          llama.cpp's vocabularies and tokenizer test vectors,
#                                          from the models/ folder that PyPI's llama-cpp-python
#                                          source distribution carries
#   corpora/kjv-old-testament/NNNN.txt     the King James Bible (public domain), one file per
#   corpora/kjv-new-testament/NNNN.txt     chapter, a verse per line, from Debian's bible-kjv-text
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
lock="$repo/ci/assets.lock"
python=$repo/.venv/bin/python
# The key is the contents (not the paths) of the lock and the scripts that make the assets,
# so that every clone on this machine finds the same folder.
lock_sum=$(cat "$lock" "$repo/ci/fetch_assets.sh" "$repo/ci/assets_from_gguf.py" "$repo/ci/gemma_tokenizer.py" \
  "$repo/ci/lib/pypi_file.py" | sha256sum | cut -c1-16)
if [ -n "${FSDPP_ASSETS_DIR:-}" ]; then
  assets=$FSDPP_ASSETS_DIR
else
  assets=${FSDPP_CACHE_DIR:-$HOME/.cache/fsdpp}/assets-$lock_sum
fi

fail() { echo "ci/fetch_assets.sh: $*" >&2; exit 1; }
link_into_clone() {
  if [ -z "${FSDPP_ASSETS_DIR:-}" ] && [ "$(readlink "$repo/.cache/assets" 2>/dev/null)" != "$assets" ]; then
    mkdir -p "$repo/.cache"
    rm -rf "$repo/.cache/assets"
    ln -sfn "$assets" "$repo/.cache/assets"
  fi
}

# The stamp records which lock (and which scripts) made the assets; a change refetches.
if [ "$(cat "$assets/.complete" 2>/dev/null)" = "$lock_sum" ]; then
  link_into_clone
  exit 0
fi
[ -x "$python" ] || fail "no $python (run bash ci/setup.sh first)"
command -v bible >/dev/null || fail "Debian's 'bible' reader is missing (apt-get install bible-kjv; ci/setup.sh does)"

# lock_field KIND NAME COLUMN: one field of the lock line of that kind and name.
lock_field() {
  awk -v k="$1" -v n="$2" -v c="$3" '$1 == k && $2 == n { print $c; found = 1 } END { if (!found) exit 1 }' "$lock" ||
    fail "no '$1 $2' line in $lock"
}
# check_sha256 FILE WHAT KIND NAME: refuses a file whose sha256 is not the pinned one.
check_sha256() {
  local want
  want=$(lock_field "$3" "$4" 4)
  [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$want" ] || fail "$2: sha256 of $(basename "$1") is not the pinned $want; refusing it"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out
mkdir -p "$out/gpt2" "$out/llama.cpp" "$out/corpora"
echo "ci/fetch_assets.sh: fetching tokenizer and corpus assets into $assets"

# llama.cpp's vocabularies and test vectors, from the llama-cpp-python source distribution.
version=$(lock_field pypi-sdist llama-cpp-python 3)
sdist=$tmp/llama_cpp_python-$version.tar.gz
"$python" "$repo/ci/lib/pypi_file.py" llama-cpp-python "$(lock_field pypi-sdist llama-cpp-python 4)" "$sdist" ||
  fail "could not fetch llama-cpp-python==$version's source distribution"
models=llama_cpp_python-$version/vendor/llama.cpp/models
files=()
for vocab in gpt-2 llama-spm llama-bpe qwen2 phi-3 falcon; do
  files+=("ggml-vocab-$vocab.gguf" "ggml-vocab-$vocab.gguf.inp" "ggml-vocab-$vocab.gguf.out")
done
tar -xzf "$sdist" -C "$tmp" "${files[@]/#/$models/}" || fail "$(basename "$sdist") lacks llama.cpp's models/ vocabularies"
for f in "${files[@]}"; do mv "$tmp/$models/$f" "$out/llama.cpp/$f"; done
"$python" "$repo/ci/assets_from_gguf.py" gpt2 "$out/llama.cpp/ggml-vocab-gpt-2.gguf" "$out/gpt2"
# hf-VOCAB: transformers' conversion of the GGUF; hf-VOCAB-hub: the same in the shape of
# the family's Hugging Face Hub file (assets_from_gguf.py says what differs).
pairs=()
for vocab in llama-spm llama-bpe qwen2 phi-3 falcon; do
  pairs+=("$out/llama.cpp/ggml-vocab-$vocab.gguf" "$out/hf-$vocab")
done
"$python" "$repo/ci/assets_from_gguf.py" hf "${pairs[@]}" >"$tmp/hf.log" 2>&1 ||
  fail "transformers could not convert llama.cpp's vocabularies: $(tail -n1 "$tmp/hf.log")"
for family in llama3:llama-bpe qwen2:qwen2 falcon:falcon; do
  vocab=${family#*:}
  "$python" "$repo/ci/assets_from_gguf.py" hub "${family%%:*}" "$out/hf-$vocab/tokenizer.json" "$out/hf-$vocab-hub" ||
    fail "could not write hf-$vocab-hub"
done

# The King James Bible from Debian's bible-kjv-text, read with its own `bible` program.
version=$(lock_field debian bible-kjv-text 3)
(cd "$tmp" && apt-get download "bible-kjv-text=$version" >"$tmp/apt.log" 2>&1) ||
  fail "apt-get download bible-kjv-text=$version failed: $(tail -n1 "$tmp/apt.log")"
deb=$(ls "$tmp"/bible-kjv-text_*.deb)
check_sha256 "$deb" "bible-kjv-text=$version" debian bible-kjv-text
dpkg-deb -x "$deb" "$tmp/kjv"
# One verse per line ("  N text"); a chapter starts with a blank line and "Book N".
# Each chapter becomes NNNN.txt: its heading, then its verses without their numbers.
bible -p "$tmp/kjv/usr/lib" -l100000 "gen1:1-rev22:21" | awk -v out="$out/corpora" '
  /^$/ { next }
  /^ +[0-9]+ / { sub(/^ +[0-9]+ /, ""); print > file; next }
  {
    if (file) close(file)
    n++
    if ($0 == "Matthew 1") testament = "kjv-new-testament"
    if (!testament) testament = "kjv-old-testament"
    file = sprintf("%s/%s/%04d.txt", out, testament, n)
    system("mkdir -p " out "/" testament)
    print > file
  }
  END { if (n != 1189) { print "expected 1189 chapters, read " n > "/dev/stderr"; exit 1 } }' ||
  fail "bible-kjv-text=$version did not read as the 1189 chapters of the King James Bible"

# Gemma's pipeline (ci/gemma_tokenizer.py), trained on the Old Testament just extracted, with
# PyPI's sentencepiece and the protobuf its model reader needs: pinned wheels (CPython 3.11,
# x86-64, as ci/requirements.lock) installed into a folder of their own for this step only,
# so that the .venv (keyed by ci/requirements.lock) stays as it is.
wheels=()
for package in sentencepiece protobuf; do
  version=$(lock_field pypi-wheel "$package" 3)
  if ! "$python" -m pip download --quiet --disable-pip-version-check --only-binary :all: --no-deps \
       -d "$tmp/wheels-$package" "$package==$version" >"$tmp/pip.log" 2>&1; then
    fail "pip download $package==$version failed: $(grep -E '^ERROR' "$tmp/pip.log" | head -n1)"
  fi
  wheel=$(ls "$tmp/wheels-$package"/*.whl)
  check_sha256 "$wheel" "$package==$version" pypi-wheel "$package"
  wheels+=("$wheel")
done
"$python" -m pip install --quiet --disable-pip-version-check --no-deps --no-index --target "$tmp/spm" "${wheels[@]}" \
  >"$tmp/pip.log" 2>&1 || fail "could not install ${wheels[*]}: $(tail -n1 "$tmp/pip.log")"
PYTHONPATH=$tmp/spm "$python" "$repo/ci/gemma_tokenizer.py" "$out/corpora/kjv-old-testament" "$out/hf-gemma-kjv" \
  >"$tmp/gemma.log" 2>&1 || fail "ci/gemma_tokenizer.py failed: $(tail -n1 "$tmp/gemma.log")"
check_sha256 "$out/hf-gemma-kjv/tokenizer.model" "ci/gemma_tokenizer.py's model (not the pinned training result)" \
  generated hf-gemma-kjv/tokenizer.model

# Install: replace the previous assets only once everything above succeeded.
rm -rf "$assets.partial"
mkdir -p "$(dirname "$assets")"
mv "$out" "$assets.partial"
echo "$lock_sum" > "$assets.partial/.complete"
rm -rf "$assets"
mv "$assets.partial" "$assets"
link_into_clone
echo "ci/fetch_assets.sh: done ($(du -sh "$assets" | cut -f1) in $assets)"
