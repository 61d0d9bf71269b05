// The pointwise ops added for ONNX models (docs/pointwise-ops.md) on the CPU plugin, against values worked out
// by hand from PyTorch 2.x's definitions and against double-precision formulas written here, never
// against the code under test: rounding ties, signs of remainders, integer division by zero, shift
// widths, NaN and infinities, dtype rules and their errors, strided and empty inputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "tessera/dispatcher.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using D = std::vector<double>;
using I = std::vector<int64_t>;
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

D values(const Tensor& t) {
  Tensor c = t.cpu().to(kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return D(p, p + c.numel());
}
I ints(const Tensor& t) {
  Tensor c = t.cpu().to(kInt64).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return I(p, p + c.numel());
}
Tensor f(D v, DType dt = kFloat32, std::vector<int64_t> sizes = {}) {
  if (sizes.empty()) sizes = {int64_t(v.size())};
  return tensor(v, sizes, dtype(dt));
}
Tensor i(I v, DType dt, std::vector<int64_t> sizes = {}) {
  if (sizes.empty()) sizes = {int64_t(v.size())};
  return tensor(v, sizes).to(dt);
}
Tensor b(std::vector<bool> v) { return tensor(v, {int64_t(v.size())}); }

// Equal, NaN matching NaN and the sign of zero compared too.
void expect_exact(const D& got, const D& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::isnan(want[k])) {
      EXPECT_TRUE(std::isnan(got[k])) << "element " << k << ": got " << got[k];
    } else {
      EXPECT_EQ(got[k], want[k]) << "element " << k;
      EXPECT_EQ(std::signbit(got[k]), std::signbit(want[k])) << "sign of element " << k;
    }
  }
}
void expect_close(const D& got, const D& want, double rel, double abs_tol = 1e-30) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::isnan(want[k]))
      EXPECT_TRUE(std::isnan(got[k])) << "element " << k << ": got " << got[k];
    else if (std::isinf(want[k]))
      EXPECT_EQ(got[k], want[k]) << "element " << k;
    else
      EXPECT_NEAR(got[k], want[k], std::abs(want[k]) * rel + abs_tol) << "element " << k;
  }
}
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// ---------------------------------------------------------------- rounding and sign

TEST(CpuOnnxPointwise, RoundTakesHalvesToEven) {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor x = f({0.5, 1.5, 2.5, -0.5, -2.5, 2.25, -2.75, kInf, kNan}, dt);
    Tensor r = round(x);
    EXPECT_EQ(r.dtype(), dt);
    expect_exact(values(r), {0.0, 2.0, 2.0, -0.0, -2.0, 2.0, -3.0, kInf, kNan});
  }
}

TEST(CpuOnnxPointwise, FloorCeilTrunc) {
  Tensor x = f({-1.5, 1.5, -0.0, -0.25, kInf, kNan}, kFloat64);
  expect_exact(values(floor(x)), {-2.0, 1.0, -0.0, -1.0, kInf, kNan});
  expect_exact(values(ceil(x)), {-1.0, 2.0, -0.0, -0.0, kInf, kNan});
  expect_exact(values(trunc(x)), {-1.0, 1.0, -0.0, -0.0, kInf, kNan});
}

TEST(CpuOnnxPointwise, RoundingKeepsIntegersAndRefusesBool) {
  Tensor x = i({-7, 0, 100}, kInt16);
  for (const Tensor& r : {floor(x), ceil(x), round(x), trunc(x)}) {
    EXPECT_EQ(r.dtype(), kInt16);
    EXPECT_EQ(ints(r), (I{-7, 0, 100}));
  }
  EXPECT_THAT(error_of([] { floor(b({true})); }), HasSubstr("not supported for bool"));
}

TEST(CpuOnnxPointwise, SignOfNanIsZeroAndBoolIsKept) {
  expect_exact(values(sign(f({-2.0, 0.0, 3.0, kNan, -0.0, -kInf}))), {-1.0, 0.0, 1.0, 0.0, 0.0, -1.0});
  EXPECT_EQ(ints(sign(i({-5, 0, 7}, kInt8))), (I{-1, 0, 1}));
  Tensor s = sign(b({true, false}));
  EXPECT_EQ(s.dtype(), kBool);
  EXPECT_EQ(ints(s), (I{1, 0}));
}

// ---------------------------------------------------------------- the division family

