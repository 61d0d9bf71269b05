// Generated C++ against the same ops run eagerly, in the same run (see README.md).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "tessera/compiler/codegen.h"
#include "tessera/error.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera;
using namespace tessera::compiler;
using namespace tessera::compiler::codegen;
namespace fs = std::filesystem;

const Device kCpu("cpu:0");

std::string bench_cache() {
  static std::string dir = (fs::temp_directory_path() / ("tessera_bench_compile_" + std::to_string(getpid()))).string();
  return dir;
}

struct Builder {
  ExportedProgram ep;
  ValueId input(const std::string& name, std::vector<SymSize> sizes) {
    ValueId v = ep.graph.add_value({DType::Float32, kCpu, std::move(sizes)}, name);
    ep.graph.nodes.push_back({NodeKind::Placeholder, name, {}, {v}});
    ep.signature.inputs.push_back({InputKind::UserInput, name, v});
    return v;
  }
  ValueId pw(const std::string& target, std::vector<Argument> args, ValueId like) {
    ValueId v = ep.graph.add_value(ep.graph.type(like));
    ep.graph.nodes.push_back({NodeKind::Call, target, std::move(args), {v}});
    return v;
  }
  void output(ValueId v) {
    ep.graph.nodes.push_back({NodeKind::Output, "", {Argument::tensor(v)}, {}});
    ep.signature.outputs.push_back({"out", v});
  }
};

// Six ops: sigmoid(tanh(x * y + 0.5) * 2 - x).
ExportedProgram six_op_chain(SymSize n) {
  Builder b;
  ValueId x = b.input("x", {n}), y = b.input("y", {n});
  ValueId a = b.pw("mul.Tensor", {Argument::tensor(x), Argument::tensor(y)}, x);
  ValueId c = b.pw("add.Tensor", {Argument::tensor(a), Argument::constant_value(0.5)}, x);
  ValueId d = b.pw("tanh", {Argument::tensor(c)}, x);
  ValueId e = b.pw("mul.Tensor", {Argument::tensor(d), Argument::constant_value(2.0)}, x);
  ValueId f = b.pw("sub.Tensor", {Argument::tensor(e), Argument::tensor(x)}, x);
  b.output(b.pw("sigmoid", {Argument::tensor(f)}, x));
  return b.ep;
}

Tensor six_op_eager(const Tensor& x, const Tensor& y, const Tensor& half, const Tensor& two) {
  return sigmoid(sub(mul(tanh(add(mul(x, y), half)), two), x));
}

// 100 alternating ops on a tiny tensor: per-call overhead.
ExportedProgram hundred_ops(int64_t n) {
  Builder b;
  ValueId x = b.input("x", {n});
  ValueId v = x;
  for (int i = 0; i < 100; ++i)
    v = i % 2 ? b.pw("mul.Tensor", {Argument::tensor(v), Argument::constant_value(0.999)}, x)
              : b.pw("add.Tensor", {Argument::tensor(v), Argument::tensor(x)}, x);
  b.output(v);
  return b.ep;
}

constexpr int64_t k16M = int64_t(1) << 24;

void BM_SixOpChain_Eager(benchmark::State& state) {
  Tensor x = randn({k16M}), y = randn({k16M});
  Tensor half = scalar_tensor(0.5), two = scalar_tensor(2.0);
  for (auto _ : state) benchmark::DoNotOptimize(six_op_eager(x, y, half, two));
  state.SetBytesProcessed(state.iterations() * k16M * 12);
}

void BM_SixOpChain_Generated(benchmark::State& state) {
  CodegenOptions o;
  o.cache_dir = bench_cache();
  CompiledGraph cg = CompiledGraph::compile(six_op_chain(SymSize::symbol("n")), o);
  Tensor x = randn({k16M}), y = randn({k16M});
  for (auto _ : state) benchmark::DoNotOptimize(cg.run({x, y}));
  state.SetBytesProcessed(state.iterations() * k16M * 12);
}

// The same artifact specialised to the size: a dynamic one should cost no more.
void BM_SixOpChain_GeneratedStatic(benchmark::State& state) {
  CodegenOptions o;
  o.cache_dir = bench_cache();
  CompiledGraph cg = CompiledGraph::compile(six_op_chain(k16M), o);
  Tensor x = randn({k16M}), y = randn({k16M});
  for (auto _ : state) benchmark::DoNotOptimize(cg.run({x, y}));
  state.SetBytesProcessed(state.iterations() * k16M * 12);
}

void BM_HundredTinyOps_Eager(benchmark::State& state) {
  Tensor x = randn({16});
  Tensor s = scalar_tensor(0.999);
  for (auto _ : state) {
    Tensor v = x;
    for (int i = 0; i < 100; ++i) v = i % 2 ? mul(v, s) : add(v, x);
    benchmark::DoNotOptimize(v);
  }
}

void BM_HundredTinyOps_Generated(benchmark::State& state) {
  CodegenOptions o;
  o.cache_dir = bench_cache();
  CompiledGraph cg = CompiledGraph::compile(hundred_ops(16), o);
  Tensor x = randn({16});
  for (auto _ : state) benchmark::DoNotOptimize(cg.run({x}));
}

// Cold: a fresh cache directory every iteration (generate + compile + load).
void BM_Compile_Cold(benchmark::State& state) {
  static int fresh = 0;
  for (auto _ : state) {
    CodegenOptions o;
    o.cache_dir = bench_cache() + "/cold" + std::to_string(fresh++);
    benchmark::DoNotOptimize(CompiledGraph::compile(six_op_chain(SymSize::symbol("n")), o));
  }
}

// Warm: the entry is in the cache (generate + check the entry's hash + dlopen).
void BM_Compile_Warm(benchmark::State& state) {
  CodegenOptions o;
  o.cache_dir = bench_cache() + "/warm";
  CompiledGraph::compile(six_op_chain(SymSize::symbol("n")), o);
  for (auto _ : state) {
    CompiledGraph cg = CompiledGraph::compile(six_op_chain(SymSize::symbol("n")), o);
    if (!cg.info().cache_hit) state.SkipWithError("expected a cache hit");
  }
}

}  // namespace

BENCHMARK(BM_SixOpChain_Eager)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SixOpChain_Generated)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SixOpChain_GeneratedStatic)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_HundredTinyOps_Eager)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_HundredTinyOps_Generated)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Compile_Cold)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_Compile_Warm)->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  fs::remove_all(bench_cache(), ec);
  return 0;
}
