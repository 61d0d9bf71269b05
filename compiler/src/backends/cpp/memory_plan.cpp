// The memory plan of generate_cpp (see memory_plan.h).
#include "backends/cpp/memory_plan.h"

#include <algorithm>

namespace tessera::compiler::codegen::cppgen {
namespace {

std::vector<ValueId> step_outputs(const Graph& g, const Step& s) {
  std::vector<ValueId> vs;
  for (int n : s.nodes)
    for (ValueId v : g.nodes[size_t(n)].outputs) vs.push_back(v);
  return vs;
}

}  // namespace

MemoryPlan plan_memory(const ExportedProgram& p, const FusionPlan& plan) {
  const Graph& g = p.graph;
  const std::vector<Step>& steps = plan.steps;
  MemoryPlan m;
  std::map<int, int> step_of_node;
  for (int s = 0; s < int(steps.size()); ++s)
    for (int n : steps[size_t(s)].nodes) step_of_node[n] = s;
  for (const InputSpec& in : p.signature.inputs) m.placeholder_index[in.value] = int(m.placeholder_index.size());
  const int end = int(steps.size());
  for (int i = 0; i < int(g.nodes.size()); ++i) {
    const Node& n = g.nodes[size_t(i)];
    if (n.kind == NodeKind::Placeholder) continue;
    const int user_step = n.kind == NodeKind::Output ? end : step_of_node.at(i);
    for (const Argument& a : n.args)
      for (ValueId v : a.values) {
        const int def = m.placeholder_index.count(v) ? -1 : step_of_node.at(producer(g, v));
        if (def != user_step) m.last_use[v] = std::max(m.last_use[v], user_step);
        if (n.kind == NodeKind::Output && !m.placeholder_index.count(v) && !m.output_index.count(v)) {
          m.output_index[v] = int(m.outputs.size());
          m.outputs.push_back(v);
        }
      }
  }
  // An extern result may alias its operands (view, permute, reshape): a slot it reads stays
  // reserved as long as the result is read. Backwards, so that a view of a view extends both.
  for (int s = end - 1; s >= 0; --s) {
    if (steps[size_t(s)].fused) continue;
    const Node& n = g.nodes[size_t(steps[size_t(s)].nodes[0])];
    int until = -1;
    for (ValueId o : n.outputs)
      if (auto it = m.last_use.find(o); it != m.last_use.end()) until = std::max(until, it->second);
    for (const Argument& a : n.args)
      for (ValueId v : a.values)
        if (until >= 0 && !m.placeholder_index.count(v)) m.last_use[v] = std::max(m.last_use[v], until);
  }
  // Extern outputs live in the host's tensors (call_node hands back their data): no slot, and a
  // graph output the host returns as is.
  for (int s = 0; s < end; ++s)
    if (!steps[size_t(s)].fused)
      for (ValueId v : g.nodes[size_t(steps[size_t(s)].nodes[0])].outputs) {
        m.extern_values.insert(v);
        if (m.output_index.count(v)) m.extern_outputs.push_back(v);
      }
  for (ValueId v : m.extern_outputs) m.output_index.erase(v);
  for (ValueId v : m.extern_values) {
    bool extern_readers_only = true;
    for (int i = 0; i < int(g.nodes.size()) && extern_readers_only; ++i) {
      const Node& n = g.nodes[size_t(i)];
      for (const Argument& a : n.args)
        for (ValueId x : a.values)
          if (x == v && (n.kind != NodeKind::Call || steps[size_t(step_of_node.at(i))].fused))
            extern_readers_only = false;
    }
    // A view of a slot would alias memory the slot plan reuses: only views of host tensors.
    bool host_operands = true;
    for (const Argument& a : g.nodes[size_t(producer(g, v))].args)
      for (ValueId x : a.values)
        host_operands = host_operands && (m.placeholder_index.count(x) || m.extern_values.count(x));
    if (extern_readers_only && host_operands) m.strided_values.push_back(v);
  }
  m.outputs.clear();
  for (auto& [v, k] : m.output_index) m.outputs.push_back(v);
  std::sort(m.outputs.begin(), m.outputs.end(),
            [&](ValueId a, ValueId b) { return m.output_index[a] < m.output_index[b]; });
  for (size_t k = 0; k < m.outputs.size(); ++k) m.output_index[m.outputs[k]] = int(k);
  struct Slot {
    SymSize bytes;
    int free_after = -2;  // the step after which it may be reused
  };
  std::vector<Slot> slots;
  for (int s = 0; s < end; ++s) {
    for (ValueId v : step_outputs(g, steps[size_t(s)])) {
      if (!m.last_use.count(v) || m.output_index.count(v) || m.extern_values.count(v)) continue;
      const TensorType& t = g.type(v);
      const SymSize bytes = product(t.sizes, 0, t.sizes.size()) * int64_t(itemsize(t.dtype));
      int chosen = -1;
      for (int k = 0; k < int(slots.size()); ++k)
        if (slots[size_t(k)].free_after < s && slots[size_t(k)].bytes.same_as(bytes)) {
          chosen = k;
          break;
        }
      if (chosen < 0) {
        chosen = int(slots.size());
        slots.push_back({bytes, 0});
      }
      slots[size_t(chosen)].free_after = m.last_use[v];
      m.slot_of[v] = chosen;
    }
  }
  for (const Slot& s : slots) m.slot_bytes.push_back(s.bytes);
  return m;
}

void MemoryPlan::describe(GeneratedSource& out) const {
  out.outputs = outputs;
  out.extern_outputs = extern_outputs;
  out.strided_values = strided_values;
  out.slot_bytes = slot_bytes;
}

}  // namespace tessera::compiler::codegen::cppgen