TEST(CpuOnnxPointwise, RemainderFmodFloorDivideOfFloats) {
  for (DType dt : {kFloat32, kFloat64, kFloat16}) {
    Tensor a = f({5, -5, 5, -5, 5.5, -0.0, 1, -1, 0}, dt), d = f({3, 3, -3, -3, 2, 3, 0, 0, 0}, dt);
    // Python's %: the sign of the divisor; C's fmod: the sign of the dividend; x / 0: NaN for both.
    expect_exact(values(remainder(a, d)), {2, 1, -1, -2, 1.5, -0.0, kNan, kNan, kNan});
    expect_exact(values(fmod(a, d)), {2, -2, 2, -2, 1.5, -0.0, kNan, kNan, kNan});
    // floor(a / d), and a / 0 for a zero divisor (inf, -inf, NaN).
    expect_exact(values(floor_divide(a, d)), {1, -2, -2, 1, 2, -0.0, kInf, -kInf, kNan});
  }
}

TEST(CpuOnnxPointwise, RemainderFmodFloorDivideOfIntegers) {
  for (DType dt : {kInt8, kInt32, kInt64}) {
    Tensor a = i({5, -5, 5, -5, 7, 0}, dt), d = i({3, 3, -3, -3, 7, -2}, dt);
    EXPECT_EQ(remainder(a, d).dtype(), dt);
    EXPECT_EQ(ints(remainder(a, d)), (I{2, 1, -1, -2, 0, 0}));
    EXPECT_EQ(ints(fmod(a, d)), (I{2, -2, 2, -2, 0, 0}));
    EXPECT_EQ(ints(floor_divide(a, d)), (I{1, -2, -2, 1, 1, 0}));
  }
  // The most negative value divided by -1 wraps, as in PyTorch.
  const int64_t lo = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(ints(floor_divide(i({lo}, kInt64), i({-1}, kInt64))), (I{lo}));
  EXPECT_EQ(ints(remainder(i({lo}, kInt64), i({-1}, kInt64))), (I{0}));
  // uint8 and a broadcast divisor.
  EXPECT_EQ(ints(remainder(i({250, 7, 9}, kUInt8), i({4}, kUInt8))), (I{2, 3, 1}));
}

TEST(CpuOnnxPointwise, IntegerDivisionByZeroIsAnError) {
  for (auto op : {remainder, fmod, floor_divide}) {
    EXPECT_THAT(error_of([&] { op(i({1, 2}, kInt32), i({1, 0}, kInt32)); }), HasSubstr("ZeroDivisionError"));
  }
  EXPECT_THAT(error_of([] { remainder(b({true}), b({true})); }), HasSubstr("not implemented for bool"));
}

TEST(CpuOnnxPointwise, DivisionFamilyPromotes) {
  Tensor r = remainder(i({7, -7}, kInt32), f({2.5}, kFloat32));
  EXPECT_EQ(r.dtype(), kFloat32);
  expect_exact(values(r), {2.0, 0.5});
  EXPECT_EQ(floor_divide(i({7}, kUInt8), i({-2}, kInt8)).dtype(), kInt16);
  EXPECT_EQ(ints(floor_divide(i({7}, kUInt8), i({-2}, kInt8))), (I{-4}));
}

// ---------------------------------------------------------------- bitwise and logical

TEST(CpuOnnxPointwise, BitwiseOps) {
  Tensor x = i({12, -1}, kInt8), y = i({10, 3}, kInt8);
  EXPECT_EQ(ints(bitwise_and(x, y)), (I{8, 3}));
  EXPECT_EQ(ints(bitwise_or(x, y)), (I{14, -1}));
  EXPECT_EQ(ints(bitwise_xor(x, y)), (I{6, -4}));
  EXPECT_EQ(ints(bitwise_not(i({0, -1, 5}, kInt8))), (I{-1, 0, -6}));
  EXPECT_EQ(ints(bitwise_not(i({0, 255}, kUInt8))), (I{255, 0}));
  Tensor nb = bitwise_not(b({true, false}));
  EXPECT_EQ(nb.dtype(), kBool);
  EXPECT_EQ(ints(nb), (I{0, 1}));
  EXPECT_EQ(ints(bitwise_xor(b({true, true, false}), b({true, false, false}))), (I{0, 1, 0}));
  // uint8 with int8 promotes to int16: 200 | -1 is -1.
  EXPECT_EQ(ints(bitwise_or(i({200}, kUInt8), i({-1}, kInt8))), (I{-1}));
  EXPECT_THAT(error_of([] { bitwise_and(f({1.0}), f({1.0})); }), HasSubstr("not implemented for"));
  EXPECT_THAT(error_of([] { bitwise_not(f({1.0})); }), HasSubstr("takes integral and bool"));
}

