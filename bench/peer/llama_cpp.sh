#!/usr/bin/env bash
# Side-by-side with llama.cpp on this machine (not run in CI): builds llama.cpp's llama-bench
# from the source vendored in the PyPI sdist of llama-cpp-python (pinned) in a scratch folder
# outside the repository, then measures, in one run and on the same GGUF file and thread count:
#   llama-bench  pp128, pp512, pp2048 (prefill; PROMPTS) and tg128 (batch-1 decode), REPS (3)
#                repetitions, on the file and on llama.cpp's f32 and bf16 GGUFs of it (F32_MODEL,
#                BF16_MODEL: `llama-quantize --allow-requantize` of the file, made here once)
#   kvserve      the same through the serving engine (build/tools/kvserve-generate: a random
#                prompt of 128 / 512 / 2048 token ids; 128 tokens decoded after a 1-token
#                prompt, ignore_eos), REPS runs each, in the weights' stored types
#                (--dtype=auto: packed on AVX-512, and with KVSERVE_CPU_PACK=0 the GGUF rows as
#                stored) and in f32, and the bf16 GGUF in its stored type
# alternated rep by rep, and prints tokens/s for all and the ratios (medians): kvserve from the
# file's blocks against llama.cpp's best configuration (its run on the file or on the f32 GGUF),
# kvserve f32 against llama.cpp f32, kvserve on the bf16 GGUF against llama.cpp on it; with the
# CPU named, and each engine's batch-1 decode as a fraction of
# the memory-bandwidth bound (the read rate BUILD_DIR/bench/kernels_bench measures in the same
# run over the file's bytes per token).
#
#   bench/peer/llama_cpp.sh [BUILD_DIR]           # default: build
# Env: PEER_DIR (/tmp/kvserve-peer: the sdist, llama.cpp's build), THREADS (2), MODEL (the
#      default model's cached path), REPS (3), COMPETE (0: busy-loop processes beside the run),
#      F32_MODEL (PEER_DIR/SmolLM2-135M-Instruct.F32.gguf), BF16_MODEL (.BF16.gguf): made
#      from MODEL when missing (bench/peer/fidelity.sh makes the same f32 file).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build}
PEER_DIR=${PEER_DIR:-/tmp/kvserve-peer}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
PROMPTS=${PROMPTS:-128 512 2048}  # prefill lengths, in tokens
MODEL=${MODEL:-${KVSERVE_CACHE_DIR:-$HOME/.cache/kvserve}/models/SmolLM2-135M-Instruct.Q4_1.gguf}
F32_MODEL=${F32_MODEL:-$PEER_DIR/SmolLM2-135M-Instruct.F32.gguf}
BF16_MODEL=${BF16_MODEL:-$PEER_DIR/SmolLM2-135M-Instruct.BF16.gguf}
GENERATE=$BUILD_DIR/tools/kvserve-generate
[ -x "$GENERATE" ] || { echo "peer: $GENERATE is missing (cmake --build $BUILD_DIR)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "peer: no model at '$MODEL' (set MODEL=...)" >&2; exit 1; }

source bench/peer/llama_cpp_build.sh
build_llama_cpp llama-bench llama-quantize
BENCH=$LLAMA_CPP_BUILD/bin/llama-bench
for pair in "$F32_MODEL F32" "$BF16_MODEL BF16"; do
  read -r file type <<<"$pair"
  if [ ! -f "$file" ]; then
    "$LLAMA_CPP_BUILD/bin/llama-quantize" --allow-requantize "$MODEL" "$file.tmp" "$type" \
      >/dev/null 2>&1
    mv "$file.tmp" "$file"
  fi
done

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
# kvserve's f32 prefill ran OpenBLAS SGEMM (T > 16) on OpenBLAS's own threads until 2026-12-05
# (and still does on a CPU without AVX2): THREADS of them, as every other product gets.
export OPENBLAS_NUM_THREADS=$THREADS
out=$PEER_DIR/results.txt
: >"$out"
# Prefill: a random prompt of each PROMPTS length (one token decoded); decode: llama-bench's tg128
# starts from an empty context, so here 128 tokens after a 1-token prompt.
kvserve() {  # model file, dtype, prompt tokens, tokens to generate
  "$GENERATE" --model="$1" --dtype="$2" --num_threads="$THREADS" --prompt_tokens="$3" \
    --max_tokens="$4" --ignore_eos 2>&1
}
llama_bench() {  # model file, label
  "$BENCH" -m "$1" -t "$THREADS" -p "${PROMPTS// /,}" -n 128 -r 1 -o json 2>/dev/null |
    python3 -c 'import json, sys
for r in json.load(sys.stdin):
    test = "pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"]
    print(sys.argv[1], test, r["avg_ts"])' "$2" >>"$out"
}
# Repetitions alternate between the engines (llama.cpp, kvserve as stored, kvserve f32, ...), so
# drift on a shared machine hits all of them.
for _ in $(seq "$REPS"); do
  llama_bench "$MODEL" llama.cpp
  llama_bench "$F32_MODEL" llama.cpp-f32
  llama_bench "$BF16_MODEL" llama.cpp-bf16
  for config in auto rows float32 bf16; do
    file=$MODEL dtype=$config pack=1
    [ "$config" = rows ] && dtype=auto pack=0
    [ "$config" = bf16 ] && file=$BF16_MODEL dtype=auto
    for prompt in $PROMPTS; do
      KVSERVE_CPU_PACK=$pack kvserve "$file" "$dtype" "$prompt" 1 | sed -n "s/.*prompt: $prompt tokens in [0-9.]* s = \([0-9.]*\) tokens\/s.*/kvserve-$config pp$prompt \1/p" >>"$out"
    done
    KVSERVE_CPU_PACK=$pack kvserve "$file" "$dtype" 1 129 | sed -n "s/.*decode: [0-9]* tokens in [0-9.]* s = \([0-9.]*\) tokens\/s.*/kvserve-$config tg128 \1/p" >>"$out"
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
python3 - "$out" "$(stat -c %s "$MODEL")" "$PROMPTS" <<'PY'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    who, test, value = line.split()
    runs[(who, test)].append(float(value))
