// The quantization flow over exported programs (tessera/compiler/quantize.h): observers against
// hand-computed parameters, prepare / calibrate / convert with the built-in quantizers against a
// reference integer representation written here (int32 accumulation, requantisation by
// s_x * s_w / s_out, round half to even, saturation), composition and validation errors, the int8
// lowering, and the program-file round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <unistd.h>
#include <vector>

#include "quant_test_util.h"
#include "tessera/compiler/export.h"
#include "tessera/compiler/program_file.h"
#include "tessera/compiler/quantize.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using compiler::ExportedProgram;
using compiler::Node;
using compiler::NodeKind;
using namespace tessera::quantization;
using namespace tessera::quant_test;

double scale_of(const Node& q) { return std::get<double>(q.args.at(1).constant); }
int64_t zero_point_of(const Node& q) { return std::get<int64_t>(q.args.at(2).constant); }

// A multi-layer perceptron: linear + relu for every layer but the last.
struct Mlp {
  std::vector<Tensor> w, b;
};

Mlp random_mlp(std::mt19937_64& g, const std::vector<int64_t>& widths) {
  Mlp m;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    const float r = 1.0f / std::sqrt(float(widths[l]));
    m.w.push_back(uniform_tensor(g, {widths[l + 1], widths[l]}, -r, r));
    m.b.push_back(uniform_tensor(g, {widths[l + 1]}, -0.1f, 0.1f));
  }
  return m;
}

ExportedProgram export_mlp(const Mlp& m, int64_t in_features) {
  ExportOptions opts;
  opts.input_names = {"x"};
  for (size_t l = 0; l < m.w.size(); ++l) {
    opts.parameters["fc" + std::to_string(l) + ".weight"] = m.w[l];
    opts.parameters["fc" + std::to_string(l) + ".bias"] = m.b[l];
  }
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 4096}}}};
  return export_program(
      [&](const std::vector<Tensor>& in) {
        Tensor h = in[0];
        for (size_t l = 0; l < m.w.size(); ++l) {
          h = linear(h, m.w[l], m.b[l]);
          if (l + 1 < m.w.size()) h = relu(h);
        }
        return std::vector<Tensor>{h};
      },
      {zeros({4, in_features})}, opts);
}

// The reference integer representation of the quantized MLP: activations quantized with the
// parameters of the converted program's quantize nodes (in order: input, then each layer's output),
// weights per output channel symmetric (scale max|w| / 127.5), int32 accumulation, requantisation by
// s_x * s_w / s_out plus the bias over s_out. Returns the dequantized output.
std::vector<double> integer_mlp(const Mlp& m, const std::vector<float>& x, int64_t batch,
                                const std::vector<std::pair<double, int64_t>>& act) {
  std::vector<int64_t> xq;
  for (float v : x) xq.push_back(quantize_value(v, act[0].first, act[0].second, 0, 255));
  int64_t k = m.w[0].size(1);
  for (size_t l = 0; l < m.w.size(); ++l) {
    const std::vector<float> w = values_of(m.w[l]), b = values_of(m.b[l]);
    const int64_t n = m.w[l].size(0);
    const auto [sx, zx] = act[l];
    const auto [so, zo] = act[l + 1];
    std::vector<int64_t> out(size_t(batch * n));
    for (int64_t j = 0; j < n; ++j) {
      float amax = 0;
      for (int64_t q = 0; q < k; ++q) amax = std::max(amax, std::abs(w[size_t(j * k + q)]));
      const double sw = std::max(double(float(amax / 127.5f)), double(std::numeric_limits<float>::epsilon()));
      std::vector<int64_t> wq(static_cast<size_t>(k));
      for (int64_t q = 0; q < k; ++q) wq[size_t(q)] = quantize_value(w[size_t(j * k + q)], sw, 0, -128, 127);
      for (int64_t i = 0; i < batch; ++i) {
        int64_t acc = 0;
        for (int64_t q = 0; q < k; ++q) acc += (xq[size_t(i * k + q)] - zx) * wq[size_t(q)];
        double y = double(acc) * (sx * sw / so) + double(b[size_t(j)]) / so;
        if (l + 1 < m.w.size()) y = std::max(y, 0.0);
        out[size_t(i * n + j)] = std::clamp(int64_t(round_half_even(y)) + zo, int64_t(0), int64_t(255));
      }
    }
    xq = std::move(out);
    k = n;
  }
  std::vector<double> y;
  for (int64_t v : xq) y.push_back(double(v - act.back().second) * act.back().first);
  return y;
}