TEST(CpuOnnxPointwise, ShiftsFollowTheWidthOfTheDtype) {
  // uint8 (ONNX BitShift): bits shifted out are lost; a shift of 8 or more gives 0.
  Tensor u = i({1, 255, 128, 3}, kUInt8);
  EXPECT_EQ(ints(bitwise_left_shift(u, i({3, 1, 1, 8}, kUInt8))), (I{8, 254, 0, 0}));
  EXPECT_EQ(ints(bitwise_right_shift(u, i({0, 4, 7, 8}, kUInt8))), (I{1, 15, 1, 0}));
  // Signed: arithmetic right shift; a negative or too wide shift gives the sign fill (right) or 0 (left).
  EXPECT_EQ(ints(bitwise_right_shift(i({-128, -1, 64, -3}, kInt8), i({1, 9, -1, 1}, kInt8))), (I{-64, -1, 0, -2}));
  EXPECT_EQ(ints(bitwise_left_shift(i({1, 1, 1, -1}, kInt8), i({7, 8, -1, 1}, kInt8))), (I{-128, 0, 0, -2}));
  EXPECT_EQ(ints(bitwise_left_shift(i({1}, kInt64), i({62}, kInt64))), (I{int64_t(1) << 62}));
  EXPECT_THAT(error_of([] { bitwise_left_shift(f({1.0}), f({1.0})); }), HasSubstr("integral"));
  EXPECT_THAT(error_of([] { bitwise_left_shift(b({true}), b({true})); }), HasSubstr("integral"));
}

TEST(CpuOnnxPointwise, PredicatesGiveBool) {
  Tensor x = f({kNan, kInf, -kInf, 0.0, 1.0, -0.0});
  EXPECT_EQ(isnan(x).dtype(), kBool);
  EXPECT_EQ(ints(isnan(x)), (I{1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(ints(isinf(x)), (I{0, 1, 1, 0, 0, 0}));
  EXPECT_EQ(ints(logical_not(x)), (I{0, 0, 0, 1, 0, 1}));  // NaN is true
  EXPECT_EQ(ints(isnan(i({1, 2}, kInt32))), (I{0, 0}));
  EXPECT_EQ(ints(isinf(i({1, 2}, kInt64))), (I{0, 0}));
  EXPECT_EQ(ints(logical_not(i({0, 3}, kUInt8))), (I{1, 0}));
  EXPECT_EQ(ints(logical_xor(f({0.0, 2.0, kNan}), i({0, 0, 5}, kInt32))), (I{0, 1, 0}));
}

// ---------------------------------------------------------------- activations against double formulas

double selu_d(double x) {
  const double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  return x > 0 ? scale * x : scale * alpha * std::expm1(x);
}
double hsig_d(double x) { return std::min(std::max(x + 3, 0.0), 6.0) / 6; }

struct Act {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
};

std::vector<Act> activations() {
  return {
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }, [](double x) { return x > 0 ? x : 0.2 * x; }},
      {"elu", [](const Tensor& x) { return elu(x, 0.5, 2.0, 1.5); },
       [](double x) { return x > 0 ? 2 * x : 0.5 * 2 * std::expm1(1.5 * x); }},
      {"selu", [](const Tensor& x) { return selu(x); }, selu_d},
      {"celu", [](const Tensor& x) { return celu(x, 2.0); },
       [](double x) { return std::max(0.0, x) + std::min(0.0, 2 * std::expm1(x / 2)); }},
      {"hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); }, hsig_d},
      {"hardswish", [](const Tensor& x) { return hardswish(x); }, [](double x) { return x * hsig_d(x); }},
      {"hardtanh", [](const Tensor& x) { return hardtanh(x, -0.5, 2.0); },
       [](double x) { return std::min(std::max(x, -0.5), 2.0); }},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 5.0); },
       [](double x) { return 2 * x > 5 ? x : std::log1p(std::exp(2 * x)) / 2; }},
      {"mish", [](const Tensor& x) { return mish(x); }, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }},
      {"softsign", [](const Tensor& x) { return softsign(x); }, [](double x) { return x / (1 + std::abs(x)); }},
  };
}

