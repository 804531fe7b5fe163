#!/usr/bin/env bash
# Runs every libFuzzer target for a fixed time from its seed corpus: a clang build with
# -DKVSERVE_FUZZ=ON (ASan + UBSan + coverage on every library the targets link) in build-fuzz,
# only the fuzz targets built. Fails when a fuzzer finds a crash, a leak, undefined behaviour or
# an invariant violation; the reproducer is left in $OUT_DIR/<target>/ (crash-*, leak-*, ...).
#   scripts/fuzz.sh                 # each target 60 s
#   KVSERVE_FUZZ_SECONDS=600 scripts/fuzz.sh
# Environment: KVSERVE_FUZZ_BUILD_DIR (default build-fuzz), KVSERVE_JOBS (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${KVSERVE_FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_EACH=${KVSERVE_FUZZ_SECONDS:-60}
JOBS=${KVSERVE_JOBS:-$(nproc)}
OUT_DIR=$BUILD_DIR/fuzz-runs

# target name -> the script that writes its seed corpus
declare -A SEEDS=(
  [kv_cache_manager_fuzz]=tests/kvcache/kv_cache_make_fuzz_seeds.py
  [gguf_fuzz]=tests/model/gguf_make_fuzz_seeds.py
  [grammar_fuzz]=tests/grammar/grammar_make_fuzz_seeds.py
)

CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKVSERVE_CUDA=OFF -DKVSERVE_FUZZ=ON -DKVSERVE_BENCH=OFF \
  -DPython3_EXECUTABLE="$(command -v python3)" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${!SEEDS[@]}"

failed=()
for target in $(printf '%s\n' "${!SEEDS[@]}" | sort); do
  binary=$(find "$BUILD_DIR/tests" -type f -name "$target" -perm -u+x | head -n1)
  if [ -z "$binary" ]; then
    echo "fuzz: $target was not built" >&2
    exit 1
  fi
  work=$OUT_DIR/$target
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/seeds"
  python3 "${SEEDS[$target]}" "$work/seeds"
  echo "fuzz: $target for ${SECONDS_EACH}s ($(ls "$work/seeds" | wc -l) seeds)"
  # New inputs go to corpus/ (the first directory); seeds/ is only read.
  if "$binary" -max_total_time="$SECONDS_EACH" -timeout=25 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "$work/seeds" \
      >"$work/log" 2>&1; then
    echo "fuzz: $target OK: $(grep -E '^stat::number_of_executed_units' "$work/log" | awk '{print $2}') runs"
  else
    echo "fuzz: $target FAILED; last lines of $work/log:" >&2
    tail -n 40 "$work/log" >&2
    failed+=("$target")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all targets ran ${SECONDS_EACH}s without a finding"
