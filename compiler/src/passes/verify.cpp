// The verifier. Note [Passes] in tessera/compiler/passes.h.
#include <sstream>

#include "capture/capture_shapes.h"
#include "passes/graph_edit.h"
#include "tessera/compiler/passes.h"
#include "tessera/dispatcher.h"
#include "tessera/version.h"

namespace tessera::compiler {

namespace {

std::string sizes_text(const std::vector<SymSize>& s) {
  std::ostringstream os;
  os << ArrayRef<SymSize>(s);
  return os.str();
}

[[noreturn]] void fail(const std::string& what) { throw VerifyProblem{-1, "", what}; }
[[noreturn]] void fail_at(size_t node, const char* field, const std::string& what) {
  throw VerifyProblem{int64_t(node), field, what};
}

}  // namespace

void verify(const ExportedProgram& ep) {
  try {
    check_program(ep, /*weights=*/true);
  } catch (const VerifyProblem& p) {
    detail::throw_error(ErrorCode::InvalidArgument, "verify: " + p.message);
  }
}

void check_program(const ExportedProgram& ep, bool weights) {
  const Graph& g = ep.graph;
  const size_t np = first_non_placeholder(g);
  if (np != ep.signature.inputs.size())
    fail("the graph has " + std::to_string(np) + " leading placeholders, the signature " +
         std::to_string(ep.signature.inputs.size()) + " inputs");
  if (g.nodes.empty() || g.nodes.back().kind != NodeKind::Output) fail("the graph does not end with its Output node");
  std::vector<bool> produced(g.values.size(), false);
  auto check_id = [&](ValueId v, size_t node, const char* field, const std::string& where) {
    if (v < 0 || size_t(v) >= g.values.size())
      fail_at(node, field, where + ": value id " + std::to_string(v) + " out of range (" + std::to_string(g.values.size()) + " values)");
  };
  auto check_ranges = [&](ValueId v, size_t node, const std::string& where) {
    for (const SymSize& s : g.type(v).sizes)
      for (const std::string& sym : s.symbols())
        if (!ep.ranges.count(sym)) fail_at(node, "outputs", where + ": symbol '" + sym + "' of " + g.value_name(v) + " has no range");
  };
  for (size_t i = 0; i < np; ++i) {
    const Node& n = g.nodes[i];
    const InputSpec& spec = ep.signature.inputs[i];
    if (n.outputs.size() != 1 || n.outputs[0] != spec.value || n.target != spec.name)
      fail_at(i, "", "placeholder " + std::to_string(i) + " ('" + n.target + "') does not match signature input '" + spec.name + "'");
    check_id(spec.value, i, "outputs", "placeholder '" + spec.name + "'");
    if (produced[size_t(spec.value)]) fail_at(i, "outputs", "value " + g.value_name(spec.value) + " is produced twice");
    produced[size_t(spec.value)] = true;
    check_ranges(spec.value, i, "placeholder '" + spec.name + "'");
    if (spec.kind == InputKind::UserInput || !weights) continue;
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
    if (n.kind != NodeKind::Call) fail_at(i, "", where + " is a placeholder or output among the calls");
    for (const Argument& a : n.args)
      for (ValueId v : a.values) {
        check_id(v, i, "args", where);
        if (!produced[size_t(v)]) fail_at(i, "args", where + " uses " + g.value_name(v) + " before it is produced");
      }
    size_t expected_outputs = 1;
    if (is_view_target(n.target)) {
      if (n.args.size() != 2 || n.args[0].kind != Argument::Kind::Tensor || n.args[1].kind != Argument::Kind::Constant ||
          !std::holds_alternative<std::vector<int64_t>>(n.args[1].constant))
        fail_at(i, "args", where + " must take a tensor and an int list");
    } else {
      OperatorEntry* op = dispatcher.find_op(n.target);
      if (!op)
        fail_at(i, "target", where + ": the op is not in this runtime's op contract (tessera " + TESSERA_VERSION_STRING +
                                 ", op contract '" + ep.op_contract_version +
                                 "' of the program); load the plugin that defines it or export again with this runtime");
      const FunctionSchema& schema = dispatcher.schema(*op);
      if (n.args.size() > schema.arguments.size())
        fail_at(i, "args", where + " has " + std::to_string(n.args.size()) + " arguments, the schema takes " +
             std::to_string(schema.arguments.size()));
      for (size_t a = 0; a < n.args.size(); ++a) {
        const ArgType type = schema.arguments[a].type;
        const Argument::Kind kind = n.args[a].kind;
        bool ok = type == ArgType::Tensor           ? kind == Argument::Kind::Tensor || kind == Argument::Kind::Constant
                  : type == ArgType::OptionalTensor ? kind == Argument::Kind::Tensor || kind == Argument::Kind::None
                  : type == ArgType::TensorList     ? kind == Argument::Kind::TensorList
                                                    : kind == Argument::Kind::Constant || kind == Argument::Kind::None;
        if (!ok) fail_at(i, "args", where + ": argument " + std::to_string(a) + " ('" + schema.arguments[a].name + "') has the wrong kind");
      }
      expected_outputs = schema.returns.size();
    }
    if (n.outputs.size() != expected_outputs)
      fail_at(i, "outputs", where + " has " + std::to_string(n.outputs.size()) + " outputs, expected " + std::to_string(expected_outputs));
    for (ValueId v : n.outputs) {
      check_id(v, i, "outputs", where);
      if (produced[size_t(v)]) fail_at(i, "outputs", where + " produces " + g.value_name(v) + ", which is already produced");
      produced[size_t(v)] = true;
      check_ranges(v, i, where);
    }
    ctx.current_op = n.target;
    std::optional<std::vector<SymSize>> inferred;
    try {
      inferred = infer_sizes(n, g, ctx);
    } catch (const Error& e) {  // the shape rule refuses the node's arguments
      fail_at(i, "args", where + ": " + e.what());
    }
    if (inferred) {
      const std::vector<SymSize>& have = g.type(n.outputs[0]).sizes;
      bool same = inferred->size() == have.size();
      for (size_t d = 0; same && d < have.size(); ++d) same = (*inferred)[d].same_as(have[d]);
      if (!same)
        fail_at(i, "outputs", where + ": " + g.value_name(n.outputs[0]) + " has sizes " + sizes_text(have) + " but the shape rule gives " +
             sizes_text(*inferred));
    }
  }
  const Node& out = g.nodes.back();
  const size_t last = g.nodes.size() - 1;
  for (const Argument& a : out.args)
    for (ValueId v : a.values) check_id(v, last, "args", "the Output node");
  if (out.args.size() != ep.signature.outputs.size())
    fail_at(last, "args", "the Output node returns " + std::to_string(out.args.size()) + " values, the signature lists " +
         std::to_string(ep.signature.outputs.size()));
  for (size_t i = 0; i < out.args.size(); ++i) {
    if (out.args[i].kind != Argument::Kind::Tensor) fail_at(last, "args", "output " + std::to_string(i) + " is not a tensor value");
    ValueId v = out.args[i].values.at(0);
    if (!produced[size_t(v)]) fail_at(last, "args", "output " + std::to_string(i) + " (" + g.value_name(v) + ") is never produced");
    if (v != ep.signature.outputs[i].value)
      fail_at(last, "args", "output " + std::to_string(i) + " is " + g.value_name(v) + " but signature output '" +
           ep.signature.outputs[i].name + "' says " + g.value_name(ep.signature.outputs[i].value));
  }
}

}  // namespace tessera::compiler
