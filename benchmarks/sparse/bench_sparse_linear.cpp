// The 2:4 CPU linear kernels (plugins/sparse, Note [CPU 2:4 layout]) against the dense linear of
// the CPU plugin (oneDNN) through tessera::linear, on the same pruned (4096, 4096) weights, f32 and
// bf16, batch 1..512, measured in the same run. Counter ratio_vs_dense = dense time / sparse time
// (goal >= 1.5 at batch 1-16; at batch 512 the runtime takes the dense path where sparse loses), and
// cpu_ratio_vs_dense, the same ratio of process CPU time (robust to other jobs on the machine).
// Bandwidth counters: weight_GBps (the sparse weight's bytes per sparse call), dense_weight_GBps
// (the dense weight's bytes per dense call) and memcpy_GBps (a one-thread memcpy of the sparse
// weight's bytes, counted as bytes read), the reference for what the memory system gives.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <cstring>
#include <memory>
#include <vector>

#include "bench_timing.h"
#include "cpu_layout.h"
#include "tessera/tessera.h"

namespace {

using tessera::bench::time_pair;

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// CPU seconds (all threads of the process) per call of `op` and `ref`, the fewest of `trials`
// interleaved trials: on a machine shared with other jobs, the wall-clock ratio also measures who
// got the cores; the CPU-time ratio does not (it still counts the cycles a thread waits on memory).
template <typename A, typename B>
void cpu_time_pair(A&& op, B&& ref, double* op_s, double* ref_s, int trials = 5, int reps = 5) {
  *op_s = *ref_s = 1e300;
  for (int t = 0; t < trials; ++t) {
    double t0 = process_cpu_seconds();
    for (int i = 0; i < reps; ++i) ref();
    double t1 = process_cpu_seconds();
    for (int i = 0; i < reps; ++i) op();
    double t2 = process_cpu_seconds();
    *ref_s = std::min(*ref_s, (t1 - t0) / reps);
    *op_s = std::min(*op_s, (t2 - t1) / reps);
  }
}
namespace sc = tessera::sparse_cpu;

constexpr int64_t kOut = 4096, kIn = 4096;

tessera::Tensor cast(const tessera::Tensor& t, tessera::DType dt) {
  if (t.dtype() == dt) return t;
  tessera::Tensor out = tessera::empty(t.sizes(), dt);
  out.copy_(t);
  return out;
}

// Keeps the two largest magnitudes of every group of four (a naive prune, on the host).
tessera::Tensor pruned_weight() {
  tessera::Tensor w = tessera::randn({kOut, kIn});
  float* p = w.data_ptr<float>();
  for (int64_t g = 0; g < kOut * kIn / 4; ++g) {
    float* q = p + 4 * g;
    int a = 0, b = 1;
    if (std::abs(q[b]) > std::abs(q[a])) std::swap(a, b);
    for (int i = 2; i < 4; ++i) {
      if (std::abs(q[i]) > std::abs(q[a])) { b = a; a = i; }
      else if (std::abs(q[i]) > std::abs(q[b])) b = i;
    }
    for (int i = 0; i < 4; ++i)
      if (i != a && i != b) q[i] = 0.f;
  }
  return w;
}

void BM_sparse_linear(benchmark::State& state, tessera::DType dtype) {
  const int64_t batch = state.range(0);
  tessera::manual_seed(3);
  const tessera::Tensor w = cast(pruned_weight(), dtype);
  const tessera::Tensor x = cast(tessera::randn({batch, kIn}), dtype);
  const tessera::Tensor bias = cast(tessera::randn({kOut}), dtype);
  const bool bf16 = dtype == tessera::kBFloat16;
  std::string error;
  std::unique_ptr<sc::CpuLayout, decltype(&std::free)> owned(
      sc::build_layout(w.raw_data_ptr(), bf16 ? sc::ElementType::BF16 : sc::ElementType::F32, kOut, kIn, &error),
      &std::free);
  if (!owned) {
    state.SkipWithError(error.c_str());
    return;
  }
  const sc::CpuLayout& layout = *owned;
  const sc::Isa isa = sc::detected_isa();
  tessera::Tensor y = tessera::empty({batch, kOut}, dtype);
  auto sparse = [&] {
    if (bf16)
      sc::linear_bf16(static_cast<const uint16_t*>(x.raw_data_ptr()), batch, layout,
                      static_cast<const uint16_t*>(bias.raw_data_ptr()), static_cast<uint16_t*>(y.raw_data_ptr()), isa);
    else
      sc::linear_f32(x.data_ptr<float>(), batch, layout, bias.data_ptr<float>(), y.data_ptr<float>(), isa);
    benchmark::DoNotOptimize(y.raw_data_ptr());
  };
  auto dense = [&] { benchmark::DoNotOptimize(tessera::linear(x, w, bias).raw_data_ptr()); };
  for (auto _ : state) sparse();
  double sparse_s = 0, dense_s = 0;
  time_pair(sparse, dense, &sparse_s, &dense_s, 5, 0.1);
  const double flop = 2.0 * double(batch) * double(kOut) * double(kIn);
  state.counters["sparse_GFLOPs"] = flop / sparse_s * 1e-9;
  state.counters["dense_GFLOPs"] = flop / dense_s * 1e-9;
  state.counters["weight_GBps"] = double(layout.bytes()) / sparse_s * 1e-9;
  state.counters["dense_weight_GBps"] = double(w.nbytes()) / dense_s * 1e-9;
  // The bandwidth reference: a memcpy of the sparse weight's bytes (one thread), counted as bytes read.
  std::vector<uint8_t> from(layout.bytes(), 1), to(layout.bytes(), 2);
  auto copy = [&] {
    std::memcpy(to.data(), from.data(), from.size());
    benchmark::DoNotOptimize(to.data());
  };
  double copy_s = 0, sparse_again_s = 0;
  time_pair(copy, sparse, &copy_s, &sparse_again_s, 3, 0.05);
  state.counters["memcpy_GBps"] = double(layout.bytes()) / copy_s * 1e-9;
  state.counters["ratio_vs_dense"] = dense_s / sparse_s;
  double sparse_cpu = 0, dense_cpu = 0;
  cpu_time_pair(sparse, dense, &sparse_cpu, &dense_cpu);
  state.counters["cpu_ratio_vs_dense"] = dense_cpu / sparse_cpu;
  state.SetLabel(std::string("isa=") + sc::isa_name(isa));
}

void batches(benchmark::internal::Benchmark* b) {
  for (int64_t n : {1, 4, 8, 16, 32, 64, 128, 512}) b->Arg(n);
  b->Unit(benchmark::kMicrosecond)->UseRealTime()->Iterations(3);
}

}  // namespace

BENCHMARK_CAPTURE(BM_sparse_linear, f32, tessera::kFloat32)->Apply(batches);
BENCHMARK_CAPTURE(BM_sparse_linear, bf16, tessera::kBFloat16)->Apply(batches);
BENCHMARK_MAIN();
