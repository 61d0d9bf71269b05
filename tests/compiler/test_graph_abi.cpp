// The graph ABI (Note [Graph ABI] in plugin_abi.h): a compiler plugin written in C, loaded through
// the ordinary discovery (TESSERA_PLUGIN_PATH names its folder), walks graphs through host->graph
// and prints them; the text must equal graph_string() (Note [Graph text]). The builders are
// exercised through the same table.
#include <gtest/gtest.h>

#include <string>

#include "tessera/compiler/graph_abi.h"
#include "tessera/dispatcher.h"
#include "tessera/error.h"
#include "tessera/plugin_loader.h"
#include "test_programs.h"

using namespace tessera;
using namespace tessera::compiler;
namespace tp = tessera::compiler::test_programs;

namespace {

using GraphPrintFn = size_t (*)(void* self, const tessera_graph_t* g, char* buffer, size_t capacity);

std::string print_through_plugin(ExportedProgram& ep) {
  std::string why;
  EXPECT_TRUE(load_plugin("graph_printer", &why)) << why;
  auto fn = plugin_extension<GraphPrintFn>("graph_printer", "test.graph_print");
  EXPECT_NE(fn, nullptr);
  if (!fn) return "";
  GraphHandle h(ep, false);
  size_t n = fn(nullptr, h.get(), nullptr, 0);
  std::string out(n + 1, '\0');
  EXPECT_EQ(fn(nullptr, h.get(), out.data(), out.size()), n);
  out.resize(n);
  return out;
}

// Every argument and constant kind, symbolic sizes of several shapes, an unnamed value.
ExportedProgram every_kind_program() {
  ExportedProgram ep;
  const Device cpu("cpu:0");
  SymSize b = SymSize::symbol("batch"), s = SymSize::symbol("seq");
  ValueId x = ep.graph.add_value({DType::BFloat16, cpu, {b, s * 2 + 1}}, "x");
  ValueId y = ep.graph.add_value({DType::Int64, cpu, {floordiv(s + 1, SymSize(2))}}, "y");
  ValueId c = ep.graph.add_value({DType::Float32, cpu, {}}, "scale");
  ValueId r = ep.graph.add_value({DType::Bool, cpu, {b * s, 3}});
  ep.graph.nodes.push_back({NodeKind::Placeholder, "x", {}, {x}});
  ep.graph.nodes.push_back({NodeKind::Placeholder, "y", {}, {y}});
  ep.graph.nodes.push_back({NodeKind::Placeholder, "scale", {}, {c}});
  ep.graph.nodes.push_back({NodeKind::Call,
                            "custom.everything",
                            {compiler::Argument::tensor_list({x, y, c}), compiler::Argument::none(), compiler::Argument::constant_value(int64_t(-3)),
                             compiler::Argument::constant_value(0.1), compiler::Argument::constant_value(-2.5e-7),
                             compiler::Argument::constant_value(1.0), compiler::Argument::constant_value(true),
                             compiler::Argument::constant_value(std::vector<int64_t>{1, -2, 3}),
                             compiler::Argument::constant_value(std::string("tab\there \"quoted\"")),
                             compiler::Argument::constant_value(DType::Float16), compiler::Argument::constant_value(std::monostate{})},
                            {r}});
  ep.graph.nodes.push_back({NodeKind::Output, "", {compiler::Argument::tensor(r), compiler::Argument::tensor(x)}, {}});
  ep.signature.inputs = {{InputKind::UserInput, "x", x}, {InputKind::UserInput, "y", y}, {InputKind::Constant, "scale", c}};
  ep.signature.outputs = {{"r", r}, {"x", x}};
  ep.ranges["batch"] = {1, 8};
  ep.ranges["seq"] = {2, 4096};
  return ep;
}

}  // namespace

TEST(GraphAbi, TheCompilerPluginIsListedAndLoadsWithTheHostTable) {
  std::string why;
  ASSERT_TRUE(load_plugin("graph_printer", &why)) << why;
  bool found = false;
  for (const PluginInfo& p : plugins())
    if (p.name == "graph_printer") {
      found = true;
      EXPECT_EQ(p.kind, tessera::PluginKind::Compiler);
      EXPECT_EQ(p.status, PluginStatus::Loaded) << p.reason;
    }
  EXPECT_TRUE(found);
}

TEST(GraphAbi, APluginPrintsTheGraphAsGraphStringDoes) {
  ExportedProgram a = tp::linear_relu_program();
  EXPECT_EQ(print_through_plugin(a), a.graph_string());
  ExportedProgram b = every_kind_program();
  EXPECT_EQ(print_through_plugin(b), b.graph_string());
}

