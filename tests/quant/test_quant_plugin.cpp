// Quantizer plugins: the out-of-tree sample (samples/keep_ends_quantizer, plain C against the SDK)
// loaded from its manifest by discovery, annotating through TESSERA_EXT_QUANTIZER_ANNOTATE, alone
// and composed with the built-in x86 quantizer; and the errors for a plugin that is missing or of
// another kind.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "quant_test_util.h"
#include "tessera/compiler/export.h"
#include "tessera/compiler/quantize.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using compiler::ExportedProgram;
using compiler::Node;
using compiler::NodeKind;
using quant_test::uniform_tensor;

// Four linear layers with relu between them, 16 wide.
ExportedProgram export_four_layers(std::mt19937_64& g) {
  std::vector<Tensor> w, b;
  ExportOptions opts;
  opts.input_names = {"x"};
  for (int l = 0; l < 4; ++l) {
    w.push_back(uniform_tensor(g, {16, 16}, -0.25f, 0.25f));
    b.push_back(uniform_tensor(g, {16}, -0.1f, 0.1f));
    opts.parameters["fc" + std::to_string(l) + ".weight"] = w.back();
    opts.parameters["fc" + std::to_string(l) + ".bias"] = b.back();
  }
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 1024}}}};
  return export_program(
      [&](const std::vector<Tensor>& in) {
        Tensor h = in[0];
        for (int l = 0; l < 4; ++l) {
          h = linear(h, w[size_t(l)], b[size_t(l)]);
          if (l < 3) h = relu(h);
        }
        return std::vector<Tensor>{h};
      },
      {zeros({4, 16})}, opts);
}

// For each linear of `ep` in order: whether its weight input is a dequantize (quantized).
std::vector<bool> quantized_linears(const ExportedProgram& ep) {
  std::vector<int32_t> producer(ep.graph.values.size(), -1);
  for (size_t i = 0; i < ep.graph.nodes.size(); ++i)
    for (compiler::ValueId v : ep.graph.nodes[i].outputs) producer[size_t(v)] = int32_t(i);
  std::vector<bool> r;
  for (const Node& n : ep.graph.nodes) {
    if (n.kind != NodeKind::Call || n.target.rfind("linear", 0) != 0) continue;
    const int32_t p = producer[size_t(n.args[1].values[0])];
    r.push_back(p >= 0 && ep.graph.nodes[size_t(p)].target == "dequantize");
  }
  return r;
}

TEST(QuantPlugin, SampleQuantizerLoadsFromItsManifestAndKeepsTheEndsInFloat) {
  std::mt19937_64 g(std::random_device{}());
  ExportedProgram ep = export_four_layers(g);
  auto q = quantization::plugin_quantizer("keep_ends_quantizer");
  EXPECT_EQ(q->name(), "keep_ends_quantizer");
  quantization::PreparedProgram p = quantization::prepare(ep, *q);
  for (int i = 0; i < 2; ++i) quantization::calibrate(p, {uniform_tensor(g, {64, 16})});
  ExportedProgram c = quantization::convert(p);
  EXPECT_EQ(quantized_linears(c), (std::vector<bool>{false, true, true, false})) << c.graph_string();
  ExportedProgram lowered = c;
  EXPECT_EQ(quantization::lower_to_int8(lowered), 2) << lowered.graph_string();
  Tensor x = uniform_tensor(g, {8, 16});
  Tensor want = ep.run({x})[0], got = lowered.run({x})[0];
  EXPECT_TRUE(allclose(want, got, 0.1, 0.05));
}

TEST(QuantPlugin, ComposesWithX86WhichQuantizesWhatThePluginLeft) {
  std::mt19937_64 g(std::random_device{}());
  ExportedProgram ep = export_four_layers(g);
  auto plugin = quantization::plugin_quantizer("keep_ends_quantizer");
  auto x86 = quantization::x86_quantizer({quantization::ObserverKind::MinMax});
  // The plugin first: it takes every linear (the ends stay float); x86 finds nothing left to take.
  quantization::PreparedProgram p = quantization::prepare(ep, {plugin.get(), x86.get()});
  quantization::calibrate(p, {uniform_tensor(g, {32, 16})});
  EXPECT_EQ(quantized_linears(quantization::convert(p)), (std::vector<bool>{false, true, true, false}));
  // x86 first: it takes every linear; the plugin skips annotated nodes (is_annotated) and changes
  // nothing, so all four are quantized.
  quantization::PreparedProgram p2 = quantization::prepare(ep, {x86.get(), plugin.get()});
  quantization::calibrate(p2, {uniform_tensor(g, {32, 16})});
  EXPECT_EQ(quantized_linears(quantization::convert(p2)), (std::vector<bool>{true, true, true, true}));
}

// A plugin that gives one edge a second, different spec is refused, naming the edge and both specs
// (it used to replace the first silently, and nothing was lowered). Its own suite: the out-of-tree
// stage runs QuantPlugin.* with only the sample quantizer installed.
TEST(QuantPluginFaults, TwoDifferentSpecsForOneEdgeAreRefused) {
  std::mt19937_64 g(11);
  ExportedProgram ep = export_four_layers(g);
  try {
    quantization::prepare(ep, *quantization::plugin_quantizer("two_specs_quantizer"));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("quantizer plugin 'two_specs_quantizer' failed to annotate"), std::string::npos) << msg;
    EXPECT_NE(msg.find("already has the spec qu8 per_tensor_affine min_max; a second, different spec (qi8 "
                       "per_tensor_symmetric min_max) is refused"),
              std::string::npos)
        << msg;
  }
}

TEST(QuantPlugin, MissingPluginOrOtherKindIsAOneLineErrorNamingIt) {
  try {
    quantization::plugin_quantizer("no_such_quantizer");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'no_such_quantizer'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("keep_ends_quantizer"), std::string::npos) << msg;  // the quantizers found
  }
  try {
    quantization::plugin_quantizer("cpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a backend plugin, not a quantizer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
