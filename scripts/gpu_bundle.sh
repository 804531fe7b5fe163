#!/usr/bin/env bash
# The device bundle: the GPU tests and tools built here, with the shared libraries they need
# beside them, in one folder that travels to a lent GPU machine as one `carry` path of the device
# call (docs/gpu.md). That machine has the CUDA toolkit, PyTorch and its NVIDIA wheels, but none
# of our build dependencies and no network, so scripts/gpu_check.sh runs this folder there and
# never builds.
#
#   scripts/gpu_bundle.sh [--build DIR] [--out DIR]   # defaults: build, gpu-bundle (git-ignored)
#   scripts/gpu_bundle.sh --verify DIR                # check a bundle on this machine
#
# It copies already-built programs (build them first; PROGRAMS below names them), so it takes
# seconds. The folder it writes:
#   bin/          the programs, RPATH $ORIGIN/../lib (DT_RPATH, which LD_LIBRARY_PATH cannot
#                 override)
#   lib/          libkvserve_cuda.so (the CUDA module CreateBackend dlopens: it looks in
#                 ../lib beside the program) and every shared library the programs need except
#                 glibc's and the CUDA ones the device brings (CUDA_LIBS): those the container
#                 image takes (deploy/docker/collect_runtime_libs.sh) plus libstdc++ and
#                 libgcc_s; RPATH $ORIGIN; a file over 4 MiB travels gzip-compressed (OpenBLAS:
#                 36 MB, 11 MB packed)
#   env.sh        sourced before running anything: unpacks the .gz files outside the bundle (so
#                 that it stays small enough to carry), finds the CUDA libraries on the machine
#                 (its header gives the search order), sets PATH and LD_LIBRARY_PATH
#   MANIFEST.txt  the commit and build it came from, and every file with its size
# Every file is stripped (--strip-unneeded); the folder must stay under 60 MiB (64 MiB travel
# in all, the working tree included).
#
# Not linked statically: Debian's static OpenBLAS puts ~25 MB into every program that uses it
# (the kernels of every CPU model are reached through its dispatch table), Abseil, protobuf and
# gRPC would be copied into each of the seven programs, Debian has no static Gloo,
# prometheus-cpp or Google Benchmark, and relinking needs a second build tree. One shared copy
# of each library keeps the folder at about 50 MiB.
#
# --verify sources DIR/env.sh and checks with ldd that every program and library resolves each
# dependency inside the bundle, or to glibc, or to one of CUDA_LIBS found on this machine; the
# build runs it on the folder it wrote. Needs patchelf (scripts/setup.sh installs it).
set -euo pipefail

# Build-tree path of each program, relative to the build folder.
PROGRAMS=(
  tests/kernels/cuda_kernels_test
  tests/comm/nccl_communicator_test
  tests/runner/gpu_model_test
  bench/gpu_bench
  bench/model_bench
  bench/kvserve-loadgen
  worker/kvserve-worker
)
CUDA_MODULE=kernels/libkvserve_cuda.so
# Resolved on the machine, never carried: glibc (the programs need GLIBC_2.34, e.g. Ubuntu 22.04
# or later) and the CUDA libraries the device brings (env.sh finds them).
GLIBC_LIBS="linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0
  librt.so.1 libutil.so.1 libresolv.so.2"
CUDA_LIBS="libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2"
MAX_BYTES=$((60 * 1024 * 1024))
PACK_BYTES=$((4 * 1024 * 1024))

die() {
  echo "gpu_bundle: $*" >&2
  exit 1
}
is_in() { [[ " ${2//$'\n'/ } " == *" $1 "* ]]; }

# "soname path" for each library in LDD_OUTPUT (ldd's) that resolves; "soname not-found" for
# each that does not.
resolved_libs() {
  awk '$2 == "=>" { print $1, ($3 == "not" ? "not-found" : $3) }' <<<"$1"
}

