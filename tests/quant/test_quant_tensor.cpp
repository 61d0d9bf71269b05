// Quantized tensors: quantize_per_tensor / quantize_per_channel / dequantize / int_repr against
// hand-worked values and the NumPy oracle quant_oracle.py (PyTorch's definitions), bad input, the
// Quantized dispatch key, other ops refusing quantized tensors, and printing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/quantization.h"
#include "tessera/tessera.h"

#include "quant_test_util.h"

namespace tessera {
namespace {

using quant_test::error_of;

std::vector<int64_t> repr_values(const Tensor& q) {
  Tensor r = int_repr(q).to(kInt64).contiguous();
  return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

TEST(QuantizedTensor, PerTensorRoundsHalfToEvenAndSaturates) {
  // x / 0.5 = 1, 3, 5, -1, -5 exactly: halves of 0.5, 1.5, 2.5, -0.5, -2.5 round to even.
  Tensor x = tensor(std::vector<float>{0.25f, 0.75f, 1.25f, -0.25f, -1.25f, 1000.f, -1000.f});
  Tensor q = quantize_per_tensor(x, 0.5, 3, kQUInt8);
  EXPECT_EQ(q.dtype(), kQUInt8);
  EXPECT_TRUE(q.key_set().has(Functionality::Quantized));
  ASSERT_NE(q.impl()->qparams(), nullptr);
  EXPECT_EQ(q.impl()->qparams()->scale(), 0.5);
  EXPECT_EQ(q.impl()->qparams()->zero_point(), 3);
  // round(0.5)=0, round(1.5)=2, round(2.5)=2, round(-0.5)=0, round(-2.5)=-2, then +3; 2003 -> 255; -1997 -> 0
  EXPECT_EQ(repr_values(q), (std::vector<int64_t>{3, 5, 5, 3, 1, 255, 0}));
  Tensor r = int_repr(q);
  EXPECT_EQ(r.dtype(), kUInt8);
  Tensor d = dequantize(q);
  EXPECT_EQ(d.dtype(), kFloat32);
  const float* dp = d.data_ptr<float>();
  const float want[] = {0.f, 1.f, 1.f, 0.f, -1.f, 126.f, -1.5f};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(dp[i], want[i]) << i;
  EXPECT_EQ(repr_values(quantize_per_tensor(x, 0.5, -128, kQInt8)), (std::vector<int64_t>{-128, -126, -126, -128, -128, 127, -128}));
}

TEST(QuantizedTensor, PerChannelUsesTheParametersOfEachIndexOfAxis) {
  // PyTorch's own example: [[1, 2], [3, 4]] with scales [0.5, 0.25], zero points [1, 2] on axis 0.
  Tensor x = tensor(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Tensor q = quantize_per_channel(x, tensor(std::vector<double>{0.5, 0.25}), tensor(std::vector<int64_t>{1, 2}), 0, kQUInt8);
  EXPECT_EQ(repr_values(q), (std::vector<int64_t>{3, 5, 14, 18}));
  Tensor q1 = quantize_per_channel(x, tensor(std::vector<double>{0.5, 0.25}), tensor(std::vector<int64_t>{1, 2}), 1, kQInt8);
  EXPECT_EQ(repr_values(q1), (std::vector<int64_t>{3, 10, 7, 18}));
  Tensor d = dequantize(q1);
  EXPECT_EQ(std::vector<float>(d.data_ptr<float>(), d.data_ptr<float>() + 4), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(q1.impl()->qparams()->axis(), 1);
}

TEST(QuantizedTensor, MatchesTheNumPyOracle) {
  for (int seed : {1, 2, 3}) {
    const std::string cmd = std::string("python3 '") + TESSERA_QUANT_ORACLE + "' " + std::to_string(seed);
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
    ASSERT_TRUE(pipe) << cmd;
    std::string out;
    char buf[65536];
    while (size_t n = fread(buf, 1, sizeof(buf), pipe.get())) out.append(buf, n);
    const nlohmann::json doc = nlohmann::json::parse(out, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << "the oracle printed no JSON: " << out.substr(0, 200);
    for (const auto& c : doc["cases"]) {
      std::vector<float> xs;
      for (const auto& v : c["x"]) {
        if (v.is_string()) xs.push_back(std::stof(v.get<std::string>()));  // "nan", "inf", "-inf"
        else xs.push_back(v.get<float>());
      }
      const std::vector<int64_t> sizes = c["sizes"].get<std::vector<int64_t>>();
      const DType dt = dtype_from_name(c["dtype"].get<std::string>());
      Tensor x = tensor(xs, IntArrayRef(sizes));
      Tensor q = c.contains("scale")
                     ? quantize_per_tensor(x, c["scale"].get<double>(), c["zero_point"].get<int64_t>(), dt)
                     : quantize_per_channel(x, tensor(c["scales"].get<std::vector<double>>()),
                                            tensor(c["zero_points"].get<std::vector<int64_t>>()), c["axis"].get<int64_t>(), dt);
      EXPECT_EQ(repr_values(q), c["q"].get<std::vector<int64_t>>()) << c.dump().substr(0, 300);
      Tensor d = dequantize(q);
      const std::vector<float> want = [&] {
        std::vector<float> w;
        for (const auto& v : c["deq"]) w.push_back(v.get<float>());
        return w;
      }();
      const float* dp = d.data_ptr<float>();
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(dp[i], want[i]) << "seed " << seed << " element " << i;
    }
  }
}

TEST(QuantizedTensor, BadInputGivesOneLineErrors) {
  Tensor x = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto has = [](const std::string& msg, const char* what) {
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  };
  has(error_of([&] { quantize_per_tensor(x, 0.0, 0, kQInt8); }), "scale");
  has(error_of([&] { quantize_per_tensor(x, -1.0, 0, kQInt8); }), "finite positive");
  has(error_of([&] { quantize_per_tensor(x, INFINITY, 0, kQInt8); }), "finite positive");
  has(error_of([&] { quantize_per_tensor(x, NAN, 0, kQInt8); }), "finite positive");
  has(error_of([&] { quantize_per_tensor(x, 1.0, 128, kQInt8); }), "-128..127");
  has(error_of([&] { quantize_per_tensor(x, 1.0, -1, kQUInt8); }), "0..255");
  has(error_of([&] { quantize_per_tensor(x, 1.0, 0, kInt8); }), "not a quantized dtype");
  has(error_of([&] { quantize_per_tensor(x.to(kFloat64), 1.0, 0, kQInt8); }), "float32");
  has(error_of([&] { quantize_per_tensor(x.to(kInt32), 1.0, 0, kQInt8); }), "float32");
  Tensor s2 = tensor(std::vector<double>{1, 1}), z2 = tensor(std::vector<int64_t>{0, 0});
  has(error_of([&] { quantize_per_channel(x, s2, z2, 2, kQInt8); }), "axis 2 is out of range");
  has(error_of([&] { quantize_per_channel(x, s2, z2, -1, kQInt8); }), "axis -1 is out of range");
  has(error_of([&] { quantize_per_channel(x, s2, z2, 1, kQInt8); }), "3 values");
  has(error_of([&] { quantize_per_channel(x, tensor(std::vector<double>{1, 0}), z2, 0, kQInt8); }), "scale[1]");
  has(error_of([&] { quantize_per_channel(x, s2, tensor(std::vector<int64_t>{0, 300}), 0, kQUInt8); }), "zero_point[1]");
  has(error_of([&] { int_repr(x); }), "expected a quantized tensor");
}

TEST(QuantizedTensor, OtherOpsRefuseQuantizedTensorsNamingDequantize) {
  Tensor q = quantize_per_tensor(tensor(std::vector<float>{1, 2}), 0.1, 0, kQInt8);
  Tensor f = tensor(std::vector<float>{1, 2});
  for (const std::string& msg : {error_of([&] { add(q, q); }), error_of([&] { add(f, q); }),
                                 error_of([&] { exp(q); }), error_of([&] { q.sum(); }),
                                 error_of([&] { matmul(q, q); })})
    EXPECT_NE(msg.find("dequantize()"), std::string::npos) << msg;
  // dequantize of a plain tensor is the tensor.
  EXPECT_EQ(dequantize(f).impl(), f.impl());
}

TEST(QuantizedTensor, ViewsKeepTheParameters) {
  Tensor x = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor q = quantize_per_tensor(x, 0.5, 1, kQInt8);
  Tensor v = q.select(0, 1);
  EXPECT_EQ(v.dtype(), kQInt8);
  EXPECT_EQ(repr_values(v), (std::vector<int64_t>{9, 11, 13}));
  Tensor d = dequantize(q.t());
  EXPECT_EQ(std::vector<float>(d.contiguous().data_ptr<float>(), d.contiguous().data_ptr<float>() + 6),
            (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor qc = quantize_per_channel(x, tensor(std::vector<double>{0.5, 0.25, 1}), tensor(std::vector<int64_t>{0, 0, 0}), 1, kQInt8);
  EXPECT_EQ(repr_values(qc.slice(0, 1, 2)), (std::vector<int64_t>{8, 20, 6}));
  EXPECT_NE(error_of([&] { qc.t(); }).find("dequantize()"), std::string::npos);
}

TEST(QuantizedTensor, PrintingShowsValuesScaleAndZeroPoint) {
  Tensor q = quantize_per_tensor(tensor(std::vector<float>{1.0f, -2.0f}), 0.5, 3, kQUInt8);
  EXPECT_EQ(to_string(q),
            "tensor([ 1.0000, -1.5000], size=(2,), dtype=quint8,\n"
            "       quantization_scheme=per_tensor_affine, scale=0.5, zero_point=3)");
  Tensor qc = quantize_per_channel(tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}), tensor(std::vector<double>{0.5, 0.25}),
                                   tensor(std::vector<int64_t>{1, 2}), 0, kQUInt8);
  const std::string s = to_string(qc);
  EXPECT_NE(s.find("quantization_scheme=per_channel_affine"), std::string::npos) << s;
  EXPECT_NE(s.find("scale=[0.5, 0.25]"), std::string::npos) << s;
  EXPECT_NE(s.find("zero_point=[1, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("axis=0"), std::string::npos) << s;
}

}  // namespace
}  // namespace tessera
