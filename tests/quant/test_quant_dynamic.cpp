// Dynamic quantization of exported programs (quantize_dynamic, Note [Dynamic quantization] in
// tessera/compiler/quantize.h) against a reference of PyTorch's dynamic quantized linear written
// here in double: per call, the input's scale and zero point from its min and max (MinMaxObserver's
// choose_qparams over 0..qmax), quantize_val in float32, weights per output channel symmetric
// (max|w_c| / 127.5), int32 accumulation, s_x * s_w[j] * acc + bias[j]. (That formula, with qmax
// 127, reproduces torch.ao.quantization.quantize_dynamic with per_channel_dynamic_qconfig on x86.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
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

struct Mlp {
  std::vector<Tensor> w, b;
};

// widths[0] -> widths[1] -> ...; relu after every layer but the last; the second layer has no bias.
Mlp random_mlp(std::mt19937_64& g, const std::vector<int64_t>& widths) {
  Mlp m;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    m.w.push_back(normal_tensor(g, {widths[l + 1], widths[l]}, 0, 1.0f / std::sqrt(float(widths[l]))));
    m.b.push_back(l == 1 ? Tensor() : normal_tensor(g, {widths[l + 1]}, 0, 0.1f));
  }
  return m;
}

ExportedProgram export_mlp(const Mlp& m) {
  ExportOptions opts;
  opts.input_names = {"x"};
  for (size_t l = 0; l < m.w.size(); ++l) {
    opts.parameters["fc" + std::to_string(l) + ".weight"] = m.w[l];
    if (m.b[l].defined()) opts.parameters["fc" + std::to_string(l) + ".bias"] = m.b[l];
  }
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 4096}}}};
  return export_program(
      [&](const std::vector<Tensor>& in) {
        Tensor h = in[0];
        for (size_t l = 0; l < m.w.size(); ++l) {
          h = m.b[l].defined() ? linear(h, m.w[l], m.b[l]) : linear(h, m.w[l]);
          if (l + 1 < m.w.size()) h = relu(h);
        }
        return std::vector<Tensor>{h};
      },
      {zeros({4, m.w[0].size(1)})}, opts);
}

// One dynamic quantized linear in double on the values `x` [rows, k]; also returns the input's
// quantisation step s_x and the largest s_w, to size tolerances.
std::vector<double> dynamic_linear(const std::vector<double>& x, int64_t rows, const Tensor& weight, const Tensor& bias,
                                   bool relu, int64_t qmax, double* step) {
  const int64_t n = weight.size(0), k = weight.size(1);
  const std::vector<float> w = values_of(weight);
  const std::vector<float> b = bias.defined() ? values_of(bias) : std::vector<float>(size_t(n), 0.0f);
  // MinMaxObserver's choose_qparams in float32, over 0..qmax.
  double lo = 0, hi = 0;
  for (double v : x) lo = std::min(lo, double(float(v))), hi = std::max(hi, double(float(v)));
  const float sx = std::max(float(hi - lo) / float(qmax), std::numeric_limits<float>::epsilon());
  const int64_t zx = int64_t(std::clamp(-round_half_even(double(float(lo) / sx)), 0.0, double(qmax)));
  const float inv = 1.0f / sx;
  std::vector<int64_t> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    xq[i] = std::clamp(int64_t(round_half_even(double(float(x[i]) * inv))) + zx, int64_t(0), int64_t(qmax));
  std::vector<double> y(size_t(rows * n));
  double max_sw = 0;
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0;
    for (int64_t q = 0; q < k; ++q) amax = std::max(amax, std::abs(w[size_t(j * k + q)]));
    const float sw = std::max(amax / 127.5f, std::numeric_limits<float>::epsilon());
    max_sw = std::max(max_sw, double(sw));
    const float winv = 1.0f / sw;
    std::vector<int64_t> wq(static_cast<size_t>(k));
    for (int64_t q = 0; q < k; ++q)
      wq[size_t(q)] = std::clamp(int64_t(round_half_even(double(w[size_t(j * k + q)] * winv))), int64_t(-128), int64_t(127));
    for (int64_t i = 0; i < rows; ++i) {
      int64_t acc = 0;
      for (int64_t q = 0; q < k; ++q) acc += (xq[size_t(i * k + q)] - zx) * wq[size_t(q)];
      double v = double(sx) * double(sw) * double(acc) + double(b[size_t(j)]);
      y[size_t(i * n + j)] = relu ? std::max(v, 0.0) : v;
    }
  }
  *step = double(sx) * max_sw;
  return y;
}

