// The OpenCL backend's numerics at the edges, through the public API: wrapped numbers that arrive
// as 0-dim CPU operands of their own dtype (int64, float64), scalar attributes, conversions to bool
// and of NaN / inf / out-of-range values to integers, transcendentals far in their tails, softmax
// rows with NaN or huge maxima, and tensors with no elements. Expected values are hand-computed or
// come from naive double formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace ts = tessera;

namespace {

bool have_opencl() { return ts::device_count(ts::kOpenCL) > 0; }

class OpenCLNumerics : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_opencl()) GTEST_SKIP() << "no OpenCL device on this machine";
  }
};

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A C++ number as the dispatcher passes it to kernels: a 0-dim CPU tensor of its own kind's dtype,
// marked as a wrapped number.
ts::Tensor wrapped(double v) {
  ts::Tensor t = ts::full({}, v, ts::TensorOptions(ts::kFloat64));
  t.impl()->set_wrapped_number(true);
  return t;
}
ts::Tensor wrapped(int64_t v) {
  ts::Tensor t = ts::full({}, v, ts::TensorOptions(ts::kInt64));
  t.impl()->set_wrapped_number(true);
  return t;
}

ts::Tensor on_cl(const std::vector<double>& v, ts::DType t) {
  return ts::tensor(v, {int64_t(v.size())}, ts::TensorOptions(t)).to("opencl");
}

std::vector<double> values(const ts::Tensor& t) {
  ts::Tensor c = t.cpu().to(ts::kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// |got - want| <= rel * |want| + abs_tol, NaN only where NaN is expected.
void expect_values(const ts::Tensor& got, const std::vector<double>& want, double rel, double abs_tol,
                   const std::string& what) {
  const std::vector<double> g = values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " at " << i << ": got " << g[i];
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(g[i], want[i]) << what << " at " << i;
    } else {
      EXPECT_LE(std::fabs(g[i] - want[i]), rel * std::fabs(want[i]) + abs_tol)
          << what << " at " << i << ": got " << g[i] << ", want " << want[i];
    }
  }
}

}  // namespace

TEST_F(OpenCLNumerics, WrappedNumbersConvertStraightIntoTheComputeType) {
  // uint8 [7] / -3: true division in float32 with -3, not with uint8(-3) = 253.
  ts::Tensor q = ts::div(on_cl({7}, ts::kUInt8), wrapped(int64_t(-3)));
  EXPECT_EQ(q.dtype(), ts::kFloat32);
  EXPECT_TRUE(q.is("opencl"));
  expect_values(q, {7.0 / -3.0}, 1e-6, 0, "uint8 / -3");
  expect_values(ts::div(on_cl({100}, ts::kInt8), wrapped(int64_t(300))), {1.0 / 3.0}, 1e-6, 0, "int8 / 300");
  expect_values(ts::div(on_cl({1}, ts::kInt32), wrapped(int64_t(1) << 40)), {1.0 / 1099511627776.0}, 1e-6, 0,
                "int32 / 2^40");
  // uint8 [2] * -3 wraps, as in PyTorch.
  ts::Tensor w = ts::mul(on_cl({2}, ts::kUInt8), wrapped(int64_t(-3)));
  EXPECT_EQ(w.dtype(), ts::kUInt8);
  expect_values(w, {250}, 0, 0, "uint8 * -3");
  // Comparisons convert the number into the promoted type: float32 0.1f == 0.1 (as float32).
  expect_values(ts::eq(on_cl({0.1, 0.2}, ts::kFloat32), wrapped(0.1)), {1, 0}, 0, 0, "float32 == 0.1");
  expect_values(ts::lt(on_cl({2, 3}, ts::kInt32), wrapped(2.5)), {1, 0}, 0, 0, "int32 < 2.5");
}

