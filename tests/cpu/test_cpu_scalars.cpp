// C++ numbers next to tensors (wrapped numbers) and Scalar attributes on the CPU plugin, plus the
// dispatcher-level semantics that need a real kernel: in-place overlap, allclose, argmax of empty
// tensors, linear with a broadcast bias, cat with legacy empty tensors. Expected values are
// computed here in double (or hand-written from PyTorch 2.x outputs), never by the code under test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tessera/tessera.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using D = std::vector<double>;

D values(const Tensor& t) {
  Tensor c = t.cpu().to(kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return D(p, p + c.numel());
}
template <typename T>
Tensor from(std::vector<T> v, DType dt, std::vector<int64_t> sizes = {}) {
  return tensor_from_buffer(v.data(), dtype_of_v<T>, v.size(), sizes, {}).to(dt);
}
void expect_near(const D& got, const D& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], std::abs(want[i]) * rel) << "element " << i;
}

TEST(CpuScalars, TrueDivisionOfIntegersByANumberUsesTheNumbersValue) {
  Tensor u = from<int64_t>({7, 200}, kUInt8);
  Tensor q = u / -3;
  EXPECT_EQ(q.dtype(), kFloat32);
  expect_near(values(q), {7.0 / -3.0, 200.0 / -3.0}, 1e-6);  // PyTorch: [-2.3333, -66.6667]
  expect_near(values(from<int64_t>({100}, kInt8) / 300), {100.0 / 300.0}, 1e-6);
  const double two40 = std::ldexp(1.0, 40);
  expect_near(values(from<int64_t>({1}, kInt32) / (int64_t(1) << 40)), {1.0 / two40}, 1e-6);  // not inf
  expect_near(values(-3 / from<int64_t>({2}, kUInt8)), {-1.5}, 1e-6);
}

TEST(CpuScalars, HalfPrecisionComputesWithTheNumberInFloat) {
  Tensor h = from<float>({0.001f}, kFloat16);
  const float x = float(Half(0.001f));
  const double want = double(float(Half(x * 1e5f)));  // ~100.06, not inf
  Tensor r = h * 1e5;
  EXPECT_EQ(r.dtype(), kFloat16);
  EXPECT_EQ(values(r), D{want});
  EXPECT_EQ(values(1e5 * h), D{want});
  Tensor b = from<float>({0.001f}, kBFloat16);
  const float xb = float(BFloat16(0.001f));
  EXPECT_EQ(values(b * 1e5), D{double(float(BFloat16(xb * 1e5f)))});
  // 0.5 / 1e5 is a half subnormal, computed from the divisor's exact value (inf if it were rounded to
  // float16 first, giving 0).
  EXPECT_EQ(values(from<float>({0.5f}, kFloat16) / 1e5), D{double(float(Half(0.5f / 1e5f)))});
  EXPECT_GT(values(from<float>({0.5f}, kFloat16) / 1e5)[0], 0.0);
}

TEST(CpuScalars, IntegerArithmeticWrapsAsPyTorch) {
  EXPECT_EQ(values(from<int64_t>({2}, kUInt8) * -3), D{250});   // (2 * -3) mod 256
  EXPECT_EQ(values(from<int64_t>({1}, kUInt8) + 300), D{45});   // (1 + 300) mod 256
  EXPECT_EQ(values(from<int64_t>({1}, kUInt8) - 300), D{213});  // (1 - 300) mod 256
  EXPECT_EQ((from<int64_t>({1}, kUInt8) + 300).dtype(), kUInt8);
  EXPECT_EQ(values(from<int64_t>({100}, kInt8) * 2), D{-56});   // 200 wraps in int8
  Tensor f = from<int64_t>({3}, kInt32) + 0.5;
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_EQ(values(f), D{3.5});
}

TEST(CpuScalars, PowWithAScalarExponent) {
  EXPECT_THAT([] { pow(from<int64_t>({1, 2}, kUInt8), -1); },
              ThrowsMessage<Error>(HasSubstr("integers to negative integer powers are not allowed")));
  EXPECT_EQ(values(pow(from<int64_t>({3, 5}, kUInt8), 2)), (D{9, 25}));
  EXPECT_EQ(values(pow(from<int64_t>({2}, kInt32), 3)), D{8});
  Tensor h = pow(from<float>({300.0f}, kFloat16), 2);  // 90000 overflows half: inf as in PyTorch
  EXPECT_TRUE(std::isinf(values(h)[0]));
  expect_near(values(pow(from<float>({2.0f}, kFloat16), 0.5)), {double(float(Half(std::sqrt(2.0f))))}, 1e-7);
  Tensor p = pow(from<int64_t>({4}, kInt64), 0.5);
  EXPECT_EQ(p.dtype(), kFloat32);
  EXPECT_EQ(values(p), D{2.0});
}