// Counts the elements of a and b that differ, and fails when one differs by more than `step`.
int64_t count_different(const std::vector<double>& a, const std::vector<float>& b, double step) {
  EXPECT_EQ(a.size(), b.size());
  int64_t different = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - double(b[i]));
    if (d > 1e-6 * std::max(1.0, std::abs(a[i]))) ++different;
    EXPECT_LE(d, step * 1.0001 + 1e-6) << "element " << i << ": " << a[i] << " vs " << b[i];
    if (d > step * 1.0001 + 1e-6) break;
  }
  return different;
}

// ||a - b|| / ||a||: how far a quantized result is from the float one, robust to the rare value
// that falls outside the calibrated range. Small random networks with 8-bit activations land at a
// few percent; a wrong scale or zero point lands far above the 0.15 the tests allow. The numerics
// themselves are checked against the integer reference.
double relative_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    den += double(a[i]) * double(a[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// ---- observers

TEST(QuantObserver, MinMaxWidensToZeroAndMatchesHandComputedParameters) {
  Observer o({kQUInt8, Scheme::PerTensorAffine, ObserverKind::MinMax, 0});
  o.observe(tensor(std::vector<float>{0.5f, 2.0f, 1.0f}, {3}));
  o.observe(tensor(std::vector<float>{3.0f, 1.5f}, {2}));
  // range [0, 3] (widened to include 0): scale 3/255, zero point 0
  EXPECT_FLOAT_EQ(float(o.scales()[0]), 3.0f / 255.0f);
  EXPECT_EQ(o.zero_points()[0], 0);
  Observer s({kQInt8, Scheme::PerTensorSymmetric, ObserverKind::MinMax, 0});
  s.observe(tensor(std::vector<float>{-2.55f, 1.0f}, {2}));
  EXPECT_FLOAT_EQ(float(s.scales()[0]), 2.55f / 127.5f);
  EXPECT_EQ(s.zero_points()[0], 0);
}

TEST(QuantObserver, MovingAverageFollowsPyTorchsAveragingConstant) {
  Observer o({kQUInt8, Scheme::PerTensorAffine, ObserverKind::MovingAverageMinMax, 0});
  o.observe(tensor(std::vector<float>{-1.0f, 1.0f}, {2}));
  o.observe(tensor(std::vector<float>{-3.0f, 5.0f}, {2}));
  // min = -1 + 0.01 * (-3 + 1) = -1.02, max = 1 + 0.01 * (5 - 1) = 1.04
  const float scale = (1.04f - -1.02f) / 255.0f;
  EXPECT_NEAR(o.scales()[0], scale, 1e-7);
  EXPECT_EQ(o.zero_points()[0], int64_t(std::nearbyint(0.0 - std::nearbyint(-1.02f / scale))));
}

TEST(QuantObserver, PerChannelMinMaxIsOnePairPerChannelOfTheAxis) {
  std::mt19937_64 g(fresh_seed());
  Tensor w = uniform_tensor(g, {3, 5, 2});
  Observer o({kQInt8, Scheme::PerChannelSymmetric, ObserverKind::PerChannelMinMax, 1});
  o.observe(w);
  const std::vector<float> v = values_of(w);
  ASSERT_EQ(o.scales().size(), 5u);
  for (int c = 0; c < 5; ++c) {
    float amax = 0;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 2; ++k) amax = std::max(amax, std::abs(v[size_t(i * 10 + c * 2 + k)]));
    EXPECT_FLOAT_EQ(float(o.scales()[size_t(c)]), amax / 127.5f) << "channel " << c;
    EXPECT_EQ(o.zero_points()[size_t(c)], 0);
  }
}

TEST(QuantObserver, HistogramMatchesPyTorchsHistogramObserverOnHeavyTails) {
  // sinh(8 (u - 0.5)) on a grid of u: most values near 0, tails to +-27.3. PyTorch 2.x's
  // HistogramObserver(dtype=torch.quint8) on the same float32 values gives scale 0.2135777771472931,
  // zero point 128; min-max would give 54.569 / 255 = 0.21400 (the search drops the sparsest tail bins).
  std::vector<float> v(20000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(std::sinh(8 * ((double(i) + 0.5) / 20000 - 0.5)));
  Observer o({kQUInt8, Scheme::PerTensorAffine, ObserverKind::Histogram, 0});
  o.observe(tensor(v, {20000}));
  EXPECT_NEAR(o.scales()[0], 0.2135777771472931, 1e-6);
  EXPECT_EQ(o.zero_points()[0], 128);
  // Uniform data keep their whole range.
  std::mt19937_64 g(fresh_seed());
  Observer uniform({kQUInt8, Scheme::PerTensorAffine, ObserverKind::Histogram, 0});
  uniform.observe(uniform_tensor(g, {20000}, 0.0f, 4.0f));
  EXPECT_NEAR(uniform.scales()[0] * 255, 4.0, 0.1);
}

TEST(QuantObserver, RefusesNonFiniteValuesAndUnobservedParameters) {
  Observer o({kQUInt8, Scheme::PerTensorAffine, ObserverKind::MinMax, 0});
  EXPECT_THROW(o.scales(), Error);
  try {
    o.observe(tensor(std::vector<float>{1.0f, INFINITY}, {2}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("finite"), std::string::npos) << e.what();
  }
}

// ---- prepare / calibrate / convert

TEST(QuantFlow, X86MlpConvertedAgreesWithTheReferenceIntegerRepresentation) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  Mlp m = random_mlp(g, {32, 48, 40, 10});
  ExportedProgram ep = export_mlp(m, 32);
  auto q = x86_quantizer({ObserverKind::MinMax});
  PreparedProgram p = prepare(ep, *q);
  // Every activation quantized once: input, two relu outputs, the last linear's output.
  EXPECT_EQ(p.observers.size(), 4u + 3u);  // + one per weight
  std::vector<float> calibration;
  for (int i = 0; i < 3; ++i) {
    Tensor x = uniform_tensor(g, {256, 32}, -2, 3);
    std::vector<float> v = values_of(x);
    calibration.insert(calibration.end(), v.begin(), v.end());
    calibrate(p, {x});
  }
  ExportedProgram c = convert(p);
  std::vector<const Node*> qs = calls_of(c, "quantize_per_tensor");
  ASSERT_EQ(qs.size(), 4u) << c.graph_string();
  EXPECT_EQ(calls_of(c, "quantize_per_channel").size(), 3u);
  EXPECT_EQ(calls_of(c, "dequantize").size(), 7u);
  // The input's parameters from the calibration data, computed here.
  const double lo = std::min(0.0, double(*std::min_element(calibration.begin(), calibration.end())));
  const double hi = std::max(0.0, double(*std::max_element(calibration.begin(), calibration.end())));
  const float expect_scale = float(hi - lo) / 255.0f;
  EXPECT_FLOAT_EQ(float(scale_of(*qs[0])), expect_scale);
  EXPECT_EQ(zero_point_of(*qs[0]), int64_t(0 - std::nearbyint(float(lo) / expect_scale)));

  Tensor x = uniform_tensor(g, {64, 32}, -2, 3);
  std::vector<float> got = values_of(c.run({x})[0]);
  std::vector<std::pair<double, int64_t>> act;
  for (const Node* n : qs) act.emplace_back(scale_of(*n), zero_point_of(*n));
  std::vector<double> want = integer_mlp(m, values_of(x), 64, act);
  const int64_t different = count_different(want, got, act.back().first);
  EXPECT_LE(different, int64_t(want.size()) / 10) << different << " of " << want.size() << " differ";
  // And the quantized program is close to the float one.
  std::vector<float> f = values_of(ep.run({x})[0]);
  EXPECT_LT(relative_rms(f, got), 0.15);
}

TEST(QuantFlow, XnnpackLikeQuantizesActivationsSymmetricSigned) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  Mlp m = random_mlp(g, {16, 24, 8});
  ExportedProgram ep = export_mlp(m, 16);
  auto q = xnnpack_like_quantizer({ObserverKind::MovingAverageMinMax});
  PreparedProgram p = prepare(ep, *q);
  for (int i = 0; i < 4; ++i) calibrate(p, {uniform_tensor(g, {256, 16})});
  ExportedProgram c = convert(p);
  std::vector<const Node*> qs = calls_of(c, "quantize_per_tensor");
  ASSERT_EQ(qs.size(), 3u);
  for (const Node* n : qs) {
    EXPECT_EQ(zero_point_of(*n), 0);
    EXPECT_EQ(std::get<DType>(n->args.at(3).constant), kQInt8);
  }
  Tensor x = uniform_tensor(g, {32, 16});
  std::vector<float> f = values_of(ep.run({x})[0]), got = values_of(c.run({x})[0]);
  EXPECT_LT(relative_rms(f, got), 0.15);
}

// conv2d -> relu -> max_pool2d -> flatten -> cat(with a second conv branch) -> linear
struct ConvNet {
  Tensor w1, b1, w2, b2, wl, bl;
};

ExportedProgram export_convnet(const ConvNet& n) {
  ExportOptions opts;
  opts.input_names = {"x"};
  opts.parameters = {{"conv1.weight", n.w1}, {"conv1.bias", n.b1}, {"conv2.weight", n.w2},
                     {"conv2.bias", n.b2}, {"fc.weight", n.wl}, {"fc.bias", n.bl}};
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 1024}}}};
  return export_program(
      [&](const std::vector<Tensor>& in) {
        Tensor a = max_pool2d(relu(conv2d(in[0], n.w1, n.b1, {1, 1}, {1, 1})), {2, 2}, {2, 2});
        Tensor b = max_pool2d(relu(conv2d(in[0], n.w2, n.b2, {1, 1}, {1, 1})), {2, 2}, {2, 2});
        Tensor h = cat({a.flatten(1), b.flatten(1)}, 1);
        return std::vector<Tensor>{linear(h, n.wl, n.bl)};
      },
      {zeros({2, 3, 8, 8})}, opts);
}

