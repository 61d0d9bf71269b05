// generate_cpp: steps, fused loops and the planned scratch slots (Note [Generated loops]).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "backends/cpp/generated_abi.h"
#include "backends/cpp/prelude.h"
#include "tessera/compiler/codegen.h"
#include "tessera/error.h"

namespace tessera::compiler::codegen {
namespace {

enum class Kind : uint8_t { Full, Row, Col, Scalar };

bool float_dtype(DType d) { return d == DType::Float32 || d == DType::BFloat16; }

const char* c_type(DType d) {
  switch (d) {
    case DType::Float32: return "float";
    case DType::BFloat16: return "uint16_t";
    default: return "unsigned char";
  }
}

// A SymSize as a C++ int64_t expression over the sym_<name> locals. Sizes are never negative, so
// floor division is C++ division.
std::string c_size(const SymSize& s) {
  if (auto c = s.maybe_constant()) return "int64_t(" + std::to_string(*c) + ")";
  const std::string text = s.str();
  std::string out = "(";
  for (size_t i = 0; i < text.size();) {
    const char ch = text[i];
    if (std::isalpha(static_cast<unsigned char>(ch)) || ch == '_') {
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
      out += "sym_" + text.substr(i, j - i);
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(ch))) {
      size_t j = i;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
      out += "int64_t(" + text.substr(i, j - i) + ")";
      i = j;
    } else if (ch == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      out += "/";
      i += 2;
    } else {
      out += ch;
      ++i;
    }
  }
  return out + ")";
}

SymSize product(const std::vector<SymSize>& sizes, size_t begin, size_t end) {
  SymSize p = 1;
  for (size_t i = begin; i < end; ++i) p = p * sizes[i];
  return p;
}

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

// How a value of `sizes` broadcasts against the domain `d` (PyTorch rules, aligned on the right).
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

Kind combine(Kind a, Kind b) {
  if (a == b) return a;
  if (a == Kind::Scalar) return b;
  if (b == Kind::Scalar) return a;
  return Kind::Full;  // Row with Col, or anything with Full
}

// One operand of a fused op: a tensor value or a literal.
struct Operand {
  ValueId value = -1;
  std::string literal;
};

enum class Reduction : uint8_t { None, Sum, Mean, Max, Min };

// A node the loops can compute: `format` is a C++ expression over {0}, {1} (the operands).
struct FusedOp {
  std::vector<Operand> operands;
  std::string format;
  Reduction reduction = Reduction::None;
  bool keepdim = true;
};

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

std::optional<Operand> operand(const Node& n, size_t i) {
  if (i >= n.args.size()) return std::nullopt;
  const Argument& a = n.args[i];
  if (a.kind == Argument::Kind::Tensor) return Operand{a.values[0], {}};
  if (auto l = literal(a)) return Operand{-1, *l};
  return std::nullopt;
}

std::string substitute(const std::string& format, const std::vector<std::string>& args) {
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '{' && i + 2 < format.size() && format[i + 2] == '}') {
      out += "(" + args[size_t(format[i + 1] - '0')] + ")";
      i += 2;
    } else {
      out += format[i];
    }
  }
  return out;
}

