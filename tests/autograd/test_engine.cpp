// The engine: leaves and accumulation, retain_graph, grad(), NoGradGuard and InferenceMode, hooks,
// the saved-tensor version check, errors for what is not differentiable, and threads.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "gradcheck.h"
#include "tessera/autograd.h"
#include "tessera/dispatcher.h"
#include "tessera/ops.h"

namespace tessera {
namespace {

namespace ag = autograd;

Tensor t64(std::vector<double> v, std::vector<int64_t> s = {}) {
  if (s.empty()) s = {int64_t(v.size())};
  return tensor(v, s);
}
std::vector<double> vals(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<double>(c.const_data_ptr<double>(), c.const_data_ptr<double>() + c.numel());
}
using testing::error_of;

// Note [Tensor autograd methods]: torch::Tensor's methods, the same as the free functions.
TEST(Engine, TensorMethods) {
  Tensor x = t64({1, 2, 3});
  EXPECT_TRUE(x.requires_grad_().is_same(x));
  EXPECT_TRUE(x.requires_grad() && x.is_leaf() && ag::requires_grad(x));
  Tensor y = (x * x).sum();
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  y.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 4, 6}));
  y.backward(scalar_tensor(0.5, kFloat64));  // a weighted second pass through the retained graph accumulates
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{3, 6, 9}));
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.storage().get(), x.storage().get());
  const std::string e = error_of([&] { d.sum().backward(); });
  EXPECT_NE(e.find("does not require grad"), std::string::npos) << e;
  x.requires_grad_(false);
  EXPECT_FALSE(x.requires_grad());
}

TEST(Engine, LeafFlagsAndGradFn) {
  Tensor x = ag::set_requires_grad(t64({1, 2, 3}));
  EXPECT_TRUE(ag::requires_grad(x));
  EXPECT_TRUE(ag::is_leaf(x));
  EXPECT_EQ(ag::grad_fn(x), nullptr);
  Tensor y = x * x;
  EXPECT_TRUE(ag::requires_grad(y));
  EXPECT_FALSE(ag::is_leaf(y));
  ASSERT_NE(ag::grad_fn(y), nullptr);
  EXPECT_EQ(ag::grad_fn(y)->name(), "MulBackward");
  Tensor plain = t64({1, 2});
  EXPECT_FALSE(ag::requires_grad(plain));
  EXPECT_FALSE(ag::requires_grad(plain * plain));
  EXPECT_NE(error_of([&] { ag::set_requires_grad(tensor(std::vector<int64_t>{1, 2})); }).find("floating point"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ag::set_requires_grad(y, false); }).find("leaf"), std::string::npos);
}

TEST(Engine, BackwardAccumulatesIntoLeaves) {
  Tensor x = ag::set_requires_grad(t64({1, 2, 3}));
  Tensor w = ag::set_requires_grad(t64({0.5}));
  Tensor loss = (x * x * w).sum();  // d/dx = 2xw, d/dw = sum(x^2)
  ag::backward(loss);
  EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(vals(ag::grad(w)), (std::vector<double>{14}));
  ag::backward((x * 2.0).sum());  // accumulates
  EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{3, 4, 5}));
  ag::set_grad(x, Tensor());
  EXPECT_FALSE(ag::grad(x).defined());
}

TEST(Engine, SharedSubexpressionSumsBothPaths) {
  Tensor x = ag::set_requires_grad(t64({2}));
  Tensor y = x * 3.0;
  Tensor z = y * y + y;  // dz/dx = (2y + 1) * 3 = 39
  ag::backward(z.sum());
  EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{39}));
}

TEST(Engine, ZeroDimLeafNextToAVector) {
  // A 0-dim CPU tensor joins tensors of any shape and device; its gradient is still recorded.
  Tensor s = ag::set_requires_grad(tensor(std::vector<double>{2.0}).reshape({}));
  Tensor x = t64({1, 2, 3});
  Tensor y = x * s;
  ASSERT_TRUE(ag::requires_grad(y));
  ag::backward(y.sum());
  EXPECT_EQ(vals(ag::grad(s)), (std::vector<double>{6}));
  EXPECT_EQ(ag::grad(s).dim(), 0);
}

