#include "passes/graph_edit.h"

#include "tessera/dispatcher.h"
#include "tessera/op_info.h"

namespace tessera::compiler {

std::vector<int> use_counts(const Graph& g) {
  std::vector<int> uses(g.values.size(), 0);
  for (const Node& n : g.nodes)
    for (const Argument& a : n.args)
      for (ValueId v : a.values) ++uses.at(size_t(v));
  return uses;
}

void replace_uses(ExportedProgram& ep, ValueId from, ValueId to) {
  for (Node& n : ep.graph.nodes)
    for (Argument& a : n.args)
      for (ValueId& v : a.values)
        if (v == from) v = to;
  for (OutputSpec& o : ep.signature.outputs)
    if (o.value == from) o.value = to;
}

size_t first_non_placeholder(const Graph& g) {
  size_t i = 0;
  while (i < g.nodes.size() && g.nodes[i].kind == NodeKind::Placeholder) ++i;
  return i;
}

bool writes_in_place(const std::string& target) {
  if (is_view_target(target)) return false;
  if (const op::OpInfo* info = op::find_op_info(target)) return info->has(op::kTagInplace) || info->has(op::kTagRandom);
  // An op a plugin defined outside the contract: in place when a return aliases an input (Tensor(a!)).
  OperatorEntry* op = Dispatcher::instance().find_op(target);
  if (!op) return true;  // unknown: assume the worst
  for (const auto& r : Dispatcher::instance().schema(*op).returns)
    if (r.alias && r.is_write) return true;
  return false;
}

namespace {

// The value a Call writes in place (its first argument), or -1.
ValueId in_place_target(const Node& n) {
  const bool writes = n.kind == NodeKind::Call && !n.args.empty() && n.args[0].kind == Argument::Kind::Tensor &&
                      writes_in_place(n.target);
  return writes ? n.args[0].values.at(0) : ValueId(-1);
}

}  // namespace

std::set<ValueId> written_in_place(const Graph& g) {
  std::set<ValueId> out;
  for (const Node& n : g.nodes)
    if (const ValueId v = in_place_target(n); v >= 0) out.insert(v);
  return out;
}

bool computes_any(const Node& n, const std::set<ValueId>& values) {
  for (ValueId v : n.outputs)
    if (values.count(v)) return true;
  return false;
}

bool copy_written_constants(ExportedProgram& ep) {
  Graph& g = ep.graph;
  std::set<ValueId> constants;
  for (const InputSpec& in : ep.signature.inputs)
    if (in.kind != InputKind::UserInput && !ep.live_weights.count(in.name)) constants.insert(in.value);
  std::vector<Node> nodes;
  bool changed = false;
  for (Node& n : g.nodes) {
    if (const ValueId constant = in_place_target(n); constant >= 0 && constants.count(constant)) {
      const ValueId copy = g.add_value(g.type(constant));
      nodes.push_back({NodeKind::Call, "clone", {Argument::tensor(constant)}, {copy}});
      n.args[0].values[0] = copy;
      changed = true;
    }
    nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
  return changed;
}

std::string arguments_key(const Node& n) {
  std::string key = n.target + "(";
  for (const Argument& a : n.args) {
    switch (a.kind) {
      case Argument::Kind::Tensor: key += '%' + std::to_string(a.values.at(0)); break;
      case Argument::Kind::TensorList:
        key += "[";
        for (ValueId v : a.values) key += '%' + std::to_string(v) + ',';
        key += "]";
        break;
      case Argument::Kind::None: key += "None"; break;
      case Argument::Kind::Constant: {
        // The alternative's index keeps 1 (int) and 1.0 (float) apart.
        key += std::to_string(a.constant.index()) + ":" + constant_str(a.constant);
        break;
      }
    }
    key += ";";
  }
  return key + ")";
}

}  // namespace tessera::compiler
