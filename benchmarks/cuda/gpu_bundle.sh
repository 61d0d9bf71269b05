#!/usr/bin/env bash
# gpu_bundle.sh [BUILD] [DEST]: a self-contained copy of a release tree for a bare GPU machine
# (no Debian packages, no network; the CUDA driver, toolkit libraries and PyTorch are there).
#   BUILD  the release tree (default build/release)
#   DEST   the bundle folder (default build/gpu-bundle); DEST.tar.xz is written next to it
# DEST/tree mirrors BUILD: bin/ (the CLI and the CUDA test and benchmark programs), lib/ (the
# runtime's shared libraries), lib/tessera/plugins/ (every plugin library with its manifest).
# DEST/syslibs holds the shared libraries they need that a bare machine lacks (oneDNN, libgomp,
# minizip, zlib, protobuf, Google Benchmark, the OpenCL loader, ...): every library `ldd` resolves
# outside BUILD except the C/C++ runtime (libc, libm, libstdc++, libgcc_s, the loader) and the
# NVIDIA libraries the GPU machine has (driver, cudart, cuBLAS/cuBLASLt, cuDNN, NVRTC, ...).
# DEST/ORIGIN records BUILD's absolute path: test programs bake paths under it in (the CUDA
# plugin's path, for one), so run_gpu_checks.sh makes that path lead to DEST/tree there.
# Programs and libraries are stripped; the folder is about 60 MiB, the .tar.xz about 12 MiB.
# Exit status: 0, or 1 with the reason (a required program is missing, an ldd failed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BUILD=$(cd "${1:-$root/build/release}" && pwd)
DEST=${2:-$root/build/gpu-bundle}
REQUIRED_PROGRAMS=(tessera test_cuda bench_cuda)
OPTIONAL_PROGRAMS=(test_sparse_cuda bench_sparse_cuda test_sparse_mma_layout test_cuda_compiler_plugin)

for p in "${REQUIRED_PROGRAMS[@]}"; do
  [ -x "$BUILD/bin/$p" ] || { echo "gpu_bundle: $BUILD/bin/$p is missing: build the release tree first (cmake --build --preset release)" >&2; exit 1; }
done
[ -d "$BUILD/lib/tessera/plugins" ] || { echo "gpu_bundle: $BUILD/lib/tessera/plugins is missing" >&2; exit 1; }

rm -rf "$DEST" "$DEST.tar.xz"
mkdir -p "$DEST/tree/bin" "$DEST/tree/lib/tessera/plugins" "$DEST/syslibs"
DEST=$(cd "$DEST" && pwd)
for p in "${REQUIRED_PROGRAMS[@]}" "${OPTIONAL_PROGRAMS[@]}"; do
  if [ -x "$BUILD/bin/$p" ]; then cp -a "$BUILD/bin/$p" "$DEST/tree/bin/"; fi
done
# Shared libraries only (symlinks kept); static archives are not needed at run time.
find "$BUILD/lib" -maxdepth 1 \( -type f -o -type l \) -name 'lib*.so*' -exec cp -a {} "$DEST/tree/lib/" \;
cp -a "$BUILD/lib/tessera/plugins/." "$DEST/tree/lib/tessera/plugins/"
echo "$BUILD" >"$DEST/ORIGIN"

# The libraries a bare machine lacks. A library that is not found here is an NVIDIA one or a
# broken build: the first is expected, the second stops the bundle.
system_base='/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|libutil|ld-linux[^/]*)\.so'
nvidia='lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|cusparse|cusparseLt|cufft|curand|cusolver|nvrtc|nvrtc-builtins|nccl|nvJitLink|nvToolsExt)\.so'
elfs=()
while IFS= read -r f; do elfs+=("$f"); done < <(find "$DEST/tree" -type f \( -path '*/bin/*' -o -name '*.so*' \))
for f in "${elfs[@]}"; do
  out=$(ldd "$f" 2>&1) || { echo "gpu_bundle: ldd $f failed: $out" >&2; exit 1; }
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      grep -qE "^$nvidia" <<<"$name" || { echo "gpu_bundle: $(basename "$f") needs $name, which is not found here" >&2; exit 1; }
      continue
    fi
    case $path in "$BUILD"/* | "$DEST"/*) continue ;; esac
    if grep -qE "$system_base|/$nvidia" <<<"$path"; then continue; fi
    if [ ! -e "$DEST/syslibs/$name" ]; then cp -L "$path" "$DEST/syslibs/$name"; fi
  done <<<"$out"
done

strip --strip-unneeded "$DEST"/tree/bin/* 2>/dev/null || true
find "$DEST/tree/lib" "$DEST/syslibs" -type f -name '*.so*' -exec strip --strip-unneeded {} \; 2>/dev/null || true
{
  echo "built from: $BUILD"
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "programs: $(cd "$DEST/tree/bin" && echo *)"
  echo "plugins: $(cd "$DEST/tree/lib/tessera/plugins" && echo *.json)"
  echo "syslibs: $(cd "$DEST/syslibs" && echo *)"
} >"$DEST/CONTENTS.txt"
# The device tool carries at most 64 MiB with the checkout: the compressed copy is what travels.
tar -C "$(dirname "$DEST")" -cf - "$(basename "$DEST")" | xz -T2 -6 >"$DEST.tar.xz"
echo "gpu_bundle: $DEST ($(du -sm "$DEST" | cut -f1) MiB), $DEST.tar.xz ($(du -m "$DEST.tar.xz" | cut -f1) MiB)"
