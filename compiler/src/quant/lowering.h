// Internal to the quantization passes (compiler/src/quant): the IR names they use and the parts of
// lower_to_int8.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "tessera/compiler/ir.h"
#include "tessera/compiler/quantize.h"
#include "tessera/op_info.h"
#include "tessera/op_names.h"

namespace tessera::quantization {

using compiler::Argument;
using compiler::Graph;
using compiler::InputKind;
using compiler::Node;
using compiler::NodeKind;
using compiler::SymSize;
using compiler::TensorType;
using compiler::ValueId;

// True when `target` names the op `name` of the contract (op::<op>::name of tessera/op_names.h), by
// its full name or by a base name that names it (Note [OpInfo]).
inline bool is_op(std::string_view target, std::string_view name) {
  const op::OpInfo* info = op::find_op_info(target);
  return info && name == info->name;
}

// Argument i of `n` when it is a constant of type T; null otherwise.
template <typename T>
const T* constant_at(const Node& n, size_t i) {
  if (i >= n.args.size() || n.args[i].kind != Argument::Kind::Constant) return nullptr;
  return std::get_if<T>(&n.args[i].constant);
}

// The value of argument i of `n` when it is a tensor; -1 otherwise.
inline ValueId tensor_at(const Node& n, size_t i) {
  return i < n.args.size() && n.args[i].kind == Argument::Kind::Tensor ? n.args[i].values[0] : -1;
}

// A quint8 per-tensor quantize_per_tensor with constant parameters: (scale, zero point); nullopt
// for any other node.
std::optional<std::pair<double, int64_t>> quint8_params(const Node& q);

// The constants of dequantize(quantize_per_channel(w, scales, zero points, 0, qint8)) with every
// zero point 0 (the x86 quantizer's weights), and the int8 values of w they give.
struct SymmetricWeight {
  const Tensor* w;
  const Tensor* scales;
  const Tensor* zero_points;
  // (int8 values, float32 scales): w quantized per output channel.
  std::pair<Tensor, Tensor> quantize() const;
};

// Who produces and who reads each value of a program: what the lowering passes' pattern matches ask.
struct GraphUses {
  explicit GraphUses(const compiler::ExportedProgram& ep);
  // The constant input (weight or buffer) that is `v`; null for anything else.
  const Tensor* weight(compiler::ValueId v) const;
  // The call node of `op` that produces `v`; null when another node, or none, does.
  const compiler::Node* call(compiler::ValueId v, const char* op) const;
  // The index of the only node that reads `v` when it is a call of `op` and `v` is not returned; else -1.
  int32_t sole_user(compiler::ValueId v, const char* op) const;
  // The quantize node when `v` is dequantize(quantize_per_tensor(x, ...)) with quint8_params; else null.
  const compiler::Node* quint8_quantize(compiler::ValueId v) const;
  // `v` as a SymmetricWeight of a float32 constant w of rank `rank`; nullopt for anything else.
  std::optional<SymmetricWeight> symmetric_weight(compiler::ValueId v, int64_t rank) const;
  // The bias (argument 2) of a linear or conv2d node: -1 when absent, its value when it is a 1-D
  // float32 constant, nullopt when it is anything else.
  std::optional<compiler::ValueId> float32_bias(const compiler::Node& n) const;

  // The operands of a linear or conv2d node that lower_to_int8 takes: the input (argument 0) a
  // quint8_quantize, the weight (argument 1) a symmetric_weight of rank `weight_rank`, the bias a
  // float32_bias.
  struct Int8Operands {
    const compiler::Node* input_quantize;
    SymmetricWeight weight;
    compiler::ValueId bias;  // -1: none
  };
  std::optional<Int8Operands> int8_operands(const compiler::Node& n, int64_t weight_rank) const;
  // The end of a lowered pattern whose float32 result is `v`: (relu ->) quantize_per_tensor with
  // quint8_params, each the only reader of the value before it; nullopt for anything else.
  struct QuantizedEnd {
    size_t quantize_node;
    std::pair<double, int64_t> params;
    bool relu;
  };
  std::optional<QuantizedEnd> quantized_end(compiler::ValueId v) const;

