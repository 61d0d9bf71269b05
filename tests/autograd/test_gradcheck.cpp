// Every backward formula of dispatcher/ops/derivatives.json, and the view backward, against central
// finite differences in float64: random values, broadcasting and non-contiguous inputs.
#include <limits>

#include "gradcheck.h"
#include "tessera/dispatcher.h"

namespace tessera {
namespace {

using testing::gradcheck;
using testing::noncontiguous;
using testing::uniform64;
using V = std::vector<Tensor>;
namespace ag = autograd;

class GradCheck : public ::testing::Test {
 protected:
  std::mt19937 rng{1234};
  Tensor u(std::vector<int64_t> s, double lo = -1, double hi = 1) { return uniform64(rng, std::move(s), lo, hi); }
  int64_t dim(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
};

// Values in [0.2, 1) with random signs: kinks at 0 stay out of the finite-difference stencil.
Tensor signed_away(std::mt19937& rng, std::vector<int64_t> s) {
  Tensor mag = uniform64(rng, s, 0.2, 1.0);
  Tensor sign = uniform64(rng, s);
  std::vector<double> m = testing::values(mag), g = testing::values(sign);
  for (size_t i = 0; i < m.size(); ++i) m[i] = g[i] < 0 ? -m[i] : m[i];
  return tensor(m, s);
}

TEST_F(GradCheck, AddBroadcastAlpha) {
  const int64_t a = dim(1, 4), b = dim(2, 4);
  gradcheck([](const V& x) { return add(x[0], x[1], 2.5); }, {u({a, 1, b}), u({3, b})}, {0, 1});
}
TEST_F(GradCheck, SubNonContiguous) {
  gradcheck([](const V& x) { return sub(x[0], x[1], -0.5); }, {noncontiguous(u({3, 4})), u({4})}, {0, 1});
}
TEST_F(GradCheck, MulBroadcast) {
  gradcheck([](const V& x) { return x[0] * x[1]; }, {u({2, 3, 1}), noncontiguous(u({3, 4}))}, {0, 1});
}
TEST_F(GradCheck, Div) {
  gradcheck([](const V& x) { return x[0] / x[1]; }, {u({3, 4}), u({4}, 0.5, 2)}, {0, 1});
}
TEST_F(GradCheck, MulByWrappedNumber) {
  gradcheck([](const V& x) { return (x[0] * 3.0 + 1.0) / 2.0 - 4.0; }, {u({5})}, {0});
}
TEST_F(GradCheck, PowScalar) {
  gradcheck([](const V& x) { return pow(x[0], 3); }, {u({4, 3})}, {0});
  gradcheck([](const V& x) { return pow(x[0], -1.5); }, {u({4}, 0.5, 2)}, {0});
}
TEST_F(GradCheck, PowTensor) {
  gradcheck([](const V& x) { return pow(x[0], x[1]); }, {u({3, 4}, 0.5, 2), u({4}, -1, 2)}, {0, 1});
}
TEST_F(GradCheck, MaximumMinimum) {
  gradcheck([](const V& x) { return maximum(x[0], x[1]); }, {u({3, 4}), u({3, 4}) + 0.01}, {0, 1});
  gradcheck([](const V& x) { return minimum(x[0], x[1]); }, {u({3, 4}), u({4})}, {0, 1});
}
TEST_F(GradCheck, Where) {
  Tensor cond = gt(u({3, 4}), scalar_tensor(0.0, kFloat64));
  gradcheck([cond](const V& x) { return where(cond, x[0], x[1]); }, {u({3, 4}), u({4})}, {0, 1});
}
// The formulas of the pointwise and structural ops added for ONNX models, each inside its domain.
TEST_F(GradCheck, OnnxUnary) {
  gradcheck([](const V& x) { return reciprocal(x[0]); }, {signed_away(rng, {3, 4})}, {0});
  gradcheck([](const V& x) { return tan(x[0]); }, {noncontiguous(u({3, 4}))}, {0});
  gradcheck([](const V& x) { return sinh(x[0]); }, {u({3, 4}, -2, 2)}, {0});
  gradcheck([](const V& x) { return cosh(x[0]); }, {u({3, 4}, -2, 2)}, {0});
  gradcheck([](const V& x) { return asin(x[0]); }, {u({3, 4}, -0.9, 0.9)}, {0});
  gradcheck([](const V& x) { return acos(x[0]); }, {u({3, 4}, -0.9, 0.9)}, {0});
  gradcheck([](const V& x) { return atan(x[0]); }, {u({3, 4}, -3, 3)}, {0});
  gradcheck([](const V& x) { return asinh(x[0]); }, {u({3, 4}, -3, 3)}, {0});
  gradcheck([](const V& x) { return acosh(x[0]); }, {u({3, 4}, 1.2, 3)}, {0});
  gradcheck([](const V& x) { return atanh(x[0]); }, {u({3, 4}, -0.9, 0.9)}, {0});
  gradcheck([](const V& x) { return log1p(x[0]); }, {u({3, 4}, -0.5, 2)}, {0});
  gradcheck([](const V& x) { return expm1(x[0]); }, {noncontiguous(u({3, 4}))}, {0});
  gradcheck([](const V& x) { return softsign(x[0]); }, {signed_away(rng, {3, 4})}, {0});
}

// The activations' formulas (PyTorch's *_backward), inputs kept off their kinks: signed_away
// values for the kink at 0, and values away from +-3 (hardsigmoid, hardswish) and from the bounds
// (hardtanh; both sides of each are covered).
TEST_F(GradCheck, Activations) {
  gradcheck([](const V& x) { return leaky_relu(x[0], 0.2); }, {signed_away(rng, {3, 4})}, {0});
  gradcheck([](const V& x) { return elu(x[0], 1.3, 0.7, 1.5); }, {signed_away(rng, {3, 4})}, {0});
  gradcheck([](const V& x) { return selu(x[0]); }, {noncontiguous(signed_away(rng, {4, 3}))}, {0});
  gradcheck([](const V& x) { return celu(x[0], 0.5); }, {signed_away(rng, {3, 4})}, {0});
  gradcheck([](const V& x) { return softplus(x[0], 2, 1.5); }, {u({3, 4}, -2, 2)}, {0});  // both sides of beta x = 1.5
  gradcheck([](const V& x) { return mish(x[0]); }, {u({3, 4}, -3, 3)}, {0});
  const Tensor away = signed_away(rng, {3, 4}) * 5.0;  // |x| in [1, 5]: both sides of +-3 likely, never near 0
  auto off_three = [](const Tensor& t) {  // moves values within 0.05 of +-3 away from the kink
    std::vector<double> v = testing::values(t);
    for (double& e : v)
      if (std::fabs(std::fabs(e) - 3) < 0.05) e += e > 0 ? 0.1 : -0.1;
    return tensor(v, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
  };
  gradcheck([](const V& x) { return hardsigmoid(x[0]); }, {off_three(away)}, {0});
  gradcheck([](const V& x) { return hardswish(x[0]); }, {off_three(away)}, {0});
  gradcheck([](const V& x) { return hardtanh(x[0], -3, 3); }, {off_three(away)}, {0});
}
// Binary ops without a formula before, and reductions / scans.
TEST_F(GradCheck, Atan2RemainderFmod) {
  gradcheck([](const V& x) { return atan2(x[0], x[1]); }, {u({3, 4}), signed_away(rng, {4})}, {0, 1});
  // remainder / fmod: self / other kept away from integers (the jumps of floor and trunc).
  const Tensor a = tensor(std::vector<double>{2.3, -2.3, 5.7, -0.4, 1.1, -3.6}, {2, 3});
  const Tensor b = tensor(std::vector<double>{0.9, -1.3, 2.1}, {3});
  gradcheck([](const V& x) { return remainder(x[0], x[1]); }, {a, b}, {0, 1});
  gradcheck([](const V& x) { return fmod(x[0], x[1]); }, {a, b}, {0, 1});
}
TEST_F(GradCheck, LogsumexpCumsumExpand) {
  gradcheck([](const V& x) { return logsumexp(x[0], {1}); }, {u({3, 4, 2})}, {0});
  gradcheck([](const V& x) { return logsumexp(x[0], {0, 1}, true); }, {noncontiguous(u({3, 4}))}, {0});
  gradcheck([](const V& x) { return cumsum(x[0], 1); }, {u({3, 5})}, {0});
  gradcheck([](const V& x) { return cumsum(x[0], -1); }, {noncontiguous(u({4, 3}))}, {0});
  gradcheck([](const V& x) { return expand_copy(x[0], {2, 3, 4}); }, {u({3, 1})}, {0});
}

TEST_F(GradCheck, PreluRepeatPadVectorNorm) {
  // prelu: one weight, one per channel (dim 1), on inputs kept away from the kink at 0.
  gradcheck([](const V& x) { return prelu(x[0], x[1]); }, {signed_away(rng, {2, 3, 4}), u({1}, 0.1, 0.5)}, {0, 1});
  gradcheck([](const V& x) { return prelu(x[0], x[1]); }, {signed_away(rng, {2, 3, 4}), u({3}, 0.1, 0.5)}, {0, 1});
  // _prelu_kernel (ONNX PRelu's weight, broadcast against self) has no C++ function: boxed.
  gradcheck(
      [](const V& x) {
        Dispatcher& d = Dispatcher::instance();
        return std::get<Tensor>(d.call_boxed(d.op("_prelu_kernel"), {x[0], x[1]}).at(0));
      },
      {signed_away(rng, {2, 3}), u({3}, 0.1, 0.5)}, {0, 1});
  // repeat: within the rank and with extra leading repeats; non-contiguous input.
  gradcheck([](const V& x) { return repeat(x[0], {2, 3}); }, {noncontiguous(u({3, 2}))}, {0});
  gradcheck([](const V& x) { return repeat(x[0], {2, 1, 3}); }, {u({2, 2})}, {0});
  // pad (constant): growing, and cropping with negative amounts.
  gradcheck([](const V& x) { return pad(x[0], {1, 2, 0, 1}, "constant", 0.5); }, {u({3, 4})}, {0});
  gradcheck([](const V& x) { return pad(x[0], {-1, 2, 1, -1}); }, {u({2, 3, 4})}, {0});
  // linalg_vector_norm: ord 2 over all and over a dim, 1, 3, inf (inputs without ties), keepdim.
  gradcheck([](const V& x) { return linalg_vector_norm(x[0]); }, {u({3, 4})}, {0});
  gradcheck([](const V& x) { return linalg_vector_norm(x[0], 2, std::vector<int64_t>{1}, true); }, {u({3, 4})}, {0});
  gradcheck([](const V& x) { return linalg_vector_norm(x[0], 1, std::vector<int64_t>{0}); }, {signed_away(rng, {3, 4})}, {0});
  gradcheck([](const V& x) { return linalg_vector_norm(x[0], 3.0, std::vector<int64_t>{-1}); }, {signed_away(rng, {2, 5})}, {0});
  gradcheck([](const V& x) { return linalg_vector_norm(x[0], INFINITY, std::vector<int64_t>{1}); }, {u({3, 4}, 0.1, 2)}, {0});
}

// pad's other modes: each padded element's gradient goes to the element it copied. Asymmetric
// amounts on 3-D and 4-D inputs, a border as wide as the dim allows, a non-contiguous input, and
// negative amounts (the forward pads from the whole input, then crops).
TEST_F(GradCheck, PadReflectReplicateCircular) {
  for (const std::string mode : {"reflect", "replicate", "circular"}) {
    SCOPED_TRACE(mode);
    gradcheck([&](const V& x) { return pad(x[0], {2, 1}, mode); }, {u({2, 3, 4})}, {0});
    gradcheck([&](const V& x) { return pad(x[0], {0, 3, 2, 1}, mode); }, {noncontiguous(u({2, 3, 4, 5}))}, {0});
    gradcheck([&](const V& x) { return pad(x[0], {3, 1, 1, 3}, mode); }, {u({1, 2, 4, 4})}, {0});
    gradcheck([&](const V& x) { return pad(x[0], {-1, 2, 1, -1}, mode); }, {u({2, 3, 4})}, {0});
  }
  // replicate by hand: a row [a, b, c] padded (2, 1) is [a, a, a, b, c, c]; a gradient of ones
  // gives a 3, b 1, c 2.
  Tensor x = autograd::set_requires_grad(u({1, 3}));
  autograd::backward(pad(x, {2, 1}, "replicate").sum());
  EXPECT_EQ(testing::values(autograd::grad(x)), (std::vector<double>{3, 1, 2}));
}

// copy_ into a fresh buffer (broadcast, then read twice) and fill_ of part of the graph.
TEST_F(GradCheck, CopyAndFill) {
  gradcheck(
      [](const V& x) {
        Tensor buf = zeros({2, 3, 4}, kFloat64);
        buf.copy_(x[0]);
        return buf * x[1];
      },
      {u({3, 1}), noncontiguous(u({2, 3, 4}))}, {0, 1});
  gradcheck(
      [](const V& x) {
        Tensor y = x[0] * x[1];
        y.fill_(0.5);
        return y * x[0] + x[1];
      },
      {u({3, 4}), u({3, 4})}, {0, 1});
}

// _resize (ONNX Resize; no C++ function, so boxed): every mode is linear in its input, one matrix
// per resized dim (Note [Resize backward]). Up and down, 1-D to 3-D, each coordinate transformation,
// scales given, cubic with exclude_outside, a non-contiguous input, and leading dims resized too.
Tensor resize_call(const Tensor& x, std::vector<int64_t> size, const std::string& mode, const std::string& ctm,
                   const std::string& nearest = "round_prefer_floor", double a = -0.75, bool exclude = false,
                   std::optional<Tensor> scales = std::nullopt) {
  Dispatcher& d = Dispatcher::instance();
  return std::get<Tensor>(
      d.call_boxed(d.op("_resize"), {x, std::move(size), mode, ctm, nearest, a, exclude, std::move(scales)}).at(0));
}

TEST_F(GradCheck, Resize) {
  for (const std::string ctm : {"half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                                "half_pixel_symmetric"}) {
    SCOPED_TRACE(ctm);
    for (const std::string mode : {"nearest", "linear", "cubic"}) {
      SCOPED_TRACE(mode);
      gradcheck([&](const V& x) { return resize_call(x[0], {9}, mode, ctm); }, {u({2, 4})}, {0});
      gradcheck([&](const V& x) { return resize_call(x[0], {3, 7}, mode, ctm); }, {u({2, 1, 5, 3})}, {0});
      gradcheck([&](const V& x) { return resize_call(x[0], {2, 6}, mode, ctm, "ceil", -0.5, true); },
                {noncontiguous(u({2, 3, 5, 4}))}, {0});
    }
  }
  // Three dims with scales that are not size / input size, and a leading dim resized.
  Tensor scales = tensor(std::vector<float>{1.5f, 0.75f, 2.5f}, {3});
  gradcheck([&](const V& x) { return resize_call(x[0], {6, 3, 5}, "linear", "asymmetric", "floor", -0.75, false, scales); },
            {u({4, 4, 2})}, {0});
  gradcheck([&](const V& x) { return resize_call(x[0], {3, 2, 4, 6}, "cubic", "half_pixel"); }, {u({2, 2, 3, 3})}, {0});
  // By hand: nearest 2x of [a, b, c] is [a, a, b, b, c, c], so ones give 2 each; asymmetric floor
  // down to 2 reads a and b (sources 0 and 1.5, floored to 1), so c gets nothing.
  Tensor x = autograd::set_requires_grad(u({1, 3}));
  autograd::backward(resize_call(x, {6}, "nearest", "half_pixel").sum());
  EXPECT_EQ(testing::values(autograd::grad(x)), (std::vector<double>{2, 2, 2}));
  Tensor y = autograd::set_requires_grad(u({1, 3}));
  autograd::backward(resize_call(y, {2}, "nearest", "asymmetric", "floor").sum());
  EXPECT_EQ(testing::values(autograd::grad(y)), (std::vector<double>{1, 1, 0}));
}

TEST_F(GradCheck, GroupNormAndBatchNorm) {
  // group_norm: 2 groups of 2 channels, with and without the affine part; 1 group (layer norm over C, H).
  gradcheck([](const V& x) { return group_norm(x[0], 2, x[1], x[2], 1e-5); },
            {u({2, 4, 3}), u({4}, 0.5, 1.5), u({4})}, {0, 1, 2});
  gradcheck([](const V& x) { return group_norm(x[0], 1, std::nullopt, std::nullopt, 1e-5); },
            {noncontiguous(u({3, 2, 2}))}, {0});
  // batch_norm with running statistics (the contract's form): input, weight and bias.
  const Tensor mean = u({3}), var = u({3}, 0.5, 2);
  gradcheck([&](const V& x) { return batch_norm(x[0], x[1], x[2], mean, var, false, 0.1, 1e-5, false); },
            {u({2, 3, 4}), u({3}, 0.5, 1.5), u({3})}, {0, 1, 2});
}

// Note [Higher-order gradients]: each function returns a first derivative computed with
// create_graph; gradcheck differentiates it again (the analytic side is a double backward) and
// compares with central differences of that first derivative.
namespace {
// d(sum(f(x, rest)))/dx with create_graph; x is made a leaf when it is not one (gradcheck's numeric
// side runs f on plain tensors under NoGradGuard).
Tensor first_grad(const V& in, const std::function<Tensor(const Tensor&, const V&)>& f) {
  ag::EnableGradGuard on;
  Tensor x = ag::requires_grad(in[0]) ? in[0] : ag::set_requires_grad(in[0].clone());
  const Tensor y = f(x, in);
  return ag::grad({y}, {x}, {}, false, false, /*create_graph=*/true)[0];
}
}  // namespace

TEST_F(GradCheck, Scatter) {
  // Each target position written once (a permutation along dim 1): self keeps the others.
  const Tensor index = tensor(std::vector<int64_t>{2, 0, 1, 3, 1, 3, 0, 2}).reshape({2, 4});
  gradcheck([&](const V& x) { return scatter(x[0], 1, index, x[1]); }, {u({2, 5}), u({2, 4})}, {0, 1});
}

// topk: values differentiable (scattered back to the chosen positions), indices not; an op with
// two outputs recorded. Distinct values keep the choice stable under the finite differences.
TEST_F(GradCheck, Topk) {
  gradcheck([](const V& x) { return std::get<0>(topk(x[0], 2, 1)); }, {u({3, 5})}, {0});
  gradcheck([](const V& x) { return std::get<0>(topk(x[0], 3, 0, false)); }, {noncontiguous(u({4, 3}))}, {0});
  Tensor x = autograd::set_requires_grad(u({2, 4}));
  auto [values, indices] = topk(x, 1, 1);
  EXPECT_TRUE(autograd::requires_grad(values));
  EXPECT_FALSE(autograd::requires_grad(indices));
}

TEST_F(GradCheck, GatherScatterReduceSliceCopy) {
  // gather: indices may repeat (their gradients add up).
  const Tensor gidx = tensor(std::vector<int64_t>{0, 2, 2, 1, 1, 0}).reshape({2, 3});
  gradcheck([&](const V& x) { return gather(x[0], 1, gidx); }, {u({2, 4})}, {0});
  // scatter_reduce "sum" with repeated targets, with and without self's values.
  const Tensor sidx = tensor(std::vector<int64_t>{0, 1, 1, 3, 0, 0}).reshape({2, 3});
  for (const bool include_self : {true, false})
    gradcheck([&](const V& x) { return scatter_reduce(x[0], 1, sidx, x[1], "sum", include_self); },
              {u({2, 4}), u({2, 3})}, {0, 1});
  // slice_copy: step 1 (a pad back), a larger step (a scatter back), negative and open bounds.
  gradcheck([](const V& x) { return slice_copy(x[0], 1, 1, 4); }, {u({3, 5})}, {0});
  gradcheck([](const V& x) { return slice_copy(x[0], 0, std::nullopt, -1, 2); }, {noncontiguous(u({6, 3}))}, {0});
  gradcheck([](const V& x) { return slice_copy(x[0], -1, -3, std::nullopt, 2); }, {u({2, 2, 7})}, {0});
}

// scatter_reduce's other reductions, with and without self's values, repeated targets (three src
// elements into one position, two into another, one position untouched): random values (no ties for
// amax and amin), then prod with zeros (one zero in a group, two in another, one in self; a product
// is linear in each element, so finite differences at a zero are exact).
TEST_F(GradCheck, ScatterReduceProdMeanAmaxAmin) {
  const Tensor index = tensor(std::vector<int64_t>{0, 1, 1, 3, 1, 2, 0, 0, 0, 4}).reshape({2, 5});
  for (const std::string reduce : {"prod", "mean", "amax", "amin"}) {
    for (const bool include_self : {true, false}) {
      SCOPED_TRACE(reduce + (include_self ? ", include_self" : ""));
      gradcheck([&](const V& x) { return scatter_reduce(x[0], 1, index, x[1], reduce, include_self); },
                {u({2, 5}), noncontiguous(u({2, 5}))}, {0, 1});
    }
  }
  Tensor self = u({2, 5}, 0.5, 1.5), src = u({2, 5}, 0.5, 1.5);
  src.data_ptr<double>()[1] = 0;                                // row 0, target 1: src 1, 2, 4
  src.data_ptr<double>()[6] = 0, src.data_ptr<double>()[7] = 0;  // row 1, target 0: src 6, 7, 8
  self.data_ptr<double>()[3] = 0;                               // row 0, target 3: src 3
  for (const bool include_self : {true, false})
    gradcheck([&](const V& x) { return scatter_reduce(x[0], 1, index, x[1], "prod", include_self); }, {self, src},
              {0, 1});
}

// amax / amin ties by hand (as PyTorch): target 0 gets self 2 and src 2, 1|3, 2; target 1 gets
// src 7|1; target 2 keeps self. With include_self the three 2s share target 0's gradient; without,
// self's 2 still takes its share (PyTorch counts it) but gets none, and src's 2s keep theirs. A self
// value other than the result does not count.
TEST_F(GradCheck, ScatterReduceAmaxAminTies) {
  const Tensor index = tensor(std::vector<int64_t>{0, 0, 1, 0});
  const double third = 1.0 / 3;
  struct Case {
    std::string reduce;
    std::vector<double> self, src;
    bool include_self;
    std::vector<double> gself, gsrc;
  };
  const std::vector<Case> cases = {
      {"amax", {2, 0, 7}, {2, 1, 7, 2}, true, {third, 0, 1}, {third, 0, 1, third}},
      {"amax", {2, 0, 7}, {2, 1, 7, 2}, false, {0, 0, 1}, {third, 0, 1, third}},
      {"amax", {-3, 0, 7}, {2, 1, 7, 2}, false, {0, 0, 1}, {0.5, 0, 1, 0.5}},
      {"amin", {2, 9, 7}, {2, 3, 1, 2}, true, {third, 0, 1}, {third, 0, 1, third}},
      {"amin", {2, 9, 7}, {2, 3, 1, 2}, false, {0, 0, 1}, {third, 0, 1, third}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reduce + (c.include_self ? ", include_self" : ""));
    Tensor self = autograd::set_requires_grad(tensor(c.self)), src = autograd::set_requires_grad(tensor(c.src));
    autograd::backward(scatter_reduce(self, 0, index, src, c.reduce, c.include_self).sum());
    const std::vector<double> gself = testing::values(autograd::grad(self)), gsrc = testing::values(autograd::grad(src));
    for (size_t i = 0; i < c.gself.size(); ++i) EXPECT_DOUBLE_EQ(gself[i], c.gself[i]) << "self " << i;
    for (size_t i = 0; i < c.gsrc.size(); ++i) EXPECT_DOUBLE_EQ(gsrc[i], c.gsrc[i]) << "src " << i;
  }
}

// prod: no zero (result / x), one zero (the others' product there), two zeros (all 0), over a dim
// and over all dims. Finite differences at an exact zero are exact for a product (it is linear in
// each element).
TEST_F(GradCheck, ProdWithAndWithoutZeros) {
  gradcheck([](const V& x) { return prod(x[0], {1}); }, {u({3, 4}, 0.5, 1.5)}, {0});
  gradcheck([](const V& x) { return prod(x[0]); }, {noncontiguous(u({3, 2}, -1.5, -0.5))}, {0});
  Tensor z = u({3, 4}, 0.5, 1.5);
  z.data_ptr<double>()[1] = 0;                             // row 0: one zero
  z.data_ptr<double>()[8] = 0, z.data_ptr<double>()[10] = 0;  // row 2: two zeros
  gradcheck([](const V& x) { return prod(x[0], {1}, true); }, {z}, {0});
  Tensor one = u({2, 3}, 0.5, 1.5);
  one.data_ptr<double>()[4] = 0;
  gradcheck([](const V& x) { return prod(x[0]); }, {one}, {0});
}

TEST_F(GradCheck, SecondDerivatives) {
  // d/dx of 3x^2 is 6x: the simplest double backward, by hand too.
  {
    Tensor x = ag::set_requires_grad(tensor(std::vector<double>{-1.5, 0.5, 2.0}));
    Tensor g = ag::grad({sum(x * x * x)}, {x}, {}, false, false, true)[0];
    ASSERT_TRUE(ag::requires_grad(g));
    Tensor h = ag::grad({sum(g)}, {x})[0];
    const std::vector<double> got = testing::values(h);
    EXPECT_NEAR(got[0], -9.0, 1e-12);
    EXPECT_NEAR(got[1], 3.0, 1e-12);
    EXPECT_NEAR(got[2], 12.0, 1e-12);
  }
  // Elementwise chains, a reduction and a broadcast.
  gradcheck([](const V& in) { return first_grad(in, [](const Tensor& x, const V&) { return sum(tanh(x) * exp(x)); }); },
            {u({3, 4})}, {0});
  gradcheck([](const V& in) {
    return first_grad(in, [](const Tensor& x, const V&) { return sum(softmax(x, 1) * log_softmax(x, 0)); });
  }, {u({3, 4})}, {0});
  // A gradient penalty: |d loss / d x|^2 differentiated with respect to the weights (mixed second
  // derivatives through matmul, its transpose and tanh).
  gradcheck([](const V& in) {
    const Tensor gx = first_grad(in, [](const Tensor& x, const V& v) { return sum(tanh(matmul(x, v[1])) * v[2]); });
    return sum(gx * gx);
  }, {u({2, 3}), u({3, 4}), u({2, 4})}, {1});
  // Views in the first backward (transpose, select, reshape) and layer_norm.
  gradcheck([](const V& in) {
    return first_grad(in, [](const Tensor& x, const V&) {
      const Tensor t = x.transpose(0, 1).reshape({4, 3});
      return sum(layer_norm(t, {3}, std::nullopt, std::nullopt, 1e-5) * t.select(1, 0).unsqueeze(1));
    });
  }, {u({3, 4})}, {0});
}

TEST_F(GradCheck, OnnxStructural) {
  gradcheck([](const V& x) { return tril(x[0], 1); }, {u({4, 5})}, {0});
  gradcheck([](const V& x) { return triu(x[0], -1); }, {noncontiguous(u({4, 5}))}, {0});
  gradcheck([](const V& x) { return flip(x[0], {0, 2}); }, {u({2, 3, 4})}, {0});
}

TEST_F(GradCheck, Unary) {
  gradcheck([](const V& x) { return neg(x[0]); }, {noncontiguous(u({3, 4}))}, {0});
  gradcheck([](const V& x) { return abs(x[0]); }, {signed_away(rng, {3, 4})}, {0});
  gradcheck([](const V& x) { return relu(x[0]); }, {signed_away(rng, {3, 4})}, {0});
  gradcheck([](const V& x) { return exp(x[0]); }, {noncontiguous(u({3, 4}))}, {0});
  gradcheck([](const V& x) { return log(x[0]); }, {u({3, 4}, 0.3, 2)}, {0});
  gradcheck([](const V& x) { return sqrt(x[0]); }, {u({3, 4}, 0.3, 2)}, {0});
  gradcheck([](const V& x) { return rsqrt(x[0]); }, {u({3, 4}, 0.3, 2)}, {0});
  gradcheck([](const V& x) { return sin(x[0]); }, {u({3, 4}, -3, 3)}, {0});
  gradcheck([](const V& x) { return cos(x[0]); }, {u({3, 4}, -3, 3)}, {0});
  gradcheck([](const V& x) { return tanh(x[0]); }, {u({3, 4}, -2, 2)}, {0});
  gradcheck([](const V& x) { return sigmoid(x[0]); }, {u({3, 4}, -3, 3)}, {0});
  gradcheck([](const V& x) { return silu(x[0]); }, {u({3, 4}, -3, 3)}, {0});
  gradcheck([](const V& x) { return erf(x[0]); }, {u({3, 4}, -2, 2)}, {0});
}
TEST_F(GradCheck, Gelu) {
  gradcheck([](const V& x) { return gelu(x[0]); }, {u({3, 4}, -3, 3)}, {0});
  gradcheck([](const V& x) { return gelu(x[0], "tanh"); }, {u({3, 4}, -3, 3)}, {0});
}
TEST_F(GradCheck, Clamp) {
  gradcheck([](const V& x) { return clamp(x[0], -0.5, 0.5); }, {u({4, 5}) * 0.97 + 0.013}, {0});
  gradcheck([](const V& x) { return clamp(x[0], std::nullopt, 0.25); }, {u({6}) * 0.97 + 0.013}, {0});
}
TEST_F(GradCheck, SumMean) {
  const int64_t a = dim(2, 4), b = dim(2, 4);
  gradcheck([](const V& x) { return sum(x[0]); }, {u({a, b})}, {0});
  gradcheck([](const V& x) { return sum(x[0], {1}); }, {noncontiguous(u({a, b, 3}))}, {0});
  gradcheck([](const V& x) { return sum(x[0], {0, -1}, true); }, {u({a, b, 3})}, {0});
  gradcheck([](const V& x) { return mean(x[0], {-1}); }, {u({a, b})}, {0});
  gradcheck([](const V& x) { return mean(x[0]); }, {u({a, b})}, {0});
  gradcheck([](const V& x) { return mean(x[0], {0}, true); }, {u({a, b})}, {0});
}
TEST_F(GradCheck, AmaxAminVar) {
  gradcheck([](const V& x) { return amax(x[0], {1}); }, {u({3, 5})}, {0});
  gradcheck([](const V& x) { return amin(x[0], {0}, true); }, {u({3, 5})}, {0});
  gradcheck([](const V& x) { return var(x[0], {1}); }, {u({3, 5})}, {0});
  gradcheck([](const V& x) { return var(x[0], {}, 0, true); }, {u({3, 5})}, {0});
}
TEST_F(GradCheck, Matmul) {
  const int64_t m = dim(1, 4), k = dim(2, 5), n = dim(1, 4);
  gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {u({m, k}), noncontiguous(u({k, n}))}, {0, 1});
  gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {u({2, m, k}), u({k, n})}, {0, 1});
  gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {u({k}), u({2, k, n})}, {0, 1});
  gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {u({2, m, k}), u({k})}, {0, 1});
  gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {u({k}), u({k})}, {0, 1});
}
TEST_F(GradCheck, Linear) {
  gradcheck([](const V& x) { return linear(x[0], x[1], x[2]); }, {u({2, 3, 4}), u({5, 4}), u({5})}, {0, 1, 2});
  gradcheck([](const V& x) { return linear(x[0], x[1]); }, {noncontiguous(u({4, 3})), u({2, 3})}, {0, 1});
}
TEST_F(GradCheck, SoftmaxLogSoftmax) {
  gradcheck([](const V& x) { return softmax(x[0], -1); }, {u({3, 5}, -2, 2)}, {0});
  gradcheck([](const V& x) { return softmax(x[0], 0); }, {noncontiguous(u({3, 5}, -2, 2))}, {0});
  gradcheck([](const V& x) { return log_softmax(x[0], 1); }, {u({2, 4, 3}, -2, 2)}, {0});
}
TEST_F(GradCheck, LayerNorm) {
  gradcheck([](const V& x) { return layer_norm(x[0], {4}, x[1], x[2], 1e-5); }, {u({3, 4}), u({4}), u({4})},
            {0, 1, 2}, 1e-6, 1e-4, 1e-3);
  gradcheck([](const V& x) { return layer_norm(x[0], {2, 3}); }, {u({2, 2, 3})}, {0}, 1e-6, 1e-4, 1e-3);
}
TEST_F(GradCheck, RmsNorm) {
  gradcheck([](const V& x) { return rms_norm(x[0], {4}, x[1], 1e-6); }, {u({3, 4}), u({4})}, {0, 1}, 1e-6, 1e-4,
            1e-3);
}
TEST_F(GradCheck, Embedding) {
  Tensor idx = tensor(std::vector<int64_t>{0, 3, 3, 1, 4, 0}, {2, 3});
  gradcheck([idx](const V& x) { return embedding(x[0], idx); }, {u({5, 4})}, {0});
}
TEST_F(GradCheck, IndexSelect) {
  Tensor idx = tensor(std::vector<int64_t>{2, 0, 2});
  gradcheck([idx](const V& x) { return index_select(x[0], 1, idx); }, {u({2, 4, 3})}, {0});
  gradcheck([idx](const V& x) { return index_select(x[0], 0, idx); }, {noncontiguous(u({3, 5}))}, {0});
}
TEST_F(GradCheck, CatStack) {
  gradcheck([](const V& x) { return cat({x[0], x[1]}, 1); }, {u({2, 3}), noncontiguous(u({2, 4}))}, {0, 1});
  gradcheck([](const V& x) { return stack({x[0], x[1], x[2]}, -1); }, {u({2, 3}), u({2, 3}), u({2, 3})}, {0, 1, 2});
}
TEST_F(GradCheck, ScaledDotProductAttention) {
  gradcheck([](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
            {u({2, 3, 4}), u({2, 5, 4}), u({2, 5, 3})}, {0, 1, 2});
  gradcheck([](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], std::nullopt, true, 0.7); },
            {u({1, 2, 4, 3}), u({1, 2, 4, 3}), u({1, 2, 4, 2})}, {0, 1, 2});
  Tensor mask = u({3, 5});
  gradcheck([mask](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], mask); },
            {u({3, 4}), u({5, 4}), u({5, 2})}, {0, 1, 2});
}
TEST_F(GradCheck, ToCopyAndClone) {
  gradcheck([](const V& x) { return x[0].to(kFloat32).to(kFloat64) * 2.0; }, {u({3, 4})}, {0}, 1e-3, 1e-3, 1e-3);
  gradcheck([](const V& x) { return x[0].clone() * x[0].contiguous(); }, {noncontiguous(u({3, 4}))}, {0});
}
TEST_F(GradCheck, Views) {
  gradcheck([](const V& x) { return x[0].view({4, 3}) * 2.0; }, {u({3, 4})}, {0});
  gradcheck([](const V& x) { return x[0].reshape({-1}); }, {noncontiguous(u({3, 4}))}, {0});
  gradcheck([](const V& x) { return x[0].permute({2, 0, 1}) * 1.0; }, {u({2, 3, 4})}, {0});
  gradcheck([](const V& x) { return x[0].transpose(0, 1).exp(); }, {u({2, 3})}, {0});
  gradcheck([](const V& x) { return x[0].slice(1, 1, 4, 2) * 3.0; }, {u({3, 5})}, {0});
  gradcheck([](const V& x) { return x[0].select(0, 1).exp(); }, {u({3, 4})}, {0});
  gradcheck([](const V& x) { return x[0].narrow(1, 1, 2).exp(); }, {noncontiguous(u({3, 4}))}, {0});
  gradcheck([](const V& x) { return x[0].expand({2, 3, 4}) * 1.0; }, {u({3, 1})}, {0});
  gradcheck([](const V& x) { return x[0].unsqueeze(1).squeeze(1).squeeze() * 1.0; }, {u({3, 1, 4})}, {0});
  gradcheck([](const V& x) { return x[0].flatten(1).t() * 1.0; }, {u({2, 3, 2})}, {0});
  // A view of a view, and the base used next to its view.
  gradcheck([](const V& x) { return x[0].t().select(1, 0) + x[0].sum({1}); }, {u({3, 3})}, {0});
}
TEST_F(GradCheck, Composite) {
  // A small network: the gradient flows through several formulas and accumulates.
  gradcheck(
      [](const V& x) {
        Tensor h = relu(linear(x[0], x[1], x[2]));
        return log_softmax(matmul(h, x[1]) + x[0], -1).sum() + (h * h).mean();
      },
      {u({3, 4}), u({4, 4}), u({4})}, {0, 1, 2});
}

