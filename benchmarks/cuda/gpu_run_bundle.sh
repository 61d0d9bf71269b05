#!/usr/bin/env bash
# gpu_run_bundle.sh [BUNDLE]: the CUDA checks on a bare GPU machine, from a bundle that
# gpu_bundle.sh made on the build machine (a folder or its .tar.xz; default build/gpu-bundle.tar.xz,
# then build/gpu-bundle). Nothing is installed or built. In order, each step under its own timeout
# and all of them under one budget (GPU_CHECKS_BUDGET_S, default 450 s: the run fits in 8 minutes):
#   the machine and the bundle's libraries (ldd), `tessera devices`, test_cuda with
#   TESSERA_REQUIRE_CUDA=1 (zero devices fail instead of skipping), test_sparse_cuda,
#   `tessera check --device cuda`, bench_cuda, bench_sparse_cuda, torch_rows.py (PyTorch on the same
#   rows), the side-by-side table (gpu_table.py -> table.md), and compute-sanitizer memcheck on the
#   kernel tests with the time that is left (GPU_MEMCHECK_FILTER narrows them).
# Logs, gtest XML, benchmark JSON, table.md and summary.txt go to $OUT when set, else build/gpu-checks.
# Exit status: 0 when every step that ran passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BUNDLE=${1:-}
if [ -z "$BUNDLE" ]; then
  BUNDLE=$root/build/gpu-bundle.tar.xz
  [ -e "$BUNDLE" ] || BUNDLE=$root/build/gpu-bundle
fi
OUTDIR=${OUT:-$root/build/gpu-checks}
BUDGET=${GPU_CHECKS_BUDGET_S:-450}
RESERVE=20  # seconds kept for the table and the summary
start=$(date +%s)
mkdir -p "$OUTDIR"
SUMMARY=$OUTDIR/summary.txt
: >"$SUMMARY"
overall=0

record() {  # record <step> <status text> <seconds>
  printf '%-26s %-24s %4ss\n' "$1" "$2" "$3" | tee -a "$SUMMARY"
}
# step <name> <timeout s> <log> <command...>: runs the command with stdout/stderr in <log>, under
# the smaller of its timeout and what the budget has left; a step that cannot get 10 s is skipped.
step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left=$((BUDGET - ($(date +%s) - start) - RESERVE))
  if ((left < 10)); then
    record "$name" "skipped (out of time)" 0
    return 0
  fi
  ((limit > left)) && limit=$left
  local t0 rc
  t0=$(date +%s)
  timeout -k 5 "$limit" bash -c '"$@"' _ "$@" >"$log" 2>&1  # bash: steps may be exported functions
  rc=$?
  local took=$(($(date +%s) - t0))
  if ((rc == 124 || rc == 137)); then
    record "$name" "TIMEOUT (${limit}s)" "$took"
    overall=1
  elif ((rc != 0)); then
    record "$name" "FAILED ($rc)" "$took"
    overall=1
  else
    record "$name" "ok" "$took"
  fi
  return $rc
}

# ---- the bundle
case $BUNDLE in
  *.tar.xz)
    [ -f "$BUNDLE" ] || { echo "no bundle at $BUNDLE: run 'benchmarks/cuda/run_gpu_checks.sh bundle' on the build machine" >&2; exit 2; }
    work=$(mktemp -d /tmp/tessera-gpu.XXXXXX)
    trap 'rm -rf "$work"' EXIT  # the unpacked copy goes when the run ends
    tar -C "$work" -xJf "$BUNDLE" || exit 2
    G=$work/$(basename "$BUNDLE" .tar.xz)
    ;;
  *)
    [ -d "$BUNDLE" ] || { echo "no bundle at $BUNDLE: run 'benchmarks/cuda/run_gpu_checks.sh bundle' on the build machine" >&2; exit 2; }
    G=$(cd "$BUNDLE" && pwd)
    ;;
esac
[ -f "$G/ORIGIN" ] && [ -d "$G/tree/bin" ] || { echo "$G is not a bundle (no ORIGIN or tree/bin)" >&2; exit 2; }
B=$G/tree
# Paths under the build tree are baked into test programs (the CUDA plugin's path in test_cuda):
# make the recorded build path lead to the bundle's tree.
ORIG=$(cat "$G/ORIGIN")
if [ -L "$ORIG" ] || [ ! -e "$ORIG" ]; then
  # Left in place after the run (pointing at a removed folder when the bundle was an archive);
  # the next run replaces it.
  mkdir -p "$(dirname "$ORIG")" && ln -sfn "$B" "$ORIG" || echo "warning: cannot link $ORIG to $B" | tee -a "$SUMMARY"
