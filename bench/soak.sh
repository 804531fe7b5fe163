#!/usr/bin/env bash
# Soak test of the router on loopback (not part of CI): one kvserve-router in front of two
# kvserve-workers (ports chosen by the processes), driven by kvserve-loadgen with many concurrent
# short streams for a fixed time, while the router's resident memory and thread count are
# sampled from /proc. Prints the failed requests, the router's RSS growth and its thread count
# range; exits non-zero when a request failed.
#
#   bench/soak.sh [BUILD_DIR]                      # default: build, 10 minutes, 256 streams
#   SOAK_DURATION_S=120 bench/soak.sh              # a 2-minute smoke run
# Env: SOAK_DURATION_S (600), SOAK_CONCURRENCY (256), SOAK_PROMPT_LEN (16:64),
#      SOAK_OUTPUT_LEN (4:16), SOAK_SAMPLE_S (5), SOAK_LANES (8), WORKER_THREADS (1 each),
#      WORKER_KV_BYTES (268435456 each), LOG_DIR (a fresh temporary folder), MALLOC_ARENA_MAX
#      (2, as in the router's manifest).
#
# kvserve-loadgen runs a fixed number of requests, so the load comes from SOAK_LANES loops
# (8), each running kvserve-loadgen again and again with SOAK_CONCURRENCY / SOAK_LANES streams,
# until the duration is over; then the requests in flight finish. A round's streams go idle one by
# one during its last request latency, so a round asks for as many requests per stream as fit in
# the time left at the previous round's median latency (1 to 8; 2 in the first round): long rounds
# while there is time (streams busy most of the round), one request per stream at the end (the
# run ends about one request latency after the duration). RSS
# growth is measured from the first sample after a warm-up (a quarter of the duration, at most
# 60 s: gRPC and allocator pools sized) to the last sample, and to the highest one.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
WORKER=$BUILD_DIR/worker/kvserve-worker
ROUTER=$BUILD_DIR/router/kvserve-router
LOADGEN=$BUILD_DIR/bench/kvserve-loadgen
DURATION_S=${SOAK_DURATION_S:-600}
CONCURRENCY=${SOAK_CONCURRENCY:-256}
PROMPT_LEN=${SOAK_PROMPT_LEN:-16:64}
OUTPUT_LEN=${SOAK_OUTPUT_LEN:-4:16}
SAMPLE_S=${SOAK_SAMPLE_S:-5}
LANES=${SOAK_LANES:-8}
LOG_DIR=${LOG_DIR:-$(mktemp -d -t kvserve-soak-XXXXXX)}
for binary in "$WORKER" "$ROUTER" "$LOADGEN"; do
  [ -x "$binary" ] || { echo "soak: $binary is missing (cmake --build $BUILD_DIR)" >&2; exit 1; }
done
export OPENBLAS_NUM_THREADS=1  # as in the manifests: the worker's own pool only
export MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX:-2}  # as the router's manifest sets it

pids=()
lanes=()
sampler=""
cleanup() {
  if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true; fi
  for pid in "${lanes[@]}"; do  # a lane and the kvserve-loadgen it runs
    children=$(pgrep -P "$pid" || true)
    kill -TERM "$pid" $children 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT

# Starts a process with output in $LOG_DIR/$1.log and waits for its "ready" line.
start() {
  local name=$1; shift
  "$@" >"$LOG_DIR/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 900); do
    grep -q " ready$" "$LOG_DIR/$name.log" && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$LOG_DIR/$name.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "soak: $name did not start" >&2; exit 1
}
log_value() { grep -o "$2=[0-9]*" "$LOG_DIR/$1.log" | head -n1 | cut -d= -f2; }

workers=()
for i in 0 1; do
  start "worker$i" "$WORKER" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
    --worker_id="worker$i" --num_threads="${WORKER_THREADS:-1}" \
    --kv_memory_bytes="${WORKER_KV_BYTES:-268435456}"
  workers+=("127.0.0.1:$(log_value "worker$i" grpc_port)")
done
start router "$ROUTER" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --workers="$(IFS=,; echo "${workers[*]}")"
router_pid=${pids[-1]}
router="127.0.0.1:$(log_value router grpc_port)"
router_metrics="127.0.0.1:$(log_value router metrics_port)"

# Load starts once the router sees both workers healthy (kvserve_router_worker_healthy).
python3 - "$router_metrics" <<'PY'
import sys, time, urllib.request
for _ in range(300):
    try:
        text = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=2).read().decode()
        if sum(1 for line in text.splitlines()
               if line.startswith("kvserve_router_worker_healthy{") and line.endswith(" 1")) >= 2:
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.2)
sys.exit("soak: the router never saw both workers healthy")
PY

