// Custom autograd functions (tessera/autograd/function.h).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

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

// x *= 2 in place, marked dirty (Note [Dirty inputs]): PyTorch's mark_dirty example.
struct DoubleInPlace : ag::Function<DoubleInPlace> {
  static Tensor forward(ag::AutogradContext* ctx, Tensor x) {
    x.mul_(tensor(std::vector<double>{2.0}));
    ctx->mark_dirty({x});
    return x;
  }
  static std::vector<Tensor> backward(ag::AutogradContext*, std::vector<Tensor> grads) { return {grads[0] * 2.0}; }
};

using testing::error_of;

TEST(CustomFunction, MarkDirtyRebasesTheWrittenInputOntoTheFunction) {
  std::mt19937 rng(std::random_device{}());
  Tensor a = ag::set_requires_grad(testing::uniform64(rng, {5}));
  Tensor x = a * 3.0;  // a non-leaf: it may be written
  Tensor y = DoubleInPlace::apply(x);
  EXPECT_TRUE(y.is_same(x)) << "the output is the written input itself";
  ASSERT_NE(ag::grad_fn(x), nullptr);
  EXPECT_EQ(ag::grad_fn(x)->name(), "DoubleInPlaceBackward");
  ag::backward((y * y).sum());  // y = 6a: d(36 a^2)/da = 72 a
  const auto av = testing::values(a), ga = testing::values(ag::grad(a));
  for (size_t i = 0; i < av.size(); ++i) EXPECT_NEAR(ga[i], 72 * av[i], 1e-12);
  // Through gradcheck too (finite differences of a function that writes a copy of its input).
  testing::gradcheck([](const std::vector<Tensor>& in) { return DoubleInPlace::apply(in[0] * 1.0) * in[0]; },
                     {testing::uniform64(rng, {3, 4})}, {0});
}

TEST(CustomFunction, MarkDirtyErrors) {
  Tensor leaf = ag::set_requires_grad(tensor(std::vector<double>{1, 2}));
  EXPECT_NE(error_of([&] { DoubleInPlace::apply(leaf); }).find("a leaf Variable that requires grad is being used in "
                                                                 "an in-place operation"),
            std::string::npos);
  EXPECT_EQ(testing::values(leaf), (std::vector<double>{2, 4})) << "forward ran (as in PyTorch) before the check";
  struct NotReturned : ag::Function<NotReturned> {
    static Tensor forward(ag::AutogradContext* ctx, Tensor x) {
      x.mul_(tensor(std::vector<double>{2.0}));
      ctx->mark_dirty({x});
      return x * 1.0;
    }
    static std::vector<Tensor> backward(ag::AutogradContext*, std::vector<Tensor> g) { return {g[0]}; }
  };
  Tensor x = ag::set_requires_grad(tensor(std::vector<double>{1, 2})) * 1.0;
  EXPECT_NE(error_of([&] { NotReturned::apply(x); }).find("were not returned as output"), std::string::npos);
  // A view of a tensor in a graph.
  Tensor base = ag::set_requires_grad(tensor(std::vector<double>{1, 2, 3, 4})) * 1.0;
  Tensor view = base.narrow(0, 1, 2);
  EXPECT_NE(error_of([&] { DoubleInPlace::apply(view); }).find("writing a view of a tensor that requires grad"),
            std::string::npos);
  // A node that saved the tensor before the write refuses to backward (the version check).
  Tensor s = ag::set_requires_grad(tensor(std::vector<double>{1, 2})) * 1.0;
  Tensor sq = s * s;  // saves s
  DoubleInPlace::apply(s);
  EXPECT_NE(error_of([&] { ag::backward(sq.sum()); }).find("modified by an inplace operation"), std::string::npos);
  // Without grad mode a leaf may be written, as by any in-place op under NoGradGuard.
  Tensor w = ag::set_requires_grad(tensor(std::vector<double>{1, 2}));
  {
    ag::NoGradGuard no_grad;
    EXPECT_TRUE(DoubleInPlace::apply(w).is_same(w));
  }
  EXPECT_EQ(testing::values(w), (std::vector<double>{2, 4}));
}

}  // namespace
}  // namespace tessera
