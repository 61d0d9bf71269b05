// What the machine load estimate (Note [Machine load estimate] in plugins/cpu/src/machine_load.h)
// costs. BM_EstimateQuiet: one MachineLoadEstimate::quiet() call, what an op between the quiet and
// the loaded cut pays (a refresh every 50 ms included), with ratio_vs_clock = the time of one
// std::chrono::steady_clock::now() read, measured in the same run, over it (> 1: cheaper).
// BM_SampleLoad: one refresh's work (read and parse /proc/stat, read two clocks), with its share of
// one core at one refresh per kLoadRefreshNs.
#include <benchmark/benchmark.h>

#include <chrono>

#include "machine_load.h"

namespace {

using tessera::cpu::kLoadRefreshNs;
using tessera::cpu::MachineLoadEstimate;

// Wall nanoseconds per call of f over n calls.
template <typename F>
double ns_per_call(int64_t n, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) f();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / double(n);
}

void BM_EstimateQuiet(benchmark::State& state) {
  MachineLoadEstimate estimate;
  constexpr int64_t kCalls = 1 << 22;  // about 40 ms: a refresh or so per trial
  double estimate_ns = 0, clock_ns = 0;
  for (auto _ : state) {
    estimate_ns = ns_per_call(kCalls, [&] { benchmark::DoNotOptimize(estimate.quiet()); });
    clock_ns = ns_per_call(kCalls, [] { benchmark::DoNotOptimize(std::chrono::steady_clock::now()); });
  }
  state.counters["estimate_ns"] = estimate_ns;
  state.counters["clock_read_ns"] = clock_ns;
  state.counters["ratio_vs_clock"] = clock_ns / estimate_ns;
}

void BM_SampleLoad(benchmark::State& state) {
  double sample_ns = 0;
  for (auto _ : state)
    sample_ns = ns_per_call(1000, [] { benchmark::DoNotOptimize(tessera::cpu::sample_load()); });
  state.counters["sample_us"] = sample_ns * 1e-3;
  // Time per refresh / time between refreshes: the share of one core the refreshes take.
  state.counters["core_share"] = sample_ns / double(kLoadRefreshNs);
}

BENCHMARK(BM_EstimateQuiet)->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SampleLoad)->Iterations(5)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
