// The int8 linear (uint8 activations x int8 per-channel weights, packed once) against the float32
// linear of the same shape (tessera::linear, oneDNN), timed interleaved in the same run (goal: the
// int8 layer >= 4x faster at 4096 x 4096, batch 128). Counter ratio_vs_f32: f32 time / int8 time.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "bench_timing.h"
#include "tessera/quantization.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera;

// args: batch, in_features, out_features, out dtype (0: uint8 requantised, 1: float32)
void BM_linear_int8_vs_f32(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const bool f32_out = state.range(3) != 0;
  manual_seed(7);
  Tensor xf = randn({m, k}), wf = randn({n, k}) * 0.05, bias = randn({n});
  // Any int8 data does: the kernels' speed does not depend on the values.
  Tensor xq = (rand({m, k}) * 255.0).to(kUInt8);
  Tensor wq = (rand({n, k}) * 254.0 - 127.0).to(kInt8);
  Tensor ws = full({n}, 0.01);
  quantization::PackedLinearWeight packed(wq, ws);
  auto op = [&] {
    Tensor y = quantization::linear_int8(xq, 0.02, 128, packed, bias, 0.1, 120, false, f32_out ? kFloat32 : kUInt8);
    benchmark::DoNotOptimize(y);
  };
  auto ref = [&] {
    Tensor y = linear(xf, wf, bias);
    benchmark::DoNotOptimize(y);
  };
  double op_s = 0, ref_s = 0;
  for (auto _ : state) bench::time_pair(op, ref, &op_s, &ref_s, 9, 0.1);
  const double ops = 2.0 * double(m) * double(k) * double(n);
  state.counters["int8_GOPs"] = ops / op_s * 1e-9;
  state.counters["f32_GFLOPs"] = ops / ref_s * 1e-9;
  state.counters["ratio_vs_f32"] = ref_s / op_s;
}
BENCHMARK(BM_linear_int8_vs_f32)
    ->Args({128, 4096, 4096, 0})
    ->Args({128, 4096, 4096, 1})
    ->Args({256, 1024, 1024, 0})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
