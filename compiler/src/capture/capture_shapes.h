// Symbolic shape rules for capture (private to compiler/src). Note [Symbolic shape rules] in
// capture_shapes.cpp.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/compiler/ir.h"
#include "tessera/dispatcher.h"

namespace tessera::compiler {

// What the symbolic size type needs while a capture runs: the symbols' example values and ranges,
// and the op being captured (for messages).
struct ShapeContext {
  std::map<std::string, int64_t> example;
  std::map<std::string, SymbolRange>* ranges = nullptr;
  // Where decisions taken from the examples are recorded (capture); null: not recorded.
  std::vector<Guard>* guards = nullptr;
  std::string current_op;

  // Decides a == b for the shape rules (Note [Symbolic shape rules]); throws when the answer would
  // specialise a dynamic dim.
  bool decide_equal(const SymSize& a, const SymSize& b) const;
  bool decide_less_equal(const SymSize& a, const SymSize& b) const;
  bool has_examples(const SymSize& s) const;
  // Records `lhs relation rhs`, decided from the examples, once.
  void add_guard(const SymSize& lhs, Guard::Relation relation, const SymSize& rhs) const;
};

// The symbolic sizes of each output of `call`, whose arguments are already `node.args`.
std::vector<std::vector<SymSize>> symbolic_output_sizes(const ExportCall& call, const Node& node, const Graph& g,
                                                        const ShapeContext& ctx);

// The symbolic sizes of the one output of `node` from its inputs' types: permute's, or the op's
// symbolic shape rule; nullopt for a view and for an op without a rule. Comparisons no example
// decides count as unequal (the graph was checked at capture).
std::optional<std::vector<SymSize>> infer_sizes(const Node& node, const Graph& g, const ShapeContext& ctx);

// The symbolic sizes of a reshape of a tensor of symbolic sizes `in` (example sizes `in_example`) to
// the example sizes `out`.
std::vector<SymSize> symbolic_view_sizes(const std::vector<SymSize>& in, IntArrayRef in_example,
                                         const std::vector<int64_t>& out, const ShapeContext& ctx);

}  // namespace tessera::compiler
