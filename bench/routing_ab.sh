#!/usr/bin/env bash
# The routing A/B of docs/routing.md and bench/RESULTS.md, one command per figure (not in CI;
# `bench/routing_ab.py --smoke` is). Each scenario runs bench/routing_ab.py with the parameters
# the recorded figures used and writes its JSON, PNG and log under OUT_DIR.
#
#   bench/routing_ab.sh real        # router + 3 real CPU workers (1 thread each), default model:
#                                   # multi-turn near saturation, all four policies
#   bench/routing_ab.sh control     # the no-sharing control on the same cluster
#   bench/routing_ab.sh calibrate   # fit the CPU step-time model from the real run's step log
#                                   # (bench/step_time_cpu_smollm2.json), then run the same
#                                   # workload on 3 simulated workers to compare TTFT
#   bench/routing_ab.sh cluster64   # 64 simulated workers with the H200 / 8B step-time model
#
# Env: BUILD_DIR (build), OUT_DIR (/tmp/kvserve-routing-ab), SEED (1).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=${OUT_DIR:-/tmp/kvserve-routing-ab}
SEED=${SEED:-1}
mkdir -p "$OUT_DIR"
BINARIES=(--worker="$BUILD_DIR/worker/kvserve-worker" --router="$BUILD_DIR/router/kvserve-router")

# Multi-turn near saturation: 6 customers, each with its own 1200-word context (a document
# or a long system prompt: llm-d's 6k-token customer contexts, scaled to SmolLM2 on 2 cores),
# 16 turns each (so the 6 cold first turns stay under 10% of the requests and p90 measures the
# routing), 40-word questions, 32-token answers, 2 s mean think time. Each worker's pool holds
# about two customers' contexts and histories (6k tokens), the cluster's all six; a worker that
# sees every customer (round robin) cannot keep them.
MULTI_TURN=(--workloads=multi_turn --users=6 --groups=6 --system_words=1200 --user_words=40
            --max_tokens=32 --max_turns=16 --think_s=2 --requests=96 --seed="$SEED")
REAL=(--cluster=real --workers=3 --worker_threads=1 --kv_memory_bytes=$((138 << 20)))

case "${1:-}" in
  real)
    python3 bench/routing_ab.py "${BINARIES[@]}" "${REAL[@]}" "${MULTI_TURN[@]}" --rates=1.0 \
      --worker_flags="--step_log=$OUT_DIR/steps_real.csv" --request_timeout_s=900 \
      --out="$OUT_DIR/real.json" --plot="$OUT_DIR/real.png" | tee "$OUT_DIR/real.log"
    ;;
  control)
    python3 bench/routing_ab.py "${BINARIES[@]}" "${REAL[@]}" --workloads=no_sharing \
      --policies=kv_aware,least_loaded,round_robin --doc_words=300 --question_words=40 \
      --max_tokens=32 --requests=48 --rates=1.0 --seed="$SEED" --request_timeout_s=900 \
      --out="$OUT_DIR/control.json" | tee "$OUT_DIR/control.log"
    ;;
  calibrate)
    python3 bench/calibrate_step_time.py fit "$OUT_DIR/steps_real.csv" \
      --out=bench/step_time_cpu_smollm2.json
    python3 bench/routing_ab.py "${BINARIES[@]}" --cluster=simulated --workers=3 \
      --kv_memory_bytes=$((138 << 20)) --step_time_model=bench/step_time_cpu_smollm2.json \
      "${MULTI_TURN[@]}" --rates=1.0 --policies=kv_aware,round_robin --request_timeout_s=900 \
      --out="$OUT_DIR/simulated3.json" | tee "$OUT_DIR/simulated3.log"
    ;;
  cluster64)
    # llm-d's shape at 64 workers: 64 customers with 3000-word contexts, 16 turns each (cold
    # first turns 6%), 64-token answers; each simulated pool (SmolLM2's KV bytes per token)
    # holds ~12k tokens, about two customers with their histories, the cluster all of them. GPU
    # serving limits: 8192 tokens and 256 sequences per step.
    python3 bench/routing_ab.py "${BINARIES[@]}" --cluster=simulated --workers=64 \
      --kv_memory_bytes=$((276 << 20)) --step_time_model=bench/step_time_h200_8b.json \
      --worker_flags="--max_num_batched_tokens=8192 --max_num_seqs=256" \
      --workloads=multi_turn --users=64 --groups=64 --system_words=3000 --user_words=100 \
      --max_tokens=64 --max_turns=16 --think_s=2 --requests=1024 --rates=8,16 --seed="$SEED" \
      --request_timeout_s=900 --out="$OUT_DIR/cluster64.json" --plot="$OUT_DIR/cluster64.png" \
      | tee "$OUT_DIR/cluster64.log"
    ;;
  *)
    sed -n '2,16p' "$0" >&2
    exit 2
    ;;
esac
