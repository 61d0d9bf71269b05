// quantize_dynamic and the folding of packed weights: Note [Dynamic quantization] in
// tessera/compiler/quantize.h.
#include <limits>
#include <set>

#include "quant/lowering.h"
#include "tessera/compiler/passes.h"
#include "tessera/compiler/quantize.h"
#include "tessera/error.h"
#include "tessera/ops.h"
#include "tessera/quantization.h"

namespace tessera::quantization {

namespace {

// Drops the weights and constants that no node reads any more (with their placeholders).
void drop_unread_weights(ExportedProgram& ep) {
  std::set<ValueId> read;
  for (const Node& n : ep.graph.nodes)
    if (n.kind != NodeKind::Placeholder)
      for (const Argument& a : n.args) read.insert(a.values.begin(), a.values.end());
  for (const auto& o : ep.signature.outputs) read.insert(o.value);
  std::set<ValueId> dropped;
  std::vector<compiler::InputSpec> inputs;
  for (const compiler::InputSpec& in : ep.signature.inputs) {
    if (in.kind != InputKind::UserInput && !read.count(in.value)) {
      dropped.insert(in.value);
      ep.weights.erase(in.name);
      continue;
    }
    inputs.push_back(in);
  }
  ep.signature.inputs = std::move(inputs);
  std::vector<Node> nodes;
  for (Node& n : ep.graph.nodes)
    if (!(n.kind == NodeKind::Placeholder && dropped.count(n.outputs[0]))) nodes.push_back(std::move(n));
  ep.graph.nodes = std::move(nodes);
}

}  // namespace

ExportedProgram quantize_dynamic(const ExportedProgram& ep, DynamicOptions options) {
  ExportedProgram out = ep;
  Graph& g = out.graph;
  std::vector<std::vector<int32_t>> users(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const Argument& a : g.nodes[i].args)
      for (ValueId v : a.values) users[size_t(v)].push_back(int32_t(i));
  std::vector<bool> returned(g.values.size(), false);
  for (const auto& o : out.signature.outputs) returned[size_t(o.value)] = true;

  std::vector<Node> placeholders, body;
  std::set<size_t> fused_relus;
  std::map<ValueId, ValueId> replaced;  // a fused relu's output -> the dynamic linear's
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.kind == NodeKind::Placeholder) {
      placeholders.push_back(std::move(n));
      continue;
    }
    if (fused_relus.count(i)) continue;
    const ValueId w = tensor_at(n, 1);
    const compiler::InputSpec* win = n.kind == NodeKind::Call && is_op(n.target, op::linear::name) ? weight_input(out, w) : nullptr;
    const Tensor* weight = win ? &out.weights.at(win->name) : nullptr;
    const ValueId b = tensor_at(n, 2);
    const Tensor* bias = b >= 0 && weight_input(out, b) ? &out.weights.at(weight_input(out, b)->name) : nullptr;
    const bool takes = weight && weight->dim() == 2 && weight->dtype() == kFloat32 &&
                       g.type(tensor_at(n, 0)).dtype == kFloat32 &&
                       (b < 0 || (bias && bias->dim() == 1 && bias->dtype() == kFloat32));
    if (!takes) {
      for (Argument& a : n.args)
        for (ValueId& v : a.values)
          if (auto r = replaced.find(v); r != replaced.end()) v = r->second;
      body.push_back(std::move(n));
      continue;
    }
    // Weights: per output channel symmetric qint8, max|w_c| / 127.5 (PyTorch's
    // per_channel_dynamic_qconfig), quantized once; packed by _quantized_linear_prepack.
    Observer observer({kQInt8, Scheme::PerChannelSymmetric, ObserverKind::PerChannelMinMax, 0});
    observer.observe(*weight);
    std::vector<double> s = observer.scales();
    std::vector<float> scales(s.begin(), s.end());
    const int64_t n_out = weight->size(0);
    Tensor scale_t = tensor(scales, {n_out});
    Tensor w_int8 = int_repr(quantize_per_channel(*weight, scale_t, zeros({n_out}, kInt64), 0, kQInt8));
    const std::string weight_name = win->name;  // add_constant grows the signature
    const ValueId wq = add_constant(out, placeholders, weight_name + "_int8", w_int8);
    const ValueId ws = add_constant(out, placeholders, weight_name + "_scale", scale_t);
    const Tensor packed = PackedLinearWeight(w_int8, scale_t).packed();
    const ValueId pv = g.add_value(TensorType{kUInt8, Device(DeviceType::CPU),
                                              {SymSize(packed.size(0)), SymSize(packed.size(1))}});
    body.push_back({NodeKind::Call, op::_quantized_linear_prepack::name, {Argument::tensor(wq), Argument::tensor(ws)}, {pv}});
    // A relu that only reads the linear's output runs inside the kernel.
    ValueId end = n.outputs[0];
    bool relu = false;
    if (!returned[size_t(end)] && users[size_t(end)].size() == 1) {
      const size_t r = size_t(users[size_t(end)][0]);
      if (is_op(g.nodes[r].target, op::relu::name)) {
        relu = true;
        fused_relus.insert(r);
        replaced[g.nodes[r].outputs[0]] = end;
      }
    }
    ValueId x = tensor_at(n, 0);
    if (auto r = replaced.find(x); r != replaced.end()) x = r->second;
    body.push_back({NodeKind::Call, op::_quantized_linear_dynamic::name,
                    {Argument::tensor(x), Argument::tensor(pv), b < 0 ? Argument::none() : Argument::tensor(b),
                     Argument::constant_value(options.reduce_range), Argument::constant_value(relu)},
                    {end}});
  }
  for (auto& o : out.signature.outputs)
    if (auto r = replaced.find(o.value); r != replaced.end()) o.value = r->second;
  set_nodes(g, std::move(placeholders), std::move(body));
  drop_unread_weights(out);
  compiler::verify(out);
  return out;
}

int fold_packed_weights(ExportedProgram& ep) {
  Graph& g = ep.graph;
  std::vector<Node> placeholders, body;
  std::map<ValueId, ValueId> replaced;
  int folded = 0, packed_count = 0;
  for (Node& n : g.nodes) {
    if (n.kind == NodeKind::Placeholder) {
      placeholders.push_back(std::move(n));
      continue;
    }
    const compiler::InputSpec *w = nullptr, *s = nullptr;
    if (n.kind == NodeKind::Call && is_op(n.target, op::_quantized_linear_prepack::name)) {
      w = weight_input(ep, tensor_at(n, 0));
      s = weight_input(ep, tensor_at(n, 1));
    }
    if (!w || !s) {
      for (Argument& a : n.args)
        for (ValueId& v : a.values)
          if (auto r = replaced.find(v); r != replaced.end()) v = r->second;
      body.push_back(std::move(n));
      continue;
    }
    const Tensor packed = PackedLinearWeight(ep.weights.at(w->name), ep.weights.at(s->name)).packed();
    replaced[n.outputs[0]] = add_constant(ep, placeholders, next_packed_weight_name(ep, packed_count), packed);
    ++folded;
  }
  if (folded == 0) {
    set_nodes(g, std::move(placeholders), std::move(body));
    return 0;
  }
  for (auto& o : ep.signature.outputs)
    if (auto r = replaced.find(o.value); r != replaced.end()) o.value = r->second;
  set_nodes(g, std::move(placeholders), std::move(body));
  drop_unread_weights(ep);
  compiler::verify(ep);
  return folded;
}

}  // namespace tessera::quantization
