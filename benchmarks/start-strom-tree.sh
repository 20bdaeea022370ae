#!/usr/bin/env bash
# Start a strom broker built from another source tree, as compare.py's peer: two strom builds side
# by side in one run (e.g. a change against the commit before it), each repetition alternating.
#   git archive <commit> src | tar -x -C /tmp/base
#   STROM_PEER_SRC=/tmp/base/src benchmarks/compare.sh --peer-script benchmarks/start-strom-tree.sh -w produce-1k
# usage: start-strom-tree.sh PORT      prints "pid=<PID> port=<PORT>"; stop it with: kill <PID>
# The broker runs with compare.py's settings for strom (no admin listener) and a data directory of
# its own, removed when the broker exits.
set -euo pipefail
port=${1:?usage: start-strom-tree.sh PORT}
src=${STROM_PEER_SRC:?set STROM_PEER_SRC to the other tree\'s src directory}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
data=$(mktemp -d /tmp/strom-peer-data.XXXXXX)
log=${STROM_PEER_LOG:-/tmp/strom-peer-$port.log}
cd "$data"
PYTHONPATH=$src PYTHONUNBUFFERED=1 nohup "$py" -m strom.cli.main broker \
  --override "listeners=PLAINTEXT://127.0.0.1:$port" --override "log.dirs=$data/logs" \
  --override "admin.listeners=" >"$log" 2>&1 &
pid=$!
# The data goes with the broker (a consume workload fills gigabytes).
nohup bash -c "while kill -0 $pid 2>/dev/null; do sleep 1; done; rm -rf '$data'" >/dev/null 2>&1 &
for _ in $(seq 600); do
  grep -q "ready: listening on" "$log" 2>/dev/null && break
  kill -0 $pid 2>/dev/null || { echo "strom ($src) exited; see $log" >&2; exit 1; }
  sleep 0.1
done
echo "pid=$pid port=$port"
