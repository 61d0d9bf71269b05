#!/usr/bin/env bash
# The CUDA backend's checks built from source, on a GPU machine that has Debian's packages (or may
# install them) — `run_gpu_checks.sh source`. A bare GPU machine (no packages, no network) runs a
# prebuilt bundle instead (gpu_bundle.sh here, gpu_run_bundle.sh there). In one go (well under 10 minutes):
#   1. installs missing Debian build packages (apt-get; sudo when not root),
#   2. configures + builds a release tree with TESSERA_WITH_CUDA=ON (-j$JOBS, default 16),
#   3. runs test_cuda with TESSERA_REQUIRE_CUDA=1 (zero devices fail the run instead of skipping
#      every GPU test; every kernel against the CPU backend, allocator, streams/events, and the
#      regressions of the fixed defects, which check the plugin's kernel-launch counter so that a
#      CPU fallback cannot pass) and the fatbin architecture check,
#   4. runs `tessera check --device cuda` when the CLI has the check command,
#   5. runs bench_cuda (ratios against cuBLASLt / a device copy / the math SDPA path) and
#      bench_sparse_cuda (2:4 linear on the tensor cores against cuBLASLt dense, f16/bf16 4096x4096,
#      batch 16..4096; docs/sparsity.md).
# Outputs (logs, gtest XML, benchmark JSON, summary.txt) go to $OUT when set, else build/gpu-checks.
# Run from anywhere: ./benchmarks/cuda/run_gpu_checks.sh source. Exit status: 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
OUTDIR=${OUT:-$ROOT/build/gpu-checks}
BUILD=${BUILD_DIR:-$ROOT/build/gpu-release}
JOBS=${JOBS:-16}
mkdir -p "$OUTDIR"
SUMMARY=$OUTDIR/summary.txt
: >"$SUMMARY"
overall=0

log() { printf '\n==> %s\n' "$*" | tee -a "$SUMMARY"; }
record() {  # record <step> <exit status>
  printf '%-28s %s\n' "$1" "$([ "$2" -eq 0 ] && echo ok || echo "FAILED ($2)")" | tee -a "$SUMMARY"
  [ "$2" -eq 0 ] || overall=1
}

# ---- 1. packages
PACKAGES=(cmake ninja-build g++ libboost-dev libdnnl-dev nlohmann-json3-dev libgtest-dev libbenchmark-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing missing packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"; } \
    >"$OUTDIR/apt.log" 2>&1
  record "packages" $?
fi

log "machine"
{ nvidia-smi || echo "nvidia-smi not available"; nvcc --version || echo "nvcc not on PATH"; } >"$OUTDIR/machine.txt" 2>&1
grep -E "NVIDIA-SMI|H100|H200|A100|release" "$OUTDIR/machine.txt" | tee -a "$SUMMARY" || true

# ---- 2. configure + build
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
log "configure ($BUILD)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WITH_CUDA=ON -DTESSERA_WITH_OPENCL=OFF \
  -DTESSERA_BUILD_SAMPLES=OFF -DTESSERA_CUDA_COMPILE_JOBS="$JOBS" >"$OUTDIR/configure.log" 2>&1
status=$?
record "configure" $status
if [ $status -ne 0 ]; then
  tail -30 "$OUTDIR/configure.log"
  exit 1
fi
targets=(tessera tessera_cuda test_cuda bench_cuda)
all_targets=$(ninja -C "$BUILD" -t targets all 2>/dev/null | cut -d: -f1)
for optional in tessera_cpu tessera_cli tessera_sparse tessera_sparse_cuda test_sparse_cuda test_sparse_mma_layout \
  bench_sparse_cuda; do
  grep -qx "$optional" <<<"$all_targets" && targets+=("$optional")
done
log "build: ${targets[*]}"
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" >"$OUTDIR/build.log" 2>&1
status=$?
record "build" $status
if [ $status -ne 0 ]; then
  grep -E "error|FAILED" "$OUTDIR/build.log" | head -40
  exit 1
fi

# ---- 3. tests
log "test_cuda"
TESSERA_REQUIRE_CUDA=1 timeout 180 "$BUILD/bin/test_cuda" --gtest_output="xml:$OUTDIR/test_cuda.xml" >"$OUTDIR/test_cuda.log" 2>&1
status=$?
tail -25 "$OUTDIR/test_cuda.log"
record "test_cuda" $status
(cd "$BUILD" && timeout 60 ctest -R cuda_fatbin_architectures --output-on-failure) >"$OUTDIR/fatbin.log" 2>&1
record "fatbin architectures" $?
if [ -x "$BUILD/bin/test_sparse_cuda" ]; then
  log "test_sparse_cuda"
  timeout 120 "$BUILD/bin/test_sparse_cuda" >"$OUTDIR/test_sparse_cuda.log" 2>&1
  status=$?
  grep -q "SKIPPED" "$OUTDIR/test_sparse_cuda.log" && status=1  # a GPU machine must run it, not skip it
  tail -10 "$OUTDIR/test_sparse_cuda.log"
  record "test_sparse_cuda" $status
  # The host-built mma.sp layout (CPU) and the HMMA.SP instructions in the sm_80 / sm_90 code.
  (cd "$BUILD" && timeout 60 ctest -R "SparseMmaLayout|sparse_cuda_mma_sass|sparse_cuda_plugin_listing" \
    --output-on-failure) >"$OUTDIR/sparse_cuda_checks.log" 2>&1
  status=$?
  tail -8 "$OUTDIR/sparse_cuda_checks.log"
  record "sparse cuda checks" $status
fi

# ---- 4. conformance kit
if [ -x "$BUILD/bin/tessera" ] && "$BUILD/bin/tessera" --help 2>&1 | grep -qw check; then
  log "tessera check --device cuda"
  timeout 150 "$BUILD/bin/tessera" check --device cuda >"$OUTDIR/tessera_check.log" 2>&1
  status=$?
  tail -25 "$OUTDIR/tessera_check.log"
  record "tessera check" $status
else
  echo "tessera check: not available in this build (skipped)" | tee -a "$SUMMARY"
fi

# ---- 5. benchmarks
log "bench_cuda"
timeout 200 "$BUILD/bin/bench_cuda" --benchmark_out="$OUTDIR/bench_cuda.json" --benchmark_out_format=json \
  >"$OUTDIR/bench_cuda.txt" 2>&1
status=$?
cat "$OUTDIR/bench_cuda.txt"
record "bench_cuda" $status
if [ -x "$BUILD/bin/bench_sparse_cuda" ]; then
  log "bench_sparse_cuda"
  timeout 200 "$BUILD/bin/bench_sparse_cuda" --benchmark_out="$OUTDIR/bench_sparse_cuda.json" \
    --benchmark_out_format=json >"$OUTDIR/bench_sparse_cuda.txt" 2>&1
  status=$?
  cat "$OUTDIR/bench_sparse_cuda.txt"
  record "bench_sparse_cuda" $status
fi

log "summary ($OUTDIR)"
cat "$SUMMARY"
exit $overall
