// The int8 MLP end to end (docs/quantization.md): 3 linear layers with relu between them, 1024
// wide, batch 256, exported, quantized with the x86 quantizer, calibrated, converted and lowered to
// the int8 kernels, against the float32 program it came from, each run through
// ExportedProgram::run and timed interleaved in the same run (goal: >= 3x). Counter ratio_vs_f32:
// f32 time / int8 time, the medians of interleaved trials (ratio_min_vs_f32: of the fastest
// trials). The converted program before lowering (quantize / dequantize around float kernels, the
// reference numerics) is timed too, as ratio_reference_vs_f32.
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

// The float32 MLP: 3 linear layers, relu between them, `width` wide, for inputs [batch, width].
compiler::ExportedProgram export_mlp(int64_t batch, int64_t width) {
  manual_seed(11);
  std::vector<Tensor> w, b;
  ExportOptions opts;
  opts.input_names = {"x"};
  for (int l = 0; l < 3; ++l) {
    w.push_back(randn({width, width}) * (1.0 / 32.0));
    b.push_back(randn({width}) * 0.1);
    opts.parameters["fc" + std::to_string(l) + ".weight"] = w.back();
    opts.parameters["fc" + std::to_string(l) + ".bias"] = b.back();
  }
  return export_program(
      [&](const std::vector<Tensor>& in) {
        Tensor h = relu(linear(in[0], w[0], b[0]));
        h = relu(linear(h, w[1], b[1]));
        return std::vector<Tensor>{linear(h, w[2], b[2])};
      },
      {zeros({batch, width})}, opts);
}

// Medians of 15 interleaved trials of `int8` and `f32` into the state's counters.
template <typename A, typename B>
void time_interleaved(benchmark::State& state, A&& run_int8, B&& run_f32) {
  std::vector<double> int8_s, f32_s;
  run_int8();
  run_f32();
  for (int t = 0; t < 15; ++t) {
    f32_s.push_back(bench::trial(run_f32, 0.05));
    int8_s.push_back(bench::trial(run_int8, 0.05));
  }
  state.counters["int8_ms"] = median(int8_s) * 1e3;
  state.counters["f32_ms"] = median(f32_s) * 1e3;
  state.counters["ratio_vs_f32"] = median(f32_s) / median(int8_s);
  state.counters["ratio_min_vs_f32"] =
      *std::min_element(f32_s.begin(), f32_s.end()) / *std::min_element(int8_s.begin(), int8_s.end());
}

// args: batch, width
void BM_mlp_int8_vs_f32(benchmark::State& state) {
  const int64_t batch = state.range(0), width = state.range(1);
  compiler::ExportedProgram f32 = export_mlp(batch, width);
  auto quantizer = quantization::x86_quantizer({quantization::ObserverKind::MinMax});
  quantization::PreparedProgram prepared = quantization::prepare(f32, *quantizer);
  for (int i = 0; i < 4; ++i) quantization::calibrate(prepared, {randn({batch, width})});
  compiler::ExportedProgram reference = quantization::convert(prepared);
  compiler::ExportedProgram int8 = reference;
  if (quantization::lower_to_int8(int8) != 3) state.SkipWithError("the three linears were not lowered");
  Tensor x = randn({batch, width});
  auto run_int8 = [&] { benchmark::DoNotOptimize(int8.run({x})); };
  auto run_f32 = [&] { benchmark::DoNotOptimize(f32.run({x})); };
  auto run_reference = [&] { benchmark::DoNotOptimize(reference.run({x})); };
  double ref_s = 0, f32_again_s = 0;
  for (auto _ : state) {
    time_interleaved(state, run_int8, run_f32);
    bench::time_pair(run_reference, run_f32, &ref_s, &f32_again_s, 3, 0.1);
  }
  state.counters["ratio_reference_vs_f32"] = f32_again_s / ref_s;
}
BENCHMARK(BM_mlp_int8_vs_f32)->Args({256, 1024})->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same MLP quantized dynamically (quantize_dynamic, then lower_to_int8 to pack the weights once):
// activations quantized per call from their own range.
void BM_mlp_dynamic_int8_vs_f32(benchmark::State& state) {
  const int64_t batch = state.range(0), width = state.range(1);
  compiler::ExportedProgram f32 = export_mlp(batch, width);
  compiler::ExportedProgram int8 = quantization::quantize_dynamic(f32);
  if (quantization::lower_to_int8(int8) != 3) state.SkipWithError("the three packings were not folded");
  Tensor x = randn({batch, width});
  for (auto _ : state)
    time_interleaved(state, [&] { benchmark::DoNotOptimize(int8.run({x})); },
                     [&] { benchmark::DoNotOptimize(f32.run({x})); });
}
BENCHMARK(BM_mlp_dynamic_int8_vs_f32)->Args({256, 1024})->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
