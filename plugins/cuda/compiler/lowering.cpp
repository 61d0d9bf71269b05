// See lowering.h, Note [Fused CUDA kernels] and Note [Fused row reductions] in fused_program.h.
#include "lowering.h"

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace tessera::cuda_fuser {
namespace {

using sdk::Error;
using sdk::GraphView;
using Shape = std::vector<std::string>;  // size expressions ("512", "s0")

std::optional<FDType> fused_dtype(int32_t dtype) {
  switch (dtype) {
    case TESSERA_DTYPE_FLOAT32:
      return FDType::Float32;
    case TESSERA_DTYPE_FLOAT64:
      return FDType::Float64;
    case TESSERA_DTYPE_FLOAT16:
      return FDType::Float16;
    case TESSERA_DTYPE_BFLOAT16:
      return FDType::BFloat16;
    default:
      return std::nullopt;
  }
}

Shape shape_of(const GraphView& g, int32_t v) {
  Shape s;
  for (int32_t d = 0; d < g.rank(v); ++d) s.push_back(g.size(v, d).expr);
  return s;
}

// Sizes right-aligned, each equal or 1 (symbolic sizes compared as expressions).
bool broadcasts_to(const Shape& s, const Shape& d) {
  if (s.size() > d.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const std::string& a = s[i];
    if (a != d[d.size() - s.size() + i] && a != "1") return false;
  }
  return true;
}

// One value per row of domain d: it broadcasts to d and does not vary along d's last dim.
bool row_shaped(const Shape& s, const Shape& d) {
  return !d.empty() && d.back() != "1" && broadcasts_to(s, d) && (s.empty() || s.back() == "1");
}

// Whether s is d with its last size 1 (a keepdim reduction's shape).
bool is_row_shape(const Shape& s, const Shape& d) {
  if (d.empty() || s.size() != d.size() || s.back() != "1") return false;
  for (size_t i = 0; i + 1 < d.size(); ++i)
    if (s[i] != d[i]) return false;
  return true;
}

// A block per row leaves most of the GPU idle when a few rows are long: with sizes known to be
// fewer than kMinRows rows of more than kMaxFewRowsK, reductions are left to the CUDA plugin's
// kernels (Note [Fused row reductions]). Symbolic sizes are taken (a dynamic dim is mostly a batch).
constexpr int64_t kMinRows = 64, kMaxFewRowsK = 4096;
bool few_long_rows(const Shape& d) {
  std::vector<int64_t> sizes;
  for (const std::string& e : d) {
    if (e.empty() || e.size() > 18 || e.find_first_not_of("0123456789") != std::string::npos) return false;
    sizes.push_back(std::stoll(e));
  }
  if (sizes.empty()) return false;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < sizes.size() && rows < kMinRows; ++i) rows *= sizes[i];
  return rows < kMinRows && sizes.back() > kMaxFewRowsK;
}

std::optional<tessera_value_t> constant(const GraphView& g, int32_t node, int32_t arg) {
  if (arg >= g.num_args(node) || g.arg_kind(node, arg) != TESSERA_ARG_CONSTANT) return std::nullopt;
  return g.arg_constant(node, arg);
}

// gelu's `approximate` argument ("none" when absent).
std::string approximate_of(const GraphView& g, int32_t node) {
  if (std::strcmp(g.target(node), "gelu") != 0 || g.num_args(node) < 2) return "none";
  const std::optional<tessera_value_t> v = constant(g, node, 1);
  return v && v->kind == TESSERA_VALUE_STRING && v->u.s ? v->u.s : "?";
}

enum class Form { Pointwise, Reduction, Softmax, LogSoftmax, LayerNorm, RmsNorm };

// A node the plugin takes, as it reads it.
struct Fusable {
  Form form = Form::Pointwise;
  FOp op = FOp::Add;             // the elementwise op or the reduction
  std::vector<int32_t> tensors;  // pointwise: the tensor operands; others: x, then weight, bias
  bool keepdim = true;           // reductions
  double eps = 0;                // norms
  int32_t weight = -1, bias = -1;
};

bool is_float(const GraphView& g, int32_t v) { return fused_dtype(g.dtype(v)).has_value(); }

std::optional<Fusable> pointwise(const GraphView& g, int32_t node) {
  const std::optional<FOp> op = fused_op(g.target(node), approximate_of(g, node));
  if (!op) return std::nullopt;
  const int32_t out = g.output(node);
  const int32_t operands = is_binary(*op) ? 2 : 1;
  if (g.num_args(node) < operands) return std::nullopt;
  Fusable f;
  f.op = *op;
  for (int32_t a = 0; a < g.num_args(node); ++a) {
    if (a < operands && g.arg_kind(node, a) == TESSERA_ARG_TENSOR) {
      const int32_t v = g.arg_value(node, a);
      if (g.dtype(v) != g.dtype(out) || !broadcasts_to(shape_of(g, v), shape_of(g, out))) return std::nullopt;
      f.tensors.push_back(v);
    } else if (*op == FOp::GeluErf || *op == FOp::GeluTanh) {
      if (a >= operands) continue;  // the approximate string, read above
      return std::nullopt;
    } else if (!g.arg_number(node, a)) {
      return std::nullopt;  // alpha, the exponent and constant operands are numbers
    }
  }
  return f;
}

// Whether `dim` (an int or a one-entry int list) names the last of `rank` dims.
bool last_dim(const tessera_value_t& v, int32_t rank) {
  int64_t d = 0;
  if (v.kind == TESSERA_VALUE_INT)
    d = v.u.i;
  else if (v.kind == TESSERA_VALUE_INT_LIST && v.count == 1)
    d = v.u.ints[0];
  else
    return false;
  return d == -1 || d == rank - 1;
}

// An optional tensor argument: its value, -1 when absent, nullopt when it is something else.
std::optional<int32_t> optional_tensor(const GraphView& g, int32_t node, int32_t arg) {
  if (arg >= g.num_args(node) || g.arg_kind(node, arg) == TESSERA_ARG_NONE) return -1;
  if (g.arg_kind(node, arg) == TESSERA_ARG_TENSOR) return g.arg_value(node, arg);
  const std::optional<tessera_value_t> v = constant(g, node, arg);
  if (v && v->kind == TESSERA_VALUE_NONE) return -1;
  return std::nullopt;
}

std::optional<Fusable> reduction_or_norm(const GraphView& g, int32_t node) {
  const std::string t = g.target(node);
  if (g.num_args(node) < 1 || g.arg_kind(node, 0) != TESSERA_ARG_TENSOR) return std::nullopt;
  const int32_t x = g.arg_value(node, 0), out = g.output(node), rank = g.rank(x);
  if (rank < 1 || rank > kMaxRank || g.dtype(out) != g.dtype(x)) return std::nullopt;
  Fusable f;
  f.tensors = {x};
  if (t == "sum" || t == "mean" || t == "amax" || t == "amin") {
    if (g.num_args(node) > 3) return std::nullopt;  // a dtype argument
    f.form = Form::Reduction;
    f.op = t == "sum" ? FOp::RowSum : t == "mean" ? FOp::RowMean : t == "amax" ? FOp::RowMax : FOp::RowMin;
    const std::optional<tessera_value_t> dims = constant(g, node, 1);
    const bool every_dim_of_a_vector =
        rank == 1 &&
        (g.num_args(node) < 2 || (dims && dims->kind == TESSERA_VALUE_INT_LIST && dims->count == 0));
    if (!every_dim_of_a_vector && !(dims && dims->kind == TESSERA_VALUE_INT_LIST && last_dim(*dims, rank)))
      return std::nullopt;
    f.keepdim = false;
    if (g.num_args(node) > 2) {
      const std::optional<tessera_value_t> k = constant(g, node, 2);
      if (!k || k->kind != TESSERA_VALUE_BOOL) return std::nullopt;
      f.keepdim = k->u.b != 0;
    }
    return f;
  }
  if (shape_of(g, out) != shape_of(g, x)) return std::nullopt;
  if (t == "softmax" || t == "log_softmax") {
    const std::optional<tessera_value_t> dim = constant(g, node, 1);
    if (g.num_args(node) != 2 || !dim || !last_dim(*dim, rank)) return std::nullopt;
    f.form = t == "softmax" ? Form::Softmax : Form::LogSoftmax;
    return f;
  }
  if (t != "layer_norm" && t != "rms_norm") return std::nullopt;
  const bool layer = t == "layer_norm";
  f.form = layer ? Form::LayerNorm : Form::RmsNorm;
  // Over exactly the last dim: normalized_shape [K] with K the last size.
  const std::optional<tessera_value_t> normalized = constant(g, node, 1);
  if (!normalized || normalized->kind != TESSERA_VALUE_INT_LIST || normalized->count != 1 ||
      std::to_string(normalized->u.ints[0]) != g.size(x, rank - 1).expr)
    return std::nullopt;
  const std::optional<int32_t> weight = optional_tensor(g, node, 2);
  const std::optional<int32_t> bias = layer ? optional_tensor(g, node, 3) : std::optional<int32_t>(-1);
  if (!weight || !bias) return std::nullopt;
  for (int32_t v : {*weight, *bias}) {
    if (v < 0) continue;
    if (g.dtype(v) != g.dtype(x) || shape_of(g, v) != Shape{g.size(x, rank - 1).expr}) return std::nullopt;
  }
  // eps as a number. tessera::rms_norm resolves None before a graph is captured (dispatcher/src/
  // ops.cpp); a graph that still says None is left to the dispatcher's kernel rather than resolved a
  // second time here.
  const int32_t eps_arg = layer ? 4 : 3;
  if (layer && eps_arg >= g.num_args(node)) {
    f.eps = 1e-5;  // layer_norm's schema default
  } else if (const std::optional<double> e = g.arg_number(node, eps_arg)) {
    f.eps = *e;
  } else {
    return std::nullopt;
  }
  f.weight = *weight;
  f.bias = *bias;
  for (int32_t v : {*weight, *bias})
    if (v >= 0) f.tensors.push_back(v);
  return f;
}

// The node as the plugin takes it; nullopt when it does not.
std::optional<Fusable> classify(const GraphView& g, int32_t node) {
  if (!g.is_call(node) || g.num_outputs(node) != 1) return std::nullopt;
  const int32_t out = g.output(node);
  if (!is_float(g, out) || g.rank(out) > kMaxRank) return std::nullopt;
  if (std::optional<Fusable> f = pointwise(g, node)) return f;
  return reduction_or_norm(g, node);
}

// The value a reduction or norm reads: the domain of its group.
bool reads_rows(const Fusable& f) { return f.form != Form::Pointwise; }

// One group of plan_groups while it grows.
class Group {
 public:
  Group(const GraphView& g, int32_t id) : g_(g), id_(id) {}

  int32_t id() const { return id_; }
  // A group that is one reduction or norm alone saves nothing over the dispatcher's kernel.
  bool worth_it() const { return nodes_ > 1 || !reduces_; }

  // Adds the node when it fits the group's kernel.
  bool add(int32_t node, const Fusable& f) {
    const int32_t out = g_.output(node);
    if (nodes_ == 0) {
      domain_ = shape_of(g_, reads_rows(f) ? f.tensors[0] : out);
      dtype_ = g_.dtype(out);
    }
    if (nodes_ == kMaxGroupNodes || g_.dtype(out) != dtype_) return false;
    std::set<int32_t> fresh;  // values this node adds to the kernel's inputs
    bool any_element = false;
    char first_kind = 0;  // of tensors[0]: the value a reduction or norm reads
    for (int32_t v : f.tensors) {
      char k = 0;
      if (auto it = kinds_.find(v); it != kinds_.end()) {
        k = it->second;
      } else {
        const Shape s = shape_of(g_, v);
        if (!broadcasts_to(s, domain_)) return false;
        k = row_shaped(s, domain_) ? 'r' : 'e';
        if (!external_.count(v)) fresh.insert(v);
      }
      if (k == 'f') return false;  // a flat [rows] value broadcasts from the right: not a row value
      any_element |= k == 'e';
      if (!first_kind) first_kind = k;
    }
    if (external_.size() + fresh.size() > size_t(kMaxInputs)) return false;
    const Shape out_shape = shape_of(g_, out);
    char kind = 'e';
    if (reads_rows(f)) {
      if (domain_.empty() || first_kind != 'e' || shape_of(g_, f.tensors[0]) != domain_ || few_long_rows(domain_))
        return false;
      if (f.form == Form::Reduction) kind = f.keepdim ? 'r' : 'f';
      if (f.form == Form::Reduction && f.keepdim && !is_row_shape(out_shape, domain_)) return false;
      reduces_ = true;
    } else if (out_shape != domain_) {
      // An elementwise step on row values (var + eps, rsqrt) after a reduction.
      if (!reduces_ || any_element || !is_row_shape(out_shape, domain_)) return false;
      kind = 'r';
    }
    external_.insert(fresh.begin(), fresh.end());
    kinds_[out] = kind;
    ++nodes_;
    return true;
  }

 private:
  const GraphView& g_;
  int32_t id_;
  Shape domain_;
  int32_t dtype_ = -1;
  int32_t nodes_ = 0;
  bool reduces_ = false;
  std::map<int32_t, char> kinds_;  // values made in the group: 'e' element, 'r' row, 'f' flat row
  std::set<int32_t> external_;
};

Operand R(int32_t reg) { return Operand{reg, 0}; }

class Lowering {
 public:
  explicit Lowering(const GraphView& g) : g_(g) {}

  FusedProgram run() {
    p_.num_inputs = g_.input_count();
    for (int32_t i = 0; i < p_.num_inputs; ++i) reg_[g_.input(i).value] = i;
    Shape domain;
    bool first = true;
    for (int32_t node = 0; node < g_.node_count(); ++node) {
      if (!g_.is_call(node)) continue;
      const std::optional<Fusable> f = classify(g_, node);
      if (!f)
        throw Error(TESSERA_STATUS_UNIMPLEMENTED,
                    "tessera_cuda_compiler: cannot fuse " + std::string(g_.target(node)));
      const int32_t out = g_.output(node);
      if (first) p_.dtype = *fused_dtype(g_.dtype(out));
      if (fused_dtype(g_.dtype(out)) != p_.dtype)
        throw Error(TESSERA_STATUS_UNIMPLEMENTED,
                    "tessera_cuda_compiler: a partition of more than one dtype");
      if (reads_rows(*f) && domain.empty()) domain = shape_of(g_, f->tensors[0]);
      first = false;
      reg_[out] = lower_node(node, *f);
    }
    for (int32_t value : g_.output_values()) p_.output_regs.push_back(reg(value));
    if (is_row_program(p_))
      for (int32_t i = 0; i < p_.num_inputs; ++i)
        p_.row_input.push_back(row_shaped(shape_of(g_, g_.input(i).value), domain) ? 1 : 0);
    if (const std::string why = check_program(p_); !why.empty())
      throw Error(TESSERA_STATUS_UNIMPLEMENTED, "tessera_cuda_compiler: " + why);
    return std::move(p_);
  }

 private:
  int32_t reg(int32_t value) const {
    const auto it = reg_.find(value);
    if (it == reg_.end())
      throw Error(TESSERA_STATUS_INTERNAL, "tessera_cuda_compiler: value " + std::to_string(value) +
                                               " is read before the partition computes it");
    return it->second;
  }

  int32_t emit(FOp op, Operand a, Operand b = {}, double alpha = 1) {
    p_.steps.push_back(Step{op, a, b, alpha});
    return p_.num_inputs + int32_t(p_.steps.size()) - 1;
  }

  // The node's steps; returns the register of its output.
  int32_t lower_node(int32_t node, const Fusable& f) {
    if (f.form == Form::Pointwise) {
      Step s;
      s.op = f.op;
      const int32_t operands = is_binary(f.op) ? 2 : 1;
      for (int32_t k = 0; k < operands; ++k) {
        Operand& o = k ? s.b : s.a;
        if (g_.arg_kind(node, k) == TESSERA_ARG_TENSOR)
          o.reg = reg(g_.arg_value(node, k));
        else
          o.number = *g_.arg_number(node, k);
      }
      if ((f.op == FOp::Add || f.op == FOp::Sub) && g_.num_args(node) > 2) s.alpha = *g_.arg_number(node, 2);
      if (f.op == FOp::PowScalar) s.b.number = *g_.arg_number(node, 1);
      return emit(s.op, s.a, s.b, s.alpha);
    }
    const int32_t x = reg(f.tensors[0]);
    switch (f.form) {
      case Form::Reduction:
        return emit(f.op, R(x));
      case Form::Softmax:
      case Form::LogSoftmax: {
        const int32_t m = emit(FOp::RowMax, R(x));
        const int32_t d = emit(FOp::Sub, R(x), R(m));
        const int32_t e = emit(FOp::Exp, R(d));
        const int32_t z = emit(FOp::RowSum, R(e));
        if (f.form == Form::Softmax) return emit(FOp::Div, R(e), R(z));
        return emit(FOp::Sub, R(d), R(emit(FOp::Log, R(z))));
      }
      case Form::LayerNorm:
      case Form::RmsNorm: {
        int32_t c = x;
        if (f.form == Form::LayerNorm) c = emit(FOp::Sub, R(x), R(emit(FOp::RowMean, R(x))));
        const int32_t var = emit(FOp::RowMean, R(emit(FOp::Mul, R(c), R(c))));
        const int32_t rstd = emit(FOp::Rsqrt, R(emit(FOp::Add, R(var), Operand{-1, f.eps})));
        int32_t y = emit(FOp::Mul, R(c), R(rstd));
        if (f.weight >= 0) y = emit(FOp::Mul, R(y), R(reg(f.weight)));
        if (f.bias >= 0) y = emit(FOp::Add, R(y), R(reg(f.bias)));
        return y;
      }
      case Form::Pointwise:
        break;
    }
    return x;
  }

  const GraphView& g_;
  FusedProgram p_;
  std::map<int32_t, int32_t> reg_;
};

}  // namespace

std::vector<int32_t> plan_groups(const GraphView& g) {
  std::vector<int32_t> group(size_t(g.node_count()), -1);
  std::vector<Group> groups;
  std::optional<Group> current;
  int32_t next = 0;
  for (int32_t i = 0, n = g.node_count(); i < n; ++i) {
    if (!g.is_call(i)) continue;
    const std::optional<Fusable> f = classify(g, i);
    if (!f) {
      if (current) groups.push_back(*current);
      current.reset();
      continue;
    }
    if (!current || !current->add(i, *f)) {
      if (current) groups.push_back(*current);
      current.emplace(g, next++);
      if (!current->add(i, *f)) {
        current.reset();
        continue;
      }
    }
    group[size_t(i)] = current->id();
  }
  if (current) groups.push_back(*current);
  for (const Group& gr : groups)
    if (!gr.worth_it())
      for (int32_t& id : group)
        if (id == gr.id()) id = -1;
  return group;
}

FusedProgram lower(const GraphView& g) { return Lowering(g).run(); }

}  // namespace tessera::cuda_fuser
