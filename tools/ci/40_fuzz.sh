#!/usr/bin/env bash
# Builds every libFuzzer target (clang, ASan + UBSan) and runs each for FUZZ_SECONDS (default 60)
# from its committed seed corpus. A finding fails the stage; keep the input under
# tests/fuzz/regressions/<name>/ once fixed so the normal suite replays it.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${FUZZ_SECONDS:-60}
cmake --preset fuzz >/dev/null
mapfile -t targets < <(cd tests/fuzz && ls *_fuzz.cpp | sed 's/\.cpp$//')
cmake --build --preset fuzz -j "${JOBS:-2}" --target "${targets[@]}"
export TESSERA_PLUGINS_DISABLE='*'
export ASAN_OPTIONS="detect_leaks=1"
for t in "${targets[@]}"; do
  short=${t%_fuzz}
  work=$(mktemp -d)
  cp -r tests/fuzz/corpus/"$short"/. "$work"/ 2>/dev/null || true
  echo "fuzzing $t for ${seconds}s"
  (./build/fuzz/bin/"$t" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
      -artifact_prefix="$work/crash-" "$work" 2>&1 | tail -n 12)
  if ls "$work"/crash-* >/dev/null 2>&1; then
    echo "fuzz target $t found a failing input: $(ls "$work"/crash-*)" >&2
    exit 1
  fi
  rm -rf "$work"
done