TEST(GraphAbi, AccessorsReportSizesRangesAndBadIndices) {
  ExportedProgram ep = every_kind_program();
  GraphHandle h(ep, false);
  const tessera_graph_api_t* api = graph_api();
  tessera_graph_size_t size{};
  size.struct_size = sizeof(size);
  ASSERT_EQ(api->value_size(h.get(), 0, 0, &size), nullptr);
  EXPECT_TRUE(size.is_symbolic);
  EXPECT_STREQ(size.expr, "batch");
  EXPECT_EQ(size.min, 1);
  EXPECT_EQ(size.max, 8);
  ASSERT_EQ(api->value_size(h.get(), 3, 1, &size), nullptr);
  EXPECT_FALSE(size.is_symbolic);
  EXPECT_EQ(size.value, 3);
  EXPECT_EQ(api->node_kind(h.get(), 99), -1);
  EXPECT_EQ(api->node_target(h.get(), -1), nullptr);
  EXPECT_EQ(api->value_rank(h.get(), 4), -1);
  std::string m = status_take_message(api->value_size(h.get(), 0, 5, &size));
  EXPECT_NE(m.find("dim 5 out of range"), std::string::npos) << m;
}

TEST(GraphAbi, BuildersRewriteAWritableGraphOnly) {
  ExportedProgram ep = tp::linear_relu_program();
  const tessera_graph_api_t* api = graph_api();
  {
    GraphHandle ro(ep, false);
    std::string m = status_take_message(api->erase_node(const_cast<tessera_graph_t*>(ro.get()), 4));
    EXPECT_NE(m.find("read-only"), std::string::npos) << m;
  }
  GraphHandle h(ep, true);
  tessera_graph_t* g = h.get_mutable();
  // relu(relu(linear(...))): add a second relu after node 4 and route the uses of %4 through it.
  int32_t lin_relu = api->node_output(g, 4, 0);
  tessera_graph_arg_t arg{};
  arg.kind = TESSERA_ARG_TENSOR;
  arg.num_values = 1;
  arg.values = &lin_relu;
  const char* sizes[] = {"batch", "4"};
  tessera_graph_type_t type{TESSERA_DTYPE_FLOAT32, 2, "cpu:0", sizes};
  int32_t added = -1;
  ASSERT_EQ(api->add_call(g, 5, "relu", &arg, 1, &type, 1, &added), nullptr);
  EXPECT_EQ(added, 6);
  // replace the uses of %4 by %6, except in the new node itself (restored below)
  ASSERT_EQ(api->replace_uses(g, lin_relu, added), nullptr);
  ep.graph.nodes[5].args[0].values[0] = lin_relu;
  EXPECT_EQ(ep.graph_string(),
            "graph(%x: f32[batch, 4] cpu:0, %w: f32[4, 4] cpu:0 parameter, %b: f32[4] cpu:0 parameter):\n"
            "  %3: f32[batch, 4] cpu:0 = linear(%x, %w, %b)\n"
            "  %4: f32[batch, 4] cpu:0 = relu(%3)\n"
            "  %6: f32[batch, 4] cpu:0 = relu(%4)\n"
            "  %5: f32[batch, 4] cpu:0 = add.Tensor(%6, %x, 0.5)\n"
            "  return (%5, %6)\n"
            "ranges: batch in [1, 64]\n");
  EXPECT_EQ(ep.signature.outputs[1].value, 6);
  std::string m = status_take_message(api->erase_node(g, 4));  // %4 is still used by the new relu
  EXPECT_NE(m.find("still used"), std::string::npos) << m;
  m = status_take_message(api->add_call(g, 1, "relu", &arg, 1, &type, 1, &added));  // %4 is defined after node 1
  EXPECT_NE(m.find("which no node before position 1 defines"), std::string::npos) << m;
  m = status_take_message(api->add_call(g, 5, "no_such_op", &arg, 1, &type, 1, &added));
  EXPECT_NE(m.find("no_such_op"), std::string::npos) << m;
  // The add node is unused once its uses go to %4: erase it.
  int32_t add_out = api->node_output(g, 6, 0);
  ASSERT_EQ(api->node_kind(g, 6), TESSERA_NODE_CALL);
  ASSERT_EQ(api->replace_uses(g, add_out, lin_relu), nullptr);
  ASSERT_EQ(api->erase_node(g, 6), nullptr);
  EXPECT_EQ(api->node_count(g), 7);
}