TEST(QuantFlow, PoolingFlattenAndCatShareTheirInputsParameters) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  ConvNet n{uniform_tensor(g, {4, 3, 3, 3}, -0.3f, 0.3f), uniform_tensor(g, {4}, -0.1f, 0.1f),
            uniform_tensor(g, {4, 3, 3, 3}, -0.6f, 0.6f), uniform_tensor(g, {4}, -0.1f, 0.1f),
            uniform_tensor(g, {5, 128}, -0.3f, 0.3f), uniform_tensor(g, {5}, -0.1f, 0.1f)};
  ExportedProgram ep = export_convnet(n);
  auto q = x86_quantizer({ObserverKind::MinMax});
  PreparedProgram p = prepare(ep, *q);
  for (int i = 0; i < 4; ++i) calibrate(p, {uniform_tensor(g, {32, 3, 8, 8})});
  ExportedProgram c = convert(p);
  // Both relu outputs, both pools, both flattens, the cat and the linear's input are one class.
  std::vector<const Node*> qs = calls_of(c, "quantize_per_tensor");
  // x, the shared activation class (relu, pool, view, cat: one q/dq per value), the output.
  std::set<std::pair<double, int64_t>> params;
  for (const Node* q : qs) params.insert({scale_of(*q), zero_point_of(*q)});
  EXPECT_EQ(params.size(), 3u) << c.graph_string();
  EXPECT_EQ(qs.size(), 1u + 2u + 2u + 2u + 1u + 1u) << c.graph_string();
  Tensor x = uniform_tensor(g, {16, 3, 8, 8});
  std::vector<float> f = values_of(ep.run({x})[0]), got = values_of(c.run({x})[0]);
  EXPECT_LT(relative_rms(f, got), 0.15);
}