# verify DIR: see the header. Prints one line per problem and a last line; non-zero on problems.
verify() {
  local dir=$1
  [[ -f $dir/env.sh ]] || die "$dir is not a bundle (no env.sh)"
  # shellcheck disable=SC1091  # written by this script
  source "$dir/env.sh" >/dev/null
  local problems=0 files=0 file name path output
  # An unpacked library is not checked alone (its $ORIGIN is not lib/; in a program it finds its
  # dependencies through the program's RPATH), but as a dependency of the programs.
  for file in "$KVSERVE_BUNDLE"/bin/* "$KVSERVE_BUNDLE"/lib/*.so*; do
    [[ $file == *.gz ]] && continue
    files=$((files + 1))
    output=$(ldd "$file" 2>&1 || true)
    while read -r name path; do
      if [[ $path == not-found ]]; then
        echo "verify: ${file#"$KVSERVE_BUNDLE"/}: $name not found"
        problems=$((problems + 1))
      elif [[ $path != "$KVSERVE_BUNDLE"/* && $path != "$KVSERVE_BUNDLE_UNPACKED"/* ]] &&
        ! is_in "$name" "$GLIBC_LIBS $CUDA_LIBS"; then
        echo "verify: ${file#"$KVSERVE_BUNDLE"/}: $name resolves outside the bundle ($path)"
        problems=$((problems + 1))
      fi
    done < <(resolved_libs "$output")
    if [[ $output == *"version "*" not found"* ]]; then  # e.g. too old a glibc
      grep 'version .* not found' <<<"$output" | sed 's/^[[:space:]]*/verify: /'
      problems=$((problems + 1))
    fi
  done
  if ((problems > 0)); then
    echo "verify: $problems problem(s) in $files files of $KVSERVE_BUNDLE"
    return 1
  fi
  echo "verify: $files files; every dependency resolves inside the bundle, to glibc or to the" \
    "machine's CUDA libraries"
}

