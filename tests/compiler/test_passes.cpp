// Passes over the Export IR (compiler/src/passes) and the verifier that follows each.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/compiler/passes.h"
#include "tessera/version.h"
#include "tessera/tessera.h"

namespace {

using tessera::Dim;
using tessera::ExportOptions;
using tessera::Tensor;
using namespace tessera::compiler;

std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(tessera::Device("cpu")).to(tessera::DType::Float64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const tessera::Error& e) {
    return e.what();
  }
  return "";
}

ExportOptions batch_options() {
  ExportOptions opts;
  opts.input_names = {"x"};
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 32}}}};
  return opts;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(Passes, DeadCodeEliminationDropsUnusedCalls) {
  ExportedProgram ep = tessera::export_program(
      [](const std::vector<Tensor>& in) {
        Tensor unused = tessera::exp(in[0]);
        (void)unused;
        return std::vector<Tensor>{tessera::relu(in[0])};
      },
      {tessera::randn({2, 3})}, batch_options());
  EXPECT_EQ(count(ep.graph_string(), "= exp("), 1);
  EXPECT_TRUE(eliminate_dead_code(ep));
  verify(ep);
  EXPECT_EQ(ep.graph_string(),
            "graph(%x: f32[batch, 3] cpu):\n"
            "  %2: f32[batch, 3] cpu = relu(%x)\n"
            "  return (%2)\n"
            "ranges: batch in [1, 32]\n");
  EXPECT_FALSE(eliminate_dead_code(ep));
}

TEST(Passes, CommonSubexpressionEliminationMergesEqualCalls) {
  auto fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tessera::exp(in[0]) * tessera::exp(in[0]) + (in[0] * 2.0) + (in[0] * 2)};
  };
  ExportedProgram ep = tessera::export_program(fn, {tessera::randn({2, 3})}, batch_options());
  EXPECT_EQ(count(ep.graph_string(), "= exp("), 2);
  EXPECT_TRUE(eliminate_common_subexpressions(ep));
  eliminate_dead_code(ep);
  verify(ep);
  const std::string text = ep.graph_string();
  EXPECT_EQ(count(text, "= exp("), 1) << text;
  EXPECT_EQ(count(text, "mul.Tensor(%x, 2.0)"), 1) << text;  // 2.0 and 2 differ: int and float
  EXPECT_EQ(count(text, "mul.Tensor(%x, 2)"), 1) << text;
  Tensor x = tessera::randn({4, 3});
  std::vector<double> got = values(ep.run({x})[0]), xs = values(x);
  for (size_t i = 0; i < xs.size(); ++i) {
    float e = std::exp(float(xs[i]));
    EXPECT_NEAR(got[i], double(e * e + float(xs[i]) * 2.0f + float(xs[i]) * 2.0f), 1e-4 * std::max(1.0, got[i]));
  }
}

TEST(Passes, ConstantFoldingComputesWeightOnlySubgraphsOnce) {
  Tensor w = tessera::randn({3});
  ExportOptions opts = batch_options();
  opts.parameters["w"] = w;
  ExportedProgram ep = tessera::export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + tessera::exp(w) * 3.0}; },
      {tessera::randn({2, 3})}, opts);
  EXPECT_TRUE(fold_constants(ep));
  eliminate_dead_code(ep);
  verify(ep);
  EXPECT_EQ(ep.graph_string(),
            "graph(%x: f32[batch, 3] cpu, %w: f32[3] cpu parameter, %folded_1: f32[3] cpu constant):\n"
            "  %4: f32[batch, 3] cpu = add.Tensor(%x, %folded_1, 1)\n"
            "  return (%4)\n"
            "ranges: batch in [1, 32]\n");
  std::vector<double> ws = values(w), folded = values(ep.weights.at("folded_1"));
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(folded[i], std::exp(ws[i]) * 3.0, 1e-5 * folded[i]);
  Tensor x = tessera::randn({5, 3});
  std::vector<double> got = values(ep.run({x})[0]), xs = values(x);
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(got[i], xs[i] + std::exp(ws[i % 3]) * 3.0, 1e-4);
}

TEST(Passes, DecompositionReplacesCompositesByCoreOps) {
  Tensor w = tessera::randn({4, 3}), b = tessera::randn({4});
  ExportOptions opts = batch_options();
  opts.parameters = {{"fc.weight", w}, {"fc.bias", b}};
  ExportedProgram ep = tessera::export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::linear(in[0], w, b)}; },
      {tessera::randn({2, 3})}, opts);
  EXPECT_TRUE(decompose(ep));
  verify(ep);
  EXPECT_EQ(ep.graph_string(),
            "graph(%x: f32[batch, 3] cpu, %fc.weight: f32[4, 3] cpu parameter, %fc.bias: f32[4] cpu parameter):\n"
            "  %4: f32[3, 4] cpu = permute(%fc.weight, [1, 0])\n"
            "  %5: f32[batch, 4] cpu = matmul(%x, %4)\n"
            "  %6: f32[batch, 4] cpu = add.Tensor(%5, %fc.bias, 1)\n"
            "  return (%6)\n"
            "ranges: batch in [1, 32]\n");
  Tensor x = tessera::randn({3, 3});
  std::vector<double> got = values(ep.run({x})[0]), xs = values(x), ws = values(w), bs = values(b);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t o = 0; o < 4; ++o) {
      double acc = bs[size_t(o)];
      for (int64_t k = 0; k < 3; ++k) acc += xs[size_t(i * 3 + k)] * ws[size_t(o * 3 + k)];
      EXPECT_NEAR(got[size_t(i * 4 + o)], acc, 1e-5);
    }
}

