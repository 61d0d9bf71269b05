// softmax, log_softmax, layer_norm and rms_norm over 16M f32 elements (rows of 1024) against
// memcpy bandwidth on the same byte count (bytes read + bytes written), measured in the same
// benchmark. Counter ratio_vs_memcpy: the op's bandwidth / memcpy's (goal >= 0.8).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "bench_timing.h"
#include "tessera/tessera.h"

namespace {

using tessera::bench::time_pair;

constexpr int64_t kRows = 16384, kCols = 1024;  // 16M elements, 64 MiB in f32



void run(benchmark::State& state, const std::function<tessera::Tensor(const tessera::Tensor&)>& op) {
  tessera::manual_seed(2);
  tessera::Tensor x = tessera::randn({kRows, kCols});
  const size_t bytes = size_t(x.nbytes());
  // memcpy between two buffers touched beforehand (no page faults in the timing).
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  benchmark::DoNotOptimize(op(x));
  for (auto _ : state) {
    tessera::Tensor y = op(x);
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
  double op_s = 0, copy_s = 0;
  time_pair([&] { benchmark::DoNotOptimize(op(x)); },
            [&] {
              std::memcpy(dst.data(), src.data(), bytes);
              benchmark::DoNotOptimize(dst.data());
            },
            &op_s, &copy_s);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * bytes));
  state.counters["op_GBps"] = 2.0 * double(bytes) / op_s * 1e-9;
  state.counters["memcpy_GBps"] = 2.0 * double(bytes) / copy_s * 1e-9;
  state.counters["ratio_vs_memcpy"] = copy_s / op_s;
}

void BM_softmax(benchmark::State& s) { run(s, [](const tessera::Tensor& x) { return tessera::softmax(x, -1); }); }
void BM_log_softmax(benchmark::State& s) { run(s, [](const tessera::Tensor& x) { return tessera::log_softmax(x, -1); }); }
void BM_layer_norm(benchmark::State& s) {
  tessera::Tensor w = tessera::randn({kCols}), b = tessera::randn({kCols});
  run(s, [&](const tessera::Tensor& x) { return tessera::layer_norm(x, {kCols}, w, b); });
}
void BM_rms_norm(benchmark::State& s) {
  tessera::Tensor w = tessera::randn({kCols});
  run(s, [&](const tessera::Tensor& x) { return tessera::rms_norm(x, {kCols}, w); });
}

}  // namespace

BENCHMARK(BM_softmax)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_log_softmax)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_layer_norm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_rms_norm)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
