// Note [Legacy opsets]
// Opsets 1 to 6 (and Upsample, which opset 10 deprecated) spell a few things differently from the
// forms the converters read. upgrade_legacy_node rewrites such a node into those forms before it
// is converted, as onnx.version_converter's adapters would, so a model need not be converted
// first:
//   - `consumed_inputs` (opsets 1-5, a buffer-reuse hint with no effect on results) is dropped;
//   - binary ops before opset 7 broadcast only when `broadcast` is 1, and `axis` aligns the second
//     operand's dims with the first's from that axis on: the operand gets the trailing unit dims
//     (an Unsqueeze) that make NumPy broadcasting, opset 7's rule, mean the same;
//   - Gemm's `broadcast` (opset 6) is dropped: opset 7's rule covers it;
//   - BatchNormalization's and Dropout's `is_test` (before opset 7): 1 is inference, which is what
//     is imported; is_test=0 (training, the default) is refused for BatchNormalization;
//   - PRelu before opset 7 applies a 1-D slope of the channel count per channel (dim 1): it gets
//     trailing unit dims;
//   - Upsample (opsets 7-9) is Resize with coordinate_transformation_mode `asymmetric` (and
//     nearest_mode `floor`): a Resize node at opset 11, its scales from the attribute (opset 7) or
//     the input (opset 9).
// Each rewritten node keeps its name, so refusals still name it.
#include <set>

#include "convert.h"