TEST_F(OpenCLNumerics, FloatingAlphaOnIntegralAddIsAnError) {
  ts::Tensor a = on_cl({1, 2}, ts::kInt32), b = on_cl({3, 4}, ts::kInt32);
  for (int sub = 0; sub < 2; ++sub) {
    try {
      if (sub) ts::sub(a, b, 2.5); else ts::add(a, b, 2.5);
      FAIL() << "a floating alpha on int32 " << (sub ? "sub" : "add") << " was accepted";
    } catch (const ts::Error& e) {
      EXPECT_NE(std::string(e.what()).find("alpha must not be a floating point number"), std::string::npos)
          << e.what();
    }
  }
  expect_values(ts::add(a, b, int64_t(2)), {7, 10}, 0, 0, "int32 add, alpha 2");
  expect_values(ts::add(on_cl({1, 2}, ts::kFloat32), on_cl({3, 4}, ts::kFloat32), 0.5), {2.5, 4}, 0, 0,
                "float32 add, alpha 0.5");
}

// PyTorch: a bool result takes alpha as a bool, so an alpha of 2**40 (whose low 32 bits are 0)
// still adds: false + 2**40 * true is true.
TEST_F(OpenCLNumerics, LargeIntegerAlphaOnBoolAddIsTrue) {
  ts::Tensor a = on_cl({0, 0, 1}, ts::kBool), b = on_cl({1, 0, 1}, ts::kBool);
  expect_values(ts::add(a, b, int64_t(1) << 40), {1, 0, 1}, 0, 0, "bool add, alpha 2**40");
}

TEST_F(OpenCLNumerics, ConversionsToBoolAndToIntegers) {
  const double min64 = double(std::numeric_limits<int64_t>::min()), min32 = double(std::numeric_limits<int32_t>::min());
  for (ts::DType t : {ts::kFloat32, ts::kFloat64, ts::kFloat16}) {
    expect_values(on_cl({0.5, 0.0, kNaN, -0.0, -2.0}, t).to(ts::kBool), {1, 0, 1, 0, 1}, 0, 0, "-> bool");
    // Note [Floating to integral conversion]: PyTorch's results on x86-64.
    expect_values(on_cl({kNaN, kInf, -kInf, -3.7, 2.9}, t).to(ts::kInt64), {min64, min64, min64, -3, 2}, 0, 0,
                  "-> int64");
    expect_values(on_cl({kNaN, -kInf, -1.5, 255.9}, t).to(ts::kInt32), {min32, min32, -1, 255}, 0, 0, "-> int32");
    expect_values(on_cl({300.7, -1.2, kNaN}, t).to(ts::kUInt8), {44, 255, 0}, 0, 0, "-> uint8");
  }
  expect_values(on_cl({3e9, 1e20}, ts::kFloat64).to(ts::kInt32), {min32, min32}, 0, 0, "out of int32 range");
  expect_values(on_cl({1e20}, ts::kFloat32).to(ts::kInt64), {min64}, 0, 0, "out of int64 range");
}

TEST_F(OpenCLNumerics, TranscendentalsStayAccurateInTheirTails) {
  const std::vector<double> xs = {-1e10, -100, -10, -8, -5, -2, 0.5, 3, 10, 1e10};
  auto gelu_tanh = [](double x) {
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return x / (1 + std::exp(-2 * u));
  };
  std::vector<double> g, gt, sg, si;
  for (double x : xs) {
    g.push_back(0.5 * x * std::erfc(-x / std::sqrt(2.0)));
    gt.push_back(gelu_tanh(x));
    sg.push_back(1 / (1 + std::exp(-x)));
    si.push_back(x / (1 + std::exp(-x)));
  }
  for (ts::DType t : {ts::kFloat32, ts::kFloat64}) {
    const double rel = t == ts::kFloat32 ? 1e-4 : 1e-10;
    ts::Tensor x = on_cl(xs, t);
    // Absolute slack only below float32's normal range (a device may flush subnormals).
    expect_values(ts::gelu(x), g, rel, 1e-37, "gelu");
    expect_values(ts::gelu(x, "tanh"), gt, rel, 1e-37, "gelu tanh");
    expect_values(ts::sigmoid(x), sg, rel, 1e-37, "sigmoid");
    expect_values(ts::silu(x), si, rel, 1e-37, "silu");
    std::vector<double> th;
    for (double v : xs) th.push_back(std::tanh(v));
    expect_values(ts::tanh(x), th, rel, 0, "tanh");
  }
}

