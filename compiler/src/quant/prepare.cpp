// prepare, calibrate and convert: Note [Quantization flow] in tessera/compiler/quantize.h.
#include <algorithm>
#include <set>

#include "tessera/compiler/passes.h"
#include "tessera/compiler/quantize.h"
#include "tessera/error.h"
#include "tessera/ops.h"
#include "quant/lowering.h"

namespace tessera::quantization {

namespace {

std::string node_text(const Graph& g, int32_t node) {
  const Node& n = g.nodes.at(size_t(node));
  return "node " + std::to_string(node) + " ('" + n.target + "'" +
         (n.outputs.empty() ? std::string() : ", " + g.value_name(n.outputs[0])) + ")";
}

std::string point_text(const Graph& g, const QuantPoint& p) {
  if (p.consumer < 0) return "the output " + g.value_name(p.value);
  return "input " + g.value_name(p.value) + " of " + node_text(g, p.consumer);
}


// The weight or constant a placeholder value holds, or null for user inputs and computed values.
const Tensor* weight_of(const ExportedProgram& ep, ValueId v) {
  const compiler::InputSpec* in = weight_input(ep, v);
  return in ? &ep.weights.at(in->name) : nullptr;
}
struct UnionFind {
  std::vector<int> parent;
  int add() {
    parent.push_back(int(parent.size()));
    return parent.back();
  }
  int find(int x) {
    while (parent[size_t(x)] != x) x = parent[size_t(x)] = parent[size_t(parent[size_t(x)])];
    return x;
  }
  void join(int a, int b) { parent[size_t(find(a))] = find(b); }
};

void validate_spec(const ExportedProgram& ep, const QuantPoint& p, const QuantizationSpec& s, const std::string& by) {
  const Graph& g = ep.graph;
  const TensorType& t = g.type(p.value);
  const std::string where = point_text(g, p) + " (annotated by '" + by + "')";
  TESSERA_CHECK(s.dtype == kQInt8 || s.dtype == kQUInt8, "prepare: ", where, " asks for ", dtype_name(s.dtype),
                "; quantization specs take qint8 or quint8");
  TESSERA_CHECK(t.dtype == kFloat32, "prepare: ", where, " is ", dtype_name(t.dtype), "; only float32 values are quantized");
  TESSERA_CHECK(is_per_channel(s.scheme) == (s.observer == ObserverKind::PerChannelMinMax), "prepare: ", where, ": ",
                s.str(), " pairs a scheme with the wrong observer; per-channel schemes take per_channel_min_max");
  if (is_per_channel(s.scheme)) {
    TESSERA_CHECK(weight_of(ep, p.value), "prepare: ", where, ": ", s.str(),
                  " applies to weights and constants only; use a per-tensor spec for activations");
    TESSERA_CHECK(s.ch_axis >= 0 && s.ch_axis < int64_t(t.sizes.size()), "prepare: ", where, ": axis ", s.ch_axis,
                  " is outside 0..", int64_t(t.sizes.size()) - 1);
  }
}

// Quantize then dequantize `v` with the parameters of `obs`; per-channel parameters become constant
// inputs named after the value.
ValueId emit_quant_dequant(ExportedProgram& out, std::vector<Node>& body, std::vector<Node>& new_placeholders,
                           ValueId v, const Observer& obs) {
  Graph& g = out.graph;
  const QuantizationSpec& s = obs.spec();
  const TensorType t = g.type(v);
  TensorType qt = t;
  qt.dtype = s.dtype;
  const ValueId q = g.add_value(qt);
  if (is_per_channel(s.scheme)) {
    std::vector<double> scales = obs.scales();
    std::vector<float> scales_f(scales.begin(), scales.end());
    std::vector<int64_t> zps = obs.zero_points();
    const std::string stem = g.values[size_t(v)].name.empty() ? "v" + std::to_string(v) : g.values[size_t(v)].name;
    const int64_t n = int64_t(scales_f.size());
    const ValueId sv = add_constant(out, new_placeholders, stem + "_scale", tensor(scales_f, {n}));
    const ValueId zv = add_constant(out, new_placeholders, stem + "_zero_point", tensor(zps, {n}));
    body.push_back({NodeKind::Call, op::quantize_per_channel::name,
                    {Argument::tensor(v), Argument::tensor(sv), Argument::tensor(zv),
                     Argument::constant_value(s.ch_axis), Argument::constant_value(s.dtype)},
                    {q}});
  } else {
    body.push_back({NodeKind::Call, op::quantize_per_tensor::name,
                    {Argument::tensor(v), Argument::constant_value(obs.scales()[0]),
                     Argument::constant_value(obs.zero_points()[0]), Argument::constant_value(s.dtype)},
                    {q}});
  }
  const ValueId dq = g.add_value(t);
  body.push_back({NodeKind::Call, op::dequantize::name, {Argument::tensor(q)}, {dq}});
  return dq;
}

}  // namespace

Quantizer::~Quantizer() = default;

void Annotations::set(const ExportedProgram& ep, int32_t node, NodeAnnotation a, const std::string& quantizer) {
  const Graph& g = ep.graph;
  TESSERA_CHECK(node >= 0 && size_t(node) < g.nodes.size() && g.nodes[size_t(node)].kind == NodeKind::Call,
                "quantizer '", quantizer, "' annotates node ", node, ", which is not a call of the program (",
                g.nodes.size(), " nodes)");
  auto it = by_node_.find(node);
  if (it != by_node_.end()) {
    TESSERA_CHECK(it->second.second == quantizer || it->second.first == a, "quantizer '", quantizer,
                  "' changes the annotation of ", node_text(g, node), " made by quantizer '", it->second.second,
                  "'; a later quantizer must leave earlier annotations as they are (skip annotated nodes)");
    it->second = {std::move(a), it->second.second};
    return;
  }
  by_node_.emplace(node, std::make_pair(std::move(a), quantizer));
}

const NodeAnnotation* Annotations::find(int32_t node) const {
  auto it = by_node_.find(node);
  return it == by_node_.end() ? nullptr : &it->second.first;
}

const std::string& Annotations::quantizer_of(int32_t node) const {
  static const std::string none;
  auto it = by_node_.find(node);
  return it == by_node_.end() ? none : it->second.second;
}

PreparedProgram prepare(const ExportedProgram& ep, const Quantizer& quantizer) { return prepare(ep, {&quantizer}); }

PreparedProgram prepare(const ExportedProgram& ep, const std::vector<const Quantizer*>& quantizers) {
  compiler::verify(ep);
  PreparedProgram p;
  p.program = ep;
  const Graph& g = p.program.graph;
  for (const Quantizer* q : quantizers) {
    TESSERA_CHECK(q, "prepare: quantizer list holds a null pointer");
    q->annotate(p.program, p.annotations);
  }

  // Validate every spec and collect the points with the spec (or share) each carries.
  std::map<QuantPoint, int> index;
  std::vector<QuantPoint> points;
  std::vector<const SpecOrShared*> specs;
  std::vector<const std::string*> owners;
  for (const auto& [node, entry] : p.annotations.all()) {
    // Plain references, not a structured binding: the lambda below captures them (clang refuses
    // to capture a binding before C++20's P1091 support).
    const auto& a = entry.first;
    const auto& by = entry.second;
    const Node& n = g.nodes.at(size_t(node));
    auto add = [&](const QuantPoint& pt, const SpecOrShared& s) {
      if (auto* spec = std::get_if<QuantizationSpec>(&s)) validate_spec(p.program, pt, *spec, by);
      index.emplace(pt, int(points.size()));
      points.push_back(pt);
      specs.push_back(&s);
      owners.push_back(&by);
    };
    for (const auto& [v, s] : a.inputs) {
      bool is_input = false;
      for (const Argument& arg : n.args)
        is_input = is_input || std::find(arg.values.begin(), arg.values.end(), v) != arg.values.end();
      TESSERA_CHECK(is_input, "prepare: quantizer '", by, "' annotates value ", v, " as an input of ", node_text(g, node),
                    ", which does not take it");
      add(QuantPoint::input(v, node), s);
    }
    if (a.output) {
      TESSERA_CHECK(n.outputs.size() == 1, "prepare: quantizer '", by, "' annotates the output of ", node_text(g, node),
                    ", which has ", n.outputs.size(), " outputs; only single-output nodes are quantized");
      add(QuantPoint::output(n.outputs[0]), *a.output);
    }
  }

  // Join shared points first. Then join, when their groups ask for the same spec, an input edge with
  // its producer's output and the input edges of one value: one observer, one quantize / dequantize.
  UnionFind uf;
  for (size_t i = 0; i < points.size(); ++i) uf.add();
  for (size_t i = 0; i < points.size(); ++i) {
    auto* shared = std::get_if<SharedSpec>(specs[i]);
    if (!shared) continue;
    auto it = index.find(shared->with);
    TESSERA_CHECK(it != index.end(), "prepare: ", point_text(g, points[i]), " (annotated by '", *owners[i],
                  "') shares the parameters of ", point_text(g, shared->with), ", which no annotation quantizes");
    uf.join(int(i), it->second);
  }
  std::map<int, const QuantizationSpec*> group_spec;
  for (size_t i = 0; i < points.size(); ++i)
    if (auto* spec = std::get_if<QuantizationSpec>(specs[i])) group_spec.emplace(uf.find(int(i)), spec);
  auto spec_of = [&](int i) -> const QuantizationSpec* {
    auto it = group_spec.find(uf.find(i));
    return it == group_spec.end() ? nullptr : it->second;
  };
  std::map<ValueId, int> first_edge;
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].consumer < 0) continue;
    const QuantizationSpec* mine = spec_of(int(i));
    if (!mine) continue;
    auto out = index.find(QuantPoint::output(points[i].value));
    if (out != index.end() && spec_of(out->second) && *spec_of(out->second) == *mine) uf.join(int(i), out->second);
    auto [edge, fresh] = first_edge.emplace(points[i].value, int(i));
    if (!fresh && spec_of(edge->second) && *spec_of(edge->second) == *mine) uf.join(int(i), edge->second);
  }
  std::map<int, int> class_of_root;
  std::vector<std::optional<size_t>> class_spec;  // the point whose concrete spec the class takes
  for (size_t i = 0; i < points.size(); ++i) {
    auto [it, fresh] = class_of_root.emplace(uf.find(int(i)), int(class_spec.size()));
    if (fresh) class_spec.emplace_back();
    const int c = it->second;
    p.point_class[points[i]] = c;
    if (!std::holds_alternative<QuantizationSpec>(*specs[i])) continue;
    std::optional<size_t>& first = class_spec[size_t(c)];
    if (!first) {
      first = i;
      continue;
    }
    // Shared specs point at one point each, so a group holds at most one spec of its own, and
    // groups are joined above only when their specs are equal.
    TESSERA_INTERNAL_ASSERT(*specs[*first] == *specs[i], "prepare: ", point_text(g, points[*first]), " and ",
                            point_text(g, points[i]), " are one group with two different specs");
  }
  for (size_t c = 0; c < class_spec.size(); ++c) {
    if (class_spec[c]) {
      p.observers.emplace_back(std::get<QuantizationSpec>(*specs[*class_spec[c]]));
      continue;
    }
    for (size_t i = 0; i < points.size(); ++i)
      TESSERA_CHECK(p.point_class[points[i]] != int(c), "prepare: ", point_text(g, points[i]), " (annotated by '",
                    *owners[i], "') shares parameters only with shared specs; give one point of the group a QuantizationSpec");
  }

  // Observe weights now; every other observed value becomes an extra output of the calibration copy.
  p.calibration_program = p.program;
  p.num_program_outputs = p.program.signature.outputs.size();
  std::set<std::pair<ValueId, int>> seen;
  for (const auto& [pt, c] : p.point_class)
    if (const Tensor* w = weight_of(p.program, pt.value); w && seen.insert({pt.value, c}).second)
      p.observers[size_t(c)].observe(*w);
  p.calibration_class = add_observed_outputs(p.calibration_program, p.point_class);
  return p;
}

void calibrate(PreparedProgram& prepared, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outs = prepared.calibration_program.run(inputs);
  for (size_t k = 0; k < prepared.calibration_class.size(); ++k)
    prepared.observers[size_t(prepared.calibration_class[k])].observe(outs.at(prepared.num_program_outputs + k));
}

ExportedProgram convert(const PreparedProgram& prepared) {
  ExportedProgram out = prepared.program;
  std::vector<Node> extra_placeholders;  // weights quantized per channel get their own, after the program's
  RebuiltNodes nodes = rewrite_quant_points(out, prepared.point_class, [&](ValueId v, int c, RebuiltNodes& n) {
    return emit_quant_dequant(out, n.body, extra_placeholders, v, prepared.observers.at(size_t(c)));
  });
  for (Node& n : extra_placeholders) nodes.placeholders.push_back(std::move(n));
  set_nodes(out.graph, std::move(nodes.placeholders), std::move(nodes.body));
  compiler::verify(out);
  return out;
}

}  // namespace tessera::quantization
