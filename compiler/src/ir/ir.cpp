// Note [Export IR] in tessera/compiler/ir.h.
#include "tessera/compiler/ir.h"

#include <cmath>
#include <cstdio>

#include "tessera/error.h"
#include "tessera/text_escape.h"

namespace tessera::compiler {

namespace {

const char* const kShortNames[] = {"bool", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64", "qi8", "qu8", "qi32"};
static_assert(sizeof(kShortNames) / sizeof(kShortNames[0]) == kNumDTypes, "a short name per dtype");

const char* dtype_short(DType t) {
  int i = int(t);
  return i >= 0 && i < kNumDTypes ? kShortNames[i] : "?";
}

}  // namespace

const char* dtype_short_name(DType t) { return dtype_short(t); }

std::optional<DType> dtype_from_short_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (name == kShortNames[i]) return DType(i);
  return std::nullopt;
}

std::string TensorType::str() const {
  std::string s = std::string(dtype_short(dtype)) + "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + sizes[i].str();
  return s + "] " + device.str();
}

bool TensorType::same_as(const TensorType& o) const {
  if (dtype != o.dtype || !(device == o.device) || sizes.size() != o.sizes.size()) return false;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (!sizes[i].same_as(o.sizes[i])) return false;
  return true;
}

ValueId Graph::add_value(TensorType type, std::string name) {
  TESSERA_CHECK(values.size() < size_t(INT32_MAX), "graph has too many values");
  values.push_back({std::move(type), std::move(name)});
  return ValueId(values.size() - 1);
}

const TensorType& Graph::type(ValueId v) const {
  TESSERA_CHECK(v >= 0 && size_t(v) < values.size(), "graph: value id ", v, " out of range (the graph has ",
                values.size(), " values)");
  return values[size_t(v)].type;
}

std::string Graph::value_name(ValueId v) const {
  TESSERA_CHECK(v >= 0 && size_t(v) < values.size(), "graph: value id ", v, " out of range (the graph has ",
                values.size(), " values)");
  const std::string& n = values[size_t(v)].name;
  return "%" + (n.empty() ? std::to_string(v) : n);
}

const char* input_kind_name(InputKind k) {
  switch (k) {
    case InputKind::UserInput: return "user_input";
    case InputKind::Parameter: return "parameter";
    case InputKind::Constant: return "constant";
  }
  return "?";
}

std::string constant_str(const Constant& c) {
  struct V {
    std::string operator()(std::monostate) const { return "None"; }
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const {
      if (std::isnan(v)) return "nan";
      if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
      // The shortest of %.{1..17}g that reads back exactly.
      char buf[40];
      for (int prec = 1; prec <= 17; ++prec) {
        std::snprintf(buf, sizeof(buf), "%.*g", prec, v);
        if (std::strtod(buf, nullptr) == v) break;
      }
      std::string s = buf;
      if (s.find_first_of(".eE") == std::string::npos) s += ".0";
      return s;
    }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::vector<int64_t>& v) const {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + "]";
    }
    std::string operator()(const std::string& v) const { return '"' + json_escape(v) + '"'; }
    std::string operator()(DType t) const { return dtype_short(t); }
  };
  return std::visit(V{}, c);
}

// Note [Graph text]
// graph_string() is the readable form of a program and a contract: the graph ABI's accessors are
// enough to print the same text from C (a compiler plugin test does), so change both together.
std::string ExportedProgram::graph_string() const {
  auto arg_str = [&](const Argument& a) -> std::string {
    switch (a.kind) {
      case Argument::Kind::Tensor: return graph.value_name(a.values.at(0));
      case Argument::Kind::TensorList: {
        std::string s = "[";
        for (size_t i = 0; i < a.values.size(); ++i) s += (i ? ", " : "") + graph.value_name(a.values[i]);
        return s + "]";
      }
      case Argument::Kind::None: return "None";
      case Argument::Kind::Constant: return constant_str(a.constant);
    }
    return "?";
  };
  std::string out = "graph(";
  bool first = true;
  for (const InputSpec& in : signature.inputs) {
    out += (first ? "" : ", ") + graph.value_name(in.value) + ": " + graph.type(in.value).str();
    if (in.kind != InputKind::UserInput) out += std::string(" ") + input_kind_name(in.kind);
    first = false;
  }
  out += "):\n";
  for (const Node& n : graph.nodes) {
    if (n.kind == NodeKind::Placeholder) continue;
    if (n.kind == NodeKind::Output) {
      out += "  return (";
      for (size_t i = 0; i < n.args.size(); ++i) out += (i ? ", " : "") + arg_str(n.args[i]);
      out += ")\n";
      continue;
    }
    out += "  ";
    for (size_t i = 0; i < n.outputs.size(); ++i)
      out += (i ? ", " : "") + graph.value_name(n.outputs[i]) + ": " + graph.type(n.outputs[i]).str();
    out += " = " + n.target + "(";
    for (size_t i = 0; i < n.args.size(); ++i) out += (i ? ", " : "") + arg_str(n.args[i]);
    out += ")\n";
  }
  if (!ranges.empty()) {
    out += "ranges:";
    first = true;
    for (const auto& [name, r] : ranges) {
      out += (first ? " " : ", ") + name + " in [" + std::to_string(r.min) + ", " + std::to_string(r.max) + "]";
      first = false;
    }
    out += "\n";
  }
  if (!guards.empty()) {
    out += "guards:";
    for (size_t i = 0; i < guards.size(); ++i) out += (i ? ", " : " ") + guards[i].str();
    out += "\n";
  }
  return out;
}

namespace {
constexpr std::pair<Guard::Relation, std::string_view> kRelations[] = {{Guard::Relation::Equal, " == "},
                                                                       {Guard::Relation::NotEqual, " != "},
                                                                       {Guard::Relation::LessEqual, " <= "},
                                                                       {Guard::Relation::Greater, " > "}};
}  // namespace

std::string Guard::str() const {
  for (const auto& [r, text] : kRelations)
    if (r == relation) return lhs.str() + std::string(text) + rhs.str();
  TESSERA_INTERNAL_ASSERT(false, "Guard::str: unknown relation ", int(relation));
  return {};
}

Guard Guard::parse(std::string_view text) {
  for (const auto& [r, op] : kRelations) {
    const size_t at = text.find(op);
    if (at == std::string_view::npos) continue;
    Guard g;
    g.relation = r;
    g.lhs = SymSize::parse(text.substr(0, at));
    g.rhs = SymSize::parse(text.substr(at + op.size()));
    return g;
  }
  detail::throw_error(ErrorCode::InvalidArgument, "guard '" + std::string(text) +
                                                      "' has no relation; expected 'a == b', 'a != b', 'a <= b' or 'a > b'");
}

bool Guard::holds(const std::map<std::string, int64_t>& bindings) const {
  const int64_t a = lhs.evaluate(bindings), b = rhs.evaluate(bindings);
  switch (relation) {
    case Relation::Equal: return a == b;
    case Relation::NotEqual: return a != b;
    case Relation::LessEqual: return a <= b;
    case Relation::Greater: return a > b;
  }
  return false;
}

}  // namespace tessera::compiler