TEST_F(GradCheck, Conv2d) {
  gradcheck([](const V& x) { return conv2d(x[0], x[1], x[2]); }, {u({2, 2, 5, 4}), u({3, 2, 3, 2}), u({3})},
            {0, 1, 2});
  gradcheck([](const V& x) { return conv2d(x[0], x[1], std::nullopt, {1, 1}, {1, 1}); },
            {noncontiguous(u({1, 2, 4, 4})), u({2, 2, 3, 3})}, {0, 1});
}
// Any stride, padding, dilation and groups, on sizes the stride does not divide (rows the
// convolution never reaches get zero gradient), and the transposed convolution.
TEST_F(GradCheck, Conv2dStridedDilatedGroupedAndTransposed) {
  gradcheck([](const V& x) { return conv2d(x[0], x[1], x[2], {2, 2}, {1, 0}); },
            {u({2, 2, 6, 5}), u({3, 2, 3, 2}), u({3})}, {0, 1, 2});
  gradcheck([](const V& x) { return conv2d(x[0], x[1], std::nullopt, {1, 2}, {2, 1}, {2, 1}); },
            {u({1, 2, 6, 6}), u({2, 2, 3, 3})}, {0, 1});
  gradcheck([](const V& x) { return conv2d(x[0], x[1], x[2], {2, 1}, {1, 1}, {1, 1}, 2); },
            {noncontiguous(u({1, 4, 5, 5})), u({4, 2, 3, 3}), u({4})}, {0, 1, 2});
  gradcheck([](const V& x) { return conv_transpose2d(x[0], x[1], x[2], {2, 2}, {1, 0}, {1, 1}); },
            {u({2, 3, 3, 4}), u({3, 2, 3, 2}), u({2})}, {0, 1, 2});
  gradcheck([](const V& x) { return conv_transpose2d(x[0], x[1], std::nullopt, {2, 1}, {0, 1}, {0, 0}, 2, {1, 2}); },
            {u({1, 4, 3, 3}), u({4, 1, 2, 2})}, {0, 1});
}
// max_pool2d and avg_pool2d: windows that tile the input with a remainder, overlapping windows,
// padding, a stride other than the kernel (and unlike per dim), dilation (max), 3-D and
// non-contiguous inputs. Random values: no ties, so the max stays put under the finite differences.
TEST_F(GradCheck, Pooling) {
  gradcheck([](const V& x) { return max_pool2d(x[0], {2, 2}); }, {u({2, 2, 5, 4})}, {0});
  gradcheck([](const V& x) { return max_pool2d(x[0], {3, 2}, {3, 2}); }, {noncontiguous(u({1, 2, 6, 5}))}, {0});
  gradcheck([](const V& x) { return max_pool2d(x[0], {3, 3}, {1, 1}, {1, 1}); }, {u({2, 2, 5, 6})}, {0});
  gradcheck([](const V& x) { return max_pool2d(x[0], {3, 2}, {2, 1}, {1, 1}, {2, 3}); },
            {noncontiguous(u({1, 3, 8, 7}))}, {0});
  gradcheck([](const V& x) { return max_pool2d(x[0], {2, 3}, {1, 2}, {1, 1}, {1, 2}); }, {u({2, 5, 7})}, {0});
  gradcheck([](const V& x) { return avg_pool2d(x[0], {2, 2}); }, {u({2, 2, 5, 4})}, {0});
  gradcheck([](const V& x) { return avg_pool2d(x[0], {3, 3}, {2, 1}, {1, 1}); }, {noncontiguous(u({2, 2, 6, 5}))}, {0});
  gradcheck([](const V& x) { return avg_pool2d(x[0], {3, 2}, {1, 3}, {1, 0}); }, {u({3, 5, 7})}, {0});
}