  const compiler::ExportedProgram& ep;
  std::vector<int32_t> producer;            // per value: its node, -1 for inputs
  std::vector<std::vector<int32_t>> users;  // per value: the nodes that read it
  std::vector<bool> returned;               // per value: a program output
};

// Whether `s` quantizes per channel (per_channel_affine, per_channel_symmetric).
inline bool is_per_channel(Scheme s) { return s == Scheme::PerChannelAffine || s == Scheme::PerChannelSymmetric; }

// The signature entry of a weight or constant placeholder value (one `ep.weights` holds), or null
// for user inputs and computed values.
const compiler::InputSpec* weight_input(const compiler::ExportedProgram& ep, ValueId v);

// Appends to the program's outputs (its Output node, the last) the value of every quantization
// point in `point_class` that is not a weight, once per (value, class), named observed_<k>; returns
// the class of each appended output, in order. What the observers of calibration and of
// quantization-aware training see.
std::vector<int> add_observed_outputs(compiler::ExportedProgram& ep, const std::map<QuantPoint, int>& point_class);

// Adds `t` as a constant input named `base` (base_1, base_2, ... when a weight has that name): a
// weight, a signature entry, and a placeholder appended to `placeholders`. Returns its value.
ValueId add_constant(compiler::ExportedProgram& ep, std::vector<Node>& placeholders, const std::string& base,
                     const Tensor& t);

// "packed_weight_<count>" for the first count, from `count` up, that names no weight of `ep`;
// `count` moves past it.
std::string next_packed_weight_name(const compiler::ExportedProgram& ep, int& count);

// Makes the node list of `g` the placeholders (old, then new), then the body.
void set_nodes(Graph& g, std::vector<Node> placeholders, std::vector<Node> body);

// The node list a lowering pass rebuilds: the placeholders first (the constant inputs the pass
// makes join them), then the other nodes in their order.
struct RebuiltNodes {
  std::vector<Node> placeholders, body;
};

// The walk of Note [Quantization flow] step 4, shared by convert and prepare_qat: moves the nodes
// of ep's graph into a RebuiltNodes in order, where an input edge in `point_class` reads
// replace(value, class, nodes) instead of the value, and so does every use of a value whose output
// is in `point_class` after its node; replace appends what it makes (body nodes, placeholders) and
// runs once per value and class. The program's outputs follow their replacements.
template <typename Replace>
RebuiltNodes rewrite_quant_points(compiler::ExportedProgram& ep, const std::map<QuantPoint, int>& point_class,
                                  Replace&& replace) {
  const std::vector<Node> nodes = ep.graph.nodes;
  RebuiltNodes out;
  std::map<std::pair<ValueId, int>, ValueId> made;  // (value, class) -> its replacement
  std::map<ValueId, ValueId> output_of;              // value -> the replacement of its output point
  auto replaced = [&](ValueId v, int c) {
    auto [it, fresh] = made.emplace(std::make_pair(v, c), -1);
    if (fresh) it->second = replace(v, c, out);
    return it->second;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node n = nodes[i];
    if (n.kind == NodeKind::Placeholder) {
      out.placeholders.push_back(std::move(n));
      continue;
    }
    for (Argument& a : n.args)
      for (ValueId& v : a.values) {
        auto edge = point_class.find(QuantPoint::input(v, int32_t(i)));
        if (edge != point_class.end()) v = replaced(v, edge->second);
        else if (auto d = output_of.find(v); d != output_of.end()) v = d->second;
      }
    const bool is_output = n.kind == NodeKind::Output;
    out.body.push_back(std::move(n));
    if (is_output || nodes[i].outputs.size() != 1) continue;
    const ValueId v = nodes[i].outputs[0];
    auto c = point_class.find(QuantPoint::output(v));
    if (c != point_class.end()) output_of[v] = replaced(v, c->second);
  }
  for (compiler::OutputSpec& o : ep.signature.outputs)
    if (auto d = output_of.find(o.value); d != output_of.end()) o.value = d->second;
  return out;
}

// The walk shared by the lowering passes: moves the nodes of `g` into a RebuiltNodes in order. At the
// closing quantize of each match (its index in `quantize_node`), lower(match, quantize, nodes) first
// appends what replaces the match; the quantize node follows it (the float path stays for readers
// other than dequantize; dead code elimination drops it once nothing reads it).
template <typename Match, typename Lower>
RebuiltNodes rebuild_at_matches(Graph& g, const std::vector<Match>& matches, Lower&& lower) {
  std::map<size_t, const Match*> at_quantize;
  for (const Match& m : matches) at_quantize[m.quantize_node] = &m;
  RebuiltNodes nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.kind == NodeKind::Placeholder) {
      nodes.placeholders.push_back(std::move(n));
      continue;
    }
    if (auto m = at_quantize.find(i); m != at_quantize.end()) lower(*m->second, n, nodes);
    nodes.body.push_back(std::move(n));
  }
  return nodes;
}

// Ends a lowering pass: `nodes` become the graph's nodes, every read of a key of `replaced` (by the
// nodes, except calls of `unchanged_op`, and by the program's outputs) reads its value instead, then
// dead code elimination and the verifier run.
void install_lowered(compiler::ExportedProgram& ep, RebuiltNodes nodes, const std::map<ValueId, ValueId>& replaced,
                     std::string_view unchanged_op = {});

// Replaces each _quantized_linear_prepack of constant int8 weights and scales (what quantize_dynamic
// writes) by a constant input holding the packed bytes, computed once here; the int8 weights and
// scales nothing else reads leave the program. Returns the number folded. Note [Dynamic
// quantization] in tessera/compiler/quantize.h.
int fold_packed_weights(compiler::ExportedProgram& ep);

// Replaces each dequantize -> conv2d (-> add) (-> relu) -> quantize over quint8 activations and
// qint8 per-channel symmetric constant weights by one _quantized_conv2d (Note [Int8 conv2d
// lowering] in lower_conv.cpp). Returns the number lowered.
int lower_conv_patterns(compiler::ExportedProgram& ep);

}  // namespace tessera::quantization
