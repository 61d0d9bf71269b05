#!/usr/bin/env bash
# Tessera's one entry point.
#   ./run.sh demo    install missing packages, configure, build, run the demo
#   ./run.sh test    the same set-up, then every test (release build with the Python suite, pip install .,
#                    sanitizer build, out-of-tree SDK build)
#   ./run.sh bench   the same set-up, then the benchmarks (results under build/bench/)
# Environment: JOBS (parallel build jobs, default: number of cores), TESSERA_SKIP_SANITIZERS=1 to
# run the release suite only (local iteration; CI runs everything).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc)}
PACKAGES=(cmake ninja-build g++ clang libclang-rt-14-dev ccache libboost-dev libdnnl-dev nlohmann-json3-dev libminizip-dev
          ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libgtest-dev libgmock-dev libbenchmark-dev python3
          libprotobuf-dev protobuf-compiler)

# ccache: hash paths relative to the checkout so that a fresh clone elsewhere hits the cache.
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}

log() { printf '\n==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing missing packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
  fi
  # The manifest-schema test validates manifests with Python's jsonschema (it is skipped without).
  if ! python3 -c 'import jsonschema' 2>/dev/null; then
    python3 -m pip install --quiet jsonschema 2>/dev/null || echo "(jsonschema not installed: the schema test will be skipped)"
  fi
  # The differential op test (tests/diff) computes its expected results with NumPy; it fails without.
  python3 -c 'import numpy' 2>/dev/null || python3 -m pip install --quiet numpy || echo "(numpy not installed: diff.ops will fail)"
  # The program-file test reads saved weights with the safetensors package, as other tools would.
  python3 -c 'import safetensors' 2>/dev/null || python3 -m pip install --quiet safetensors || echo "(safetensors not installed: compiler.program_cli will fail)"
  # The ONNX tests (tests/onnx) build models with the onnx package and compare with ONNX Runtime;
  # without them onnx.models is not registered.
  python3 -c 'import onnx, onnxruntime' 2>/dev/null ||
    python3 -m pip install --quiet onnx onnxruntime || echo "(onnx/onnxruntime not installed: onnx.models is skipped)"
  # The CUDA plugin's attention on cuDNN builds against the header-only cudnn-frontend (pip's
  # nvidia-cudnn-frontend; Note [SDPA on cuDNN]); without it SDPA keeps the plugin's own kernels.
  if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["purelib"], "include", "cudnn_frontend.h")))' 2>/dev/null ||
      python3 -m pip install --quiet --no-deps nvidia-cudnn-frontend || echo "(nvidia-cudnn-frontend not installed: SDPA on CUDA will not use cuDNN)"
  fi
  # The Python package (python/) builds with nanobind (scikit-build-core for pip install .); its
  # suite runs with pytest.
  python3 -c 'import nanobind, scikit_build_core, pytest' 2>/dev/null ||
    python3 -m pip install --quiet nanobind scikit-build-core pytest || echo "(nanobind/scikit-build-core/pytest not installed: the Python tests will fail)"
}

build() {  # build <preset> [targets...]
  local preset=$1; shift
  log "configure + build ($preset)"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$JOBS" ${1:+--target "$@"}
}

run_ctest() {  # run_ctest <build dir> [ctest args...]
  local dir=$1; shift
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" "$@")
}

cmd=${1:-}
case "$cmd" in
  demo)
    install_packages
    build release
    log "demo"
    ./build/release/bin/tessera_demo
    ;;
  test)
    install_packages
    build release
    log "tests (release)"
    run_ctest build/release
    # The pytest suite ran above as the ctest test python.pytest; make its absence loud (a tree
    # configured before nanobind was installed keeps TESSERA_BUILD_PYTHON=OFF in its cache).
    # (grep reads the whole listing: with -q it could stop early and fail ctest with SIGPIPE under pipefail)
    if ! (cd build/release && ctest -N | grep 'python.pytest' >/dev/null); then
      echo "python.pytest is not in build/release: reconfigure with -DTESSERA_BUILD_PYTHON=ON" >&2
      exit 1
    fi
    log "python: pip install . into a temporary folder, then import tessera from there"
    CMAKE_BUILD_PARALLEL_LEVEL=$JOBS python3 -m pytest -q -p no:cacheprovider -m slow python/tests/test_pip_install.py
    if [ "${TESSERA_SKIP_SANITIZERS:-0}" != 1 ]; then
      for stage in tools/ci/*.sh; do
        [ -e "$stage" ] || continue
        log "stage $(basename "$stage")"
        JOBS=$JOBS bash "$stage"
      done
    fi
    ;;
  bench)
    install_packages
    # The comparison against PyTorch needs libtorch from the torch pip package (looked for at
    # configure time only when asked: importing torch is slow).
    torch_flag=OFF
    python3 -c 'import torch' 2>/dev/null && torch_flag=ON
    log "configure + build (release, TESSERA_BENCH_WITH_TORCH=$torch_flag)"
    cmake --preset release -DTESSERA_BENCH_WITH_TORCH=$torch_flag >/dev/null
    cmake --build --preset release -j "$JOBS"
    mkdir -p build/bench
    for b in build/release/bin/bench_*; do
      case "$(basename "$b")" in bench_torch_compare|bench_train_step) continue ;; esac
      log "$(basename "$b")"
      "$b" --benchmark_out="build/bench/$(basename "$b").json" --benchmark_out_format=json
    done
    python3 tools/perf/plot.py build/bench build/bench/performance.png ||
      echo "(no plot: pip install matplotlib, then python3 tools/perf/plot.py)"
    log "bench_torch_compare (every CPU row against PyTorch, then next to two busy loops)"
    ./build/release/bin/bench_torch_compare --contention --json build/bench/torch_compare.json
    python3 benchmarks/torch_compare/plot.py build/bench/torch_compare.json build/bench/torch_compare.png ||
      echo "(no plot: pip install matplotlib, then python3 benchmarks/torch_compare/plot.py)"
    if [ -x build/release/bin/bench_train_step ]; then
      log "bench_train_step (a transformer block's training step against libtorch)"
      ./build/release/bin/bench_train_step | tee build/bench/train_step.md
    fi
    if [ -f build/release/python/tessera/__init__.py ]; then  # built unless TESSERA_BUILD_PYTHON=OFF
      log "python: per-op overhead against PyTorch (when installed) and NumPy; a compiled NumPy function"
      PYTHONPATH=build/release/python python3 python/bench/bench_overhead.py | tee build/bench/python_overhead.md
      PYTHONPATH=build/release/python python3 python/bench/bench_numpy_compile.py | tee build/bench/python_numpy_compile.md
      OMP_NUM_THREADS=1 PYTHONPATH=build/release/python python3 python/bench/bench_threads.py | tee build/bench/python_threads.md
    fi
    if python3 -c "import onnx, onnxruntime, torch" 2>/dev/null; then
      log "onnx: the light CNNs and BERT/GPT-2-sized models against ONNX Runtime (benchmarks/onnx)"
      python3 benchmarks/onnx/bench_onnx_vs_ort.py --tessera build/release/bin/tessera --out build/bench/onnx_models \
        --json build/bench/onnx_vs_ort.json | tee build/bench/onnx_vs_ort.md
    else
      echo "(onnx benchmark skipped: it needs onnx, onnxruntime and torch from pip)"
    fi
    ;;
  *)
    echo "usage: ./run.sh demo | test | bench" >&2
    exit 2
    ;;
esac