// Both convolutions and the linear lower; pooling, flatten and cat keep running on the float32
// values the lowered convolutions write, and the result stays that of the converted program.
TEST(QuantLowering, ConvNetLowersItsConvolutionsAndLinear) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  ConvNet n{uniform_tensor(g, {4, 3, 3, 3}, -0.3f, 0.3f), uniform_tensor(g, {4}, -0.1f, 0.1f),
            uniform_tensor(g, {4, 3, 3, 3}, -0.6f, 0.6f), uniform_tensor(g, {4}, -0.1f, 0.1f),
            uniform_tensor(g, {5, 128}, -0.3f, 0.3f), uniform_tensor(g, {5}, -0.1f, 0.1f)};
  ExportedProgram ep = export_convnet(n);
  auto q = x86_quantizer({ObserverKind::MinMax});
  PreparedProgram p = prepare(ep, *q);
  for (int i = 0; i < 4; ++i) calibrate(p, {uniform_tensor(g, {32, 3, 8, 8})});
  ExportedProgram c = convert(p);
  ExportedProgram lowered = c;
  EXPECT_EQ(lower_to_int8(lowered), 3) << c.graph_string();
  EXPECT_EQ(calls_of(lowered, "_quantized_conv2d").size(), 2u) << lowered.graph_string();
  EXPECT_EQ(calls_of(lowered, "_quantized_linear").size(), 1u) << lowered.graph_string();
  EXPECT_TRUE(calls_of(lowered, "conv2d").empty()) << lowered.graph_string();
  Tensor x = uniform_tensor(g, {6, 3, 8, 8});
  const std::vector<float> want = values_of(c.run({x})[0]), got = values_of(lowered.run({x})[0]);
  const double step = scale_of(*calls_of(c, "quantize_per_tensor").back());
  std::vector<double> want_d(want.begin(), want.end());
  // The linear's input can move by one step where a convolution rounded differently, and the
  // linear's output by a few steps from that.
  int64_t different = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LE(std::abs(want[i] - got[i]), 4 * step + 1e-6) << "element " << i;
    different += std::abs(want[i] - got[i]) > 1e-6;
  }
  EXPECT_LE(different, int64_t(want.size()) / 2);
  EXPECT_LT(relative_rms(want, got), 0.05);
}

