#!/usr/bin/env bash
# Runs a local kvserve cluster on loopback: one router in front of two workers, each with a
# Prometheus /metrics endpoint, all on the default model. On a fresh machine it first runs
# scripts/setup.sh (packages, model, build). Ctrl-C (or SIGTERM) stops all three cleanly.
#
#   scripts/run_cluster.sh                          # router on 127.0.0.1:50051 (HTTP :8000)
#   ROUTER_PORT=8000 WORKER_KV_BYTES=536870912 scripts/run_cluster.sh
#   SKIP_SETUP=1 scripts/run_cluster.sh             # reuse an existing build
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${KVSERVE_BUILD_DIR:-build}
ROUTER_PORT=${ROUTER_PORT:-50051}
ROUTER_METRICS_PORT=${ROUTER_METRICS_PORT:-9451}
ROUTER_HTTP_PORT=${ROUTER_HTTP_PORT:-8000}
WORKER_PORTS=(${WORKER_PORTS:-50061 50062})
WORKER_METRICS_PORTS=(${WORKER_METRICS_PORTS:-9461 9462})
WORKER_KV_BYTES=${WORKER_KV_BYTES:-268435456}
WORKER_THREADS=${WORKER_THREADS:-0}
LOG_DIR=${LOG_DIR:-$(mktemp -d -t kvserve-cluster-XXXXXX)}

if [ -z "${SKIP_SETUP:-}" ]; then
  scripts/setup.sh
fi
for binary in worker/kvserve-worker router/kvserve-router tools/kvserve-cli; do
  [ -x "$BUILD_DIR/$binary" ] || { echo "run_cluster: $BUILD_DIR/$binary is missing" >&2; exit 1; }
done

pids=()
stopped=""
stop() {
  [ -n "$stopped" ] && return
  stopped=1
  if ((${#pids[@]})); then
    echo "run_cluster: stopping (router first, then workers)"
    kill -TERM "${pids[0]}" 2>/dev/null || true
    wait "${pids[0]}" 2>/dev/null || true
    for pid in "${pids[@]:1}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]:1}"; do wait "$pid" 2>/dev/null || true; done
  fi
  echo "run_cluster: stopped; logs in $LOG_DIR"
}
trap 'stop; exit 0' INT TERM
trap stop EXIT

# Waits until `log` says "<name> ready", or fails if the process `pid` exits first.
wait_ready() {
  local name=$1 pid=$2 log=$3
  for _ in $(seq 1 600); do
    grep -q "^$name ready" "$log" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "run_cluster: $name failed:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.5
  done
  echo "run_cluster: $name did not become ready" >&2
  exit 1
}

worker_addresses=()
for i in "${!WORKER_PORTS[@]}"; do
  log="$LOG_DIR/worker$i.log"
  "$BUILD_DIR/worker/kvserve-worker" --listen="127.0.0.1:${WORKER_PORTS[$i]}" \
    --metrics_listen="127.0.0.1:${WORKER_METRICS_PORTS[$i]}" \
    --kv_memory_bytes="$WORKER_KV_BYTES" --num_threads="$WORKER_THREADS" \
    --worker_id="worker$i" >"$log" 2>&1 &
  pids+=($!)
  worker_addresses+=("127.0.0.1:${WORKER_PORTS[$i]}")
done
for i in "${!WORKER_PORTS[@]}"; do
  wait_ready kvserve-worker "${pids[$i]}" "$LOG_DIR/worker$i.log"
done
"$BUILD_DIR/router/kvserve-router" --listen="127.0.0.1:$ROUTER_PORT" \
  --metrics_listen="127.0.0.1:$ROUTER_METRICS_PORT" --http_port="$ROUTER_HTTP_PORT" \
  --workers="$(IFS=,; echo "${worker_addresses[*]}")" >"$LOG_DIR/router.log" 2>&1 &
router_pid=$!
# The router's pid goes first in pids so that stop() drains it before the workers.
pids=("$router_pid" "${pids[@]}")
wait_ready kvserve-router "$router_pid" "$LOG_DIR/router.log"
# Ready to serve once the router answers GetModelInfo (a worker has reported to it).
"$BUILD_DIR/tools/kvserve-cli" --target="127.0.0.1:$ROUTER_PORT" --timeout_s=60 wait ||
  echo "run_cluster: the router does not serve yet" >&2

# The served model's name, as /v1/models lists it (the name clients pass as "model").
MODEL_NAME=$(python3 -c 'import json, sys, urllib.request
print(json.load(urllib.request.urlopen(sys.argv[1], timeout=10))["data"][0]["id"])' \
  "http://127.0.0.1:$ROUTER_HTTP_PORT/v1/models" 2>/dev/null || echo SmolLM2-135M-Instruct)
cat <<EOM

kvserve cluster is up (logs in $LOG_DIR):
  router   127.0.0.1:$ROUTER_PORT   metrics http://127.0.0.1:$ROUTER_METRICS_PORT/metrics
           OpenAI-compatible HTTP http://127.0.0.1:$ROUTER_HTTP_PORT/v1
$(for i in "${!WORKER_PORTS[@]}"; do
  echo "  worker$i  127.0.0.1:${WORKER_PORTS[$i]}   metrics http://127.0.0.1:${WORKER_METRICS_PORTS[$i]}/metrics"
done)

Try it:
  $BUILD_DIR/tools/kvserve-cli --target=127.0.0.1:$ROUTER_PORT generate "The capital of France is" --max_tokens=16
  $BUILD_DIR/tools/kvserve-cli --target=127.0.0.1:$ROUTER_PORT chat "Write a haiku about caches."
  $BUILD_DIR/tools/kvserve-cli --target=127.0.0.1:$ROUTER_PORT workers
  clients/python/generate_stubs.sh && clients/python/kvserve_client.py --target 127.0.0.1:$ROUTER_PORT --prompt "Hello"

OpenAI-compatible HTTP (streamed with Server-Sent Events):
  curl -N http://127.0.0.1:$ROUTER_HTTP_PORT/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model": "$MODEL_NAME", "messages": [{"role": "user", "content": "Write a haiku about caches."}], "stream": true}'

  python3 - <<'PY'
from openai import OpenAI  # pip install openai
client = OpenAI(base_url="http://127.0.0.1:$ROUTER_HTTP_PORT/v1", api_key="unused")
for chunk in client.completions.create(model="$MODEL_NAME", prompt="The KV cache is",
                                       max_tokens=32, stream=True):
    print(chunk.choices[0].text, end="", flush=True)
print()
PY
EOM
if command -v grpcurl >/dev/null; then
  cat <<EOM
  grpcurl -plaintext -d '{"prompt": "Hello", "sampling": {"max_tokens": 16}}' 127.0.0.1:$ROUTER_PORT kvserve.v1.Generation/Generate
EOM
fi
echo
echo "Ctrl-C stops the cluster."
# A worker that exits (killed to try the failover, say) leaves the rest running: the router moves
# its requests and serves on with the others. The router's exit, or Ctrl-C, stops them all.
declare -A worker_live
for i in "${!WORKER_PORTS[@]}"; do worker_live[$i]=1; done
while kill -0 "$router_pid" 2>/dev/null; do
  for i in "${!worker_live[@]}"; do
    pid=${pids[$((i + 1))]}
    kill -0 "$pid" 2>/dev/null && continue
    rc=0
    wait "$pid" 2>/dev/null || rc=$?
    echo "run_cluster: worker$i exited (status $rc; log $LOG_DIR/worker$i.log); the router serves on with the others"
    unset "worker_live[$i]"
  done
  sleep 1
done
echo "run_cluster: the router exited; stopping the workers"