TEST_F(OpenCLNumerics, SoftmaxRowsWithNaNOrHugeMaxima) {
  const std::vector<double> rows = {1, kNaN, 2,  1e30, 1e30, 0,  -kInf, 0, 0,  1000, 999, 998};
  const double l2 = std::log(2.0);
  const double s3 = std::log(1 + std::exp(-1.0) + std::exp(-2.0));
  for (ts::DType t : {ts::kFloat32, ts::kFloat64}) {
    const double rel = t == ts::kFloat32 ? 1e-5 : 1e-12;
    ts::Tensor x = ts::tensor(rows, {4, 3}, ts::TensorOptions(t)).to("opencl");
    expect_values(ts::softmax(x, 1),
                  {kNaN, kNaN, kNaN, 0.5, 0.5, 0, 0, 0.5, 0.5, std::exp(-s3), std::exp(-1 - s3), std::exp(-2 - s3)},
                  rel, 1e-30, "softmax");
    // log_softmax is (x - max) - log(sum): -1e30 for the 0 next to two 1e30, not -inf or NaN.
    expect_values(ts::log_softmax(x, 1), {kNaN, kNaN, kNaN, -l2, -l2, -1e30, -kInf, -l2, -l2, -s3, -1 - s3, -2 - s3},
                  rel, 0, "log_softmax");
  }
}

TEST_F(OpenCLNumerics, EmptyTensorsAndReductionsOverEmptyDims) {
  ts::Tensor z = ts::zeros({0}, ts::TensorOptions(ts::kFloat32).device("opencl"));
  EXPECT_TRUE(z.is("opencl"));
  EXPECT_EQ(z.cpu().numel(), 0);
  ts::Tensor r = ts::randn({2, 0}, ts::TensorOptions(ts::kFloat32).device("opencl"));
  EXPECT_EQ(r.numel(), 0);
  expect_values(ts::sum(r, {1}), {0, 0}, 0, 0, "sum over the empty dim");
  expect_values(ts::mean(r, {1}), {kNaN, kNaN}, 0, 0, "mean over the empty dim");
  expect_values(ts::sum(r), {0}, 0, 0, "sum of an empty tensor");
  EXPECT_EQ(ts::sum(r, {0}).numel(), 0);
  expect_values(ts::sum(ts::zeros({0, 3}, ts::TensorOptions(ts::kInt32).device("opencl")), {0}), {0, 0, 0}, 0, 0,
                "int32 sum over the empty dim");
  EXPECT_THROW(ts::amax(r, {1}), ts::Error);
  ts::Tensor c = ts::matmul(ts::randn({3, 0}, ts::TensorOptions(ts::kFloat32).device("opencl")),
                            ts::randn({0, 2}, ts::TensorOptions(ts::kFloat32).device("opencl")));
  EXPECT_TRUE(c.is("opencl"));
  expect_values(c, std::vector<double>(6, 0.0), 0, 0, "matmul with k = 0");
  EXPECT_EQ((r + r).numel(), 0);
  EXPECT_EQ(ts::exp(r).numel(), 0);
  EXPECT_EQ(ts::softmax(r, 1).numel(), 0);
  EXPECT_EQ(r.to(ts::kFloat16).numel(), 0);
  // 0-dim: sum over dim 0 is the element itself.
  expect_values(ts::sum(ts::full({}, 4.5, ts::TensorOptions(ts::kFloat32).device("opencl")), {0}), {4.5}, 0, 0,
                "sum of a 0-dim tensor over dim 0");
}
