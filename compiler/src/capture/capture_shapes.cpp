// Note [Symbolic shape rules]
// Capture runs the sizes rule each op's contract names (OpInfo::sizes, Note [OpInfo]) -- the
// template of dispatcher/src/shape_rules.h (Note [Shape rules]) that the op's eager shape rule runs
// on concrete sizes -- on SymDim, a size type over SymSize. The rules branch only on comparisons, and SymDim
// decides each one without specialising a dynamic dim:
//   1. the difference is a constant: exact;
//   2. the declared ranges exclude equality (batch in [2, 512] vs 1): not equal;
//   3. one side is the constant 0 or 1: not equal. The answer holds for every size but 0 and 1, and
//      a rule that asks "is this dim 1?" (broadcasting) gives the same sizes either way, so an
//      example of size 0 or 1 never turns a dynamic dim into a constant;
//   4. otherwise the examples decide: unequal examples -> not equal, recorded as a guard "a != b"
//      on the program (run() refuses inputs that break it); equal examples mean the program only
//      works when the two are equal: export fails naming the expression, the op and the fix (a dim
//      forced to a constant: make it static; two dims forced equal: use the same Dim).
// Order comparisons (<=) use the ranges when they decide, else the examples, and then record the
// answer as a guard ("a <= b" or "a > b").
#include "capture/capture_shapes.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <ostream>

#include "op_registry.h"
#include "shape_rules.h"
#include "tessera/op_info.h"