TEST(QuantFlow, ConvAddReluQuantizesTheAddOperandAndTheFusedOutputOnly) {
  std::mt19937_64 g(fresh_seed());
  Tensor w = uniform_tensor(g, {3, 3, 3, 3}, -0.3f, 0.3f);
  ExportOptions opts;
  opts.input_names = {"x", "skip"};
  opts.parameters = {{"conv.weight", w}};
  ExportedProgram ep = export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{relu(add(conv2d(in[0], w, std::nullopt, {1, 1}, {1, 1}), in[1]))}; },
      {zeros({1, 3, 6, 6}), zeros({1, 3, 6, 6})}, opts);
  auto q = x86_quantizer({ObserverKind::MinMax});
  PreparedProgram p = prepare(ep, *q);
  calibrate(p, {uniform_tensor(g, {1, 3, 6, 6}), uniform_tensor(g, {1, 3, 6, 6})});
  ExportedProgram c = convert(p);
  // x, skip and the relu output; the conv and add results stay float.
  EXPECT_EQ(calls_of(c, "quantize_per_tensor").size(), 3u) << c.graph_string();
  const Node* conv = calls_of(c, "conv2d").at(0);
  const Node* addn = calls_of(c, "add").at(0);
  EXPECT_TRUE(std::find(addn->args[0].values.begin(), addn->args[0].values.end(), conv->outputs[0]) !=
                  addn->args[0].values.end() ||
              addn->args[1].values.at(0) == conv->outputs[0]);
}

class KeepFirstLinearFloat : public quantization::Quantizer {
 public:
  std::string name() const override { return "keep_first_float"; }
  void annotate(const ExportedProgram& ep, Annotations& a) const override {
    for (size_t i = 0; i < ep.graph.nodes.size(); ++i)
      if (ep.graph.nodes[i].target.rfind("linear", 0) == 0) {
        a.set(ep, int32_t(i), NodeAnnotation{}, name());
        return;
      }
  }
};

class OverwriteFirstLinear : public quantization::Quantizer {
 public:
  std::string name() const override { return "overwriter"; }
  void annotate(const ExportedProgram& ep, Annotations& a) const override {
    for (size_t i = 0; i < ep.graph.nodes.size(); ++i)
      if (ep.graph.nodes[i].target.rfind("linear", 0) == 0) {
        NodeAnnotation n;
        n.output = QuantizationSpec{kQInt8, Scheme::PerTensorSymmetric, ObserverKind::MinMax, 0};
        a.set(ep, int32_t(i), n, name());
        return;
      }
  }
};

