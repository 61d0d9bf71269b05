// The fusion plan of generate_cpp (see fusion_plan.h). The ops the loops implement are matched by
// the contract's generated names (tessera/op_names.h), so a name that is not an op cannot compile.
#include "backends/cpp/fusion_plan.h"

#include <cmath>
#include <sstream>
#include <string_view>
#include <variant>

#include "tessera/op_names.h"

namespace tessera::compiler::codegen::cppgen {
namespace {

bool float_dtype(DType d) { return d == DType::Float32 || d == DType::BFloat16; }

bool same_sizes(const std::vector<SymSize>& a, const std::vector<SymSize>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i].same_as(b[i])) return false;
  return true;
}

bool all_ones(const std::vector<SymSize>& s, size_t end) {
  for (size_t i = 0; i < end; ++i)
    if (!(s[i].maybe_constant() == std::optional<int64_t>(1))) return false;
  return true;
}

Kind combine(Kind a, Kind b) {
  if (a == b) return a;
  if (a == Kind::Scalar) return b;
  if (b == Kind::Scalar) return a;
  return Kind::Full;  // Row with Col, or anything with Full
}

// A constant argument as a C++ float expression.
std::optional<std::string> literal(const Argument& a) {
  if (a.kind != Argument::Kind::Constant) return std::nullopt;
  std::ostringstream os;
  os.precision(17);
  if (auto* i = std::get_if<int64_t>(&a.constant)) {
    os << "float(" << *i << ")";
  } else if (auto* d = std::get_if<double>(&a.constant)) {
    if (!std::isfinite(*d)) return std::nullopt;
    os << "float(" << *d << ")";
  } else if (auto* b = std::get_if<bool>(&a.constant)) {
    os << (*b ? "1.0f" : "0.0f");
  } else {
    return std::nullopt;
  }
  return os.str();
}

std::optional<double> number(const Argument& a) {
  if (auto* i = std::get_if<int64_t>(&a.constant)) return double(*i);
  if (auto* d = std::get_if<double>(&a.constant)) return *d;
  return std::nullopt;
}

std::optional<Operand> operand(const Node& n, size_t i) {
  if (i >= n.args.size()) return std::nullopt;
  const Argument& a = n.args[i];
  if (a.kind == Argument::Kind::Tensor) return Operand{a.values[0], {}};
  if (auto l = literal(a)) return Operand{-1, *l};
  return std::nullopt;
}

// Unary ops: the node's name and its lane function in tessera/vecmath/vecmath.h.
struct UnaryEntry {
  std::string_view op;
  const char* format;
};
constexpr UnaryEntry kUnary[] = {
    {op::neg::name, "vf_neg({0})"},         {op::abs::name, "vf_abs({0})"},
    {op::relu::name, "vf_relu({0})"},       {op::exp::name, "vf_exp({0})"},
    {op::log::name, "vf_log({0})"},         {op::sqrt::name, "vf_sqrt({0})"},
    {op::rsqrt::name, "vf_rsqrt({0})"},     {op::sin::name, "vf_sin({0})"},
    {op::cos::name, "vf_cos({0})"},         {op::tanh::name, "vf_tanh({0})"},
    {op::sigmoid::name, "vf_sigmoid({0})"}, {op::silu::name, "vf_silu({0})"},
    {op::erf::name, "vf_erf({0})"},
};
constexpr UnaryEntry kBinary[] = {
    {op::mul_Tensor::name, "vf_mul({0}, {1})"}, {op::div_Tensor::name, "vf_div({0}, {1})"},
    {op::maximum::name, "vf_max({0}, {1})"},    {op::minimum::name, "vf_min({0}, {1})"},
};

template <size_t N>
const char* find(const UnaryEntry (&table)[N], const std::string& name) {
  for (const UnaryEntry& e : table)
    if (e.op == name) return e.format;
  return nullptr;
}

