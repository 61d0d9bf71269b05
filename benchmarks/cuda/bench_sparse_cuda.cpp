// 2:4 semi-structured linear on cuda (the sparse_cuda plugin, docs/sparsity.md) against dense
// cuBLASLt called directly on the same (unpruned-layout, pruned-values) weight, in the same run:
// y (batch, 4096) = x (batch, 4096) W^T, W 4096 x 4096, f16 and bf16, batch 16..4096.
// BM_SparseLinear is what a user gets (the automatic rule of Note [2:4 on cuSPARSELt]);
// BM_SparseLinearPath forces each sparse path (TESSERA_SPARSE_CUDA_PATH=cusparselt / kernel), the
// figures that set kCusparseLtMinBatch. Reports `ratio` = cuBLASLt time / sparse time (goal >= 1.3
// from batch 1024, never below 1.0 for the automatic rule), `path` (0 the dense path, 1 the
// plugin's kernel, 2 cuSPARSELt: what the timed call ran) and `max_rel_err` of the result against
// cuBLASLt's (relative to the largest |y|). Without a CUDA device every case is skipped with the
// reason.
#include <benchmark/benchmark.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
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

tessera_sparse_cuda_stats_t sparse_stats() {
  tessera_sparse_cuda_stats_t out{};
  if (auto fn = tessera::plugin_extension<tessera_ext_sparse_cuda_stats_fn_t>("sparse_cuda",
                                                                              TESSERA_EXT_SPARSE_CUDA_STATS))
    fn(nullptr, &out);
  return out;
}

// Which path the calls between `a` and `b` ran: 2 cuSPARSELt, 1 the plugin's kernel, 0 dense.
int path_between(const tessera_sparse_cuda_stats_t& a, const tessera_sparse_cuda_stats_t& b) {
  if (b.cusparselt_matmuls > a.cusparselt_matmuls) return 2;
  if (b.kernel_launches > a.kernel_launches) return 1;
  return 0;
}

// `path`: null for the automatic rule, else the value of TESSERA_SPARSE_CUDA_PATH.
void BM_SparseLinear(benchmark::State& state, DType dtype, const char* path) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  if (path)
    setenv("TESSERA_SPARSE_CUDA_PATH", path, 1);
  else
    unsetenv("TESSERA_SPARSE_CUDA_PATH");
  const int64_t batch = state.range(0);
  const tessera::Device cuda("cuda:0");
  // One weight per dtype for every case (built on the host once: 16M values to prune); its
  // compressed and dense forms are cached on it after the first call, as in real use.
  struct Weights {
    Tensor ws, wd;
  };
  static std::map<int, Weights> weights;
  if (!weights.count(int(dtype))) {
    tessera::manual_seed(7);
    const Tensor w = sp::prune_2_4(tessera::randn({kFeatures, kFeatures}).to(dtype));
    weights[int(dtype)] = Weights{sp::to_sparse_semi_structured(w).to(cuda), w.to(cuda)};
  }
  const Tensor ws = weights[int(dtype)].ws, wd = weights[int(dtype)].wd;
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
  const tessera_sparse_cuda_stats_t before = sparse_stats();
  Tensor y = tessera::linear(x, ws);
  tessera::synchronize(cuda);
  const int ran = path_between(before, sparse_stats());
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
  state.counters["path"] = ran;
  state.counters["max_rel_err"] = max_mag > 0 ? max_err / max_mag : max_err;
}

void batches(benchmark::internal::Benchmark* b) {
  for (int64_t batch : {16, 64, 256, 1024, 4096}) b->Arg(batch);
  b->Unit(benchmark::kMicrosecond)->UseRealTime()->Iterations(20);
}

BENCHMARK_CAPTURE(BM_SparseLinear, f16, tessera::kFloat16, nullptr)->Apply(batches);
BENCHMARK_CAPTURE(BM_SparseLinear, bf16, tessera::kBFloat16, nullptr)->Apply(batches);
BENCHMARK_CAPTURE(BM_SparseLinear, f16_cusparselt, tessera::kFloat16, "cusparselt")->Apply(batches);
BENCHMARK_CAPTURE(BM_SparseLinear, bf16_cusparselt, tessera::kBFloat16, "cusparselt")->Apply(batches);
BENCHMARK_CAPTURE(BM_SparseLinear, f16_kernel, tessera::kFloat16, "kernel")->Apply(batches);

}  // namespace

BENCHMARK_MAIN();
