// ExportedProgram::run: the graph interpreted node by node through the dispatcher.
#include <optional>

#include "tessera/compiler/ir.h"
#include "tessera/dispatcher.h"
#include "tessera/error.h"

namespace tessera::compiler {

namespace {

Value constant_value(const Constant& c) {
  return std::visit([](const auto& v) -> Value { return v; }, c);
}

// Binds the symbols of `type`'s sizes to `t`'s sizes: constants must match, a symbol takes the same
// value everywhere and stays inside its range.
void bind_input(const ExportedProgram& ep, const InputSpec& in, const Tensor& t,
                std::map<std::string, int64_t>& env) {
  const TensorType& type = ep.graph.type(in.value);
  TESSERA_CHECK(t.defined(), "run: input '", in.name, "' is undefined");
  TESSERA_CHECK(t.dtype() == type.dtype, "run: input '", in.name, "' has dtype ", dtype_short_name(t.dtype()),
                "; the program takes ", type.str());
  TESSERA_CHECK(t.dim() == int64_t(type.sizes.size()), "run: input '", in.name, "' has sizes ", t.sizes(),
                "; the program takes ", type.str());
  for (size_t d = 0; d < type.sizes.size(); ++d) {
    const SymSize& s = type.sizes[d];
    int64_t actual = t.sizes()[d];
    if (auto c = s.maybe_constant()) {
      TESSERA_CHECK(*c == actual, "run: input '", in.name, "' has sizes ", t.sizes(), "; the program takes ",
                    type.str(), " (dim ", d, " must be ", *c, ")");
      continue;
    }
    std::vector<std::string> syms = s.symbols();
    if (syms.size() == 1 && s.same_as(SymSize::symbol(syms[0])) && !env.count(syms[0])) {
      auto r = ep.ranges.find(syms[0]);
      if (r != ep.ranges.end())
        TESSERA_CHECK(actual >= r->second.min && actual <= r->second.max, "run: input '", in.name, "' dim ",
                      d, " (", syms[0], ") is ", actual, "; the program was exported for ", syms[0], " in [",
                      r->second.min, ", ", r->second.max, "]");
      env[syms[0]] = actual;
    }
  }
}

void check_sizes(const ExportedProgram& ep, const InputSpec& in, const Tensor& t,
                 const std::map<std::string, int64_t>& env) {
  const TensorType& type = ep.graph.type(in.value);
  for (size_t d = 0; d < type.sizes.size(); ++d) {
    int64_t want = type.sizes[d].evaluate(env);
    TESSERA_CHECK(want == t.sizes()[d], "run: input '", in.name, "' has sizes ", t.sizes(),
                  "; the program takes ", type.str(), " where dim ", d, " = ", type.sizes[d].str(), " = ",
                  want);
  }
}

}  // namespace

std::vector<Tensor> ExportedProgram::run(const std::vector<Tensor>& inputs) const {
  size_t n_user = 0;
  for (const InputSpec& in : signature.inputs) n_user += in.kind == InputKind::UserInput;
  TESSERA_CHECK(inputs.size() == n_user, "run: got ", inputs.size(), " inputs; the program takes ", n_user);
  std::optional<Device> device;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    if (!device) device = t.device();
    TESSERA_CHECK(t.device().type() == device->type(), "run: inputs are on ", device->str(), " and ",
                  t.device().str(), "; move them to one device");
  }
  if (!device) device = Device(DeviceType::CPU);

  std::vector<std::optional<Tensor>> env(graph.values.size());
  std::map<std::string, int64_t> symbols;
  size_t k = 0;
  for (const InputSpec& in : signature.inputs)
    if (in.kind == InputKind::UserInput) bind_input(*this, in, inputs[k++], symbols);
  k = 0;
  for (const InputSpec& in : signature.inputs) {
    TESSERA_INTERNAL_ASSERT(in.value >= 0 && size_t(in.value) < env.size());
    if (in.kind == InputKind::UserInput) {
      check_sizes(*this, in, inputs[k], symbols);
      env[size_t(in.value)] = inputs[k++];
      continue;
    }
    auto w = weights.find(in.name);
    TESSERA_CHECK(w != weights.end(), "run: the program has no weight '", in.name, "'");
    env[size_t(in.value)] = w->second.device() == *device ? w->second : w->second.to(*device);
  }

  auto get = [&](ValueId v, const Node& n) -> const Tensor& {
    TESSERA_CHECK(v >= 0 && size_t(v) < env.size() && env[size_t(v)], "run: node '", n.target,
                  "' uses value ", v, " that no earlier node defined");
    return *env[size_t(v)];
  };
  Dispatcher& d = Dispatcher::instance();
  for (const Node& n : graph.nodes) {
    if (n.kind == NodeKind::Placeholder) continue;
    if (n.kind == NodeKind::Output) {
      std::vector<Tensor> out;
      for (const Argument& a : n.args) out.push_back(get(a.values.at(0), n));
      return out;
    }
    Stack args;
    for (const Argument& a : n.args) {
      switch (a.kind) {
        case Argument::Kind::Tensor:
          args.emplace_back(get(a.values.at(0), n));
          break;
        case Argument::Kind::TensorList: {
          std::vector<Tensor> list;
          for (ValueId v : a.values) list.push_back(get(v, n));
          args.emplace_back(std::move(list));
          break;
        }
        case Argument::Kind::None:
          args.emplace_back(std::monostate{});
          break;
        case Argument::Kind::Constant:
          args.push_back(constant_value(a.constant));
          break;
      }
    }
    Stack results = d.call_boxed(d.op(n.target), std::move(args));
    TESSERA_CHECK(results.size() == n.outputs.size(), "run: op '", n.target, "' returned ", results.size(),
                  " values; the graph expects ", n.outputs.size());
    for (size_t i = 0; i < results.size(); ++i) {
      Tensor* t = std::get_if<Tensor>(&results[i]);
      TESSERA_CHECK(t, "run: op '", n.target, "' output ", i, " is not a tensor");
      env[size_t(n.outputs[i])] = std::move(*t);
    }
  }
  TESSERA_CHECK(false, "run: the graph has no output node");
}

}  // namespace tessera::compiler
