#!/usr/bin/env bash
# Multi-node, for real, on one machine: two hosts made as network namespaces joined by a
# veth pair, each with its own address and host name, and `fsdpp train` on both, 2 ranks
# per host, from SLURM-style variables over the veth addresses (not loopback).
#
#   ci/multinode.sh FSDPP [OUT_DIR]       (OUT_DIR default: ${TMPDIR:-/tmp}/fsdpp-multinode-out)
#
# It checks (ci/multinode.md says how, and specifies the JSON it writes):
#   1. the 2x2 runs' per-step losses and grad norms equal a single-host `--nproc 4` run's
#      bit for bit under --deterministic, and so do the exported weights' bytes;
#   2. HYBRID_SHARD's shard groups lie inside a host (the ranks' world: lines, the mesh
#      rule, and the bytes that cross the veth against a run with the ranks placed cyclically);
#   3. with the link cut mid-run (`ip link set VETH down` in the second host), every rank
#      on both hosts exits non-zero within --timeout-s plus a stated margin, with a message
#      naming the op (and, where it does, the peer).
# Writes OUT_DIR/multinode-YYYYMMDD.json (format fsdpp.multinode-run, version 1).
#
# Needs root: `ip netns add` (CAP_SYS_ADMIN + CAP_NET_ADMIN) and `unshare --uts`. Without
# them it prints the reason and exits 77 (ctest: skipped). Exit 0: every check held;
# 1: a check failed (the JSON and the kept work folder say which); 2: bad usage.
# Environment: FSDPP_MULTINODE_TIMEOUT_S (5), FSDPP_MULTINODE_MARGIN_S (5): the link-cut
# run's --timeout-s and the margin on top of it; FSDPP_MULTINODE_REQUIRE_PEER (1): fail
# when a failure message does not name a peer (0: only record it); FSDPP_PYTHON: the Python to use (standard
# library only; default: the repository's .venv, else python3).
set -euo pipefail
usage="usage: ci/multinode.sh FSDPP [OUT_DIR]"
if [ $# -lt 1 ] || [ $# -gt 2 ]; then echo "$usage" >&2; exit 2; fi
fsdpp=$1
out=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
[ -x "$fsdpp" ] || { echo "ci/multinode.sh: $fsdpp is not an executable ($usage)" >&2; exit 2; }
py=${FSDPP_PYTHON:-}
[ -n "$py" ] || { [ -x "$repo/.venv/bin/python" ] && py=$repo/.venv/bin/python; } || py=python3

skip() { echo "ci/multinode.sh: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for ip netns and unshare --uts (running as uid $(id -u))"
command -v ip >/dev/null || skip "no 'ip' command (Debian: apt-get install iproute2)"
command -v unshare >/dev/null || skip "no 'unshare' command (Debian: util-linux)"

# Names carry this shell's pid, so runs side by side never meet; a veth name has at most
# 15 characters. Namespaces of earlier runs that were killed (SIGKILL skips the trap) are
# removed here when their pid is gone.
id=$$
ns_a=fsdpp-mn-$id-a ns_b=fsdpp-mn-$id-b veth_a=fmn${id}a veth_b=fmn${id}b
addr_a=10.27.6.1 addr_b=10.27.6.2 host_a=mnode1 host_b=mnode2
for stale in $(ip netns list 2>/dev/null | sed -n 's/^\(fsdpp-mn-\([0-9]*\)-[ab]\)\b.*/\1:\2/p'); do
  name=${stale%%:*} pid=${stale##*:}
  if ! kill -0 "$pid" 2>/dev/null; then ip netns del "$name" 2>/dev/null || true; rm -rf "/etc/netns/$name"; fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpp-multinode.XXXXXX")
helper_pid=
cleanup() {
  local code=$?
  trap - EXIT INT TERM HUP
  if [ -n "$helper_pid" ] && kill -0 "$helper_pid" 2>/dev/null; then
    kill -TERM "$helper_pid" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$helper_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$helper_pid" 2>/dev/null || true
  fi
  for ns in "$ns_a" "$ns_b"; do
    # Only processes inside our own namespaces: ranks this run started.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  ip link del "$veth_a" 2>/dev/null || true  # only there when set-up stopped before the move
  if [ "$code" = 0 ] || [ "$code" = 77 ]; then rm -rf "$work"; else echo "ci/multinode.sh: work folder kept: $work" >&2; fi
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

if ! err=$(ip netns add "$ns_a" 2>&1); then skip "ip netns add failed: $err"; fi
if ! err=$(ip netns exec "$ns_a" unshare --uts true 2>&1); then skip "unshare --uts failed: $err"; fi
ip netns add "$ns_b"
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add "$addr_a/24" dev "$veth_a"
ip -n "$ns_b" addr add "$addr_b/24" dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
  # `ip netns exec` bind-mounts /etc/netns/NAME/hosts over /etc/hosts: both host names
  # resolve to the veth addresses, as a cluster's /etc/hosts or DNS would.
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "$addr_a" "$host_a" "$addr_b" "$host_b" >"/etc/netns/$ns/hosts"
done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up

# A copy of the binary: a rebuild of the build folder during the run cannot change it
# (its RUNPATH is absolute, so the copy finds the same libraries).
cp "$fsdpp" "$work/fsdpp"
[ -n "$out" ] || out=${TMPDIR:-/tmp}/fsdpp-multinode-out
mkdir -p "$out"
"$py" "$here/multinode.py" --fsdpp "$work/fsdpp" --work "$work" --out "$out" \
  --host "$host_a,$ns_a,$veth_a,$addr_a" --host "$host_b,$ns_b,$veth_b,$addr_b" \
  --nodelist "mnode[1-2]" --timeout-s "${FSDPP_MULTINODE_TIMEOUT_S:-5}" --margin-s "${FSDPP_MULTINODE_MARGIN_S:-5}" \
  $([ "${FSDPP_MULTINODE_REQUIRE_PEER:-1}" = 1 ] && echo --require-peer) &
helper_pid=$!
wait "$helper_pid"
