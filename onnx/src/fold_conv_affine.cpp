// Note [Affine into conv]
// A BatchNormalization after a Conv imports as conv2d -> mul.Tensor(per-channel scale) ->
// add.Tensor(per-channel shift), the scale and shift folded into constants at import. When the
// conv's weight and bias are weights of the program that nothing else reads, and each intermediate
// result has one reader, the scale goes into the weight (W'[o] = W[o] s[o]) and both into the bias
// (b'[o] = b[o] s[o] + t[o], a new constant when the conv had none), and the mul and add disappear:
// two passes over every conv output fewer per run, as ONNX Runtime does at load. Float32 and
// float64 only; the products are computed in float64 and rounded once, so the result differs from
// the unfolded graph by rounding only (the models' tests compare with ONNX Runtime).
#include <map>

#include "convert.h"
#include "tessera/ops.h"

namespace tessera::onnx::detail {

namespace {

using compiler::Argument;
using compiler::ExportedProgram;
using compiler::InputKind;
using compiler::Node;
using compiler::NodeKind;
using compiler::ValueId;

struct Uses {
  std::vector<int> count;
  explicit Uses(const ExportedProgram& ep) : count(ep.graph.values.size(), 0) {
    for (const Node& n : ep.graph.nodes)
      for (const Argument& a : n.args)
        for (ValueId v : a.values) ++count[size_t(v)];
    for (const auto& o : ep.signature.outputs) ++count[size_t(o.value)];
  }
};

// The weight a placeholder value holds, or null.
const Tensor* weight_of(const ExportedProgram& ep, ValueId v, std::string* name = nullptr) {
  for (const auto& in : ep.signature.inputs)
    if (in.value == v && in.kind != InputKind::UserInput) {
      auto w = ep.weights.find(in.name);
      if (w == ep.weights.end()) return nullptr;
      if (name) *name = in.name;
      return &w->second;
    }
  return nullptr;
}

// The per-output-channel values of `t` when it broadcasts along dim 1 only ([C], [C,1,1], [1,C,1,1]).
std::optional<Tensor> per_channel(const Tensor& t, int64_t channels, int64_t rank) {
  if (t.dim() > rank || t.numel() != channels) return std::nullopt;
  const int64_t lead = rank - t.dim();  // broadcast puts t's last dim at the output's last dim
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) != 1 && lead + d != 1) return std::nullopt;
  return t.reshape({channels}).to(kFloat64);
}

int64_t static_size(const ExportedProgram& ep, ValueId v, size_t d) {
  const auto& s = ep.graph.type(v).sizes;
  return d < s.size() && s[d].is_constant() ? s[d].constant() : -1;
}

}  // namespace