TEST(Engine, RetainGraph) {
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  Tensor loss = (x.exp()).sum();
  ag::backward(loss, Tensor(), /*retain_graph=*/true);
  ag::backward(loss);  // the graph was kept
  const std::vector<double> g = vals(ag::grad(x));
  EXPECT_NEAR(g[0], 2 * std::exp(1.0), 1e-12);
  const std::string e = error_of([&] { ag::backward(loss); });
  EXPECT_NE(e.find("backward through the graph a second time"), std::string::npos) << e;
}

TEST(Engine, GradReturnsWithoutAccumulating) {
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  Tensor y = ag::set_requires_grad(t64({3, 4}));
  Tensor out = (x * y).sum();
  std::vector<Tensor> g = ag::grad({out}, {x, y});
  EXPECT_EQ(vals(g[0]), (std::vector<double>{3, 4}));
  EXPECT_EQ(vals(g[1]), (std::vector<double>{1, 2}));
  EXPECT_FALSE(ag::grad(x).defined());
  Tensor unused = ag::set_requires_grad(t64({1}));
  Tensor out2 = (x * 2.0).sum();
  EXPECT_NE(error_of([&] { ag::grad({out2}, {unused}, {}, true); }).find("allow_unused"), std::string::npos);
  EXPECT_FALSE(ag::grad({out2}, {unused}, {}, false, true)[0].defined());
  // A gradient with respect to an intermediate.
  Tensor h = x * 3.0;
  Tensor o = (h * h).sum();
  EXPECT_EQ(vals(ag::grad({o}, {h})[0]), (std::vector<double>{6, 12}));
}

TEST(Engine, ImplicitGradOnlyForScalars) {
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  const std::string e = error_of([&] { ag::backward(x * 2.0); });
  EXPECT_NE(e.find("only for scalar outputs"), std::string::npos) << e;
  ag::backward(x * 2.0, t64({1, 10}));
  EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{2, 20}));
  EXPECT_NE(error_of([&] { ag::backward(t64({1.0})); }).find("does not require grad"), std::string::npos);
}

TEST(Engine, NoGradAndInferenceMode) {
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  EXPECT_TRUE(ag::is_grad_enabled());
  {
    ag::NoGradGuard g;
    EXPECT_FALSE(ag::is_grad_enabled());
    Tensor y = x * 2.0;
    EXPECT_FALSE(ag::requires_grad(y));
    EXPECT_FALSE(ag::requires_grad(x.view({2, 1})));  // views made without grad mode are outside the graph
    {
      ag::EnableGradGuard e;
      EXPECT_TRUE(ag::requires_grad(x * 2.0));
    }
    EXPECT_FALSE(ag::is_grad_enabled());
  }
  EXPECT_TRUE(ag::is_grad_enabled());
  {
    ag::InferenceMode im;
    EXPECT_TRUE(ag::is_inference_mode_enabled());
    EXPECT_FALSE(ag::requires_grad(x.exp()));
  }
  EXPECT_FALSE(ag::is_inference_mode_enabled());
  EXPECT_TRUE(ag::requires_grad(x.exp()));
  // Grad mode is per thread.
  ag::NoGradGuard g;
  bool other_thread_enabled = false;
  std::thread([&] { other_thread_enabled = ag::is_grad_enabled(); }).join();
  EXPECT_TRUE(other_thread_enabled);
}

TEST(Engine, SavedTensorModifiedInPlaceIsAnError) {
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  Tensor y = x.exp();  // saves its result
  Tensor z = y * 2.0;
  {
    ag::NoGradGuard g;
    y.add_(t64({1.0}));  // writes the saved result
  }
  const std::string e = error_of([&] { ag::backward(z.sum()); });
  EXPECT_NE(e.find("modified by an inplace operation"), std::string::npos) << e;
  EXPECT_NE(e.find("ExpBackward"), std::string::npos) << e;
  // A tensor the backward does not need may change: add saves neither input.
  Tensor a = ag::set_requires_grad(t64({1, 2}));
  Tensor b = t64({3, 4});
  Tensor c = a + b;
  b.add_(t64({1.0}));
  ag::backward(c.sum());
  EXPECT_EQ(vals(ag::grad(a)), (std::vector<double>{1, 1}));
}