namespace tessera::compiler {

namespace {

thread_local const ShapeContext* t_ctx = nullptr;

struct SymDim {
  SymSize e;
  SymDim() = default;
  SymDim(int64_t v) : e(v) {}  // NOLINT(google-explicit-constructor)
  SymDim(int v) : e(int64_t(v)) {}  // NOLINT(google-explicit-constructor)
  SymDim(SymSize s) : e(std::move(s)) {}  // NOLINT(google-explicit-constructor)
  explicit operator int64_t() const {
    TESSERA_CHECK(e.is_constant(), "export: '", t_ctx ? t_ctx->current_op : std::string(),
                  "' needs a static size here but got ", e.str(), "; declare this dimension static (drop its Dim)");
    return e.constant();
  }
  friend SymDim operator+(const SymDim& a, const SymDim& b) { return a.e + b.e; }
  friend SymDim operator-(const SymDim& a, const SymDim& b) { return a.e - b.e; }
  friend SymDim operator*(const SymDim& a, const SymDim& b) { return a.e * b.e; }
  friend SymDim operator/(const SymDim& a, const SymDim& b) { return floordiv(a.e, b.e); }
  friend bool operator==(const SymDim& a, const SymDim& b) { return t_ctx->decide_equal(a.e, b.e); }
  friend bool operator!=(const SymDim& a, const SymDim& b) { return !(a == b); }
  friend bool operator<=(const SymDim& a, const SymDim& b) { return t_ctx->decide_less_equal(a.e, b.e); }
  friend std::ostream& operator<<(std::ostream& os, const SymDim& d) { return os << d.e.str(); }
};

using Dims = shape::Sizes<SymDim>;

class ContextScope {
 public:
  explicit ContextScope(const ShapeContext& c) : saved_(t_ctx) { t_ctx = &c; }
  ~ContextScope() { t_ctx = saved_; }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const ShapeContext* saved_;
};

bool is_zero_or_one(const SymSize& s) {
  auto c = s.maybe_constant();
  return c && (*c == 0 || *c == 1);
}

std::string range_text(const std::map<std::string, SymbolRange>* ranges, const SymSize& s) {
  std::string out;
  if (!ranges) return out;
  for (const std::string& name : s.symbols()) {
    auto it = ranges->find(name);
    if (it == ranges->end()) continue;
    out += (out.empty() ? " (" : ", ") + name + " in [" + std::to_string(it->second.min) + ", " +
           std::to_string(it->second.max) + "]";
  }
  return out.empty() ? out : out + ")";
}

}  // namespace

bool ShapeContext::has_examples(const SymSize& s) const {
  for (const std::string& name : s.symbols())
    if (!example.count(name)) return false;
  return true;
}

void ShapeContext::add_guard(const SymSize& lhs, Guard::Relation relation, const SymSize& rhs) const {
  if (!guards) return;
  Guard g{lhs, rhs, relation, current_op, {}};
  const std::string text = g.str();
  for (const Guard& old : *guards)
    if (old.str() == text) return;
  std::vector<std::string> names = lhs.symbols();
  for (const std::string& s : rhs.symbols()) names.push_back(s);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (const std::string& name : names) {
    auto it = example.find(name);
    if (it != example.end()) g.source += (g.source.empty() ? "" : ", ") + name + " = " + std::to_string(it->second);
  }
  guards->push_back(std::move(g));
}

bool ShapeContext::decide_equal(const SymSize& a, const SymSize& b) const {
  const SymSize d = a - b;
  if (d.is_constant()) return d.constant() == 0;
  static const std::map<std::string, SymbolRange> kNoRanges;
  auto [lo, hi] = d.bounds(ranges ? *ranges : kNoRanges);
  if (lo > 0 || hi < 0) return false;
  if (is_zero_or_one(a) || is_zero_or_one(b)) return false;
  if (!has_examples(d)) return false;
  if (a.evaluate(example) != b.evaluate(example)) {
    add_guard(a, Guard::Relation::NotEqual, b);
    return false;
  }
  const std::string expr = a.str() + " == " + b.str();
  const bool to_constant = a.is_constant() || b.is_constant();
  std::string fix;
  if (to_constant) {
    const SymSize& sym = a.is_constant() ? b : a;
    const int64_t value = (a.is_constant() ? a : b).constant();
    auto names = sym.symbols();
    fix = names.size() == 1 && sym.same_as(SymSize::symbol(names[0]))
              ? "the program only works when " + names[0] + " is " + std::to_string(value) +
                    ": declare that dimension static (drop Dim '" + names[0] + "') or change the program"
              : "the program fixes " + sym.str() + " to " + std::to_string(value) +
                    ": declare the dimensions static or change the program";
  } else {
    auto na = a.symbols(), nb = b.symbols();
    fix = na.size() == 1 && nb.size() == 1 && a.same_as(SymSize::symbol(na[0])) && b.same_as(SymSize::symbol(nb[0]))
              ? expr + ": use the same Dim for both dimensions"
              : "the program requires " + expr + ": declare the dimensions so that the sizes are equal by "
                                                 "construction (the same Dim), or make them static";
  }
  detail::throw_error(ErrorCode::InvalidArgument,
                      "export: '" + current_op + "' requires " + expr + range_text(ranges, d) + ", which " +
                          (to_constant ? "fixes a dynamic dimension to a constant" : "relates dimensions declared independent") +
                          "; " + fix);
}

bool ShapeContext::decide_less_equal(const SymSize& a, const SymSize& b) const {
  const SymSize d = b - a;  // a <= b  <=>  d >= 0
  if (d.is_constant()) return d.constant() >= 0;
  static const std::map<std::string, SymbolRange> kNoRanges;
  auto [lo, hi] = d.bounds(ranges ? *ranges : kNoRanges);
  if (lo >= 0) return true;
  if (hi < 0) return false;
  if (!has_examples(d)) return false;
  const bool le = d.evaluate(example) >= 0;
  add_guard(a, le ? Guard::Relation::LessEqual : Guard::Relation::Greater, b);
  return le;
}

namespace {

Dims dims_of(const Graph& g, const Argument& a, size_t i = 0) {
  Dims out;
  for (const SymSize& s : g.type(a.values.at(i)).sizes) out.push_back(SymDim(s));
  return out;
}

std::vector<SymSize> to_sizes(const Dims& d) {
  std::vector<SymSize> out;
  for (const SymDim& s : d) out.push_back(s.e);
  return out;
}

// The attribute value of a constant argument of type `type` (an int given for an int[] is a list of one).
tessera_value_t attr_value(const Argument& a, const char* type, std::deque<std::vector<int64_t>>& lists) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_NONE;
  if (a.kind != Argument::Kind::Constant) return v;
  const Constant& c = a.constant;
  if (auto* i = std::get_if<int64_t>(&c)) {
    if (std::strchr(type, '[')) {
      lists.push_back({*i});
      return attr_value(Argument::constant_value(lists.back()), type, lists);
    }
    v.kind = TESSERA_VALUE_INT;
    v.u.i = *i;
  } else if (auto* d = std::get_if<double>(&c)) {
    v.kind = TESSERA_VALUE_DOUBLE;
    v.u.d = *d;
  } else if (auto* b = std::get_if<bool>(&c)) {
    v.kind = TESSERA_VALUE_BOOL;
    v.u.b = *b ? 1 : 0;
  } else if (auto* l = std::get_if<std::vector<int64_t>>(&c)) {
    lists.push_back(*l);
    v.kind = TESSERA_VALUE_INT_LIST;
    v.count = int32_t(lists.back().size());
    v.u.ints = lists.back().data();
  } else if (auto* s = std::get_if<std::string>(&c)) {
    v.kind = TESSERA_VALUE_STRING;
    v.u.s = s->c_str();
  } else if (auto* t = std::get_if<DType>(&c)) {
    v.kind = TESSERA_VALUE_DTYPE;
    v.u.i = int64_t(*t);
  }
  return v;
}

// The sizes of the one output of `n` by the sizes rule its op's contract names (Note [OpInfo]), on
// symbolic sizes; nullopt when the contract names none.
std::optional<std::vector<SymSize>> rule(const Node& n, const Graph& g) {
  const op::OpInfo* info = op::find_op_info(n.target);
  if (!info || info->sizes == op::SizesRule::None) return std::nullopt;
  const OperatorEntry* entry = Dispatcher::instance().find_op(n.target);
  std::vector<Dims> dims;  // per tensor, flattened as shape::SizeArgs says
  std::vector<tessera_value_t> attrs;
  std::deque<std::vector<int64_t>> lists;
  int list_begin = -1, list_size = 0;
  for (int i = 0; i < info->num_args; ++i) {
    const op::OpArg& arg = info->args[i];
    const bool given = size_t(i) < n.args.size();
    if (arg.is_list) {
      list_begin = int(dims.size());
      if (given)
        for (size_t k = 0; k < n.args[size_t(i)].values.size(); ++k) dims.push_back(dims_of(g, n.args[size_t(i)], k));
      list_size = int(dims.size()) - list_begin;
    } else if (arg.is_tensor) {
      // An absent Tensor? and a wrapped number (a constant) are 0-dim.
      dims.push_back(given && n.args[size_t(i)].kind == Argument::Kind::Tensor ? dims_of(g, n.args[size_t(i)]) : Dims());
    } else if (given) {
      attrs.push_back(attr_value(n.args[size_t(i)], arg.type, lists));
    } else {
      TESSERA_INTERNAL_ASSERT(entry && size_t(i) < entry->args.size());
      const ArgInfo& arg_info = entry->args[size_t(i)];  // a default, as the boxed call fills it
      tessera_value_t v = arg_info.has_default ? arg_info.default_value : value_none();
      if (v.kind == TESSERA_VALUE_INT_LIST) v = value_ints(arg_info.default_ints);
      if (v.kind == TESSERA_VALUE_STRING) v = value_string(arg_info.default_string.c_str());
      attrs.push_back(v);
    }
  }
  std::vector<ArrayRef<SymDim>> refs;
  for (const Dims& d : dims) refs.push_back(d.ref());
  shape::SizeArgs<SymDim> args;
  args.op = n.target.c_str();
  args.attrs = attrs.data();
  args.num_attrs = int(attrs.size());
  args.tensors = refs.data();
  args.num_tensors = int(refs.size());
  args.list_begin = list_begin;
  args.list_size = list_size;
  Dims out;
  if (!shape::output_sizes<SymDim>(info->sizes, args, &out)) return std::nullopt;
  return to_sizes(out);
}

}  // namespace

