// The int8 conv2d: the kernel (_quantized_conv2d) and the lowering of dequantize -> conv2d (-> add)
// (-> relu) -> quantize (Note [Int8 conv2d lowering]) against a reference integer representation
// written here: int32 accumulation of (x_q - zp_x) * w_q over the window (padding is real zero),
// s_x * s_w[o] * acc + bias[o], plus (other_q - zp_other) * s_other, relu, requantised with round
// half to even and saturated to uint8. Every element within one output step, nine in ten exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "quant_test_util.h"
#include "tessera/compiler/export.h"
#include "tessera/compiler/quantize.h"
#include "tessera/dispatcher.h"
#include "tessera/quantization.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using compiler::ExportedProgram;
using compiler::Node;
using compiler::NodeKind;
using namespace tessera::quant_test;

struct Geometry {
  int64_t n, c, h, w, oc, kh, kw, stride, pad, dil, groups;
  int64_t oh() const { return (h + 2 * pad - dil * (kh - 1) - 1) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - dil * (kw - 1) - 1) / stride + 1; }
};

struct QParams {
  double scale;
  int64_t zp;
};

// The reference: uint8 output representation [n, oc, oh, ow].
std::vector<int64_t> conv_reference(const Geometry& g, const std::vector<int64_t>& xq, QParams x,
                                    const std::vector<int64_t>& wq, const std::vector<float>& sw,
                                    const std::vector<float>& bias, const std::vector<int64_t>* oq, QParams o,
                                    QParams out, bool relu) {
  const int64_t oh = g.oh(), ow = g.ow(), cg = g.c / g.groups, og = g.oc / g.groups;
  std::vector<int64_t> y(size_t(g.n * g.oc * oh * ow));
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oc = 0; oc < g.oc; ++oc)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t acc = 0;
          const int64_t grp = oc / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t u = 0; u < g.kh; ++u)
              for (int64_t v = 0; v < g.kw; ++v) {
                const int64_t hi = i * g.stride - g.pad + u * g.dil, wi = j * g.stride - g.pad + v * g.dil;
                if (hi < 0 || hi >= g.h || wi < 0 || wi >= g.w) continue;
                const int64_t c = grp * cg + ci;
                acc += (xq[size_t(((b * g.c + c) * g.h + hi) * g.w + wi)] - x.zp) *
                       wq[size_t(((oc * cg + ci) * g.kh + u) * g.kw + v)];
              }
          const size_t at = size_t(((b * g.oc + oc) * oh + i) * ow + j);
          double r = x.scale * double(sw[size_t(oc)]) * double(acc) + (bias.empty() ? 0.0 : double(bias[size_t(oc)]));
          if (oq) r += double((*oq)[at] - o.zp) * o.scale;
          if (relu) r = std::max(r, 0.0);
          y[at] = std::clamp(int64_t(round_half_even(r / out.scale)) + out.zp, int64_t(0), int64_t(255));
        }
  return y;
}

// Fails on an element more than one step away; returns how many differ at all.
int64_t count_different(const std::vector<int64_t>& want, const std::vector<double>& got_steps) {
  EXPECT_EQ(want.size(), got_steps.size());
  int64_t different = 0;
  for (size_t i = 0; i < want.size() && i < got_steps.size(); ++i) {
    const double d = std::abs(double(want[i]) - got_steps[i]);
    if (d > 1e-3) ++different;
    EXPECT_LE(d, 1.0 + 1e-3) << "element " << i << ": " << want[i] << " vs " << got_steps[i];
    if (d > 1.0 + 1e-3) break;
  }
  return different;
}

template <typename T>
std::vector<T> random_ints(std::mt19937_64& g, size_t n, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = T(d(g));
  return v;
}

