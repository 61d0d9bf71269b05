// The int8 linear (tessera::quantization::linear_int8) against a reference integer implementation
// written here: int32 accumulation of (x_q - zp_x) * w_q, the float bias added as
// s_x * s_w[j] * acc + bias[j], requantised with round half to even and saturated to uint8.
// oneDNN must agree within one quantisation step.
#include <gtest/gtest.h>

#include <cfenv>
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "tessera/dispatcher.h"
#include "tessera/quantization.h"
#include "tessera/tessera.h"

#include "quant_test_util.h"

namespace tessera {
namespace {

using quant_test::error_of;

using quantization::DynamicQuantizedLinear;
using quantization::linear_int8;
using quantization::PackedLinearWeight;

struct Problem {
  int64_t m, k, n;
  std::vector<uint8_t> x;
  std::vector<int8_t> w;  // [n, k]
  std::vector<float> ws, bias;
  double sx;
  int64_t zx;
};

Problem make_problem(int64_t m, int64_t k, int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  Problem p{m, k, n, {}, {}, {}, {}, 0.02 + 0.01 * double(g() % 5), int64_t(g() % 256)};
  std::uniform_int_distribution<int> u8(0, 255), s8(-127, 127);
  std::uniform_real_distribution<float> sc(0.002f, 0.02f), b(-3.f, 3.f);
  for (int64_t i = 0; i < m * k; ++i) p.x.push_back(uint8_t(u8(g)));
  for (int64_t i = 0; i < n * k; ++i) p.w.push_back(int8_t(s8(g)));
  for (int64_t j = 0; j < n; ++j) p.ws.push_back(sc(g)), p.bias.push_back(b(g));
  return p;
}

// The real value of output (i, j) before requantisation, from an int32 accumulator.
double real_out(const Problem& p, int64_t i, int64_t j, bool bias) {
  int32_t acc = 0;
  for (int64_t q = 0; q < p.k; ++q)
    acc += (int32_t(p.x[size_t(i * p.k + q)]) - int32_t(p.zx)) * int32_t(p.w[size_t(j * p.k + q)]);
  return p.sx * double(p.ws[size_t(j)]) * double(acc) + (bias ? double(p.bias[size_t(j)]) : 0.0);
}

uint8_t requant(double y, double s_out, int64_t zp, bool relu) {
  if (relu) y = std::max(y, 0.0);
  std::fesetround(FE_TONEAREST);
  const double q = std::nearbyint(y / s_out) + double(zp);  // half to even
  return uint8_t(std::clamp(q, 0.0, 255.0));
}

struct Inputs {
  Tensor x, bias;
  PackedLinearWeight w;
};
Inputs inputs(const Problem& p) {
  Tensor w = tensor(p.w, {p.n, p.k});
  return {tensor(p.x, {p.m, p.k}), tensor(p.bias, {p.n}), PackedLinearWeight(w, tensor(p.ws, {p.n}))};
}

TEST(QuantizedLinear, Uint8OutputMatchesTheIntegerReferenceWithinOneStep) {
  for (bool relu : {false, true}) {
    for (bool with_bias : {false, true}) {
      const Problem p = make_problem(37, 300, 70, 11 + relu * 2 + with_bias);
      Inputs in = inputs(p);
      // An output scale that puts the outputs across the whole uint8 range, with saturation at both ends.
      const double s_out = 0.05;
      const int64_t zp_out = 100;
      Tensor y = linear_int8(in.x, p.sx, p.zx, in.w, with_bias ? std::optional<Tensor>(in.bias) : std::nullopt,
                             s_out, zp_out, relu, kUInt8);
      ASSERT_EQ(y.dtype(), kUInt8);
      ASSERT_EQ(y.sizes(), IntArrayRef({p.m, p.n}));
      Tensor yc = y.contiguous();
      const uint8_t* yp = yc.data_ptr<uint8_t>();
      int exact = 0, saturated = 0;
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          const uint8_t want = requant(real_out(p, i, j, with_bias), s_out, zp_out, relu);
          const int got = yp[i * p.n + j];
          ASSERT_LE(std::abs(got - int(want)), 1) << "(" << i << ", " << j << ") relu " << relu << " bias " << with_bias;
          exact += got == want;
          saturated += want == 0 || want == 255;
        }
      EXPECT_GT(exact, p.m * p.n * 9 / 10);
      EXPECT_GT(saturated, 0);
    }
  }
}

TEST(QuantizedLinear, Float32OutputIsTheDequantizedAccumulatorPlusBias) {
  const Problem p = make_problem(5, 64, 33, 3);
  Inputs in = inputs(p);
  for (bool relu : {false, true}) {
    Tensor y = linear_int8(in.x, p.sx, p.zx, in.w, in.bias, 1.0, 0, relu, kFloat32);
    ASSERT_EQ(y.dtype(), kFloat32);
    const float* yp = y.contiguous().data_ptr<float>();
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double want = real_out(p, i, j, true);
        if (relu) want = std::max(want, 0.0);
        EXPECT_NEAR(yp[i * p.n + j], want, 1e-4 * (1 + std::abs(want))) << i << ", " << j;
      }
  }
}

