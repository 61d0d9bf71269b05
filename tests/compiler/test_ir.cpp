// The symbolic sizes and the graph text of the Export IR (Note [Symbolic sizes], Note [Graph text]).
#include <gtest/gtest.h>

#include "tessera/compiler/ir.h"
#include "tessera/error.h"

using namespace tessera;
using namespace tessera::compiler;

TEST(SymSize, ConstantsStayConstants) {
  SymSize a = 6, b = 4;
  EXPECT_TRUE((a + b).is_constant());
  EXPECT_EQ((a * b).constant(), 24);
  EXPECT_EQ(floordiv(SymSize(-7), SymSize(2)).constant(), -4);  // Python floor division
  EXPECT_EQ(mod(SymSize(-7), SymSize(2)).constant(), 1);
  EXPECT_THROW(floordiv(a, SymSize(0)), Error);
  EXPECT_THROW((SymSize(INT64_MAX) + SymSize(1)), Error);
}

TEST(SymSize, SumsAndProductsAreCanonical) {
  SymSize b = SymSize::symbol("batch"), s = SymSize::symbol("seq");
  EXPECT_EQ((b * s).str(), "batch*seq");
  EXPECT_TRUE((s * b).same_as(b * s));
  EXPECT_EQ((b * s * 2 + b + 1).str(), "2*batch*seq + batch + 1");
  EXPECT_EQ((b - b).str(), "0");
  EXPECT_TRUE((b - b).is_constant());
  EXPECT_EQ((s - 1).str(), "seq - 1");
  EXPECT_EQ((-b).str(), "-batch");
  EXPECT_EQ(floordiv(b * 4, SymSize(2)).str(), "2*batch");
  EXPECT_EQ(floordiv(s + 1, SymSize(2)).str(), "(seq + 1)//2");
  EXPECT_EQ(mod(b * 4, SymSize(2)).constant(), 0);
  EXPECT_THROW(b.constant(), Error);
  EXPECT_THROW(SymSize::symbol("2x"), Error);
}

TEST(SymSize, ParseReadsBackWhatStrPrints) {
  SymSize b = SymSize::symbol("batch"), s = SymSize::symbol("seq");
  for (const SymSize& e : {b, b * s * 3 - 7, floordiv(s + 1, SymSize(2)) * b, mod(b, s) + 1, -mod(b, s), floordiv(s, SymSize(3)) * 2, SymSize(42)}) {
    SymSize back = SymSize::parse(e.str());
    EXPECT_TRUE(back.same_as(e)) << e.str() << " read back as " << back.str();
  }
  EXPECT_EQ(SymSize::parse("(batch + 1) * (batch - 1)").str(), "batch*batch - 1");
}

TEST(SymSize, ParseRefusesMalformedText) {
  for (const char* bad : {"", "batch +", "(seq", "3 $ 4", "99999999999999999999", "1x"}) {
    try {
      SymSize::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("symbolic size"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(SymSize::parse(std::string(200, '(') + "1" + std::string(200, ')')), Error);
}

TEST(SymSize, EvaluateBindsSymbols) {
  SymSize e = SymSize::parse("2*batch*seq + (seq + 1)//2 - batch%3");
  // batch = 5, seq = 7: 70 + 4 - 2
  EXPECT_EQ(e.evaluate({{"batch", 5}, {"seq", 7}}), 72);
  EXPECT_EQ(e.symbols(), (std::vector<std::string>{"batch", "seq"}));
  EXPECT_THROW(e.evaluate({{"batch", 5}}), Error);
  EXPECT_THROW(SymSize::parse("batch*batch").evaluate({{"batch", int64_t(1) << 40}}), Error);
}

TEST(GraphText, PrintsOneNodePerLineWithShapes) {
  ExportedProgram ep;
  SymSize b = SymSize::symbol("batch");
  ValueId x = ep.graph.add_value({DType::Float32, Device("cpu:0"), {b, 4}}, "x");
  ValueId w = ep.graph.add_value({DType::Float32, Device("cpu:0"), {4, 4}}, "w");
  ValueId y = ep.graph.add_value({DType::Float32, Device("cpu:0"), {b, 4}});
  ValueId z = ep.graph.add_value({DType::Float32, Device("cpu:0"), {b, 4}});
  ep.graph.nodes.push_back({NodeKind::Placeholder, "x", {}, {x}});
  ep.graph.nodes.push_back({NodeKind::Placeholder, "w", {}, {w}});
  ep.graph.nodes.push_back({NodeKind::Call, "linear", {Argument::tensor(x), Argument::tensor(w), Argument::none()}, {y}});
  ep.graph.nodes.push_back({NodeKind::Call, "mul.Scalar", {Argument::tensor(y), Argument::constant_value(0.5)}, {z}});
  ep.graph.nodes.push_back({NodeKind::Output, "", {Argument::tensor(z)}, {}});
  ep.signature.inputs = {{InputKind::UserInput, "x", x}, {InputKind::Parameter, "w", w}};
  ep.signature.outputs = {{"out", z}};
  ep.ranges["batch"] = {1, 512};
  EXPECT_EQ(ep.graph_string(),
            "graph(%x: f32[batch, 4] cpu:0, %w: f32[4, 4] cpu:0 parameter):\n"
            "  %2: f32[batch, 4] cpu:0 = linear(%x, %w, None)\n"
            "  %3: f32[batch, 4] cpu:0 = mul.Scalar(%2, 0.5)\n"
            "  return (%3)\n"
            "ranges: batch in [1, 512]\n");
}

TEST(GraphText, ConstantsPrintReadably) {
  EXPECT_EQ(constant_str(Constant{}), "None");
  EXPECT_EQ(constant_str(Constant{int64_t(-3)}), "-3");
  EXPECT_EQ(constant_str(Constant{1.0}), "1.0");
  EXPECT_EQ(constant_str(Constant{0.1}), "0.1");
  EXPECT_EQ(constant_str(Constant{true}), "true");
  EXPECT_EQ(constant_str(Constant{std::vector<int64_t>{1, -1}}), "[1, -1]");
  EXPECT_EQ(constant_str(Constant{std::string("a\"b")}), "\"a\\\"b\"");
  EXPECT_EQ(constant_str(Constant{DType::BFloat16}), "bf16");
}
