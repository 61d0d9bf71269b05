// scaled_dot_product_attention on the CPU: the flash kernel (the op's default path) against the
// unfused math path (the plugin op _sdpa_math, called boxed), at sequence 512 / 2048 / 4096, head
// dim 64, batch 1 x 8 heads, f32 and bf16, no mask. Each benchmark also measures the peak heap
// growth of one call after warm-up (Note [Heap accounting]). The flash benchmarks, registered after
// the math ones, also time the math path (interleaved trials) and report speedup_vs_math (goal:
// >= 1.5 at 2048 in f32, >= 2 in bf16) and mem_ratio_math_over_flash (goal: >= 10 at 4096).
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <algorithm>

#include "tessera/dispatcher.h"
#include "tessera/tessera.h"
#include "bench_timing.h"

// Note [Heap accounting]
// This program replaces malloc and friends (exported from the executable, so that libtessera, the
// plugin and oneDNN resolve to them) with counting wrappers over glibc's __libc_* functions. The
// live byte count uses malloc_usable_size; the peak is a CAS maximum. Memory that a caching
// allocator keeps between calls does not count again, so the figure is the extra heap a call
// needs beyond what warm-up left allocated (for these ops: the workspace and score buffers).
extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

namespace {

// `t` converted to `dt` through copy_ (a casting copy into a fresh tensor).
tessera::Tensor cast(const tessera::Tensor& t, tessera::DType dt) {
  if (t.dtype() == dt) return t;
  tessera::Tensor out = tessera::empty(t.sizes(), dt);
  out.copy_(t);
  return out;
}
std::atomic<int64_t> g_live{0}, g_peak{0};
inline void count_alloc(void* p) {
  if (!p) return;
  const int64_t now = g_live.fetch_add(int64_t(malloc_usable_size(p)), std::memory_order_relaxed) +
                      int64_t(malloc_usable_size(p));
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}
inline void count_free(void* p) {
  if (p) g_live.fetch_sub(int64_t(malloc_usable_size(p)), std::memory_order_relaxed);
}
}  // namespace

#define TESSERA_BENCH_EXPORT __attribute__((visibility("default")))
extern "C" {
TESSERA_BENCH_EXPORT void* malloc(size_t n) {
  void* p = __libc_malloc(n);
  count_alloc(p);
  return p;
}
TESSERA_BENCH_EXPORT void free(void* p) {
  count_free(p);
  __libc_free(p);
}
TESSERA_BENCH_EXPORT void* calloc(size_t a, size_t b) {
  void* p = __libc_calloc(a, b);
  count_alloc(p);
  return p;
}
TESSERA_BENCH_EXPORT void* realloc(void* p, size_t n) {
  count_free(p);
  void* q = __libc_realloc(p, n);
  if (q) count_alloc(q);
  else if (p && n) count_alloc(p);  // failed: the old block is still there
  return q;
}
TESSERA_BENCH_EXPORT void* memalign(size_t alignment, size_t n) {
  void* p = __libc_memalign(alignment, n);
  count_alloc(p);
  return p;
}
TESSERA_BENCH_EXPORT void* aligned_alloc(size_t alignment, size_t n) { return memalign(alignment, n); }
TESSERA_BENCH_EXPORT int posix_memalign(void** out, size_t alignment, size_t n) {
  void* p = __libc_memalign(alignment, n);
  if (!p) return ENOMEM;
  count_alloc(p);
  *out = p;
  return 0;
}
TESSERA_BENCH_EXPORT void* valloc(size_t n) { return memalign(4096, n); }
TESSERA_BENCH_EXPORT void* pvalloc(size_t n) { return memalign(4096, (n + 4095) & ~size_t(4095)); }
}

namespace {

using tessera::bench::trial;
constexpr int64_t kHeads = 8, kHeadDim = 64;

tessera::Tensor call_math(const tessera::Tensor& q, const tessera::Tensor& k, const tessera::Tensor& v) {
  tessera::Dispatcher& d = tessera::Dispatcher::instance();
  static tessera::OperatorEntry* op = &d.op("_sdpa_math");
  tessera::Stack out = d.call_boxed(*op, {q, k, v, std::optional<tessera::Tensor>(), false, std::monostate{}});
  return std::get<tessera::Tensor>(out.at(0));
}


// Peak heap growth (bytes) of one call of `fn`.
template <typename F>
double peak_extra_bytes(F& fn) {
  const int64_t base = g_live.load();
  g_peak.store(base);
  fn();
  return double(g_peak.load() - base);
}

void BM_sdpa(benchmark::State& state, tessera::DType dtype, bool flash) {
  const int64_t l = state.range(0);
  tessera::manual_seed(3);
  tessera::Tensor q = cast(tessera::randn({1, kHeads, l, kHeadDim}), dtype);
  tessera::Tensor k = cast(tessera::randn({1, kHeads, l, kHeadDim}), dtype);
  tessera::Tensor v = cast(tessera::randn({1, kHeads, l, kHeadDim}), dtype);
  auto run_flash = [&] { benchmark::DoNotOptimize(tessera::scaled_dot_product_attention(q, k, v)); };
  auto run_math = [&] { benchmark::DoNotOptimize(call_math(q, k, v)); };
  run_flash();
  run_math();
  const double extra = flash ? peak_extra_bytes(run_flash) : peak_extra_bytes(run_math);
  for (auto _ : state) flash ? run_flash() : run_math();
  const double flop = 4.0 * double(kHeads) * double(l) * double(l) * double(kHeadDim);
  state.counters["GFLOPs"] = benchmark::Counter(flop * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["extra_MiB"] = extra / (1024.0 * 1024.0);
  if (flash) {
    // Both paths timed here, interleaved, best of three trials each (robust to a busy machine).
    double flash_s = 1e300, math_s = 1e300;
    for (int t = 0; t < 3; ++t) {
      math_s = std::min(math_s, trial(run_math, 0.2));
      flash_s = std::min(flash_s, trial(run_flash, 0.2));
    }
    const double math_extra = peak_extra_bytes(run_math);
    state.counters["flash_ms"] = flash_s * 1e3;
    state.counters["math_ms"] = math_s * 1e3;
    state.counters["speedup_vs_math"] = math_s / flash_s;
    state.counters["math_extra_MiB"] = math_extra / (1024.0 * 1024.0);
    state.counters["mem_ratio_math_over_flash"] = math_extra / std::max(extra, 1.0);
  }
}

}  // namespace

BENCHMARK_CAPTURE(BM_sdpa, math_f32, tessera::kFloat32, false)->Arg(512)->Arg(2048)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_sdpa, flash_f32, tessera::kFloat32, true)->Arg(512)->Arg(2048)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_sdpa, math_bf16, tessera::kBFloat16, false)->Arg(512)->Arg(2048)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_sdpa, flash_bf16, tessera::kBFloat16, true)->Arg(512)->Arg(2048)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