std::optional<FusedOp> reduction_op(const Node& n, const Graph& g) {
  const std::string& t = n.target;
  FusedOp op;
  auto a = operand(n, 0);
  if (!a || a->value < 0) return std::nullopt;
  const int64_t rank = int64_t(g.type(a->value).sizes.size());
  std::vector<int64_t> dims;
  if (n.args.size() > 1) {
    auto* d = std::get_if<std::vector<int64_t>>(&n.args[1].constant);
    if (!d) return std::nullopt;
    dims = *d;
  }
  if (n.args.size() > 2) {
    auto* k = std::get_if<bool>(&n.args[2].constant);
    if (!k) return std::nullopt;
    op.keepdim = *k;
  }
  if (n.args.size() > 3) return std::nullopt;  // a dtype argument
  const bool last_dim = dims.size() == 1 && rank >= 1 && (dims[0] == -1 || dims[0] == rank - 1);
  const bool everything_1d = rank == 1 && dims.empty();
  if (!last_dim && !everything_1d) return std::nullopt;
  if (everything_1d && !op.keepdim) return std::nullopt;  // a 0-d result: not a row
  op.operands = {*a};
  op.reduction = t == op::sum::name    ? Reduction::Sum
                 : t == op::mean::name ? Reduction::Mean
                 : t == op::amax::name ? Reduction::Max
                                       : Reduction::Min;
  return op;
}

// The pointwise ops and last-dim reductions the loops implement; nullopt for anything else.
std::optional<FusedOp> fused_op(const Node& n, const Graph& g) {
  if (n.kind != NodeKind::Call || n.outputs.size() != 1) return std::nullopt;
  const std::string& t = n.target;
  FusedOp op;
  if (const char* f = find(kUnary, t)) {
    auto a = operand(n, 0);
    if (!a || a->value < 0) return std::nullopt;
    op.operands = {*a};
    op.format = f;
  } else if (t == op::gelu::name) {
    auto a = operand(n, 0);
    if (!a || a->value < 0) return std::nullopt;
    std::string approximate = "none";
    if (n.args.size() > 1) {
      auto* s = std::get_if<std::string>(&n.args[1].constant);
      if (!s) return std::nullopt;
      approximate = *s;
    }
    op.operands = {*a};
    if (approximate == "none") op.format = "vf_gelu({0})";
    else if (approximate == "tanh") op.format = "vf_gelu_tanh({0})";
    else return std::nullopt;
  } else if (const char* f2 = find(kBinary, t)) {
    auto a = operand(n, 0), b = operand(n, 1);
    if (!a || !b) return std::nullopt;
    op.operands = {*a, *b};
    op.format = f2;
  } else if (t == op::add_Tensor::name || t == op::sub_Tensor::name) {
    auto a = operand(n, 0), b = operand(n, 1);
    if (!a || !b) return std::nullopt;
    const char* fn = t == op::add_Tensor::name ? "vf_add" : "vf_sub";
    op.operands = {*a, *b};
    op.format = std::string(fn) + "({0}, {1})";
    if (n.args.size() > 2) {
      auto alpha = number(n.args[2]);
      if (!alpha || !std::isfinite(*alpha)) return std::nullopt;
      if (*alpha != 1) {
        op.operands.push_back(Operand{-1, *literal(n.args[2])});
        op.format = std::string(fn) + "({0}, vf_mul({2}, {1}))";
      }
    }
  } else if (t == op::pow_Tensor_Scalar::name) {
    auto a = operand(n, 0);
    if (!a || a->value < 0 || n.args.size() < 2) return std::nullopt;
    auto e = number(n.args[1]);
    if (!e || !std::isfinite(*e)) return std::nullopt;
    op.operands = {*a, Operand{-1, *literal(n.args[1])}};
    if (*e == 2) op.format = "vf_mul({0}, {0})";
    else if (*e == 3) op.format = "vf_mul(vf_mul({0}, {0}), {0})";
    else if (*e == 1) op.format = "{0}";
    else if (*e == 0.5) op.format = "vf_sqrt({0})";
    else if (*e == -1) op.format = "vf_div(vf_set(1.0f), {0})";
    else if (*e == -0.5) op.format = "vf_rsqrt({0})";
    else op.format = "vf_pow({0}, {1})";
  } else if (t == op::sum::name || t == op::mean::name || t == op::amax::name || t == op::amin::name) {
    auto r = reduction_op(n, g);
    if (!r) return std::nullopt;
    op = *r;
  } else {
    return std::nullopt;
  }
  for (const Operand& o : op.operands)
    if (o.value >= 0 && (!float_dtype(g.type(o.value).dtype) || !g.type(o.value).device.is_cpu()))
      return std::nullopt;
  const TensorType& out = g.type(n.outputs[0]);
  if (!float_dtype(out.dtype) || !out.device.is_cpu()) return std::nullopt;
  return op;
}

