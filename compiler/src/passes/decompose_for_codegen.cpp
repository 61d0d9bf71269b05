// decompose_for_codegen: softmax, log_softmax, layer_norm and rms_norm over the last dim become the
// pointwise ops and reductions the generator fuses (Note [Generated loops]). It emits only ops of the
// contract (tessera/op_names.h), and CompiledGraph::compile verifies its output.
#include <limits>

#include "tessera/compiler/codegen.h"
#include "tessera/op_names.h"

namespace tessera::compiler::codegen {
namespace {

class Decomposer {
 public:
  explicit Decomposer(ExportedProgram& p) : p_(p), g_(p.graph) {}

  bool run() {
    std::vector<Node> old = std::move(g_.nodes);
    g_.nodes.clear();
    bool changed = false;
    for (Node& n : old) {
      if (n.kind == NodeKind::Call && n.outputs.size() == 1 && expand(n)) {
        changed = true;
        continue;
      }
      g_.nodes.push_back(std::move(n));
    }
    return changed;
  }

 private:
  static Argument T(ValueId v) { return Argument::tensor(v); }
  static Argument C(Constant c) { return Argument::constant_value(std::move(c)); }

  ValueId emit(const std::string& target, std::vector<Argument> args, const TensorType& type, ValueId out = -1) {
    if (out < 0) out = g_.add_value(type);
    g_.nodes.push_back({NodeKind::Call, target, std::move(args), {out}});
    return out;
  }

  TensorType row_type(const TensorType& t) {
    TensorType r = t;
    r.sizes.back() = 1;
    return r;
  }

  ValueId reduce(const char* target, ValueId x) {
    const TensorType& t = g_.type(x);
    return emit(target, {T(x), C(std::vector<int64_t>{-1}), C(true)}, row_type(t));
  }

  bool last_dim(const Argument& a, size_t rank) {
    if (auto* d = std::get_if<int64_t>(&a.constant)) return *d == -1 || *d == int64_t(rank) - 1;
    return false;
  }

  std::optional<double> number(const Node& n, size_t i, double absent) {
    if (i >= n.args.size() || n.args[i].kind == Argument::Kind::None) return absent;
    if (n.args[i].kind != Argument::Kind::Constant) return std::nullopt;
    if (auto* d = std::get_if<double>(&n.args[i].constant)) return *d;
    if (auto* k = std::get_if<int64_t>(&n.args[i].constant)) return double(*k);
    if (std::holds_alternative<std::monostate>(n.args[i].constant)) return absent;
    return std::nullopt;
  }

  // A tensor argument at i that is present, or -1 (None or absent); nullopt when it is neither.
  std::optional<ValueId> optional_tensor(const Node& n, size_t i) {
    if (i >= n.args.size() || n.args[i].kind == Argument::Kind::None) return ValueId(-1);
    if (n.args[i].kind == Argument::Kind::Constant && std::holds_alternative<std::monostate>(n.args[i].constant))
      return ValueId(-1);
    if (n.args[i].kind == Argument::Kind::Tensor) return n.args[i].values[0];
    return std::nullopt;
  }

  bool expand(const Node& n) {
    const bool softmax = n.target == op::softmax::name;
    const bool log_softmax = n.target == op::log_softmax::name;
    const bool layer_norm = n.target == op::layer_norm::name;
    const bool rms_norm = n.target == op::rms_norm::name;
    if (!(softmax || log_softmax || layer_norm || rms_norm)) return false;
    if (n.args.empty() || n.args[0].kind != Argument::Kind::Tensor) return false;
    const ValueId x = n.args[0].values[0];
    const TensorType t = g_.type(x);
    if ((t.dtype != DType::Float32 && t.dtype != DType::BFloat16) || !t.device.is_cpu() || t.sizes.empty())
      return false;
    const ValueId out = n.outputs[0];
    if (!g_.type(out).same_as(t)) return false;
    if (softmax || log_softmax) {
      if (n.args.size() < 2 || !last_dim(n.args[1], t.sizes.size()) || n.args.size() > 2) return false;
      const ValueId m = reduce(op::amax::name, x);
      const ValueId s = emit(op::sub_Tensor::name, {T(x), T(m)}, t);
      const ValueId e = emit(op::exp::name, {T(s)}, t);
      const ValueId z = reduce(op::sum::name, e);
      if (softmax) {
        emit(op::div_Tensor::name, {T(e), T(z)}, t, out);
      } else {
        const ValueId lz = emit(op::log::name, {T(z)}, row_type(t));
        emit(op::sub_Tensor::name, {T(s), T(lz)}, t, out);
      }
      return true;
    }
    // layer_norm / rms_norm over exactly the last dim.
    if (n.args.size() < 2) return false;
    auto* shape = std::get_if<std::vector<int64_t>>(&n.args[1].constant);
    if (!shape || shape->size() != 1 || !t.sizes.back().maybe_constant() || *t.sizes.back().maybe_constant() != (*shape)[0])
      return false;
    const auto weight = optional_tensor(n, 2);
    const auto bias = layer_norm ? optional_tensor(n, 3) : std::optional<ValueId>(-1);
    const auto eps = number(n, layer_norm ? 4 : 3,
                            layer_norm ? 1e-5 : double(std::numeric_limits<float>::epsilon()));
    if (!weight || !bias || !eps) return false;
    ValueId c = x;
    if (layer_norm) c = emit(op::sub_Tensor::name, {T(x), T(reduce(op::mean::name, x))}, t);
    const ValueId sq = emit(op::mul_Tensor::name, {T(c), T(c)}, t);
    const ValueId var = reduce(op::mean::name, sq);
    const ValueId ve = emit(op::add_Tensor::name, {T(var), C(*eps)}, row_type(t));
    const ValueId rstd = emit(op::rsqrt::name, {T(ve)}, row_type(t));
    const bool last_is_norm = *weight < 0 && *bias < 0;
    ValueId y = emit(op::mul_Tensor::name, {T(c), T(rstd)}, t, last_is_norm ? out : -1);
    if (*weight >= 0) y = emit(op::mul_Tensor::name, {T(y), T(*weight)}, t, *bias < 0 ? out : -1);
    if (*bias >= 0) emit(op::add_Tensor::name, {T(y), T(*bias)}, t, out);
    return true;
  }

  ExportedProgram& p_;
  Graph& g_;
};

}  // namespace

bool decompose_for_codegen(ExportedProgram& program) { return Decomposer(program).run(); }

}  // namespace tessera::compiler::codegen
