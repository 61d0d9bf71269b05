// Fake quantization (Note [Fake quantize]) and quantization-aware training (Note
// [Quantization-aware training]): the ops against PyTorch's formula worked in this file and by hand,
// their straight-through gradient, their errors, and a small CNN trained with QAT whose int8 program
// keeps its float accuracy.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tessera/autograd.h"
#include "tessera/compiler/export.h"
#include "tessera/compiler/quantize.h"
#include "tessera/nn.h"
#include "tessera/tessera.h"

#include "quant_test_util.h"

namespace tessera {
namespace {

namespace ag = autograd;
using quant_test::error_of;

std::vector<float> values(const Tensor& t) {
  Tensor c = t.cpu().contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// PyTorch's fake_quantize_tensor_cachemask_kernel, per element in float32; `in_range` is its mask.
float reference(float x, float scale, int64_t zp, int64_t lo, int64_t hi, bool* in_range = nullptr) {
  const float inv = 1.0f / scale;
  const auto q = static_cast<int64_t>(float(zp) + std::nearbyint(x * inv));
  if (in_range) *in_range = q >= lo && q <= hi;
  const int64_t c = q < lo ? lo : (q > hi ? hi : q);
  return float(c - zp) * scale;
}

std::vector<float> random_values(size_t n, uint64_t seed, float sd) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

uint64_t fresh_seed() { return (uint64_t(std::random_device{}()) << 32) | std::random_device{}(); }

TEST(FakeQuantize, PerTensorHandWorkedValues) {
  // scale 0.05, zero point 10, quint8 range: 0.024 rounds to 0 steps, 0.026 to 1; -1 is 20 steps below
  // the zero point (clamped at 0: -0.5); 20 is 410 (clamped at 255: 12.25).
  Tensor x = tensor(std::vector<float>{0.0f, 0.024f, 0.026f, -1.0f, 20.0f});
  Tensor y = fake_quantize_per_tensor_affine(x, tensor(std::vector<float>{0.05f}), tensor(std::vector<int32_t>{10}), 0, 255);
  const std::vector<float> want = {0.0f, 0.0f, 0.05f, -0.5f, 12.25f};
  const std::vector<float> got = values(y);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "element " << i;
}

// NaN gives quant_min (as PyTorch on x86, whose int64 conversion turns NaN into INT64_MIN);
// infinities saturate to the range's ends: scale 0.1, zero point 10, quint8.
TEST(FakeQuantize, NonFiniteValuesGiveTheRangesEnds) {
  Tensor x = tensor(std::vector<float>{NAN, INFINITY, -INFINITY, 1e30f, -1e30f});
  const std::vector<float> got =
      values(fake_quantize_per_tensor_affine(x, tensor(std::vector<float>{0.1f}), tensor(std::vector<int32_t>{10}), 0, 255));
  const std::vector<float> want = {-1.0f, 24.5f, -1.0f, 24.5f, -1.0f};  // (0 - 10) * 0.1, (255 - 10) * 0.1
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "element " << i;
}

TEST(FakeQuantize, PerTensorMatchesPyTorchsFormulaOnRandomValues) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<float> xv = random_values(3 * 7 * 11, seed, 2.0f);
  Tensor x = tensor(xv, {3, 7, 11});
  Tensor y = fake_quantize_per_tensor_affine(x, tensor(std::vector<float>{0.013f}), tensor(std::vector<int64_t>{-7}), -128, 127);
  const std::vector<float> got = values(y);
  for (size_t i = 0; i < xv.size(); ++i) ASSERT_EQ(got[i], reference(xv[i], 0.013f, -7, -128, 127)) << "element " << i;
}

TEST(FakeQuantize, PerChannelOnATransposedViewMatchesPyTorchsFormula) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<float> base = random_values(6 * 4, seed, 1.5f);
  Tensor x = tensor(base, {6, 4}).t();  // [4, 6], not contiguous; channels along dim 0
  const std::vector<float> scales = {0.01f, 0.2f, 0.003f, 0.05f};
  const std::vector<int64_t> zps = {0, 3, -100, 127};
  Tensor y = fake_quantize_per_channel_affine(x, tensor(scales), tensor(zps), 0, -128, 127);
  const std::vector<float> got = values(y);
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t j = 0; j < 6; ++j)
      ASSERT_EQ(got[size_t(c * 6 + j)], reference(base[size_t(j * 4 + c)], scales[size_t(c)], zps[size_t(c)], -128, 127))
          << "channel " << c << ", element " << j;
}