bool fold_affine_into_conv(ExportedProgram& ep) {
  bool changed = false;
  auto& nodes = ep.graph.nodes;
  std::vector<int32_t> producer(ep.graph.values.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (ValueId v : nodes[i].outputs) producer[size_t(v)] = int32_t(i);
  Uses uses(ep);
  std::vector<bool> erase(nodes.size(), false);
  std::vector<Node> new_placeholders;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& mul = nodes[i];
    if (mul.kind != NodeKind::Call || mul.target != "mul.Tensor" || mul.args.size() != 2) continue;
    const ValueId conv_out = mul.args[0].values.empty() ? -1 : mul.args[0].values[0];
    if (conv_out < 0 || producer[size_t(conv_out)] < 0 || uses.count[size_t(conv_out)] != 1) continue;
    Node& conv = nodes[size_t(producer[size_t(conv_out)])];
    if (conv.target != "conv2d" || conv.args.size() < 3) continue;
    const int64_t channels = static_size(ep, conv_out, 1);
    const DType dt = ep.graph.type(conv_out).dtype;
    if (channels <= 0 || (dt != kFloat32 && dt != kFloat64)) continue;
    std::string w_name, b_name;
    const ValueId w_value = conv.args[1].values.empty() ? -1 : conv.args[1].values[0];
    const Tensor* w = w_value < 0 ? nullptr : weight_of(ep, w_value, &w_name);
    const Tensor* s = mul.args[1].values.empty() ? nullptr : weight_of(ep, mul.args[1].values[0]);
    if (!w || !s || uses.count[size_t(w_value)] != 1 || w->dtype() != dt || w->dim() != 4 || w->size(0) != channels)
      continue;
    const bool has_bias = conv.args[2].kind == Argument::Kind::Tensor;
    const Tensor* b = has_bias ? weight_of(ep, conv.args[2].values[0], &b_name) : nullptr;
    if (has_bias && (!b || uses.count[size_t(conv.args[2].values[0])] != 1)) continue;
    std::optional<Tensor> scale = per_channel(*s, channels, 4);
    if (!scale || ep.graph.type(mul.outputs[0]).dtype != dt) continue;
    // An add of a per-channel constant reading the mul's result alone joins the fold.
    std::optional<Tensor> shift;
    size_t add_index = 0;
    const ValueId mul_out = mul.outputs[0];
    if (uses.count[size_t(mul_out)] == 1)
      for (size_t j = i + 1; j < nodes.size(); ++j) {
        const Node& add = nodes[j];
        if (add.kind != NodeKind::Call || add.target != "add.Tensor" || add.args.size() != 3 || add.args[0].values.empty() ||
            add.args[0].values[0] != mul_out)
          continue;
        const auto* alpha = std::get_if<int64_t>(&add.args[2].constant);
        const Tensor* t = add.args[1].values.empty() ? nullptr : weight_of(ep, add.args[1].values[0]);
        if (t && alpha && *alpha == 1 && ep.graph.type(add.outputs[0]).dtype == dt) {
          shift = per_channel(*t, channels, 4);
          add_index = j;
        }
        break;
      }
    // The new weight and bias, in float64, rounded once to the conv's dtype.
    const Tensor s64 = *scale;
    Tensor new_w = tessera::mul(w->to(kFloat64), s64.reshape({channels, 1, 1, 1})).to(dt);
    Tensor new_b = has_bias ? tessera::mul(b->to(kFloat64).reshape({channels}), s64) : tessera::zeros({channels}, tessera::dtype(kFloat64));
    if (shift) new_b = tessera::add(new_b, *shift);
    new_b = new_b.to(dt);
    ep.weights[w_name] = new_w;
    if (has_bias) {
      ep.weights[b_name] = new_b;
    } else {
      // A new constant for the bias; its placeholder joins the others after the loop, so no node
      // index moves while the graph is walked.
      std::string name;
      int n = 0;
      do name = "conv_bias_" + std::to_string(n++); while (ep.weights.count(name));
      compiler::TensorType type{dt, ep.graph.type(w_value).device, {compiler::SymSize(channels)}};
      const ValueId v = ep.graph.add_value(type, name);
      new_placeholders.push_back(Node{NodeKind::Placeholder, name, {}, {v}});
      ep.signature.inputs.push_back({InputKind::Constant, name, v});
      ep.weights[name] = new_b;
      uses.count.push_back(1);
      nodes[size_t(producer[size_t(conv_out)])].args[2] = Argument::tensor(v);
    }
    // Readers of the last folded result read the conv's output instead.
    const ValueId last = shift ? nodes[add_index].outputs[0] : mul_out;
    for (Node& n : nodes)
      for (Argument& a : n.args)
        for (ValueId& v : a.values)
          if (v == last) v = conv_out;
    for (auto& o : ep.signature.outputs)
      if (o.value == last) o.value = conv_out;
    uses.count[size_t(conv_out)] = uses.count[size_t(last)];
    uses.count[size_t(mul_out)] = 0;
    erase[i] = true;
    if (shift) erase[add_index] = true;
    changed = true;
  }
  if (!changed) return false;
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].kind != NodeKind::Placeholder && !new_placeholders.empty()) {
      for (Node& p : new_placeholders) kept.push_back(std::move(p));  // placeholders stay first
      new_placeholders.clear();
    }
    if (!erase[i]) kept.push_back(std::move(nodes[i]));
  }
  nodes = std::move(kept);
  return true;
}

}  // namespace tessera::onnx::detail