// The pointwise ops and last-dim reductions the loops implement; nullopt for anything else.
std::optional<FusedOp> fused_op(const Node& n, const Graph& g) {
  if (n.kind != NodeKind::Call || n.outputs.size() != 1) return std::nullopt;
  static const std::map<std::string, std::string> unary = {
      {"neg", "-{0}"},
      {"abs", "__builtin_fabsf({0})"},
      {"relu", "({0} < 0.0f ? 0.0f : {0})"},
      {"exp", "tg_exp({0})"},
      {"log", "__builtin_logf({0})"},
      {"sqrt", "__builtin_sqrtf({0})"},
      {"rsqrt", "1.0f / __builtin_sqrtf({0})"},
      {"sin", "__builtin_sinf({0})"},
      {"cos", "__builtin_cosf({0})"},
      {"tanh", "tg_tanh({0})"},
      {"sigmoid", "tg_sigmoid({0})"},
      {"silu", "{0} * tg_sigmoid({0})"},
      {"erf", "__builtin_erff({0})"},
  };
  static const std::map<std::string, std::string> binary = {
      {"mul.Tensor", "{0} * {1}"}, {"mul.Scalar", "{0} * {1}"}, {"div.Tensor", "{0} / {1}"},
      {"div.Scalar", "{0} / {1}"}, {"maximum", "tg_max({0}, {1})"}, {"minimum", "tg_min({0}, {1})"},
  };
  const std::string& t = n.target;
  FusedOp op;
  if (auto it = unary.find(t); it != unary.end()) {
    auto a = operand(n, 0);
    if (!a || a->value < 0) return std::nullopt;
    op.operands = {*a};
    op.format = it->second;
  } else if (t == "gelu") {
    auto a = operand(n, 0);
    if (!a || a->value < 0) return std::nullopt;
    std::string approximate = "none";
    if (n.args.size() > 1) {
      auto* s = std::get_if<std::string>(&n.args[1].constant);
      if (!s) return std::nullopt;
      approximate = *s;
    }
    op.operands = {*a};
    if (approximate == "none")
      op.format = "0.5f * {0} * (1.0f + __builtin_erff({0} * 0.70710678118654752f))";
    else if (approximate == "tanh")
      op.format = "0.5f * {0} * (1.0f + tg_tanh(0.79788456080286536f * ({0} + 0.044715f * {0} * {0} * {0})))";
    else
      return std::nullopt;
  } else if (auto it2 = binary.find(t); it2 != binary.end()) {
    auto a = operand(n, 0), b = operand(n, 1);
    if (!a || !b) return std::nullopt;
    op.operands = {*a, *b};
    op.format = it2->second;
  } else if (t == "add.Tensor" || t == "sub.Tensor" || t == "add.Scalar" || t == "sub.Scalar") {
    auto a = operand(n, 0), b = operand(n, 1);
    if (!a || !b) return std::nullopt;
    std::string alpha = "1.0f";
    if (n.args.size() > 2) {
      auto l = literal(n.args[2]);
      if (!l) return std::nullopt;
      alpha = *l;
    }
    const char* sign = t[0] == 'a' ? " + " : " - ";
    op.operands = {*a, *b, Operand{-1, alpha}};
    op.format = alpha == "1.0f" ? std::string("{0}") + sign + "{1}" : std::string("{0}") + sign + "{2} * {1}";
  } else if (t == "pow.Tensor_Scalar") {
    auto a = operand(n, 0);
    if (!a || a->value < 0 || n.args.size() < 2) return std::nullopt;
    double e;
    if (auto* i = std::get_if<int64_t>(&n.args[1].constant)) e = double(*i);
    else if (auto* d = std::get_if<double>(&n.args[1].constant)) e = *d;
    else return std::nullopt;
    op.operands = {*a, Operand{-1, *literal(n.args[1])}};
    if (e == 2) op.format = "{0} * {0}";
    else if (e == 3) op.format = "{0} * {0} * {0}";
    else if (e == 1) op.format = "{0}";
    else if (e == 0.5) op.format = "__builtin_sqrtf({0})";
    else if (e == -1) op.format = "1.0f / {0}";
    else if (e == -0.5) op.format = "1.0f / __builtin_sqrtf({0})";
    else op.format = "__builtin_powf({0}, {1})";
  } else if (t == "sum" || t == "mean" || t == "amax" || t == "amin" || t == "sum.dim_IntList" ||
             t == "mean.dim") {
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
    op.reduction = t[0] == 's' ? Reduction::Sum : t[0] == 'm' ? Reduction::Mean
                   : t == "amax"  ? Reduction::Max : Reduction::Min;
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

struct Step {
  bool fused = false;
  std::vector<int> nodes;          // indices into graph.nodes
  std::vector<SymSize> domain;     // fused: the Full sizes
  std::map<ValueId, Kind> kinds;   // fused: kinds of the values the group produces
  std::map<int, FusedOp> ops;      // fused: node index -> op
};

class Generator {
 public:
  Generator(const ExportedProgram& p, CpuIsa isa) : p_(p), g_(p.graph) { out_.isa = isa; }

  GeneratedSource run() {
    collect_symbols();
    plan_steps();
    plan_buffers();
    emit();
    return std::move(out_);
  }

 private:
  void collect_symbols() {
    std::set<std::string> all, bound;
    for (const ValueInfo& v : g_.values) {
      TESSERA_CHECK(v.type.device.is_cpu(), "generated C++ runs on the CPU; value of type ", v.type.str(),
                    " is on another device; partition the graph so the CPU compiler gets CPU nodes only");
      for (const SymSize& s : v.type.sizes)
        for (auto& name : s.symbols()) all.insert(name);
    }
    for (const InputSpec& in : p_.signature.inputs)
      for (const SymSize& s : g_.type(in.value).sizes)
        if (!s.is_constant() && s.symbols().size() == 1 && s.str() == s.symbols()[0]) bound.insert(s.str());
    for (const std::string& s : all)
      TESSERA_CHECK(bound.count(s), "symbol '", s, "' is not the size of any input dimension; the generated "
                    "code binds symbols from input sizes only");
    out_.symbols.assign(all.begin(), all.end());
  }

  // Greedy: consecutive fusible nodes over one domain form a group; anything else is an extern step.
  void plan_steps() {
    for (int i = 0; i < int(g_.nodes.size()); ++i) {
      const Node& n = g_.nodes[size_t(i)];
      if (n.kind != NodeKind::Call) continue;
      auto op = fused_op(n, g_);
      if (op && !steps_.empty() && steps_.back().fused && try_add(steps_.back(), i, *op)) continue;
      if (op) {
        Step s;
        s.fused = true;
        s.domain = op->reduction != Reduction::None ? g_.type(op->operands[0].value).sizes
                                                    : g_.type(n.outputs[0]).sizes;
        if (!s.domain.empty() && try_add(s, i, *op)) {
          steps_.push_back(std::move(s));
          continue;
        }
      }
      Step e;
      e.nodes = {i};
      steps_.push_back(std::move(e));
    }
  }

  std::optional<Kind> operand_kind(const Step& s, const Operand& o) {
    if (o.value < 0) return Kind::Scalar;
    // A keepdim=False reduction holds one value per row but broadcasts from the right like any
    // [rows] tensor: its readers belong to a later group, which reads it by its shape.
    if (flat_rows_.count(o.value) && s.kinds.count(o.value)) return std::nullopt;
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
      if (!op.keepdim) flat_rows_.insert(n.outputs[0]);
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

  int producer(ValueId v) const {
    for (int i = 0; i < int(g_.nodes.size()); ++i)
      for (ValueId o : g_.nodes[size_t(i)].outputs)
        if (o == v) return i;
    return -1;
  }

  // Which values cross steps, which are outputs, and the scratch slot of every other crossing value.
  void plan_buffers() {
    std::map<int, int> step_of_node;
    for (int s = 0; s < int(steps_.size()); ++s)
      for (int n : steps_[size_t(s)].nodes) step_of_node[n] = s;
    for (const InputSpec& in : p_.signature.inputs) placeholder_index_[in.value] = int(placeholder_index_.size());
    const int end = int(steps_.size());
    for (int i = 0; i < int(g_.nodes.size()); ++i) {
      const Node& n = g_.nodes[size_t(i)];
      if (n.kind == NodeKind::Placeholder) continue;
      const int user_step = n.kind == NodeKind::Output ? end : step_of_node.at(i);
      for (const Argument& a : n.args)
        for (ValueId v : a.values) {
          const int def = placeholder_index_.count(v) ? -1 : step_of_node.at(producer(v));
          if (def != user_step) last_use_[v] = std::max(last_use_[v], user_step);
          if (n.kind == NodeKind::Output && !placeholder_index_.count(v) && !output_index_.count(v)) {
            output_index_[v] = int(out_.outputs.size());
            out_.outputs.push_back(v);
          }
        }
    }
    // An extern result may alias its operands (view, permute, reshape): a slot it reads stays
    // reserved as long as the result is read. Backwards, so that a view of a view extends both.
    for (int s = end - 1; s >= 0; --s) {
      if (steps_[size_t(s)].fused) continue;
      const Node& n = g_.nodes[size_t(steps_[size_t(s)].nodes[0])];
      int until = -1;
      for (ValueId o : n.outputs)
        if (auto it = last_use_.find(o); it != last_use_.end()) until = std::max(until, it->second);
      for (const Argument& a : n.args)
        for (ValueId v : a.values)
          if (until >= 0 && !placeholder_index_.count(v)) last_use_[v] = std::max(last_use_[v], until);
    }
    // Extern outputs live in the host's tensors (call_node hands back their data): no slot, and a
    // graph output the host returns as is.
    for (int s = 0; s < end; ++s)
      if (!steps_[size_t(s)].fused)
        for (ValueId v : g_.nodes[size_t(steps_[size_t(s)].nodes[0])].outputs) {
          extern_values_.insert(v);
          if (output_index_.count(v)) out_.extern_outputs.push_back(v);
        }
    for (ValueId v : out_.extern_outputs) output_index_.erase(v);
    for (ValueId v : extern_values_) {
      bool extern_readers_only = true;
      for (int i = 0; i < int(g_.nodes.size()) && extern_readers_only; ++i) {
        const Node& n = g_.nodes[size_t(i)];
        for (const Argument& a : n.args)
          for (ValueId x : a.values)
            if (x == v && (n.kind != NodeKind::Call || steps_[size_t(step_of_node.at(i))].fused))
              extern_readers_only = false;
      }
      // A view of a slot would alias memory the slot plan reuses: only views of host tensors.
      bool host_operands = true;
      for (const Argument& a : g_.nodes[size_t(producer(v))].args)
        for (ValueId x : a.values) host_operands = host_operands && (placeholder_index_.count(x) || extern_values_.count(x));
      if (extern_readers_only && host_operands) out_.strided_values.push_back(v);
    }
    out_.outputs.clear();
    for (auto& [v, k] : output_index_) out_.outputs.push_back(v);
    std::sort(out_.outputs.begin(), out_.outputs.end(), [&](ValueId a, ValueId b) { return output_index_[a] < output_index_[b]; });
    for (size_t k = 0; k < out_.outputs.size(); ++k) output_index_[out_.outputs[k]] = int(k);
    struct Slot {
      SymSize bytes;
      int free_after = -2;  // the step after which it may be reused
    };
    std::vector<Slot> slots;
    for (int s = 0; s < end; ++s) {
      for (ValueId v : step_outputs(s)) {
        if (!last_use_.count(v) || output_index_.count(v) || extern_values_.count(v)) continue;
        const TensorType& t = g_.type(v);
        const SymSize bytes = product(t.sizes, 0, t.sizes.size()) * int64_t(itemsize(t.dtype));
        int chosen = -1;
        for (int k = 0; k < int(slots.size()); ++k)
          if (slots[size_t(k)].free_after < s && slots[size_t(k)].bytes.same_as(bytes)) {
            chosen = k;
            break;
          }
        if (chosen < 0) {
          chosen = int(slots.size());
          slots.push_back({bytes, 0});
        }
        slots[size_t(chosen)].free_after = last_use_[v];
        slot_of_[v] = chosen;
      }
    }
    for (const Slot& s : slots) slot_bytes_.push_back(s.bytes);
    out_.slot_bytes = slot_bytes_;
  }

  std::vector<ValueId> step_outputs(int s) const {
    std::vector<ValueId> vs;
    for (int n : steps_[size_t(s)].nodes)
      for (ValueId v : g_.nodes[size_t(n)].outputs) vs.push_back(v);
    return vs;
  }

  std::string ptr(ValueId v) const { return std::string(1, 'p').append(std::to_string(v)); }

  void emit() {
    std::ostringstream o;
    o << "// Generated by tessera::compiler::codegen for ISA " << cpu_isa_name(out_.isa) << ".\n";
    o << "// Graph:\n";
    std::istringstream graph_text(p_.graph_string());
    for (std::string line; std::getline(graph_text, line);) o << "//   " << line << "\n";
    o << kPrelude << "\n" << TESSERA_CODEGEN_ABI_TEXT << "\n\n";
    o << "extern \"C\" __attribute__((visibility(\"default\"))) int tessera_generated_main(const tessera_generated_call_t* call) {\n";
    o << "  if (call->struct_size < sizeof(tessera_generated_call_t) || call->host->struct_size < "
         "sizeof(tessera_generated_host_t)) return 2;\n";
    o << "  const tessera_generated_host_t* host = call->host;\n";
    o << "  (void)host;\n";
    o << "  if (call->num_threads > 0) omp_set_num_threads(call->num_threads);\n";
    for (size_t i = 0; i < out_.symbols.size(); ++i)
      o << "  const int64_t sym_" << out_.symbols[i] << " = call->symbols[" << i << "];\n";
    for (auto& [v, k] : placeholder_index_)
      o << "  " << c_type(g_.type(v).dtype) << "* " << ptr(v) << " = (" << c_type(g_.type(v).dtype)
        << "*)call->inputs[" << k << "];\n";
    for (auto& [v, k] : output_index_)
      o << "  " << c_type(g_.type(v).dtype) << "* " << ptr(v) << " = (" << c_type(g_.type(v).dtype)
        << "*)call->outputs[" << k << "];\n";
    for (ValueId v : extern_values_)
      o << "  " << c_type(g_.type(v).dtype) << "* " << ptr(v) << " = nullptr;\n";
    for (size_t s = 0; s < slot_bytes_.size(); ++s) {
      o << "  void* slot" << s << " = host->alloc(host->ctx, " << s << ", " << c_size(slot_bytes_[s]) << ");\n";
      o << "  if (!slot" << s << ") return 1;\n";
    }
    for (auto& [v, s] : slot_of_)
      o << "  " << c_type(g_.type(v).dtype) << "* " << ptr(v) << " = (" << c_type(g_.type(v).dtype) << "*)slot" << s
        << ";\n";
    for (int s = 0; s < int(steps_.size()); ++s) {
      if (steps_[size_t(s)].fused) {
        emit_group(o, steps_[size_t(s)]);
        ++out_.fused_groups;
      } else {
        emit_extern(o, steps_[size_t(s)].nodes[0]);
        ++out_.extern_nodes;
      }
    }
    o << "  return 0;\n}\n";
    out_.source = "#include <omp.h>\n" + o.str();
  }

  void emit_extern(std::ostringstream& o, int node) {
    const Node& n = g_.nodes[size_t(node)];
    std::vector<std::string> ins;
    for (const Argument& a : n.args)
      for (ValueId v : a.values) ins.push_back(std::string("(void*)").append(ptr(v)));
    auto join = [](const std::vector<std::string>& xs) {
      std::string s;
      for (auto& x : xs) s += (s.empty() ? "" : ", ") + x;
      return s.empty() ? std::string("nullptr") : s;
    };
    o << "  {  // " << n.target << "\n";
    o << "    void* ins[] = {" << join(ins) << "};\n";
    o << "    void* outs[" << std::max<size_t>(n.outputs.size(), 1) << "] = {};\n";
    o << "    if (host->call_node(host->ctx, " << node << ", ins, outs)) return 1;\n";
    for (size_t i = 0; i < n.outputs.size(); ++i)
      o << "    " << ptr(n.outputs[i]) << " = (" << c_type(g_.type(n.outputs[i]).dtype) << "*)outs[" << i << "];\n";
    o << "  }\n";
  }

  // The expression that reads `v` (from outside the group) at row r, column j / flat index i.
  std::string load(const Step& s, ValueId v, bool flat) {
    std::string idx;
    switch (*kind_in(g_.type(v).sizes, s.domain)) {
      case Kind::Full: idx = flat ? "i" : "base + j"; break;
      case Kind::Row: idx = "r"; break;
      case Kind::Col: idx = "j"; break;
      case Kind::Scalar: idx = "0"; break;
    }
    const std::string e = ptr(v) + "[" + idx + "]";
    return g_.type(v).dtype == DType::BFloat16 ? "tg_ld_bf16(" + e + ")" : e;
  }

  std::string store(ValueId v, const std::string& idx, const std::string& value) {
    const std::string rhs = g_.type(v).dtype == DType::BFloat16 ? "tg_st_bf16(" + value + ")" : value;
    return ptr(v) + "[" + idx + "] = " + rhs + ";";
  }

  bool materialised(ValueId v) const { return last_use_.count(v) > 0; }

  // Statements computing the column-level values `roots` need (Full ones inside the group, in node
  // order), reading Row values by name.
  void emit_column_values(std::ostringstream& o, const Step& s, const std::vector<ValueId>& roots, bool flat,
                          const std::string& indent) {
    std::set<ValueId> need;
    std::function<void(ValueId)> visit = [&](ValueId v) {
      auto it = s.kinds.find(v);
      if (it == s.kinds.end() || it->second == Kind::Row || need.count(v)) return;
      need.insert(v);
      for (const Operand& x : s.ops.at(producer(v)).operands)
        if (x.value >= 0) visit(x.value);
    };
    for (ValueId v : roots) visit(v);
    for (int n : s.nodes) {
      const ValueId v = g_.nodes[size_t(n)].outputs[0];
      if (!need.count(v)) continue;
      o << indent << "const float v" << v << " = " << expr(s, s.ops.at(n), flat) << ";\n";
    }
  }

  std::string ref(const Step& s, const Operand& x, bool flat) {
    if (x.value < 0) return x.literal;
    if (s.kinds.count(x.value)) return "v" + std::to_string(x.value);
    return load(s, x.value, flat);
  }

  std::string expr(const Step& s, const FusedOp& op, bool flat) {
    std::vector<std::string> args;
    for (const Operand& x : op.operands) args.push_back(ref(s, x, flat));
    return substitute(op.format, args);
  }

  void emit_group(std::ostringstream& o, const Step& s) {
    const SymSize rows = product(s.domain, 0, s.domain.size() - 1);
    const SymSize n = s.domain.back();
    bool flat = true;
    for (auto& [v, k] : s.kinds)
      if (k != Kind::Full) flat = false;
    for (int node : s.nodes)
      for (const Operand& x : s.ops.at(node).operands)
        if (x.value >= 0 && !s.kinds.count(x.value)) {
          const Kind k = *kind_in(g_.type(x.value).sizes, s.domain);
          if (k == Kind::Row || k == Kind::Col) flat = false;
        }
    std::vector<ValueId> full_outputs;
    for (int node : s.nodes) {
      const ValueId v = g_.nodes[size_t(node)].outputs[0];
      if (materialised(v) && s.kinds.at(v) == Kind::Full) full_outputs.push_back(v);
    }
    o << "  {  // fused:";
    for (int node : s.nodes) o << " " << g_.nodes[size_t(node)].target;
    o << "\n    const int64_t rows = " << c_size(rows) << ", n = " << c_size(n) << ";\n";
    if (flat) {
      o << "    const int64_t total = rows * n;\n";
      o << "#pragma omp parallel for simd schedule(static) if (total >= 65536)\n";
      o << "    for (int64_t i = 0; i < total; ++i) {\n";
      emit_column_values(o, s, full_outputs, true, "      ");
      for (ValueId v : full_outputs) o << "      " << store(v, "i", "v" + std::to_string(v)) << "\n";
      o << "    }\n  }\n";
      return;
    }
    o << "#pragma omp parallel for schedule(static) if (rows * n >= 32768 && rows > 1)\n";
    o << "    for (int64_t r = 0; r < rows; ++r) {\n";
    o << "      const int64_t base = r * n;\n";
    o << "      (void)base;\n";
    for (int node : s.nodes) {
      const FusedOp& op = s.ops.at(node);
      const ValueId v = g_.nodes[size_t(node)].outputs[0];
      if (s.kinds.at(v) != Kind::Row) continue;
      if (op.reduction == Reduction::None) {
        o << "      const float v" << v << " = " << expr(s, op, false) << ";\n";
      } else {
        const std::string x = ref(s, op.operands[0], false);
        const bool is_max = op.reduction == Reduction::Max, is_min = op.reduction == Reduction::Min;
        o << "      float v" << v << ";\n      {\n";
        o << "        float acc = " << (is_max ? "-__builtin_inff()" : is_min ? "__builtin_inff()" : "0.0f")
          << ";\n        int nan = 0;\n";
        o << "#pragma omp simd reduction(" << (is_max ? "max" : is_min ? "min" : "+") << ": acc) reduction(|: nan)\n";
        o << "        for (int64_t j = 0; j < n; ++j) {\n";
        std::vector<ValueId> roots;
        if (op.operands[0].value >= 0) roots.push_back(op.operands[0].value);
        emit_column_values(o, s, roots, false, "          ");
        o << "          const float x = " << x << ";\n";
        if (is_max) o << "          acc = x > acc ? x : acc;\n          nan |= x != x;\n";
        else if (is_min) o << "          acc = x < acc ? x : acc;\n          nan |= x != x;\n";
        else o << "          acc += x;\n";
        o << "        }\n";
        if (op.reduction == Reduction::Mean) o << "        acc = acc / float(n);\n";
        o << "        v" << v << " = nan ? __builtin_nanf(\"\") : acc;\n      }\n";
      }
      if (materialised(v)) o << "      " << store(v, "r", "v" + std::to_string(v)) << "\n";
    }
    if (!full_outputs.empty()) {
      o << "#pragma omp simd\n";
      o << "      for (int64_t j = 0; j < n; ++j) {\n";
      emit_column_values(o, s, full_outputs, false, "        ");
      for (ValueId v : full_outputs) o << "        " << store(v, "base + j", "v" + std::to_string(v)) << "\n";
      o << "      }\n";
    }
    o << "    }\n  }\n";
  }

  const ExportedProgram& p_;
  const Graph& g_;
  GeneratedSource out_;
  std::vector<Step> steps_;
  std::set<ValueId> flat_rows_, extern_values_;
  std::map<ValueId, int> placeholder_index_, output_index_, slot_of_;
  std::map<ValueId, int> last_use_;
  std::vector<SymSize> slot_bytes_;
};

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::AVX512: return "avx512";
    case CpuIsa::AVX2: return "avx2";
    default: return "default";
  }
}

GeneratedSource generate_cpp(const ExportedProgram& program, CpuIsa isa) {
  return Generator(program, isa).run();
}

}  // namespace tessera::compiler::codegen
