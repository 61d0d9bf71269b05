// Decomposition of composite ops, and pattern rewrite: both splice a captured program into the
// graph. Note [Passes] and Note [Pattern rewrite] in tessera/compiler/passes.h.
#include <set>

#include "capture/capture_shapes.h"
#include "passes/graph_edit.h"
#include "runtime/interpret.h"
#include "tessera/compiler/passes.h"
#include "tessera/dispatcher.h"
#include "tessera/ops.h"

namespace tessera::compiler {

namespace {

// Copies the Call nodes of `sub` into `ep` before node `at`: sub's user inputs stand for `inputs`;
// new values take sub's types on `device`. Returns ep's value for each sub value (-1: none).
std::vector<ValueId> splice(ExportedProgram& ep, size_t at, const ExportedProgram& sub,
                            const std::vector<ValueId>& inputs, Device device) {
  std::vector<ValueId> map(sub.graph.values.size(), -1);
  size_t k = 0;
  for (const InputSpec& in : sub.signature.inputs) map[size_t(in.value)] = inputs.at(k++);
  std::vector<Node> inserted;
  for (const Node& n : sub.graph.nodes) {
    if (n.kind != NodeKind::Call) continue;
    Node copy = n;
    for (Argument& a : copy.args)
      for (ValueId& v : a.values) v = map.at(size_t(v));
    for (ValueId& v : copy.outputs) {
      TensorType t = sub.graph.type(v);
      t.device = device;
      ValueId nv = ep.graph.add_value(std::move(t));
      map[size_t(v)] = nv;
      v = nv;
    }
    inserted.push_back(std::move(copy));
  }
  ep.graph.nodes.insert(ep.graph.nodes.begin() + long(at), inserted.begin(), inserted.end());
  return map;
}

// Distinct example sizes for the symbols, inside their ranges and never 0 or 1 where the range allows.
std::map<std::string, int64_t> example_sizes(const std::map<std::string, SymbolRange>& ranges) {
  std::map<std::string, int64_t> out;
  std::set<int64_t> used;
  for (const auto& [name, r] : ranges) {
    int64_t v = std::max<int64_t>(r.min, 2);
    while (used.count(v) && v < r.max) ++v;
    out[name] = std::min(v, r.max);
    used.insert(out[name]);
  }
  return out;
}

}  // namespace

bool decompose(ExportedProgram& ep) {
  Dispatcher& dispatcher = Dispatcher::instance();
  const std::map<std::string, int64_t> examples = example_sizes(ep.ranges);
  bool changed = false;
  for (size_t i = first_non_placeholder(ep.graph); i < ep.graph.nodes.size(); ++i) {
    const Node node = ep.graph.nodes[i];
    if (node.kind != NodeKind::Call || is_view_target(node.target)) continue;
    OperatorEntry* op = dispatcher.find_op(node.target);
    const CompositeFn* composite = op ? dispatcher.composite(*op) : nullptr;
    if (!composite) continue;
    // The node's tensor inputs become the sub-program's inputs, each dim a Dim of its symbol.
    std::vector<ValueId> inputs;
    std::vector<Tensor> example_inputs;
    ExportOptions opts;
    bool expressible = true;
    for (const Argument& a : node.args)
      for (ValueId v : a.values) {
        const TensorType& t = ep.graph.type(v);
        std::vector<int64_t> sizes;
        std::map<int64_t, Dim> dims;
        for (size_t d = 0; d < t.sizes.size(); ++d) {
          const SymSize& s = t.sizes[d];
          if (auto c = s.maybe_constant()) {
            sizes.push_back(*c);
            continue;
          }
          auto names = s.symbols();
          expressible = expressible && names.size() == 1 && s.same_as(SymSize::symbol(names[0]));
          if (!expressible) break;
          sizes.push_back(examples.at(names[0]));
          dims[int64_t(d)] = Dim{names[0], ep.ranges.at(names[0]).min, ep.ranges.at(names[0]).max};
        }
        inputs.push_back(v);
        example_inputs.push_back(empty(sizes, TensorOptions(t.dtype)));
        opts.dynamic_shapes.push_back(std::move(dims));
      }
    if (!expressible) continue;
    const FunctionSchema& schema = dispatcher.schema(*op);
    auto fn = [&](const std::vector<Tensor>& in) {
      Stack args;
      size_t k = 0;
      for (size_t ai = 0; ai < node.args.size(); ++ai) {
        const Argument& a = node.args[ai];
        switch (a.kind) {
          case Argument::Kind::Tensor:
            // Boxed as the dispatcher boxes a call (box_frame): Tensor? arguments as optionals.
            if (schema.arguments.at(ai).type == ArgType::OptionalTensor) args.emplace_back(std::optional<Tensor>(in.at(k++)));
            else args.emplace_back(in.at(k++));
            break;
          case Argument::Kind::TensorList: {
            std::vector<Tensor> list;
            for (size_t j = 0; j < a.values.size(); ++j) list.push_back(in.at(k++));
            args.emplace_back(std::move(list));
            break;
          }
          case Argument::Kind::None: args.emplace_back(std::optional<Tensor>()); break;
          case Argument::Kind::Constant: args.emplace_back(constant_value(a.constant)); break;
        }
      }
      std::vector<Tensor> outs;
      for (Value& v : (*composite)(args)) outs.push_back(std::get<Tensor>(std::move(v)));
      return outs;
    };
    ExportedProgram sub;
    try {
      sub = export_program(fn, example_inputs, opts);
    } catch (const Error&) {
      continue;  // the composite does not capture (it reads data, or needs static sizes): keep the op
    }
    // A composite that made tensors of its own (lifted as weights), returns an input as it is
    // (contiguous on a contiguous example), or whose capture took a decision from its made-up
    // example sizes (a guard) does not stand for the op in general.
    bool general = sub.weights.empty() && sub.guards.empty();
    for (const OutputSpec& o : sub.signature.outputs)
      for (const InputSpec& in : sub.signature.inputs) general = general && o.value != in.value;
    if (!general || sub.signature.outputs.size() != node.outputs.size()) continue;
    const Device device = ep.graph.type(node.outputs.at(0)).device;
    ep.graph.nodes.erase(ep.graph.nodes.begin() + long(i));
    std::vector<ValueId> map = splice(ep, i, sub, inputs, device);
    for (size_t o = 0; o < node.outputs.size(); ++o)
      replace_uses(ep, node.outputs[o], map.at(size_t(sub.signature.outputs[o].value)));
    changed = true;
    --i;  // the spliced nodes may hold composites too
  }
  return changed;
}

Pattern make_pattern(const ExportFn& pattern, const ExportFn& replacement, const std::vector<Tensor>& example_inputs) {
  Pattern p{export_program(pattern, example_inputs), export_program(replacement, example_inputs)};
  TESSERA_CHECK(p.pattern.weights.empty() && p.replacement.weights.empty(),
                "make_pattern: the pattern and the replacement must not use tensors other than their inputs");
  TESSERA_CHECK(p.pattern.signature.outputs.size() == 1 && p.replacement.signature.outputs.size() == 1,
                "make_pattern: the pattern and the replacement must return one tensor each");
  const ValueId out = p.pattern.signature.outputs[0].value;
  for (const InputSpec& in : p.pattern.signature.inputs)
    TESSERA_CHECK(in.value != out, "make_pattern: the pattern returns its input '", in.name, "' unchanged; it must compute");
  return p;
}

namespace {

struct Matcher {
  const Graph& pg;  // pattern
  const Graph& g;   // program
  std::vector<int> pattern_producer, producer;  // value -> node index (-1: placeholder)
  std::map<ValueId, ValueId> bound;             // pattern value -> program value
  std::map<size_t, size_t> nodes;               // pattern node -> program node

