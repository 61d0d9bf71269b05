// What autograd costs per op, against the same op without grad in the same run (README.md).
#include <benchmark/benchmark.h>

#include "tessera/nn.h"

namespace {

using namespace tessera;

void BM_AddNoGrad(benchmark::State& state) {
  Tensor a = ones({1}), b = ones({1});
  for (auto _ : state) benchmark::DoNotOptimize(a + b);
}
BENCHMARK(BM_AddNoGrad);

void BM_AddNoGradGuard(benchmark::State& state) {
  Tensor a = autograd::set_requires_grad(ones({1})), b = ones({1});
  autograd::NoGradGuard g;
  for (auto _ : state) benchmark::DoNotOptimize(a + b);
}
BENCHMARK(BM_AddNoGradGuard);

void BM_AddRecorded(benchmark::State& state) {
  Tensor a = autograd::set_requires_grad(ones({1})), b = ones({1});
  for (auto _ : state) benchmark::DoNotOptimize(a + b);
}
BENCHMARK(BM_AddRecorded);

void BM_AddForwardBackward(benchmark::State& state) {
  Tensor a = autograd::set_requires_grad(ones({1})), b = ones({1});
  for (auto _ : state) {
    autograd::backward(sum(a + b));
  }
}
BENCHMARK(BM_AddForwardBackward);

struct Mlp : nn::Module {
  Mlp() : l1(register_module("l1", std::make_shared<nn::Linear>(8, 32))),
          l2(register_module("l2", std::make_shared<nn::Linear>(32, 4))) {}
  Tensor forward(const Tensor& x) const { return l2->forward(relu(l1->forward(x))); }
  std::shared_ptr<nn::Linear> l1, l2;
};

void BM_MlpTrainStep(benchmark::State& state) {
  manual_seed(0);
  Mlp model;
  nn::Dataset data = nn::make_classification(256, 8, 4);
  const Tensor& x = data.x;
  const Tensor& y = data.y;
  nn::optim::Adam opt(model.parameters(), {.lr = 0.01});
  for (auto _ : state) {
    opt.zero_grad();
    autograd::backward(nn::cross_entropy(model.forward(x), y));
    opt.step();
  }
}
BENCHMARK(BM_MlpTrainStep);

// Fused and op by op, on 8 large parameters and on 200 small ones.
void optimizer_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"fused", "params", "numel"});
  for (int64_t fused : {0, 1, 2}) b->Args({fused, 8, 1 << 20});
  for (int64_t fused : {0, 1, 2}) b->Args({fused, 200, 4096});
  for (int64_t fused : {0, 1, 2}) b->Args({fused, 1000, 256});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

// `count` parameters of `numel` random floats, each with a random gradient set.
std::vector<Tensor> parameters_with_grads(int64_t count, int64_t numel) {
  manual_seed(0);
  std::vector<Tensor> params;
  for (int64_t i = 0; i < count; ++i) {
    params.push_back(nn::parameter(randn({numel})));
    autograd::set_grad(params.back(), randn({numel}));
  }
  return params;
}

// Note [Fused optimizer step]: one AdamW step over `params` parameters of `numel` floats each: the
// optimizer's step with the list op (arg fused = 2: the CPU's _multi_tensor_adam_ kernel, one call),
// one per-parameter op per parameter (1: _fused_adam_, what the step called before the list op),
// and the op-by-op update (0).
void BM_AdamWStep(benchmark::State& state) {
  const int64_t fused = state.range(0);
  const int64_t count = state.range(1), numel = state.range(2);
  const std::vector<Tensor> params = parameters_with_grads(count, numel);
  nn::optim::AdamOptions o{.lr = 1e-3, .weight_decay = 0.01};
  o.fused = fused != 0;
  nn::optim::AdamW opt(params, o);
  if (fused == 1) {
    std::vector<Tensor> m, v, g;
    for (const Tensor& p : params) {
      m.push_back(zeros_like(p));
      v.push_back(zeros_like(p));
      g.push_back(autograd::grad(p));
    }
    const FusedAdamArgs a{.lr = 1e-3, .weight_decay = 0.01, .bias_correction1 = 0.1, .bias_correction2 = 0.001,
                          .decoupled_weight_decay = true};
    autograd::NoGradGuard no_grad;
    for (auto _ : state)
      for (size_t i = 0; i < params.size(); ++i) _fused_adam_(params[i], m[i], v[i], g[i], a);
  } else {
    for (auto _ : state) opt.step();
  }
  state.SetBytesProcessed(state.iterations() * count * numel * int64_t(sizeof(float)) * 7);  // 4 reads, 3 writes
}
BENCHMARK(BM_AdamWStep)
->Apply(optimizer_args);

// The same for SGD with Nesterov momentum and weight decay (_multi_tensor_sgd_, _fused_sgd_ per
// parameter, op by op).
void BM_SGDStep(benchmark::State& state) {
  const int64_t fused = state.range(0);
  const int64_t count = state.range(1), numel = state.range(2);
  const std::vector<Tensor> params = parameters_with_grads(count, numel);
  nn::optim::SGDOptions o{.lr = 1e-3, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
  o.fused = fused != 0;
  nn::optim::SGD opt(params, o);
  if (fused == 1) {
    std::vector<Tensor> buf, g;
    for (const Tensor& p : params) {
      buf.push_back(zeros_like(p));
      g.push_back(autograd::grad(p));
    }
    const FusedSgdArgs a{.lr = 1e-3, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
    autograd::NoGradGuard no_grad;
    for (auto _ : state)
      for (size_t i = 0; i < params.size(); ++i) _fused_sgd_(params[i], buf[i], g[i], a);
    state.SetBytesProcessed(state.iterations() * count * numel * int64_t(sizeof(float)) * 5);
    return;
  }
  opt.step();  // the first step makes the buffers
  for (auto _ : state) opt.step();
  state.SetBytesProcessed(state.iterations() * count * numel * int64_t(sizeof(float)) * 5);  // 3 reads, 2 writes
}
BENCHMARK(BM_SGDStep)
->Apply(optimizer_args);

}  // namespace

BENCHMARK_MAIN();
