// The int8 conv2d end to end (docs/quantization.md): a ResNet-style block, conv3x3 -> relu ->
// conv3x3 -> add(input) -> relu, 64 channels, 56 x 56, exported, quantized with the x86 quantizer,
// calibrated, converted and lowered to two _quantized_conv2d, against the float32 program it came
// from, both through ExportedProgram::run, interleaved in one run. Counter ratio_vs_f32: f32 time /
// int8 time, medians of interleaved trials.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "bench_timing.h"
#include "tessera/compiler/export.h"
#include "tessera/compiler/quantize.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// args: batch, channels, size
void BM_conv_block_int8_vs_f32(benchmark::State& state) {
  const int64_t batch = state.range(0), ch = state.range(1), hw = state.range(2);
  manual_seed(5);
  Tensor w1 = randn({ch, ch, 3, 3}) * (1.0 / 24.0), b1 = randn({ch}) * 0.1;
  Tensor w2 = randn({ch, ch, 3, 3}) * (1.0 / 24.0), b2 = randn({ch}) * 0.1;
  ExportOptions opts;
  opts.input_names = {"x"};
  opts.parameters = {{"c1.weight", w1}, {"c1.bias", b1}, {"c2.weight", w2}, {"c2.bias", b2}};
  compiler::ExportedProgram f32 = export_program(
      [&](const std::vector<Tensor>& in) {
        Tensor h = relu(conv2d(in[0], w1, b1, {1, 1}, {1, 1}));
        return std::vector<Tensor>{relu(add(conv2d(h, w2, b2, {1, 1}, {1, 1}), in[0]))};
      },
      {zeros({batch, ch, hw, hw})}, opts);
  auto quantizer = quantization::x86_quantizer({quantization::ObserverKind::MinMax});
  quantization::PreparedProgram prepared = quantization::prepare(f32, *quantizer);
  for (int i = 0; i < 2; ++i) quantization::calibrate(prepared, {randn({batch, ch, hw, hw})});
  compiler::ExportedProgram int8 = quantization::convert(prepared);
  if (quantization::lower_to_int8(int8) != 2) state.SkipWithError("the two convolutions were not lowered");
  Tensor x = randn({batch, ch, hw, hw});
  auto run_int8 = [&] { benchmark::DoNotOptimize(int8.run({x})); };
  auto run_f32 = [&] { benchmark::DoNotOptimize(f32.run({x})); };
  std::vector<double> int8_s, f32_s;
  for (auto _ : state) {
    run_int8();
    run_f32();
    for (int t = 0; t < 9; ++t) {
      f32_s.push_back(bench::trial(run_f32, 0.05));
      int8_s.push_back(bench::trial(run_int8, 0.05));
    }
  }
  state.counters["int8_ms"] = median(int8_s) * 1e3;
  state.counters["f32_ms"] = median(f32_s) * 1e3;
  state.counters["ratio_vs_f32"] = median(f32_s) / median(int8_s);
}
BENCHMARK(BM_conv_block_int8_vs_f32)->Args({8, 64, 56})->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
