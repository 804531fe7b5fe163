#!/usr/bin/env bash
# The CUDA backend's check on a lent GPU machine (one H200: 15 minutes of device time a session,
# a machine start included), run from the device bundle that scripts/gpu_bundle.sh makes here;
# docs/gpu.md gives the one device call. It never builds: that machine has nvcc but none of our
# build dependencies. Steps, in this order, each under a timeout taken from what is left of a
# 420 s budget less what the later steps are promised (STEP_PLAN), a failure never stopping the
# next one:
#   smoke          nvidia-smi, the bundle's libraries (env.sh, gpu_bundle.sh --verify), one kernel
#   kernels        cuda_kernels_test: every CUDA kernel against the CPU backend
#   nccl           nccl_communicator_test: NCCL on a one-GPU group, and its all-reduce time
#   memcheck       compute-sanitizer --tool memcheck over the attention tests (MEMCHECK_FILTER)
#   gpu_bench      HBM bandwidth, paged attention, bf16 Linear
#   fidelity       gpu_model_test on synthetic weights of the default model's shape (the model
#                  itself cannot travel): f32 greedy tokens equal the CPU's; bf16 top-1 agreement
#   decode_graphs  model_bench on synthetic Llama-3-8B (bf16 weights and KV): BM_Decode at batch
#                  1 and 64 with CUDA graphs; weights_GB/s against gpu_bench's HBM figure is the
#                  decode efficiency
#   decode_eager   the same with --enforce_eager (KVSERVE_BENCH_ENFORCE_EAGER=1), and BM_DecodeOps:
#                  each op's µs per decode step
#   worker         kvserve-worker --device=cuda on synthetic weights of the default model's shape
#                  under kvserve-loadgen, 64 concurrent streams; then 64 more, SIGTERM while they
#                  run, and a clean drain (exit status 0, every stream finished)
#   profile        ncu on one launch of the decode attention and GEMV kernels (see profile())
# Each step's result, with its figures, is printed and appended to $OUT/gpu_check.txt as the step
# finishes; every step's whole output goes to $OUT/gpu_check.log; a one-screen summary comes
# last. Without a GPU (no nvidia-smi, or it lists none) only the smoke step runs, the output says
# "no GPU" and the exit status is 0 when the bundle is sound; with one, the exit status is 0 only
# when every step passed.
#
#   OUT=/tmp/gpu_check scripts/gpu_check.sh        # OUT defaults to /tmp/gpu_check
#
# Environment:
#   GPU_CHECK_BUNDLE    the bundle folder (default gpu-bundle)
#   GPU_CHECK_BUDGET_S  the budget (default 420)
#   GPU_CHECK_STEPS     only these steps after smoke, e.g. "memcheck worker" (a rerun in what is
#                       left of a session)
#   GPU_CHECK_LLAMA     the decode steps' model (default synthetic:llama3-8b; e.g.
#                       synthetic:llama3-8b:layers=8 to save time)
#   GPU_CHECK_MODEL     the fidelity and worker steps' model (default synthetic:smollm2-135m)
#   GPU_CHECK_FORCE=1   every step also without a GPU
#   GPU_CHECK_DRY_RUN=1 every step on the CPU with tiny models, forced: tries this script's
#                       plumbing on a machine without a GPU (the steps that need one fail)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
REPO=$PWD

BUNDLE=$(realpath -m "${GPU_CHECK_BUNDLE:-gpu-bundle}")
OUT_DIR=${OUT:-/tmp/gpu_check}
TXT=$OUT_DIR/gpu_check.txt
LOG=$OUT_DIR/gpu_check.log
BUDGET_S=${GPU_CHECK_BUDGET_S:-420}
ONLY_STEPS=${GPU_CHECK_STEPS:-}
# name:max_s:min_s in run order. A step's timeout is min(max_s, what is left of the budget less
# the min_s of every later step).
STEP_PLAN=(smoke:20:20 kernels:90:20 nccl:30:10 memcheck:90:20 gpu_bench:45:15 fidelity:75:20
  decode_graphs:110:45 decode_eager:110:45 worker:75:40 profile:60:20)
