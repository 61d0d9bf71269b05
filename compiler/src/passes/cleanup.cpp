// Dead-code and common-subexpression elimination. Note [Passes] in tessera/compiler/passes.h.
#include <unordered_map>

#include "passes/graph_edit.h"
#include "tessera/compiler/passes.h"

namespace tessera::compiler {

bool eliminate_dead_code(ExportedProgram& ep) {
  Graph& g = ep.graph;
  std::vector<int> uses = use_counts(g);
  for (const OutputSpec& o : ep.signature.outputs) ++uses.at(size_t(o.value));
  std::vector<bool> erase(g.nodes.size(), false);
  bool changed = false;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Call) continue;
    bool used = false;
    for (ValueId v : n.outputs) used = used || uses[size_t(v)] > 0;
    if (used) continue;
    erase[i] = true;
    changed = true;
    for (const Argument& a : n.args)
      for (ValueId v : a.values) --uses[size_t(v)];
  }
  if (!changed) return false;
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!erase[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  return true;
}

bool eliminate_common_subexpressions(ExportedProgram& ep) {
  Graph& g = ep.graph;
  std::unordered_map<std::string, size_t> seen;  // key -> index of the first node
  std::vector<bool> erase(g.nodes.size(), false);
  bool changed = false;
  // Note [Constants written in place]: two writers must not share one tensor.
  const std::set<ValueId> written = written_in_place(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.kind != NodeKind::Call || writes_in_place(n.target)) continue;
    if (computes_any(n, written)) continue;
    auto [it, fresh] = seen.emplace(arguments_key(n), i);
    if (fresh) continue;
    const Node& first = g.nodes[it->second];
    for (size_t o = 0; o < n.outputs.size(); ++o) replace_uses(ep, n.outputs[o], first.outputs[o]);
    erase[i] = true;
    changed = true;
  }
  if (!changed) return false;
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!erase[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  return true;
}

}  // namespace tessera::compiler
