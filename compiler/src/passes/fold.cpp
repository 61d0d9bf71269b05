// Constant folding of weight-only subgraphs and shape propagation. Note [Passes] in
// tessera/compiler/passes.h.
#include <algorithm>

#include "capture/capture_shapes.h"
#include "runtime/interpret.h"
#include "passes/graph_edit.h"
#include "tessera/compiler/passes.h"

namespace tessera::compiler {

bool fold_constants(ExportedProgram& ep) {
  Graph& g = ep.graph;
  std::vector<Tensor> known(g.values.size());
  for (const InputSpec& in : ep.signature.inputs)
    if (in.kind != InputKind::UserInput && !ep.live_weights.count(in.name)) known[size_t(in.value)] = ep.weights.at(in.name);
  std::vector<Node> folded_placeholders;
  std::vector<bool> erase(g.nodes.size(), false);
  int next = 0;
  // Note [Constants written in place]: a value a node writes in place stays computed by the run.
  const std::set<ValueId> written = written_in_place(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Call || writes_in_place(n.target)) continue;
    if (computes_any(n, written)) continue;
    bool all_known = true;
    for (const Argument& a : n.args)
      for (ValueId v : a.values) all_known = all_known && known[size_t(v)].defined();
    for (ValueId v : n.outputs)
      for (const SymSize& s : g.type(v).sizes) all_known = all_known && s.is_constant();
    if (!all_known) continue;
    std::vector<Tensor> results = execute_node(g, n, known, {});
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      std::string name;
      do name = "folded_" + std::to_string(next++); while (ep.weights.count(name));
      const ValueId v = n.outputs[o];
      Tensor host = results.at(o).to(Device(DeviceType::CPU)).contiguous();
      known[size_t(v)] = host;
      ep.weights[name] = host;
      g.values[size_t(v)].name = name;
      folded_placeholders.push_back({NodeKind::Placeholder, name, {}, {v}});
      ep.signature.inputs.push_back({InputKind::Constant, name, v});
    }
    erase[i] = true;
  }
  if (folded_placeholders.empty()) return false;
  // Keep only the folded values something still reads (the end of each folded chain).
  std::vector<int> uses(g.values.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!erase[i])
      for (const Argument& a : g.nodes[i].args)
        for (ValueId v : a.values) ++uses[size_t(v)];
  for (const OutputSpec& o : ep.signature.outputs) ++uses[size_t(o.value)];
  std::vector<Node> still_used;
  for (Node& n : folded_placeholders) {
    if (uses[size_t(n.outputs[0])] > 0) {
      still_used.push_back(std::move(n));
      continue;
    }
    ep.weights.erase(n.target);
    auto& ins = ep.signature.inputs;
    ins.erase(std::remove_if(ins.begin(), ins.end(), [&](const InputSpec& s) { return s.name == n.target; }), ins.end());
  }
  folded_placeholders = std::move(still_used);
  const size_t np = first_non_placeholder(g);
  std::vector<Node> nodes(g.nodes.begin(), g.nodes.begin() + long(np));
  for (Node& n : folded_placeholders) nodes.push_back(std::move(n));
  for (size_t i = np; i < g.nodes.size(); ++i)
    if (!erase[i]) nodes.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(nodes);
  return true;
}

bool propagate_shapes(ExportedProgram& ep) {
  Graph& g = ep.graph;
  ShapeContext ctx;
  ctx.ranges = &ep.ranges;
  bool changed = false;
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::Call) continue;
    ctx.current_op = n.target;
    std::optional<std::vector<SymSize>> sizes = infer_sizes(n, g, ctx);
    if (!sizes) continue;
    std::vector<SymSize>& have = g.values[size_t(n.outputs[0])].type.sizes;
    bool same = have.size() == sizes->size();
    for (size_t d = 0; same && d < have.size(); ++d) same = have[d].same_as((*sizes)[d]);
    if (same) continue;
    have = std::move(*sizes);
    changed = true;
  }
  return changed;
}

}  // namespace tessera::compiler