MEMCHECK_FILTER='CudaAttentionShapesTest.*:Shapes/CudaAttentionTest.*/d128_block16_group4_bf16:WeightTypes/CudaLinearTest.*/bf16_1000x260'
MEMCHECK_FILTER+=':Shapes/CudaAttentionTest.*/d64_block32_group8_f16'
MEMCHECK_FILTER+=':Shapes/CudaAttentionTest.*/d128_block32_group1_f32'
SKIPPED_RE='\[  SKIPPED \]'

export DEVICE=cuda LLAMA=${GPU_CHECK_LLAMA:-synthetic:llama3-8b} BENCH_MIN_TIME_S=0.5
export MODEL=${GPU_CHECK_MODEL:-synthetic:smollm2-135m} FORCE=${GPU_CHECK_FORCE:-0}
# kvserve-loadgen: phase 1 measures, phase 2 is in flight when the worker gets SIGTERM.
export LOAD_ARGS="--concurrency=64 --num_requests=128 --prompt_len=128:512 --output_len=64:128"
export DRAIN_ARGS="--concurrency=64 --num_requests=64 --prompt_len=128:256 --output_len=1024:1024"
if [[ ${GPU_CHECK_DRY_RUN:-0} == 1 ]]; then
  DEVICE=cpu LLAMA=${GPU_CHECK_LLAMA:-synthetic:tiny} MODEL=${GPU_CHECK_MODEL:-synthetic:tiny}
  FORCE=1 BENCH_MIN_TIME_S=0.01
  LOAD_ARGS="--concurrency=64 --num_requests=64 --prompt_len=8:32 --output_len=4:8 --vocab_low=1"
  LOAD_ARGS+=" --vocab_high=250"
  DRAIN_ARGS=${LOAD_ARGS/--output_len=4:8/--output_len=64:64}
fi
export BIN=$BUNDLE/bin WORK
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

SUMMARY=()
FIGURES=()
FAILED=()

# --- steps (each runs in a child bash under timeout; the variables above are exported) -------

smoke() {
  head -n 5 "$BUNDLE/MANIFEST.txt"
  echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null)"
  if command -v nvidia-smi >/dev/null; then
    timeout 10 nvidia-smi --format=csv,noheader \
      --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem
  fi
  cat "$WORK/env.txt"
  bash "$REPO/scripts/gpu_bundle.sh" --verify "$BUNDLE" || return 1
  "$BIN/cuda_kernels_test" --gtest_filter=CudaKernelsTest.RmsNormAndAddRmsNormMatchCpu
}

compute_sanitizer() {
  local tool
  local cuda=${CUDA_HOME:-/usr/local/cuda}
  for tool in "$(command -v compute-sanitizer)" "$cuda/bin/compute-sanitizer" \
    "$cuda/compute-sanitizer/compute-sanitizer"; do
    [[ -n $tool && -x $tool ]] && exec "$tool" "$@"
  done
  echo "memcheck: compute-sanitizer not found (PATH, \$CUDA_HOME/bin)"
  return 1
}

# Nsight Compute on one launch of each decode kernel inside gpu_bench: bf16 paged decode
# attention at batch 64 x 4k context (the 8th of (b)'s configurations, 23 launches each: 3 warm-up
# + 20 timed) and the GEMV on down_proj at M = 1 (after 3 x 23 launches of the three shapes
# before it). Speed of light, occupancy, warp stall reasons, memory workload.
profile() {
  local ncu cuda=${CUDA_HOME:-/usr/local/cuda}
  for ncu in "$(command -v ncu)" "$cuda/bin/ncu"; do [[ -n $ncu && -x $ncu ]] && break; done
  [[ -n $ncu && -x $ncu ]] || { echo "profile: ncu not found (PATH, \$CUDA_HOME/bin)"; return 1; }
  local sections=(--section SpeedOfLight --section Occupancy --section LaunchStats
    --section WarpStateStats --section MemoryWorkloadAnalysis)
  local rc=0
  "$ncu" "${sections[@]}" -k regex:PagedDecodeKernel --launch-skip 164 --launch-count 1 \
    "$BIN/gpu_bench" || rc=1
  "$ncu" "${sections[@]}" -k regex:GemvKernel --launch-skip 210 --launch-count 1 \
    "$BIN/gpu_bench" || rc=1
  return $rc
}

