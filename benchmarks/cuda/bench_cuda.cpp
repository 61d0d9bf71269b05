// CUDA backend benchmarks. Each benchmark times a Tessera op on cuda:0 and, in the same run, a
// named reference, and reports `ratio` = reference time / Tessera time (1.0 = as fast as the
// reference; goals in docs/cuda.md):
//   matmul f16/bf16 n = 1024..8192     vs cuBLASLt called directly on the same buffers (goal >= 0.95)
//   add, softmax                       vs a device-to-device copy moving the same bytes (goal >= 0.8)
//   max / avg pooling (BM_Pool2d on cuDNN, BM_Pool2dKernel the plugin's kernel), batch_norm
//   (BM_BatchNorm on cuDNN, BM_BatchNormKernel) and layer_norm vs a copy of the input
//   SDPA seq 1024/4096, head dim 64/128 vs the math path matmul + softmax + matmul: BM_Sdpa as a user
//                                      gets it (cuDNN's fused attention), BM_SdpaFlash / BM_SdpaSimt
//                                      the plugin's tensor-core / CUDA-core flash kernels
//   compiled (tessera::compile, backend "auto": the CUDA compiler plugin) vs the same function eager:
//     a pointwise chain on 16M elements (BM_CompiledChain), reduction chains (BM_CompiledSoftmaxChain,
//     BM_CompiledNormChain: Note [Fused row reductions]) and the transformer block of
//     benchmarks/cpu/transformer_block.h (BM_CompiledBlock; BM_CompiledBlockGraphs with mode
//     "reduce-overhead", against torch.compile in that mode); goal >= 1.3 for the block
// Without a CUDA device every benchmark is skipped with the reason.
#include <benchmark/benchmark.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>

#include "../cpu/transformer_block.h"
#include "cuda_bench_util.h"
#include "tessera/compiler/compile.h"
#include "tessera/dispatcher.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera_bench;
using tessera::DType;
using tessera::Tensor;

void sync() { tessera::synchronize(tessera::Device("cuda:0")); }

// Runs the Tessera op under the benchmark loop and reports the ratio to `reference`.
void run_with_reference(benchmark::State& state, const std::function<void()>& op, const std::function<void()>& reference,
                        double flops, double bytes) {
  const double ref = seconds_per_call(reference);
  op();
  sync();
  int64_t iters = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    op();
    sync();
    ++iters;
  }
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(iters);
  state.counters["ratio"] = ref / mine;
  state.counters["reference_us"] = ref * 1e6;
  state.counters["tessera_us"] = mine * 1e6;
  if (flops > 0) state.counters["TFLOPS"] = flops / mine * 1e-12;
  if (bytes > 0) state.counters["GBps"] = bytes / mine * 1e-9;
}

// ---------------------------------------------------------------- matmul vs cuBLASLt


void BM_Matmul(benchmark::State& state, DType dtype) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const int64_t n = state.range(0);
  const Tensor a = tessera::randn({n, n}).to(dtype).to("cuda:0");
  const Tensor b = tessera::randn({n, n}).to(dtype).to("cuda:0");
  Tensor c = tessera::empty({n, n}, tessera::TensorOptions(dtype).device("cuda:0"));
  // Row-major C (n x n) = A B as column-major C^T = B^T A^T, the layout the plugin uses.
  CublasLtGemm lt(n, n, n, /*transpose_a=*/false, dtype == tessera::kFloat16 ? CUDA_R_16F : CUDA_R_16BF);
  if (!lt.ok) {
    state.SkipWithError("cuBLASLt found no algorithm");
    return;
  }
  run_with_reference(
      state, [&] { benchmark::DoNotOptimize(tessera::matmul(a, b)); },
      [&] { lt.run(data_of(b), data_of(a), data_of(c)); }, 2.0 * double(n) * double(n) * double(n), 0);
  state.SetLabel("reference: cuBLASLt direct");
}

// ---------------------------------------------------------------- memory-bound ops vs copy

// `op` against a device-to-device copy of `copy_bytes` (a copy that reads and writes as many bytes
// as `op` does); `label` goes before the reference's name.
void run_against_copy(benchmark::State& state, const std::function<void()>& op, size_t copy_bytes,
                      const std::string& label = "") {
  void *src = nullptr, *dst = nullptr;
  cudaMalloc(&src, copy_bytes);
  cudaMalloc(&dst, copy_bytes);
  run_with_reference(
      state, op, [&] { cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, nullptr); }, 0,
      2.0 * double(copy_bytes));
  cudaFree(src);
  cudaFree(dst);
  state.SetLabel(label + "reference: cudaMemcpy D2D of the same bytes");
}