TEST(Passes, ShapePropagationRecomputesTypesFromTheInputs) {
  ExportedProgram ep = tessera::export_program(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::sum(tessera::exp(in[0]), {1})}; },
      {tessera::randn({2, 3})});
  // Make the first dim of the input symbolic by hand: the outputs follow.
  ep.graph.values[size_t(ep.signature.inputs[0].value)].type.sizes[0] = SymSize::symbol("n");
  ep.ranges["n"] = {1, 100};
  EXPECT_NE(error_of([&] { verify(ep); }).find("but the shape rule gives [n, 3]"), std::string::npos);
  EXPECT_TRUE(propagate_shapes(ep));
  verify(ep);
  EXPECT_NE(ep.graph_string().find("f32[n] cpu = sum("), std::string::npos) << ep.graph_string();
  EXPECT_EQ(ep.run({tessera::randn({7, 3})})[0].sizes().vec(), (std::vector<int64_t>{7}));
}

TEST(Passes, PatternRewriteReplacesEveryMatch) {
  Pattern p = make_pattern(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::relu(in[0] * 2.0)}; },
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::relu(in[0] + in[0])}; },
      {tessera::randn({2})});
  ExportedProgram ep = tessera::export_program(
      [](const std::vector<Tensor>& in) {
        Tensor a = tessera::relu(in[0] * 2.0);
        Tensor kept = in[0] * 2.0;  // used outside a match: the mul stays for it
        return std::vector<Tensor>{tessera::exp(a) + tessera::relu(tessera::sin(in[0]) * 2.0), kept};
      },
      {tessera::randn({2, 3})}, batch_options());
  eliminate_common_subexpressions(ep);
  EXPECT_EQ(rewrite(ep, p), 1);  // the first relu's mul is shared with `kept`: only the sin branch matches
  eliminate_dead_code(ep);
  verify(ep);
  const std::string text = ep.graph_string();
  EXPECT_NE(text.find("add.Tensor(%"), std::string::npos) << text;
  EXPECT_EQ(count(text, "relu("), 2) << text;
  Tensor x = tessera::randn({4, 3});
  std::vector<Tensor> out = ep.run({x});
  std::vector<double> got = values(out[0]), xs = values(x);
  for (size_t i = 0; i < xs.size(); ++i) {
    double want = std::exp(std::max(0.0, 2 * xs[i])) + std::max(0.0, 2 * std::sin(xs[i]));
    EXPECT_NEAR(got[i], want, 1e-4 * std::max(1.0, want));
  }
}

TEST(Passes, VerifierNamesWhatIsBroken) {
  Tensor w = tessera::randn({3});
  ExportOptions opts = batch_options();
  opts.parameters["w"] = w;
  ExportedProgram ep = tessera::export_program(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{tessera::exp(in[0] * w)}; },
      {tessera::randn({2, 3})}, opts);
  verify(ep);
  {
    ExportedProgram bad = ep;
    bad.weights.erase("w");
    EXPECT_EQ(error_of([&] { verify(bad); }), "verify: weight 'w' of placeholder %w is missing");
  }
  {
    ExportedProgram bad = ep;
    std::swap(bad.graph.nodes[2], bad.graph.nodes[3]);  // exp before the mul it reads
    EXPECT_EQ(error_of([&] { verify(bad); }), "verify: node 2 ('exp') uses %2 before it is produced");
  }
  {
    ExportedProgram bad = ep;
    bad.graph.nodes[2].target = "no_such_op";
    EXPECT_EQ(error_of([&] { verify(bad); }),
              "verify: node 2 ('no_such_op'): the op is not in this runtime's op contract (tessera " +
                  std::string(TESSERA_VERSION_STRING) + ", op contract '" + bad.op_contract_version +
                  "' of the program); load the plugin that defines it or export again with this runtime");
  }
  {
    ExportedProgram bad = ep;
    bad.graph.values[size_t(bad.graph.nodes[3].outputs[0])].type.sizes[1] = SymSize(4);
    EXPECT_EQ(error_of([&] { verify(bad); }),
              "verify: node 3 ('exp'): %3 has sizes [batch, 4] but the shape rule gives [batch, 3]");
  }
}

TEST(Passes, PassManagerVerifiesAfterEachPassAndNamesABrokenOne) {
  Tensor w = tessera::randn({4, 3});
  ExportOptions opts = batch_options();
  opts.parameters["w"] = w;
  auto fn = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tessera::linear(in[0], w) + tessera::linear(in[0], w)};
  };
  ExportedProgram ep = tessera::export_program(fn, {tessera::randn({2, 3})}, opts);
  Tensor x = tessera::randn({5, 3});
  std::vector<double> before = values(ep.run({x})[0]);
  EXPECT_TRUE(PassManager::default_pipeline().run(ep));
  const std::string text = ep.graph_string();
  EXPECT_EQ(count(text, "= matmul("), 1) << text;  // linear decomposed, the two copies merged
  EXPECT_EQ(count(text, "permute"), 0) << text;     // w.t() folded into a constant
  std::vector<double> after = values(ep.run({x})[0]);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(before[i], after[i], 1e-5);

  PassManager broken;
  broken.add("drop_weights", [](ExportedProgram& p) {
    p.weights.clear();
    return true;
  });
  const std::string msg = error_of([&] { broken.run(ep); });
  EXPECT_EQ(msg.rfind("pass 'drop_weights' left a broken program: verify: weight '", 0), 0u) << msg;
}

}  // namespace
