// What the dispatcher adds to a call (see README.md).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <ctime>

#include "tessera/dispatcher.h"
#include "tessera/ops.h"
#include "tessera/profiler.h"

namespace {

using namespace tessera;

// The trivial kernel: out[0] = a[0] + alpha * b[0] on float32.
tessera_status_t trivial_add(void*, const tessera_kernel_call_t* c) {
  const tessera_tensor_t *a = c->inputs[0], *b = c->inputs[1], *o = c->outputs[0];
  float alpha = c->attrs[0].kind == TESSERA_VALUE_DOUBLE ? float(c->attrs[0].u.d) : float(c->attrs[0].u.i);
  *reinterpret_cast<float*>(static_cast<char*>(o->data) + o->byte_offset) =
      *reinterpret_cast<const float*>(static_cast<const char*>(a->data) + a->byte_offset) +
      alpha * *reinterpret_cast<const float*>(static_cast<const char*>(b->data) + b->byte_offset);
  return nullptr;
}
tessera_status_t trivial_fill(void*, const tessera_kernel_call_t* c) {
  const tessera_tensor_t* o = c->outputs[0];
  float v = c->attrs[0].kind == TESSERA_VALUE_DOUBLE ? float(c->attrs[0].u.d) : float(c->attrs[0].u.i);
  for (int64_t i = 0; i < o->numel; ++i)
    reinterpret_cast<float*>(static_cast<char*>(o->data) + o->byte_offset)[i] = v;
  return nullptr;
}

void register_kernels() {
  static bool done = [] {
    Dispatcher& d = Dispatcher::instance();
    d.register_kernel(d.op("add.Tensor"), DeviceType::CPU, Functionality::Dense,
                      KernelEntry{trivial_add, nullptr, dtype_bit(kFloat32), 0, "bench"});
    d.register_kernel(d.op("fill_"), DeviceType::CPU, Functionality::Dense,
                      KernelEntry{trivial_fill, nullptr, dtype_bit(kFloat32), 0, "bench"});
    return true;
  }();
  (void)done;
}

struct DirectCall {
  Tensor a = empty({1}), b = empty({1}), out = empty({1});
  tessera_tensor_t ta{}, tb{}, to{};
  const tessera_tensor_t* ins[2] = {&ta, &tb};
  const tessera_tensor_t* outs[1] = {&to};
  tessera_value_t alpha{};
  tessera_kernel_call_t call{};
  static void fill(tessera_tensor_t& c, const Tensor& t) {
    c.struct_size = sizeof(c);
    c.dtype = int32_t(t.dtype());
    c.ndim = int32_t(t.dim());
    c.sizes = t.sizes().data();
    c.strides = t.strides().data();
    c.numel = t.numel();
    c.data = t.storage()->data();
  }
  DirectCall() {
    a.fill_(1.0);
    b.fill_(2.0);
    fill(ta, a);
    fill(tb, b);
    fill(to, out);
    alpha.kind = TESSERA_VALUE_INT;
    alpha.u.i = 1;
    call.struct_size = sizeof(call);
    call.num_inputs = 2;
    call.num_outputs = 1;
    call.num_attrs = 1;
    call.inputs = ins;
    call.outputs = outs;
    call.attrs = &alpha;
    call.op_name = "add.Tensor";
  }
};

// Thread CPU time: the build machines are shared, so wall time includes other processes' turns.
double cpu_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}
double ns_per_call(int64_t n, auto f) {
  double t0 = cpu_now_ns();
  for (int64_t i = 0; i < n; ++i) f();
  return (cpu_now_ns() - t0) / double(n);
}

void BM_DirectKernelCall(benchmark::State& state) {
  register_kernels();
  DirectCall d;
  for (auto _ : state) {
    benchmark::DoNotOptimize(trivial_add(nullptr, &d.call));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_DirectKernelCall);

void BM_DispatchedAdd(benchmark::State& state) {
  register_kernels();
  Tensor a = empty({1}), b = empty({1});
  a.fill_(1.0);
  b.fill_(2.0);
  DirectCall d;
  // Reference costs measured in the same run.
  constexpr int64_t kRef = 2000000;
  double direct_ns = ns_per_call(kRef, [&] {
    benchmark::DoNotOptimize(trivial_add(nullptr, &d.call));
    benchmark::ClobberMemory();
  });
  double empty_ns = ns_per_call(kRef, [] { benchmark::DoNotOptimize(empty({1})); });
  int64_t iterations = 0;
  double t0 = cpu_now_ns();
  for (auto _ : state) {
    Tensor r = add(a, b);
    benchmark::DoNotOptimize(r.impl());
    ++iterations;
  }
  double dispatched_ns = (cpu_now_ns() - t0) / double(iterations);
  state.counters["direct_ns"] = direct_ns;
  state.counters["alloc_ns"] = empty_ns;
  state.counters["dispatched_ns"] = dispatched_ns;
  state.counters["overhead_ns"] = dispatched_ns - direct_ns - empty_ns;
  state.counters["x_direct"] = dispatched_ns / direct_ns;
}
BENCHMARK(BM_DispatchedAdd);

// The same call with the profiler on (TESSERA_PROFILE=summary): each call also records one event.
// Events are cleared every kBatch calls, outside the timed span, so the buffer stays small.
void BM_DispatchedAddProfiled(benchmark::State& state) {
  register_kernels();
  Tensor a = empty({1}), b = empty({1});
  a.fill_(1.0);
  b.fill_(2.0);
  constexpr int64_t kBatch = 1 << 16;
  profiler_enable("summary");
  int64_t iterations = 0;
  double timed_ns = 0, t0 = cpu_now_ns();
  for (auto _ : state) {
    Tensor r = add(a, b);
    benchmark::DoNotOptimize(r.impl());
    if (++iterations % kBatch == 0) {
      timed_ns += cpu_now_ns() - t0;
      profiler_clear();
      t0 = cpu_now_ns();
    }
  }
  timed_ns += cpu_now_ns() - t0;
  profiler_enable("");
  profiler_clear();
  state.counters["dispatched_ns"] = timed_ns / double(iterations);
}
BENCHMARK(BM_DispatchedAddProfiled);

void BM_DispatchedAddBoxed(benchmark::State& state) {
  register_kernels();
  Tensor a = empty({1}), b = empty({1});
  a.fill_(1.0);
  b.fill_(2.0);
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry& op = d.op("add.Tensor");
  for (auto _ : state) {
    Stack r = d.call_boxed(op, {a, b});
    benchmark::DoNotOptimize(r.data());
  }
}
BENCHMARK(BM_DispatchedAddBoxed);

void BM_EmptyTensor(benchmark::State& state) {
  for (auto _ : state) {
    Tensor t = empty({1});
    benchmark::DoNotOptimize(t.impl());
  }
}
BENCHMARK(BM_EmptyTensor);

void BM_TensorHandleCopy(benchmark::State& state) {
  Tensor t = empty({1});
  for (auto _ : state) {
    Tensor c = t;
    benchmark::DoNotOptimize(c.impl());
  }
}
BENCHMARK(BM_TensorHandleCopy);

}  // namespace

int main(int argc, char** argv) {
  ::setenv("TESSERA_PLUGINS_DISABLE", "*", 0);  // only this program's kernels run
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