TEST(CpuScalars, ComparisonsConvertTheNumberToTheTensorsDtype) {
  // PyTorch 2.x: uint8 [44] == 300 is True (300 -> 44); float16 [65504] == 65519 is True.
  EXPECT_EQ(values(eq(from<int64_t>({44, 45}, kUInt8), full({}, 300))), (D{1, 0}));
  Tensor c = from<int64_t>({3, 2}, kInt64);
  EXPECT_EQ(values(gt(c, from<double>({2.5}, kFloat64).squeeze())), (D{1, 0}));
}

TEST(CpuScalars, FillAndFullConvertAndCheckTheValue) {
  Tensor u = zeros({3}, kUInt8);
  u.fill_(-1);
  EXPECT_EQ(values(u), D(3, 255.0));
  Tensor i = zeros({2}, kInt8);
  i.fill_(2.5);
  EXPECT_EQ(values(i), D(2, 2.0));
  EXPECT_EQ(values(full({2}, 5, kBool)), D(2, 1.0));
  EXPECT_EQ(values(full({2}, 65504.0, kFloat16)), D(2, 65504.0));
  EXPECT_THAT([] { full({2}, 300, kUInt8); },
              ThrowsMessage<Error>(HasSubstr("cannot be converted to type uint8_t without overflow")));
  EXPECT_THAT([&] { u.fill_(1e5); }, ThrowsMessage<Error>(HasSubstr("without overflow")));
  EXPECT_EQ(values(u), D(3, 255.0));
}

TEST(CpuScalars, AlphaConvertsIntoTheComputeType) {
  Tensor h = from<float>({1.0f}, kFloat16);
  // 1 + 1e4 * 1 in float, then rounded once to half.
  EXPECT_EQ(values(add(h, h, 1e4)), D{double(float(Half(1.0f + 1e4f)))});
  EXPECT_EQ(values(sub(from<int64_t>({10}, kUInt8), from<int64_t>({3}, kUInt8), 2)), D{4});
}

TEST(CpuScalars, InPlaceOverlapOnRealKernels) {
  std::vector<float> v = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  Tensor x = tensor_from_buffer(v.data(), kFloat32, 9, {3, 3}, {});
  EXPECT_THAT([&] { x.t().add_(x); }, ThrowsMessage<Error>(HasSubstr("refer to a single memory location")));
  EXPECT_THAT([&] { zeros({1}).expand({3}).add_(ones({3})); },
              ThrowsMessage<Error>(HasSubstr("more than one element of the written-to tensor")));
  EXPECT_THAT([&] { zeros({1}).expand({3}).mul_(ones({3})); },
              ThrowsMessage<Error>(HasSubstr("more than one element")));
  x.add_(x);
  EXPECT_EQ(values(x), (D{0, 2, 4, 6, 8, 10, 12, 14, 16}));
  x.mul_(x);
  EXPECT_EQ(values(x), (D{0, 4, 16, 36, 64, 100, 144, 196, 256}));
}

TEST(CpuScalars, AllcloseTreatsInfinitiesAndNanAsPyTorch) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(allclose(from<double>({inf}, kFloat32), from<double>({-inf}, kFloat32)));
  EXPECT_FALSE(allclose(from<double>({1.0}, kFloat32), from<double>({inf}, kFloat32)));
  EXPECT_FALSE(allclose(from<double>({inf}, kFloat32), from<double>({1.0}, kFloat32)));
  EXPECT_TRUE(allclose(from<double>({inf, 1.0}, kFloat32), from<double>({inf, 1.0}, kFloat32)));
  EXPECT_FALSE(allclose(from<double>({std::nan("")}, kFloat32), from<double>({std::nan("")}, kFloat32)));
  EXPECT_TRUE(allclose(from<double>({1.0}, kFloat32), from<double>({1.0 + 1e-6}, kFloat32)));
}

TEST(CpuScalars, ArgmaxOverANonEmptyDimOfAnEmptyTensor) {
  Tensor e = zeros({0, 3});
  Tensor r = argmax(e, 1);
  EXPECT_EQ(r.sizes().vec(), std::vector<int64_t>{0});
  EXPECT_EQ(r.dtype(), kInt64);
  EXPECT_EQ(argmax(e, 1, true).sizes().vec(), (std::vector<int64_t>{0, 1}));
  EXPECT_THAT([&] { argmax(e, 0); }, ThrowsMessage<Error>(HasSubstr("size 0")));
}