TEST(FakeQuantize, GradientIsStraightThroughInsideTheRange) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<float> xv = random_values(200, seed, 3.0f), gv = random_values(200, seed + 1, 1.0f);
  Tensor x = ag::set_requires_grad(tensor(xv, {20, 10}));
  // Per channel along dim 1: ranges of about [-1.3, 1.3] to [-6.4, 6.4] against values of sd 3.
  std::vector<float> scales;
  for (int c = 0; c < 10; ++c) scales.push_back(0.01f + 0.04f * float(c) / 9.0f);
  Tensor y = fake_quantize_per_channel_affine(x, tensor(scales), tensor(std::vector<int64_t>(10, 0)), 1, -128, 127);
  ag::backward((y * tensor(gv, {20, 10})).sum());
  const std::vector<float> grad = values(ag::grad(x));
  int inside = 0, outside = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    bool in_range = false;
    reference(xv[i], scales[i % 10], 0, -128, 127, &in_range);
    (in_range ? inside : outside)++;
    ASSERT_EQ(grad[i], in_range ? gv[i] : 0.0f) << "element " << i << " (x = " << xv[i] << ")";
  }
  EXPECT_GT(inside, 0);
  EXPECT_GT(outside, 0);  // both sides of the mask were exercised
}

TEST(FakeQuantize, BadArgumentsAreClearErrors) {
  Tensor x = tensor(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Tensor s = tensor(std::vector<float>{0.1f}), z = tensor(std::vector<int32_t>{0});
  EXPECT_NE(error_of([&] { fake_quantize_per_tensor_affine(x, tensor(std::vector<float>{0.0f}), z, 0, 255); })
                .find("scale 0"), std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize_per_tensor_affine(x, s, tensor(std::vector<int32_t>{300}), 0, 255); })
                .find("zero_point 300 is outside [quant_min, quant_max] = [0, 255]"), std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize_per_tensor_affine(x, s, z, 10, 5); })
                .find("quant_min 10 is greater than quant_max 5"), std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize_per_tensor_affine(x.to(kFloat64), s, z, 0, 255); })
                .find("self must be float32"), std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize_per_channel_affine(x, s, z, 2, 0, 255); })
                .find("axis 2 is out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { fake_quantize_per_channel_affine(x, s, z, 0, 0, 255); })
                .find("scale must be a float32 tensor of 2 values"), std::string::npos);
  // The process keeps working.
  EXPECT_EQ(values(fake_quantize_per_tensor_affine(x, s, z, 0, 255)), (std::vector<float>{1, 2, 3, 4}));
}

// A small CNN: conv (+relu) -> flatten -> linear, on 8x8 single-channel images of a synthetic 4-class
// task whose classes are linear in the pixels (a max pool would lose what the task needs).
struct Cnn : nn::Module {
  Cnn()
      : conv(register_module("conv", std::make_shared<nn::Conv2d>(1, 8, 3, 1, 1))),
        fc(register_module("fc", std::make_shared<nn::Linear>(512, 4))) {}
  Tensor forward(const Tensor& x) const { return fc->forward(relu(conv->forward(x)).flatten(1)); }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::Linear> fc;
};

double accuracy(const Tensor& logits, const Tensor& labels) {
  Tensor pred = argmax(logits.cpu(), 1);
  Tensor y = labels.cpu().to(kInt64).contiguous();
  const int64_t* p = pred.contiguous().data_ptr<int64_t>();
  const int64_t* t = y.data_ptr<int64_t>();
  int64_t right = 0;
  for (int64_t i = 0; i < y.numel(); ++i) right += p[i] == t[i];
  return double(right) / double(y.numel());
}