void BM_Add(benchmark::State& state, DType dtype) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const int64_t n = state.range(0);
  const Tensor a = tessera::randn({n}).to(dtype).to("cuda:0");
  const Tensor b = tessera::randn({n}).to(dtype).to("cuda:0");
  // add reads 2n and writes n elements; a copy of 1.5n elements reads and writes the same 3n.
  run_against_copy(state, [&] { benchmark::DoNotOptimize(tessera::add(a, b)); }, size_t(n) * a.itemsize() * 3 / 2);
}

void BM_Softmax(benchmark::State& state, DType dtype) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const int64_t rows = state.range(0), cols = state.range(1);
  const Tensor x = tessera::randn({rows, cols}).to(dtype).to("cuda:0");
  // Reads n, writes n, like a copy of n.
  run_against_copy(state, [&] { benchmark::DoNotOptimize(tessera::softmax(x, -1)); }, size_t(rows * cols) * x.itemsize());
}

// A counter in cuda:0's device properties ("cudnn_sdpa_calls"), -1 when not reported.
int64_t cuda_counter(const std::string& name) {
  for (const tessera::DeviceInfo& d : tessera::devices()) {
    if (d.name != "cuda:0") continue;
    const std::string key = "\"" + name + "\": ";
    const size_t pos = d.properties.find(key);
    return pos == std::string::npos ? -1 : std::stoll(d.properties.substr(pos + key.size()));
  }
  return -1;
}

// A row timing `op` on cuDNN (`cudnn`: the path a user gets) or on the plugin's own path (`env` set
// to 0), against a copy of `copy_bytes`; reports whether cuDNN ran it (its counter moved).
void run_cudnn_or_own(benchmark::State& state, const char* env, const char* counter, bool cudnn,
                      const std::function<Tensor()>& op, size_t copy_bytes) {
  if (cudnn)
    unsetenv(env);
  else
    setenv(env, "0", 1);
  const int64_t before = cuda_counter(counter);
  benchmark::DoNotOptimize(op());
  sync();
  const bool on_cudnn = cuda_counter(counter) > before;
  run_against_copy(state, [&] { benchmark::DoNotOptimize(op()); }, copy_bytes,
                   on_cudnn ? "cuDNN; " : "the plugin's own path; ");
  unsetenv(env);
  state.counters["cudnn"] = on_cudnn ? 1 : 0;
}

// max_pool2d 3x3 / 2 (padding 1) or avg_pool2d 2x2 / 2 on a channels-last [32, 64, 112, 112]
// input (a ResNet stem's pooling): `cudnn` as a user gets it (Note [Pooling on cuDNN]), else the
// plugin's kernel (TESSERA_CUDA_CUDNN_POOLING=0). Reference: a device copy of the input's bytes.
void BM_Pool2d(benchmark::State& state, DType dtype, bool max, bool cudnn) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const Tensor x =
      tessera::contiguous(tessera::randn({32, 64, 112, 112}).to(dtype), tessera::MemoryFormat::ChannelsLast)
          .to("cuda:0");
  run_cudnn_or_own(
      state, "TESSERA_CUDA_CUDNN_POOLING", "cudnn_poolings", cudnn,
      [&] { return max ? tessera::max_pool2d(x, {3, 3}, {2, 2}, {1, 1}) : tessera::avg_pool2d(x, {2, 2}, {2, 2}); },
      size_t(x.numel()) * x.itemsize());
}

