// Per-op latency (issue #18): a + b on 1-element float32 CPU tensors through the cpu plugin's
// kernel, against tensor creation measured in the same run (see README.md).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <ctime>

#include "tessera/error.h"
#include "tessera/ops.h"

namespace {

using namespace tessera;

constexpr double kGoalNs = 150;  // issue #18

// Thread CPU time: the build machines are shared, so wall time includes other processes' turns.
double cpu_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

void BM_AddOneElement(benchmark::State& state) {
  Tensor a = empty({1}), b = empty({1});
  try {
    a.fill_(1.0);
    b.fill_(2.0);
    benchmark::DoNotOptimize(add(a, b).impl());
  } catch (const Error& e) {
    state.SkipWithError(e.what());  // no cpu plugin: build tessera_cpu, or check TESSERA_LOG=plugins
    return;
  }
  constexpr int64_t kRef = 1000000;
  double t0 = cpu_now_ns();
  for (int64_t i = 0; i < kRef; ++i) {
    Tensor t = empty({1});
    benchmark::DoNotOptimize(t.impl());
  }
  const double empty_ns = (cpu_now_ns() - t0) / double(kRef);
  int64_t iterations = 0;
  t0 = cpu_now_ns();
  for (auto _ : state) {
    Tensor r = add(a, b);
    benchmark::DoNotOptimize(r.impl());
    ++iterations;
  }
  const double add_ns = (cpu_now_ns() - t0) / double(iterations);
  state.counters["add_ns"] = add_ns;
  state.counters["empty_ns"] = empty_ns;
  state.counters["x_empty"] = add_ns / empty_ns;
  state.counters["x_goal"] = add_ns / kGoalNs;
}
BENCHMARK(BM_AddOneElement);

}  // namespace

int main(int argc, char** argv) {
  ::setenv("TESSERA_PLUGINS_SELECT", "cpu", 0);  // the kernel under test; nothing else loads
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
