#!/usr/bin/env bash
# Router overhead on loopback: starts one kvserve-worker and one kvserve-router in front of it
# (ports chosen by the processes), then runs router_overhead_bench (sequential and 4-way TTFT,
# router vs worker) and, when kvserve-loadgen is built, the same concurrent load through each
# (LOADGEN=path overrides where it is looked for).
#
#   bench/router_overhead.sh [BUILD_DIR]        # default: build
# Env: WORKER=path/to/kvserve-worker (default BUILD_DIR/worker/kvserve-worker),
#      WORKER_THREADS (default 2), LOADGEN_ARGS (default a short 4-stream run).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
WORKER=${WORKER:-$BUILD_DIR/worker/kvserve-worker}
ROUTER=$BUILD_DIR/router/kvserve-router
BENCH=$BUILD_DIR/bench/router_overhead_bench
LOADGEN=${LOADGEN:-$BUILD_DIR/bench/kvserve-loadgen}
LOADGEN_ARGS=${LOADGEN_ARGS:---concurrency=4 --num_requests=32 --prompt_len=64:64 \
--output_len=8:8}
logs=$(mktemp -d -t kvserve-router-bench-XXXXXX)

pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT

# Starts a process with output in $logs/$1.log and waits for "<binary name> ready".
start() {
  local name=$1; shift
  "$@" >"$logs/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 600); do
    grep -q " ready" "$logs/$name.log" && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$logs/$name.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "$name did not start" >&2; exit 1
}
port() { grep -o "grpc_port=[0-9]*" "$logs/$1.log" | cut -d= -f2; }

start worker "$WORKER" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --num_threads="${WORKER_THREADS:-2}"
worker="127.0.0.1:$(port worker)"
start router "$ROUTER" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --workers="$worker"
router="127.0.0.1:$(port router)"
sleep 1  # the router's first status report from the worker

"$BENCH" --worker="$worker" --router="$router" --benchmark_counters_tabular=true
if [ -x "$LOADGEN" ]; then
  # Same load, fresh prompts for each target (another seed), so neither run finds the other's
  # prompts in the worker's prefix cache.
  seed=1
  for target in "$worker" "$router"; do
    echo "== kvserve-loadgen --target=$target --seed=$seed $LOADGEN_ARGS"
    # shellcheck disable=SC2086
    "$LOADGEN" --target="$target" --no_status --seed=$seed $LOADGEN_ARGS
    seed=$((seed + 1))
  done
fi