TEST(QuantFlow, ComposedQuantizersRespectEarlierAnnotationsAndRefuseChanges) {
  std::mt19937_64 g(fresh_seed());
  Mlp m = random_mlp(g, {8, 8, 8, 4});
  ExportedProgram ep = export_mlp(m, 8);
  KeepFirstLinearFloat keep;
  auto x86 = x86_quantizer({ObserverKind::MinMax});
  PreparedProgram p = prepare(ep, {&keep, x86.get()});
  calibrate(p, {uniform_tensor(g, {4, 8})});
  ExportedProgram c = convert(p);
  // The first layer stays float: the input is not quantized, the first relu's output is (the
  // second linear reads it), then the last two layers.
  EXPECT_EQ(calls_of(c, "quantize_per_channel").size(), 2u) << c.graph_string();
  EXPECT_EQ(calls_of(c, "quantize_per_tensor").size(), 3u) << c.graph_string();

  OverwriteFirstLinear over;
  try {
    prepare(ep, {x86.get(), &over});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'overwriter'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'x86'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

class BadSpecs : public quantization::Quantizer {
 public:
  enum Kind { PerChannelActivation, SharedWithNothing } kind;
  explicit BadSpecs(Kind k) : kind(k) {}
  std::string name() const override { return "bad"; }
  void annotate(const ExportedProgram& ep, Annotations& a) const override {
    for (size_t i = 0; i < ep.graph.nodes.size(); ++i) {
      const Node& n = ep.graph.nodes[i];
      if (n.target.rfind("linear", 0) != 0) continue;
      NodeAnnotation an;
      const ValueId x = n.args[0].values[0];
      switch (kind) {
        case PerChannelActivation:
          an.inputs[x] = QuantizationSpec{kQInt8, Scheme::PerChannelSymmetric, ObserverKind::PerChannelMinMax, 1};
          break;
        case SharedWithNothing: an.inputs[x] = SharedSpec{QuantPoint::output(n.outputs[0])}; break;
      }
      a.set(ep, int32_t(i), an, name());
      return;
    }
  }
};

TEST(QuantFlow, PrepareNamesTheNodeAndTheQuantizerOfABadSpec) {
  std::mt19937_64 g(fresh_seed());
  ExportedProgram ep = export_mlp(random_mlp(g, {4, 4}), 4);
  auto expect = [&](BadSpecs::Kind k, const char* text) {
    BadSpecs bad(k);
    try {
      prepare(ep, bad);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'bad'"), std::string::npos) << e.what();
    }
  };
  expect(BadSpecs::PerChannelActivation, "applies to weights and constants only");
  expect(BadSpecs::SharedWithNothing, "which no annotation quantizes");
}

// Two points of a cat that share each other's parameters and nobody has a spec.
class SharesOnlyWithShares : public quantization::Quantizer {
 public:
  std::string name() const override { return "circular"; }
  void annotate(const ExportedProgram& ep, Annotations& a) const override {
    for (size_t i = 0; i < ep.graph.nodes.size(); ++i) {
      const Node& n = ep.graph.nodes[i];
      if (n.target.rfind("cat", 0) != 0) continue;
      NodeAnnotation c;
      c.inputs[n.args[0].values[0]] = SharedSpec{QuantPoint::output(n.outputs[0])};
      c.output = SharedSpec{QuantPoint::input(n.args[0].values[0], int32_t(i))};
      a.set(ep, int32_t(i), c, name());
    }
  }
};

TEST(QuantFlow, AGroupOfSharedSpecsWithoutASpecIsRefused) {
  ExportOptions opts;
  opts.input_names = {"a", "b"};
  ExportedProgram ep = export_program(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{cat({in[0], relu(in[1])}, 1)}; },
      {zeros({2, 3}), zeros({2, 3})}, opts);
  SharesOnlyWithShares q;
  try {
    prepare(ep, q);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("shares parameters only with shared specs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'circular'"), std::string::npos) << msg;
  }
}

TEST(QuantFlow, ConvertBeforeCalibrateSaysToCalibrate) {
  std::mt19937_64 g(fresh_seed());
  ExportedProgram ep = export_mlp(random_mlp(g, {4, 4}), 4);
  auto q = x86_quantizer({ObserverKind::MinMax});
  PreparedProgram p = prepare(ep, *q);
  try {
    convert(p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("calibrate"), std::string::npos) << e.what();
  }
}

// ---- lowering to the int8 kernels

