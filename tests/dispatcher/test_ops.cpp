// The application API end to end with the test's naive CPU kernels: factories, random numbers,
// Tensor methods, operators and the comparison helpers, checked against loops in double.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/ops.h"
#include "tessera/random.h"
#include "test_kernels.h"

namespace tessera {
namespace {

std::vector<double> as_doubles(const Tensor& t) {
  Tensor c = t.cpu().to(kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

class Ops : public ::testing::Test {
 protected:
  void SetUp() override { testing::setup_test_backends(); }
};

TEST_F(Ops, Factories) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_EQ(as_doubles(z), std::vector<double>(6, 0.0));
  EXPECT_EQ(as_doubles(ones({4}, kInt32)), std::vector<double>(4, 1.0));
  EXPECT_EQ(full({2}, 7).dtype(), kInt64);
  EXPECT_EQ(full({2}, true).dtype(), kBool);
  EXPECT_EQ(full({2}, 0.5).dtype(), kFloat32);
  EXPECT_EQ(full({2}, 0.5, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(as_doubles(arange(1, 10, 3)), (std::vector<double>{1, 4, 7}));
  EXPECT_EQ(as_doubles(arange(0, 1, 0.25)), (std::vector<double>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(scalar_tensor(3).dim(), 0);
  EXPECT_EQ(scalar_tensor(3).dtype(), kFloat32);
  Tensor t = tensor<int32_t>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(t.dtype(), kInt32);
  EXPECT_EQ(as_doubles(t), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(tensor<double>({1, 2}, {}, kFloat32).dtype(), kFloat32);
  EXPECT_EQ(tensor<bool>({true, false}).dtype(), kBool);
  try {
    tensor<float>({1, 2, 3}, {2, 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 values do not fill shape [2, 2] (4 elements)"),
              std::string::npos);
  }
  Tensor es = empty_strided({2, 2}, {1, 2});
  EXPECT_EQ(es.strides().vec(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(zeros_like(t).dtype(), kInt32);
}

TEST_F(Ops, RandomIsReproducibleAndCounterBased) {
  manual_seed(7);
  Tensor a = rand({5});
  Tensor b = rand({3});
  std::vector<double> va = as_doubles(a), vb = as_doubles(b);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(float(va[size_t(i)]), philox::uniform(7, uint64_t(i)));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(float(vb[size_t(i)]), philox::uniform(7, uint64_t(5 + i)));  // offset advanced
  manual_seed(7);
  EXPECT_TRUE(equal(rand({5}), a));
  // Same numbers on another device.
  manual_seed(7);
  Tensor on_fake = rand({5}, Device(DeviceType::PrivateUse1, 0));
  EXPECT_EQ(on_fake.device().type(), kPrivateUse1);
  EXPECT_TRUE(equal(on_fake, a));
}

TEST_F(Ops, ArithmeticMatchesReference) {
  manual_seed(1234);
  Tensor a = rand({3, 4}), b = rand({4});
  std::vector<double> va = as_doubles(a), vb = as_doubles(b);
  auto check = [&](const Tensor& got, auto f) {
    std::vector<double> g = as_doubles(got);
    ASSERT_EQ(g.size(), 12u);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) {
        double ref = f(va[size_t(i * 4 + j)], vb[size_t(j)]);
        EXPECT_NEAR(g[size_t(i * 4 + j)], ref, 1e-6 * std::max(1.0, std::abs(ref)));  // float32 results
      }
  };
  check(a + b, [](double x, double y) { return x + y; });
  check(a - b, [](double x, double y) { return x - y; });
  check(a * b, [](double x, double y) { return x * y; });
  check(a / b, [](double x, double y) { return x / y; });
  check(add(a, b, 2), [](double x, double y) { return x + 2 * y; });
  check(a - 0.5, [](double x, double) { return x - 0.5; });
  check(2 - a, [](double x, double) { return 2 - x; });
  check(1 / a, [](double x, double) { return 1 / x; });
  check(-a, [](double x, double) { return -x; });
  check(a.relu(), [](double x, double) { return x; });
  check((a - 0.5).relu(), [](double x, double) { return x > 0.5 ? x - 0.5 : 0; });
  Tensor c = a.clone();
  c.add_(b);
  check(c, [](double x, double y) { return x + y; });
  check(a, [](double x, double) { return x; });  // clone is independent
  c.mul_(b);
  check(c, [](double x, double y) { return (x + y) * y; });
  Tensor s = a.sum({1});
  std::vector<double> vs = as_doubles(s);
  for (int i = 0; i < 3; ++i) {
    double ref = 0;
    for (int j = 0; j < 4; ++j) ref += va[size_t(i * 4 + j)];
    EXPECT_NEAR(vs[size_t(i)], ref, 1e-5);
  }
  Tensor m = a.matmul(rand({4, 2}));
  EXPECT_EQ(m.sizes().vec(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(tensor<int32_t>({1, 2, 3}).sum().item<int64_t>(), 6);
  EXPECT_EQ((tensor<int32_t>({1, 2}) / 2).dtype(), kFloat32);
  EXPECT_EQ(as_doubles(tensor<int32_t>({1, 3}) / 2), (std::vector<double>{0.5, 1.5}));
}

TEST_F(Ops, LayoutMethods) {
  Tensor x = arange(0, 6, 1, kFloat32).view({2, 3});
  Tensor t = x.t();
  EXPECT_FALSE(t.is_contiguous());
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(as_doubles(c), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(x.contiguous().is_same(x));
  Tensor r = t.reshape({6});  // must copy
  EXPECT_EQ(as_doubles(r), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor v = x.reshape({3, 2});  // a view
  EXPECT_EQ(v.storage().get(), x.storage().get());
  EXPECT_EQ(x.to(kInt64).dtype(), kInt64);
  EXPECT_TRUE(x.to(kFloat32).is_same(x));
  Tensor f = zeros({2, 2});
  f.fill_(3);
  EXPECT_EQ(as_doubles(f), std::vector<double>(4, 3.0));
  f.zero_();
  EXPECT_EQ(as_doubles(f), std::vector<double>(4, 0.0));
}

TEST_F(Ops, AllcloseAndEqual) {
  Tensor a = tensor<float>({1, 2, 3, 4}, {2, 2});
  Tensor b = tensor<double>({1, 2, 3, 4.00001}, {2, 2});
  EXPECT_FALSE(equal(a, b));
  EXPECT_TRUE(allclose(a.to(kFloat64), b, 1e-5, 1e-4));
  EXPECT_FALSE(allclose(a.to(kFloat64), b, 0, 1e-7));
  EXPECT_THROW(allclose(a, b), Error);  // PyTorch: "Float did not match Double"
  EXPECT_TRUE(equal(a.t(), tensor<int64_t>({1, 3, 2, 4}, {2, 2})));  // strided, mixed dtypes
  EXPECT_FALSE(equal(a, tensor<float>({1, 2, 3, 4})));               // shapes differ
  Device fake(DeviceType::PrivateUse1, 0);
  EXPECT_TRUE(equal(a.to(fake).t(), a.t()));  // strided device tensor read through the interface
  Tensor nan = tensor<float>({NAN});
  EXPECT_FALSE(allclose(nan, nan));
}

}  // namespace
}  // namespace tessera
