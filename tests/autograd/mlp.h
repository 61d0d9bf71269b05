// The MLP the training tests share: 8 -> 32 -> relu -> 4 (autograd.Training.*, autograd.Autocast.*).
#pragma once
#include <memory>

#include "tessera/nn.h"

namespace tessera::test {

struct Mlp : nn::Module {
  explicit Mlp(nn::Options o)
      : l1(register_module("l1", std::make_shared<nn::Linear>(8, 32, true, o))),
        l2(register_module("l2", std::make_shared<nn::Linear>(32, 4, true, o))) {}
  Tensor forward(const Tensor& x) const { return l2->forward(relu(l1->forward(x))); }
  std::shared_ptr<nn::Linear> l1, l2;
};

}  // namespace tessera::test