TEST(QuantLowering, LoweredMlpAgreesWithConvertedAndReferenceWithinOneStep) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  Mlp m = random_mlp(g, {64, 96, 80, 16});
  ExportedProgram ep = export_mlp(m, 64);
  auto q = x86_quantizer();  // histogram observers
  PreparedProgram p = prepare(ep, *q);
  for (int i = 0; i < 2; ++i) calibrate(p, {uniform_tensor(g, {256, 64}, -2, 2)});
  ExportedProgram c = convert(p);
  ExportedProgram lowered = c;
  EXPECT_EQ(lower_to_int8(lowered), 3);
  EXPECT_EQ(calls_of(lowered, "_quantized_linear").size(), 3u) << lowered.graph_string();
  EXPECT_TRUE(calls_of(lowered, "linear").empty()) << lowered.graph_string();
  EXPECT_TRUE(calls_of(lowered, "quantize_per_channel").empty()) << lowered.graph_string();
  // Note [Lowered int8 boundaries]: the first layer quantizes the float32 input inside, the last
  // writes the dequantized float32 values; nothing runs between or around the three kernels.
  for (const char* op : {"quantize_per_tensor", "int_repr", "dequantize", "_to_copy", "sub", "mul"})
    EXPECT_TRUE(calls_of(lowered, op).empty()) << op << "\n" << lowered.graph_string();
  const auto kernels = calls_of(lowered, "_quantized_linear");
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(lowered.graph.type(kernels[0]->args[0].values[0]).dtype, kFloat32);
  EXPECT_EQ(lowered.graph.type(kernels[1]->args[0].values[0]).dtype, kUInt8);
  EXPECT_EQ(std::get<DType>(kernels[2]->args[8].constant), kQUInt8);
  EXPECT_EQ(lowered.graph.type(kernels[2]->outputs[0]).dtype, kFloat32);

  std::vector<std::pair<double, int64_t>> act;
  for (const Node* n : calls_of(c, "quantize_per_tensor")) act.emplace_back(scale_of(*n), zero_point_of(*n));
  for (int64_t batch : {1, 7, 50}) {
    Tensor x = uniform_tensor(g, {batch, 64}, -2, 2);
    std::vector<float> low = values_of(lowered.run({x})[0]), conv = values_of(c.run({x})[0]);
    std::vector<double> ref = integer_mlp(m, values_of(x), batch, act);
    EXPECT_LE(count_different(ref, low, act.back().first), int64_t(ref.size()) / 10) << "batch " << batch;
    std::vector<double> conv_d(conv.begin(), conv.end());
    EXPECT_LE(count_different(conv_d, low, act.back().first), int64_t(ref.size()) / 10) << "batch " << batch;
  }
}

TEST(QuantLowering, LeavesUnmatchedRegionsToTheReferenceKernels) {
  std::mt19937_64 g(fresh_seed());
  Mlp m = random_mlp(g, {8, 8});
  ExportedProgram ep = export_mlp(m, 8);
  auto q = xnnpack_like_quantizer({ObserverKind::MinMax});  // qint8 activations: no u8s8 kernel
  PreparedProgram p = prepare(ep, *q);
  calibrate(p, {uniform_tensor(g, {4, 8})});
  ExportedProgram c = convert(p);
  ExportedProgram lowered = c;
  EXPECT_EQ(lower_to_int8(lowered), 0);
  EXPECT_EQ(lowered.graph_string(), c.graph_string());
}

// ---- the program file

TEST(QuantProgramFile, ConvertedProgramSavesLoadsAndLowersAfterLoading) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  Mlp m = random_mlp(g, {16, 32, 8});
  ExportedProgram ep = export_mlp(m, 16);
  auto q = x86_quantizer({ObserverKind::MinMax});
  PreparedProgram p = prepare(ep, *q);
  calibrate(p, {uniform_tensor(g, {16, 16})});
  ExportedProgram c = convert(p);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("quant_flow_" + std::to_string(getpid()) + ".tsr")).string();
  save(c, path);
  ExportedProgram back = load_program(path);
  std::filesystem::remove(path);
  EXPECT_EQ(back.graph_string(), c.graph_string());
  Tensor x = uniform_tensor(g, {5, 16});
  std::vector<float> want = values_of(c.run({x})[0]), got = values_of(back.run({x})[0]);
  ASSERT_EQ(want, got);
  EXPECT_EQ(lower_to_int8(back), 2);
  std::vector<float> low = values_of(back.run({x})[0]);
  const Node* last = calls_of(c, "quantize_per_tensor").back();
  std::vector<double> want_d(want.begin(), want.end());
  EXPECT_LE(count_different(want_d, low, scale_of(*last)), int64_t(want.size()) / 10);
}

}  // namespace
}  // namespace tessera