TEST(QuantizedConv2d, KernelMatchesTheIntegerReferenceWithAndWithoutAddAndRelu) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Dispatcher& d = Dispatcher::instance();
  for (const Geometry& g : {Geometry{2, 8, 9, 7, 16, 3, 3, 1, 1, 1, 1}, Geometry{1, 6, 10, 10, 4, 3, 2, 2, 0, 1, 2},
                            Geometry{3, 4, 8, 8, 8, 1, 1, 1, 0, 1, 1}, Geometry{1, 16, 12, 12, 16, 3, 3, 1, 2, 2, 4}}) {
    const int64_t cg = g.c / g.groups;
    const std::vector<uint8_t> x8 = random_ints<uint8_t>(rng, size_t(g.n * g.c * g.h * g.w), 0, 255);
    const std::vector<int8_t> w8 = random_ints<int8_t>(rng, size_t(g.oc * cg * g.kh * g.kw), -127, 127);
    const std::vector<uint8_t> o8 = random_ints<uint8_t>(rng, size_t(g.n * g.oc * g.oh() * g.ow()), 0, 255);
    std::uniform_real_distribution<float> sd(0.002f, 0.01f), bd(-2.f, 2.f);
    std::vector<float> sw(size_t(g.oc)), bias(size_t(g.oc));
    for (float& s : sw) s = sd(rng);
    for (float& b : bias) b = bd(rng);
    const QParams x{0.02, int64_t(rng() % 256)}, o{0.05, int64_t(rng() % 256)}, out{0.08, int64_t(rng() % 256)};
    Tensor xt = tensor(x8, {g.n, g.c, g.h, g.w}), wt = tensor(w8, {g.oc, cg, g.kh, g.kw});
    Tensor swt = tensor(sw, {g.oc}), bt = tensor(bias, {g.oc}), ot = tensor(o8, {g.n, g.oc, g.oh(), g.ow()});
    const std::vector<int64_t> xq(x8.begin(), x8.end()), wq(w8.begin(), w8.end()), oq(o8.begin(), o8.end());
    for (bool with_add : {false, true})
      for (bool relu : {false, true}) {
        SCOPED_TRACE("add " + std::to_string(with_add) + " relu " + std::to_string(relu) + " groups " +
                     std::to_string(g.groups));
        Stack args = {xt, wt, swt, bt, with_add ? Value(ot) : Value(std::monostate{}), std::vector<int64_t>{g.stride, g.stride},
                      std::vector<int64_t>{g.pad, g.pad}, std::vector<int64_t>{g.dil, g.dil}, g.groups, x.scale, x.zp,
                      o.scale, o.zp, out.scale, out.zp, relu, kUInt8};
        Tensor y = std::get<Tensor>(d.call_boxed(d.op("_quantized_conv2d"), args).at(0));
        ASSERT_EQ(y.dtype(), kUInt8);
        ASSERT_EQ(y.sizes(), (std::vector<int64_t>{g.n, g.oc, g.oh(), g.ow()}));
        const std::vector<int64_t> want = conv_reference(g, xq, x, wq, sw, bias, with_add ? &oq : nullptr, o, out, relu);
        Tensor yc = y.contiguous();
        std::vector<double> got(yc.data_ptr<uint8_t>(), yc.data_ptr<uint8_t>() + yc.numel());
        EXPECT_LE(count_different(want, got), int64_t(want.size()) / 10);
        // quint8: the same representation, dequantized.
        args.back() = kQUInt8;
        Tensor yf = std::get<Tensor>(d.call_boxed(d.op("_quantized_conv2d"), args).at(0)).contiguous();
        ASSERT_EQ(yf.dtype(), kFloat32);
        for (int64_t i = 0; i < yf.numel(); ++i)
          ASSERT_EQ(yf.data_ptr<float>()[i], float(double(got[size_t(i)]) - double(out.zp)) * float(out.scale));
      }
  }
}