TEST(QuantizedLinear, BatchShapesAndOneWeightForManyBatchSizes) {
  const Problem p = make_problem(24, 48, 16, 5);
  Inputs in = inputs(p);
  Tensor y3 = linear_int8(in.x.reshape({2, 3, 4, 48}).select(1, 0).contiguous().reshape({2, 4, 48}), p.sx, p.zx, in.w,
                          std::nullopt, 1.0, 0, false, kFloat32);
  EXPECT_EQ(y3.sizes(), IntArrayRef({2, 4, 16}));
  for (int64_t rows : {1, 7, 24}) {
    Tensor y = linear_int8(in.x.slice(0, 0, rows), p.sx, p.zx, in.w, std::nullopt, 1.0, 0, false, kFloat32);
    const float* yp = y.contiguous().data_ptr<float>();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < p.n; ++j)
        EXPECT_NEAR(yp[i * p.n + j], real_out(p, i, j, false), 1e-4 * (1 + std::abs(real_out(p, i, j, false))));
  }
}

TEST(QuantizedLinear, QuantizedTensorsInAndOut) {
  const Problem p = make_problem(9, 40, 12, 21);
  Inputs in = inputs(p);
  // The quint8 input is built from the problem's representation by hand: x = (q - zx) * sx.
  std::vector<float> xf;
  for (uint8_t v : p.x) xf.push_back(float((int(v) - int(p.zx)) * p.sx));
  Tensor qx = quantize_per_tensor(tensor(xf, {p.m, p.k}), p.sx, p.zx, kQUInt8);
  ASSERT_EQ(int_repr(qx).to(kInt64).sum().item<int64_t>(),
            [&] { int64_t s = 0; for (uint8_t v : p.x) s += v; return s; }());
  Tensor y = quantization::quantized_linear(qx, in.w, in.bias, 0.04, 128, true);
  ASSERT_EQ(y.dtype(), kQUInt8);
  ASSERT_NE(y.impl()->qparams(), nullptr);
  EXPECT_EQ(y.impl()->qparams()->scale(), 0.04);
  EXPECT_EQ(y.impl()->qparams()->zero_point(), 128);
  Tensor r = int_repr(y).to(kInt64).contiguous();
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j)
      EXPECT_LE(std::abs(r.data_ptr<int64_t>()[i * p.n + j] - int64_t(requant(real_out(p, i, j, true), 0.04, 128, true))), 1);
  EXPECT_NE([&] {
    try {
      quantization::quantized_linear(tensor(xf, {p.m, p.k}), in.w, std::nullopt, 0.1, 0);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }().find("quint8"), std::string::npos);
}

// PyTorch's MinMaxObserver parameters, worked by hand: [-1, 3] over quint8 -> scale 4/255,
// zero_point 0 - round(-1 / (4/255)) = round(63.75) = 64; [2, 5] widens to [0, 5].
TEST(QuantizedLinear, ChooseQParamsFollowsTheMinMaxObserver) {
  auto a = quantization::choose_qparams(-1, 3, kQUInt8);
  EXPECT_FLOAT_EQ(float(a.scale), 4.f / 255.f);
  EXPECT_EQ(a.zero_point, 64);
  auto b = quantization::choose_qparams(2, 5, kQUInt8);
  EXPECT_FLOAT_EQ(float(b.scale), 5.f / 255.f);
  EXPECT_EQ(b.zero_point, 0);
  // An all-zero range: scale falls to float32 epsilon, zero_point = qmin - round(0) = -128.
  auto c = quantization::choose_qparams(0, 0, kQInt8);
  EXPECT_EQ(float(c.scale), std::numeric_limits<float>::epsilon());
  EXPECT_EQ(c.zero_point, -128);
}

