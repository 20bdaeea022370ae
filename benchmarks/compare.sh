#!/usr/bin/env bash
# strom side by side with the peer broker (Tansu): see benchmarks/compare.py --help.
#   benchmarks/compare.sh                       every workload but scale, 3 repetitions A B A B
#   benchmarks/compare.sh -w produce-1k -n 5    one workload, 5 repetitions
#   benchmarks/compare.sh -w scale              1,000 partitions, 200 clients, RSS, restart
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
cd "$root"
exec "$py" benchmarks/compare.py "$@"
