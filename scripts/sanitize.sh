#!/usr/bin/env bash
# The unit tests under AddressSanitizer + UndefinedBehaviorSanitizer, in a second build folder
# (build-asan; the main build in build/ is untouched). Builds only the programs `ctest -L unit`
# runs, CUDA off (the sanitizers instrument host code only). Any ASan or UBSan report fails the
# test that triggered it: UBSan is fatal (cmake/Sanitizers.cmake), ASan aborts on its first report.
#   scripts/sanitize.sh                  # all unit tests
#   scripts/sanitize.sh -R kvcache_      # extra arguments go to ctest
# Environment: KVSERVE_ASAN_BUILD_DIR (default build-asan), KVSERVE_JOBS (default: nproc).
# The deploy_* checks (Python, nothing compiled) are left to scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${KVSERVE_ASAN_BUILD_DIR:-build-asan}
JOBS=${KVSERVE_JOBS:-$(nproc)}

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSERVE_CUDA=OFF \
  -DKVSERVE_SANITIZE=address,undefined -DKVSERVE_BENCH=OFF \
  -DPython3_EXECUTABLE="$(command -v python3)" >/dev/null

# The executables of the unit tests (no need to build tools or e2e). kvserve_add_test names the
# test after its executable; ctest lists no command for a test whose program is not built yet,
# and a test whose command lies outside the build folder (a Python check) needs no target.
mapfile -t targets < <(ctest --test-dir "$BUILD_DIR" -L unit -E '^deploy_' --show-only=json-v1 |
  python3 -c '
import json, os, sys
build = os.path.realpath(sys.argv[1])
for test in json.load(sys.stdin)["tests"]:
    command = test.get("command")
    if not command:
        print(test["name"])
    elif os.path.realpath(command[0]).startswith(build + os.sep):
        print(os.path.basename(command[0]))' "$BUILD_DIR" | sort -u)
if ((${#targets[@]} == 0)); then
  echo "sanitize: ctest lists no unit test" >&2
  exit 1
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"

# detect_leaks: LeakSanitizer on (the default on x86_64 Linux, stated here so it stays on).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$BUILD_DIR" --output-on-failure -L unit -E '^deploy_' "$@"
