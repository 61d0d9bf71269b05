// The conv2d part of lower_to_int8 (Note [Quantization flow] in tessera/compiler/quantize.h).
#include <set>
#include <tuple>

#include "quant/lowering.h"
#include "tessera/compiler/passes.h"
#include "tessera/compiler/quantize.h"
#include "tessera/error.h"
#include "tessera/ops.h"
#include "tessera/quantization.h"

namespace tessera::quantization {

namespace {

// One matched dequantize -> conv2d (-> add) (-> relu) -> quantize.
struct ConvMatch {
  size_t conv_node, quantize_node;
  int32_t add_node = -1;
  ValueId input_q, input_float;  // the quint8 input and the float32 value it was quantized from
  std::pair<double, int64_t> input_params;
  ValueId other_q = -1, other_float = -1;  // the add's quint8 operand, -1 without add
  std::pair<double, int64_t> other_params{1.0, 0};
  Tensor weight_int8, weight_scale;
  ValueId bias;  // -1: none
  std::pair<double, int64_t> output_params;
  bool relu = false;
  std::vector<Argument> geometry;  // stride, padding, dilation, groups
};

}  // namespace

// Note [Int8 conv2d lowering]
// A match reads the float32 values its quint8 input and addend were quantized from (the kernel
// quantizes them with the same parameters, as the linear of Note [Lowered int8 boundaries]), or
// what a lowered conv2d produced for them. A lowered conv2d whose result only lowered convolutions
// read (as input or addend) writes the uint8 representation; otherwise it writes the dequantized
// values of its requantised output (out_dtype quint8), which quantize back to the same integers
// (|q - zp| <= 255 keeps the float32 round trip far inside half a step), so a lowered reader
// stays exact either way. The weights are quantized once into int8 constants with their scales.
int lower_conv_patterns(ExportedProgram& ep) {
  Graph& g = ep.graph;
  const GraphUses uses(ep);
  const auto& users = uses.users;
  const auto& returned = uses.returned;

  std::vector<ConvMatch> matches;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& cv = g.nodes[i];
    if (cv.kind != NodeKind::Call || !is_op(cv.target, op::conv2d::name)) continue;
    if (g.type(cv.outputs[0]).sizes.size() != 4) continue;
    const std::optional<GraphUses::Int8Operands> operands = uses.int8_operands(cv, 4);
    if (!operands) continue;
    // Stride, padding, dilation and groups as integers (a string padding is not taken).
    bool geometry = true;
    for (size_t a = 3; a < cv.args.size(); ++a)
      geometry = geometry && cv.args[a].kind == Argument::Kind::Constant &&
                 (constant_at<int64_t>(cv, a) || constant_at<std::vector<int64_t>>(cv, a));
    if (!geometry) continue;
    ConvMatch m;
    m.conv_node = i;
    for (size_t a = 3; a < 7; ++a)
      m.geometry.push_back(a < cv.args.size() ? cv.args[a]
                                              : Argument::constant_value(a == 4 ? int64_t(0) : int64_t(1)));
    const Node& q = *operands->input_quantize;
    m.input_q = q.outputs[0];
    m.input_float = tensor_at(q, 0);
    m.input_params = *quint8_params(q);
    m.bias = operands->bias;
    ValueId end = cv.outputs[0];
    if (int32_t a = uses.sole_user(end, op::add_Tensor::name); a >= 0) {
      const Node& an = g.nodes[size_t(a)];
      const ValueId other = tensor_at(an, 0) == end ? tensor_at(an, 1) : tensor_at(an, 0);
      const Node* oq = other >= 0 ? uses.quint8_quantize(other) : nullptr;
      const int64_t* alpha_i = constant_at<int64_t>(an, 2);
      const double* alpha_d = constant_at<double>(an, 2);
      const bool alpha_one = an.args.size() < 3 || (alpha_i && *alpha_i == 1) || (alpha_d && *alpha_d == 1.0);
      if (!oq || !alpha_one || !g.type(other).same_as(g.type(end))) continue;
      m.other_q = oq->outputs[0];
      m.other_float = tensor_at(*oq, 0);
      m.other_params = *quint8_params(*oq);
      m.add_node = a;
      end = an.outputs[0];
    }
    const std::optional<GraphUses::QuantizedEnd> out = uses.quantized_end(end);
    if (!out) continue;
    m.quantize_node = out->quantize_node;
    m.output_params = out->params;
    m.relu = out->relu;
    std::tie(m.weight_int8, m.weight_scale) = operands->weight.quantize();
    matches.push_back(std::move(m));
  }
  if (matches.empty()) return 0;