TEST(CpuScalars, LinearAcceptsABiasThatBroadcasts) {
  Tensor x = from<float>({1, 2, 3, 4, 5, 6}, kFloat32, {2, 3});
  Tensor w = from<float>({1, 0, 0, 0, 1, 0}, kFloat32, {2, 3});  // picks columns 0 and 1
  const D xw = {1, 2, 4, 5};
  auto plus = [&](const D& b) {
    D r = xw;
    for (size_t i = 0; i < r.size(); ++i) r[i] += b[i];
    return r;
  };
  EXPECT_EQ(values(linear(x, w, from<float>({10, 20}, kFloat32, {1, 2}))), plus({10, 20, 10, 20}));
  EXPECT_EQ(values(linear(x, w, full({}, 7.0f))), plus({7, 7, 7, 7}));
  EXPECT_EQ(values(linear(x, w, from<float>({7}, kFloat32, {1}))), plus({7, 7, 7, 7}));
  EXPECT_EQ(values(linear(x, w, from<float>({1, 2, 3, 4}, kFloat32, {2, 2}))), plus({1, 2, 3, 4}));
  EXPECT_EQ(values(linear(x, w, from<float>({10, 20}, kFloat32, {2}))), plus({10, 20, 10, 20}));
  EXPECT_THAT([&] { linear(x, w, from<float>({1, 2, 3}, kFloat32, {3})); }, ThrowsMessage<Error>(HasSubstr("bias")));
}