// Inference batch_norm on [32, 64, 56, 56] (`cudnn` as a user gets it, Note [batch_norm on cuDNN],
// else the plugin's path), and layer_norm over the last 1024 of [8192, 1024] (the plugin's kernel:
// whether cuDNN would be faster is for the PyTorch column to say). Reference: a device copy of the
// input's bytes.
void BM_Norm(benchmark::State& state, DType dtype, bool batch, bool cudnn) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const tessera::Device cuda("cuda:0");
  const Tensor x = (batch ? tessera::randn({32, 64, 56, 56}) : tessera::randn({8192, 1024})).to(dtype).to(cuda);
  const int64_t c = batch ? 64 : 1024;
  const Tensor w = tessera::randn({c}).to(dtype).to(cuda), b = tessera::randn({c}).to(dtype).to(cuda);
  const Tensor m = tessera::randn({c}).to(dtype).to(cuda), v = tessera::rand({c}).to(dtype).to(cuda) + 0.5;
  run_cudnn_or_own(
      state, "TESSERA_CUDA_CUDNN_BATCH_NORM", "cudnn_batch_norms", cudnn,
      [&] {
        return batch ? tessera::batch_norm(x, w, b, m, v, false, 0.1, 1e-5, true) : tessera::layer_norm(x, {1024}, w, b);
      },
      size_t(x.numel()) * x.itemsize());
}

// copy_ with a conversion: `transposed` reads the source through a transposed view (the strided
// kernel with 32-bit indices), else both are dense (the vectorised kernel).
void BM_Copy(benchmark::State& state, DType from, DType to, bool transposed) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const int64_t n = state.range(0);
  const Tensor src = tessera::randn({n, n}).to(from).to("cuda:0");
  Tensor dst = tessera::empty({n, n}, tessera::TensorOptions(to).device("cuda:0"));
  const Tensor view = transposed ? src.t() : src;
  // The conversion reads n*n*size(from) and writes n*n*size(to) bytes; so does a copy of half that sum.
  run_against_copy(state, [&] { dst.copy_(view); }, size_t(n * n) * (src.itemsize() + dst.itemsize()) / 2);
}

// x * 2.5: a wrapped number passed by value next to a dense operand (the vectorised path).
void BM_MulNumber(benchmark::State& state, DType dtype) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const int64_t n = state.range(0);
  const Tensor x = tessera::randn({n}).to(dtype).to("cuda:0");
  // Reads n, writes n elements, like a copy of n.
  run_against_copy(state, [&] { benchmark::DoNotOptimize(x * 2.5); }, size_t(n) * x.itemsize());
}

// ---------------------------------------------------------------- attention: flash vs math

// cuDNN's SDPA calls so far (the CUDA plugin's "cudnn_sdpa_calls" property), -1 when not reported.
int64_t cudnn_sdpa_calls() { return cuda_counter("cudnn_sdpa_calls"); }

// Which SDPA path a row times: what a user gets (cuDNN's fused attention where it takes the case,
// Note [SDPA on cuDNN]), the plugin's tensor-core flash kernel, or its CUDA-core one.
enum class SdpaPath { Default, Flash, Simt };

void BM_Sdpa(benchmark::State& state, DType dtype, SdpaPath path) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  setenv("TESSERA_CUDA_FLASH_SIMT", path == SdpaPath::Simt ? "1" : "0", 1);
  if (path == SdpaPath::Default)
    unsetenv("TESSERA_CUDA_CUDNN_ATTENTION");
  else
    setenv("TESSERA_CUDA_CUDNN_ATTENTION", "0", 1);
  const int64_t seq = state.range(0), d = state.range(1), heads = 16;
  const Tensor q = tessera::randn({1, heads, seq, d}).to(dtype).to("cuda:0");
  const Tensor k = tessera::randn({1, heads, seq, d}).to(dtype).to("cuda:0");
  const Tensor v = tessera::randn({1, heads, seq, d}).to(dtype).to("cuda:0");
  const double scale = 1.0 / std::sqrt(double(d));
  auto math = [&] {
    Tensor s = tessera::mul(tessera::matmul(q, k.transpose(-2, -1)), tessera::scalar_tensor(scale).to(dtype).to("cuda:0"));
    benchmark::DoNotOptimize(tessera::matmul(tessera::softmax(s, -1), v));
  };
  const int64_t before = cudnn_sdpa_calls();
  benchmark::DoNotOptimize(tessera::scaled_dot_product_attention(q, k, v));
  sync();
  const bool on_cudnn = cudnn_sdpa_calls() > before;
  run_with_reference(
      state, [&] { benchmark::DoNotOptimize(tessera::scaled_dot_product_attention(q, k, v)); }, math,
      4.0 * double(heads) * double(seq) * double(seq) * double(d), 0);
  unsetenv("TESSERA_CUDA_FLASH_SIMT");
  unsetenv("TESSERA_CUDA_CUDNN_ATTENTION");
  state.counters["cudnn"] = on_cudnn ? 1 : 0;
  state.SetLabel(std::string(on_cudnn                 ? "cuDNN fused attention"
                             : path == SdpaPath::Simt ? "CUDA-core kernel"
                                                      : "tensor-core kernel") +
                 "; reference: math path (matmul + softmax + matmul)");
}

