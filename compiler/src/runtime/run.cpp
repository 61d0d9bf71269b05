// Note [Running a program]
// ExportedProgram::run interprets the graph node by node: a Call of a dispatcher op becomes a boxed
// call (Dispatcher::call_boxed) on the inputs' device, so every backend, composite and fallback rule
// applies as in eager mode; `view` and `permute` (Note [Captured views]) are core's views, and a
// view's size list is taken from its output type evaluated on the bound symbols (the list stored in
// the graph holds -1 for dynamic entries). A constant in a Tensor position is a C++ number next to
// a tensor in the original program and runs as one (a wrapped number). After each call the outputs'
// sizes are checked against the graph's symbolic sizes, so a graph that does not hold for the
// inputs fails at the node that breaks, not later.
#include <algorithm>
#include <mutex>
#include <optional>

#include "runtime/bind.h"
#include "runtime/interpret.h"
#include "tessera/autograd.h"
#include "tessera/dispatcher.h"
#include "tessera/error.h"
#include "tessera/generator.h"
#include "tessera/op_info.h"
#include "tessera/ops.h"

namespace tessera::compiler {

struct ExportedProgram::WeightCache {
  std::mutex mutex;
  struct Entry {
    Tensor source;  // the host weight it was made from (a program edited after a run gets new copies)
    Tensor on_device;
  };
  std::map<std::pair<std::string, std::string>, Entry> entries;  // (weight, device) -> copy
};

namespace {

// A C++ number as an operator argument (Note [Wrapped numbers reach kernels as they are]).
Tensor wrapped_number(const Constant& c) {
  Tensor t;
  if (auto* b = std::get_if<bool>(&c)) {
    t = scalar_tensor(Scalar(*b), TensorOptions().dtype(DType::Bool));
  } else if (auto* i = std::get_if<int64_t>(&c)) {
    t = scalar_tensor(Scalar(*i), TensorOptions().dtype(DType::Int64));
  } else if (auto* d = std::get_if<double>(&c)) {
    t = scalar_tensor(Scalar(*d), TensorOptions().dtype(DType::Float64));
  } else {
    TESSERA_CHECK(false, "run: constant ", constant_str(c), " stands in a Tensor position; expected a number");
  }
  t.impl()->set_wrapped_number(true);
  return t;
}

// Note [Random ops in a program]
// A random op (tagged "random": uniform_, normal_) takes the Philox seed and offset as arguments,
// and capture records those of the call it saw as constants. Run as recorded, every run of a
// program would draw the numbers of that one call. So a run reserves the op's counter values from
// the default generator of its tensor's device at the node, as eager mode does at the call
// (Note [Generators]), and passes those: every run draws fresh numbers, and after
// tessera::manual_seed(s) a program draws what the eager function draws after the same seed.
void draw_fresh_counters(const FunctionSchema& schema, Stack& args) {
  int seed = -1, offset = -1;
  for (size_t i = 0; i < schema.arguments.size() && i < args.size(); ++i) {
    if (schema.arguments[i].name == "seed") seed = int(i);
    if (schema.arguments[i].name == "offset") offset = int(i);
  }
  const Tensor* self = args.empty() ? nullptr : std::get_if<Tensor>(&args[0]);
  if (seed < 0 || offset < 0 || !self) return;
  const GeneratorState s = detail::reserve_for(*self);  // as eager mode's random fills
  args[size_t(seed)] = int64_t(s.seed);
  args[size_t(offset)] = int64_t(s.offset);
}

}  // namespace

Value constant_value(const Constant& c) {
  return std::visit([](const auto& v) -> Value {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, std::monostate>) return std::monostate{};
    else return v;
  }, c);
}

