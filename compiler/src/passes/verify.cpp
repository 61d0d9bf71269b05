// The verifier. Note [Passes] in tessera/compiler/passes.h.
#include <sstream>

#include "capture/capture_shapes.h"
#include "passes/graph_edit.h"
#include "tessera/compiler/passes.h"
#include "tessera/dispatcher.h"

namespace tessera::compiler {

namespace {

std::string sizes_text(const std::vector<SymSize>& s) {
  std::ostringstream os;
  os << ArrayRef<SymSize>(s);
  return os.str();
}

[[noreturn]] void fail(const std::string& what) { detail::throw_error(ErrorCode::InvalidArgument, "verify: " + what); }

}  // namespace

void verify(const ExportedProgram& ep) {
  const Graph& g = ep.graph;
  const size_t np = first_non_placeholder(g);
  if (np != ep.signature.inputs.size())
    fail("the graph has " + std::to_string(np) + " leading placeholders, the signature " +
         std::to_string(ep.signature.inputs.size()) + " inputs");
  if (g.nodes.empty() || g.nodes.back().kind != NodeKind::Output) fail("the graph does not end with its Output node");
  std::vector<bool> produced(g.values.size(), false);
  auto check_id = [&](ValueId v, const std::string& where) {
    if (v < 0 || size_t(v) >= g.values.size())
      fail(where + ": value id " + std::to_string(v) + " out of range (" + std::to_string(g.values.size()) + " values)");
  };
  for (size_t i = 0; i < np; ++i) {
    const Node& n = g.nodes[i];
    const InputSpec& spec = ep.signature.inputs[i];
    if (n.outputs.size() != 1 || n.outputs[0] != spec.value || n.target != spec.name)
      fail("placeholder " + std::to_string(i) + " ('" + n.target + "') does not match signature input '" + spec.name + "'");
    check_id(spec.value, "placeholder '" + spec.name + "'");
    if (produced[size_t(spec.value)]) fail("value " + g.value_name(spec.value) + " is produced twice");
    produced[size_t(spec.value)] = true;
    if (spec.kind == InputKind::UserInput) continue;
    auto w = ep.weights.find(spec.name);
    if (w == ep.weights.end()) fail("weight '" + spec.name + "' of placeholder " + g.value_name(spec.value) + " is missing");
    const TensorType& t = g.type(spec.value);
    bool same = w->second.dtype() == t.dtype && w->second.dim() == int64_t(t.sizes.size());
    for (size_t d = 0; same && d < t.sizes.size(); ++d)
      same = t.sizes[d].maybe_constant() == std::optional<int64_t>(w->second.sizes()[d]);
    if (!same) fail("weight '" + spec.name + "' does not have the placeholder's type " + t.str());
  }
  Dispatcher& dispatcher = Dispatcher::instance();
  ShapeContext ctx;
  ctx.ranges = const_cast<std::map<std::string, SymbolRange>*>(&ep.ranges);
  for (size_t i = np; i + 1 < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const std::string where = "node " + std::to_string(i) + " ('" + n.target + "')";
    if (n.kind != NodeKind::Call) fail(where + " is a placeholder or output among the calls");
    for (const Argument& a : n.args)
      for (ValueId v : a.values) {
        check_id(v, where);
        if (!produced[size_t(v)]) fail(where + " uses " + g.value_name(v) + " before it is produced");
      }
    size_t expected_outputs = 1;
    if (is_view_target(n.target)) {
      if (n.args.size() != 2 || n.args[0].kind != Argument::Kind::Tensor || n.args[1].kind != Argument::Kind::Constant ||
          !std::holds_alternative<std::vector<int64_t>>(n.args[1].constant))
        fail(where + " must take a tensor and an int list");
    } else {
      OperatorEntry* op = dispatcher.find_op(n.target);
      if (!op) fail(where + ": the op is not in this runtime's op contract");
      const FunctionSchema& schema = dispatcher.schema(*op);
      if (n.args.size() > schema.arguments.size())
        fail(where + " has " + std::to_string(n.args.size()) + " arguments, the schema takes " +
             std::to_string(schema.arguments.size()));
      for (size_t a = 0; a < n.args.size(); ++a) {
        const ArgType type = schema.arguments[a].type;
        const Argument::Kind kind = n.args[a].kind;
        bool ok = type == ArgType::Tensor           ? kind == Argument::Kind::Tensor || kind == Argument::Kind::Constant
                  : type == ArgType::OptionalTensor ? kind == Argument::Kind::Tensor || kind == Argument::Kind::None
                  : type == ArgType::TensorList     ? kind == Argument::Kind::TensorList
                                                    : kind == Argument::Kind::Constant || kind == Argument::Kind::None;
        if (!ok) fail(where + ": argument " + std::to_string(a) + " ('" + schema.arguments[a].name + "') has the wrong kind");
      }
      expected_outputs = schema.returns.size();
    }
    if (n.outputs.size() != expected_outputs)
      fail(where + " has " + std::to_string(n.outputs.size()) + " outputs, expected " + std::to_string(expected_outputs));
    for (ValueId v : n.outputs) {
      check_id(v, where);
      if (produced[size_t(v)]) fail(where + " produces " + g.value_name(v) + ", which is already produced");
      produced[size_t(v)] = true;
      for (const SymSize& s : g.type(v).sizes)
        for (const std::string& sym : s.symbols())
          if (!ep.ranges.count(sym)) fail(where + ": symbol '" + sym + "' of " + g.value_name(v) + " has no range");
    }
    ctx.current_op = n.target;
    std::optional<std::vector<SymSize>> inferred = infer_sizes(n, g, ctx);
    if (inferred) {
      const std::vector<SymSize>& have = g.type(n.outputs[0]).sizes;
      bool same = inferred->size() == have.size();
      for (size_t d = 0; same && d < have.size(); ++d) same = (*inferred)[d].same_as(have[d]);
      if (!same)
        fail(where + ": " + g.value_name(n.outputs[0]) + " has sizes " + sizes_text(have) + " but the shape rule gives " +
             sizes_text(*inferred));
    }
  }
  const Node& out = g.nodes.back();
  if (out.args.size() != ep.signature.outputs.size())
    fail("the Output node returns " + std::to_string(out.args.size()) + " values, the signature lists " +
         std::to_string(ep.signature.outputs.size()));
  for (size_t i = 0; i < out.args.size(); ++i) {
    if (out.args[i].kind != Argument::Kind::Tensor) fail("output " + std::to_string(i) + " is not a tensor value");
    ValueId v = out.args[i].values.at(0);
    check_id(v, "output " + std::to_string(i));
    if (!produced[size_t(v)]) fail("output " + std::to_string(i) + " (" + g.value_name(v) + ") is never produced");
    if (v != ep.signature.outputs[i].value)
      fail("output " + std::to_string(i) + " is " + g.value_name(v) + " but signature output '" +
           ep.signature.outputs[i].name + "' says " + g.value_name(ep.signature.outputs[i].value));
  }
}

}  // namespace tessera::compiler
