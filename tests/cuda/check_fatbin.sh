#!/usr/bin/env bash
# Checks that the CUDA plugin embeds sm_80 and sm_90 machine code and compute_90 PTX.
# Usage: check_fatbin.sh <libtessera_cuda.so>; exit 77 (skipped) when cuobjdump is absent.
set -euo pipefail
lib=$1
tool=${CUOBJDUMP:-}
if [ -z "$tool" ] || [ "$tool" = "TESSERA_CUOBJDUMP-NOTFOUND" ] || ! [ -x "$tool" ]; then
  tool=$(command -v cuobjdump || true)
fi
if [ -z "$tool" ]; then
  echo "SKIPPED: cuobjdump not found (install the CUDA Toolkit's cuda-cuobjdump package to check $lib)"
  exit 77
fi
elf=$("$tool" --list-elf "$lib")
ptx=$("$tool" --list-ptx "$lib")
echo "$elf"
echo "$ptx"
status=0
for arch in sm_80 sm_90; do
  if ! grep -q "$arch" <<<"$elf"; then
    echo "FAILED: no $arch machine code in $lib (CMAKE_CUDA_ARCHITECTURES should hold 80-real;90)"
    status=1
  fi
done
if ! grep -q "sm_90" <<<"$ptx"; then
  echo "FAILED: no compute_90 PTX in $lib"
  status=1
fi
exit $status