// A single dynamic linear layer: the kernel's float32 result equals the reference up to float32
// rounding of the accumulator's scaling (the integer part is exact).
TEST(QuantDynamic, SingleLinearMatchesPyTorchsDynamicFormula) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  for (bool reduce_range : {true, false}) {
    for (bool relu : {false, true}) {
      Mlp m = random_mlp(g, {96, 40});
      ExportOptions opts;
      opts.input_names = {"x"};
      opts.parameters = {{"w", m.w[0]}, {"b", m.b[0]}};
      ExportedProgram ep = export_program(
          [&](const std::vector<Tensor>& in) {
            Tensor h = linear(in[0], m.w[0], m.b[0]);
            return std::vector<Tensor>{relu ? tessera::relu(h) : h};
          },
          {zeros({8, 96})}, opts);
      DynamicOptions o;
      o.reduce_range = reduce_range;
      ExportedProgram q = quantize_dynamic(ep, o);
      EXPECT_EQ(calls_of(q, "_quantized_linear_dynamic").size(), 1u) << q.graph_string();
      EXPECT_EQ(calls_of(q, "linear").size() + calls_of(q, "relu").size(), 0u) << q.graph_string();
      EXPECT_EQ(q.weights.count("w"), 0u) << "the float weight stays in the program";
      Tensor x = normal_tensor(g, {8, 96}, 0.3f, 2.0f);
      std::vector<float> got = values_of(q.run({x})[0]);
      const std::vector<float> xf = values_of(x);
      double step = 0;
      std::vector<double> want =
          dynamic_linear(std::vector<double>(xf.begin(), xf.end()), 8, m.w[0], m.b[0], relu, reduce_range ? 127 : 255, &step);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 * (std::abs(want[i]) + 1.0)) << "element " << i << " relu " << relu
                                                                        << " reduce_range " << reduce_range;
    }
  }
}

