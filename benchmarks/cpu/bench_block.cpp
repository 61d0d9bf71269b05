// One pre-norm transformer block (seq 512, d_model 512, 8 heads, MLP 2048, causal attention)
// end to end through the public API in f32 and bf16. When `python3 -c "import torch"` works, the
// same block is timed in PyTorch on the CPU (a child python3 process running an inline script)
// and ratio_vs_torch = torch time / tessera time is reported; otherwise the label says
// "pytorch: not compared".
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessera/tessera.h"

namespace {

// `t` converted to `dt` through copy_ (a casting copy into a fresh tensor).
tessera::Tensor cast(const tessera::Tensor& t, tessera::DType dt) {
  if (t.dtype() == dt) return t;
  tessera::Tensor out = tessera::empty(t.sizes(), dt);
  out.copy_(t);
  return out;
}

constexpr int64_t kSeq = 512, kModel = 512, kHeads = 8, kMlp = 2048;

struct BlockWeights {
  tessera::Tensor ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2;
};

tessera::Tensor weight(int64_t out, int64_t in, tessera::DType dt) {
  return cast(tessera::randn({out, in}) * (1.0 / std::sqrt(double(in))), dt);
}

BlockWeights make_weights(tessera::DType dt) {
  BlockWeights w;
  auto vec = [&](int64_t n, double scale) { return cast(tessera::randn({n}) * scale, dt); };
  w.ln1_w = cast(tessera::ones({kModel}) + tessera::randn({kModel}) * 0.1, dt);
  w.ln1_b = vec(kModel, 0.1);
  w.wq = weight(kModel, kModel, dt), w.bq = vec(kModel, 0.1);
  w.wk = weight(kModel, kModel, dt), w.bk = vec(kModel, 0.1);
  w.wv = weight(kModel, kModel, dt), w.bv = vec(kModel, 0.1);
  w.wo = weight(kModel, kModel, dt), w.bo = vec(kModel, 0.1);
  w.ln2_w = cast(tessera::ones({kModel}) + tessera::randn({kModel}) * 0.1, dt);
  w.ln2_b = vec(kModel, 0.1);
  w.w1 = weight(kMlp, kModel, dt), w.b1 = vec(kMlp, 0.1);
  w.w2 = weight(kModel, kMlp, dt), w.b2 = vec(kModel, 0.1);
  return w;
}

tessera::Tensor block(const BlockWeights& w, const tessera::Tensor& x) {
  using namespace tessera;
  const int64_t l = x.size(1), dh = kModel / kHeads;
  Tensor h = layer_norm(x, {kModel}, w.ln1_w, w.ln1_b);
  Tensor q = linear(h, w.wq, w.bq).view({1, l, kHeads, dh}).transpose(1, 2);
  Tensor k = linear(h, w.wk, w.bk).view({1, l, kHeads, dh}).transpose(1, 2);
  Tensor v = linear(h, w.wv, w.bv).view({1, l, kHeads, dh}).transpose(1, 2);
  Tensor a = scaled_dot_product_attention(q, k, v, std::nullopt, /*is_causal=*/true);
  a = a.transpose(1, 2).reshape({1, l, kModel});
  Tensor x1 = x + linear(a, w.wo, w.bo);
  Tensor h2 = layer_norm(x1, {kModel}, w.ln2_w, w.ln2_b);
  return x1 + linear(gelu(linear(h2, w.w1, w.b1)), w.w2, w.b2);
}

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
  const BlockWeights w = make_weights(dt);
  const tessera::Tensor x = cast(tessera::randn({1, kSeq, kModel}), dt);
  benchmark::DoNotOptimize(block(w, x));
  for (auto _ : state) {
    tessera::Tensor y = block(w, x);
    benchmark::DoNotOptimize(y.raw_data_ptr());
  }
  const double torch_ms = torch_block_ms(name);
  if (torch_ms > 0) {
    state.counters["torch_ms"] = torch_ms;
    // Tessera ms per iteration is the benchmark's own time; the ratio needs it explicitly.
    const auto t0 = std::chrono::steady_clock::now();
    int n = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0) {
      benchmark::DoNotOptimize(block(w, x));
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
