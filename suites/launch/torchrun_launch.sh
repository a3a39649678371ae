#!/usr/bin/env bash
# fsdpp under PyTorch's own torchrun: its agent hosts a TCPStore at MASTER_ADDR:MASTER_PORT
# (TORCHELASTIC_USE_AGENT_STORE=True), so fsdpp's rank 0 hosts its store elsewhere and
# publishes where through the agent's (core/comm/connect.h). Three launches, each running
# `fsdpp selfcheck` on 2 ranks: static rendezvous with --master-port (the docs' command),
# --standalone, and two "nodes" meeting through c10d rendezvous (two torchrun agents).
# Usage: torchrun_launch.sh FSDPP PYTHON. Exit 77 (skipped): no torchrun in PYTHON's env.
set -uo pipefail
fsdpp=$1
python=$2
torchrun=$(dirname "$python")/torchrun
[ -x "$torchrun" ] || { echo "torchrun_launch: no torchrun beside $python" >&2; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

expect_selfcheck() {  # NAME LOG...: passes when rank 0's log says every collective was correct
  local name=$1; shift
  if grep -q "selfcheck: all [0-9]* collectives correct on 2 ranks" "$@"; then
    echo "ok: $name"
  else
    echo "FAILED: $name"; tail -n 20 "$@"; failed=1
  fi
}

port=$(free_port)
timeout 120 "$torchrun" --no-python --nproc-per-node 2 --master-port "$port" \
  "$fsdpp" selfcheck --numel 1024 --timeout-s 20 >"$work/static.log" 2>&1
expect_selfcheck "torchrun --nproc-per-node 2 --master-port $port (static rendezvous, agent store)" "$work/static.log"
grep -q "source=torchrun agent_store" "$work/static.log" ||
  { echo "FAILED: the static launch did not run on the agent's store"; failed=1; }

timeout 120 "$torchrun" --no-python --standalone --nproc-per-node 2 \
  "$fsdpp" selfcheck --numel 1024 --timeout-s 20 >"$work/standalone.log" 2>&1
expect_selfcheck "torchrun --standalone --nproc-per-node 2" "$work/standalone.log"

port=$(free_port)
for node in 0 1; do
  timeout 120 "$torchrun" --no-python --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "fsdpp-test-$$" \
    "$fsdpp" selfcheck --numel 1024 --timeout-s 20 >"$work/node$node.log" 2>&1 &
done
wait
expect_selfcheck "two torchrun agents, --nnodes 2, c10d rendezvous" "$work/node0.log" "$work/node1.log"
exit $failed
