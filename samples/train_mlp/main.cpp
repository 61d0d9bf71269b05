// Trains a two-layer MLP on a synthetic 4-class task on any device:
//   train_mlp [device] [steps] [--compile]      (defaults: cpu, 150, eager)
// The device needs no autograd code of its own: backward runs the contract's formulas on its
// forward kernels (or its own fused backward kernels where it registered some). With --compile the
// whole step (forward, backward, clipping, Adam) is captured on the first call and runs as one
// program after that (docs/training.md, "Compiled training steps"). The steps take minibatches of
// 48 rows in turn, the last of each pass 16: the compiled step captures again at the second size
// with the batch dim symbolic, and that program serves both sizes.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/compiler/compile.h"
#include "tessera/nn.h"

using namespace tessera;

struct Mlp : nn::Module {
  Mlp() : l1(register_module("l1", std::make_shared<nn::Linear>(8, 32))),
          l2(register_module("l2", std::make_shared<nn::Linear>(32, 4))) {}
  Tensor forward(const Tensor& x) const { return l2->forward(relu(l1->forward(x))); }
  std::shared_ptr<nn::Linear> l1, l2;
};

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool compiled = std::erase(args, std::string("--compile")) > 0;
  const std::string device = args.size() > 0 ? args[0] : "cpu";
  const int steps = args.size() > 1 ? std::stoi(args[1]) : 150;
  try {
    // Data: 256 points in 8 dims, 4 classes, the argmax of a fixed random linear map.
    nn::Dataset data = nn::make_classification(256, 8, 4);
    Tensor x = data.x.to(device), y = data.y.to(device);

    manual_seed(7);
    Mlp model;
    model.to(Device(device));
    // capturable: the step count and lr live in tensors, so that a compiled step can update them.
    nn::optim::Adam opt(model.parameters(), {.lr = 0.02, .capturable = compiled});
    auto train_step = [&](const std::vector<Tensor>& in) {
      opt.zero_grad();
      Tensor loss = nn::cross_entropy(model.forward(in[0]), in[1]);
      autograd::backward(loss);
      nn::clip_grad_norm_(model.parameters(), 10.0);
      opt.step();
      return std::vector<Tensor>{loss};
    };
    CompiledFunction compiled_step = compile(train_step);
    const int64_t rows = x.size(0), batch = 48;
    for (int s = 0, start = 0; s < steps; ++s) {
      const int64_t n = std::min(batch, rows - start);
      const std::vector<Tensor> in = {x.narrow(0, start, n), y.narrow(0, start, n)};
      Tensor loss = (compiled ? compiled_step(in) : train_step(in))[0];
      if (s % 25 == 0 || s == steps - 1) std::printf("step %4d  loss %.4f (batch of %ld)\n", s, loss.cpu().item<double>(), long(n));
      start = start + n == rows ? 0 : int(start + n);
    }
    double loss_value = 0, acc = 0;
    {
      autograd::NoGradGuard no_grad;
      const Tensor logits = model.forward(x);
      loss_value = nn::cross_entropy(logits, y).cpu().item<double>();
      acc = mean(eq(argmax(logits, 1), y).to(kFloat32)).cpu().item<double>();
    }
    std::string how;
    if (compiled) {
      how = " (compiled:";
      for (const ArtifactInfo& a : compiled_step.artifacts()) how += " " + a.backend + " for " + a.inputs + ";";
      how.back() = ')';
    }
    std::printf("device %s%s: loss over all %ld rows %.4f, accuracy %.1f%%\n", device.c_str(), how.c_str(),
                long(rows), loss_value, 100 * acc);
    model.save("train_mlp.safetensors");
    std::printf("saved the weights to train_mlp.safetensors\n");
    if (loss_value < 0.1) std::printf("reached the target (loss < 0.1)\n");
    return loss_value < 0.1 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 2;
  }
}