class Planner {
 public:
  explicit Planner(const Graph& g) : g_(g) {}

  FusionPlan run() {
    for (int i = 0; i < int(g_.nodes.size()); ++i) {
      const Node& n = g_.nodes[size_t(i)];
      if (n.kind != NodeKind::Call) continue;
      auto op = fused_op(n, g_);
      if (op && !plan_.steps.empty() && plan_.steps.back().fused && try_add(plan_.steps.back(), i, *op)) continue;
      if (op) {
        Step s;
        s.fused = true;
        s.domain = op->reduction != Reduction::None ? g_.type(op->operands[0].value).sizes
                                                    : g_.type(n.outputs[0]).sizes;
        if (!s.domain.empty() && try_add(s, i, *op)) {
          plan_.steps.push_back(std::move(s));
          continue;
        }
      }
      Step e;
      e.nodes = {i};
      plan_.steps.push_back(std::move(e));
    }
    return std::move(plan_);
  }

 private:
  std::optional<Kind> operand_kind(const Step& s, const Operand& o) const {
    if (o.value < 0) return Kind::Scalar;
    // A keepdim=False reduction holds one value per row but broadcasts from the right like any
    // [rows] tensor: its readers belong to a later group, which reads it by its shape.
    if (plan_.flat_rows.count(o.value) && s.kinds.count(o.value)) return std::nullopt;
    if (auto it = s.kinds.find(o.value); it != s.kinds.end()) return it->second;
    return kind_in(g_.type(o.value).sizes, s.domain);
  }

  bool try_add(Step& s, int i, const FusedOp& op) {
    const Node& n = g_.nodes[size_t(i)];
    const std::vector<SymSize>& out_sizes = g_.type(n.outputs[0]).sizes;
    Kind k = Kind::Scalar;
    for (const Operand& o : op.operands) {
      auto ok = operand_kind(s, o);
      if (!ok) return false;
      if (op.reduction != Reduction::None && *ok != Kind::Full) return false;
      k = combine(k, *ok);
    }
    if (op.reduction != Reduction::None) {
      std::vector<SymSize> expect = s.domain;
      if (op.keepdim) expect.back() = 1;
      else expect.pop_back();
      if (!same_sizes(out_sizes, expect)) return false;
      k = Kind::Row;
      if (!op.keepdim) plan_.flat_rows.insert(n.outputs[0]);
    } else {
      if (k == Kind::Col || k == Kind::Scalar) return false;  // not worth a loop over rows
      auto ok = kind_in(out_sizes, s.domain);
      if (!ok || *ok != k) return false;
    }
    s.nodes.push_back(i);
    s.kinds[n.outputs[0]] = k;
    s.ops[i] = op;
    return true;
  }

  const Graph& g_;
  FusionPlan plan_;
};

}  // namespace

std::optional<Kind> kind_in(const std::vector<SymSize>& s, const std::vector<SymSize>& d) {
  if (all_ones(s, s.size())) return Kind::Scalar;
  if (d.empty() || s.size() > d.size()) return std::nullopt;
  if (same_sizes(s, d)) return Kind::Full;
  if (s.size() == d.size() && s.back().maybe_constant() == std::optional<int64_t>(1)) {
    for (size_t i = 0; i + 1 < d.size(); ++i)
      if (!s[i].same_as(d[i])) return std::nullopt;
    return Kind::Row;
  }
  if (s.back().same_as(d.back()) && all_ones(s, s.size() - 1)) return Kind::Col;
  return std::nullopt;
}

SymSize product(const std::vector<SymSize>& sizes, size_t begin, size_t end) {
  SymSize p = 1;
  for (size_t i = begin; i < end; ++i) p = p * sizes[i];
  return p;
}

int producer(const Graph& g, ValueId v) {
  for (int i = 0; i < int(g.nodes.size()); ++i)
    for (ValueId o : g.nodes[size_t(i)].outputs)
      if (o == v) return i;
  return -1;
}

FusionPlan plan_fusion(const Graph& g) { return Planner(g).run(); }

}  // namespace tessera::compiler::codegen::cppgen
