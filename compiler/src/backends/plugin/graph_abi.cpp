// The graph ABI's host side (Note [Graph ABI] in plugin_abi.h) over the Export IR.
#include "tessera/compiler/graph_abi.h"

#include <deque>
#include <set>
#include <string>

#include "tessera/dispatcher.h"
#include "tessera/error.h"

struct tessera_graph_s {
  tessera::compiler::ExportedProgram* program;
  bool writable;
  // Strings and arrays handed out; kept until the handle dies (Note [Graph ABI]: valid until the
  // graph changes or the call returns).
  std::deque<std::string> strings;
  std::deque<std::vector<int64_t>> lists;
  std::vector<std::string> symbols;  // sorted
};

namespace tessera::compiler {

namespace {

using G = const tessera_graph_t*;

const Graph& graph_of(G g) { return g->program->graph; }

bool node_ok(G g, int32_t n) { return g && n >= 0 && size_t(n) < graph_of(g).nodes.size(); }
bool value_ok(G g, int32_t v) { return g && v >= 0 && size_t(v) < graph_of(g).values.size(); }
bool arg_ok(G g, int32_t n, int32_t a) {
  return node_ok(g, n) && a >= 0 && size_t(a) < graph_of(g).nodes[size_t(n)].args.size();
}

tessera_status_t invalid(const std::string& message) {
  return kernel_status_make(TESSERA_STATUS_INVALID_ARGUMENT, message.c_str());
}

const char* keep(G g, std::string s) {
  auto* m = const_cast<tessera_graph_t*>(g);
  m->strings.push_back(std::move(s));
  return m->strings.back().c_str();
}

void refresh_symbols(tessera_graph_t* g) {
  g->symbols.clear();
  for (const auto& [name, r] : g->program->ranges) g->symbols.push_back(name);
}

int32_t node_count(G g) { return g ? int32_t(graph_of(g).nodes.size()) : -1; }
int32_t node_kind(G g, int32_t n) { return node_ok(g, n) ? int32_t(graph_of(g).nodes[size_t(n)].kind) : -1; }
const char* node_target(G g, int32_t n) {
  return node_ok(g, n) ? graph_of(g).nodes[size_t(n)].target.c_str() : nullptr;
}
int32_t node_num_args(G g, int32_t n) {
  return node_ok(g, n) ? int32_t(graph_of(g).nodes[size_t(n)].args.size()) : -1;
}
int32_t node_arg_kind(G g, int32_t n, int32_t a) {
  return arg_ok(g, n, a) ? int32_t(graph_of(g).nodes[size_t(n)].args[size_t(a)].kind) : -1;
}
int32_t node_arg_num_values(G g, int32_t n, int32_t a) {
  return arg_ok(g, n, a) ? int32_t(graph_of(g).nodes[size_t(n)].args[size_t(a)].values.size()) : -1;
}
int32_t node_arg_value(G g, int32_t n, int32_t a, int32_t i) {
  if (!arg_ok(g, n, a)) return -1;
  const auto& vs = graph_of(g).nodes[size_t(n)].args[size_t(a)].values;
  return i >= 0 && size_t(i) < vs.size() ? vs[size_t(i)] : -1;
}

tessera_status_t node_arg_constant(G g, int32_t n, int32_t a, tessera_value_t* out) {
  if (!arg_ok(g, n, a) || !out)
    return invalid("graph.node_arg_constant: node " + std::to_string(n) + " argument " + std::to_string(a) +
                   " out of range (or out_value is NULL)");
  const Argument& arg = graph_of(g).nodes[size_t(n)].args[size_t(a)];
  if (arg.kind != Argument::Kind::Constant)
    return invalid("graph.node_arg_constant: node " + std::to_string(n) + " argument " + std::to_string(a) +
                   " is not a constant");
  *out = tessera_value_t{};
  struct V {
    G g;
    tessera_value_t* out;
    void operator()(std::monostate) const { out->kind = TESSERA_VALUE_NONE; }
    void operator()(int64_t v) const { out->kind = TESSERA_VALUE_INT, out->u.i = v; }
    void operator()(double v) const { out->kind = TESSERA_VALUE_DOUBLE, out->u.d = v; }
    void operator()(bool v) const { out->kind = TESSERA_VALUE_BOOL, out->u.b = v; }
    void operator()(const std::vector<int64_t>& v) const {
      auto* m = const_cast<tessera_graph_t*>(g);
      m->lists.push_back(v);
      out->kind = TESSERA_VALUE_INT_LIST;
      out->count = int32_t(v.size());
      out->u.ints = m->lists.back().data();
    }
    void operator()(const std::string& v) const {
      out->kind = TESSERA_VALUE_STRING;
      out->count = int32_t(v.size());
      out->u.s = keep(g, v);
    }
    void operator()(DType t) const { out->kind = TESSERA_VALUE_DTYPE, out->u.i = int64_t(t); }
  };
  std::visit(V{g, out}, arg.constant);
  return nullptr;
}

int32_t node_num_outputs(G g, int32_t n) {
  return node_ok(g, n) ? int32_t(graph_of(g).nodes[size_t(n)].outputs.size()) : -1;
}
int32_t node_output(G g, int32_t n, int32_t i) {
  if (!node_ok(g, n)) return -1;
  const auto& os = graph_of(g).nodes[size_t(n)].outputs;
  return i >= 0 && size_t(i) < os.size() ? os[size_t(i)] : -1;
}

int32_t value_count(G g) { return g ? int32_t(graph_of(g).values.size()) : -1; }
const char* value_name(G g, int32_t v) {
  return value_ok(g, v) ? graph_of(g).values[size_t(v)].name.c_str() : nullptr;
}
int32_t value_dtype(G g, int32_t v) {
  return value_ok(g, v) ? int32_t(graph_of(g).values[size_t(v)].type.dtype) : -1;
}
const char* value_device(G g, int32_t v) {
  return value_ok(g, v) ? keep(g, graph_of(g).values[size_t(v)].type.device.str()) : nullptr;
}
int32_t value_rank(G g, int32_t v) {
  return value_ok(g, v) ? int32_t(graph_of(g).values[size_t(v)].type.sizes.size()) : -1;
}

tessera_status_t value_size(G g, int32_t v, int32_t d, tessera_graph_size_t* out) {
  if (!value_ok(g, v) || !out || d < 0 || size_t(d) >= graph_of(g).values[size_t(v)].type.sizes.size())
    return invalid("graph.value_size: value " + std::to_string(v) + " dim " + std::to_string(d) +
                   " out of range (or out_size is NULL)");
  const SymSize& s = graph_of(g).values[size_t(v)].type.sizes[size_t(d)];
  tessera_graph_size_t r{};
  r.struct_size = out->struct_size;
  r.is_symbolic = !s.is_constant();
  r.value = s.maybe_constant().value_or(0);
  r.expr = keep(g, s.str());
  r.min = 0;
  r.max = INT64_MAX;
  if (s.is_constant()) {
    r.min = r.max = r.value;
  } else if (auto syms = s.symbols(); syms.size() == 1 && s.same_as(SymSize::symbol(syms[0]))) {
    auto it = g->program->ranges.find(syms[0]);
    if (it != g->program->ranges.end()) r.min = it->second.min, r.max = it->second.max;
  }
  std::memcpy(out, &r, std::min<size_t>(out->struct_size, sizeof(r)));
  out->struct_size = r.struct_size;
  return nullptr;
}

int32_t input_count(G g) { return g ? int32_t(g->program->signature.inputs.size()) : -1; }
tessera_status_t input(G g, int32_t i, int32_t* out_kind, const char** out_name, int32_t* out_value) {
  if (!g || i < 0 || size_t(i) >= g->program->signature.inputs.size())
    return invalid("graph.input: index " + std::to_string(i) + " out of range");
  const InputSpec& in = g->program->signature.inputs[size_t(i)];
  if (out_kind) *out_kind = int32_t(in.kind);
  if (out_name) *out_name = in.name.c_str();
  if (out_value) *out_value = in.value;
  return nullptr;
}
int32_t output_count(G g) { return g ? int32_t(g->program->signature.outputs.size()) : -1; }
tessera_status_t output(G g, int32_t i, const char** out_name, int32_t* out_value) {
  if (!g || i < 0 || size_t(i) >= g->program->signature.outputs.size())
    return invalid("graph.output: index " + std::to_string(i) + " out of range");
  const OutputSpec& o = g->program->signature.outputs[size_t(i)];
  if (out_name) *out_name = o.name.c_str();
  if (out_value) *out_value = o.value;
  return nullptr;
}

int32_t symbol_count(G g) { return g ? int32_t(g->symbols.size()) : -1; }
tessera_status_t symbol(G g, int32_t i, const char** out_name, int64_t* out_min, int64_t* out_max) {
  if (!g || i < 0 || size_t(i) >= g->symbols.size())
    return invalid("graph.symbol: index " + std::to_string(i) + " out of range");
  const std::string& name = g->symbols[size_t(i)];
  auto it = g->program->ranges.find(name);
  SymbolRange r = it == g->program->ranges.end() ? SymbolRange{} : it->second;
  if (out_name) *out_name = name.c_str();
  if (out_min) *out_min = r.min;
  if (out_max) *out_max = r.max;
  return nullptr;
}

// ---- builders

tessera_status_t writable_check(tessera_graph_t* g, const char* fn) {
  if (!g) return invalid(std::string("graph.") + fn + ": graph is NULL");
  if (!g->writable) return invalid(std::string("graph.") + fn + ": the graph was handed out read-only");
  return nullptr;
}

tessera_status_t add_call(tessera_graph_t* g, int32_t before, const char* target,
                          const tessera_graph_arg_t* args, int32_t num_args,
                          const tessera_graph_type_t* types, int32_t num_outputs, int32_t* out_values) {
  if (auto st = writable_check(g, "add_call")) return st;
  Graph& graph = g->program->graph;
  if (!target || !Dispatcher::instance().find_op(target))
    return invalid(std::string("graph.add_call: op '") + (target ? target : "(null)") +
                   "' is not in the op contract");
  if (num_args < 0 || num_outputs < 0 || (num_args && !args) || (num_outputs && (!types || !out_values)))
    return invalid("graph.add_call: negative counts or NULL arrays");
  size_t pos = before < 0 || size_t(before) > graph.nodes.size() ? graph.nodes.size() : size_t(before);
  if (pos == graph.nodes.size() && !graph.nodes.empty() && graph.nodes.back().kind == NodeKind::Output) --pos;
  std::set<ValueId> defined;
  for (size_t i = 0; i < pos; ++i)
    for (ValueId v : graph.nodes[i].outputs) defined.insert(v);
  Node node{NodeKind::Call, target, {}, {}};
  for (int32_t a = 0; a < num_args; ++a) {
    const tessera_graph_arg_t& in = args[a];
    Argument arg;
    switch (in.kind) {
      case TESSERA_ARG_TENSOR:
      case TESSERA_ARG_TENSOR_LIST: {
        int32_t n = in.kind == TESSERA_ARG_TENSOR ? 1 : in.num_values;
        if (n < 0 || (n && !in.values))
          return invalid("graph.add_call: argument " + std::to_string(a) + " has no values");
        arg.kind = in.kind == TESSERA_ARG_TENSOR ? Argument::Kind::Tensor : Argument::Kind::TensorList;
        for (int32_t k = 0; k < n; ++k) {
          if (!defined.count(in.values[k]))
            return invalid("graph.add_call: argument " + std::to_string(a) + " uses value " +
                           std::to_string(in.values[k]) + ", which no node before position " +
                           std::to_string(pos) + " defines");
          arg.values.push_back(in.values[k]);
        }
        break;
      }
      case TESSERA_ARG_NONE:
        arg = Argument::none();
        break;
      case TESSERA_ARG_CONSTANT: {
        const tessera_value_t& c = in.constant;
        switch (c.kind) {
          case TESSERA_VALUE_NONE:
            arg = Argument::constant_value(std::monostate{});
            break;
          case TESSERA_VALUE_INT:
            arg = Argument::constant_value(c.u.i);
            break;
          case TESSERA_VALUE_DOUBLE:
            arg = Argument::constant_value(c.u.d);
            break;
          case TESSERA_VALUE_BOOL:
            arg = Argument::constant_value(c.u.b != 0);
            break;
          case TESSERA_VALUE_INT_LIST:
            if (c.count < 0 || (c.count && !c.u.ints))
              return invalid("graph.add_call: bad int list in argument " + std::to_string(a));
            arg = Argument::constant_value(std::vector<int64_t>(c.u.ints, c.u.ints + c.count));
            break;
          case TESSERA_VALUE_STRING:
            if (!c.u.s) return invalid("graph.add_call: NULL string in argument " + std::to_string(a));
            arg = Argument::constant_value(std::string(c.u.s));
            break;
          case TESSERA_VALUE_DTYPE:
            if (c.u.i < 0 || c.u.i >= kNumDTypes)
              return invalid("graph.add_call: bad dtype in argument " + std::to_string(a));
            arg = Argument::constant_value(DType(c.u.i));
            break;
          default:
            return invalid("graph.add_call: unknown constant kind " + std::to_string(c.kind));
        }
        break;
      }
      default:
        return invalid("graph.add_call: unknown argument kind " + std::to_string(in.kind));
    }
    node.args.push_back(std::move(arg));
  }
  std::vector<TensorType> out_types;
  try {
    for (int32_t o = 0; o < num_outputs; ++o) {
      const tessera_graph_type_t& t = types[o];
      TESSERA_CHECK(t.dtype >= 0 && t.dtype < kNumDTypes, "output ", o, ": dtype ", t.dtype, " out of range");
      TESSERA_CHECK(t.rank >= 0 && t.rank <= 64 && (t.rank == 0 || t.sizes) && t.device, "output ", o,
                    ": rank out of range or NULL sizes/device");
      TensorType type{DType(t.dtype), Device(t.device), {}};
      for (int32_t d = 0; d < t.rank; ++d) {
        TESSERA_CHECK(t.sizes[d], "output ", o, ": size ", d, " is NULL");
        type.sizes.push_back(SymSize::parse(t.sizes[d]));
      }
      out_types.push_back(std::move(type));
    }
  } catch (const std::exception& e) {
    return invalid(std::string("graph.add_call: ") + e.what());
  }
  for (int32_t o = 0; o < num_outputs; ++o) {
    ValueId v = graph.add_value(std::move(out_types[size_t(o)]));
    node.outputs.push_back(v);
    out_values[o] = v;
  }
  graph.nodes.insert(graph.nodes.begin() + ptrdiff_t(pos), std::move(node));
  refresh_symbols(g);
  return nullptr;
}

tessera_status_t replace_uses(tessera_graph_t* g, int32_t old_value, int32_t new_value) {
  if (auto st = writable_check(g, "replace_uses")) return st;
  if (!value_ok(g, old_value) || !value_ok(g, new_value))
    return invalid("graph.replace_uses: value " + std::to_string(old_value) + " or " +
                   std::to_string(new_value) + " out of range");
  for (Node& n : g->program->graph.nodes)
    for (Argument& a : n.args)
      for (ValueId& v : a.values)
        if (v == old_value) v = new_value;
  for (OutputSpec& o : g->program->signature.outputs)
    if (o.value == old_value) o.value = new_value;
  return nullptr;
}

tessera_status_t erase_node(tessera_graph_t* g, int32_t n) {
  if (auto st = writable_check(g, "erase_node")) return st;
  if (!node_ok(g, n)) return invalid("graph.erase_node: node " + std::to_string(n) + " out of range");
  Graph& graph = g->program->graph;
  const Node& node = graph.nodes[size_t(n)];
  if (node.kind != NodeKind::Call)
    return invalid("graph.erase_node: node " + std::to_string(n) + " is not a call");
  for (const Node& other : graph.nodes)
    for (const Argument& a : other.args)
      for (ValueId v : a.values)
        for (ValueId out : node.outputs)
          if (v == out)
            return invalid("graph.erase_node: node " + std::to_string(n) + " (" + node.target + ") output " +
                           graph.value_name(out) + " is still used by " +
                           (other.target.empty() ? "the output" : other.target));
  graph.nodes.erase(graph.nodes.begin() + n);
  return nullptr;
}

const tessera_graph_api_t kGraphApi = {
    .struct_size = sizeof(tessera_graph_api_t),
    .reserved_ = 0,
    .node_count = node_count,
    .node_kind = node_kind,
    .node_target = node_target,
    .node_num_args = node_num_args,
    .node_arg_kind = node_arg_kind,
    .node_arg_num_values = node_arg_num_values,
    .node_arg_value = node_arg_value,
    .node_arg_constant = node_arg_constant,
    .node_num_outputs = node_num_outputs,
    .node_output = node_output,
    .value_count = value_count,
    .value_name = value_name,
    .value_dtype = value_dtype,
    .value_device = value_device,
    .value_rank = value_rank,
    .value_size = value_size,
    .input_count = input_count,
    .input = input,
    .output_count = output_count,
    .output = output,
    .symbol_count = symbol_count,
    .symbol = symbol,
    .add_call = add_call,
    .replace_uses = replace_uses,
    .erase_node = erase_node,
};

// Every plugin's host table points at the dispatcher's copy of this table (set once, at load).
const bool kRegistered = (set_graph_api(kGraphApi), true);

static_assert(int(NodeKind::Placeholder) == TESSERA_NODE_PLACEHOLDER &&
              int(NodeKind::Call) == TESSERA_NODE_CALL && int(NodeKind::Output) == TESSERA_NODE_OUTPUT);
static_assert(int(Argument::Kind::Tensor) == TESSERA_ARG_TENSOR &&
              int(Argument::Kind::TensorList) == TESSERA_ARG_TENSOR_LIST &&
              int(Argument::Kind::None) == TESSERA_ARG_NONE &&
              int(Argument::Kind::Constant) == TESSERA_ARG_CONSTANT);
static_assert(int(InputKind::UserInput) == TESSERA_INPUT_USER &&
              int(InputKind::Parameter) == TESSERA_INPUT_PARAMETER &&
              int(InputKind::Constant) == TESSERA_INPUT_CONSTANT);

}  // namespace

const tessera_graph_api_t* graph_api() {
  (void)kRegistered;
  return &kGraphApi;
}

GraphHandle::GraphHandle(ExportedProgram& program, bool writable)
    : graph_(new tessera_graph_t{&program, writable, {}, {}, {}}) {
  refresh_symbols(graph_.get());
}

GraphHandle::~GraphHandle() = default;
const tessera_graph_t* GraphHandle::get() const { return graph_.get(); }
tessera_graph_t* GraphHandle::get_mutable() {
  TESSERA_CHECK(graph_->writable, "GraphHandle: the graph is read-only");
  return graph_.get();
}

}  // namespace tessera::compiler