std::vector<Tensor> execute_node(const Graph& graph, const Node& n, const std::vector<Tensor>& env,
                                 const std::map<std::string, int64_t>& bindings) {
  auto value = [&](ValueId v) -> const Tensor& {
    const Tensor& t = env.at(size_t(v));
    TESSERA_CHECK(t.defined(), "run: value ", graph.value_name(v), " is used before it is computed");
    return t;
  };
  Dispatcher& dispatcher = Dispatcher::instance();
    std::vector<Tensor> results;
    if (n.target == "view" || n.target == "permute") {
      const Tensor& self = value(n.args.at(0).values.at(0));
      if (n.target == "view") {
        std::vector<int64_t> sizes;
        for (const SymSize& s : graph.type(n.outputs.at(0)).sizes) sizes.push_back(s.evaluate(bindings));
        results.push_back(self.view(sizes));
      } else {
        results.push_back(self.permute(std::get<std::vector<int64_t>>(n.args.at(1).constant)));
      }
    } else {
      OperatorEntry& op = dispatcher.op(n.target);
      const FunctionSchema& schema = dispatcher.schema(op);
      TESSERA_CHECK(n.args.size() <= schema.arguments.size(), "run: node '", n.target, "' has ", n.args.size(),
                    " arguments, its schema takes ", schema.arguments.size());
      Stack args;
      for (size_t i = 0; i < n.args.size(); ++i) {
        const Argument& a = n.args[i];
        const ArgType type = schema.arguments[i].type;
        switch (a.kind) {
          case Argument::Kind::Tensor:
            if (type == ArgType::OptionalTensor) args.emplace_back(std::optional<Tensor>(value(a.values.at(0))));
            else args.emplace_back(value(a.values.at(0)));
            break;
          case Argument::Kind::TensorList: {
            std::vector<Tensor> list;
            for (ValueId v : a.values) list.push_back(value(v));
            args.emplace_back(std::move(list));
            break;
          }
          case Argument::Kind::None: args.emplace_back(std::monostate{}); break;
          case Argument::Kind::Constant:
            if (type == ArgType::Tensor) args.emplace_back(wrapped_number(a.constant));
            else args.emplace_back(constant_value(a.constant));
            break;
        }
      }
      // Note [Random ops in a program]: fresh numbers every run, from the device's default generator.
      if (const op::OpInfo* info = op::find_op_info(n.target); info && info->has(op::kTagRandom))
        draw_fresh_counters(schema, args);
      bool any_tensor = false;
      for (const Argument& a : n.args)
        any_tensor = any_tensor || a.kind == Argument::Kind::Tensor || a.kind == Argument::Kind::TensorList;
      for (Value& v : dispatcher.call_boxed(op, std::move(args))) results.push_back(std::get<Tensor>(std::move(v)));
      // A factory (arange) has no tensor argument to take a device from: a boxed call makes it on the
      // CPU, and it moves to the device the graph recorded for it.
      if (!any_tensor)
        for (size_t o = 0; o < results.size() && o < n.outputs.size(); ++o)
          if (const Device d = graph.type(n.outputs[o]).device; results[o].device() != d) results[o] = results[o].to(d);
    }
  return results;
}

Bindings check_run_inputs(const ExportedProgram& program, const std::vector<Tensor>& inputs, Device* out_device) {
  const Graph& graph = program.graph;
  const std::vector<Guard>& guards = program.guards;
  const auto& ranges = program.ranges;
  std::vector<const InputSpec*> user;
  for (const InputSpec& in : program.signature.inputs)
    if (in.kind == InputKind::UserInput) user.push_back(&in);
  TESSERA_CHECK(inputs.size() == user.size(), "run: the program takes ", user.size(), " inputs, got ", inputs.size());
  Device device(DeviceType::CPU);
  for (size_t i = 0; i < inputs.size(); ++i) {
    TESSERA_CHECK(inputs[i].defined(), "run: input ", i, " ('", user[i]->name, "') is undefined");
    if (i == 0) device = inputs[i].device();
    TESSERA_CHECK(inputs[i].device() == device, "run: inputs are on different devices (", device.str(), " and ",
                  inputs[i].device().str(), " for input '", user[i]->name, "'); move them to one device with .to(...)");
  }
  // Bind the symbols from the inputs' sizes (Note [Binding symbols]), then check every size and range.
  Bindings bindings;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorType& t = graph.type(user[i]->value);
    const Tensor& x = inputs[i];
    TESSERA_CHECK(x.dim() == int64_t(t.sizes.size()), "run: input '", user[i]->name, "' has ", x.dim(),
                  " dimensions, the program expects ", t.sizes.size(), " (", t.str(), ")");
    TESSERA_CHECK(x.dtype() == t.dtype, "run: input '", user[i]->name, "' has dtype ", x.dtype(),
                  ", the program expects ", t.dtype, "; convert it with .to(", t.dtype, ")");
    bind_symbols(t, x.sizes(), "run: input '" + user[i]->name + "'", bindings);
  }
  for (const auto& [name, value] : bindings) {
    auto r = ranges.find(name);
    if (r == ranges.end()) continue;
    TESSERA_CHECK(value >= r->second.min && value <= r->second.max, "run: ", name, " = ", value,
                  " is outside its range [", r->second.min, ", ", r->second.max,
                  "] declared at export; export again with a wider Dim to accept it");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorType& t = graph.type(user[i]->value);
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      const int64_t want = t.sizes[d].evaluate(bindings);
      TESSERA_CHECK(inputs[i].sizes()[d] == want, "run: input '", user[i]->name, "' has sizes ",
                    inputs[i].sizes(), ", the program expects ", ArrayRef<SymSize>(t.sizes), " (dimension ", d,
                    " must be ", (t.sizes[d].is_constant() ? std::string() : t.sizes[d].str() + " = "), want, ")");
    }
  }

  for (const Guard& g : guards) {
    if (g.holds(bindings)) continue;
    std::vector<std::string> names = g.lhs.symbols();
    for (const std::string& name : g.rhs.symbols())
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    std::string values;
    for (const std::string& name : names) values += (values.empty() ? "" : ", ") + name + " = " + std::to_string(bindings.at(name));
    detail::throw_error(ErrorCode::InvalidArgument,
                        "run: guard " + g.str() + (g.op.empty() ? std::string() : " of '" + g.op + "'") +
                            " fails for " + values + "; the program was exported with examples where it holds" +
                            (g.source.empty() ? std::string() : " (" + g.source + ")") +
                            ": export again with examples of these sizes or declare the dims so that the shape "
                            "rule need not compare them");
  }
  if (out_device) *out_device = device;
  return bindings;
}

