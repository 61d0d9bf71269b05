// Quantization-aware training: prepare_qat, QatProgram::forward and convert (Note
// [Quantization-aware training] in tessera/compiler/quantize.h).
#include <algorithm>

#include "tessera/autograd.h"
#include "tessera/compiler/passes.h"
#include "tessera/compiler/quantize.h"
#include "tessera/error.h"
#include "tessera/ops.h"
#include "quant/lowering.h"

namespace tessera::quantization {

namespace {

// Fake-quantizes `v` with the scale and zero point inputs `sv`, `zv` of class spec `s`.
ValueId emit_fake_quantize(Graph& g, std::vector<Node>& body, ValueId v, ValueId sv, ValueId zv,
                           const QuantizationSpec& s) {
  const ValueId out = g.add_value(g.type(v));
  const int64_t lo = quant_min(s.dtype), hi = quant_max(s.dtype);
  if (is_per_channel(s.scheme))
    body.push_back({NodeKind::Call, op::fake_quantize_per_channel_affine::name,
                    {Argument::tensor(v), Argument::tensor(sv), Argument::tensor(zv), Argument::constant_value(s.ch_axis),
                     Argument::constant_value(lo), Argument::constant_value(hi)},
                    {out}});
  else
    body.push_back({NodeKind::Call, op::fake_quantize_per_tensor_affine::name,
                    {Argument::tensor(v), Argument::tensor(sv), Argument::tensor(zv), Argument::constant_value(lo),
                     Argument::constant_value(hi)},
                    {out}});
  return out;
}

std::pair<Tensor, Tensor> qparam_tensors(const Observer& obs) {
  const std::vector<double> scales = obs.scales();
  std::vector<float> s(scales.begin(), scales.end());
  const int64_t n = int64_t(s.size());
  return {tensor(s, {n}), tensor(obs.zero_points(), {n})};
}

}  // namespace

QatProgram prepare_qat(const ExportedProgram& ep, const Quantizer& quantizer) { return prepare_qat(ep, {&quantizer}); }

QatProgram prepare_qat(const ExportedProgram& ep, const std::vector<const Quantizer*>& quantizers) {
  QatProgram q;
  q.prepared_ = prepare(ep, quantizers);
  PreparedProgram& p = q.prepared_;
  // The trainable copies: every floating parameter becomes a leaf of its own.
  for (const compiler::InputSpec& in : p.program.signature.inputs) {
    if (in.kind != InputKind::Parameter) continue;
    auto w = p.program.weights.find(in.name);
    if (w == p.program.weights.end() || !is_floating(w->second.dtype())) continue;
    Tensor leaf = autograd::detach(w->second).clone();
    autograd::set_requires_grad(leaf);
    w->second = leaf;
    p.calibration_program.weights[in.name] = leaf;
    q.params_[in.name] = leaf;
  }

  // Per class: the weight it quantizes (all its points must be weights, or none), its observer.
  const size_t classes = p.observers.size();
  q.class_weight_.assign(classes, std::string());
  std::vector<int> kinds(classes, 0);  // bit 1: a weight point, bit 2: an activation point
  for (const auto& [pt, c] : p.point_class) {
    const compiler::InputSpec* w = weight_input(p.program, pt.value);
    kinds[size_t(c)] |= w ? 1 : 2;
    if (w) q.class_weight_[size_t(c)] = w->name;
  }
  for (size_t c = 0; c < classes; ++c) {
    QuantizationSpec spec = p.observers[c].spec();
    TESSERA_CHECK(kinds[c] != 3, "prepare_qat: the quantization points of ", spec.str(), " class ", c,
                  " mix the weight '", q.class_weight_[c], "' with activations; quantization-aware training needs "
                  "separate parameters for weights and activations");
    if (kinds[c] == 2 && !is_per_channel(spec.scheme)) spec.observer = ObserverKind::MovingAverageMinMax;
    q.act_observers_.emplace_back(spec);
  }

  // The training program: convert's rewrite with fake_quantize in place of quantize -> dequantize.
  ExportedProgram& out = q.train_;
  out = p.program;
  Graph& g = out.graph;
  std::vector<Node> class_placeholders;
  std::vector<std::pair<ValueId, ValueId>> class_values(classes);  // scale, zero point
  for (size_t c = 0; c < classes; ++c) {
    const QuantizationSpec& s = p.observers[c].spec();
    int64_t n = 1;
    if (is_per_channel(s.scheme)) n = out.weights.at(q.class_weight_[c]).size(s.ch_axis);
    const std::string stem = "qat_class" + std::to_string(c);
    class_values[c] = {add_constant(out, class_placeholders, stem + "_scale", ones({n})),
                       add_constant(out, class_placeholders, stem + "_zero_point", zeros({n}, dtype(kInt64)))};
    q.class_inputs_.emplace_back(g.values[size_t(class_values[c].first)].name,
                                 g.values[size_t(class_values[c].second)].name);
  }
  RebuiltNodes nodes = rewrite_quant_points(out, p.point_class, [&](ValueId v, int c, RebuiltNodes& n) {
    return emit_fake_quantize(g, n.body, v, class_values[size_t(c)].first, class_values[size_t(c)].second,
                              p.observers.at(size_t(c)).spec());
  });
  for (Node& n : class_placeholders) nodes.placeholders.push_back(std::move(n));
  // One extra output per (value, class) of the activation points: what the observers see (classes
  // hold weights only or activations only, checked above).
  q.num_outputs_ = out.signature.outputs.size();
  set_nodes(g, std::move(nodes.placeholders), std::move(nodes.body));
  q.observed_class_ = add_observed_outputs(out, p.point_class);
  compiler::verify(out);
  return q;
}

std::vector<Tensor> QatProgram::parameters() const {
  std::vector<Tensor> r;
  for (const auto& [name, t] : params_) r.push_back(t);
  return r;
}

void QatProgram::set_qparams() {
  for (size_t c = 0; c < act_observers_.size(); ++c) {
    std::pair<Tensor, Tensor> qp;
    if (!class_weight_[c].empty()) {
      Observer w(prepared_.observers[c].spec());
      w.observe(autograd::detach(train_.weights.at(class_weight_[c])));
      qp = qparam_tensors(w);
    } else {
      qp = qparam_tensors(act_observers_[c]);
    }
    train_.weights[class_inputs_[c].first] = qp.first;
    train_.weights[class_inputs_[c].second] = qp.second;
  }
}

std::vector<Tensor> QatProgram::forward(const std::vector<Tensor>& inputs) {
  bool unobserved = false;
  for (size_t c = 0; c < act_observers_.size(); ++c)
    unobserved = unobserved || (class_weight_[c].empty() && !act_observers_[c].observed());
  if (unobserved && !frozen_) {  // the first step: one float pass gives the activation ranges
    autograd::NoGradGuard no_grad;
    const std::vector<Tensor> outs = prepared_.calibration_program.run(inputs);
    for (size_t k = 0; k < prepared_.calibration_class.size(); ++k)
      act_observers_[size_t(prepared_.calibration_class[k])].observe(outs.at(prepared_.num_program_outputs + k));
  }
  set_qparams();
  std::vector<Tensor> outs = train_.run(inputs);
  if (!frozen_)
    for (size_t k = 0; k < observed_class_.size(); ++k)
      act_observers_[size_t(observed_class_[k])].observe(autograd::detach(outs.at(num_outputs_ + k)));
  outs.resize(num_outputs_);
  return outs;
}

ExportedProgram convert(const QatProgram& qat) {
  PreparedProgram p = qat.prepared_;
  for (const auto& [name, t] : qat.params_) p.program.weights[name] = autograd::detach(t).clone();
  for (size_t c = 0; c < p.observers.size(); ++c) {
    if (qat.class_weight_[c].empty()) {
      TESSERA_CHECK(qat.act_observers_[c].observed(), "convert: the activation observer of class ", c, " (",
                    qat.act_observers_[c].spec().str(), ") saw no values; run forward() on training data first");
      p.observers[c] = qat.act_observers_[c];
    } else {
      Observer w(p.observers[c].spec());
      w.observe(p.program.weights.at(qat.class_weight_[c]));
      p.observers[c] = std::move(w);
    }
  }
  return convert(p);
}

}  // namespace tessera::quantization
