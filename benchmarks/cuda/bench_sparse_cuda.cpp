// 2:4 semi-structured linear on cuda (the sparse_cuda plugin's tensor-core kernel, docs/sparsity.md)
// against dense cuBLASLt called directly on the same (unpruned-layout, pruned-values) weight, in the
// same run: y (batch, 4096) = x (batch, 4096) W^T, W 4096 x 4096, f16 and bf16, batch 16..4096.
// Reports `ratio` = cuBLASLt time / sparse time (goal >= 1.3), `sparse_kernel` (1 when the call ran
// the plugin's kernel, 0 when it took the dense path) and `max_rel_err` of the sparse result
// against cuBLASLt's (relative to the largest |y|). Without a CUDA device every case is skipped
// with the reason.
#include <benchmark/benchmark.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>

#include "cuda_bench_util.h"
#include "sparse_cuda_ext.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera_bench;
using tessera::DType;
using tessera::Tensor;
namespace sp = tessera::sparse;

constexpr int64_t kFeatures = 4096;

uint64_t sparse_launches() {
  auto fn = tessera::plugin_extension<tessera_ext_sparse_cuda_kernel_launches_fn_t>(
      "sparse_cuda", TESSERA_EXT_SPARSE_CUDA_KERNEL_LAUNCHES);
  return fn ? fn(nullptr) : 0;
}

void BM_SparseLinear(benchmark::State& state, DType dtype) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const int64_t batch = state.range(0);
  const tessera::Device cuda("cuda:0");
  tessera::manual_seed(7);
  const Tensor w = sp::prune_2_4(tessera::randn({kFeatures, kFeatures}).to(dtype));
  const Tensor ws = sp::to_sparse_semi_structured(w).to(cuda);
  const Tensor wd = w.to(cuda);
  const Tensor x = tessera::randn({batch, kFeatures}).to(dtype).to(cuda);
  Tensor y_ref = tessera::empty({batch, kFeatures}, tessera::TensorOptions(dtype).device(cuda));
  // Row-major y (batch, n) = x (batch, k) W^T with W (n, k) row-major, as column-major
  // y^T (n x batch) = op_T(W as k x n) x^T (k x batch).
  CublasLtGemm lt(kFeatures, batch, kFeatures, /*transpose_a=*/true,
                  dtype == tessera::kFloat16 ? CUDA_R_16F : CUDA_R_16BF);
  if (!lt.ok) {
    state.SkipWithError("cuBLASLt found no algorithm");
    return;
  }
  const uint64_t before = sparse_launches();
  Tensor y = tessera::linear(x, ws);
  tessera::synchronize(cuda);
  const bool ran_sparse = sparse_launches() > before;
  lt.run(data_of(wd), data_of(x), data_of(y_ref));
  cudaDeviceSynchronize();
  const Tensor a = y.to("cpu").to(tessera::kFloat64), b = y_ref.to("cpu").to(tessera::kFloat64);
  double max_err = 0, max_mag = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    max_err = std::max(max_err, std::abs(a.data_ptr<double>()[i] - b.data_ptr<double>()[i]));
    max_mag = std::max(max_mag, std::abs(b.data_ptr<double>()[i]));
  }

  const double ref = seconds_per_call([&] { lt.run(data_of(wd), data_of(x), data_of(y_ref)); });
  int64_t iters = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    y = tessera::linear(x, ws);
    tessera::synchronize(cuda);
    ++iters;
  }
  const double mine =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(iters);
  state.counters["ratio"] = ref / mine;
  state.counters["cublaslt_us"] = ref * 1e6;
  state.counters["sparse_us"] = mine * 1e6;
  state.counters["dense_TFLOPS_equiv"] = 2.0 * double(batch) * kFeatures * kFeatures / mine * 1e-12;
  state.counters["sparse_kernel"] = ran_sparse ? 1 : 0;
  state.counters["max_rel_err"] = max_mag > 0 ? max_err / max_mag : max_err;
}

void batches(benchmark::internal::Benchmark* b) {
  for (int64_t batch : {16, 64, 256, 1024, 4096}) b->Arg(batch);
  b->Unit(benchmark::kMicrosecond)->UseRealTime()->Iterations(20);
}

BENCHMARK_CAPTURE(BM_SparseLinear, f16, tessera::kFloat16)->Apply(batches);
BENCHMARK_CAPTURE(BM_SparseLinear, bf16, tessera::kBFloat16)->Apply(batches);

}  // namespace

BENCHMARK_MAIN();
