// Elementwise throughput of the CPU backend.
// 1. add / mul / exp / sigmoid / gelu (erf and tanh forms) on 16M f32 elements through the public API,
//    against memcpy of the same number of bytes (read + written) measured in the same run: counter
//    ratio_vs_memcpy (1.0 = the op moves its bytes as fast as memcpy does), and against a memcpy split
//    over every core: counter ratio_vs_memcpy_all_cores. The in-place add_ / mul_ also report
//    ratio_vs_out_of_place: the fastest of nine out-of-place calls on the same tensors over the fastest
//    of nine in-place calls, the two alternating (>= 1: in place is at least as fast).
// 2. The hot transcendental kernels (exp, tanh, gelu, sigmoid) called directly through the per-ISA
//    tables on a cache-resident buffer: counter speedup_vs_default (that level against the baseline
//    x86-64 copy of the same kernel, measured in the same run).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "tessera/tessera.h"
#include "vec_kernels.h"

namespace {

constexpr int64_t kN = int64_t(1) << 24;  // 16M elements

// Seconds for one memcpy of `bytes` (best of a few, buffers touched beforehand), split over
// `threads` threads (each copies its slice) so that the op, which uses every core, is also held
// against a copy that uses every core.
double memcpy_seconds(size_t bytes, unsigned threads = 1) {
  static std::vector<char> src, dst;
  if (src.size() < bytes) {
    src.assign(bytes, 1);
    dst.assign(bytes, 0);
  }
  auto copy_slice = [&](unsigned t) {
    const size_t begin = bytes * t / threads, end = bytes * (t + 1) / threads;
    std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
  };
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(copy_slice, t);
    copy_slice(0);
    for (auto& th : pool) th.join();
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

tessera::Tensor random_f32(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 g(42);
  std::uniform_real_distribution<float> d(-3, 3);
  for (auto& x : v) x = d(g);
  return tessera::tensor(v, {n});
}

// Seconds of one call of op.
template <typename F>
double seconds(F op) {
  const auto t0 = std::chrono::steady_clock::now();
  tessera::Tensor out = op();
  benchmark::DoNotOptimize(out.raw_data_ptr());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// (fastest call of a) / (fastest call of b), the calls alternating so that both see the same load.
template <typename A, typename B>
double best_ratio(A a, B b) {
  double best_a = 1e30, best_b = 1e30;
  for (int r = 0; r < 9; ++r) {
    best_a = std::min(best_a, seconds(a));
    best_b = std::min(best_b, seconds(b));
  }
  return best_a / best_b;
}

// bytes_moved: bytes read + written by the op; memcpy copies half of them (it reads and writes).
template <typename F>
void run_op(benchmark::State& state, int64_t bytes_moved, F op) {
  const double ref = memcpy_seconds(size_t(bytes_moved / 2));
  const double ref_all = memcpy_seconds(size_t(bytes_moved / 2), std::max(1u, std::thread::hardware_concurrency()));
  double total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    tessera::Tensor out = op();
    benchmark::DoNotOptimize(out.raw_data_ptr());
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  state.SetBytesProcessed(state.iterations() * bytes_moved);
  state.counters["memcpy_GBps"] = double(bytes_moved) / ref / 1e9;
  state.counters["op_GBps"] = double(bytes_moved) * double(state.iterations()) / total / 1e9;
  // (bytes / op time) / (bytes / memcpy time)
  state.counters["ratio_vs_memcpy"] = ref / (total / double(state.iterations()));
  // The same against a memcpy that uses every core.
  state.counters["ratio_vs_memcpy_all_cores"] = ref_all / (total / double(state.iterations()));
}

void BM_Add(benchmark::State& state) {
  const tessera::Tensor a = random_f32(kN), b = random_f32(kN);
  run_op(state, 3 * kN * 4, [&] { return tessera::add(a, b); });
}
void BM_Mul(benchmark::State& state) {
  const tessera::Tensor a = random_f32(kN), b = random_f32(kN);
  run_op(state, 3 * kN * 4, [&] { return tessera::mul(a, b); });
}
void BM_Gelu(benchmark::State& state) {
  const tessera::Tensor a = random_f32(kN);
  run_op(state, 2 * kN * 4, [&] { return tessera::gelu(a); });
}
void BM_GeluTanh(benchmark::State& state) {
  const tessera::Tensor a = random_f32(kN);
  run_op(state, 2 * kN * 4, [&] { return tessera::gelu(a, "tanh"); });
}
void BM_Exp(benchmark::State& state) {
  const tessera::Tensor a = random_f32(kN);
  run_op(state, 2 * kN * 4, [&] { return tessera::exp(a); });
}
void BM_Sigmoid(benchmark::State& state) {
  const tessera::Tensor a = random_f32(kN);
  run_op(state, 2 * kN * 4, [&] { return tessera::sigmoid(a); });
}
// acc += small (values stay finite over many calls).
void BM_AddInPlace(benchmark::State& state) {
  tessera::Tensor acc = random_f32(kN);
  const tessera::Tensor small = tessera::mul(random_f32(kN), tessera::full({kN}, 1e-6));
  auto in_place = [&] { return acc.add_(small); };
  run_op(state, 3 * kN * 4, in_place);
  state.counters["ratio_vs_out_of_place"] = best_ratio([&] { return tessera::add(acc, small); }, in_place);
}
// acc *= ones.
void BM_MulInPlace(benchmark::State& state) {
  tessera::Tensor acc = random_f32(kN);
  const tessera::Tensor ones = tessera::full({kN}, 1.0);
  auto in_place = [&] { return acc.mul_(ones); };
  run_op(state, 3 * kN * 4, in_place);
  state.counters["ratio_vs_out_of_place"] = best_ratio([&] { return tessera::mul(acc, ones); }, in_place);
}
void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = size_t(kN) * 4;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * int64_t(bytes) * 2);
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime()->UseRealTime();
BENCHMARK(BM_Add)->Unit(benchmark::kMillisecond)->UseRealTime()->UseRealTime();
BENCHMARK(BM_Mul)->Unit(benchmark::kMillisecond)->UseRealTime()->UseRealTime();
BENCHMARK(BM_Gelu)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GeluTanh)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Exp)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Sigmoid)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AddInPlace)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MulInPlace)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---------------------------------------------------------------- per-ISA kernels

