#!/usr/bin/env bash
# collect_runtime_libs.sh DEST BINARY...
# Copies every shared library the binaries load (ldd's transitive closure) into DEST, except
# those the CUDA runtime image already has: glibc, libstdc++/libgcc, the CUDA toolkit libraries
# (cudart, cuBLAS, NCCL) and the driver, which the NVIDIA container toolkit mounts at run time.
# The runtime stage puts DEST on LD_LIBRARY_PATH. Fails when a library cannot be resolved.
set -euo pipefail
dest=$1
shift
mkdir -p "$dest"
listing=$(ldd "$@")
missing=$(grep 'not found' <<<"$listing" | grep -v -E 'libcuda\.so|libnvidia-' || true)
if [ -n "$missing" ]; then
  echo "collect_runtime_libs: unresolved libraries:" >&2
  echo "$missing" >&2
  exit 1
fi
awk '$2 == "=>" && $3 ~ /^\// {print $3}' <<<"$listing" | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux* | \
      libresolv.so.* | libutil.so.* | libstdc++.so.* | libgcc_s.so.*) continue ;;
    libcuda.so.* | libnvidia-* | libcudart.so.* | libcublas*.so.* | libnccl.so.*) continue ;;
  esac
  cp -L "$lib" "$dest/"
done
echo "collect_runtime_libs: $(ls "$dest" | wc -l) libraries in $dest"
