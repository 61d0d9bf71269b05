#!/usr/bin/env bash
# Checks that the CUDA plugin embeds sm_80 and sm_90 machine code and compute_90 PTX.
# Usage: check_fatbin.sh <libtessera_cuda.so>
# Uses cuobjdump when the CUDA Toolkit has it (CUOBJDUMP or PATH); otherwise reads the plugin's
# .nv_fatbin section with fatbin_archs.py (next to this script; python3 from PYTHON or PATH).
# Exit 77 (skipped) only when neither cuobjdump nor python3 is available.
set -euo pipefail
lib=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tool=${CUOBJDUMP:-}
if [ -z "$tool" ] || [ "$tool" = "TESSERA_CUOBJDUMP-NOTFOUND" ] || ! [ -x "$tool" ]; then
  tool=$(command -v cuobjdump || true)
fi
if [ -n "$tool" ]; then
  echo "checking $lib with $tool"
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
fi

python=${PYTHON:-}
if [ -z "$python" ] || ! [ -x "$python" ]; then
  python=$(command -v python3 || true)
fi
if [ -z "$python" ]; then
  echo "SKIPPED: neither cuobjdump nor python3 found (install the CUDA Toolkit's cuda-cuobjdump package or python3 to check $lib)"
  exit 77
fi
echo "cuobjdump not found: reading the fatbin of $lib with fatbin_archs.py"
status=0
"$python" "$here/fatbin_archs.py" "$lib" --expect-elf 80,90 --expect-ptx 90 || status=$?
if [ "$status" -eq 1 ]; then
  echo "FAILED: $lib lacks machine code or PTX listed above (CMAKE_CUDA_ARCHITECTURES should hold 80-real;90)"
elif [ "$status" -ne 0 ]; then
  echo "FAILED: could not read the fatbin of $lib (fatbin_archs.py exit $status)"
fi
exit $status