med = {key: statistics.median(values) for key, values in runs.items()}
# Each kvserve configuration against its llama.cpp counterpart: from the file's blocks against
# llama.cpp's best (the file or its f32 GGUF), f32 against f32, the bf16 GGUF against the same.
peers = ["llama.cpp", "llama.cpp-f32", "llama.cpp-bf16"]
ours = {"kvserve-auto": peers[:2], "kvserve-rows": peers[:2], "kvserve-float32": peers[1:2],
        "kvserve-bf16": peers[2:]}
print(f"{'test':6s}" + "".join(f"{w:>15s}" for w in peers) +
      "".join(f"{w:>16s} {'ratio':>6s}" for w in ours))
for test in [f"pp{n}" for n in sys.argv[3].split()] + ["tg128"]:
    row = f"{test:6s}" + "".join(f"{med[(w, test)]:15.1f}" for w in peers)
    for w, against in ours.items():
        best = max(med[(peer, test)] for peer in against)
        row += f"{med[(w, test)]:16.1f} {med[(w, test)] / best:6.2f}"
    print(row)
if ("bandwidth", "read") in med:
    bandwidth, model_bytes = med[("bandwidth", "read")], int(sys.argv[2])
    bound = bandwidth / model_bytes
    print(f"tg128 bound: {bandwidth / 1e9:.1f} GB/s read / {model_bytes / 1e6:.1f} MB per token ="
          f" {bound:.1f} tok/s; llama.cpp {med[('llama.cpp', 'tg128')] / bound:.2f} of it,"
          f" kvserve {med[('kvserve-auto', 'tg128')] / bound:.2f}")
PY
