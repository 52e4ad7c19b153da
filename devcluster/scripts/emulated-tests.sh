#!/usr/bin/env bash
# The DRA, spawner and KAI integration modules once more on Kubernetes versions the 1.36
# binaries emulate (docs/devcluster.md, "Older Kubernetes"): one local cluster per version,
# side by side, each on its own folder and ports, run by its own pytest. Tests marked
# `hub_side` (the hub's own routes, restarts and forms) run on 1.36 only.
#   emulated-tests.sh "1.35 1.34" tests/integration/test_a.py tests/integration/test_b.py ...
set -uo pipefail
cd "$(dirname "$0")/../.."
versions="$1"
shift
base="${EMULATED_PORT_BASE:-24443}"
pids=()
logs=()
for v in $versions; do
  log=".cache/emulated-$v.log"
  logs+=("$log")
  echo "gpusessions: the DRA, spawner and KAI tests on Kubernetes $v (emulated; log in $log) ..."
  DEVCLUSTER_EMULATE="$v" DEVCLUSTER_BIN="$PWD/.cache/devcluster/bin" \
    DEVCLUSTER_DIR="$PWD/.cache/devcluster-emu$v" DEVCLUSTER_PORT_BASE="$base" \
    .venv/bin/python -m pytest -p no:xdist -q -m "not gpu and not hub_side" \
    --basetemp="$PWD/.cache/pytest-emu$v" "$@" >"$log" 2>&1 &
  pids+=($!)
  base=$((base + 4000))
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  r=$?
  tail -n 15 "${logs[$i]}"
  [ "$r" -eq 0 ] || { echo "gpusessions: the emulated pass failed (${logs[$i]})" >&2; rc=1; }
done
exit "$rc"
