// One training step of a pre-norm transformer block (layer_norm, q/k/v/out projections, causal
// scaled-dot-product attention, a GELU MLP; forward, backward of a mean-square loss, AdamW) in
// Tessera's eager autograd and in libtorch's C++ frontend, in the same process: same weights, same
// inputs, the same thread count, the two sides interleaved round by round, medians reported.
// ratio = libtorch time / Tessera time (> 1: Tessera is faster; the goals of issue #31 are >= 1.0
// eager and >= 1.2 compiled). The compiled side is the same step through tessera::compile (one
// program: forward, backward and the AdamW update; Note [Program state]) on a second copy of the
// block with the same weights and a capturable AdamW; its loss is checked against the eager step's
// before timing. Built without libtorch (TESSERA_BENCH_WITH_TORCH=OFF) it reports Tessera's times.
//
// usage: bench_train_step [--threads N] [--rounds N] [--batch B] [--seq T] [--model D]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <omp.h>

#include "../cpu/bench_timing.h"
#include "tessera/compiler/compile.h"
#include "tessera/nn.h"

#ifdef TESSERA_HAVE_TORCH
#include <torch/torch.h>
#endif

namespace {

using tessera::bench::median;

struct Options {
  int threads = 2, rounds = 7;
  int64_t batch = 8, seq = 128, model = 256, heads = 4;
};

struct Block : tessera::nn::Module {
  explicit Block(const Options& o)
      : d(o.model), h(o.heads),
        ln1(register_module("ln1", std::make_shared<tessera::nn::LayerNorm>(std::vector<int64_t>{d}))),
        q(register_module("q", std::make_shared<tessera::nn::Linear>(d, d))),
        k(register_module("k", std::make_shared<tessera::nn::Linear>(d, d))),
        v(register_module("v", std::make_shared<tessera::nn::Linear>(d, d))),
        proj(register_module("proj", std::make_shared<tessera::nn::Linear>(d, d))),
        ln2(register_module("ln2", std::make_shared<tessera::nn::LayerNorm>(std::vector<int64_t>{d}))),
        fc1(register_module("fc1", std::make_shared<tessera::nn::Linear>(d, 4 * d))),
        fc2(register_module("fc2", std::make_shared<tessera::nn::Linear>(4 * d, d))) {}
  tessera::Tensor forward(const tessera::Tensor& x) const {
    const int64_t b = x.size(0), t = x.size(1), dh = d / h;
    tessera::Tensor n = ln1->forward(x);
    auto heads = [&](const tessera::nn::Linear& l) { return l.forward(n).reshape({b, t, h, dh}).transpose(1, 2); };
    tessera::Tensor a = tessera::scaled_dot_product_attention(heads(*q), heads(*k), heads(*v), std::nullopt, true)
                            .transpose(1, 2)
                            .reshape({b, t, d});
    tessera::Tensor r = x + proj->forward(a);
    return r + fc2->forward(tessera::gelu(fc1->forward(ln2->forward(r))));
  }
  int64_t d, h;
  std::shared_ptr<tessera::nn::LayerNorm> ln1;
  std::shared_ptr<tessera::nn::Linear> q, k, v, proj;
  std::shared_ptr<tessera::nn::LayerNorm> ln2;
  std::shared_ptr<tessera::nn::Linear> fc1, fc2;
};

#ifdef TESSERA_HAVE_TORCH
struct TorchBlockImpl : torch::nn::Module {
  explicit TorchBlockImpl(const Options& o)
      : d(o.model), h(o.heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        q(register_module("q", torch::nn::Linear(d, d))),
        k(register_module("k", torch::nn::Linear(d, d))),
        v(register_module("v", torch::nn::Linear(d, d))),
        proj(register_module("proj", torch::nn::Linear(d, d))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        fc1(register_module("fc1", torch::nn::Linear(d, 4 * d))),
        fc2(register_module("fc2", torch::nn::Linear(4 * d, d))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), dh = d / h;
    torch::Tensor n = ln1(x);
    auto heads = [&](torch::nn::Linear& l) { return l(n).reshape({b, t, h, dh}).transpose(1, 2); };
    torch::Tensor a = at::scaled_dot_product_attention(heads(q), heads(k), heads(v), {}, 0.0, true)
                          .transpose(1, 2)
                          .reshape({b, t, d});
    torch::Tensor r = x + proj(a);
    return r + fc2(torch::gelu(fc1(ln2(r))));
  }
  int64_t d, h;
  torch::nn::LayerNorm ln1;
  torch::nn::Linear q, k, v, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(TorchBlock);

torch::Tensor to_torch(const tessera::Tensor& t) {
  const tessera::Tensor c = t.contiguous();
  std::vector<int64_t> sizes(c.sizes().begin(), c.sizes().end());
  torch::Tensor out = torch::empty(sizes, torch::kFloat);
  std::memcpy(out.data_ptr(), c.raw_data_ptr(), c.nbytes());
  return out;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long v = std::strtol(argv[i + 1], nullptr, 10);
    if (a == "--threads") o.threads = int(v);
    else if (a == "--rounds") o.rounds = int(v);
    else if (a == "--batch") o.batch = v;
    else if (a == "--seq") o.seq = v;
    else if (a == "--model") o.model = v;
    else {
      std::fprintf(stderr, "unknown option %s\nusage: bench_train_step [--threads N] [--rounds N] [--batch B] "
                           "[--seq T] [--model D]\n", argv[i]);
      return 2;
    }
  }
  omp_set_num_threads(o.threads);
  tessera::manual_seed(5);
  Block block(o);
  const tessera::Tensor x = tessera::randn({o.batch, o.seq, o.model});
  tessera::nn::optim::AdamOptions adam;
  adam.lr = 1e-4;
  adam.weight_decay = 0.01;
  adam.decoupled_weight_decay = true;
  tessera::nn::optim::Adam opt(block.parameters(), adam);
  auto tessera_step = [&] {
    opt.zero_grad();
    tessera::Tensor y = block.forward(x);
    tessera::autograd::backward((y * y).mean());
    opt.step();
  };
  // The compiled step, on a copy of the block (same weights, its own capturable AdamW).
  Block cblock(o);
  {
    tessera::autograd::NoGradGuard g;
    const auto src = block.named_parameters();
    auto dst = cblock.named_parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].second.copy_(src[i].second);
  }
  tessera::nn::optim::AdamOptions cadam = adam;
  cadam.capturable = true;
  tessera::nn::optim::Adam copt(cblock.parameters(), cadam);
  tessera::CompileOptions co;
  co.name = "train_step";
  tessera::CompiledFunction compiled = tessera::compile(
      [&](const std::vector<tessera::Tensor>& in) {
        copt.zero_grad();
        tessera::Tensor y = cblock.forward(in[0]);
        tessera::Tensor loss = (y * y).mean();
        tessera::autograd::backward(loss);
        copt.step();
        return std::vector<tessera::Tensor>{loss};
      },
      co);
  // The first compiled steps (the first one captures and generates code) against eager steps: the
  // same losses, also after updates.
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    const tessera::Tensor y = block.forward(x);
    const tessera::Tensor loss = (y * y).mean();
    tessera::autograd::backward(loss);
    opt.step();
    const double eager = loss.item<double>(), ours = compiled({x})[0].item<double>();
    std::printf("step %d's loss: eager %.6f, compiled %.6f (%s)\n", s, eager, ours,
                compiled.artifacts().at(0).backend.c_str());
    if (std::abs(eager - ours) > 1e-4 * std::abs(eager) || compiled.artifacts().at(0).backend == "eager") {
      std::fprintf(stderr, "the compiled step disagrees with the eager one\n");
      return 1;
    }
  }
  auto compiled_step = [&] { (void)compiled({x}); };
  std::vector<std::function<void()>> sides{tessera_step, compiled_step};
  std::vector<std::string> names{"tessera eager", "tessera compiled"};
#ifdef TESSERA_HAVE_TORCH
  at::set_num_threads(o.threads);
  TorchBlock tblock(o);
  {  // the same weights
    torch::NoGradGuard g;
    auto tp = tblock->named_parameters();
    for (const auto& [name, p] : block.named_parameters()) tp[name].copy_(to_torch(p));
  }
  const torch::Tensor tx = to_torch(x);
  torch::optim::AdamW topt(tblock->parameters(), torch::optim::AdamWOptions(1e-4).weight_decay(0.01));
  auto torch_step = [&] {
    topt.zero_grad();
    torch::Tensor y = tblock->forward(tx);
    (y * y).mean().backward();
    topt.step();
  };
  sides.push_back(torch_step);
  names.push_back("libtorch " TESSERA_TORCH_VERSION);
  {  // the two sides compute the same loss from the same weights (checked before any step)
    tessera::autograd::NoGradGuard g;
    torch::NoGradGuard tg;
    const tessera::Tensor y = block.forward(x);
    const torch::Tensor ty = tblock->forward(tx);
    const double ours = (y * y).mean().item<double>(), theirs = (ty * ty).mean().item<double>();
    std::printf("initial loss: tessera %.6f, libtorch %.6f\n", ours, theirs);
    if (std::abs(ours - theirs) > 1e-4 * std::abs(theirs)) {
      std::fprintf(stderr, "the two sides disagree: not the same block\n");
      return 1;
    }
  }
#endif
  for (auto& f : sides) f(), f();  // warm-up
  std::vector<std::vector<double>> samples(sides.size());
  for (int r = 0; r < o.rounds; ++r)
    for (size_t i = 0; i < sides.size(); ++i) samples[i].push_back(tessera::bench::trial(sides[i], 0.3));
  std::printf("transformer block training step (forward, backward, AdamW), float32, batch %lld, seq %lld, "
              "d_model %lld, %lld heads, MLP %lld; %d threads, %d interleaved rounds, medians\n",
              (long long)o.batch, (long long)o.seq, (long long)o.model, (long long)o.heads, (long long)(4 * o.model),
              o.threads, o.rounds);
  for (size_t i = 0; i < sides.size(); ++i) std::printf("  %-22s %8.2f ms\n", names[i].c_str(), median(samples[i]) * 1e3);
#ifdef TESSERA_HAVE_TORCH
  std::printf("  ratio (libtorch / tessera eager): %.2f (goal >= 1.0)\n", median(samples[2]) / median(samples[0]));
  std::printf("  ratio (libtorch / tessera compiled): %.2f (goal >= 1.2)\n", median(samples[2]) / median(samples[1]));
#else
  std::printf("  libtorch: not compared (configure with -DTESSERA_BENCH_WITH_TORCH=ON and torch from pip)\n");
#endif
  return 0;
}
