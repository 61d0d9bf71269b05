#!/usr/bin/env bash
# The sparse CUDA kernels carry tensor-core sparse MMAs (HMMA.SP, f16 and bf16) in their sm_80 and
# sm_90 machine code. Usage: check_mma_sass.sh LIBRARY; $CUOBJDUMP names cuobjdump. Exit 77 (skip)
# when no cuobjdump is available.
set -uo pipefail
lib=$1
cuobjdump=${CUOBJDUMP:-}
[ -n "$cuobjdump" ] && [ -x "$cuobjdump" ] || cuobjdump=$(command -v cuobjdump || true)
if [ -z "$cuobjdump" ]; then
  echo "cuobjdump not found (set CUOBJDUMP): skipped"
  exit 77
fi
status=0
for arch in sm_80 sm_90; do
  sass=$("$cuobjdump" -sass -arch "$arch" "$lib" 2>&1)
  f16=$(grep -c "HMMA\.SP\.16832\.F32 " <<<"$sass")
  bf16=$(grep -c "HMMA\.SP\.16832\.F32\.BF16 " <<<"$sass")
  echo "$arch: $f16 HMMA.SP f16, $bf16 HMMA.SP bf16"
  if [ "$f16" -eq 0 ] || [ "$bf16" -eq 0 ]; then
    echo "$arch: no sparse tensor-core MMA in $lib" >&2
    status=1
  fi
done
exit $status
