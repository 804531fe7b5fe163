#!/usr/bin/env bash
# Builds llama.cpp's llama-bench and llama-server for the side-by-side benchmarks
# (bench/peer/llama_cpp.sh, bench/peer/served.py), unless both are already there: from the source
# vendored in the PyPI sdist of llama-cpp-python (pinned), in a scratch folder outside the
# repository. The binaries land in $PEER_DIR/llama.cpp-build/bin.
#
#   bench/peer/llama_cpp_build.sh
# Env: PEER_DIR (/tmp/kvserve-peer: the sdist, llama.cpp's build).
set -euo pipefail
PEER_DIR=${PEER_DIR:-/tmp/kvserve-peer}
VERSION=0.3.36
bin=$PEER_DIR/llama.cpp-build/bin
[ -x "$bin/llama-bench" ] && [ -x "$bin/llama-server" ] && exit 0

mkdir -p "$PEER_DIR"
if [ ! -f "$PEER_DIR/llama_cpp_python-$VERSION.tar.gz" ]; then
  python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" \
    -d "$PEER_DIR"
fi
tar -xzf "$PEER_DIR/llama_cpp_python-$VERSION.tar.gz" -C "$PEER_DIR"
src=$PEER_DIR/llama_cpp_python-$VERSION/vendor/llama.cpp
cmake -S "$src" -B "$PEER_DIR/llama.cpp-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >/dev/null
cmake --build "$PEER_DIR/llama.cpp-build" -j "$(nproc)" --target llama-bench llama-server
