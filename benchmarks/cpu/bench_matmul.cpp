// tessera::matmul against oneDNN called directly at its best for a reused weight (primitive created
// once with format_tag::any weights, the weight reordered once into the layout it picked, output
// buffer reused), square f32 and bf16 at 256..2048. Counters: GFLOP/s of each and
// ratio_vs_onednn = tessera GFLOP/s / oneDNN GFLOP/s measured in the same benchmark (goal >= 0.95).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <dnnl.hpp>

#include "bench_timing.h"
#include "tessera/tessera.h"

namespace {

using tessera::bench::time_pair;

// `t` converted to `dt` through copy_ (a casting copy into a fresh tensor).
tessera::Tensor cast(const tessera::Tensor& t, tessera::DType dt) {
  if (t.dtype() == dt) return t;
  tessera::Tensor out = tessera::empty(t.sizes(), dt);
  out.copy_(t);
  return out;
}



// oneDNN matmul [n, n] x [n, n] -> [n, n], row-major activations, the weight prepacked once.
struct OnednnMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  OnednnMatmul(int64_t n, dnnl::memory::data_type dt, void* pa, void* pb) {
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc md({n, n}, dt, tag::ab), any({n, n}, dt, tag::any);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, any, md), eng);
    prim = dnnl::matmul(pd);
    a = dnnl::memory(md, eng, pa);
    b = dnnl::memory(pd.weights_desc(), eng);
    dnnl::memory user(md, eng, pb);
    dnnl::reorder(user, b).execute(strm, user, b);
    strm.wait();
    c = dnnl::memory(md, eng);
  }
  void run() {
    prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    strm.wait();
  }
};

void BM_matmul(benchmark::State& state, tessera::DType dtype) {
  const int64_t n = state.range(0);
  tessera::manual_seed(1);
  tessera::Tensor a = cast(tessera::randn({n, n}), dtype), b = cast(tessera::randn({n, n}), dtype);
  const double flop = 2.0 * double(n) * double(n) * double(n);
  OnednnMatmul ref(n, dtype == tessera::kBFloat16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32,
                   a.raw_data_ptr(), b.raw_data_ptr());
  benchmark::DoNotOptimize(tessera::matmul(a, b));  // warm-up: plugin load, primitive creation
  for (auto _ : state) {
    tessera::Tensor c = tessera::matmul(a, b);
    benchmark::DoNotOptimize(c.raw_data_ptr());
  }
  double tessera_s = 0, ref_s = 0;
  time_pair([&] { benchmark::DoNotOptimize(tessera::matmul(a, b)); }, [&] { ref.run(); }, &tessera_s, &ref_s);
  state.counters["GFLOPs"] = benchmark::Counter(flop * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["tessera_GFLOPs"] = flop / tessera_s * 1e-9;
  state.counters["onednn_GFLOPs"] = flop / ref_s * 1e-9;
  state.counters["ratio_vs_onednn"] = ref_s / tessera_s;
}

}  // namespace

BENCHMARK_CAPTURE(BM_matmul, f32, tessera::kFloat32)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_matmul, bf16, tessera::kBFloat16)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