  std::set<int32_t> lowered_readers;  // the conv2d and add nodes the matches replace
  for (const ConvMatch& m : matches) {
    lowered_readers.insert(int32_t(m.conv_node));
    if (m.add_node >= 0) lowered_readers.insert(m.add_node);
  }
  // Whether only lowered convolutions read the quint8 value (through dequantize).
  auto only_lowered_readers = [&](ValueId q_out) {
    if (returned[size_t(q_out)] || users[size_t(q_out)].empty()) return false;
    for (int32_t d : users[size_t(q_out)]) {
      if (!is_op(g.nodes[size_t(d)].target, op::dequantize::name)) return false;
      const ValueId dv = g.nodes[size_t(d)].outputs[0];
      if (returned[size_t(dv)]) return false;
      for (int32_t u : users[size_t(dv)])
        if (!lowered_readers.count(u)) return false;
    }
    return true;
  };
  std::map<ValueId, ValueId> lowered_float;  // quint8 output of a match -> the kernel's float32 values
  std::map<ValueId, ValueId> lowered_repr;   // quint8 output of a match -> the kernel's uint8 representation
  auto float_of = [&](ValueId q, ValueId source) {
    if (auto r = lowered_repr.find(q); r != lowered_repr.end()) return r->second;
    auto it = lowered_float.find(q);
    return it != lowered_float.end() ? it->second : source;
  };
  int count = 0;
  auto lower_match = [&](const ConvMatch& m, const Node& n, RebuiltNodes& rebuilt) {
    const std::string tag = "conv_int8_" + std::to_string(count++);
    const ValueId wv = add_constant(ep, rebuilt.placeholders, tag + "_weight", m.weight_int8);
    const ValueId sv = add_constant(ep, rebuilt.placeholders, tag + "_weight_scale", m.weight_scale);
    const bool repr_out = only_lowered_readers(n.outputs[0]);
    TensorType out_t = g.type(n.outputs[0]);
    out_t.dtype = repr_out ? kUInt8 : kFloat32;
    const ValueId out = g.add_value(out_t);
    std::vector<Argument> args = {
        Argument::tensor(float_of(m.input_q, m.input_float)), Argument::tensor(wv), Argument::tensor(sv),
        m.bias < 0 ? Argument::none() : Argument::tensor(m.bias),
        m.other_q < 0 ? Argument::none() : Argument::tensor(float_of(m.other_q, m.other_float))};
    args.insert(args.end(), m.geometry.begin(), m.geometry.end());
    for (const auto& [s, zp] : {m.input_params, m.other_params, m.output_params}) {
      args.push_back(Argument::constant_value(s));
      args.push_back(Argument::constant_value(zp));
    }
    args.push_back(Argument::constant_value(m.relu));
    args.push_back(Argument::constant_value(repr_out ? kUInt8 : kQUInt8));
    rebuilt.body.push_back({NodeKind::Call, op::_quantized_conv2d::name, std::move(args), {out}});
    (repr_out ? lowered_repr : lowered_float)[n.outputs[0]] = out;
  };
  RebuiltNodes nodes = rebuild_at_matches(g, matches, lower_match);
  // Dequantizes of a lowered result read the kernel's float32 values.
  std::map<ValueId, ValueId> replaced;
  for (const Node& n : nodes.body)
    if (is_op(n.target, op::dequantize::name))
      if (auto it = lowered_float.find(tensor_at(n, 0)); it != lowered_float.end()) replaced[n.outputs[0]] = it->second;
  install_lowered(ep, std::move(nodes), replaced);
  return count;
}

}  // namespace tessera::quantization
