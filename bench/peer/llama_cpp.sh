#!/usr/bin/env bash
# Side-by-side with llama.cpp on this machine (not run in CI): builds llama.cpp's llama-bench
# from the source vendored in the PyPI sdist of llama-cpp-python (pinned) in a scratch folder
# outside the repository, then measures, in one run and on the same GGUF file and thread count:
#   llama-bench  pp128, pp512 (prefill) and tg128 (batch-1 decode), REPS (3) repetitions
#   kvserve      the same through the serving engine (build/tools/kvserve-generate: a random
#                prompt of 128 / 512 token ids; 128 tokens decoded after a 1-token prompt,
#                ignore_eos), REPS runs each, in the weights' stored form (--dtype=auto) and in f32
# alternated rep by rep, and prints tokens/s for both and the ratios kvserve / llama.cpp
# (medians), with the CPU named, and each engine's batch-1 decode as a fraction of the
# memory-bandwidth bound (the read rate BUILD_DIR/bench/kernels_bench measures in the same run
# over the file's bytes per token).
#
#   bench/peer/llama_cpp.sh [BUILD_DIR]           # default: build
# Env: PEER_DIR (/tmp/kvserve-peer: the sdist, llama.cpp's build), THREADS (2), MODEL (the
#      default model's cached path), REPS (3), COMPETE (0: busy-loop processes beside the run).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build}
PEER_DIR=${PEER_DIR:-/tmp/kvserve-peer}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
MODEL=${MODEL:-${KVSERVE_CACHE_DIR:-$HOME/.cache/kvserve}/models/SmolLM2-135M-Instruct.Q4_1.gguf}
GENERATE=$BUILD_DIR/tools/kvserve-generate
[ -x "$GENERATE" ] || { echo "peer: $GENERATE is missing (cmake --build $BUILD_DIR)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "peer: no model at '$MODEL' (set MODEL=...)" >&2; exit 1; }

source bench/peer/llama_cpp_build.sh
build_llama_cpp llama-bench
BENCH=$LLAMA_CPP_BUILD/bin/llama-bench

# COMPETE=N: N CPU-bound processes (busy loops) run beside both engines for the whole run, the
# figure a shared node gives.
COMPETE=${COMPETE:-0}
competitors=()
for _ in $(seq "$COMPETE"); do
  python3 -c 'while True: pass' &
  competitors+=($!)
done
trap '[ ${#competitors[@]} -eq 0 ] || kill "${competitors[@]}" 2>/dev/null' EXIT

cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "# $(date -u +%FT%TZ), $cpu, $(nproc) CPUs, $THREADS threads, $(basename "$MODEL")," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg), $COMPETE competing CPU-bound processes"
export OPENBLAS_NUM_THREADS=1
out=$PEER_DIR/results.txt
: >"$out"
# Prefill: a random prompt of 128 / 512 ids (one token decoded); decode: llama-bench's tg128
# starts from an empty context, so here 128 tokens after a 1-token prompt.
kvserve() {  # dtype, prompt tokens, tokens to generate
  "$GENERATE" --model="$MODEL" --dtype="$1" --threads="$THREADS" --prompt_tokens="$2" \
    --max_tokens="$3" --ignore_eos 2>&1
}
# Repetitions alternate between the engines (llama.cpp, kvserve as stored, kvserve f32, ...), so
# drift on a shared machine hits all of them.
for _ in $(seq "$REPS"); do
  "$BENCH" -m "$MODEL" -t "$THREADS" -p 128,512 -n 128 -r 1 -o json 2>/dev/null |
    python3 -c 'import json, sys
for r in json.load(sys.stdin):
    test = "pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"]
    print("llama.cpp", test, r["avg_ts"])' >>"$out"
  for dtype in auto float32; do
    for prompt in 128 512; do
      kvserve "$dtype" "$prompt" 1 | sed -n "s/.*prompt: $prompt tokens in [0-9.]* s = \([0-9.]*\) tokens\/s.*/kvserve-$dtype pp$prompt \1/p" >>"$out"
    done
    kvserve "$dtype" 1 129 | sed -n "s/.*decode: [0-9]* tokens in [0-9.]* s = \([0-9.]*\) tokens\/s.*/kvserve-$dtype tg128 \1/p" >>"$out"
  done
done
# The memory-bandwidth bound of batch-1 decode: every weight byte read once per token (the file's
# size; the KV of a 129-token context is <1% of it) at the best read rate measured now.
KERNELS_BENCH=$BUILD_DIR/bench/kernels_bench
if [ -x "$KERNELS_BENCH" ]; then
  "$KERNELS_BENCH" --benchmark_filter='BM_MemoryReadBandwidth' --benchmark_min_time=0.5 \
    --benchmark_format=json 2>/dev/null | python3 -c 'import json, sys
print("bandwidth read", max(b["bytes_per_second"] for b in json.load(sys.stdin)["benchmarks"]))' >>"$out"
fi
python3 - "$out" "$(stat -c %s "$MODEL")" <<'PY'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    who, test, value = line.split()
    runs[(who, test)].append(float(value))
med = {key: statistics.median(values) for key, values in runs.items()}
print(f"{'test':6s} {'llama.cpp':>10s} {'kvserve':>10s} {'ratio':>6s} {'kvserve f32':>12s} {'ratio':>6s}")
for test in ("pp128", "pp512", "tg128"):
    base = med.get(("llama.cpp", test))
    ours = med.get(("kvserve-auto", test))
    f32 = med.get(("kvserve-float32", test))
    print(f"{test:6s} {base:10.1f} {ours:10.1f} {ours / base:6.2f} {f32:12.1f} {f32 / base:6.2f}")
if ("bandwidth", "read") in med:
    bandwidth, model_bytes = med[("bandwidth", "read")], int(sys.argv[2])
    bound = bandwidth / model_bytes
    print(f"tg128 bound: {bandwidth / 1e9:.1f} GB/s read / {model_bytes / 1e6:.1f} MB per token ="
          f" {bound:.1f} tok/s; llama.cpp {med[('llama.cpp', 'tg128')] / bound:.2f} of it,"
          f" kvserve {med[('kvserve-auto', 'tg128')] / bound:.2f}")
PY
