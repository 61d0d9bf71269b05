// Where a second thread starts to pay off, per op kind (Note [Grain size] in
// plugins/cpu/src/grain.h). Each benchmark times one op at one size twice, interleaved: on one
// thread and on every thread. The process runs with TESSERA_CPU_GRAIN=off (set here before the
// plugin loads), so the plugin splits every loop and hands oneDNN every thread the calling thread
// allows, and the thread count is the calling thread's OpenMP ICV (omp_set_num_threads), which the
// plugin reads per call. Counters: work (elements or flops), t1_us, tall_us and
// gain_all_threads = t1 / tall (> 1: the threads win; not named ratio_* or speedup*, so that
// tools/perf/plot.py leaves these hundred points out of the summary plot). After the run a summary
// prints, per kind, the least work from which all threads win by 5% at that size and every larger
// one; grain.h's constants are chosen from it (grain = that work / 2), and docs/performance.md
// ("Grain size") keeps the table.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench_timing.h"
#include "tessera/tessera.h"

namespace {

using tessera::Tensor;

struct Point {
  double work, t1, tall;
};
std::map<std::string, std::vector<Point>>& results() {
  static std::map<std::string, std::vector<Point>> r;
  return r;
}

Tensor randn_as(std::vector<int64_t> sizes, tessera::DType dt) {
  Tensor t = tessera::randn(sizes);
  if (dt == tessera::kFloat32) return t;
  Tensor out = tessera::empty(sizes, dt);
  out.copy_(t);
  return out;
}

// Times `op` on one thread and on all, interleaved; records and reports the pair.
void measure(benchmark::State& state, const std::string& kind, double work, const std::function<void()>& op) {
  const int all = omp_get_max_threads();
  double t1 = 0, tall = 0;
  auto one = [&] {
    omp_set_num_threads(1);
    op();
    omp_set_num_threads(all);
  };
  for (auto _ : state) tessera::bench::time_pair(one, op, &t1, &tall, 15, 0.01);
  results()[kind].push_back({work, t1, tall});
  state.counters["work"] = work;
  state.counters["t1_us"] = t1 * 1e6;
  state.counters["tall_us"] = tall * 1e6;
  state.counters["gain_all_threads"] = t1 / tall;
}

void BM_add(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = tessera::randn({n}), b = tessera::randn({n});
  measure(state, "add", double(n), [&] { benchmark::DoNotOptimize(tessera::add(a, b)); });
}
void BM_exp(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = tessera::randn({n});
  measure(state, "exp", double(n), [&] { benchmark::DoNotOptimize(tessera::exp(a)); });
}
void BM_sigmoid(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = tessera::randn({n});
  measure(state, "sigmoid", double(n), [&] { benchmark::DoNotOptimize(tessera::sigmoid(a)); });
}
void BM_sum(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = tessera::randn({n});
  measure(state, "sum", double(n), [&] { benchmark::DoNotOptimize(tessera::sum(a)); });
}
// Rows of 256 elements.
void BM_softmax(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const Tensor a = tessera::randn({rows, 256});
  measure(state, "softmax", double(rows * 256), [&] { benchmark::DoNotOptimize(tessera::softmax(a, 1)); });
}
void BM_layer_norm(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const Tensor a = tessera::randn({rows, 256});
  measure(state, "layer_norm", double(rows * 256),
          [&] { benchmark::DoNotOptimize(tessera::layer_norm(a, {256})); });
}
void BM_matmul(benchmark::State& state, tessera::DType dt, const char* kind) {
  const int64_t n = state.range(0);
  const Tensor a = randn_as({n, n}, dt), b = randn_as({n, n}, dt);
  measure(state, kind, 2.0 * double(n) * double(n) * double(n),
          [&] { benchmark::DoNotOptimize(tessera::matmul(a, b)); });
}
// x [m, 512] through a 512 -> 512 layer with bias (the weight is reused: packed after two calls).
void BM_linear(benchmark::State& state) {
  const int64_t m = state.range(0);
  const Tensor x = tessera::randn({m, 512}), w = tessera::randn({512, 512}), bias = tessera::randn({512});
  measure(state, "linear f32", 2.0 * double(m) * 512 * 512,
          [&] { benchmark::DoNotOptimize(tessera::linear(x, w, bias)); });
}
// [1, 16, s, s] through 16 -> 16 channels, 3x3, padding 1.
void BM_conv2d(benchmark::State& state) {
  const int64_t s = state.range(0);
  const Tensor x = tessera::randn({1, 16, s, s}), w = tessera::randn({16, 16, 3, 3});
  measure(state, "conv2d f32", 2.0 * 16 * 16 * 9 * double(s) * double(s), [&] {
    benchmark::DoNotOptimize(tessera::conv2d(x, w, std::nullopt, {1, 1}, {1, 1}));
  });
}
// [1, 4, l, 64] self-attention (flash path).
void BM_sdpa(benchmark::State& state) {
  const int64_t l = state.range(0);
  const Tensor q = tessera::randn({1, 4, l, 64}), k = tessera::randn({1, 4, l, 64}),
               v = tessera::randn({1, 4, l, 64});
  measure(state, "sdpa f32", 2.0 * 4 * double(l) * double(l) * 128,
          [&] { benchmark::DoNotOptimize(tessera::scaled_dot_product_attention(q, k, v)); });
}

void sweep(benchmark::internal::Benchmark* b, int64_t lo, int64_t hi, int64_t mult) {
  for (int64_t x = lo; x <= hi; x *= mult) b->Arg(x);
  b->Iterations(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
}

}  // namespace

BENCHMARK(BM_add)->Apply([](auto* b) { sweep(b, 1 << 10, 1 << 22, 2); });
BENCHMARK(BM_exp)->Apply([](auto* b) { sweep(b, 1 << 8, 1 << 20, 2); });
BENCHMARK(BM_sigmoid)->Apply([](auto* b) { sweep(b, 1 << 8, 1 << 20, 2); });
BENCHMARK(BM_sum)->Apply([](auto* b) { sweep(b, 1 << 10, 1 << 22, 2); });
BENCHMARK(BM_softmax)->Apply([](auto* b) { sweep(b, 1, 4096, 2); });
BENCHMARK(BM_layer_norm)->Apply([](auto* b) { sweep(b, 1, 4096, 2); });
BENCHMARK_CAPTURE(BM_matmul, f32, tessera::kFloat32, "matmul f32")->Apply([](auto* b) {
  sweep(b, 16, 512, 2);
});
BENCHMARK_CAPTURE(BM_matmul, bf16, tessera::kBFloat16, "matmul bf16")->Apply([](auto* b) {
  sweep(b, 16, 512, 2);
});
BENCHMARK(BM_linear)->Apply([](auto* b) { sweep(b, 1, 512, 2); });
BENCHMARK(BM_conv2d)->Apply([](auto* b) { sweep(b, 4, 128, 2); });
BENCHMARK(BM_sdpa)->Apply([](auto* b) { sweep(b, 16, 1024, 2); });

int main(int argc, char** argv) {
  setenv("TESSERA_CPU_GRAIN", "off", 1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::printf("\n%d threads. Least work from which every larger size runs >= 1.05x faster on all threads:\n",
              omp_get_max_threads());
  for (const auto& [kind, points] : results()) {
    double cut = -1;
    for (auto it = points.rbegin(); it != points.rend() && it->t1 / it->tall >= 1.05; ++it) cut = it->work;
    if (cut < 0)
      std::printf("  %-12s never (largest size: %.3g, gain %.2f)\n", kind.c_str(), points.back().work,
                  points.back().t1 / points.back().tall);
    else
      std::printf("  %-12s %.3g  (grain = %.3g)\n", kind.c_str(), cut, cut / 2);
  }
  return 0;
}