// The dynamic layer against a reference written here: the same weight quantisation (scale =
// max|w_j| / 127.5, round half to even), the activations quantised with MinMaxObserver parameters,
// int32 accumulation, s_x * s_w[j] * acc + bias[j].
TEST(QuantizedLinear, DynamicLinearMatchesTheIntegerReference) {
  std::mt19937_64 g(99);
  std::normal_distribution<float> nd;
  const int64_t m = 13, k = 70, n = 9;
  std::vector<float> x, w, b;
  for (int64_t i = 0; i < m * k; ++i) x.push_back(nd(g) * 2);
  for (int64_t i = 0; i < n * k; ++i) w.push_back(nd(g) * 0.1f);
  for (int64_t j = 0; j < n; ++j) b.push_back(nd(g));
  DynamicQuantizedLinear layer(tensor(w, {n, k}), tensor(b, {n}));
  Tensor y = layer.forward(tensor(x, {m, k}));
  ASSERT_EQ(y.dtype(), kFloat32);
  ASSERT_EQ(y.sizes(), IntArrayRef({m, n}));

  std::fesetround(FE_TONEAREST);
  const float xmin = std::min(0.f, *std::min_element(x.begin(), x.end()));
  const float xmax = std::max(0.f, *std::max_element(x.begin(), x.end()));
  const float sx = (xmax - xmin) / 255.f;
  const int64_t zx = std::clamp<int64_t>(int64_t(-std::nearbyint(xmin / sx)), 0, 255);
  std::vector<int64_t> xq;
  for (float v : x) xq.push_back(std::clamp<int64_t>(int64_t(std::nearbyint(v * (1.f / sx))) + zx, 0, 255));
  const float* yp = y.contiguous().data_ptr<float>();
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0;
    for (int64_t q = 0; q < k; ++q) amax = std::max(amax, std::abs(w[size_t(j * k + q)]));
    const float sw = amax / 127.5f;
    std::vector<int64_t> wq;
    for (int64_t q = 0; q < k; ++q)
      wq.push_back(std::clamp<int64_t>(int64_t(std::nearbyint(w[size_t(j * k + q)] * (1.f / sw))), -128, 127));
    for (int64_t i = 0; i < m; ++i) {
      int32_t acc = 0;
      double exact = b[size_t(j)];
      for (int64_t q = 0; q < k; ++q) {
        acc += int32_t(xq[size_t(i * k + q)] - zx) * int32_t(wq[size_t(q)]);
        exact += double(x[size_t(i * k + q)]) * double(w[size_t(j * k + q)]);
      }
      const double want = double(sx) * double(sw) * double(acc) + double(b[size_t(j)]);
      EXPECT_NEAR(yp[i * n + j], want, 1e-4 * (1 + std::abs(want))) << i << ", " << j;
      // And the quantised layer stays near the float one (quantisation error, not a bug).
      EXPECT_NEAR(yp[i * n + j], exact, 0.05 * (1 + std::abs(exact))) << i << ", " << j;
    }
  }
}

// Note [Lowered int8 boundaries]: a float32 input is quantized inside the kernel with PyTorch's
// quantize_val, so the result equals the kernel on quantize_per_tensor's representation.
TEST(QuantizedLinear, Float32InputIsQuantizedInsideAsQuantizePerTensor) {
  std::mt19937_64 g(std::random_device{}());
  for (const auto& [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 48, 24}, {256, 192, 64}}) {
    const Problem p = make_problem(m, k, n, g());
    Inputs in = inputs(p);
    std::normal_distribution<float> d(0.5f, 3.0f);
    std::vector<float> xs(size_t(m * k));
    for (float& v : xs) v = d(g);
    xs[0] = float(p.sx) * 2.5f;  // a half step: rounds to even
    xs[1] = 1e30f;
    xs[2] = -1e30f;
    xs[3] = std::numeric_limits<float>::quiet_NaN();  // 255, as quantize_per_tensor
    xs[4] = std::numeric_limits<float>::infinity();
    xs[5] = -std::numeric_limits<float>::infinity();
    xs[6] = float(p.sx) * -3.5f;
    Tensor x = tensor(xs, {m, k});
    Tensor xq = int_repr(quantize_per_tensor(x, p.sx, p.zx, kQUInt8));
    for (bool relu : {false, true}) {
      Tensor want = linear_int8(xq, p.sx, p.zx, in.w, in.bias, 0.05, 100, relu, kUInt8);
      Tensor got = linear_int8(x, p.sx, p.zx, in.w, in.bias, 0.05, 100, relu, kUInt8);
      EXPECT_TRUE(equal(got, want)) << "m " << m << " relu " << relu;
      Tensor want_f = linear_int8(xq, p.sx, p.zx, in.w, in.bias, 1.0, 0, relu, kFloat32);
      Tensor got_f = linear_int8(x, p.sx, p.zx, in.w, in.bias, 1.0, 0, relu, kFloat32);
      EXPECT_TRUE(equal(got_f, want_f)) << "m " << m << " relu " << relu;
    }
  }
}