void ExportedProgram::apply_state(const std::vector<StateUpdate>& state, std::vector<Tensor>& outputs) {
  if (state.empty()) return;
  TESSERA_INTERNAL_ASSERT(outputs.size() >= state.size(), "the program returned ", outputs.size(),
                          " outputs for ", state.size(), " state updates");
  const size_t first = outputs.size() - state.size();
  autograd::NoGradGuard no_grad;  // an optimizer's write into a parameter, as in its eager step
  for (size_t i = 0; i < state.size(); ++i) {
    const StateUpdate& u = state[i];
    Tensor& v = outputs[first + i];
    if (u.kind == StateUpdate::Kind::Grad) {
      autograd::set_grad(u.target, v);
      continue;
    }
    const bool same = v.storage().get() == u.target.storage().get() &&
                      v.storage_offset() == u.target.storage_offset() && v.strides() == u.target.strides();
    if (!same) const_cast<Tensor&>(u.target).copy_(v);
  }
  outputs.resize(first);
}

std::vector<Tensor> ExportedProgram::run(const std::vector<Tensor>& inputs) const {
  // A training step's program (Note [Program state]) runs as the optimizer's step does: no graph is
  // recorded for its ops, and its writes into parameters are not in-place errors.
  std::optional<autograd::NoGradGuard> no_grad;
  if (!state.empty()) no_grad.emplace();
  std::vector<const InputSpec*> user;
  for (const InputSpec& in : signature.inputs)
    if (in.kind == InputKind::UserInput) user.push_back(&in);
  Device device(DeviceType::CPU);
  const Bindings bindings = check_run_inputs(*this, inputs, &device);

  std::vector<Tensor> env(graph.values.size());
  for (size_t i = 0; i < inputs.size(); ++i) env[size_t(user[i]->value)] = inputs[i];
  {
    std::shared_ptr<WeightCache> cache;
    {
      static std::mutex create_mutex;  // concurrent first runs of one program create one cache
      std::lock_guard lock(create_mutex);
      if (!weight_cache_) weight_cache_ = std::make_shared<WeightCache>();
      cache = weight_cache_;
    }
    std::lock_guard lock(cache->mutex);
    for (const InputSpec& in : signature.inputs) {
      if (in.kind == InputKind::UserInput) continue;
      auto w = weights.find(in.name);
      TESSERA_CHECK(w != weights.end(), "run: the program has no weight '", in.name, "' for input ",
                    graph.value_name(in.value));
      // A 0-dim tensor the program recorded on the CPU is an operand on every device (Note [Autograd
      // dispatch]): read as it is, so a value written between runs (a training step's lr) is seen.
      if (w->second.dim() == 0 && w->second.device().is_cpu() && graph.type(in.value).device.is_cpu()) {
        env[size_t(in.value)] = w->second;
        continue;
      }
      WeightCache::Entry& e = cache->entries[{in.name, device.str()}];
      if (!e.on_device.defined() || !e.source.is_same(w->second)) {
        e.source = w->second;
        e.on_device = w->second.to(device);
      }
      env[size_t(in.value)] = e.on_device;
    }
  }
  auto value = [&](ValueId v) -> const Tensor& {
    const Tensor& t = env.at(size_t(v));
    TESSERA_CHECK(t.defined(), "run: value ", graph.value_name(v), " is used before it is computed");
    return t;
  };
  std::vector<Tensor> outputs;
  for (const Node& n : graph.nodes) {
    if (n.kind == NodeKind::Placeholder) continue;
    if (n.kind == NodeKind::Output) {
      for (const Argument& a : n.args) outputs.push_back(value(a.values.at(0)));
      continue;
    }
    std::vector<Tensor> results = execute_node(graph, n, env, bindings);
    TESSERA_CHECK(results.size() == n.outputs.size(), "run: '", n.target, "' returned ", results.size(),
                  " outputs, the graph expects ", n.outputs.size());
    for (size_t o = 0; o < results.size(); ++o) {
      const TensorType& t = graph.type(n.outputs[o]);
      bool ok = results[o].dim() == int64_t(t.sizes.size());
      for (size_t d = 0; ok && d < t.sizes.size(); ++d) ok = results[o].sizes()[d] == t.sizes[d].evaluate(bindings);
      TESSERA_CHECK(ok, "run: '", n.target, "' produced sizes ", results[o].sizes(), " for ",
                    graph.value_name(n.outputs[o]), ", the graph says ", ArrayRef<SymSize>(t.sizes),
                    "; the program does not hold for these input sizes");
      env[size_t(n.outputs[o])] = std::move(results[o]);
    }
  }
  apply_state(state, outputs);
  return outputs;
}

}  // namespace tessera::compiler
