// Programs built by hand through the IR, with real ops, for the program-file and CLI tests:
//   y = relu(linear(x, w, b)) ; z = add(y, x, alpha=0.5) ; returns (z, y)
// with x: f32[batch, 4], batch in [1, 64].
#pragma once
#include <cmath>

#include "tessera/compiler/ir.h"
#include "tessera/tensor.h"

namespace tessera::compiler::test_programs {

inline Tensor filled_tensor(std::vector<int64_t> sizes, float scale, float shift) {
  Tensor t = make_tensor(sizes, DType::Float32, Device(DeviceType::CPU));
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = scale * std::sin(float(i) * 1.7f + shift);
  return t;
}

inline ExportedProgram linear_relu_program() {
  ExportedProgram ep;
  const Device cpu("cpu:0");
  SymSize b = SymSize::symbol("batch");
  ValueId x = ep.graph.add_value({DType::Float32, cpu, {b, 4}}, "x");
  ValueId w = ep.graph.add_value({DType::Float32, cpu, {4, 4}}, "w");
  ValueId bias = ep.graph.add_value({DType::Float32, cpu, {4}}, "b");
  ValueId lin = ep.graph.add_value({DType::Float32, cpu, {b, 4}});
  ValueId y = ep.graph.add_value({DType::Float32, cpu, {b, 4}});
  ValueId z = ep.graph.add_value({DType::Float32, cpu, {b, 4}});
  ep.graph.nodes.push_back({NodeKind::Placeholder, "x", {}, {x}});
  ep.graph.nodes.push_back({NodeKind::Placeholder, "w", {}, {w}});
  ep.graph.nodes.push_back({NodeKind::Placeholder, "b", {}, {bias}});
  ep.graph.nodes.push_back(
      {NodeKind::Call, "linear", {Argument::tensor(x), Argument::tensor(w), Argument::tensor(bias)}, {lin}});
  ep.graph.nodes.push_back({NodeKind::Call, "relu", {Argument::tensor(lin)}, {y}});
  ep.graph.nodes.push_back({NodeKind::Call,
                            "add.Tensor",
                            {Argument::tensor(y), Argument::tensor(x), Argument::constant_value(0.5)},
                            {z}});
  ep.graph.nodes.push_back({NodeKind::Output, "", {Argument::tensor(z), Argument::tensor(y)}, {}});
  ep.signature.inputs = {
      {InputKind::UserInput, "x", x}, {InputKind::Parameter, "w", w}, {InputKind::Parameter, "b", bias}};
  ep.signature.outputs = {{"z", z}, {"y", y}};
  ep.ranges["batch"] = {1, 64};
  ep.weights["w"] = filled_tensor({4, 4}, 0.8f, 0.3f);
  ep.weights["b"] = filled_tensor({4}, 0.2f, 1.1f);
  ep.op_contract_version = "test";
  return ep;
}

}  // namespace tessera::compiler::test_programs
