// Trains a two-layer MLP on a synthetic 4-class task on any device:
//   train_mlp [device] [steps]      (defaults: cpu, 150)
// The device needs no autograd code of its own: backward runs the contract's formulas on its
// forward kernels (or its own fused backward kernels where it registered some). docs/training.md.
#include <cstdio>
#include <string>

#include "tessera/nn.h"

using namespace tessera;

struct Mlp : nn::Module {
  Mlp() : l1(register_module("l1", std::make_shared<nn::Linear>(8, 32))),
          l2(register_module("l2", std::make_shared<nn::Linear>(32, 4))) {}
  Tensor forward(const Tensor& x) const { return l2->forward(relu(l1->forward(x))); }
  std::shared_ptr<nn::Linear> l1, l2;
};

int main(int argc, char** argv) {
  const std::string device = argc > 1 ? argv[1] : "cpu";
  const int steps = argc > 2 ? std::stoi(argv[2]) : 150;
  try {
    // Data: 256 points in 8 dims, 4 classes, the argmax of a fixed random linear map.
    nn::Dataset data = nn::make_classification(256, 8, 4);
    Tensor x = data.x.to(device), y = data.y.to(device);

    manual_seed(7);
    Mlp model;
    model.to(Device(device));
    nn::optim::Adam opt(model.parameters(), {.lr = 0.02});
    double loss_value = 0;
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      Tensor loss = nn::cross_entropy(model.forward(x), y);
      autograd::backward(loss);
      nn::clip_grad_norm_(model.parameters(), 10.0);
      opt.step();
      loss_value = loss.cpu().item<double>();
      if (s % 25 == 0 || s == steps - 1) std::printf("step %4d  loss %.4f\n", s, loss_value);
    }
    Tensor pred;
    {
      autograd::NoGradGuard no_grad;
      pred = argmax(model.forward(x), 1);
    }
    const double acc = mean(eq(pred, y).to(kFloat32)).cpu().item<double>();
    std::printf("device %s: final loss %.4f, accuracy %.1f%%\n", device.c_str(), loss_value, 100 * acc);
    model.save("train_mlp.safetensors");
    std::printf("saved the weights to train_mlp.safetensors\n");
    if (loss_value < 0.1) std::printf("reached the target (loss < 0.1)\n");
    return loss_value < 0.1 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 2;
  }
}