TEST(Qat, SmallCnnKeepsItsFloatAccuracyWithinOnePercentAfterInt8Conversion) {
  manual_seed(11);
  // 2048 training and 1024 held-out samples of one distribution.
  nn::Dataset data = nn::make_classification(3072, 64, 4, 17);
  Tensor x_all = data.x.reshape({3072, 1, 8, 8});
  Tensor x_train = x_all.narrow(0, 0, 2048), y_train = data.y.narrow(0, 0, 2048);
  Tensor x_test = x_all.narrow(0, 2048, 1024).contiguous(), y_test = data.y.narrow(0, 2048, 1024);

  Cnn model;
  nn::optim::Adam opt(model.parameters(), {.lr = 0.01});
  for (int s = 0; s < 150; ++s) {
    opt.zero_grad();
    ag::backward(nn::cross_entropy(model.forward(x_train), y_train));
    opt.step();
  }
  double float_acc = 0;
  {
    ag::NoGradGuard g;
    float_acc = accuracy(model.forward(x_test), y_test);
  }

  ExportOptions opts;
  opts.input_names = {"x"};
  for (const auto& [name, p] : model.named_parameters()) opts.parameters[name] = p;
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 4096}}}};
  compiler::ExportedProgram f32;
  {
    ag::NoGradGuard g;
    f32 = export_program([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{model.forward(in[0])}; },
                         {zeros({8, 1, 8, 8})}, opts);
  }
  auto quantizer = quantization::x86_quantizer();
  quantization::QatProgram qat = quantization::prepare_qat(f32, *quantizer);
  int fake_nodes = 0;
  for (const compiler::Node& n : qat.training_program().graph.nodes)
    fake_nodes += n.target.rfind("fake_quantize_per_", 0) == 0;
  EXPECT_GE(fake_nodes, 4);  // conv input and weight, linear input and weight (and outputs)
  ASSERT_EQ(qat.parameters().size(), 4u);  // conv and linear weights and biases
  const std::vector<float> w_before = values(qat.named_parameters().at("fc.weight"));

  nn::optim::Adam qat_opt(qat.parameters(), {.lr = 0.002});
  double first = 0, last = 0;
  for (int s = 0; s < 60; ++s) {
    qat_opt.zero_grad();
    Tensor loss = nn::cross_entropy(qat({x_train})[0], y_train);
    ag::backward(loss);
    for (const Tensor& p : qat.parameters()) ASSERT_TRUE(ag::grad(p).defined()) << "a parameter got no gradient";
    qat_opt.step();
    last = loss.item<double>();
    if (s == 0) first = last;
  }
  EXPECT_LE(last, first * 1.05) << "QAT fine-tuning diverged";
  EXPECT_NE(values(qat.named_parameters().at("fc.weight")), w_before) << "the weights did not train";
  // The original program was left alone: its weights are the float model's.
  EXPECT_EQ(values(f32.weights.at("fc.weight")), values(model.fc->named_parameters()[0].second));

  compiler::ExportedProgram int8 = quantization::convert(qat);
  EXPECT_EQ(quantization::lower_to_int8(int8), 2);  // the conv and the linear run as int8 kernels
  const double int8_acc = accuracy(int8.run({x_test})[0], y_test);
  std::printf("float accuracy %.4f, int8 after QAT %.4f (QAT loss %.4f -> %.4f)\n", float_acc, int8_acc, first, last);
  EXPECT_GT(float_acc, 0.8);  // the float model learnt the task (chance: 0.25)
  EXPECT_GE(int8_acc, float_acc - 0.01);
}

TEST(Qat, ConvertBeforeAnyForwardIsAClearError) {
  Tensor w = randn({3, 4}), b = zeros({3});
  ExportOptions opts;
  opts.input_names = {"x"};
  opts.parameters = {{"w", w}, {"b", b}};
  compiler::ExportedProgram ep = export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{linear(in[0], w, b)}; }, {randn({5, 4})}, opts);
  quantization::QatProgram qat = quantization::prepare_qat(ep, *quantization::x86_quantizer());
  try {
    quantization::convert(qat);
    FAIL() << "convert ran without observed activations";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("saw no values; run forward() on training data first"), std::string::npos)
        << e.what();
  }
  // After one forward it converts, and the converted program computes what the QAT forward does
  // (both simulate the same int8 grid; the observers moved only by the one step's values).
  Tensor x = randn({5, 4});
  qat.freeze_observers(false);
  qat({x});
  qat.freeze_observers();
  const std::vector<float> trained = values(qat({x})[0]);
  const std::vector<float> converted = values(quantization::convert(qat).run({x})[0]);
  ASSERT_EQ(trained.size(), converted.size());
  for (size_t i = 0; i < trained.size(); ++i) EXPECT_NEAR(trained[i], converted[i], 1e-5) << "element " << i;
}

}  // namespace
}  // namespace tessera