  static std::vector<int> producers(const Graph& graph) {
    std::vector<int> p(graph.values.size(), -1);
    for (size_t i = 0; i < graph.nodes.size(); ++i)
      if (graph.nodes[i].kind == NodeKind::Call)
        for (ValueId v : graph.nodes[i].outputs) p[size_t(v)] = int(i);
    return p;
  }
  Matcher(const Graph& pattern, const Graph& program)
      : pg(pattern), g(program), pattern_producer(producers(pattern)), producer(producers(program)) {}

  bool match(ValueId pv, ValueId v) {
    auto b = bound.find(pv);
    if (b != bound.end()) return b->second == v;
    const int pn = pattern_producer[size_t(pv)];
    if (pn >= 0) {
      const int n = producer[size_t(v)];
      if (n < 0) return false;
      const Node& pnode = pg.nodes[size_t(pn)];
      const Node& node = g.nodes[size_t(n)];
      if (pnode.target != node.target || pnode.args.size() != node.args.size() ||
          pnode.outputs.size() != node.outputs.size())
        return false;
      for (size_t o = 0; o < pnode.outputs.size(); ++o)
        if ((pnode.outputs[o] == pv) != (node.outputs[o] == v)) return false;
      auto [it, fresh] = nodes.emplace(size_t(pn), size_t(n));
      if (!fresh) return it->second == size_t(n);
      for (size_t a = 0; a < node.args.size(); ++a) {
        const Argument &pa = pnode.args[a], &na = node.args[a];
        if (pa.kind != na.kind || pa.values.size() != na.values.size()) return false;
        if (pa.kind == Argument::Kind::Constant &&
            (pa.constant.index() != na.constant.index() || constant_str(pa.constant) != constant_str(na.constant)))
          return false;
        for (size_t j = 0; j < pa.values.size(); ++j)
          if (!match(pa.values[j], na.values[j])) return false;
      }
    }
    bound.emplace(pv, v);
    return true;
  }
};

}  // namespace

int rewrite(ExportedProgram& ep, const Pattern& p) {
  const Graph& pg = p.pattern.graph;
  const ValueId anchor = p.pattern.signature.outputs.at(0).value;
  int replaced = 0;
  for (size_t guard = 0; guard <= ep.graph.nodes.size() * 2; ++guard) {
    std::vector<int> uses = use_counts(ep.graph);
    for (const OutputSpec& o : ep.signature.outputs) ++uses.at(size_t(o.value));
    bool applied = false;
    for (size_t i = first_non_placeholder(ep.graph); i < ep.graph.nodes.size() && !applied; ++i) {
      const Node& n = ep.graph.nodes[i];
      if (n.kind != NodeKind::Call || n.outputs.size() != 1) continue;
      Matcher m(pg, ep.graph);
      if (!m.match(anchor, n.outputs[0])) continue;
      // Values inside the match other than the anchor's must not be used outside it.
      std::map<ValueId, int> inner_uses;
      std::set<size_t> matched;
      for (const auto& [pn, node] : m.nodes) matched.insert(node);
      for (size_t node : matched)
        for (const Argument& a : ep.graph.nodes[node].args)
          for (ValueId v : a.values) ++inner_uses[v];
      bool closed = true;
      for (size_t node : matched)
        for (ValueId v : ep.graph.nodes[node].outputs)
          if (v != n.outputs[0] && uses[size_t(v)] != inner_uses[v]) closed = false;
      if (!closed) continue;
      std::vector<ValueId> inputs;
      bool all_bound = true;
      for (const InputSpec& in : p.pattern.signature.inputs) {
        auto b = m.bound.find(in.value);
        all_bound = all_bound && b != m.bound.end();
        inputs.push_back(all_bound ? b->second : -1);
      }
      if (!all_bound) continue;
      const ValueId old_out = n.outputs[0];
      const Device device = ep.graph.type(old_out).device;
      std::set<ValueId> dead;  // the matched nodes' outputs (the splice moves the nodes)
      for (size_t node : matched)
        for (ValueId v : ep.graph.nodes[node].outputs) dead.insert(v);
      std::vector<ValueId> map = splice(ep, i, p.replacement, inputs, device);
      replace_uses(ep, old_out, map.at(size_t(p.replacement.signature.outputs[0].value)));
      std::vector<Node> kept;
      for (Node& node : ep.graph.nodes) {
        bool matched_node = node.kind == NodeKind::Call && !node.outputs.empty() && dead.count(node.outputs[0]);
        if (!matched_node) kept.push_back(std::move(node));
      }
      ep.graph.nodes = std::move(kept);
      applied = true;
      ++replaced;
    }
    if (!applied) break;
    propagate_shapes(ep);
  }
  return replaced;
}

}  // namespace tessera::compiler