D grid() {
  D v;
  for (double x = -12; x <= 12; x += 0.37) v.push_back(x);
  for (double x : {-50.0, -20.0, -3.0, -2.999, 3.0, 2.5, 20.0, 50.0, 1e-6, -1e-6, 0.0}) v.push_back(x);
  return v;
}

TEST(CpuOnnxPointwise, ActivationsMatchDoubleFormulas) {
  const D x = grid();
  // The reference takes the inputs as the dtype holds them.
  auto want = [&](const Act& a, DType dt) {
    D w;
    for (double v : values(f(x, dt))) w.push_back(a.ref(v));
    return w;
  };
  for (const Act& a : activations()) {
    SCOPED_TRACE(a.name);
    expect_close(values(a.op(f(x, kFloat64))), want(a, kFloat64), 1e-13, 1e-300);
    expect_close(values(a.op(f(x, kFloat32))), want(a, kFloat32), 2e-6, 1e-30);
    Tensor h = a.op(f(x, kBFloat16));
    EXPECT_EQ(h.dtype(), kBFloat16);
  }
}

TEST(CpuOnnxPointwise, ActivationsPropagateNan) {
  for (const Act& a : activations()) {
    SCOPED_TRACE(a.name);
    EXPECT_TRUE(std::isnan(values(a.op(f({kNan})))[0]));
  }
  // The formulas at the infinities, as PyTorch evaluates them.
  expect_exact(values(mish(f({kInf, -kInf}))), {kInf, kNan});           // -inf * tanh(0)
  expect_exact(values(softsign(f({kInf, -kInf}))), {kNan, kNan});       // inf / (1 + inf)
  expect_exact(values(softplus(f({kInf, -kInf}))), {kInf, 0.0});
  expect_exact(values(hardswish(f({kInf, -kInf}))), {kInf, kNan});     // -inf * 0 / 6
  expect_exact(values(elu(f({kInf, -kInf}))), {kInf, -1.0});
}

TEST(CpuOnnxPointwise, ActivationDtypeRules) {
  EXPECT_THAT(error_of([] { leaky_relu(i({1}, kInt32)); }), HasSubstr("takes floating tensors only"));
  EXPECT_THAT(error_of([] { mish(i({1}, kInt64)); }), HasSubstr("takes floating tensors only"));
  EXPECT_THAT(error_of([] { celu(f({1.0}), 0.0); }), HasSubstr("alpha must not be 0"));
  EXPECT_EQ(softsign(i({3}, kInt32)).dtype(), kFloat32);  // promotes, as F.softsign's division does
  // hardtanh keeps an integral dtype, with the bounds truncated; uint8 refuses negative limits.
  Tensor h = hardtanh(i({-5, 0, 5}, kInt32), -2.7, 3.9);
  EXPECT_EQ(h.dtype(), kInt32);
  EXPECT_EQ(ints(h), (I{-2, 0, 3}));
  EXPECT_THAT(error_of([] { hardtanh(i({1}, kUInt8)); }), HasSubstr("negative limits"));
  EXPECT_THAT(error_of([] { hardtanh(b({true})); }), HasSubstr("bool"));
}

// ---------------------------------------------------------------- unary math against std:: in double

