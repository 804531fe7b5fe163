#!/usr/bin/env bash
# One-shot check of the CUDA backend on a machine with an NVIDIA GPU (written for one H200, 16
# cores, no network). Runs in well under 8 minutes:
#   1. preflight: prints the GPU, the toolchain and which build dependencies are missing;
#   2. configures build-gpu (Release, KVSERVE_CUDA=ON, KVSERVE_BENCH=ON) and builds only the
#      gpu-labelled test binaries and gpu_bench;
#   3. ctest -L gpu (every CUDA kernel against the CPU backend; the NCCL communicator on a
#      one-GPU group), gpu_bench (bandwidth, attention, Linear figures), the NCCL all-reduce time;
#   4. model_checks(): the model-level hook (gpu_model_test, a worker on the GPU under load).
# Everything printed also goes to one file: $GPU_CHECK_OUTPUT, else $OUT/gpu_check.txt when
# $OUT is set, else build-gpu/gpu_check.txt. Exits non-zero when any step failed (a step that
# did not run counts as failed), after running every step it can.
#   scripts/gpu_check.sh
# Environment: GPU_CHECK_JOBS (default 16), GPU_CHECK_BUDGET_S (default 470),
# GPU_CHECK_SKIP_MODEL=1 (skip model_checks), KVSERVE_MODEL (model file for model_checks).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

BUILD_DIR=build-gpu
JOBS=${GPU_CHECK_JOBS:-16}
BUDGET_S=${GPU_CHECK_BUDGET_S:-470}
if [[ -n "${GPU_CHECK_OUTPUT:-}" ]]; then
  OUT_FILE=$GPU_CHECK_OUTPUT
elif [[ -n "${OUT:-}" ]]; then
  OUT_FILE=$OUT/gpu_check.txt
else
  OUT_FILE=$BUILD_DIR/gpu_check.txt
fi
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"

FAILURES=()
SUMMARY=()
GPU_TESTS=""

# --- helpers -------------------------------------------------------------------------------

section() { printf '\n===== %s =====\n' "$*"; }
fail() {
  FAILURES+=("$*")
  printf 'FAIL: %s\n' "$*"
}
# Seconds left of the budget, minus a margin for the summary.
remaining() { echo $((BUDGET_S - SECONDS - 5)); }
# run_step NAME MAX_SECONDS CMD...: runs CMD under a timeout of min(MAX_SECONDS, remaining),
# records PASS / FAIL with its duration. With STEP_LOG set, the output is also copied there.
# (Never call it inside a pipeline: it records into this shell's arrays.)
run_step() {
  local name=$1 max_s=$2
  shift 2
  local left
  left=$(remaining)
  if ((left < 10)); then
    fail "$name: not run, out of time"
    SUMMARY+=("$name: NOT RUN (out of time)")
    return 1
  fi
  local limit=$((max_s < left ? max_s : left))
  local start=$SECONDS
  printf -- '--- %s (limit %ss): %s\n' "$name" "$limit" "$*"
  local rc
  if [[ -n "${STEP_LOG:-}" ]]; then
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$STEP_LOG"
    rc=${PIPESTATUS[0]}
  else
    timeout --kill-after=10 "$limit" "$@"
    rc=$?
  fi
  local took=$((SECONDS - start))
  if ((rc == 0)); then
    SUMMARY+=("$name: PASS (${took}s)")
    return 0
  fi
  if ((rc == 124 || rc == 137)); then
    fail "$name: timed out after ${limit}s"
  else
    fail "$name: exit code $rc"
  fi
  SUMMARY+=("$name: FAIL (${took}s, rc $rc)")
  return 1
}
# True when the build has a target of that name.
has_target() { ninja -C "$BUILD_DIR" -t targets all 2>/dev/null | grep "^$1:" >/dev/null; }
# The default model: $KVSERVE_MODEL, else $KVSERVE_CACHE_DIR (default ~/.cache/kvserve)/models/.
default_model() {
  if [[ -n "${KVSERVE_MODEL:-}" ]]; then
    echo "$KVSERVE_MODEL"
  else
    echo "${KVSERVE_CACHE_DIR:-${HOME:-/tmp}/.cache/kvserve}/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  fi
}