// ---------------------------------------------------------------- compiled vs eager

// `fn` compiled with backend "auto" (the CUDA compiler plugin on cuda) against `fn` eager; reports
// the plugin's partitions of the artifact (0: nothing was fused).
void run_compiled(benchmark::State& state, const tessera::ExportFn& fn, const std::vector<Tensor>& in,
                  const std::string& mode = "default") {
  tessera::CompileOptions options;
  options.backend = "auto";
  options.mode = mode;
  tessera::CompiledFunction f = tessera::compile(fn, options);
  for (int i = 0; i < 3; ++i) f(in);  // capture and compile (and record the graph) outside the timing
  run_with_reference(
      state, [&] { benchmark::DoNotOptimize(f(in)); }, [&] { benchmark::DoNotOptimize(fn(in)); }, 0, 0);
  const auto& a = f.artifacts().at(0);
  state.counters["partitions"] = double(a.partitions);
  state.counters["graphs"] = double(f.stats().graphs);
  state.SetLabel("backend " + a.backend + "; reference: the same function eager");
}

// gelu(x * 1.702 + b) * s: four eager kernels, one fused kernel compiled.
void BM_CompiledChain(benchmark::State& state, DType dtype) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const int64_t n = state.range(0), cols = 4096;
  const tessera::Device cuda("cuda:0");
  const std::vector<Tensor> in{tessera::randn({n / cols, cols}).to(dtype).to(cuda),
                               tessera::randn({cols}).to(dtype).to(cuda),
                               tessera::randn({n / cols, cols}).to(dtype).to(cuda)};
  run_compiled(
      state,
      [](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{tessera::gelu(x[0] * 1.702 + x[1]) * x[2]};
      },
      in);
}

// Note [Fused row reductions]: a reduction chain as one generated kernel. kind 0: a scaled,
// masked softmax (attention scores); kind 1: a residual add and layer_norm. [8192, 1024].
void BM_CompiledRowChain(benchmark::State& state, DType dtype, int kind) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const int64_t rows = 8192, cols = 1024;
  const tessera::Device cuda("cuda:0");
  const std::vector<Tensor> in{
      tessera::randn({rows, cols}).to(dtype).to(cuda), tessera::randn({rows, cols}).to(dtype).to(cuda),
      tessera::randn({cols}).to(dtype).to(cuda), tessera::randn({cols}).to(dtype).to(cuda)};
  if (kind == 0)
    run_compiled(
        state,
        [](const std::vector<Tensor>& x) {
          return std::vector<Tensor>{tessera::softmax(x[0] * 0.125 + x[1], -1)};
        },
        in);
  else
    run_compiled(
        state,
        [](const std::vector<Tensor>& x) {
          return std::vector<Tensor>{tessera::layer_norm(x[0] + x[1], {1024}, x[2], x[3])};
        },
        in);
}