# gpu_model_test takes its model from KVSERVE_MODEL (a synthetic spec or a file).
fidelity() {
  KVSERVE_MODEL=$MODEL exec "$BIN/gpu_model_test"
}

# Eager (1) also times each op of a decode step (BM_DecodeOps: graph replays are not timed).
decode() {
  local filter='BM_Decode/(1|64)/'
  [[ $1 == 1 ]] && filter='BM_Decode/(1|64)/|BM_DecodeOps/1/'
  KVSERVE_MODEL=$LLAMA KVSERVE_BENCH_DEVICE=$DEVICE KVSERVE_BENCH_DTYPE=bfloat16 \
    KVSERVE_BENCH_ENFORCE_EAGER=$1 exec "$BIN/model_bench" \
    --benchmark_filter="$filter" --benchmark_min_time="$BENCH_MIN_TIME_S"
}

# The worker under load, then SIGTERM with streams in flight. Prints the load's figures and the
# worker's last lines; non-zero unless both loads succeeded and the worker drained and exited 0.
worker() {
  WORKER_LOG=$WORK/kvserve-worker.log
  local log=$WORKER_LOG port="" waited=0 rc=0
  "$BIN/kvserve-worker" --model="$MODEL" --device="$DEVICE" --listen=127.0.0.1:0 \
    --metrics_listen=127.0.0.1:0 --gpu_memory_utilization=0.5 --max_num_seqs=64 \
    --max_num_batched_tokens=2048 >"$log" 2>&1 &
  WORKER_PID=$!  # globals: the traps run after this function has returned
  local pid=$WORKER_PID
  # Also on the step's timeout (SIGTERM): the worker's last lines, and no worker left behind.
  trap 'exit 143' TERM
  trap worker_exit EXIT
  while ((waited < 600)) && kill -0 "$pid" 2>/dev/null; do
    grep -q 'kvserve-worker ready' "$log" && break
    sleep 0.1
    waited=$((waited + 1))
  done
  port=$(sed -n 's/^kvserve-worker grpc_port=\([0-9]*\).*/\1/p' "$log" | head -n 1)
  if [[ -z $port ]] || ! grep -q 'kvserve-worker ready' "$log"; then
    echo "worker: not ready after $((waited / 10)) s"
    return 1
  fi
  local sizes
  sizes=$(grep -h 'device=\|kv_blocks=' "$log" | tr '\n' ' ')
  echo "worker: ready after $((waited / 10)) s on port $port: $sizes"
  # shellcheck disable=SC2086  # one word per flag
  "$BIN/kvserve-loadgen" --target="127.0.0.1:$port" $LOAD_ARGS --seed=1 || rc=1
  # shellcheck disable=SC2086
  "$BIN/kvserve-loadgen" --target="127.0.0.1:$port" $DRAIN_ARGS --seed=2 >"$WORK/drain.log" 2>&1 &
  local load=$!
  sleep 0.5
  local start=$SECONDS
  kill -TERM "$pid"
  wait "$pid"
  local worker_rc=$?
  echo "worker: exit status $worker_rc $((SECONDS - start)) s after SIGTERM"
  wait "$load" || rc=1
  echo "drain: the load SIGTERM came 0.5 s into: $(grep -m1 '^concurrency' "$WORK/drain.log")"
  ((worker_rc == 0)) && grep -q '^kvserve-worker stopped$' "$log" || rc=1
  return "$rc"
}
worker_exit() {
  echo "kvserve-worker log (tail):"
  tail -n 12 "$WORKER_LOG"
  kill -KILL "$WORKER_PID" 2>/dev/null
}
export -f smoke compute_sanitizer fidelity decode worker worker_exit profile
export BUNDLE REPO

# --- the runner ----------------------------------------------------------------------------

say() { printf '%s\n' "$@" | tee -a "$TXT"; }

# True when step $1 is to run: smoke always, the others unless GPU_CHECK_STEPS leaves them out.
selected() { [[ $1 == smoke || -z $ONLY_STEPS || " $ONLY_STEPS " == *" $1 "* ]]; }

# Prints "max_s reserve_s" of step $1: its max_s, and the min_s of every selected step after it.
plan_of() {
  local entry name max min found=0 step_max=0 reserve=0
  for entry in "${STEP_PLAN[@]}"; do
    IFS=: read -r name max min <<<"$entry"
    if ((found)); then
      selected "$name" && reserve=$((reserve + min))
    elif [[ $name == "$1" ]]; then
      found=1 step_max=$max
    fi
  done
  echo "$step_max $reserve"
}

