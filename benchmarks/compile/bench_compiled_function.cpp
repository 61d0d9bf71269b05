// tessera::compile against the same function run eagerly, in the same run (see README.md).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <vector>

#include "tessera/compiler/codegen.h"
#include "tessera/compiler/compile.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera;
namespace fs = std::filesystem;

std::string bench_cache() {
  static std::string dir =
      (fs::temp_directory_path() / ("tessera_bench_compiled_fn_" + std::to_string(getpid()))).string();
  return dir;
}

// sigmoid(tanh(x * y + 0.5) * 2 - x): six ops.
std::vector<Tensor> chain(const std::vector<Tensor>& in) {
  return {sigmoid(tanh(in[0] * in[1] + 0.5) * 2.0 - in[0])};
}

CompileOptions options() {
  CompileOptions o;
  o.cache_dir = bench_cache();
  return o;
}

const std::vector<Tensor>& tiny_inputs() {
  static const std::vector<Tensor> in{randn({4, 8}), randn({4, 8})};
  return in;
}

void BM_TinyChain_Eager(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(chain(tiny_inputs()));
}

// The generated function called directly: what a compiled call costs without its guards.
void BM_TinyChain_GeneratedNoGuards(benchmark::State& state) {
  compiler::codegen::CodegenOptions o;
  o.cache_dir = bench_cache();
  auto cg = compiler::codegen::CompiledGraph::compile(export_program(chain, tiny_inputs()), o);
  for (auto _ : state) benchmark::DoNotOptimize(cg.run(tiny_inputs()));
}

// A call of the compiled function: guard check, then the generated function.
void BM_TinyChain_Compiled(benchmark::State& state) {
  CompiledFunction f = compile(chain, options());
  f(tiny_inputs());
  for (auto _ : state) benchmark::DoNotOptimize(f(tiny_inputs()));
  if (f.stats().compiles != 1) state.SkipWithError("recompiled");
}

// The same through the interpreter backend.
void BM_TinyChain_CompiledInterpreter(benchmark::State& state) {
  CompileOptions o = options();
  o.backend = "interpreter";
  CompiledFunction f = compile(chain, o);
  f(tiny_inputs());
  for (auto _ : state) benchmark::DoNotOptimize(f(tiny_inputs()));
}

// sigmoid(gelu(x * 1.5 + 0.25) - x * 0.5) * tanh(x): three transcendentals the CPU plugin computes
// with its vector math (tessera/vecmath/vecmath.h), five cheap ops around them.
std::vector<Tensor> gelu_chain(const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  return {sigmoid(gelu(x * 1.5 + 0.25) - x * 0.5) * tanh(x)};
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The chain on 16M floats, eagerly and compiled (backend cpp), timed in interleaved rounds (one call
// of each per round, after one warm-up call of each) so that both see the same machine state; the
// counters give the medians and ratio_vs_eager = eager / compiled (goal >= 3), and the same ratio
// of process CPU time (all threads).
void BM_GeluChain16M(benchmark::State& state) {
  constexpr int kRounds = 9;
  const std::vector<Tensor> in{randn({int64_t(1) << 24})};
  CompiledFunction f = compile(gelu_chain, options());
  benchmark::DoNotOptimize(f(in));
  benchmark::DoNotOptimize(gelu_chain(in));
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    std::vector<double> eager_s, compiled_s, eager_cpu, compiled_cpu;
    for (int r = 0; r < kRounds; ++r) {
      const double c0 = process_cpu_seconds();
      auto t0 = Clock::now();
      benchmark::DoNotOptimize(gelu_chain(in));
      auto t1 = Clock::now();
      const double c1 = process_cpu_seconds();
      benchmark::DoNotOptimize(f(in));
      auto t2 = Clock::now();
      const double c2 = process_cpu_seconds();
      eager_s.push_back(std::chrono::duration<double>(t1 - t0).count());
      compiled_s.push_back(std::chrono::duration<double>(t2 - t1).count());
      eager_cpu.push_back(c1 - c0);
      compiled_cpu.push_back(c2 - c1);
    }
    const double eager = median(eager_s), compiled = median(compiled_s);
    state.SetIterationTime(compiled);
    state.counters["eager_ms"] = eager * 1e3;
    state.counters["compiled_ms"] = compiled * 1e3;
    state.counters["ratio_vs_eager"] = eager / compiled;
    // CPU time of all threads: the work itself, less sensitive to other load on the machine.
    state.counters["cpu_ratio_vs_eager"] = median(eager_cpu) / median(compiled_cpu);
  }
  if (f.stats().compiles != 1) state.SkipWithError("recompiled");
  if (f.artifacts().empty() || f.artifacts()[0].backend != "cpp") state.SkipWithError("not compiled to C++");
}

// 100 batch sizes through one compiled function (automatic dynamic): compiles and their time.
void BM_HundredBatchSizes(benchmark::State& state) {
  for (auto _ : state) {
    CompiledFunction f = compile(chain, options());
    for (int64_t b = 1; b <= 100; ++b) benchmark::DoNotOptimize(f({randn({b, 64}), randn({b, 64})}));
    const CompileStats s = f.stats();
    state.counters["compiles"] = s.compiles;
    state.counters["compile_ms"] = s.compile_seconds * 1e3;
    state.counters["disk_cache_hits"] = s.disk_cache_hits;
  }
}

}  // namespace

BENCHMARK(BM_TinyChain_Eager)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_TinyChain_GeneratedNoGuards)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_TinyChain_Compiled)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_TinyChain_CompiledInterpreter)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_GeluChain16M)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(1);
BENCHMARK(BM_HundredBatchSizes)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  fs::remove_all(bench_cache(), ec);
  return 0;
}