// Note [Int8 conv weights]: the reordered weights are kept under the weight's storage version; a
// write to the weight must reach the next call.
TEST(QuantizedConv2d, WeightsWrittenInPlaceAreReorderedAgain) {
  std::mt19937_64 rng(fresh_seed());
  Dispatcher& d = Dispatcher::instance();
  const Geometry g{1, 16, 8, 8, 32, 3, 3, 1, 1, 1, 1};
  const std::vector<uint8_t> x8 = random_ints<uint8_t>(rng, size_t(g.c * g.h * g.w), 0, 255);
  std::vector<int8_t> w8 = random_ints<int8_t>(rng, size_t(g.oc * g.c * g.kh * g.kw), -127, 127);
  const std::vector<float> sw(size_t(g.oc), 0.004f);
  const QParams x{0.02, 100}, out{0.5, 128};
  Tensor xt = tensor(x8, {g.n, g.c, g.h, g.w}), wt = tensor(w8, {g.oc, g.c, g.kh, g.kw}), swt = tensor(sw, {g.oc});
  auto run = [&] {
    Stack args = {xt, wt, swt, std::monostate{}, std::monostate{}, std::vector<int64_t>{1, 1}, std::vector<int64_t>{1, 1},
                  std::vector<int64_t>{1, 1}, int64_t(1), x.scale, x.zp, 1.0, int64_t(0), out.scale, out.zp, false, kUInt8};
    Tensor y = std::get<Tensor>(d.call_boxed(d.op("_quantized_conv2d"), args).at(0)).contiguous();
    return std::vector<double>(y.data_ptr<uint8_t>(), y.data_ptr<uint8_t>() + y.numel());
  };
  const std::vector<int64_t> xq(x8.begin(), x8.end());
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::vector<int64_t> wq(w8.begin(), w8.end());
    const std::vector<int64_t> want = conv_reference(g, xq, x, wq, sw, {}, nullptr, x, out, false);
    for (int call = 0; call < 2; ++call) EXPECT_LE(count_different(want, run()), int64_t(want.size()) / 10);
    // Negate every weight in place: the results move far beyond one step.
    int8_t* p = wt.data_ptr<int8_t>();
    for (size_t i = 0; i < w8.size(); ++i) p[i] = w8[i] = int8_t(-w8[i]);
  }
}