TEST(CpuOnnxPointwise, UnaryMathMatchesDouble) {
  struct U {
    const char* name;
    Tensor (*op)(const Tensor&);
    double (*ref)(double);
    D x;
  };
  const D any = {-3.5, -1.2, -0.3, 0.0, 0.4, 1.1, 2.9, 7.0};
  const D unit = {-0.99, -0.5, -0.1, 0.0, 0.2, 0.75, 0.999, 1.5, -1.0, 1.0};
  const U ops[] = {
      {"tan", tan, [](double v) { return std::tan(v); }, any},
      {"asin", asin, [](double v) { return std::asin(v); }, unit},
      {"acos", acos, [](double v) { return std::acos(v); }, unit},
      {"atan", atan, [](double v) { return std::atan(v); }, any},
      {"sinh", sinh, [](double v) { return std::sinh(v); }, any},
      {"cosh", cosh, [](double v) { return std::cosh(v); }, any},
      {"asinh", asinh, [](double v) { return std::asinh(v); }, any},
      {"acosh", acosh, [](double v) { return std::acosh(v); }, {0.5, 1.0, 1.5, 3.0, 100.0}},
      {"atanh", atanh, [](double v) { return std::atanh(v); }, unit},
      {"log1p", log1p, [](double v) { return std::log1p(v); }, {-1.0, -0.5, 1e-10, 0.0, 3.0, -2.0}},
      {"expm1", expm1, [](double v) { return std::expm1(v); }, {-50.0, -1e-10, 0.0, 1e-7, 2.0, 80.0}},
      {"reciprocal", reciprocal, [](double v) { return 1 / v; }, {-4.0, -0.0, 0.0, 0.5, 3.0}},
  };
  for (const U& u : ops) {
    SCOPED_TRACE(u.name);
    for (DType dt : {kFloat64, kFloat32}) {
      D want;
      for (double v : values(f(u.x, dt))) want.push_back(u.ref(v));  // the inputs as the dtype holds them
      expect_close(values(u.op(f(u.x, dt))), want, dt == kFloat64 ? 1e-14 : 1e-6, 1e-38);
    }
  }
  // Integers promote to the default float dtype.
  Tensor r = reciprocal(i({2, -4}, kInt32));
  EXPECT_EQ(r.dtype(), kFloat32);
  expect_exact(values(r), {0.5, -0.25});
  EXPECT_EQ(atan2(i({1}, kInt32), i({1}, kInt32)).dtype(), kFloat32);
  expect_close(values(atan2(f({1.0, -1.0, 0.0, -0.0}, kFloat64), f({-1.0, -1.0, -1.0, -1.0}, kFloat64))),
               {std::atan2(1.0, -1.0), std::atan2(-1.0, -1.0), M_PI, -M_PI}, 1e-15);
}

// ---------------------------------------------------------------- prelu

// _prelu_kernel is private (no public function): a boxed call, as the ONNX importer makes.
Tensor prelu_kernel(const Tensor& x, const Tensor& w) {
  Dispatcher& d = Dispatcher::instance();
  return std::get<Tensor>(d.call_boxed(d.op("_prelu_kernel"), Stack{x, w}).at(0));
}

TEST(CpuOnnxPointwise, PreluPerChannelAndBroadcast) {
  // x [2, 3, 2]: channel c scales the negative elements by w[c].
  Tensor x = f({-1, 2, -3, 4, -5, 6, 1, -2, 3, -4, 5, -6}, kFloat32, {2, 3, 2});
  Tensor w = f({0.5, 2, -1});
  expect_exact(values(prelu(x, w)), {-0.5, 2, -6, 4, 5, 6, 1, -1, 3, -8, 5, 6});
  expect_exact(values(prelu(x, f({0.1}))), values(where(gt(x, zeros_like(x)), x, x * 0.1)));
  // _prelu_kernel broadcasts the slope as ONNX PRelu does: [3, 1] against [2, 3, 2].
  expect_exact(values(prelu_kernel(x, w.reshape({3, 1}))), values(prelu(x, w)));
  EXPECT_THAT(error_of([&] { prelu(x, f({1, 2})); }), HasSubstr("channel size 3"));
  EXPECT_THAT(error_of([&] { prelu(x, f({1, 2, 3}, kFloat64)); }), HasSubstr("type promoting"));
  EXPECT_THAT(error_of([] { prelu(i({1}, kInt32), i({1}, kInt32)); }), HasSubstr("floating"));
}

// ---------------------------------------------------------------- layouts

TEST(CpuOnnxPointwise, StridedAndEmptyInputs) {
  Tensor x = f({-2.5, -1.5, -0.5, 0.5, 1.5, 2.5}, kFloat32, {2, 3}).t();  // [3, 2], not contiguous
  EXPECT_FALSE(x.is_contiguous());
  expect_exact(values(round(x)), values(round(x.contiguous())));
  expect_exact(values(round(x)), {-2, 0, -2, 2, -0.0, 2});
  expect_exact(values(remainder(x, f({2.0}))), {1.5, 0.5, 0.5, 1.5, 1.5, 0.5});
  expect_close(values(mish(x)), values(mish(x.contiguous())), 0);
  Tensor e = f({}, kFloat32, {0, 3});
  EXPECT_EQ(hardswish(e).sizes().vec(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(isnan(e).dtype(), kBool);
  EXPECT_EQ(remainder(i({}, kInt32, {0, 3}), i({1, 2, 3}, kInt32)).numel(), 0);
  EXPECT_EQ(floor_divide(i({}, kInt32, {0}), i({0}, kInt32)).numel(), 0);  // no element divides by zero
}

}  // namespace
}  // namespace tessera