TEST(Engine, InPlaceOnLeavesThatRequireGradIsRefused) {
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  std::string e = error_of([&] { x.add_(t64({1.0})); });
  EXPECT_NE(e.find("leaf Variable that requires grad"), std::string::npos) << e;
  e = error_of([&] { x.fill_(0); });
  EXPECT_NE(e.find("leaf Variable that requires grad"), std::string::npos) << e;
  e = error_of([&] { x.select(0, 0).mul_(t64({2.0})); });
  EXPECT_NE(e.find("a view of a leaf Variable that requires grad"), std::string::npos) << e;
  ag::NoGradGuard g;
  x.add_(t64({1.0}));  // an optimizer step
  EXPECT_EQ(vals(x), (std::vector<double>{2, 3}));
}

TEST(Engine, InPlaceOpsRebaseTheHistory) {
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  Tensor z = ag::set_requires_grad(t64({3, 5}));
  Tensor y = x * 2.0;
  y.add_(z, 3.0);  // y = 2x + 3z
  EXPECT_EQ(ag::grad_fn(y)->name(), "AddBackward");
  y.mul_(z);  // y = (2x + 3z) z: d/dx = 2z, d/dz = 2x + 6z
  ag::backward(y.sum());
  EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{6, 10}));
  EXPECT_EQ(vals(ag::grad(z)), (std::vector<double>{20, 34}));
  // The written tensor is read by the formula as it was before the op: y * y = y^2.
  Tensor w = ag::set_requires_grad(t64({1.5, -2}));
  Tensor v = w * 1.0;
  v.mul_(v);
  ag::backward(v.sum());
  EXPECT_EQ(vals(ag::grad(w)), (std::vector<double>{3, -4}));
  // A plain tensor written with one that requires grad joins the graph.
  Tensor buf = t64({0, 0});
  buf.add_(x);
  EXPECT_TRUE(ag::requires_grad(buf));
}

// fill_, copy_, uniform_ and normal_ (derivatives.json): the written tensor's old value gets a zero
// gradient and copy_'s source the gradient, summed to its shape and converted to its dtype (PyTorch's
// CopyBackwards); a write that would start the history of a tensor sharing memory with another is
// refused before anything is written. Expected values worked out by hand.
TEST(Engine, InPlaceFillCopyAndRandomOpsAreRecorded) {
  Tensor x = ag::set_requires_grad(t64({1, 2, 3}));
  Tensor a = ag::set_requires_grad(t64({4, 5, 6}));
  Tensor y = a * 2.0;
  y.fill_(3);  // y = 3 now: d(y x)/dx = 3, and the write cut a off
  ag::backward((y * x).sum());
  EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{3, 3, 3}));
  EXPECT_EQ(vals(ag::grad(a)), (std::vector<double>{0, 0, 0}));
  // copy_ broadcasts [3] into [2, 3] and converts float64 to float32: sum(buf^2) = 2 sum(b^2).
  Tensor b = ag::set_requires_grad(t64({1, -2, 0.5}));
  Tensor buf = zeros({2, 3});
  buf.copy_(b);
  EXPECT_TRUE(ag::requires_grad(buf));
  ag::backward((buf * buf).sum());
  EXPECT_EQ(vals(ag::grad(b)), (std::vector<double>{4, -8, 2}));
  EXPECT_EQ(ag::grad(b).dtype(), kFloat64);
  // copy_ into a tensor in the graph: its old value's history gets zeros.
  Tensor c = ag::set_requires_grad(t64({1, 1}));
  Tensor d = ag::set_requires_grad(t64({2, 3}));
  Tensor e = c * 5.0;
  e.copy_(d * d);
  ag::backward(e.sum());
  EXPECT_EQ(vals(ag::grad(c)), (std::vector<double>{0, 0}));
  EXPECT_EQ(vals(ag::grad(d)), (std::vector<double>{4, 6}));
  // The random fills likewise.
  Tensor u = ag::set_requires_grad(t64({1, 2}));
  Tensor r = u * 1.0, n = u * 1.0;
  uniform_(r, -1, 1);
  normal_(n);
  ag::backward((r + n + u).sum());
  EXPECT_EQ(vals(ag::grad(u)), (std::vector<double>{1, 1}));
  // A write into a view of a plain tensor (or into a tensor with a live view) would start one
  // history for memory two tensors share: refused, and nothing is written.
  Tensor base = zeros({4}, kFloat64);
  Tensor part = base.narrow(0, 0, 3);
  std::string err = error_of([&] { part.copy_(x); });
  EXPECT_NE(err.find("shares memory with another tensor"), std::string::npos) << err;
  err = error_of([&] { base.copy_(t64({1, 2, 3, 4}) * x.sum()); });
  EXPECT_NE(err.find("shares memory with another tensor"), std::string::npos) << err;
  EXPECT_EQ(vals(base), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_FALSE(ag::requires_grad(base));
}