TEST(QuantizedConv2d, BadInputsGiveOneLineErrors) {
  Dispatcher& d = Dispatcher::instance();
  auto msg = [&](Stack args) {
    try {
      d.call_boxed(d.op("_quantized_conv2d"), args);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Tensor x = zeros({1, 4, 5, 5}, kUInt8), w = zeros({2, 4, 3, 3}, kInt8), s = ones({2});
  auto args = [&](Value xv, Value wv, Value other, double out_scale) {
    return Stack{xv, wv, s, std::monostate{}, other, std::vector<int64_t>{1, 1}, std::vector<int64_t>{0, 0},
                 std::vector<int64_t>{1, 1}, int64_t(1), 0.1, int64_t(0), 0.1, int64_t(0), out_scale, int64_t(0), false,
                 kUInt8};
  };
  EXPECT_NE(msg(args(zeros({1, 4, 5, 5}, kInt32), w, std::monostate{}, 0.1)).find("input must be"), std::string::npos);
  EXPECT_NE(msg(args(x, zeros({2, 4, 3, 3}), std::monostate{}, 0.1)).find("weight must be int8"), std::string::npos);
  EXPECT_NE(msg(args(x, w, zeros({1, 2, 2, 2}, kUInt8), 0.1)).find("other must be"), std::string::npos);
  EXPECT_NE(msg(args(x, w, std::monostate{}, -1.0)).find("output_scale"), std::string::npos);
  // The process keeps working.
  EXPECT_EQ(std::get<Tensor>(d.call_boxed(d.op("_quantized_conv2d"), args(x, w, std::monostate{}, 0.1)).at(0)).sizes(),
            (std::vector<int64_t>{1, 2, 3, 3}));
}

// ---- the lowering

// The converted program's quantize_per_tensor parameters for the value `v` it quantizes.
QParams params_of(const ExportedProgram& c, compiler::ValueId v) {
  for (const Node* q : calls_of(c, "quantize_per_tensor"))
    if (q->args[0].values[0] == v) return {std::get<double>(q->args[1].constant), std::get<int64_t>(q->args[2].constant)};
  ADD_FAILURE() << "no quantize of %" << v << " in\n" << c.graph_string();
  return {1, 0};
}

// conv2d (+ bias) (+ skip) (+ relu), quantized with x86, calibrated, converted and lowered; the
// lowered program against the reference representation and the converted program.
void check_lowered_conv(const Geometry& g, bool with_bias, bool with_add, bool relu, std::mt19937_64& rng) {
  SCOPED_TRACE("bias " + std::to_string(with_bias) + " add " + std::to_string(with_add) + " relu " +
               std::to_string(relu) + " groups " + std::to_string(g.groups));
  const int64_t cg = g.c / g.groups;
  const float r = 1.0f / std::sqrt(float(cg * g.kh * g.kw));
  Tensor w = uniform_tensor(rng, {g.oc, cg, g.kh, g.kw}, -r, r), b = uniform_tensor(rng, {g.oc}, -0.2f, 0.2f);
  ExportOptions opts;
  opts.input_names = {"x", "skip"};
  opts.parameters = {{"conv.weight", w}};
  if (with_bias) opts.parameters["conv.bias"] = b;
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 64}}}, {{0, Dim{"batch", 1, 64}}}};
  const std::vector<int64_t> stride{g.stride, g.stride}, pad{g.pad, g.pad}, dil{g.dil, g.dil};
  ExportedProgram ep = export_program(
      [&](const std::vector<Tensor>& in) {
        Tensor y = conv2d(in[0], w, with_bias ? std::optional<Tensor>(b) : std::nullopt, stride, pad, dil, g.groups);
        if (with_add) y = add(y, in[1]);
        if (relu) y = tessera::relu(y);
        return std::vector<Tensor>{y};
      },
      {zeros({2, g.c, g.h, g.w}), zeros({2, g.oc, g.oh(), g.ow()})}, opts);
  auto quantizer = quantization::x86_quantizer({quantization::ObserverKind::MinMax});
  quantization::PreparedProgram p = quantization::prepare(ep, *quantizer);
  for (int i = 0; i < 3; ++i)
    quantization::calibrate(p, {uniform_tensor(rng, {4, g.c, g.h, g.w}, -2, 2), uniform_tensor(rng, {4, g.oc, g.oh(), g.ow()}, -1, 1)});
  ExportedProgram c = quantization::convert(p);
  ExportedProgram lowered = c;
  ASSERT_EQ(quantization::lower_to_int8(lowered), 1) << c.graph_string();
  ASSERT_EQ(calls_of(lowered, "_quantized_conv2d").size(), 1u) << lowered.graph_string();
  for (const char* op : {"conv2d", "add", "relu", "quantize_per_tensor", "quantize_per_channel", "dequantize"})
    EXPECT_TRUE(calls_of(lowered, op).empty()) << op << "\n" << lowered.graph_string();

  const QParams xp = params_of(c, ep.signature.inputs[0].value);
  const QParams op = with_add ? params_of(c, ep.signature.inputs[1].value) : QParams{1, 0};
  const Node* out_q = nullptr;
  for (const Node* q : calls_of(c, "quantize_per_tensor"))
    if (q->args[0].values[0] != ep.signature.inputs[0].value && q->args[0].values[0] != ep.signature.inputs[1].value) out_q = q;
  ASSERT_NE(out_q, nullptr);
  const QParams outp{std::get<double>(out_q->args[1].constant), std::get<int64_t>(out_q->args[2].constant)};
  // Weights per output channel symmetric: max|w_o| / 127.5.
  const std::vector<float> wv = values_of(w);
  const int64_t per = cg * g.kh * g.kw;
  std::vector<float> sw(size_t(g.oc));
  std::vector<int64_t> wq(wv.size());
  for (int64_t o = 0; o < g.oc; ++o) {
    float amax = 0;
    for (int64_t i = 0; i < per; ++i) amax = std::max(amax, std::abs(wv[size_t(o * per + i)]));
    sw[size_t(o)] = std::max(amax / 127.5f, std::numeric_limits<float>::epsilon());
    for (int64_t i = 0; i < per; ++i) wq[size_t(o * per + i)] = quantize_value(wv[size_t(o * per + i)], sw[size_t(o)], 0, -128, 127);
  }
  for (int64_t batch : {1, 3}) {
    Geometry gb = g;
    gb.n = batch;
    Tensor x = uniform_tensor(rng, {batch, g.c, g.h, g.w}, -2, 2), skip = uniform_tensor(rng, {batch, g.oc, g.oh(), g.ow()}, -1, 1);
    std::vector<int64_t> xq, sq;
    for (float v : values_of(x)) xq.push_back(quantize_value(v, xp.scale, xp.zp, 0, 255));
    for (float v : values_of(skip)) sq.push_back(quantize_value(v, op.scale, op.zp, 0, 255));
    const std::vector<int64_t> want = conv_reference(gb, xq, xp, wq, sw, with_bias ? values_of(b) : std::vector<float>{},
                                                     with_add ? &sq : nullptr, op, outp, relu);
    auto steps = [&](const Tensor& y) {
      std::vector<double> s;
      for (float v : values_of(y)) s.push_back(double(v) / outp.scale + double(outp.zp));
      return s;
    };
    const std::vector<double> low = steps(lowered.run({x, skip})[0]), conv = steps(c.run({x, skip})[0]);
    EXPECT_LE(count_different(want, low), int64_t(want.size()) / 10) << "batch " << batch;
    EXPECT_LE(count_different(want, conv), int64_t(want.size()) / 10) << "batch " << batch << " (converted)";
  }
}

