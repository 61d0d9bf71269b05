// The built-in quantizers: x86 and xnnpack_like (Note [Quantization flow] in
// tessera/compiler/quantize.h).
#include <algorithm>

#include "tessera/compiler/quantize.h"
#include "tessera/error.h"
#include "quant/lowering.h"

namespace tessera::quantization {

namespace {

class PatternQuantizer : public Quantizer {
 public:
  PatternQuantizer(std::string name, QuantizationSpec activation)
      : name_(std::move(name)), activation_(activation) {}
  std::string name() const override { return name_; }

  void annotate(const ExportedProgram& ep, Annotations& annotations) const override {
    const Graph& g = ep.graph;
    std::vector<std::vector<int32_t>> users(g.values.size());
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const Argument& a : g.nodes[i].args)
        for (ValueId v : a.values) users[size_t(v)].push_back(int32_t(i));
    std::vector<bool> returned(g.values.size(), false), weight(g.values.size(), false);
    for (const auto& o : ep.signature.outputs) returned[size_t(o.value)] = true;
    for (const auto& in : ep.signature.inputs) weight[size_t(in.value)] = in.kind != InputKind::UserInput;
    // The node that alone reads v, when it is the given op and nobody else annotated it.
    auto sole_user = [&](ValueId v, const char* op) -> int32_t {
      if (returned[size_t(v)] || users[size_t(v)].size() != 1) return -1;
      const int32_t u = users[size_t(v)][0];
      const Node& n = g.nodes[size_t(u)];
      return n.kind == NodeKind::Call && is_op(n.target, op) && !annotations.annotated(u) ? u : -1;
    };
    auto tensor_arg = [](const Node& n, size_t i) -> ValueId {
      return i < n.args.size() && n.args[i].kind == Argument::Kind::Tensor ? n.args[i].values[0] : -1;
    };
    std::vector<bool> quantized_output(g.values.size(), false);
    auto output_spec = [&](int32_t node, NodeAnnotation& a) {
      a.output = activation_;
      quantized_output[size_t(g.nodes[size_t(node)].outputs[0])] = true;
    };
    const QuantizationSpec weight_spec{kQInt8, Scheme::PerChannelSymmetric, ObserverKind::PerChannelMinMax, 0};

    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      const int32_t node = int32_t(i);
      if (n.kind != NodeKind::Call || annotations.annotated(node)) continue;
      const bool linear = is_op(n.target, op::linear::name);
      if (linear || is_op(n.target, op::conv2d::name)) {
        const ValueId x = tensor_arg(n, 0), w = tensor_arg(n, 1);
        const size_t rank = linear ? 2 : 4;
        if (x < 0 || w < 0 || !weight[size_t(w)] || g.type(w).sizes.size() != rank) continue;
        NodeAnnotation a;
        a.inputs[x] = activation_;
        a.inputs[w] = weight_spec;
        ValueId end = n.outputs[0];
        std::vector<std::pair<int32_t, NodeAnnotation>> chain;
        if (!linear) {
          if (int32_t add = sole_user(end, op::add_Tensor::name); add >= 0) {
            const Node& an = g.nodes[size_t(add)];
            const ValueId other = tensor_arg(an, 0) == end ? tensor_arg(an, 1) : tensor_arg(an, 0);
            if (other >= 0 && other != end && g.type(other).dtype == kFloat32) {
              NodeAnnotation aa;
              aa.inputs[other] = activation_;
              chain.emplace_back(add, aa);
              end = an.outputs[0];
            }
          }
        }
        if (int32_t relu = sole_user(end, op::relu::name); relu >= 0) {
          chain.emplace_back(relu, NodeAnnotation{});
          end = g.nodes[size_t(relu)].outputs[0];
        }
        if (chain.empty()) output_spec(node, a);
        else output_spec(chain.back().first, chain.back().second);
        annotations.set(ep, node, a, name_);
        for (auto& [c, ca] : chain) annotations.set(ep, c, ca, name_);
        continue;
      }
      // Ops that move values without computing new ones take their input's parameters.
      if (is_op(n.target, op::max_pool2d::name) || n.target == compiler::kViewTarget) {
        const ValueId x = tensor_arg(n, 0);
        if (x < 0 || !quantized_output[size_t(x)] || n.outputs.size() != 1) continue;
        NodeAnnotation a;
        a.inputs[x] = SharedSpec{QuantPoint::output(x)};
        a.output = SharedSpec{QuantPoint::input(x, node)};
        quantized_output[size_t(n.outputs[0])] = true;
        annotations.set(ep, node, a, name_);
        continue;
      }
      if (is_op(n.target, op::cat::name) && !n.args.empty() && n.args[0].kind == Argument::Kind::TensorList) {
        const std::vector<ValueId>& xs = n.args[0].values;
        if (xs.empty() || !std::all_of(xs.begin(), xs.end(), [&](ValueId v) { return quantized_output[size_t(v)]; }))
          continue;
        NodeAnnotation a;
        a.inputs[xs[0]] = SharedSpec{QuantPoint::output(xs[0])};
        for (size_t k = 1; k < xs.size(); ++k) a.inputs[xs[k]] = SharedSpec{QuantPoint::input(xs[0], node)};
        a.output = SharedSpec{QuantPoint::input(xs[0], node)};
        quantized_output[size_t(n.outputs[0])] = true;
        annotations.set(ep, node, a, name_);
      }
    }
  }

 private:
  std::string name_;
  QuantizationSpec activation_;
};

}  // namespace

std::unique_ptr<Quantizer> x86_quantizer(QuantizerOptions options) {
  TESSERA_CHECK(options.activation_observer != ObserverKind::PerChannelMinMax,
                "x86_quantizer: activations are per tensor; choose min_max, moving_average_min_max or histogram");
  return std::make_unique<PatternQuantizer>(
      "x86", QuantizationSpec{kQUInt8, Scheme::PerTensorAffine, options.activation_observer, 0});
}

std::unique_ptr<Quantizer> xnnpack_like_quantizer(QuantizerOptions options) {
  TESSERA_CHECK(options.activation_observer != ObserverKind::PerChannelMinMax,
                "xnnpack_like_quantizer: activations are per tensor; choose min_max, moving_average_min_max or histogram");
  return std::make_unique<PatternQuantizer>(
      "xnnpack_like", QuantizationSpec{kQInt8, Scheme::PerTensorSymmetric, options.activation_observer, 0});
}

}  // namespace tessera::quantization
