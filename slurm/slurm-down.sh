#!/usr/bin/env bash
# Stop exactly the daemons slurm-up.sh started (by the pids it recorded), nothing else.
set -u
STATE=${PROTOBENCH_SLURM_STATE:-/run/protobench-slurm}
[[ -s $STATE/started.pids ]] || exit 0
tac "$STATE/started.pids" | while read -r pid; do
  kill "$pid" 2>/dev/null && echo "stopped pid $pid"
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
done
: > "$STATE/started.pids"
