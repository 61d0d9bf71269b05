// Custom autograd functions (tessera/autograd/function.h).
#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "tessera/autograd/function.h"

namespace tessera {
namespace {

namespace ag = autograd;

// y = x * c with a scalar argument, saved in saved_data.
struct MulConst : ag::Function<MulConst> {
  static Tensor forward(ag::AutogradContext* ctx, const Tensor& x, double c) {
    ctx->saved_data["c"] = c;
    return x * c;
  }
  static std::vector<Tensor> backward(ag::AutogradContext* ctx, std::vector<Tensor> grads) {
    return {grads[0] * std::any_cast<double>(ctx->saved_data["c"]), Tensor()};
  }
};

// A hand-written x * tanh(y) with both inputs saved.
struct MulTanh : ag::Function<MulTanh> {
  static int backward_calls;
  static Tensor forward(ag::AutogradContext* ctx, const Tensor& x, const Tensor& y) {
    EXPECT_FALSE(ag::is_grad_enabled());  // forward runs with grad mode off
    ctx->save_for_backward({x, y});
    return x * tanh(y);
  }
  static std::vector<Tensor> backward(ag::AutogradContext* ctx, std::vector<Tensor> grads) {
    ++backward_calls;
    auto s = ctx->get_saved_variables();
    Tensor t = tanh(s[1]);
    Tensor gx = ctx->needs_input_grad(0) ? grads[0] * t : Tensor();
    Tensor gy = ctx->needs_input_grad(1) ? grads[0] * s[0] * (1.0 - t * t) : Tensor();
    return {gx, gy};
  }
};
int MulTanh::backward_calls = 0;

// Two outputs, one of them an integer index marked non-differentiable.
struct SortedPair : ag::Function<SortedPair> {
  static std::vector<Tensor> forward(ag::AutogradContext* ctx, const Tensor& x) {
    Tensor idx = argmax(x);
    ctx->mark_non_differentiable({idx});
    ctx->save_for_backward({x});
    return {x * 2.0, idx};
  }
  static std::vector<Tensor> backward(ag::AutogradContext*, std::vector<Tensor> grads) { return {grads[0] * 2.0}; }
};

TEST(CustomFunction, ScalarArgumentAndSavedData) {
  Tensor x = ag::set_requires_grad(tensor(std::vector<double>{1, 2, 3}));
  Tensor y = MulConst::apply(x, 3.0);
  ASSERT_NE(ag::grad_fn(y), nullptr);
  EXPECT_EQ(ag::grad_fn(y)->name(), "MulConstBackward");
  ag::backward(y.sum());
  EXPECT_TRUE(allclose(ag::grad(x), tensor(std::vector<double>{3, 3, 3})));
}

TEST(CustomFunction, GradCheckAndNeedsInputGrad) {
  MulTanh::backward_calls = 0;
  std::mt19937 rng(3);
  testing::gradcheck([](const std::vector<Tensor>& v) { return MulTanh::apply(v[0], v[1]); },
                     {testing::uniform64(rng, {3, 4}), testing::uniform64(rng, {3, 4})}, {0, 1});
  EXPECT_EQ(MulTanh::backward_calls, 1);
  // Only y requires grad: backward sees needs_input_grad(0) false.
  Tensor x = testing::uniform64(rng, {2});
  Tensor y = ag::set_requires_grad(testing::uniform64(rng, {2}));
  ag::backward(MulTanh::apply(x, y).sum());
  EXPECT_TRUE(ag::grad(y).defined());
}

TEST(CustomFunction, ComposesWithRecordedOps) {
  Tensor x = ag::set_requires_grad(tensor(std::vector<double>{0.5, -1}));
  Tensor z = MulConst::apply(x.exp(), 2.0).sum();  // d/dx = 2 e^x
  ag::backward(z);
  std::vector<double> g = testing::values(ag::grad(x));
  EXPECT_NEAR(g[0], 2 * std::exp(0.5), 1e-12);
  EXPECT_NEAR(g[1], 2 * std::exp(-1.0), 1e-12);
}

TEST(CustomFunction, NonDifferentiableOutput) {
  Tensor x = ag::set_requires_grad(tensor(std::vector<double>{1, 5, 2}));
  std::vector<Tensor> out = SortedPair::apply(x);
  EXPECT_TRUE(ag::requires_grad(out[0]));
  EXPECT_FALSE(ag::requires_grad(out[1]));
  ag::backward(out[0].sum());
  EXPECT_TRUE(allclose(ag::grad(x), tensor(std::vector<double>{2, 2, 2})));
}

TEST(CustomFunction, NoRecordingWithoutGrad) {
  Tensor x = tensor(std::vector<double>{1, 2});
  EXPECT_EQ(ag::grad_fn(MulConst::apply(x, 2.0)), nullptr);
  Tensor w = ag::set_requires_grad(tensor(std::vector<double>{1, 2}));
  ag::NoGradGuard g;
  EXPECT_EQ(ag::grad_fn(MulConst::apply(w, 2.0)), nullptr);
}

TEST(CustomFunction, WrongNumberOfGradientsIsAnError) {
  struct Bad : ag::Function<Bad> {
    static Tensor forward(ag::AutogradContext*, const Tensor& x) { return x * 1.0; }
    static std::vector<Tensor> backward(ag::AutogradContext*, std::vector<Tensor> g) { return {g[0], g[0]}; }
  };
  Tensor x = ag::set_requires_grad(tensor(std::vector<double>{1}));
  try {
    ag::backward(Bad::apply(x).sum());
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("incorrect number of gradients (expected 1, got 2)"), std::string::npos)
        << e.what();
  }
}

TEST(CustomFunction, SavedTensorVersionCheck) {
  Tensor x = ag::set_requires_grad(tensor(std::vector<double>{1, 2}));
  Tensor y = tensor(std::vector<double>{3, 4});
  Tensor out = MulTanh::apply(x, y);
  y.add_(tensor(std::vector<double>{1.0}));
  try {
    ag::backward(out.sum());
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an inplace operation"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