// A three-layer MLP (relu fused, one layer without bias, symbolic batch): layer by layer the
// reference takes the kernel's own float32 activations as its input (rounding in the float32
// output can move an element across a quantisation boundary in the next layer's input), and the
// whole result is close to the float32 program's.
TEST(QuantDynamic, MlpMatchesTheReferenceAndTheFloatProgram) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  Mlp m = random_mlp(g, {64, 128, 96, 10});
  ExportedProgram ep = export_mlp(m);
  ExportedProgram q = quantize_dynamic(ep);
  EXPECT_EQ(calls_of(q, "_quantized_linear_dynamic").size(), 3u) << q.graph_string();
  EXPECT_EQ(calls_of(q, "_quantized_linear_prepack").size(), 3u) << q.graph_string();
  EXPECT_EQ(calls_of(q, "linear").size() + calls_of(q, "relu").size(), 0u) << q.graph_string();
  for (int64_t batch : {1, 7, 50}) {
    Tensor x = normal_tensor(g, {batch, 64}, 0, 1.5f);
    std::vector<float> got = values_of(q.run({x})[0]), want_f32 = values_of(ep.run({x})[0]);
    // The same program cut after each layer gives that layer's float32 activations.
    Tensor h = x;
    for (size_t l = 0; l < m.w.size(); ++l) {
      const bool relu = l + 1 < m.w.size();
      ExportOptions opts;
      opts.input_names = {"h"};
      opts.parameters = {{"w", m.w[l]}};
      if (m.b[l].defined()) opts.parameters["b"] = m.b[l];
      ExportedProgram layer = quantize_dynamic(export_program(
          [&](const std::vector<Tensor>& in) {
            Tensor y = m.b[l].defined() ? linear(in[0], m.w[l], m.b[l]) : linear(in[0], m.w[l]);
            return std::vector<Tensor>{relu ? tessera::relu(y) : y};
          },
          {h}, opts));
      Tensor next = layer.run({h})[0];
      const std::vector<float> hv = values_of(h), nv = values_of(next);
      double step = 0;
      std::vector<double> want =
          dynamic_linear(std::vector<double>(hv.begin(), hv.end()), batch, m.w[l], m.b[l], relu, 127, &step);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(nv[i], want[i], 1e-5 * (std::abs(want[i]) + 1.0)) << "layer " << l << " element " << i;
      h = next;
    }
    EXPECT_EQ(values_of(h), got) << "the whole program and its layers one by one differ";
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      num += (double(got[i]) - want_f32[i]) * (double(got[i]) - want_f32[i]);
      den += double(want_f32[i]) * want_f32[i];
    }
    // 7-bit activations and 8-bit weights over three layers: a few percent; a wrong scale or zero
    // point is far above.
    EXPECT_LT(std::sqrt(num / den), 0.08) << "batch " << batch;
  }
}

TEST(QuantDynamic, SavesLoadsAndFoldsThePackingAfterLoading) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  Mlp m = random_mlp(g, {32, 48, 16});
  ExportedProgram q = quantize_dynamic(export_mlp(m));
  const std::string path =
      (std::filesystem::temp_directory_path() / ("quant_dynamic_" + std::to_string(getpid()) + ".tsr")).string();
  save(q, path);
  ExportedProgram back = load_program(path);
  std::filesystem::remove(path);
  EXPECT_EQ(back.graph_string(), q.graph_string());
  Tensor x = normal_tensor(g, {5, 32}, 0, 1);
  const std::vector<float> want = values_of(q.run({x})[0]);
  ASSERT_EQ(values_of(back.run({x})[0]), want);
  EXPECT_EQ(lower_to_int8(back), 2);
  EXPECT_EQ(calls_of(back, "_quantized_linear_prepack").size(), 0u) << back.graph_string();
  EXPECT_EQ(calls_of(back, "_quantized_linear_dynamic").size(), 2u) << back.graph_string();
  for (const auto& [name, t] : back.weights) EXPECT_EQ(name.find("_int8"), std::string::npos) << name;
  EXPECT_EQ(values_of(back.run({x})[0]), want);
}

TEST(QuantDynamic, NonFiniteInputIsAOneLineErrorAndTheProgramKeepsWorking) {
  std::mt19937_64 g(fresh_seed());
  Mlp m = random_mlp(g, {16, 8});
  ExportedProgram q = quantize_dynamic(export_mlp(m));
  std::vector<float> bad(32, 1.0f);
  bad[5] = std::numeric_limits<float>::infinity();
  try {
    q.run({tensor(bad, {2, 16})});
    ADD_FAILURE() << "no error for an infinite input";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("non-finite"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  Tensor x = normal_tensor(g, {2, 16}, 0, 1);
  EXPECT_EQ(q.run({x})[0].sizes(), (std::vector<int64_t>{2, 8}));
}

TEST(QuantDynamic, LeavesLinearsWithComputedWeightsAlone) {
  ExportOptions opts;
  opts.input_names = {"x", "w"};
  ExportedProgram ep = export_program(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{linear(in[0], in[1])}; },
      {zeros({2, 4}), zeros({3, 4})}, opts);
  ExportedProgram q = quantize_dynamic(ep);
  EXPECT_EQ(q.graph_string(), ep.graph_string());
}

}  // namespace
}  // namespace tessera