record() {  # NAME STATUS TOOK_S NOTE
  SUMMARY+=("$(printf '  %-14s %-8s %4ss  %s' "$1" "$2" "$3" "${4:0:90}")")
  [[ $2 == PASS || $2 == SKIPPED ]] || FAILED+=("$1")
}

# run_step NAME [--figures RE] [--key RE] [--fail-on RE] [--require RE] -- CMD...
# Runs CMD under the step's timeout with its output in $WORK/NAME.log (and $LOG); PASS when it
# exits 0, nothing matches --fail-on and something matches --require. Then prints the result and
# the lines matching --figures (default: the last 5) to the terminal and $TXT, and keeps the
# lines matching --key for the summary.
run_step() {
  local name=$1 figures="" key="" fail_on="" require=""
  shift
  while [[ $1 != -- ]]; do
    case $1 in
      --figures) figures=$2 ;;
      --key) key=$2 ;;
      --fail-on) fail_on=$2 ;;
      --require) require=$2 ;;
    esac
    shift 2
  done
  shift
  if ! selected "$name"; then
    say "== $name: SKIPPED (not in GPU_CHECK_STEPS)"
    record "$name" SKIPPED 0 "not in GPU_CHECK_STEPS"
    return 0
  fi
  local max_s reserve_s limit
  read -r max_s reserve_s < <(plan_of "$name")
  limit=$((BUDGET_S - SECONDS - reserve_s - 2))
  ((limit > max_s)) && limit=$max_s
  if ((limit < 5)); then
    say "== $name: NOT RUN (out of time)"
    record "$name" "NOT RUN" 0 "out of time"
    return 1
  fi
  local log=$WORK/$name.log start=$SECONDS rc
  timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1 </dev/null
  rc=$?
  local took=$((SECONDS - start)) status=PASS why=""
  if ((rc == 124 || rc == 137)); then
    status=FAIL why="timed out after ${limit}s"
  elif ((rc != 0)); then
    status=FAIL why="exit status $rc"
  elif [[ -n $fail_on ]] && grep -Eq "$fail_on" "$log"; then
    status=FAIL why=$(grep -Em1 "$fail_on" "$log")
  elif [[ -n $require ]] && ! grep -Eq "$require" "$log"; then
    status=FAIL why="no line matches $require"
  fi
  printf '\n===== %s (%s, %ss of %ss): %s\n' "$name" "$status" "$took" "$limit" "$*" >>"$LOG"
  cat "$log" >>"$LOG"
  say "== $name: $status (${took}s of ${limit}s)${why:+: $why}"
  if [[ -n $figures ]]; then
    grep -E "$figures" "$log" | head -n 60 | cut -c1-160 | tee -a "$TXT"
  else
    tail -n 5 "$log" | cut -c1-160 | tee -a "$TXT"
  fi
  local line
  if [[ -n $key ]]; then
    while IFS= read -r line; do
      FIGURES+=("  $name: ${line:0:140}")
    done < <(grep -E "$key" "$log" | head -n 3)
  fi
  record "$name" "$status" "$took" "$why"
  [[ $status == PASS ]]
}

skip_rest() {  # REASON: every step after smoke, as not run
  local entry
  for entry in "${STEP_PLAN[@]:1}"; do
    say "== ${entry%%:*}: SKIPPED ($1)"
    record "${entry%%:*}" SKIPPED 0 "$1"
  done
}

