# shellcheck shell=bash
# Sourced by the bench/peer scripts (or run: builds llama-bench and llama-server):
# build_llama_cpp TARGET... builds those targets of llama.cpp
# from the source vendored in the PyPI sdist of llama-cpp-python (pinned below) in
# $PEER_DIR/llama.cpp-build, the folder bench/peer/llama_cpp.sh uses, downloading and
# configuring once. Sets LLAMA_CPP_SRC and LLAMA_CPP_BUILD.
LLAMA_CPP_PYTHON_VERSION=0.3.36
build_llama_cpp() {
  LLAMA_CPP_SRC=$PEER_DIR/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp
  LLAMA_CPP_BUILD=$PEER_DIR/llama.cpp-build
  local sdist=$PEER_DIR/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
  mkdir -p "$PEER_DIR"
  if [ ! -d "$LLAMA_CPP_SRC" ]; then
    if [ ! -f "$sdist" ]; then
      python3 -m pip download -q --no-deps --no-binary :all: \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$PEER_DIR"
    fi
    tar -xzf "$sdist" -C "$PEER_DIR"
  fi
  if [ ! -f "$LLAMA_CPP_BUILD/build.ninja" ]; then
    cmake -S "$LLAMA_CPP_SRC" -B "$LLAMA_CPP_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >/dev/null
  fi
  cmake --build "$LLAMA_CPP_BUILD" -j 2 --target "$@" >/dev/null
}

# Run as a script (bench/peer/served.py does): llama-bench and llama-server.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  PEER_DIR=${PEER_DIR:-/tmp/kvserve-peer}
  build_llama_cpp llama-bench llama-server
fi
