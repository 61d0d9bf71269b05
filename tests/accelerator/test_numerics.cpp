// The reference accelerator's numerics at the edges: wrapped numbers that arrive as 0-dim CPU
// operands of their own dtype, scalar attributes, conversions to bool and of NaN / inf /
// out-of-range values to integers, and tensors with no elements. Expected values are hand-computed.
#include <cmath>
#include <cstdint>
#include <limits>

#include "accel_test_util.h"

using namespace tessera;
using accel_test::kAccel;
using accel_test::kernel_count;
using accel_test::values;

namespace {

// A C++ number as the dispatcher passes it to kernels: a 0-dim CPU tensor of its own kind's dtype,
// marked as a wrapped number.
Tensor wrapped(double v) {
  Tensor t = full({}, v, tessera::dtype(kFloat64));
  t.impl()->set_wrapped_number(true);
  return t;
}
Tensor wrapped(int64_t v) {
  Tensor t = full({}, v, tessera::dtype(kInt64));
  t.impl()->set_wrapped_number(true);
  return t;
}

Tensor on_accel(std::vector<double> v, DType t) {
  const int64_t n = int64_t(v.size());
  return tessera::tensor(v, {n}, tessera::dtype(t)).to(kAccel);
}

}  // namespace

TEST(MyHardwareDeviceNumerics, WrappedIntegerOperandKeepsItsValueUntilTheComputeType) {
  const int64_t muls = kernel_count("mul.Tensor"), adds = kernel_count("add.Tensor");
  // int32 * -3: the value reaches the kernel as int64 -3 and the product wraps like int32 math.
  Tensor p = mul(on_accel({2, 5, -7}, kInt32), wrapped(int64_t(-3)));
  EXPECT_EQ(p.dtype(), kInt32);
  EXPECT_TRUE(p.is(kAccel));
  accel_test::expect_near_all(values(p), {-6, -15, 21}, 0, "int32 * -3");
  // int32 + (2^32 + 1): in int32 arithmetic the scalar is 1.
  Tensor s = add(on_accel({3, -4}, kInt32), wrapped(int64_t(4294967297)));
  accel_test::expect_near_all(values(s), {4, -3}, 0, "int32 + (2^32 + 1)");
  // int64 keeps every bit of a large scalar.
  Tensor l = add(on_accel({1}, kInt64), wrapped(int64_t(1) << 40));
  EXPECT_EQ(values(l)[0], double((int64_t(1) << 40) + 1));
  EXPECT_EQ(kernel_count("mul.Tensor") - muls, 1);
  EXPECT_EQ(kernel_count("add.Tensor") - adds, 2);
}

TEST(MyHardwareDeviceNumerics, WrappedFloatingOperandRaisesIntegralTensorsToFloat) {
  // int32 + 2.5 -> float32, the scalar taken from float64, never from the int32 storage type.
  Tensor r = add(on_accel({1, -2}, kInt32), wrapped(2.5));
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_TRUE(r.is(kAccel));
  accel_test::expect_near_all(values(r), {3.5, 0.5}, 0, "int32 + 2.5");
  // float32 * 1e-3 and 1e5: exact in float64 before the product rounds to float32.
  Tensor m = mul(on_accel({1000, 0.001}, kFloat32), wrapped(1e5));
  accel_test::expect_near_all(values(m), {double(float(1e8)), double(float(100.0))}, 1e-7, "float32 * 1e5");
}

TEST(MyHardwareDeviceNumerics, FloatingAlphaOnIntegralAddIsAnError) {
  Tensor a = on_accel({1, 2}, kInt32), b = on_accel({3, 4}, kInt32);
  try {
    add(a, b, 2.5);
    FAIL() << "a floating alpha on int32 add was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("alpha must not be a floating point number"), std::string::npos) << e.what();
  }
  // The device keeps working, and an integral alpha is fine.
  accel_test::expect_near_all(values(add(a, b, int64_t(2))), {7, 10}, 0, "int32 add, alpha 2");
  accel_test::expect_near_all(values(add(on_accel({1, 2}, kFloat32), on_accel({3, 4}, kFloat32), 0.5)), {2.5, 4},
                              0, "float32 add, alpha 0.5");
}

TEST(MyHardwareDeviceNumerics, FloatToBoolIsNonzeroIncludingFractionsAndNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType t : {kFloat32, kFloat64}) {
    Tensor b = on_accel({0.5, 0.0, nan, -0.0, 1e-30, -2.0}, t).to(kBool);
    EXPECT_TRUE(b.is(kAccel));
    accel_test::expect_near_all(values(b), {1, 0, 1, 0, 1, 1}, 0, "float -> bool");
  }
}