TEST(CpuScalars, CatSkipsLegacyEmptyTensors) {
  Tensor a = from<float>({1, 2, 3, 4}, kFloat32, {2, 2});
  Tensor legacy = zeros({0});
  Tensor r = cat({a, legacy}, 1);
  EXPECT_EQ(r.sizes().vec(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values(r), (D{1, 2, 3, 4}));
  Tensor r2 = cat({zeros({0}, kFloat64), a, legacy}, 0);
  EXPECT_EQ(r2.dtype(), kFloat64);  // legacy tensors still count for the dtype
  EXPECT_EQ(values(r2), (D{1, 2, 3, 4}));
  EXPECT_EQ(cat({zeros({0}), zeros({0})}).sizes().vec(), std::vector<int64_t>{0});
  // A skipped float64 tensor raises the dtype of the others before they are joined (PyTorch:
  // cat([f64[0], i32[-2^31, -46], f16[1.5]]) is float64 [-2147483648, -46, 1.5]; through float16
  // first, -2^31 would be -inf). Found by the differential test, seed 3407231176.
  Tensor i32 = from<int64_t>({-2147483648LL, -46}, kInt32, {2});
  Tensor f16 = from<double>({1.5}, kFloat16, {1});
  Tensor r3 = cat({zeros({0}, kFloat64), i32, f16}, 0);
  EXPECT_EQ(r3.dtype(), kFloat64);
  EXPECT_EQ(values(r3), (D{-2147483648.0, -46, 1.5}));
}

// PyTorch converts alpha to the result dtype first, so a bool result sees alpha as a bool:
// add([T, T, F, F], [T, F, T, F], alpha=-1) is [T, T, T, F] (torch 2.x), not [1-1, 1, -1, 0] != 0.
TEST(CpuScalars, BoolAddTakesAlphaAsABool) {
  Tensor a = from<int64_t>({1, 1, 0, 0}, kBool), b = from<int64_t>({1, 0, 1, 0}, kBool);
  for (int64_t alpha : {-1, 2, 1}) {
    Tensor r = add(a, b, alpha);
    EXPECT_EQ(r.dtype(), kBool);
    EXPECT_EQ(values(r), (D{1, 1, 1, 0})) << "alpha " << alpha;
  }
  EXPECT_EQ(values(add(a, b, 0)), (D{1, 1, 0, 0}));
}

// Note [Small dense binary fast path] (plugins/cpu/src/elementwise.cpp): small float32 operands of
// the output's shape take a shorter path; its results are checked against double arithmetic, next
// to the cases that must not take it (a transposed view, a broadcast, in place, 0-dim, empty).
TEST(CpuScalars, SmallDenseBinaryOpsMatchDoubleArithmetic) {
  const std::vector<int64_t> shape = {3, 5};
  std::vector<double> xa(15), xb(15);
  for (int i = 0; i < 15; ++i) {
    xa[size_t(i)] = 0.37 * i - 2.1;
    xb[size_t(i)] = 1.5 + 0.25 * ((i * 7) % 11);  // never 0
  }
  const Tensor a = from<double>(xa, kFloat32, shape), b = from<double>(xb, kFloat32, shape);
  auto f = [](double v) { return double(float(v)); };  // inputs as stored in float32
  auto check = [&](const Tensor& got, auto fn, const char* what) {
    const D g = values(got);
    ASSERT_EQ(g.size(), 15u) << what;
    for (size_t i = 0; i < 15; ++i) EXPECT_EQ(g[i], double(float(fn(f(xa[i]), f(xb[i]))))) << what << " at " << i;
  };
  check(add(a, b), [](double x, double y) { return x + y; }, "add");
  check(add(a, b, 3), [](double x, double y) { return x + 3.0 * y; }, "add alpha 3");
  check(sub(a, b, 2), [](double x, double y) { return x - 2.0 * y; }, "sub alpha 2");
  check(a * b, [](double x, double y) { return x * y; }, "mul");
  // float32 division is correctly rounded, so the double quotient rounded once matches it.
  check(a / b, [](double x, double y) { return x / y; }, "div");
  // A transposed operand and a broadcast one take the general path; the values must agree.
  const Tensor bt = from<double>(xb, kFloat32, {5, 3}).t();
  const D via_view = values(add(a, bt.contiguous()));
  EXPECT_EQ(values(add(a, bt.t().t().contiguous())), via_view);
  const Tensor row = from<double>({1.0, 2.0, 3.0, 4.0, 5.0}, kFloat32, {5});
  const D bc = values(add(a, row));
  for (size_t i = 0; i < 15; ++i) EXPECT_EQ(bc[i], double(float(f(xa[i]) + double(i % 5 + 1)))) << "broadcast " << i;
  // In place, 0-dim and empty.
  Tensor c = a.clone();
  c.add_(b);
  EXPECT_EQ(values(c), values(add(a, b)));
  EXPECT_EQ(values(add(from<double>({2.5}, kFloat32), from<double>({0.25}, kFloat32))), (D{2.75}));
  EXPECT_EQ(add(from<double>({}, kFloat32, {0, 3}), from<double>({}, kFloat32, {0, 3})).numel(), 0);
}

TEST(CpuScalars, RankLimitProtectsTheCpuCopy) {
  std::vector<int64_t> sizes(20, 1);
  sizes[0] = 2;
  sizes[1] = 3;
  Tensor t = zeros({2}).view({2, 1}).expand({2, 2});  // non-contiguous source
  std::vector<int64_t> deep(17, 1);
  EXPECT_THAT([&] { zeros(deep); }, ThrowsMessage<Error>(HasSubstr("at most 16")));
  Tensor raw = tessera::empty(sizes);
  EXPECT_THAT([&] { raw.transpose(0, 1).contiguous(); }, ThrowsMessage<Error>(HasSubstr("at most 16")));
  EXPECT_EQ(values(t.contiguous()), D(4, 0.0));
}

// Classes found by the differential test (tests/diff) against PyTorch 2.x.
TEST(CpuScalars, FloatingOnlyOpsRefuseIntegralAndBoolInputs) {
  Tensor i = from<int64_t>({1, 2, 3}, kInt32);
  Tensor b = from<int64_t>({1, 0, 1}, kBool);
  for (const Tensor& x : {i, b}) {
    EXPECT_THAT([&] { gelu(x); }, ThrowsMessage<Error>(HasSubstr("takes floating tensors only")));
    EXPECT_THAT([&] { gelu(x, "tanh"); }, ThrowsMessage<Error>(HasSubstr("takes floating tensors only")));
    EXPECT_THAT([&] { silu(x); }, ThrowsMessage<Error>(HasSubstr("takes floating tensors only")));
    EXPECT_THAT([&] { softmax(x, 0); }, ThrowsMessage<Error>(HasSubstr("takes floating tensors only")));
    EXPECT_THAT([&] { log_softmax(x, 0); }, ThrowsMessage<Error>(HasSubstr("takes floating tensors only")));
    EXPECT_THAT([&] { layer_norm(x, {3}); }, ThrowsMessage<Error>(HasSubstr("takes floating tensors only")));
    EXPECT_THAT([&] { rms_norm(x, {3}); }, ThrowsMessage<Error>(HasSubstr("takes floating tensors only")));
  }
  // PyTorch returns an empty integral input of softmax as it is, before its dtype check.
  Tensor e = empty({2, 0, 3}, dtype(kInt32));
  EXPECT_EQ(softmax(e, 0).dtype(), kInt32);
  EXPECT_EQ(log_softmax(e, 0).dtype(), kInt32);
  // exp and friends still promote integers to the default float (PyTorch does too).
  EXPECT_EQ(exp(i).dtype(), kFloat32);
}

TEST(CpuScalars, ArgmaxOfBoolIsRefused) {
  EXPECT_THAT([] { argmax(from<int64_t>({1, 0}, kBool)); }, ThrowsMessage<Error>(HasSubstr("does not support bool")));
}

TEST(CpuScalars, PowOfIntegerTensorsWithNegativeExponents) {
  // PyTorch: tensor ** tensor with a negative integer exponent gives 1 for base 1, +-1 for base -1, 0 else.
  Tensor base = from<int64_t>({2, 1, -1, -1, 0, 3}, kInt64);
  Tensor expo = from<int64_t>({-1, -2, -3, -2, -1, 2}, kInt64);
  EXPECT_EQ(values(pow(base, expo)), (D{0, 1, -1, 1, 0, 9}));
  Tensor bb = from<int64_t>({1, 0}, kBool);
  EXPECT_THAT([&] { pow(bb, bb); }, ThrowsMessage<Error>(HasSubstr("not implemented for bool")));
  Tensor m = pow(bb, from<int64_t>({-1, 2}, kInt16));
  EXPECT_EQ(m.dtype(), kInt16);
  EXPECT_EQ(values(m), (D{1, 0}));
}

TEST(CpuScalars, PowByHalfIsSqrtAsPyTorch) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = from<double>({-inf, 4.0, inf}, dt);
    D r = values(pow(x, 0.5));
    EXPECT_TRUE(std::isnan(r[0]));  // sqrt(-inf); std::pow would give +inf
    EXPECT_EQ(r[1], 2.0);
    EXPECT_EQ(r[2], inf);
    D q = values(pow(x, -0.5));
    EXPECT_TRUE(std::isnan(q[0]));  // rsqrt(-inf); std::pow would give 0
    EXPECT_EQ(q[1], 0.5);
    EXPECT_EQ(q[2], 0.0);
  }
  // A bool tensor to a bool number is allowed (PyTorch: pow(tensor([False]), True) is False).
  EXPECT_EQ(values(pow(from<int64_t>({0, 1}, kBool), true)), (D{0, 1}));
}