TEST(QuantLowering, Conv2dLoweredAgreesWithTheReferenceWithAndWithoutReluAndAdd) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Geometry g{2, 8, 10, 9, 12, 3, 3, 1, 1, 1, 1};
  for (bool with_add : {false, true})
    for (bool relu : {false, true}) check_lowered_conv(g, true, with_add, relu, rng);
  check_lowered_conv(Geometry{2, 8, 11, 11, 8, 3, 3, 2, 1, 1, 2}, false, false, true, rng);
}

// conv -> relu -> conv -> relu: the first conv writes the uint8 representation the second reads
// (Note [Int8 conv2d lowering]); the second writes the float32 output.
TEST(QuantLowering, ChainedConvsPassTheirResultAlong) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Tensor w1 = uniform_tensor(rng, {6, 3, 3, 3}, -0.3f, 0.3f), w2 = uniform_tensor(rng, {4, 6, 3, 3}, -0.2f, 0.2f);
  ExportOptions opts;
  opts.input_names = {"x"};
  opts.parameters = {{"c1.weight", w1}, {"c2.weight", w2}};
  ExportedProgram ep = export_program(
      [&](const std::vector<Tensor>& in) {
        Tensor h = relu(conv2d(in[0], w1, std::nullopt, {1, 1}, {1, 1}));
        return std::vector<Tensor>{relu(conv2d(h, w2, std::nullopt, {1, 1}, {1, 1}))};
      },
      {zeros({2, 3, 8, 8})}, opts);
  auto quantizer = quantization::x86_quantizer({quantization::ObserverKind::MinMax});
  quantization::PreparedProgram p = quantization::prepare(ep, *quantizer);
  quantization::calibrate(p, {uniform_tensor(rng, {2, 3, 8, 8}, -1, 1)});
  ExportedProgram c = quantization::convert(p);
  ExportedProgram lowered = c;
  ASSERT_EQ(quantization::lower_to_int8(lowered), 2);
  EXPECT_TRUE(calls_of(lowered, "conv2d").empty()) << lowered.graph_string();
  EXPECT_TRUE(calls_of(lowered, "quantize_per_tensor").empty()) << lowered.graph_string();
  const auto kernels = calls_of(lowered, "_quantized_conv2d");
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(lowered.graph.type(kernels[0]->outputs[0]).dtype, kUInt8) << lowered.graph_string();
  EXPECT_EQ(kernels[1]->args[0].values[0], kernels[0]->outputs[0]) << lowered.graph_string();
  EXPECT_EQ(lowered.graph.type(kernels[1]->outputs[0]).dtype, kFloat32) << lowered.graph_string();
  Tensor x = uniform_tensor(rng, {2, 3, 8, 8}, -1, 1);
  const std::vector<float> want = values_of(c.run({x})[0]), got = values_of(lowered.run({x})[0]);
  const Node* last = calls_of(c, "quantize_per_tensor").back();
  const double step = std::get<double>(last->args[1].constant);
  int64_t different = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    // Two requantisations: at most one step each, carried through the second layer.
    ASSERT_LE(std::abs(want[i] - got[i]), 4 * step + 1e-6) << "element " << i;
    different += std::abs(want[i] - got[i]) > 1e-6;
  }
  EXPECT_LE(different, int64_t(want.size()) / 5);
}

}  // namespace
}  // namespace tessera
