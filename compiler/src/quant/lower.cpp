// lower_to_int8: quantized linear patterns of a converted program onto the int8 kernels, after the
// conv2d patterns (lower_conv.cpp) and before the folding of packed weights (dynamic.cpp); Note
// [Quantization flow] in tessera/compiler/quantize.h.
#include <algorithm>
#include <set>

#include "quant/lowering.h"
#include "tessera/compiler/passes.h"
#include "tessera/compiler/quantize.h"
#include "tessera/error.h"
#include "tessera/ops.h"
#include "tessera/quantization.h"

namespace tessera::quantization {

namespace {

// One matched dequantize -> linear (-> relu) -> quantize.
struct Match {
  size_t linear_node;
  size_t quantize_node;  // the closing quantize_per_tensor
  ValueId input_q;       // the quint8 value the linear's input dequantizes
  ValueId input_float;   // the float32 value quantize_per_tensor made input_q from
  double input_scale;
  int64_t input_zp;
  Tensor packed;
  ValueId bias;  // -1: none
  double output_scale;
  int64_t output_zp;
  bool relu;
};

int lower_linear_patterns(ExportedProgram& ep) {
  Graph& g = ep.graph;
  const GraphUses uses(ep);
  const auto& users = uses.users;
  const auto& returned = uses.returned;

  std::vector<Match> matches;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& lin = g.nodes[i];
    if (lin.kind != NodeKind::Call || !is_op(lin.target, op::linear::name)) continue;
    const std::optional<GraphUses::Int8Operands> operands = uses.int8_operands(lin, 2);
    if (!operands) continue;
    const std::optional<GraphUses::QuantizedEnd> end = uses.quantized_end(lin.outputs[0]);
    if (!end) continue;
    const Node& q = *operands->input_quantize;
    const std::pair<double, int64_t> in = *quint8_params(q);
    const auto [w_int8, scales] = operands->weight.quantize();
    matches.push_back({i, end->quantize_node, q.outputs[0], tensor_at(q, 0), in.first, in.second,
                       PackedLinearWeight(w_int8, scales).packed(), operands->bias, end->params.first,
                       end->params.second, end->relu});
  }
  if (matches.empty()) return 0;

  // Note [Lowered int8 boundaries]: a lowered linear whose input nothing lowered produces reads the
  // float32 values and quantizes them inside the kernel (no quantize_per_tensor and int_repr
  // passes); one whose result only dequantize reads (no lowered linear takes it) writes those
  // float32 values itself (out_dtype quint8) instead of uint8 and three elementwise passes. Both
  // compute the same numbers as the nodes they replace.
  std::set<size_t> lowered_linears;
  std::set<ValueId> read_as_repr;  // quint8 values a lowered linear takes as its input
  for (const Match& m : matches) {
    lowered_linears.insert(m.linear_node);
    read_as_repr.insert(m.input_q);
  }
  auto read_as_float = [&](ValueId q_out) {
    for (int32_t d : users[size_t(q_out)]) {
      if (!is_op(g.nodes[size_t(d)].target, op::dequantize::name)) continue;
      const ValueId dv = g.nodes[size_t(d)].outputs[0];
      if (returned[size_t(dv)]) return true;
      for (int32_t u : users[size_t(dv)])
        if (!lowered_linears.count(size_t(u))) return true;
    }
    return false;
  };

