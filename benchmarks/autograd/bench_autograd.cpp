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

}  // namespace

BENCHMARK_MAIN();
