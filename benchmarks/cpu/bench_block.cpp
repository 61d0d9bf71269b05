// One pre-norm transformer block (seq 512, d_model 512, 8 heads, MLP 2048, causal attention)
// end to end through the public API in f32 and bf16. When `python3 -c "import torch"` works, the
// same block is timed in PyTorch on the CPU (a child python3 process running an inline script)
// and ratio_vs_torch = torch time / tessera time is reported; otherwise the label says
// "pytorch: not compared".
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessera/tessera.h"
#include "transformer_block.h"

namespace {

using tessera::bench::BlockWeights;
using tessera::bench::transformer_block;

const char* kTorchScript = R"PY(
import math, sys, time, torch
torch.manual_seed(0)
L, D, H, F = 512, 512, 8, 2048
dt = {'f32': torch.float32, 'bf16': torch.bfloat16}[sys.argv[1]]
def w(o, i): return (torch.randn(o, i) / math.sqrt(i)).to(dt)
def b(n): return (torch.randn(n) * 0.1).to(dt)
P = dict(ln1w=1 + b(D), ln1b=b(D), wq=w(D, D), bq=b(D), wk=w(D, D), bk=b(D), wv=w(D, D), bv=b(D),
         wo=w(D, D), bo=b(D), ln2w=1 + b(D), ln2b=b(D), w1=w(F, D), b1=b(F), w2=w(D, F), b2=b(D))
F_ = torch.nn.functional
def block(x):
    h = F_.layer_norm(x, (D,), P['ln1w'], P['ln1b'])
    q = F_.linear(h, P['wq'], P['bq']).view(1, L, H, D // H).transpose(1, 2)
    k = F_.linear(h, P['wk'], P['bk']).view(1, L, H, D // H).transpose(1, 2)
    v = F_.linear(h, P['wv'], P['bv']).view(1, L, H, D // H).transpose(1, 2)
    a = F_.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, L, D)
    x1 = x + F_.linear(a, P['wo'], P['bo'])
    h2 = F_.layer_norm(x1, (D,), P['ln2w'], P['ln2b'])
    return x1 + F_.linear(F_.gelu(F_.linear(h2, P['w1'], P['b1'])), P['w2'], P['b2'])
x = torch.randn(1, L, D).to(dt)
with torch.no_grad():
    for _ in range(3): block(x)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 1.0:
        block(x); n += 1
    print((time.perf_counter() - t0) / n * 1e3)
)PY";

// Milliseconds per block in PyTorch, or a negative value when torch cannot be imported.
double torch_block_ms(const char* dtype) {
  static const bool have_torch = std::system("python3 -c 'import torch' >/dev/null 2>&1") == 0;
  if (!have_torch) return -1;
  const std::string path = "/tmp/tessera_bench_block.py";
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fputs(kTorchScript, f);
    std::fclose(f);
  } else {
    return -1;
  }
  const std::string cmd = "python3 " + path + " " + dtype + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  double ms = -1;
  if (std::fscanf(p, "%lf", &ms) != 1) ms = -1;
  pclose(p);
  return ms;
}

void BM_block(benchmark::State& state, tessera::DType dt, const char* name) {
  tessera::manual_seed(4);
  const BlockWeights w = tessera::bench::make_block_weights(dt);
  const tessera::Tensor x = tessera::bench::cast_to(tessera::randn({1, tessera::bench::kBlockSeq, tessera::bench::kBlockModel}), dt);
  benchmark::DoNotOptimize(transformer_block(w, x));
  for (auto _ : state) {
    tessera::Tensor y = transformer_block(w, x);
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
  const double torch_ms = torch_block_ms(name);
  if (torch_ms > 0) {
    state.counters["torch_ms"] = torch_ms;
    // Tessera ms per iteration is the benchmark's own time; the ratio needs it explicitly.
    const auto t0 = std::chrono::steady_clock::now();
    int n = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0) {
      benchmark::DoNotOptimize(transformer_block(w, x));
      ++n;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / n;
    state.counters["tessera_ms"] = ms;
    state.counters["ratio_vs_torch"] = torch_ms / ms;
    state.SetLabel("pytorch compared");
  } else {
    state.SetLabel("pytorch: not compared (python3 cannot import torch)");
  }
}

}  // namespace

BENCHMARK_CAPTURE(BM_block, f32, tessera::kFloat32, "f32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_block, bf16, tessera::kBFloat16, "bf16")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
