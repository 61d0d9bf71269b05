// Internal, stage 1 of generate_cpp (Note [Generated loops] in cpp_gen.cpp): the fusion plan.
// Takes the graph; gives its call nodes in order as steps: fused groups (pointwise ops and
// last-dim reductions over one domain, each op a lane expression of tessera/vecmath/vecmath.h) and
// extern steps (one node each, run by the host through call_node). Knows nothing of buffers or
// text layout.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tessera/compiler/ir.h"

namespace tessera::compiler::codegen::cppgen {

// How a value is indexed inside a group's domain [rows..., n]: every element, one per row, one
// per column (broadcast over rows), or one for all.
enum class Kind : uint8_t { Full, Row, Col, Scalar };

// One operand of a fused op: a tensor value or a literal (a C++ float expression).
struct Operand {
  ValueId value = -1;
  std::string literal;
};

enum class Reduction : uint8_t { None, Sum, Mean, Max, Min };

// A node the loops can compute: `format` is a lane expression (vf values) over {0}, {1}, ... (the
// operands, substituted by the emitter).
struct FusedOp {
  std::vector<Operand> operands;
  std::string format;
  Reduction reduction = Reduction::None;
  bool keepdim = true;
};

struct Step {
  bool fused = false;
  std::vector<int> nodes;         // indices into graph.nodes
  std::vector<SymSize> domain;    // fused: the Full sizes
  std::map<ValueId, Kind> kinds;  // fused: kinds of the values the group produces
  std::map<int, FusedOp> ops;     // fused: node index -> op
};

struct FusionPlan {
  std::vector<Step> steps;
  // keepdim=False reductions: one value per row, read by later groups by their own shape.
  std::set<ValueId> flat_rows;
};

// Greedy: consecutive fusible nodes over one domain form a group; anything else is an extern step.
FusionPlan plan_fusion(const Graph& g);

// How a value of `sizes` broadcasts against the domain `d` (PyTorch rules, aligned on the right);
// nullopt when it does not fit one of the four kinds.
std::optional<Kind> kind_in(const std::vector<SymSize>& s, const std::vector<SymSize>& d);
SymSize product(const std::vector<SymSize>& sizes, size_t begin, size_t end);
// The index of the node that produces v, or -1 (a placeholder's value has its node too).
int producer(const Graph& g, ValueId v);

}  // namespace tessera::compiler::codegen::cppgen