  // Rebuild the node list: packed weights as constant inputs after the placeholders, each
  // _quantized_linear where its closing quantize was, and the uint8 representation passed along.
  std::map<ValueId, ValueId> repr;  // quint8 value -> its uint8 representation
  std::map<ValueId, std::pair<double, int64_t>> repr_params;
  std::map<ValueId, ValueId> dequantized;  // quint8 value -> its float32 values, written by the kernel
  int packed_count = 0;
  auto lower_match = [&](const Match& mt, const Node& n, RebuiltNodes& rebuilt) {
    const ValueId pv = add_constant(ep, rebuilt.placeholders, next_packed_weight_name(ep, packed_count), mt.packed);
    auto r = repr.find(mt.input_q);
    const ValueId in = r != repr.end() ? r->second : mt.input_float;
    const ValueId q_out = n.outputs[0];
    const bool float_out = !read_as_repr.count(q_out) && read_as_float(q_out);
    TensorType out_t = g.type(q_out);
    out_t.dtype = float_out ? kFloat32 : kUInt8;
    const ValueId out = g.add_value(out_t);
    rebuilt.body.push_back({NodeKind::Call, op::_quantized_linear::name,
                            {Argument::tensor(in), Argument::tensor(pv), mt.bias < 0 ? Argument::none() : Argument::tensor(mt.bias),
                             Argument::constant_value(mt.input_scale), Argument::constant_value(mt.input_zp),
                             Argument::constant_value(mt.output_scale), Argument::constant_value(mt.output_zp),
                             Argument::constant_value(mt.relu), Argument::constant_value(float_out ? kQUInt8 : kUInt8)},
                            {out}});
    if (float_out) {
      dequantized[q_out] = out;
    } else {
      repr[q_out] = out;
      repr_params[q_out] = {mt.output_scale, mt.output_zp};
    }
  };
  RebuiltNodes nodes = rebuild_at_matches(g, matches, lower_match);
  // A dequantize of a lowered result reads the kernel's float32 values, or the representation:
  // (float(r) - zero_point) * scale.
  std::vector<Node> rewritten;
  std::map<ValueId, ValueId> replaced;
  for (Node& n : nodes.body) {
    const ValueId src = is_op(n.target, op::dequantize::name) ? tensor_at(n, 0) : -1;
    if (auto d = src >= 0 ? dequantized.find(src) : dequantized.end(); d != dequantized.end()) {
      replaced[n.outputs[0]] = d->second;
      rewritten.push_back(std::move(n));
      continue;
    }
    auto p = src >= 0 ? repr_params.find(src) : repr_params.end();
    if (p == repr_params.end()) {
      rewritten.push_back(std::move(n));
      continue;
    }
    const TensorType t = g.type(n.outputs[0]);
    const ValueId f = g.add_value(t), shifted = g.add_value(t), scaled = g.add_value(t);
    rewritten.push_back({NodeKind::Call, op::_to_copy::name, {Argument::tensor(repr.at(src)), Argument::constant_value(kFloat32)}, {f}});
    rewritten.push_back({NodeKind::Call, op::sub_Tensor::name,
                         {Argument::tensor(f), Argument::constant_value(double(p->second.second)), Argument::constant_value(int64_t(1))},
                         {shifted}});
    rewritten.push_back({NodeKind::Call, op::mul_Tensor::name, {Argument::tensor(shifted), Argument::constant_value(p->second.first)}, {scaled}});
    replaced[n.outputs[0]] = scaled;
    rewritten.push_back(std::move(n));
  }
  nodes.body = std::move(rewritten);
  // The linears that read a lowered dequantize now read the representation directly. Weights no
  // node reads any more (the float weights of lowered linears) stay inputs of the signature; the
  // float computations nothing reads go.
  install_lowered(ep, std::move(nodes), replaced, op::_quantized_linear::name);
  return int(matches.size());
}

}  // namespace

const compiler::InputSpec* weight_input(const ExportedProgram& ep, ValueId v) {
  for (const compiler::InputSpec& in : ep.signature.inputs)
    if (in.value == v && in.kind != InputKind::UserInput && ep.weights.count(in.name)) return &in;
  return nullptr;
}

std::vector<int> add_observed_outputs(ExportedProgram& ep, const std::map<QuantPoint, int>& point_class) {
  Node& output = ep.graph.nodes.back();
  TESSERA_INTERNAL_ASSERT(output.kind == NodeKind::Output, "add_observed_outputs: the program does not end in its output");
  std::vector<int> classes;
  std::set<std::pair<ValueId, int>> seen;
  for (const auto& [pt, c] : point_class) {
    if (weight_input(ep, pt.value) || !seen.insert({pt.value, c}).second) continue;
    ep.signature.outputs.push_back({"observed_" + std::to_string(classes.size()), pt.value});
    output.args.push_back(Argument::tensor(pt.value));
    classes.push_back(c);
  }
  return classes;
}

ValueId add_constant(ExportedProgram& ep, std::vector<Node>& placeholders, const std::string& base, const Tensor& t) {
  std::string name = base;
  for (int i = 1; ep.weights.count(name); ++i) name = base + "_" + std::to_string(i);
  std::vector<SymSize> sizes;
  for (int64_t s : t.sizes()) sizes.emplace_back(s);
  const ValueId v = ep.graph.add_value(TensorType{t.dtype(), Device(DeviceType::CPU), std::move(sizes)}, name);
  ep.weights[name] = t;
  ep.signature.inputs.push_back({InputKind::Constant, name, v});
  placeholders.push_back({NodeKind::Placeholder, name, {}, {v}});
  return v;
}

std::string next_packed_weight_name(const ExportedProgram& ep, int& count) {
  std::string name;
  do name = "packed_weight_" + std::to_string(count++); while (ep.weights.count(name));
  return name;
}

void set_nodes(Graph& g, std::vector<Node> placeholders, std::vector<Node> body) {
  g.nodes = std::move(placeholders);
  for (Node& n : body) g.nodes.push_back(std::move(n));
}

void install_lowered(ExportedProgram& ep, RebuiltNodes nodes, const std::map<ValueId, ValueId>& replaced,
                     std::string_view unchanged_op) {
  for (Node& n : nodes.body)
    if (unchanged_op.empty() || !is_op(n.target, unchanged_op))
      for (Argument& a : n.args)
        for (ValueId& v : a.values)
          if (auto r = replaced.find(v); r != replaced.end()) v = r->second;
  for (auto& o : ep.signature.outputs)
    if (auto r = replaced.find(o.value); r != replaced.end()) o.value = r->second;
  set_nodes(ep.graph, std::move(nodes.placeholders), std::move(nodes.body));
  compiler::eliminate_dead_code(ep);
  compiler::verify(ep);
}

