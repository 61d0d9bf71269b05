#!/usr/bin/env bash
# The CUDA backend's GPU checks in one command. Two machines, two steps:
#   run_gpu_checks.sh bundle [BUILD] [DEST]   on the build machine, after the release build: copy the
#                                             release tree's runtime, plugins, CUDA test and benchmark
#                                             programs, the CLI and the non-system libraries they need
#                                             into DEST (default build/gpu-bundle) and DEST.tar.xz
#                                             (gpu_bundle.sh)
#   run_gpu_checks.sh run [BUNDLE]            on a bare GPU machine (no packages, no network): tests with
#                                             TESSERA_REQUIRE_CUDA=1, `tessera check --device cuda`, the
#                                             benchmarks, PyTorch on the same rows, the side-by-side table,
#                                             compute-sanitizer memcheck; under 8 minutes, outputs in $OUT
#                                             or build/gpu-checks (gpu_run_bundle.sh)
#   run_gpu_checks.sh source                  on a GPU machine with Debian's packages: install what is
#                                             missing, build there, run the checks (gpu_checks_from_source.sh)
#   run_gpu_checks.sh                         `run` when build/gpu-bundle.tar.xz or build/gpu-bundle
#                                             exists, else `source`
# See docs/cuda.md, "Running the GPU checks".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mode=${1:-}
[ $# -gt 0 ] && shift
if [ -z "$mode" ]; then
  if [ -e "$root/build/gpu-bundle.tar.xz" ] || [ -d "$root/build/gpu-bundle" ]; then mode=run; else mode=source; fi
fi
case $mode in
  bundle) exec bash "$here/gpu_bundle.sh" "$@" ;;
  run) exec bash "$here/gpu_run_bundle.sh" "$@" ;;
  source) exec bash "$here/gpu_checks_from_source.sh" "$@" ;;
  *)
    echo "run_gpu_checks.sh: unknown mode '$mode'; use bundle, run or source (see the comment at the top)" >&2
    exit 2
    ;;
esac