namespace {
// d sum(max_pool2d(x) * w) / dx for a 1 x 1 x rows x cols input.
std::vector<double> max_pool_grad(std::vector<double> x, int64_t rows, const std::vector<int64_t>& kernel,
                                  const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                  const std::vector<int64_t>& dilation, std::vector<double> w) {
  const int64_t cols = int64_t(x.size()) / rows;
  Tensor t = autograd::set_requires_grad(tensor(x, {1, 1, rows, cols}));
  const Tensor y = max_pool2d(t, kernel, stride, padding, dilation);
  autograd::backward((y * tensor(w, y.sizes())).sum());
  return testing::values(autograd::grad(t));
}
}  // namespace

// max_pool2d ties worked out by hand: as PyTorch, each output's gradient goes to one element, its
// window's first maximum in row-major order (or its last NaN); padding never takes it.
TEST_F(GradCheck, MaxPoolTies) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  // Tiling 2x2 windows: [1 3; 3 2] -> the 3 at (0, 1); [3 0; 1 3] -> the 3 at (0, 2).
  EXPECT_EQ(max_pool_grad({1, 3, 3, 0, 3, 2, 1, 3}, 2, {2, 2}, {2, 2}, {0, 0}, {1, 1}, {5, 7}),
            (std::vector<double>{0, 5, 7, 0, 0, 0, 0, 0}));
  // A constant 3x3 plane, 2x2 windows at stride 1: output (i, j) takes input (i, j).
  EXPECT_EQ(max_pool_grad(std::vector<double>(9, 1.0), 3, {2, 2}, {1, 1}, {0, 0}, {1, 1}, {1, 2, 3, 4}),
            (std::vector<double>{1, 2, 0, 3, 4, 0, 0, 0, 0}));
  // Padding 1 on a constant 2x2 plane (3x3 outputs): each window's first real element, so (0, 0)
  // takes four outputs, (0, 1) and (1, 0) two, (1, 1) one; the same when every value is -inf.
  const std::vector<double> ones(9, 1.0), expected{4, 2, 2, 1};
  EXPECT_EQ(max_pool_grad({7, 7, 7, 7}, 2, {2, 2}, {1, 1}, {1, 1}, {1, 1}, ones), expected);
  EXPECT_EQ(max_pool_grad({-inf, -inf, -inf, -inf}, 2, {2, 2}, {1, 1}, {1, 1}, {1, 1}, ones), expected);
  // Dilation 2 on a constant 3x3 plane: the one window reads the corners, the first is (0, 0).
  EXPECT_EQ(max_pool_grad(std::vector<double>(9, 2.0), 3, {2, 2}, {1, 1}, {0, 0}, {2, 2}, {3}),
            (std::vector<double>{3, 0, 0, 0, 0, 0, 0, 0, 0}));
  // NaN is a maximum, and a later NaN replaces an earlier one: [nan 1; nan 2] -> (1, 0).
  EXPECT_EQ(max_pool_grad({nan, 1, nan, 2}, 2, {2, 2}, {2, 2}, {0, 0}, {1, 1}, {1}), (std::vector<double>{0, 0, 1, 0}));
}
TEST_F(GradCheck, TransformerBlock) {
  // Pre-norm attention and MLP with residuals: every input, weight and bias gets its gradient.
  gradcheck(
      [](const V& p) {
        const Tensor& x = p[0];
        Tensor h = layer_norm(x, {4}, p[1], p[2]);
        Tensor q = linear(h, p[3]).view({2, 3, 2, 2}).transpose(1, 2);
        Tensor k = linear(h, p[4]).view({2, 3, 2, 2}).transpose(1, 2);
        Tensor v = linear(h, p[5]).view({2, 3, 2, 2}).transpose(1, 2);
        Tensor a = scaled_dot_product_attention(q, k, v, std::nullopt, true).transpose(1, 2).reshape({2, 3, 4});
        Tensor r = x + linear(a, p[6], p[7]);
        Tensor m = linear(gelu(linear(rms_norm(r, {4}, p[8], 1e-6), p[9])), p[10]);
        return r + m;
      },
      {u({2, 3, 4}), u({4}), u({4}), u({4, 4}), u({4, 4}), u({4, 4}), u({4, 4}), u({4}), u({4}), u({8, 4}),
       u({4, 8})},
      {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 1e-6, 1e-4, 1e-3);
}

}  // namespace
}  // namespace tessera