namespace tessera::onnx::detail {

namespace {

const ::onnx::AttributeProto* find(const ::onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

void drop(::onnx::NodeProto& n, const char* name) {
  auto* attrs = n.mutable_attribute();
  for (int i = attrs->size() - 1; i >= 0; --i)
    if (attrs->Get(i).name() == name) attrs->DeleteSubrange(i, 1);
}

[[noreturn]] void refuse(const ::onnx::NodeProto& n, int64_t opset, const std::string& why) {
  TESSERA_CHECK(false, "onnx import: node '", n.name(), "' (", n.op_type(), ", opset ", opset, "): ", why);
}

// An Unsqueeze (axes attribute, opset 7's form) of `input` at `axes` into a new name.
::onnx::NodeProto unsqueeze(const ::onnx::NodeProto& of, const std::string& input, std::vector<int64_t> axes) {
  ::onnx::NodeProto u;
  u.set_op_type("Unsqueeze");
  u.set_name(of.name());
  u.add_input(input);
  u.add_output(input + "::legacy_unsqueezed_for_" + of.name() + "_" + of.output(0));
  auto* a = u.add_attribute();
  a->set_name("axes");
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : axes) a->add_ints(x);
  return u;
}

}  // namespace

std::optional<std::vector<LegacyNode>> upgrade_legacy_node(const ::onnx::NodeProto& node, int64_t opset,
                                                           const std::function<std::vector<int64_t>(const std::string&)>& sizes_of) {
  static const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"};
  const std::string& op = node.op_type();
  if (op == "Upsample") {
    if (opset >= 10) refuse(node, opset, "Upsample is deprecated from opset 10; use Resize");
    if (node.input_size() < 1 || node.output_size() < 1)
      refuse(node, opset, "Upsample needs an input X and an output Y; the node has " +
                              std::to_string(node.input_size()) + " inputs and " + std::to_string(node.output_size()) +
                              " outputs");
    ::onnx::NodeProto r;
    r.set_op_type("Resize");
    r.set_name(node.name());
    r.add_input(node.input(0));
    r.add_input("");  // roi
    std::vector<LegacyNode> out;
    if (opset < 9) {
      const ::onnx::AttributeProto* s = find(node, "scales");
      if (!s) refuse(node, opset, "the scales attribute is missing");
      ::onnx::NodeProto c;
      c.set_op_type("Constant");
      c.set_name(node.name());
      const std::string name = node.output(0) + "::legacy_scales";
      c.add_output(name);
      auto* v = c.add_attribute();
      v->set_name("value");
      v->set_type(::onnx::AttributeProto::TENSOR);
      ::onnx::TensorProto* t = v->mutable_t();
      t->set_data_type(::onnx::TensorProto::FLOAT);
      t->add_dims(s->floats_size());
      for (float f : s->floats()) t->add_float_data(f);
      out.push_back({std::move(c), 11});
      r.add_input(name);
    } else {
      if (node.input_size() < 2) refuse(node, opset, "the scales input is missing");
      r.add_input(node.input(1));
    }
    for (int i = 0; i < node.output_size(); ++i) r.add_output(node.output(i));
    std::string mode = "nearest";
    for (const auto& a : node.attribute()) {
      if (a.name() == "mode") mode = a.s();
      else if (a.name() != "scales") refuse(node, opset, "attribute '" + a.name() + "' is not supported");
    }
    if (mode == "bilinear") mode = "linear";
    for (auto [name, value] : {std::pair<const char*, std::string>{"mode", mode},
                               {"coordinate_transformation_mode", "asymmetric"}, {"nearest_mode", "floor"}}) {
      auto* a = r.add_attribute();
      a->set_name(name);
      a->set_type(::onnx::AttributeProto::STRING);
      a->set_s(value);
    }
    out.push_back({std::move(r), 11});
    return out;
  }
  if (opset >= 7) return std::nullopt;
  ::onnx::NodeProto n = node;
  bool changed = false;
  std::vector<LegacyNode> out;
  if (find(n, "consumed_inputs")) drop(n, "consumed_inputs"), changed = true;
  if (find(n, "is_test")) {
    if (op == "BatchNormalization" && find(n, "is_test")->i() == 0)
      refuse(node, opset, "is_test=0 (training mode) is not supported; only inference is imported");
    drop(n, "is_test");
    changed = true;
  }
  if (op == "Gemm" && find(n, "broadcast")) drop(n, "broadcast"), changed = true;
  if (op == "BatchNormalization" && !find(n, "is_test") && !find(node, "is_test"))
    refuse(node, opset, "is_test is 0 by default before opset 7 (training mode); only inference is imported");
  if (kBinary.count(op)) {
    const ::onnx::AttributeProto* b = find(n, "broadcast");
    const ::onnx::AttributeProto* ax = find(n, "axis");
    if (b && b->i() == 1 && ax && n.input_size() == 2) {
      const std::vector<int64_t> a = sizes_of(n.input(0)), bs = sizes_of(n.input(1));
      const int64_t ra = int64_t(a.size()), rb = int64_t(bs.size());
      const int64_t axis = ax->i() < 0 ? ax->i() + ra : ax->i();
      const int64_t trailing = ra - axis - rb;
      if (axis < 0 || trailing < 0) refuse(node, opset, "axis " + std::to_string(ax->i()) + " does not fit a rank-" +
                                                           std::to_string(rb) + " operand against rank " + std::to_string(ra));
      if (trailing > 0) {
        if (node.output_size() < 1) refuse(node, opset, "the node has no output");
        std::vector<int64_t> axes;
        for (int64_t i = 0; i < trailing; ++i) axes.push_back(rb + i);
        ::onnx::NodeProto u = unsqueeze(node, n.input(1), axes);
        n.set_input(1, u.output(0));
        out.push_back({std::move(u), 7});
      }
    }
    if (b) drop(n, "broadcast"), changed = true;
    if (ax) drop(n, "axis"), changed = true;
  }
  if (op == "PRelu" && n.input_size() == 2) {
    const std::vector<int64_t> x = sizes_of(n.input(0)), s = sizes_of(n.input(1));
    if (s.size() == 1 && x.size() >= 3 && s[0] == x[1] && s[0] != 1) {
      if (node.output_size() < 1) refuse(node, opset, "the node has no output");
      std::vector<int64_t> axes;
      for (size_t i = 1; i + 1 < x.size(); ++i) axes.push_back(int64_t(i));
      ::onnx::NodeProto u = unsqueeze(node, n.input(1), axes);
      n.set_input(1, u.output(0));
      out.push_back({std::move(u), 7});
      changed = true;
    }
  }
  if (!changed) return std::nullopt;
  out.push_back({std::move(n), 7});
  return out;
}

}  // namespace tessera::onnx::detail