TEST(MyHardwareDeviceNumerics, FloatToIntegerOfNaNInfAndOutOfRangeIsDefined) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const double min64 = double(std::numeric_limits<int64_t>::min()), min32 = double(std::numeric_limits<int32_t>::min());
  // Note [Floating to integral conversion]: PyTorch's results on x86-64.
  Tensor l = on_accel({nan, inf, -inf, 1e20, -3.7, 2.9}, kFloat64).to(kInt64);
  accel_test::expect_near_all(values(l), {min64, min64, min64, min64, -3, 2}, 0, "f64 -> i64");
  for (DType t : {kFloat32, kFloat64}) {
    Tensor i = on_accel({nan, -inf, 3e9, -1.5, 255.9}, t).to(kInt32);
    accel_test::expect_near_all(values(i), {min32, min32, min32, -1, 255}, 0, "-> i32");
    // Narrower types go through int32 and wrap: 300 -> 44, -1 -> 255, INT32_MIN -> 0.
    Tensor u = on_accel({300.7, -1.2, nan, 1e10}, t).to(kUInt8);
    accel_test::expect_near_all(values(u), {44, 255, 0, 0}, 0, "-> u8");
  }
}

TEST(MyHardwareDeviceNumerics, EmptyTensorsAllocateCopyAndCompute) {
  Tensor z = zeros({0}, device(kAccel));
  EXPECT_TRUE(z.is(kAccel));
  EXPECT_EQ(z.numel(), 0);
  EXPECT_EQ(z.to("cpu").numel(), 0);
  Tensor r = randn({2, 0}, device(kAccel));
  EXPECT_EQ(r.numel(), 0);
  Tensor back = tessera::tensor(std::vector<double>{}, {0, 3}, tessera::dtype(kFloat32)).to(kAccel);
  EXPECT_EQ(back.size(1), 3);

  // Sums over an empty dim are 0; a sum that reduces nothing of an empty tensor stays empty.
  Tensor s1 = sum(r, {1});
  EXPECT_TRUE(s1.is(kAccel));
  accel_test::expect_near_all(values(s1), {0, 0}, 0, "sum over the empty dim");
  EXPECT_EQ(sum(r, {0}).numel(), 0);
  accel_test::expect_near_all(values(sum(r)), {0}, 0, "sum of an empty tensor");
  accel_test::expect_near_all(values(sum(zeros({0, 2}, tessera::dtype(kInt64).device(kAccel)), {0})), {0, 0}, 0,
                              "int64 sum over the empty dim");

  // matmul with k = 0 is all zeros; with m = 0 or n = 0 it is empty.
  Tensor a = randn({3, 0}, device(kAccel)), b = randn({0, 2}, device(kAccel));
  Tensor c = matmul(a, b);
  EXPECT_TRUE(c.is(kAccel));
  ASSERT_EQ(c.size(0), 3);
  accel_test::expect_near_all(values(c), std::vector<double>(6, 0.0), 0, "matmul with k = 0");
  EXPECT_EQ(matmul(b, randn({2, 4}, device(kAccel))).numel(), 0);
  // Elementwise and copies over no elements.
  EXPECT_EQ((r + r).numel(), 0);
  EXPECT_EQ(relu(r).numel(), 0);
  EXPECT_EQ(r.to(kFloat64).numel(), 0);
  EXPECT_EQ(r.t().contiguous().numel(), 0);
}

TEST(MyHardwareDeviceNumerics, SumOfZeroDimTensorOverDimZero) {
  Tensor x = full({}, 4.5, device(kAccel));
  for (int64_t d : {0, -1}) {
    Tensor s = sum(x, {d});
    EXPECT_TRUE(s.is(kAccel));
    EXPECT_EQ(s.dim(), 0);
    accel_test::expect_near_all(values(s), {4.5}, 0, "sum of a 0-dim tensor over dim " + std::to_string(d));
  }
  Tensor k = sum(x, {0}, true);
  EXPECT_EQ(k.dim(), 0);
  accel_test::expect_near_all(values(k), {4.5}, 0, "keepdim");
}

TEST(MyHardwareDeviceNumerics, Float32MathRunsInFloatAsPyTorch) {
  // bool * 1e300 -> float32: the number becomes inf in float before the product (PyTorch's opmath),
  // so false * 1e300 is NaN, not 0 as double arithmetic would give.
  const int64_t muls = kernel_count("mul.Tensor");
  Tensor r = mul(wrapped(1e300), on_accel({0, 1}, kBool));
  EXPECT_EQ(r.dtype(), kFloat32);
  std::vector<double> v = values(r);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_TRUE(std::isinf(v[1]) && v[1] > 0);
  EXPECT_EQ(kernel_count("mul.Tensor") - muls, 1);
  // float64 keeps double precision: 1e300 is finite there.
  Tensor d = mul(on_accel({0, 1}, kFloat64), wrapped(1e300));
  EXPECT_EQ(values(d), (std::vector<double>{0, 1e300}));
}