elif [ "$(cd "$ORIG" && pwd -P)" != "$(cd "$B" && pwd -P)" ]; then
  echo "warning: $ORIG exists and is not the bundle: paths baked into test programs lead there" | tee -a "$SUMMARY"
fi

PYLD=${LD_LIBRARY_PATH:-}  # PyTorch runs with the machine's own library path
CUDA_LIB=/usr/local/cuda/lib64
export LD_LIBRARY_PATH=$B/lib:$G/syslibs:$CUDA_LIB${PYLD:+:$PYLD}
cublaslt=$(ls "$CUDA_LIB"/libcublasLt.so.* 2>/dev/null | head -1)
[ -n "$cublaslt" ] && export TESSERA_CUDA_CUBLASLT=$cublaslt
# conv2d opens cuDNN 9 at first use (Note [Loading cuDNN]): the toolkit's, else PyTorch's nvidia-cudnn.
cudnn=$(ls "$CUDA_LIB"/libcudnn.so.9 2>/dev/null | head -1)
if [ -z "$cudnn" ]; then
  cudnn_dir=$(env LD_LIBRARY_PATH="$PYLD" python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
  [ -n "$cudnn_dir" ] && cudnn=$(ls "$cudnn_dir"/libcudnn.so.9 2>/dev/null | head -1)
fi
if [ -n "$cudnn" ]; then export TESSERA_CUDA_CUDNN=$cudnn; else echo "warning: no cuDNN 9 found: conv2d will run on the CPU fallback" | tee -a "$SUMMARY"; fi
# 2:4 linear opens cuSPARSELt at first use (Note [Loading cuSPARSELt]): PyTorch's nvidia-cusparselt.
cusparselt_dir=$(env LD_LIBRARY_PATH="$PYLD" python3 -c 'import nvidia.cusparselt as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
cusparselt=$(ls "$cusparselt_dir"/libcusparseLt.so.0 2>/dev/null | head -1)
if [ -n "$cusparselt" ]; then export TESSERA_CUDA_CUSPARSELT=$cusparselt; else echo "warning: no cuSPARSELt found: 2:4 linear takes the dense path and the cuSPARSELt tests fail" | tee -a "$SUMMARY"; fi
# The CUDA compiler plugin opens NVRTC at first use (Note [Loading NVRTC]): the toolkit's, else PyTorch's.
if ! ls "$CUDA_LIB"/libnvrtc.so.* >/dev/null 2>&1; then
  nvrtc=$(env LD_LIBRARY_PATH="$PYLD" python3 -c 'import nvidia, glob, os; print(next(iter(sorted(p for d in nvidia.__path__ for p in glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so.*")) if "builtins" not in p)), ""))' 2>/dev/null)
  if [ -n "$nvrtc" ]; then export TESSERA_CUDA_NVRTC=$nvrtc; else echo "warning: no NVRTC found: compiled chains run through the dispatcher" | tee -a "$SUMMARY"; fi
fi
[ -d /usr/local/cuda/bin ] && export PATH=$PATH:/usr/local/cuda/bin

echo "==> machine and bundle ($(head -2 "$G/CONTENTS.txt" 2>/dev/null | tr '\n' ' '))" | tee -a "$SUMMARY"
{ nvidia-smi || echo "nvidia-smi not available"; nvcc --version || echo "nvcc not on PATH"; cat "$G/CONTENTS.txt"; } \
  >"$OUTDIR/machine.txt" 2>&1
grep -E "NVIDIA-SMI|H100|H200|A100|B200|release" "$OUTDIR/machine.txt" | tee -a "$SUMMARY" || true
missing_libs() {  # every program and plugin resolves its libraries (NVIDIA ones from the machine)
  local bad=0 f
  for f in "$B"/bin/* "$B"/lib/*.so.* "$B"/lib/tessera/plugins/*.so; do
    if ldd "$f" | grep 'not found'; then bad=1; fi
  done
  return $bad
}
export B G OUTDIR
export -f missing_libs
step "libraries" 30 "$OUTDIR/ldd.log" missing_libs || sed 's/^/  /' "$OUTDIR/ldd.log" | head -20

# ---- tests
step "tessera devices" 30 "$OUTDIR/devices.log" "$B/bin/tessera" devices
cat "$OUTDIR/devices.log"
step "test_cuda" 150 "$OUTDIR/test_cuda.log" env TESSERA_REQUIRE_CUDA=1 "$B/bin/test_cuda" \
  --gtest_output="xml:$OUTDIR/test_cuda.xml"
grep -E '^\[  (FAILED|PASSED|SKIPPED) |tests? ran' "$OUTDIR/test_cuda.log" | head -30
if [ -x "$B/bin/test_sparse_cuda" ]; then
  sparse_tests() {  # a GPU machine must run them, not skip them
    TESSERA_REQUIRE_CUDA=1 "$B/bin/test_sparse_cuda" --gtest_output="xml:$OUTDIR/test_sparse_cuda.xml" || return
    ! grep -q '^\[  SKIPPED \]' "$OUTDIR/test_sparse_cuda.log"
  }
  export -f sparse_tests
  step "test_sparse_cuda" 60 "$OUTDIR/test_sparse_cuda.log" sparse_tests
  tail -3 "$OUTDIR/test_sparse_cuda.log"
fi
if [ -x "$B/bin/test_cuda_compiler_plugin" ]; then
  # The fused kernels must run on a GPU machine, not skip. The host runs of the generated source
  # build it with the CPU machine's C++ compiler and SDK headers (tests/cuda/host_kernel.h), which a
  # bundle does not carry: they ran there, and are left out here.
  compiler_tests() {
    TESSERA_REQUIRE_CUDA=1 "$B/bin/test_cuda_compiler_plugin" --gtest_filter=-CudaCompilerPlugin.LoweredReductionsRunOnTheHostLikeDoubleLoops \
      --gtest_output="xml:$OUTDIR/test_cuda_compiler_plugin.xml" || return
    ! grep -q '^\[  SKIPPED \]' "$OUTDIR/test_cuda_compiler_plugin.log"
  }
  export -f compiler_tests
  step "test_cuda_compiler_plugin" 60 "$OUTDIR/test_cuda_compiler_plugin.log" compiler_tests
  tail -3 "$OUTDIR/test_cuda_compiler_plugin.log"
fi
step "tessera check" 90 "$OUTDIR/tessera_check.log" "$B/bin/tessera" check --device cuda
tail -6 "$OUTDIR/tessera_check.log"

# ---- benchmarks, PyTorch on the same rows, the table
step "bench_cuda" 200 "$OUTDIR/bench_cuda.txt" "$B/bin/bench_cuda" --benchmark_out="$OUTDIR/bench_cuda.json" \
  --benchmark_out_format=json
if [ -x "$B/bin/bench_sparse_cuda" ]; then
  step "bench_sparse_cuda" 90 "$OUTDIR/bench_sparse_cuda.txt" "$B/bin/bench_sparse_cuda" \
    --benchmark_out="$OUTDIR/bench_sparse_cuda.json" --benchmark_out_format=json
fi
step "pytorch rows" 100 "$OUTDIR/torch_rows.log" env LD_LIBRARY_PATH="$PYLD" python3 "$here/torch_rows.py" "$OUTDIR/torch_rows.json"
RESERVE=0 step "table" 20 "$OUTDIR/table.log" python3 "$here/gpu_table.py" --out "$OUTDIR/table.md" \
  "$OUTDIR/bench_cuda.json" "$OUTDIR/bench_sparse_cuda.json" --torch "$OUTDIR/torch_rows.json"
cat "$OUTDIR/table.md" 2>/dev/null

# ---- compute-sanitizer memcheck on the kernel tests, with the time that is left
sanitizer=$(command -v compute-sanitizer || true)
if [ -n "$sanitizer" ]; then
  filter=${GPU_MEMCHECK_FILTER:-'CudaKernels.*:CudaNaN.*:-CudaKernels.AttentionWithManyHeadsNoKeysAndMaskedRows:CudaKernels.FullAndColumnReductionsSplitAcrossTheGpu:CudaKernels.LargeAndOffsetCopiesTakeEveryKernelPath'}
  RESERVE=5 step "memcheck" 240 "$OUTDIR/memcheck.log" env TESSERA_REQUIRE_CUDA=1 "$sanitizer" --tool memcheck \
    --error-exitcode 99 --print-limit 50 "$B/bin/test_cuda" --gtest_filter="$filter"
  grep -E 'ERROR SUMMARY|^\[  (FAILED|PASSED) ' "$OUTDIR/memcheck.log" | head -10
else
  record "memcheck" "skipped (no compute-sanitizer)" 0
fi

echo "==> summary ($OUTDIR, $(($(date +%s) - start)) s)" | tee -a "$SUMMARY"
exit $overall
