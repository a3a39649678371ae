#!/usr/bin/env bash
# Unpacks the packages pinned in ci/deps.lock into <repo>/.deps (git-ignored), for a
# machine that lacks them: ci/gpu.sh puts .deps/usr on CMAKE_PREFIX_PATH. Run it where
# Debian's archive is reachable (apt-get download); copy .deps to a runner that has no
# network. Idempotent: prints nothing when .deps matches the lock.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
lock="$repo/ci/deps.lock"
deps="$repo/.deps"
stamp=$(sha256sum "$lock" | cut -d' ' -f1)
[ "$(cat "$deps/.lock.sha256" 2>/dev/null)" = "$stamp" ] && exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$deps.tmp" && mkdir -p "$deps.tmp"
grep -v '^#' "$lock" | while read -r package version sha; do
  [ -n "$package" ] || continue
  (cd "$work" && apt-get download -q "$package=$version" >/dev/null 2>&1) ||
    { echo "ci/vendor_deps.sh: apt-get download $package=$version failed (ci/deps.lock)" >&2; exit 1; }
  deb=$(ls "$work/${package}_"*.deb)
  got=$(sha256sum "$deb" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "ci/vendor_deps.sh: $deb has sha256 $got, ci/deps.lock expects $sha" >&2
    exit 1
  fi
  dpkg-deb -x "$deb" "$deps.tmp"
  rm -f "$deb"
done
echo "$stamp" >"$deps.tmp/.lock.sha256"
rm -rf "$deps" && mv "$deps.tmp" "$deps"