// Note [In-place ops on views] (PyTorch's CopySlices): an in-place op on a view of a tensor in the
// graph changes the root's value and history; views made before the write see the new history.
// Expected values worked out by hand.
TEST(Engine, InPlaceOpsOnViewsRebaseTheRoot) {
  Tensor x = ag::set_requires_grad(t64({1, 2, 3, 4}));
  {
    Tensor y = x * 2.0;
    y.narrow(0, 1, 2).mul_(t64({3.0}));  // y = [2, 12, 18, 8]
    EXPECT_EQ(vals(y), (std::vector<double>{2, 12, 18, 8}));
    EXPECT_EQ(ag::grad_fn(y)->name(), "CopySlices");
    ag::backward(y.sum());
    EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{2, 6, 6, 2}));
  }
  ag::set_grad(x, Tensor());
  {
    // copy_ into a slice: x0's path is cut; sum(y^2) with y = [z^2, 2, 3, 4].
    Tensor z = ag::set_requires_grad(t64({5}));
    Tensor y = x * 1.0;
    y.narrow(0, 0, 1).copy_(z * z);
    ag::backward((y * y).sum());
    EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{0, 4, 6, 8}));
    EXPECT_EQ(vals(ag::grad(z)), (std::vector<double>{500}));  // 2 y0 * 2 z = 50 * 10
  }
  ag::set_grad(x, Tensor());
  {
    // A view made before the write (a sibling) reads the new values and history.
    Tensor y = x * 2.0;
    Tensor a = y.narrow(0, 0, 2);
    y.narrow(0, 2, 2).mul_(t64({10.0}));  // y = [2, 4, 60, 80]
    ag::backward(a.sum() + y.sum());
    EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{4, 4, 20, 20}));
  }
  ag::set_grad(x, Tensor());
  {
    // A view of a view: the root is the tensor at the bottom of the chain.
    Tensor y = x * 1.0;
    Tensor v1 = y.narrow(0, 0, 3);
    v1.narrow(0, 1, 2).mul_(t64({2.0}));  // y = [1, 4, 6, 4]
    EXPECT_EQ(vals(v1), (std::vector<double>{1, 4, 6}));
    ag::backward(v1.sum(), Tensor(), /*retain_graph=*/true);
    EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{1, 2, 2, 0}));
    ag::set_grad(x, Tensor());
    ag::backward(y.sum());
    EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{1, 2, 2, 1}));
  }
  ag::set_grad(x, Tensor());
  {
    // The root written in place: a view made before sees it (a = 3 x[0:2]).
    Tensor y = x * 1.0;
    Tensor a = y.narrow(0, 0, 2);
    y.mul_(t64({3.0}));
    ag::backward(a.sum());
    EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{3, 3, 0, 0}));
  }
  // A double backward through the write is refused at backward, with what to do.
  Tensor y = x * 1.0;
  y.narrow(0, 0, 2).mul_(t64({2.0}));
  const std::string e = error_of([&] { ag::grad({y.sum()}, {x}, {}, false, false, /*create_graph=*/true); });
  EXPECT_NE(e.find("CopySlices"), std::string::npos) << e;
}

