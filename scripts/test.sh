#!/usr/bin/env bash
# Build (incrementally) and run every test. Tests labelled gpu skip where no CUDA device is present.
#   scripts/test.sh              # all tests
#   scripts/test.sh -L unit      # extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${KVSERVE_BUILD_DIR:-build}
cmake --build "$BUILD_DIR" -j "$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