TEST(CpuScalars, FillOfBoolIsNonzeroTest) {
  Tensor b = zeros({3}, dtype(kBool));
  b.fill_(1e-30);
  EXPECT_EQ(values(b), (D{1, 1, 1}));
  b.fill_(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(values(b), (D{1, 1, 1}));
  b.fill_(0.0);
  EXPECT_EQ(values(b), (D{0, 0, 0}));
}

TEST(CpuScalars, AllcloseNeedsOneDtypeAndBroadcasts) {
  EXPECT_THAT([] { allclose(from<float>({1.0f}, kFloat32), from<int64_t>({1}, kInt64)); },
              ThrowsMessage<Error>(HasSubstr("did not match")));
  EXPECT_TRUE(allclose(ones({4, 1}), ones({1, 3})));
  EXPECT_FALSE(allclose(ones({4, 1}), from<float>({1.0f, 2.0f, 1.0f}, kFloat32, {1, 3})));
}

TEST(CpuScalars, RmsNormDefaultEpsIsTheComputeTypes) {
  // All 0.008: rms = 0.008, so y = 0.008 / sqrt(0.008^2 + eps) with float32's epsilon (PyTorch 2.x gives
  // 0.9990 in f16), not float16's (which would give 0.25).
  for (DType dt : {kFloat16, kBFloat16, kFloat32}) {
    Tensor x = full({3, 4}, 0.008, dtype(dt));
    const double v = values(x)[0];
    const double want = v / std::sqrt(v * v + double(std::numeric_limits<float>::epsilon()));
    expect_near(values(rms_norm(x, {3, 4})), D(12, want), dt == kFloat32 ? 1e-6 : 1e-2);
  }
}

// PyTorch: x ** +-0.5 is sqrt / rsqrt for float32, float64 and bfloat16 (so (-0.0) ** -0.5 is -inf
// and (-0.0) ** 0.5 is -0.0) but pow for float16 (inf and +0.0); checked against torch 2.x.
TEST(CpuScalars, PowOfMinusZeroByHalfFollowsEachDtypesPath) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    Tensor x = from<float>({-0.0f, 0.0f}, dt);
    EXPECT_EQ(values(pow(x, -0.5)), (D{-inf, inf})) << dt;
    EXPECT_TRUE(std::signbit(values(pow(x, 0.5))[0])) << dt;
  }
  Tensor h = from<float>({-0.0f, 0.0f}, kFloat16);
  EXPECT_EQ(values(pow(h, -0.5)), (D{inf, inf}));
  EXPECT_FALSE(std::signbit(values(pow(h, 0.5))[0]));
}

}  // namespace
}  // namespace tessera