constexpr int64_t kIsaN = 1 << 14;  // 64 KiB per buffer: stays in L2

double unary_seconds(tessera::cpu::UnaryF32 fn, const float* x, float* y) {
  double best = 1e30;
  for (int r = 0; r < 20; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(x, y, kIsaN);
    benchmark::DoNotOptimize(y);
    benchmark::ClobberMemory();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void BM_UnaryIsa(benchmark::State& state) {
  using namespace tessera::cpu;
  const UnaryOp op = UnaryOp(state.range(0));
  const Capability level = Capability(state.range(1));
  if (int(level) > int(max_capability(detect_cpu_features()))) {
    state.SkipWithError("this CPU lacks the level");
    return;
  }
  std::vector<float> x(kIsaN), y(kIsaN);
  std::mt19937 g(7);
  std::uniform_real_distribution<float> d(-5, 5);
  for (auto& v : x) v = d(g);
  const UnaryF32 fn = kernels_for(level)->unary_f32[int(op)];
  const UnaryF32 base = kernels_for(Capability::Default)->unary_f32[int(op)];
  const double base_s = unary_seconds(base, x.data(), y.data());
  const double this_s = unary_seconds(fn, x.data(), y.data());
  for (auto _ : state) {
    fn(x.data(), y.data(), kIsaN);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kIsaN);
  state.counters["speedup_vs_default"] = base_s / this_s;
  state.SetLabel(std::string(capability_name(level)));
}

void isa_args(benchmark::internal::Benchmark* b) {
  using tessera::cpu::UnaryOp;
  for (UnaryOp op : {UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Gelu, UnaryOp::GeluTanh, UnaryOp::Sigmoid})
    for (int level = 0; level < 3; ++level) b->Args({int64_t(op), level});
  b->ArgNames({"op", "level"});
}
BENCHMARK(BM_UnaryIsa)->Apply(isa_args);

}  // namespace

BENCHMARK_MAIN();
