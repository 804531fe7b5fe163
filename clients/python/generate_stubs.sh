#!/usr/bin/env bash
# Generates the Python gRPC stubs of kvserve.v1 from proto/ into clients/python/gen (not kept in
# git). Needs grpcio-tools (pip install grpcio-tools==1.85.1, as scripts/setup.sh does).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$here/gen}"
mkdir -p "$out"
python3 -m grpc_tools.protoc -I "$root/proto" --python_out="$out" --grpc_python_out="$out" \
  "$root"/proto/kvserve/v1/*.proto
echo "stubs in $out"
