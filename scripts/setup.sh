#!/usr/bin/env bash
# Set up kvserve on a fresh Debian 12 machine: system packages, Python packages for the tests,
# the default model, and a build in ./build. Idempotent: a second run only rebuilds what changed.
#
#   scripts/setup.sh            # everything
#   KVSERVE_BUILD_DIR=out scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${KVSERVE_BUILD_DIR:-build}

# Debian packages: toolchain, gRPC + protobuf, Abseil, prometheus-cpp, GoogleTest, Google
# Benchmark, xxhash, OpenBLAS, nlohmann-json, Gloo; clang's runtime for the libFuzzer targets.
APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git unzip openssl python3 clang
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libgtest-dev libgmock-dev googletest libbenchmark-dev
  libxxhash-dev libopenblas-dev nlohmann-json3-dev libgloo-dev libclang-rt-14-dev
  libboost-dev patchelf
  prometheus
)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages used by tests and benchmarks (stub generation, the GGUF reference reader, the
# routing A/B's plot, Jinja2 for the chat template goldens' check, jsonschema for structured output
# e2e).
PY_PACKAGES=(numpy==2.4.6 gguf==0.19.0 grpcio==1.85.3 grpcio-tools==1.85.1 protobuf==7.36.2 PyYAML==6.0.3
            openai==3.51.0 matplotlib==3.11.2 Jinja2==3.1.6 jsonschema==4.26.0)
if ! python3 - "${PY_PACKAGES[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    if version(name) != want:
        sys.exit(1)
PY
  echo "setup: installing ${PY_PACKAGES[*]}"
  python3 -m pip install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
fi

scripts/fetch_model.sh

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPython3_EXECUTABLE="$(command -v python3)" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "setup: done (build in $BUILD_DIR)"