# --- 1. preflight --------------------------------------------------------------------------

preflight() {
  section "preflight"
  date -u '+%Y-%m-%dT%H:%M:%SZ'
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(git branch --show-current 2>/dev/null)"
  echo "cores: $(nproc), jobs: $JOBS, budget: ${BUDGET_S}s, output: $OUT_FILE"
  local missing=()
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
      --format=csv || missing+=("a working nvidia-smi / driver")
  else
    missing+=("nvidia-smi (no NVIDIA driver?)")
  fi
  if command -v nvcc >/dev/null; then
    nvcc --version | tail -2
  else
    missing+=("nvcc (CUDA toolkit at $CUDA_HOME)")
  fi
  local tool
  for tool in cmake ninja c++ pkg-config protoc grpc_cpp_plugin; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  local pc
  for pc in openblas libxxhash; do
    pkg-config --exists "$pc" 2>/dev/null || missing+=("pkg-config module $pc")
  done
  local lib
  for lib in libcudart.so libcublas.so libnccl.so; do
    compgen -G "$CUDA_HOME/lib*/$lib*" >/dev/null || compgen -G "/usr/lib/x86_64-linux-gnu/$lib*" \
      >/dev/null || missing+=("$lib")
  done
  local pkg
  for pkg in absl gRPC GTest benchmark prometheus-cpp nlohmann_json Gloo; do
    if [[ -z "$(find /usr/lib /usr/share /usr/local/lib /usr/local/share -maxdepth 5 \
      \( -iname "${pkg}Config.cmake" -o -iname "${pkg}-config.cmake" \) -print -quit \
      2>/dev/null)" ]]; then
      missing+=("CMake package $pkg")
    fi
  done
  local model
  model=$(default_model)
  if [[ -f "$model" ]]; then
    echo "model: $model ($(du -h "$model" | cut -f1))"
  else
    echo "model: $model is missing (model_checks will fail; set KVSERVE_MODEL)"
  fi
  if ((${#missing[@]} > 0)); then
    for tool in "${missing[@]}"; do echo "MISSING: $tool"; done
    fail "preflight: missing ${#missing[@]} prerequisite(s): ${missing[*]}"
    SUMMARY+=("preflight: FAIL (missing: ${missing[*]})")
  else
    echo "all prerequisites found"
    SUMMARY+=("preflight: PASS")
  fi
}

# --- 2. configure and build ----------------------------------------------------------------

configure() {
  section "configure $BUILD_DIR"
  run_step configure 120 cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKVSERVE_CUDA=ON -DKVSERVE_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES=90 || return 1
  # Test names are target names (kvserve_add_test); gpu_model_test is model_checks' business.
  GPU_TESTS=$(ctest --test-dir "$BUILD_DIR" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *//p')
  echo "gpu tests: $(echo "$GPU_TESTS" | tr '\n' ' ')"
}

build_kernel_targets() {
  section "build (kernel tests, gpu_bench)"
  local targets
  targets=$(echo "$GPU_TESTS" | grep -vx gpu_model_test | tr '\n' ' ')
  # shellcheck disable=SC2086  # one word per target
  run_step build 300 ninja -C "$BUILD_DIR" -j "$JOBS" $targets gpu_bench
}

# --- 3. kernel tests and benchmark ---------------------------------------------------------

kernel_tests() {
  section "ctest -L gpu (kernels, NCCL communicator)"
  local log=$BUILD_DIR/ctest_gpu.log
  STEP_LOG=$log run_step ctest_gpu 240 ctest --test-dir "$BUILD_DIR" -L gpu \
    -E '^gpu_model_test$' --output-on-failure --timeout 200
  local rc=$?
  # On this machine a skipped GPU test is a failure: the device was not visible to CUDA.
  if grep -q '(Skipped)\|\[  SKIPPED \]' "$log"; then
    fail "ctest_gpu: tests were skipped (no CUDA device visible to the tests?)"
    SUMMARY[-1]="ctest_gpu: FAIL (skipped)"
    return 1
  fi
  return "$rc"
}

benchmark() {
  section "gpu_bench"
  local log=$BUILD_DIR/gpu_bench.log
  STEP_LOG=$log run_step gpu_bench 180 "$BUILD_DIR/bench/gpu_bench" || return 1
  if grep -q 'no CUDA device' "$log"; then
    fail "gpu_bench: no CUDA device, nothing measured"
    SUMMARY[-1]="gpu_bench: FAIL (no device)"
    return 1
  fi
}

# The NCCL communicator's figure: a one-GPU group's all-reduce at the default model's hidden size
# (576 x 1, 64, 512 floats), issued and waited for (nccl_communicator_test prints it).
comm_figures() {
  section "NCCL all-reduce (one-GPU group)"
  local test=$BUILD_DIR/tests/comm/nccl_communicator_test
  if [[ ! -x "$test" ]]; then
    fail "comm_figures: $test not built"
    return 1
  fi
  run_step nccl_allreduce 60 "$test" --gtest_filter='*ReportsTheAllReduceTime*'
}

# --- 4. model-level checks (hook for the integrator) ----------------------------------------
#
# model_checks: what the model runner on the GPU must pass. Expected pieces (the integrator adds
# them; until then each missing piece is reported as a failure with what to add):
#  (1) gpu_model_test: a gtest binary registered with kvserve_add_test(... LABELS gpu). On the
#      default model it runs the GPU with f32 weights and f32 KV against the CPU backend's
#      greedy tokens (identical sequences expected), then bf16 weights + bf16 KV and checks the
#      top-1 agreement rate against the CPU. It skips without a device (so it also lives in the
#      CPU CI); here a skip is a failure.
#  (2) kvserve-worker --device=cuda serving the default model on 127.0.0.1:<free port>, driven
#      for a short run by kvserve-loadgen (64 requests, 16 streams, prompts 128-512 tokens,
#      64-128 output tokens); the worker must print "kvserve-worker ready", the load must finish
#      with exit code 0, and the worker must drain on SIGTERM.
#  (3) model_bench on a synthetic Llama-3-8B (bf16 weights and KV) through the serving engine:
#      batch-1 and batch-64 decode steps with CUDA graphs and eagerly; its weights_GB/s counter
#      against gpu_bench's measured HBM bandwidth is the decode efficiency (goal >= 0.75 at
#      batch 1).
# The worker sizes its KV pool itself (--kv_memory_bytes unset: a profiling step, then
# --gpu_memory_utilization of the device) and prints the block count it chose.
MODEL_TARGETS=(gpu_model_test kvserve-worker kvserve-loadgen model_bench)
WORKER_ARGS=(--device=cuda --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0
  --gpu_memory_utilization=0.85 --max_num_seqs=64 --max_num_batched_tokens=2048)
LOADGEN_ARGS=(--concurrency=16 --num_requests=64 --prompt_len=128:512 --output_len=64:128
  --seed=1)

model_checks() {
  section "model_checks"
  local model
  model=$(default_model)
  [[ -f "$model" ]] || fail "model_checks: model file $model is missing (set KVSERVE_MODEL)"

  local targets=() target
  for target in "${MODEL_TARGETS[@]}"; do
    if has_target "$target"; then
      targets+=("$target")
    else
      fail "model_checks: build target $target does not exist yet (integrator: add it)"
    fi
  done
  if ((${#targets[@]} > 0)); then
    run_step build_model 300 ninja -C "$BUILD_DIR" -j "$JOBS" "${targets[@]}" || return 1
  fi

  # (1) GPU vs CPU tokens on the default model.
  if grep -qx gpu_model_test <<<"$GPU_TESTS"; then
    local log=$BUILD_DIR/ctest_model.log
    KVSERVE_MODEL=$model STEP_LOG=$log run_step gpu_model_test 180 ctest \
      --test-dir "$BUILD_DIR" -R '^gpu_model_test$' --output-on-failure --timeout 170
    if grep -q '(Skipped)\|\[  SKIPPED \]' "$log"; then
      fail "gpu_model_test: skipped (no device, or the model file was not found)"
      SUMMARY[-1]="gpu_model_test: FAIL (skipped)"
    fi
  else
    fail "model_checks: no ctest test gpu_model_test with label gpu (integrator: add it)"
  fi

  # (2) The worker on the GPU under a short load.
  local worker=$BUILD_DIR/worker/kvserve-worker loadgen=$BUILD_DIR/bench/kvserve-loadgen
  if [[ ! -x "$worker" || ! -x "$loadgen" ]]; then
    fail "model_checks: $worker or $loadgen not built; worker load test not run"
    return 1
  fi
  if (($(remaining) < 60)); then
    fail "model_checks: worker load test not run, out of time"
    return 1
  fi
  local worker_log=$BUILD_DIR/worker_gpu.log
  echo "--- worker: $worker --model=$model ${WORKER_ARGS[*]}"
  "$worker" --model="$model" "${WORKER_ARGS[@]}" >"$worker_log" 2>&1 &
  local worker_pid=$!
  local port="" waited=0
  while ((waited < 120)) && kill -0 "$worker_pid" 2>/dev/null; do
    if grep -q 'kvserve-worker ready' "$worker_log"; then
      port=$(sed -n 's/.*grpc_port=\([0-9]*\).*/\1/p' "$worker_log" | head -1)
      break
    fi
    sleep 1
    ((waited += 1))
  done
  if [[ -z "$port" ]]; then
    fail "model_checks: worker not ready after ${waited}s"
    tail -30 "$worker_log"
    kill -TERM "$worker_pid" 2>/dev/null
    wait "$worker_pid" 2>/dev/null
    return 1
  fi
  echo "worker ready on port $port after ${waited}s"
  run_step worker_load 150 "$loadgen" --target="127.0.0.1:$port" "${LOADGEN_ARGS[@]}"
  kill -TERM "$worker_pid" 2>/dev/null
  local drained=0
  for _ in $(seq 1 40); do
    if ! kill -0 "$worker_pid" 2>/dev/null; then
      drained=1
      break
    fi
    sleep 1
  done
  if ((drained == 0)); then
    kill -KILL "$worker_pid" 2>/dev/null
    fail "model_checks: worker did not exit within 40s of SIGTERM"
  fi
  wait "$worker_pid" 2>/dev/null
  local worker_rc=$?
  ((drained == 0 || worker_rc == 0)) || fail "model_checks: worker exited with code $worker_rc"
  echo "--- worker log (tail)"
  tail -20 "$worker_log"

  # (3) End-to-end decode on a synthetic Llama-3-8B, with and without CUDA graphs.
  local bench=$BUILD_DIR/bench/model_bench eager
  if [[ ! -x "$bench" ]]; then
    fail "model_checks: $bench not built; decode figures not taken"
    return 1
  fi
  for eager in 0 1; do
    if (($(remaining) < 90)); then
      fail "model_checks: llama3-8b decode (enforce_eager=$eager) not run, out of time"
      continue
    fi
    KVSERVE_MODEL=synthetic:llama3-8b KVSERVE_BENCH_DEVICE=cuda KVSERVE_BENCH_DTYPE=bfloat16 \
      KVSERVE_BENCH_ENFORCE_EAGER=$eager run_step "llama3_8b_decode_eager$eager" 240 "$bench" \
      --benchmark_filter='BM_Decode/(1|64)$' --benchmark_min_time=0.5
  done
}

# --- main ----------------------------------------------------------------------------------

main() {
  preflight
  if ! command -v nvcc >/dev/null || ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
    fail "cannot build without nvcc, cmake and ninja"
  elif configure; then
    if build_kernel_targets; then
      kernel_tests
      benchmark
      comm_figures
    fi
    if [[ "${GPU_CHECK_SKIP_MODEL:-0}" == 1 ]]; then
      echo "model_checks skipped (GPU_CHECK_SKIP_MODEL=1)"
      SUMMARY+=("model_checks: SKIPPED by request")
    else
      model_checks
    fi
  fi

  section "summary (${SECONDS}s)"
  local line
  for line in "${SUMMARY[@]}"; do echo "  $line"; done
  if ((${#FAILURES[@]} > 0)); then
    echo "FAILED (${#FAILURES[@]}):"
    for line in "${FAILURES[@]}"; do echo "  - $line"; done
    return 1
  fi
  echo "ALL PASSED"
}

mkdir -p "$(dirname "$OUT_FILE")" "$BUILD_DIR"
main 2>&1 | tee "$OUT_FILE"
rc=${PIPESTATUS[0]}
echo "output written to $OUT_FILE"
exit "$rc"