void BM_CompiledBlock(benchmark::State& state, DType dtype, const std::string& mode) {
  if (const std::string why = no_device_reason(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const tessera::Device cuda("cuda:0");
  tessera::manual_seed(11);
  tessera::bench::BlockWeights w = tessera::bench::make_block_weights(dtype);
  for (Tensor* t : {&w.ln1_w, &w.ln1_b, &w.wq, &w.bq, &w.wk, &w.bk, &w.wv, &w.bv, &w.wo, &w.bo, &w.ln2_w,
                    &w.ln2_b, &w.w1, &w.b1, &w.w2, &w.b2})
    *t = t->to(cuda);
  const std::vector<Tensor> in{
      tessera::randn({1, tessera::bench::kBlockSeq, tessera::bench::kBlockModel}).to(dtype).to(cuda)};
  run_compiled(
      state,
      [&w](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{tessera::bench::transformer_block(w, x[0])};
      },
      in, mode);
}

void register_all() {
  for (auto [dtype, name] : {std::pair{tessera::kFloat16, "f16"}, std::pair{tessera::kBFloat16, "bf16"}}) {
    benchmark::RegisterBenchmark((std::string("BM_CompiledChain/") + name).c_str(), BM_CompiledChain, dtype)
        ->Arg(int64_t(1) << 24)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.3);
    benchmark::RegisterBenchmark((std::string("BM_CompiledSoftmaxChain/") + name).c_str(),
                                 BM_CompiledRowChain, dtype, 0)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.3);
    benchmark::RegisterBenchmark((std::string("BM_CompiledNormChain/") + name).c_str(), BM_CompiledRowChain,
                                 dtype, 1)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.3);
    benchmark::RegisterBenchmark((std::string("BM_CompiledBlock/") + name).c_str(), BM_CompiledBlock, dtype,
                                 std::string("default"))
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.3);
    // mode "reduce-overhead": the block replayed as one CUDA graph (docs/compile.md).
    benchmark::RegisterBenchmark((std::string("BM_CompiledBlockGraphs/") + name).c_str(), BM_CompiledBlock,
                                 dtype, std::string("reduce-overhead"))
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.3);
  }

  for (auto [dtype, name] : {std::pair{tessera::kFloat16, "f16"}, std::pair{tessera::kBFloat16, "bf16"}}) {
    auto* m = benchmark::RegisterBenchmark((std::string("BM_Matmul/") + name).c_str(), BM_Matmul, dtype);
    for (int64_t n : {1024, 2048, 4096, 8192}) m->Arg(n);
    m->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
    for (auto [path, row] :
         {std::pair{SdpaPath::Default, "BM_Sdpa/"}, std::pair{SdpaPath::Flash, "BM_SdpaFlash/"},
          std::pair{SdpaPath::Simt, "BM_SdpaSimt/"}}) {
      auto* s = benchmark::RegisterBenchmark((std::string(row) + name).c_str(), BM_Sdpa, dtype, path);
      for (int64_t seq : {1024, 4096})
        for (int64_t d : {64, 128}) s->Args({seq, d});
      s->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
    }
  }
  for (auto [dtype, name] : {std::pair{tessera::kFloat32, "f32"}, std::pair{tessera::kFloat16, "f16"}}) {
    benchmark::RegisterBenchmark((std::string("BM_Add/") + name).c_str(), BM_Add, dtype)
        ->Arg(int64_t(1) << 26)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.3);
    benchmark::RegisterBenchmark((std::string("BM_MulNumber/") + name).c_str(), BM_MulNumber, dtype)
        ->Arg(int64_t(1) << 26)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.3);
    benchmark::RegisterBenchmark((std::string("BM_Softmax/") + name).c_str(), BM_Softmax, dtype)
        ->Args({16384, 4096})
        ->Args({65536, 512})
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.3);
  }
  for (auto [dtype, name] : {std::pair{tessera::kFloat16, "f16"}, std::pair{tessera::kFloat32, "f32"}})
    for (bool max : {true, false})
      for (bool cudnn : {true, false})
        benchmark::RegisterBenchmark(
            (std::string(cudnn ? "BM_Pool2d/" : "BM_Pool2dKernel/") + (max ? "max/" : "avg/") + name).c_str(),
            BM_Pool2d, dtype, max, cudnn)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(0.15);
  for (auto [dtype, name] : {std::pair{tessera::kFloat16, "f16"}, std::pair{tessera::kFloat32, "f32"}})
    for (auto [batch, cudnn, row] : {std::tuple{true, true, "BM_BatchNorm/"}, std::tuple{true, false, "BM_BatchNormKernel/"},
                                     std::tuple{false, false, "BM_LayerNorm/"}})
      benchmark::RegisterBenchmark((std::string(row) + name).c_str(), BM_Norm, dtype, batch, cudnn)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.15);
  for (bool transposed : {false, true}) {
    for (auto [from, to, name] : {std::tuple{tessera::kFloat32, tessera::kFloat16, "f32_f16"},
                                  std::tuple{tessera::kFloat32, tessera::kBFloat16, "f32_bf16"},
                                  std::tuple{tessera::kFloat32, tessera::kFloat32, "f32_f32"}}) {
      benchmark::RegisterBenchmark((std::string(transposed ? "BM_CopyTransposed/" : "BM_Copy/") + name).c_str(),
                                   BM_Copy, from, to, transposed)
          ->Arg(8192)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.3);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