// out_dtype quint8: the requantised uint8 result, dequantized to float32 inside the kernel:
// (q - zp_out) * s_out, computed here from the uint8 output.
TEST(QuantizedLinear, Quint8OutDtypeGivesTheDequantizedRequantisedResult) {
  std::mt19937_64 g(std::random_device{}());
  const Problem p = make_problem(70, 64, 40, g());
  Inputs in = inputs(p);
  const double s_out = 0.07;
  const int64_t zp_out = 90;
  for (bool relu : {false, true}) {
    Tensor q = linear_int8(in.x, p.sx, p.zx, in.w, in.bias, s_out, zp_out, relu, kUInt8);
    Tensor y = linear_int8(in.x, p.sx, p.zx, in.w, in.bias, s_out, zp_out, relu, kQUInt8);
    ASSERT_EQ(y.dtype(), kFloat32);
    ASSERT_EQ(y.sizes(), q.sizes());
    const uint8_t* qp = q.contiguous().data_ptr<uint8_t>();
    Tensor yc = y.contiguous();
    const float* yp = yc.data_ptr<float>();
    for (int64_t i = 0; i < q.numel(); ++i)
      ASSERT_EQ(yp[i], float(int32_t(qp[i]) - int32_t(zp_out)) * float(s_out)) << "element " << i;
  }
}

TEST(QuantizedLinear, BadInputsGiveOneLineErrors) {
  const Problem p = make_problem(2, 8, 4, 1);
  Inputs in = inputs(p);
  EXPECT_NE(error_of([&] { linear_int8(in.x, 0.0, 0, in.w, std::nullopt, 1.0, 0, false, kUInt8); }).find("input_scale"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linear_int8(in.x, 0.1, 256, in.w, std::nullopt, 1.0, 0, false, kUInt8); }).find("0..255"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linear_int8(in.x, 0.1, 0, in.w, std::nullopt, NAN, 0, false, kUInt8); }).find("output_scale"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linear_int8(in.x, 0.1, 0, in.w, std::nullopt, 1.0, 0, false, kInt32); }).find("out_dtype"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linear_int8(in.x.slice(1, 0, 7).contiguous(), 0.1, 0, in.w, std::nullopt, 1.0, 0, false, kFloat32); })
                .find("expects 8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { linear_int8(in.x.to(kInt32), 0.1, 0, in.w, std::nullopt, 1.0, 0, false, kFloat32); }).find("uint8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { PackedLinearWeight(tensor(p.w, {4, 8}).to(kInt32), tensor(p.ws, {4})); }).find("int8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { PackedLinearWeight(tensor(p.w, {4, 8}), tensor(std::vector<float>{1, 1, 1}, {3})); })
                .find("weight_scale"),
            std::string::npos);
  EXPECT_NE(error_of([&] { PackedLinearWeight(tensor(p.w, {4, 8}), tensor(std::vector<float>{1, 1, -1, 1}, {4})); })
                .find("weight_scale[2]"),
            std::string::npos);
  // A uint8 tensor of the packed shape that _quantized_linear_prepack did not write.
  Dispatcher& d = Dispatcher::instance();
  Tensor forged = zeros({4, in.w.packed().size(1)}, kUInt8);
  const std::string forged_msg = error_of([&] {
    d.call_boxed(d.op("_quantized_linear"), {in.x, forged, std::monostate{}, 0.1, int64_t(0), 1.0, int64_t(0), false, kFloat32});
  });
  EXPECT_NE(forged_msg.find("not the output of _quantized_linear_prepack"), std::string::npos) << forged_msg;
}

}  // namespace
}  // namespace tessera