# Router samples, one line each: seconds since start, VmRSS (KiB), Threads.
samples=$LOG_DIR/router_samples.txt
: >"$samples"
(
  t0=$(date +%s)
  while [ -r "/proc/$router_pid/status" ]; do
    awk -v t="$(($(date +%s) - t0))" '/^VmRSS:/ {rss = $2} /^Threads:/ {threads = $2}
      END {print t, rss, threads}' "/proc/$router_pid/status" >>"$samples"
    sleep "$SAMPLE_S"
  done
) &
sampler=$!

echo "soak: router $router (pid $router_pid), workers ${workers[*]}; $CONCURRENCY streams," \
  "prompts $PROMPT_LEN, outputs $OUTPUT_LEN tokens, ${DURATION_S}s; logs in $LOG_DIR"
start_s=$(date +%s)
end_s=$((start_s + DURATION_S))
# One lane: kvserve-loadgen rounds until end_s; each round's JSON summary goes to lane<i>.json
# (a round without one is recorded in lane<i>.errors).
lane() {
  local i=$1 round=0 streams=$((CONCURRENCY / LANES)) per_stream=2 log json
  while (($(date +%s) < end_s)); do
    round=$((round + 1))
    log=$LOG_DIR/lane${i}_round$round.log
    "$LOADGEN" --target="$router" --no_status --concurrency="$streams" \
      --num_requests=$((per_stream * streams)) --prompt_len="$PROMPT_LEN" \
      --output_len="$OUTPUT_LEN" --seed=$((i * 100000 + round)) >"$log" 2>&1 || true
    json=$(grep '^{' "$log" | tail -n1 || true)
    if [ -z "$json" ]; then
      echo "$log" >>"$LOG_DIR/lane$i.errors"
      continue
    fi
    echo "$json" >>"$LOG_DIR/lane$i.json"
    per_stream=$(python3 -c 'import json, sys
latency = max(json.loads(sys.argv[1])["e2e_p50_s"], 0.1)
print(min(8, max(1, int(int(sys.argv[2]) / latency))))' "$json" $((end_s - $(date +%s))))
  done
}
for i in $(seq 1 "$LANES"); do
  lane "$i" &
  lanes+=($!)
done
for pid in "${lanes[@]}"; do wait "$pid"; done
lanes=()
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null || true
sampler=""
awk -v t="$(($(date +%s) - start_s))" '/^VmRSS:/ {rss = $2} /^Threads:/ {threads = $2}
  END {print t, rss, threads}' "/proc/$router_pid/status" >>"$samples"
if cat "$LOG_DIR"/lane*.errors 2>/dev/null | grep -q .; then
  echo "soak: kvserve-loadgen rounds without a summary (see these logs):" >&2
  cat "$LOG_DIR"/lane*.errors >&2
  exit 1
fi
warmup_s=$((DURATION_S / 4 < 60 ? DURATION_S / 4 : 60))

python3 - "$samples" "$warmup_s" "$(($(date +%s) - start_s))" "$DURATION_S" \
  "$LOG_DIR"/lane*.json <<'PY'
import json, sys
rows = [tuple(map(int, line.split())) for line in open(sys.argv[1]) if len(line.split()) == 3]
warmup_s, wall, duration_s = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rounds = [json.loads(line) for path in sys.argv[5:] for line in open(path) if line.strip()]
succeeded = sum(r["succeeded"] for r in rounds)
failed = sum(r["failed"] for r in rounds)
warm = next((r for r in rows if r[0] >= warmup_s), rows[-1])
rss = [r[1] for r in rows]
threads = [r[2] for r in rows]
print(f"soak: {wall} s, {len(rounds)} kvserve-loadgen rounds, {succeeded + failed} requests "
      f"({(succeeded + failed) / max(wall, 1):.1f}/s), failed requests: {failed}")
print(f"soak: router RSS {rss[0] / 1024:.1f} MiB at the start of load, {warm[1] / 1024:.1f} MiB "
      f"after {warm[0]} s of warm-up, {rss[-1] / 1024:.1f} MiB at the end, peak "
      f"{max(rss) / 1024:.1f} MiB ({len(rows)} samples)")
print(f"soak: router RSS growth after warm-up: {100 * (rss[-1] - warm[1]) / warm[1]:+.1f} % to the "
      f"end, {100 * (max(rss) - warm[1]) / warm[1]:+.1f} % to the peak")
# Threads while the streams run (after the warm-up, before the duration ends; the router holds a
# thread per call), and over the whole run including the idle start and the drained end.
loaded = [r[2] for r in rows if warmup_s <= r[0] <= duration_s] or threads
print(f"soak: router threads under load min {min(loaded)} max {max(loaded)}; whole run min "
      f"{min(threads)} max {max(threads)}, {threads[-1]} at the end")
sys.exit(1 if failed else 0)
PY
