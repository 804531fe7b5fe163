#!/usr/bin/env bash
# Fidelity beside llama.cpp (not run in CI): how far each engine's Q4_1 path is from its own
# F32 path, teacher-forced over the same token ids, measured by one program with one definition.
#
#   bench/peer/fidelity.sh [BUILD_DIR]            # default: build
#
# Route: every logit of every position, not llama-perplexity. A small program against llama.h
# (bench/peer/llama_logits.cc, compiled here against the llama.cpp build that
# bench/peer/llama_cpp.sh makes, the same pinned source) writes llama.cpp's full logit rows;
# build/bench/fidelity_bench computes kvserve's in process and reads llama.cpp's files, and
# applies the same code to both (KLD(p_f32 || p_quant), per-row relative error, top-1
# agreement, RMS dp of the next token, PPL; definitions in bench/fidelity_bench.cc). So both
# engines are scored on exactly the same positions, from exactly the same ids, with no
# llama-perplexity details in between (its n_ctx/2 scored half, its BOS, its uint16-rounded
# base log-probabilities).
#
# Tokens, one id file fed to both engines: the prompts of tests/model/fixtures/reference_*.json
# (their committed prompt_ids, one sequence each, 118 tokens; checked against llama.cpp's
# tokenizer on their prompt_text) and bench/peer/fidelity_text.txt (prose, a list and a little
# Python, written for this; 1,141 tokens) tokenized by llama-tokenize and cut into sequences of
# CTX tokens. No BOS is added (the GGUF says add_bos_token = false). Every sequence starts at
# position 0 in a fresh cache; both engines run it in steps of CHUNK tokens; every position is
# scored.
#
# Configurations: reference = the all-f32 path of each engine (kvserve: the GGUF's blocks
# dequantized to fp32, fp32 KV; llama.cpp: the same file converted with
# `llama-quantize --allow-requantize <q4_1> <f32> F32`, which dequantizes, F32 KV and flash
# attention off, since with it on llama.cpp casts K and V to f16 before attending).
# Quantized = each engine's default serving path: kvserve --dtype=auto on the CPU (the stored
# Q4_1/Q8_0 blocks, int8 activations) with a KV cache of KV_DTYPE; llama.cpp Q4_1 as it runs
# by default (f16 KV, flash attention auto = on), and, like-for-like with an f32 KV, with f32
# KV and flash attention off. The PPL of the two f32 references agree (a check that both
# engines score the same positions of the same ids). That kvserve's f32 path equals a float64
# reference is tests/model/reference_test.cc's LogitsAndGreedyContinuationMatchFloat64Reference
# (relative error <= 1e-3, greedy tokens equal, on the four fixture prompts).
#
# Env: PEER_DIR (/tmp/kvserve-peer), THREADS (2), MODEL (the default model's cached path),
# KV_DTYPE (float16, the CPU worker's default for --dtype=auto; or float32, bfloat16), CTX (256),
# CHUNK (128).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build}
PEER_DIR=${PEER_DIR:-/tmp/kvserve-peer}
THREADS=${THREADS:-2}
KV_DTYPE=${KV_DTYPE:-float16}
CTX=${CTX:-256}
CHUNK=${CHUNK:-128}
MODEL=${MODEL:-${KVSERVE_CACHE_DIR:-$HOME/.cache/kvserve}/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$MODEL" ] || { echo "fidelity: no model at '$MODEL' (set MODEL=...)" >&2; exit 1; }
command_line="bench/peer/fidelity.sh${*:+ $*}"

cmake --build "$BUILD_DIR" -j 2 --target fidelity_bench >/dev/null
FIDELITY=$BUILD_DIR/bench/fidelity_bench

# llama.cpp: the pinned source and build folder of bench/peer/llama_cpp.sh, plus the tools
# needed here.
source bench/peer/llama_cpp_build.sh
build_llama_cpp llama llama-quantize llama-tokenize
src=$LLAMA_CPP_SRC
build=$LLAMA_CPP_BUILD
logits_tool=$PEER_DIR/llama_logits
if [ ! -x "$logits_tool" ] || [ bench/peer/llama_logits.cc -nt "$logits_tool" ]; then
  g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" bench/peer/llama_logits.cc \
    -L"$build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin" -o "$logits_tool"
fi
F32_MODEL=$PEER_DIR/$(basename "$MODEL" .Q4_1.gguf).F32.gguf
if [ ! -f "$F32_MODEL" ]; then
  "$build/bin/llama-quantize" --allow-requantize "$MODEL" "$F32_MODEL.tmp" F32 >/dev/null 2>&1
  mv "$F32_MODEL.tmp" "$F32_MODEL"
fi

work=$PEER_DIR/fidelity
mkdir -p "$work"
tokens=$work/tokens.txt
python3 - "$work" <<'PY'  # the fixtures' prompts: their text and their committed ids
import glob, json, os, sys
for path in sorted(glob.glob("tests/model/fixtures/reference_*.json")):
    fixture = json.load(open(path))
    base = os.path.join(sys.argv[1], "prompt_" + fixture["name"])
    open(base + ".txt", "w").write(fixture["prompt_text"])
    open(base + ".ids", "w").write(" ".join(map(str, fixture["prompt_ids"])))
PY
tokenize() {
  "$build/bin/llama-tokenize" -m "$MODEL" -f "$1" --ids --no-bos --log-disable 2>/dev/null |
    tr -d '[],'
}
tokenizers="llama.cpp's ids equal the fixtures' prompt_ids"
: >"$tokens"
for prompt in "$work"/prompt_*.txt; do
  ids=$(cat "${prompt%.txt}.ids")
  [ "$(tokenize "$prompt")" = "$ids" ] ||
    tokenizers="llama.cpp tokenizes $(basename "$prompt") differently (the fixture's ids are used)"
  echo "$ids" >>"$tokens"
done
tokenize bench/peer/fidelity_text.txt | tr -s ' ' '\n' | xargs -n "$CTX" echo >>"$tokens"

export OPENBLAS_NUM_THREADS=1
results=$work/results.txt
"$FIDELITY" --tokens="$tokens" --kv_cache_dtype="$KV_DTYPE" --threads="$THREADS" \
  --chunk_tokens="$CHUNK" --model="$MODEL" | sed -n "s/^fidelity: /kvserve $KV_DTYPE /p" >"$results"
"$logits_tool" "$F32_MODEL" "$tokens" "$work/f32.logits" f32 off "$THREADS" "$CHUNK"
for config in "f16 auto" "f32 off"; do
  read -r kv flash_attn <<<"$config"
  "$logits_tool" "$MODEL" "$tokens" "$work/q4_1.logits" "$kv" "$flash_attn" "$THREADS" "$CHUNK"
  "$FIDELITY" --tokens="$tokens" --reference_logits="$work/f32.logits" \
    --test_logits="$work/q4_1.logits" |
    sed -n "s/^fidelity: /llama.cpp $kv-$flash_attn /p" >>"$results"
done
rm -f "$work"/*.logits

cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "# $(date -u +%FT%TZ), $cpu, $(nproc) CPUs, $THREADS threads, $(basename "$MODEL")," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# command: $command_line (KV_DTYPE=$KV_DTYPE CTX=$CTX CHUNK=$CHUNK); tokens:" \
  "$(wc -w <"$tokens") in $(wc -l <"$tokens") sequences; $tokenizers"
python3 - "$results" <<'PY'
import sys
rows = []
for line in open(sys.argv[1]):
    engine, kv, *fields = line.split()
    rows.append((engine, kv, {k: float(v) for k, v in (f.split("=") for f in fields)}))
label = {
    "kvserve": lambda kv: f"kvserve --dtype=auto (stored blocks, int8 act.), {kv} KV vs f32",
    "llama.cpp": lambda kv: "llama.cpp Q4_1, {} KV, flash attn {} vs F32".format(*kv.split("-")),
}
print("| engine: quantized vs f32 | positions | mean KLD | max KLD | top-1 agreement "
      "| rel err mean | rel err max | RMS dp | PPL f32 / quant |")
print("|---|---|---|---|---|---|---|---|---|")
for engine, kv, m in rows:
    print(f"| {label[engine](kv)} | {m['rows']:.0f} | {m['kld_mean']:.5f} +- {m['kld_se']:.5f} "
          f"| {m['kld_max']:.4f} "
          f"| {100 * m['top1']:.2f}% | {m['rel_err_mean']:.4f} | {m['rel_err_max']:.4f} "
          f"| {100 * m['rms_dp']:.3f}% | {m['ppl_ref']:.3f} / {m['ppl_test']:.3f} |")
ours = rows[0][2]["kld_mean"]
print()
for engine, kv, m in rows[1:]:
    print(f"- mean KLD ratio kvserve / {label[engine](kv)}: {ours / m['kld_mean']:.3f}")
print("(<= 1: kvserve's quantized path is no further from its f32 path than llama.cpp's;"
      " +- is the standard error, rows taken as independent)")
PY