GraphUses::GraphUses(const ExportedProgram& program)
    : ep(program), producer(program.graph.values.size(), -1), users(program.graph.values.size()),
      returned(program.graph.values.size(), false) {
  const Graph& g = ep.graph;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (ValueId v : g.nodes[i].outputs) producer[size_t(v)] = int32_t(i);
    for (const Argument& a : g.nodes[i].args)
      for (ValueId v : a.values) users[size_t(v)].push_back(int32_t(i));
  }
  for (const auto& o : ep.signature.outputs) returned[size_t(o.value)] = true;
}

const Tensor* GraphUses::weight(ValueId v) const {
  for (const auto& in : ep.signature.inputs)
    if (in.value == v && in.kind != InputKind::UserInput) return &ep.weights.at(in.name);
  return nullptr;
}

const Node* GraphUses::call(ValueId v, const char* op) const {
  if (v < 0 || producer[size_t(v)] < 0) return nullptr;
  const Node& n = ep.graph.nodes[size_t(producer[size_t(v)])];
  return n.kind == NodeKind::Call && is_op(n.target, op) ? &n : nullptr;
}

int32_t GraphUses::sole_user(ValueId v, const char* op) const {
  if (returned[size_t(v)] || users[size_t(v)].size() != 1) return -1;
  const int32_t u = users[size_t(v)][0];
  return is_op(ep.graph.nodes[size_t(u)].target, op) ? u : -1;
}

std::optional<std::pair<double, int64_t>> quint8_params(const Node& q) {
  if (!constant_at<double>(q, 1) || !constant_at<int64_t>(q, 2) || !constant_at<DType>(q, 3) ||
      *constant_at<DType>(q, 3) != kQUInt8)
    return std::nullopt;
  return std::make_pair(*constant_at<double>(q, 1), *constant_at<int64_t>(q, 2));
}

std::pair<Tensor, Tensor> SymmetricWeight::quantize() const {
  Tensor s = scales->to(kFloat32).contiguous();
  return {int_repr(quantize_per_channel(*w, s, *zero_points, 0, kQInt8)), s};
}

const Node* GraphUses::quint8_quantize(ValueId v) const {
  const Node* dq = call(v, op::dequantize::name);
  const Node* q = dq ? call(tensor_at(*dq, 0), op::quantize_per_tensor::name) : nullptr;
  return q && quint8_params(*q) ? q : nullptr;
}

std::optional<SymmetricWeight> GraphUses::symmetric_weight(ValueId v, int64_t rank) const {
  const Node* wdq = call(v, op::dequantize::name);
  const Node* wq = wdq ? call(tensor_at(*wdq, 0), op::quantize_per_channel::name) : nullptr;
  if (!wq || !constant_at<int64_t>(*wq, 3) || *constant_at<int64_t>(*wq, 3) != 0 || !constant_at<DType>(*wq, 4) ||
      *constant_at<DType>(*wq, 4) != kQInt8)
    return std::nullopt;
  const SymmetricWeight sw{weight(tensor_at(*wq, 0)), weight(tensor_at(*wq, 1)), weight(tensor_at(*wq, 2))};
  if (!sw.w || !sw.scales || !sw.zero_points || sw.w->dim() != rank || sw.w->dtype() != kFloat32) return std::nullopt;
  if (!equal(*sw.zero_points, zeros({sw.zero_points->numel()}, sw.zero_points->dtype()))) return std::nullopt;
  return sw;
}

std::optional<ValueId> GraphUses::float32_bias(const Node& n) const {
  if (n.args.size() <= 2 || n.args[2].kind != Argument::Kind::Tensor) return ValueId(-1);
  const ValueId bias = n.args[2].values[0];
  const Tensor* b = weight(bias);
  if (!b || b->dtype() != kFloat32 || b->dim() != 1) return std::nullopt;
  return bias;
}

std::optional<GraphUses::Int8Operands> GraphUses::int8_operands(const Node& n, int64_t weight_rank) const {
  const Node* q = quint8_quantize(tensor_at(n, 0));
  if (!q) return std::nullopt;
  std::optional<SymmetricWeight> weight = symmetric_weight(tensor_at(n, 1), weight_rank);
  if (!weight) return std::nullopt;
  const std::optional<ValueId> bias = float32_bias(n);
  if (!bias) return std::nullopt;
  return Int8Operands{q, *weight, *bias};
}

std::optional<GraphUses::QuantizedEnd> GraphUses::quantized_end(ValueId v) const {
  bool relu = false;
  if (int32_t r = sole_user(v, op::relu::name); r >= 0) {
    relu = true;
    v = ep.graph.nodes[size_t(r)].outputs[0];
  }
  const int32_t qo = sole_user(v, op::quantize_per_tensor::name);
  if (qo < 0) return std::nullopt;
  const std::optional<std::pair<double, int64_t>> params = quint8_params(ep.graph.nodes[size_t(qo)]);
  if (!params) return std::nullopt;
  return QuantizedEnd{size_t(qo), *params, relu};
}

int lower_to_int8(ExportedProgram& ep) {
  const int convs = lower_conv_patterns(ep);
  const int linears = lower_linear_patterns(ep);
  return convs + linears + fold_packed_weights(ep);
}

}  // namespace tessera::quantization