main() {
  local now
  now=$(date -u '+%Y-%m-%dT%H:%M:%SZ')
  say "kvserve gpu_check $now: bundle $BUNDLE, budget ${BUDGET_S}s, output $OUT_DIR"
  if [[ ! -f $BUNDLE/env.sh ]]; then
    say "no bundle at $BUNDLE: make it with scripts/gpu_bundle.sh and carry it (docs/gpu.md)"
    return 2
  fi
  chmod u+x "$BIN"/* 2>/dev/null  # in case a copy on the way dropped the modes
  # shellcheck disable=SC1091  # written by gpu_bundle.sh
  source "$BUNDLE/env.sh" >"$WORK/env.txt" 2>&1
  local no_gpu=""
  if ! command -v nvidia-smi >/dev/null; then
    no_gpu="nvidia-smi not found"
  elif [[ $(timeout 15 nvidia-smi -L 2>/dev/null) != *"GPU "* ]]; then
    no_gpu="nvidia-smi lists no GPU"
  fi
  [[ -n $no_gpu ]] && say "no GPU: $no_gpu"
  local skip_re=$SKIPPED_RE
  [[ -n $no_gpu ]] && skip_re=""  # without a GPU the one kernel skips, as it should
  local smoke_figures='^(commit|glibc|bundle|verify|NVIDIA|\[  (PASSED|FAILED|SKIPPED) )'
  smoke_figures+='|, [0-9]+ MiB'
  run_step smoke --figures "$smoke_figures" --key '^NVIDIA|, [0-9]+ MiB' --fail-on "$skip_re" -- \
    bash -c smoke
  if [[ -n $no_gpu && $FORCE != 1 ]]; then
    skip_rest "no GPU"
  else
    export KVSERVE_SOURCE_DIR=$REPO  # gpu_model_test's fixtures: this copy of the tree
    local gtest_figures='^\[  (PASSED|FAILED|SKIPPED) \]|^\[==========\] .* ran|Failure$|FAILED'
    run_step kernels --figures "$gtest_figures" --key '^\[  PASSED' --fail-on "$SKIPPED_RE" -- \
      "$BIN/cuda_kernels_test" --gtest_brief=1
    run_step nccl --figures "$gtest_figures|all-reduce" --key 'all-reduce' \
      --fail-on "$SKIPPED_RE" -- "$BIN/nccl_communicator_test"
    # shellcheck disable=SC2016  # expanded by the child bash
    run_step memcheck --figures "$gtest_figures|ERROR SUMMARY|Invalid|memcheck:|Error" \
      --key 'ERROR SUMMARY' --fail-on "$SKIPPED_RE" --require 'ERROR SUMMARY: 0 errors' -- \
      bash -c 'compute_sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 \
        "$BIN/cuda_kernels_test" --gtest_brief=1 --gtest_filter="$0"' "$MEMCHECK_FILTER"
    run_step gpu_bench --figures '.' --key 'HBM read bandwidth' --fail-on '^gpu_bench: ' \
      --require 'HBM read bandwidth' -- "$BIN/gpu_bench"
    run_step fidelity --figures "$gtest_figures|bf16_top1_agreement|prompt [0-9]" \
      --key 'bf16_top1_agreement|^\[  PASSED' --fail-on "$SKIPPED_RE" -- bash -c fidelity
    local bench_figures='^BM_|ERROR|rror|^device'
    run_step decode_graphs --figures "$bench_figures" --key '^BM_Decode' \
      --fail-on 'ERROR OCCURRED' --require '^BM_Decode/64/' -- bash -c 'decode 0'
    run_step decode_eager --figures "$bench_figures" --key '^BM_Decode' \
      --fail-on 'ERROR OCCURRED' --require '^BM_Decode/64/' -- bash -c 'decode 1'
    run_step worker --figures '^(worker|drain):|^concurrency|tokens/s|TTFT|inter-token|kvserve-' \
      --key '^concurrency|output tokens/s|^drain:' -- bash -c worker
    run_step profile --figures 'Duration|Throughput|Achieved Occupancy|Registers Per|Stall|==PROF==|rror' \
      --key 'Memory Throughput|Duration' -- bash -c profile
  fi

  say "" "===== summary: ${#SUMMARY[@]} steps in ${SECONDS}s of ${BUDGET_S}s =====" \
    "${SUMMARY[@]}"
  ((${#FIGURES[@]} > 0)) && say "figures:" "${FIGURES[@]}"
  if ((${#FAILED[@]} > 0)); then
    say "FAILED (${#FAILED[@]}): ${FAILED[*]}; whole output in $LOG"
    return 1
  fi
  if [[ -n $no_gpu ]]; then
    say "no GPU ($no_gpu): the bundle checks out here; the GPU steps did not run"
    return 0
  fi
  say "ALL PASSED"
}

mkdir -p "$OUT_DIR" || exit 1
: >"$TXT"
: >"$LOG"
main