TEST(Engine, InPlaceOnASavedTensorFailsAtBackward) {
  // PyTorch's classic case: exp saves its output, which is then modified in place.
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  Tensor y = x.exp();
  y.mul_(t64({2.0}));
  const std::string e = error_of([&] { ag::backward(y.sum()); });
  EXPECT_NE(e.find("modified by an inplace operation"), std::string::npos) << e;
}

TEST(Engine, Hooks) {
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  std::vector<double> seen;
  ag::register_hook(x, [&](const Tensor& g) {
    seen = vals(g);
    return g * 10.0;  // replaces the gradient
  });
  Tensor h = x * 3.0;
  const int64_t handle = ag::register_hook(h, [](const Tensor& g) { return g + 1.0; });
  ag::backward(h.sum());
  EXPECT_EQ(seen, (std::vector<double>{6, 6}));  // (1 + 1) * 3
  EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{60, 60}));
  ag::set_grad(x, Tensor());
  ag::remove_hook(h, handle);
  Tensor h2 = x * 3.0;
  ag::backward(h2.sum());
  EXPECT_EQ(vals(ag::grad(x)), (std::vector<double>{30, 30}));
}

TEST(Engine, RetainGrad) {
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  Tensor h = x * 2.0;
  ag::retain_grad(h);
  ag::backward((h * h).sum());
  EXPECT_EQ(vals(ag::grad(h)), (std::vector<double>{4, 8}));
}

TEST(Engine, DetachLeavesTheGraph) {
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  Tensor d = ag::detach(x * 2.0);
  EXPECT_FALSE(ag::requires_grad(d));
  EXPECT_EQ(vals(d), (std::vector<double>{2, 4}));
  EXPECT_NE(ag::version(x), 0u);
}

TEST(Engine, NotImplementedDerivativeFailsAtBackward) {
  // _linear_epilogue (a fused inference op the C++ backend emits) has no formula in
  // derivatives.json; it has no C++ function, so boxed.
  Tensor x = ag::set_requires_grad(tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}));
  Tensor w = tensor(std::vector<float>{1, 0, 1, 0, 1, 0}, {2, 3});
  Dispatcher& d = Dispatcher::instance();
  Tensor y = std::get<Tensor>(d.call_boxed(d.op("_linear_epilogue"), {x, w}).at(0));
  ASSERT_TRUE(ag::requires_grad(y));  // recording is fine
  const std::string e = error_of([&] { ag::backward(y.sum()); });
  EXPECT_NE(e.find("the derivative for '_linear_epilogue' is not implemented"), std::string::npos) << e;
}

TEST(Engine, NonDifferentiableOutputsDoNotRequireGrad) {
  Tensor x = ag::set_requires_grad(t64({1, 2}));
  EXPECT_FALSE(ag::requires_grad(gt(x, t64({1.5}))));
  EXPECT_FALSE(ag::requires_grad(argmax(x)));
}

TEST(Engine, ConcurrentBackwardOnSharedLeaves) {
  Tensor w = ag::set_requires_grad(t64({1, 2, 3}));
  constexpr int kThreads = 4, kIters = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kIters; ++i) ag::backward((w * w).sum());
    });
  for (auto& th : threads) th.join();
  const double n = kThreads * kIters;
  EXPECT_EQ(vals(ag::grad(w)), (std::vector<double>{2 * n, 4 * n, 6 * n}));
}

TEST(Engine, NoCycleThroughSavedOutputs) {
  // exp saves its own output; the graph must still be freed with its tensors.
  std::weak_ptr<ag::Node> weak;
  {
    Tensor x = ag::set_requires_grad(t64({1, 2}));
    Tensor y = x.exp();
    weak = ag::grad_fn(y);
    EXPECT_FALSE(weak.expired());
  }
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace tessera
