#!/usr/bin/env bash
# `tessera devices` lists the CUDA devices, or says why there are none (the plugin's reason).
# Usage: check_devices_listing.sh <path to the tessera CLI>
set -uo pipefail
out=$("$1" devices 2>&1)
echo "$out"
if grep -Eq '^cuda:[0-9]+' <<<"$out"; then
  exit 0
fi
if grep -Eq '^cuda .*no devices: (CUDA driver|no CUDA device|CUDA initialisation failed)' <<<"$out"; then
  exit 0
fi
echo "FAILED: neither a cuda:N device nor the reason why there is none"
exit 1