std::vector<std::vector<SymSize>> symbolic_output_sizes(const ExportCall& call, const Node& node, const Graph& g,
                                                        const ShapeContext& ctx) {
  ContextScope scope(ctx);
  bool symbolic_input = false;
  for (const Argument& a : node.args)
    for (ValueId v : a.values)
      for (const SymSize& s : g.type(v).sizes) symbolic_input = symbolic_input || !s.is_constant();
  std::vector<std::vector<SymSize>> out;
  if (std::optional<std::vector<SymSize>> sizes = rule(node, g)) {
    // A sizes rule sizes every output of its op (topk's values and indices share their sizes).
    out.assign(call.outputs.size(), *sizes);
    return out;
  }
  // No symbolic rule: fine while every input is static (the concrete sizes are exact).
  TESSERA_CHECK(!symbolic_input, "export: '", *call.name,
                "' has no symbolic shape rule, and an input has a dynamic size; declare the dimensions static or "
                "use ops of the core set");
  for (const ExportCall::Output& o : call.outputs) out.emplace_back(o.sizes.begin(), o.sizes.end());
  return out;
}

std::vector<SymSize> symbolic_view_sizes(const std::vector<SymSize>& in, IntArrayRef in_example,
                                         const std::vector<int64_t>& out, const ShapeContext& ctx) {
  // Groups of consecutive dims with equal example products, e.g. [b, s, 128] -> [b, s, 4, 32] is
  // {b}->{b}, {s}->{s}, {128}->{4, 32}. A group's output dims are constants but for at most one,
  // which takes the group's symbolic product divided by the others.
  std::vector<SymSize> result(out.size());
  size_t i = 0, j = 0;
  auto fail = [&](const std::string& why) {
    std::string ins, outs;
    for (size_t k = 0; k < in.size(); ++k) ins += (k ? ", " : "") + in[k].str();
    for (size_t k = 0; k < out.size(); ++k) outs += (k ? ", " : "") + std::to_string(out[k]);
    detail::throw_error(ErrorCode::InvalidArgument, "export: the view of sizes [" + ins + "] as [" + outs +
                                                        "] cannot be expressed symbolically: " + why +
                                                        "; keep dynamic dimensions as whole dims in view/reshape");
  };
  while (i < in.size() || j < out.size()) {
    std::vector<size_t> gi, go;
    int64_t pin = 1, pout = 1;
    if (i < in.size()) { gi.push_back(i); pin *= in_example[i++]; }
    if (j < out.size()) { go.push_back(j); pout *= out[j++]; }
    while (pin != pout) {
      if (pin < pout && i < in.size()) { gi.push_back(i); pin *= in_example[i++]; }
      else if (pout < pin && j < out.size()) { go.push_back(j); pout *= out[j++]; }
      else fail("the sizes do not line up");
    }
    SymSize product(int64_t(1));
    for (size_t k : gi) product = product * in[k];
    if (go.empty()) {
      if (!product.is_constant()) fail("a dynamic dimension disappears");
      continue;
    }
    if (go.size() == 1 || product.is_constant()) {
      if (go.size() == 1) result[go[0]] = product;
      else for (size_t k : go) result[k] = SymSize(out[k]);
      continue;
    }
    bool placed = false;
    for (size_t pick : go) {
      int64_t others = 1;
      for (size_t k : go) if (k != pick) others *= out[k];
      SymSize q = floordiv(product, SymSize(others));
      if (!(q * SymSize(others)).same_as(product) || q.evaluate(ctx.example) != out[pick]) continue;
      for (size_t k : go) result[k] = k == pick ? q : SymSize(out[k]);
      placed = true;
      break;
    }
    if (!placed) fail("a group of dims of dynamic product " + product.str() + " splits into more than one dynamic dim");
  }
  return result;
}

std::optional<std::vector<SymSize>> infer_sizes(const Node& node, const Graph& g, const ShapeContext& ctx) {
  ContextScope scope(ctx);
  if (node.target == kPermuteTarget) {
    const std::vector<SymSize>& in = g.type(node.args.at(0).values.at(0)).sizes;
    std::vector<SymSize> out;
    for (int64_t d : std::get<std::vector<int64_t>>(node.args.at(1).constant)) out.push_back(in.at(size_t(d)));
    return out;
  }
  if (node.target == kViewTarget || node.outputs.size() != 1) return std::nullopt;
  return rule(node, g);
}

}  // namespace tessera::compiler