# The bundle's env.sh (written verbatim).
write_env() {
  cat >"$1" <<'ENV'
# Source this file (bash) before running a program of the device bundle it sits in:
#   . gpu-bundle/env.sh
# 1. Unpacks lib/*.gz (large libraries travel compressed) into
#    ${TMPDIR:-/tmp}/kvserve-bundle-<uid>/<checksum>/, once, outside the bundle so that the
#    folder stays small enough to carry.
# 2. Finds each CUDA library the bundle does not carry (libcudart.so.13, libcublas.so.13,
#    libcublasLt.so.13, libnccl.so.2) in the first place that holds it:
#      a. the folders of $KVSERVE_CUDA_LIBS (colon-separated), when set;
#      b. the CUDA toolkit: $CUDA_HOME (default /usr/local/cuda)/lib64, lib,
#         targets/x86_64-linux/lib;
#      c. python3's NVIDIA wheels (nvidia-cublas, nvidia-cuda-runtime, nvidia-nccl-cu13, as
#         PyTorch installs them): <site-packages>/nvidia/{cu13,cublas,cuda_runtime,nccl}/lib;
#      d. the loader's cache (ldconfig -p).
#    The driver's libcuda.so.1: the loader's path, else /usr/local/nvidia/lib64 or lib.
# 3. Exports KVSERVE_BUNDLE, KVSERVE_BUNDLE_UNPACKED, KVSERVE_CUDA_MODULE (lib/libkvserve_cuda.so,
#    or its unpacked copy when it travels packed),
#    PATH (bin/ first), LD_LIBRARY_PATH (the unpacked folder, the CUDA folders found, then what
#    it held; not lib/, which the programs reach through their RPATH: its libstdc++ must not
#    replace a newer one under the machine's own tools, compute-sanitizer say), and
#    KVSERVE_BUNDLE_MISSING: the libraries not found, space-separated (empty when all were).
#    Prints where each library was found.
KVSERVE_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export KVSERVE_BUNDLE KVSERVE_BUNDLE_MISSING=""
_kb_path=()
# One folder for all of them, named by the checksum of the packed files together.
_kb_sum=$(cat "$KVSERVE_BUNDLE"/lib/*.gz 2>/dev/null | cksum | cut -d' ' -f1)
for _kb_gz in "$KVSERVE_BUNDLE"/lib/*.gz; do
  [[ -e $_kb_gz ]] || continue
  KVSERVE_BUNDLE_UNPACKED=${TMPDIR:-/tmp}/kvserve-bundle-$(id -u)/$_kb_sum
  _kb_so=$KVSERVE_BUNDLE_UNPACKED/$(basename "${_kb_gz%.gz}")
  if [[ ! -e $_kb_so ]]; then
    mkdir -p "$KVSERVE_BUNDLE_UNPACKED" &&
      gzip -dc "$_kb_gz" >"$_kb_so.$$" && chmod 755 "$_kb_so.$$" && mv "$_kb_so.$$" "$_kb_so" ||
      KVSERVE_BUNDLE_MISSING+=" $(basename "$_kb_so")"
  fi
done
[[ -n ${KVSERVE_BUNDLE_UNPACKED:-} ]] && _kb_path+=("$KVSERVE_BUNDLE_UNPACKED")
export KVSERVE_BUNDLE_UNPACKED=${KVSERVE_BUNDLE_UNPACKED:-$KVSERVE_BUNDLE/lib}

_kb_dirs=()
[[ -n ${KVSERVE_CUDA_LIBS:-} ]] && IFS=: read -ra _kb_dirs <<<"$KVSERVE_CUDA_LIBS"
_kb_cuda=${CUDA_HOME:-/usr/local/cuda}
_kb_dirs+=("$_kb_cuda/lib64" "$_kb_cuda/lib" "$_kb_cuda/targets/x86_64-linux/lib")
if command -v python3 >/dev/null; then
  while IFS= read -r _kb_nv; do
    _kb_dirs+=("$_kb_nv/cu13/lib" "$_kb_nv/cublas/lib" "$_kb_nv/cuda_runtime/lib"
      "$_kb_nv/nccl/lib")
  done < <(python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null)
fi
for _kb_lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  _kb_where=""
  for _kb_dir in "${_kb_dirs[@]}"; do
    if [[ -e $_kb_dir/$_kb_lib ]]; then
      _kb_where=$(cd "$_kb_dir" && pwd -P)
      break
    fi
  done
  if [[ -n $_kb_where ]]; then
    [[ " ${_kb_path[*]} " == *" $_kb_where "* ]] || _kb_path+=("$_kb_where")
    echo "bundle: $_kb_lib from $_kb_where"
  elif ldconfig -p 2>/dev/null | grep "^[[:space:]]*$_kb_lib " >/dev/null; then
    echo "bundle: $_kb_lib from the loader's cache"
  else
    KVSERVE_BUNDLE_MISSING+=" $_kb_lib"
    echo "bundle: $_kb_lib NOT FOUND (set KVSERVE_CUDA_LIBS)"
  fi
done
if ldconfig -p 2>/dev/null | grep '^[[:space:]]*libcuda\.so\.1 ' >/dev/null; then
  echo "bundle: libcuda.so.1 (driver) from the loader's cache"
else
  _kb_where=""
  for _kb_dir in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }} /usr/local/nvidia/lib64 \
    /usr/local/nvidia/lib; do
    [[ -e $_kb_dir/libcuda.so.1 ]] && _kb_where=$_kb_dir && break
  done
  if [[ -n $_kb_where ]]; then
    _kb_path+=("$_kb_where")
    echo "bundle: libcuda.so.1 (driver) from $_kb_where"
  else
    KVSERVE_BUNDLE_MISSING+=" libcuda.so.1"
    echo "bundle: libcuda.so.1 (driver) NOT FOUND"
  fi
fi
KVSERVE_BUNDLE_MISSING=${KVSERVE_BUNDLE_MISSING# }
if ((${#_kb_path[@]} > 0)); then
  _kb_joined=$(IFS=:; echo "${_kb_path[*]}")
  export LD_LIBRARY_PATH=$_kb_joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export KVSERVE_CUDA_MODULE=$KVSERVE_BUNDLE/lib/libkvserve_cuda.so
[[ -e $KVSERVE_CUDA_MODULE ]] || KVSERVE_CUDA_MODULE=$KVSERVE_BUNDLE_UNPACKED/libkvserve_cuda.so
export PATH=$KVSERVE_BUNDLE/bin:$PATH
unset _kb_path _kb_gz _kb_sum _kb_so _kb_dirs _kb_cuda _kb_nv _kb_lib _kb_where _kb_dir _kb_joined
ENV
}

# The manifest: where the bundle came from, then every file with its size.
write_manifest() {
  local stage=$1 build=$2 repo=$3
  local commit dirty
  commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  dirty=$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null | wc -l)
  {
    echo "kvserve device bundle"
    echo "commit: $commit ($dirty tracked files changed)"
    echo "made: $(date -u '+%Y-%m-%dT%H:%M:%SZ') from $build" \
      "($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt"))"
    # Compiled into the tests as KVSERVE_SOURCE_DIR (fixtures); gpu_check.sh overrides it.
    echo "source_dir: $(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
    echo "needs: glibc >= 2.34, an sm_90 GPU, and from the machine: $CUDA_LIBS"
    echo "files (bytes):"
    (cd "$stage" && find . -type f ! -name MANIFEST.txt -printf '%s %P\n' | sort -k2)
  } >"$stage/MANIFEST.txt"
}

build_bundle() {
  local build=$1 out=$2 repo=$3
  command -v patchelf >/dev/null ||
    die "patchelf is missing (apt-get install patchelf; scripts/setup.sh installs it)"
  [[ -f $build/CMakeCache.txt ]] || die "$build is not a build folder"
  local missing=() file
  for file in "${PROGRAMS[@]}" "$CUDA_MODULE"; do
    [[ -f $build/$file ]] || missing+=("$(basename "$file" .so | sed 's/^lib//')")
  done
  ((${#missing[@]} == 0)) || die "not built in $build: ${missing[*]} (they need a CUDA build" \
    "with KVSERVE_BENCH=ON: ninja -C $build ${missing[*]})"
  # Written beside the destination, then moved over it, so a failure leaves no half bundle.
  if [[ -e $out && ! -f $out/MANIFEST.txt ]]; then
    die "$out exists and is not a bundle; not replacing it"
  fi
  STAGE=$out.tmp.$$
  local stage=$STAGE
  rm -rf "$stage"
  mkdir -p "$stage/bin" "$stage/lib"
  trap 'rm -rf "$STAGE"' EXIT

  local programs=() name
  for file in "${PROGRAMS[@]}"; do programs+=("$build/$file"); done
  cp "${programs[@]}" "$stage/bin/"
  cp "$build/$CUDA_MODULE" "$stage/lib/"
  # Every library they load, as the container image takes them: all but glibc's, the C++
  # runtime's and CUDA's ...
  bash "$repo/deploy/docker/collect_runtime_libs.sh" "$stage/lib" "${programs[@]}" \
    "$build/$CUDA_MODULE" >/dev/null
  # ... and the C++ runtime as well: the device's may be older than this build's.
  local module_libs
  module_libs=$(resolved_libs "$(ldd "$build/$CUDA_MODULE")")
  for name in libstdc++.so.6 libgcc_s.so.1; do
    cp -L "$(awk -v n="$name" '$1 == n { print $2 }' <<<"$module_libs")" "$stage/lib/$name"
  done
  chmod 755 "$stage"/lib/*
  strip --strip-unneeded "$stage"/bin/* "$stage"/lib/*
  # Strip before patchelf: strip can undo the space patchelf adds. $ORIGIN is the loader's.
  # shellcheck disable=SC2016
  for file in "$stage"/bin/*; do patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$file"; done
  # shellcheck disable=SC2016
  for file in "$stage"/lib/*; do patchelf --force-rpath --set-rpath '$ORIGIN' "$file"; done
  for file in "$stage"/lib/*; do
    if (($(stat -c %s "$file") > PACK_BYTES)); then gzip -6 -n "$file"; fi
  done
  write_env "$stage/env.sh"
  write_manifest "$stage" "$(cd "$build" && pwd)" "$repo"

  local bytes
  bytes=$(find "$stage" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
  ((bytes < MAX_BYTES)) ||
    die "the bundle is $((bytes / 1048576)) MiB, over the 60 MiB it may carry"
  verify "$stage" || die "the bundle does not resolve its libraries (above)"
  rm -rf "$out"
  mv "$stage" "$out"
  trap - EXIT
  echo "gpu_bundle: $out: $(find "$out/bin" -type f | wc -l) programs, $(find "$out/lib" -type f |
    wc -l) libraries, $((bytes / 1024)) KiB ($(sed -n 's/^commit: //p' "$out/MANIFEST.txt"))"
}

main() {
  local repo build out
  repo=$(cd "$(dirname "$0")/.." && pwd)
  build=$repo/build
  out=$repo/gpu-bundle
  case ${1:-} in
    --verify)
      [[ $# -eq 2 ]] || die "usage: $0 --verify DIR"
      verify "$2"
      return
      ;;
  esac
  while (($# > 0)); do
    case $1 in
      --build) build=$2 ;;
      --out) out=$2 ;;
      *) die "usage: $0 [--build DIR] [--out DIR] | --verify DIR" ;;
    esac
    shift 2
  done
  build_bundle "$build" "$out" "$repo"
}

main "$@"
