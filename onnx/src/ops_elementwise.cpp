// Converters of the pointwise family: arithmetic, comparisons, logic, activations, Cast, Clip,
// Where, Constant. Arithmetic on known integers is folded (Note [Known integers] in convert.h).
#include <algorithm>
#include <cmath>

#include "convert.h"
#include "tessera/dispatch_key.h"

namespace tessera::onnx::detail {

namespace {

using IntFn = SymSize (*)(const SymSize&, const SymSize&);

// Broadcasts two known integer lists (a scalar or a list of one against a list).
bool fold_binary(NodeCtx& c, IntFn fn, DType out_dtype = kInt64) {
  if (!c.has_ints(0) || !c.has_ints(1)) return false;
  Sizes a = c.ints(0), b = c.ints(1);
  if (a.empty() || b.empty() || (a.size() != b.size() && a.size() != 1 && b.size() != 1)) return false;
  const size_t n = std::max(a.size(), b.size());
  Sizes out;
  for (size_t i = 0; i < n; ++i) out.push_back(fn(a[a.size() == 1 ? 0 : i], b[b.size() == 1 ? 0 : i]));
  const DType dt = out_dtype == kBool ? kBool : c.val(0).int_dtype;
  c.out_ints(0, std::move(out), c.val(0).scalar && c.val(1).scalar, dt);
  return true;
}

SymSize add_i(const SymSize& a, const SymSize& b) { return a + b; }
SymSize sub_i(const SymSize& a, const SymSize& b) { return a - b; }
SymSize mul_i(const SymSize& a, const SymSize& b) { return a * b; }
SymSize div_i(const SymSize& a, const SymSize& b) {
  auto x = a.maybe_constant(), y = b.maybe_constant();
  if (x && y) {
    TESSERA_CHECK(*y != 0, "onnx import: integer division by zero in a size computation");
    return *x / *y;  // ONNX integer Div truncates
  }
  return floordiv(a, b);  // sizes are non-negative: truncation is floor division
}

void Add(NodeCtx& c) { if (!fold_binary(c, add_i)) c.out(0, tessera::add(c.in(0), c.in(1))); }
void Sub(NodeCtx& c) { if (!fold_binary(c, sub_i)) c.out(0, tessera::sub(c.in(0), c.in(1))); }
void Mul(NodeCtx& c) { if (!fold_binary(c, mul_i)) c.out(0, tessera::mul(c.in(0), c.in(1))); }
void Div(NodeCtx& c) {
  if (fold_binary(c, div_i)) return;
  Tensor a = c.in(0), b = c.in(1);
  if (is_floating(a.dtype())) return c.out(0, tessera::div(a, b));
  // ONNX integer division truncates: the floor quotient, plus one where the remainder is non-zero
  // and the operands' signs differ.
  Tensor q = call_op(c, "floor_divide", {a, b});
  Tensor r = call_op(c, "remainder.Tensor", {a, b});
  Tensor zero = host_scalar(0, a.dtype());
  Tensor fix = tessera::logical_and(tessera::ne(r, zero), tessera::ne(tessera::lt(a, zero), tessera::lt(b, zero)));
  c.out(0, tessera::where(fix, tessera::add(q, host_scalar(1, q.dtype())), q));
}
// Folds an elementwise function of constant known integers (false: not every element is constant).
template <typename Fn>
bool fold_constants(NodeCtx& c, int n, Fn fn, DType dtype) {
  std::vector<std::vector<int64_t>> in;
  size_t len = 1;
  for (int i = 0; i < n; ++i) {
    if (!c.has_ints(i)) return false;
    std::vector<int64_t> v;
    for (const SymSize& s : c.ints(i)) {
      if (!s.is_constant()) return false;
      v.push_back(s.constant());
    }
    if (v.empty() || (v.size() != 1 && len != 1 && v.size() != len)) return false;
    len = std::max(len, v.size());
    in.push_back(std::move(v));
  }
  Sizes out;
  bool scalar = true;
  for (int i = 0; i < n; ++i) scalar = scalar && c.val(i).scalar;
  for (size_t k = 0; k < len; ++k) {
    std::vector<int64_t> args;
    for (const auto& v : in) args.push_back(v[v.size() == 1 ? 0 : k]);
    out.push_back(fn(c, args));
  }
  c.out_ints(0, out, scalar, dtype);
  return true;
}

void Mod(NodeCtx& c) {
  const bool fmod = c.attr_int("fmod", 0) != 0;
  if (c.has(0) && c.has(1) && c.has_ints(0) && c.has_ints(1) &&
      fold_constants(c, 2, [&](const NodeCtx& n, const std::vector<int64_t>& a) {
        if (a[1] == 0) n.fail("integer modulo by zero in a size computation");
        const int64_t r = a[0] % a[1];
        return fmod || r == 0 || (r < 0) == (a[1] < 0) ? r : r + a[1];
      }, c.val(0).int_dtype))
    return;
  c.out(0, call_op(c, fmod ? "fmod.Tensor" : "remainder.Tensor", {c.in(0), c.in(1)}));
}
void And(NodeCtx& c) {
  if (fold_constants(c, 2, [](const NodeCtx&, const std::vector<int64_t>& a) { return int64_t(a[0] && a[1]); }, kBool)) return;
  c.out(0, tessera::logical_and(c.in(0), c.in(1)));
}
void Or(NodeCtx& c) {
  if (fold_constants(c, 2, [](const NodeCtx&, const std::vector<int64_t>& a) { return int64_t(a[0] || a[1]); }, kBool)) return;
  c.out(0, tessera::logical_or(c.in(0), c.in(1)));
}
void Not(NodeCtx& c) {
  if (fold_constants(c, 1, [](const NodeCtx&, const std::vector<int64_t>& a) { return int64_t(!a[0]); }, kBool)) return;
  c.out(0, call_op(c, "logical_not", {c.in(0)}));
}
void BitShift(NodeCtx& c) {
  const std::string dir = c.attr_string("direction", "");
  if (dir != "LEFT" && dir != "RIGHT") c.fail("direction must be LEFT or RIGHT, got '" + dir + "'");
  c.out(0, call_op(c, dir == "LEFT" ? "bitwise_left_shift.Tensor" : "bitwise_right_shift.Tensor", {c.in(0), c.in(1)}));
}
void IsInf(NodeCtx& c) {
  Tensor x = c.in(0);
  Tensor inf = call_op(c, "isinf", {x});
  const bool pos = c.attr_int("detect_positive", 1) != 0, neg = c.attr_int("detect_negative", 1) != 0;
  if (pos && neg) return c.out(0, inf);
  Tensor zero = host_scalar(0, x.dtype());
  if (!pos && !neg) return c.out(0, tessera::logical_and(inf, tessera::ne(x, x)));  // all false
  c.out(0, tessera::logical_and(inf, pos ? tessera::gt(x, zero) : tessera::lt(x, zero)));
}
void Celu(NodeCtx& c) { c.out(0, call_op(c, "celu", {c.in(0), c.attr_float("alpha", 1.0)})); }
void ThresholdedRelu(NodeCtx& c) {
  Tensor x = c.in(0);
  Tensor zero = host_scalar(0, x.dtype());
  c.out(0, tessera::where(tessera::gt(x, host_scalar(c.attr_float("alpha", 1.0), x.dtype())), x, zero));
}
void Shrink(NodeCtx& c) {
  Tensor x = c.in(0);
  const double bias = c.attr_float("bias", 0.0), lambd = c.attr_float("lambd", 0.5);
  Tensor lo = tessera::lt(x, host_scalar(-lambd, x.dtype())), hi = tessera::gt(x, host_scalar(lambd, x.dtype()));
  Tensor y = tessera::where(lo, tessera::add(x, host_scalar(bias, x.dtype())),
                            tessera::where(hi, tessera::sub(x, host_scalar(bias, x.dtype())), host_scalar(0, x.dtype())));
  c.out(0, y);
}

// Unary and binary ops of the contract under another name (Note [OpInfo]: the schema's name).
template <const char* Name>
void contract_unary(NodeCtx& c) { c.out(0, call_op(c, Name, {c.in(0)})); }
template <const char* Name>
void contract_binary(NodeCtx& c) { c.out(0, call_op(c, Name, {c.in(0), c.in(1)})); }
constexpr char kFloor[] = "floor", kCeil[] = "ceil", kRound[] = "round", kSign[] = "sign", kTan[] = "tan",
               kAsin[] = "asin", kAcos[] = "acos", kAtan[] = "atan", kSinh[] = "sinh", kCosh[] = "cosh",
               kAsinh[] = "asinh", kAcosh[] = "acosh", kAtanh[] = "atanh", kBitwiseNot[] = "bitwise_not",
               kBitwiseAnd[] = "bitwise_and.Tensor", kBitwiseOr[] = "bitwise_or.Tensor",
               kBitwiseXor[] = "bitwise_xor.Tensor", kLogicalXor[] = "logical_xor";
void Pow(NodeCtx& c) {
  Tensor base = c.in(0);
  if (c.val(1).constant && c.val(1).t.numel() == 1 && c.val(1).t.dim() == 0)
    c.out(0, tessera::pow(base, Scalar(c.const_scalar(1))));
  else
    c.out(0, tessera::pow(base, c.in(1).to(base.dtype())));
}

// Comparisons, folded where every element is decided (sizes are >= 0, so a symbol never equals -1).
std::optional<bool> decide_equal(const SymSize& a, const SymSize& b) {
  SymSize d = a - b;
  if (d.is_constant()) return d.constant() == 0;
  auto ca = a.maybe_constant(), cb = b.maybe_constant();
  if ((ca && *ca < 0) || (cb && *cb < 0)) return false;
  return std::nullopt;
}
void Equal(NodeCtx& c) {
  if (c.has_ints(0) && c.has_ints(1)) {
    Sizes a = c.ints(0), b = c.ints(1);
    if (!a.empty() && !b.empty() && (a.size() == b.size() || a.size() == 1 || b.size() == 1)) {
      Sizes out;
      bool decided = true;
      for (size_t i = 0; decided && i < std::max(a.size(), b.size()); ++i) {
        auto r = decide_equal(a[a.size() == 1 ? 0 : i], b[b.size() == 1 ? 0 : i]);
        decided = r.has_value();
        if (decided) out.push_back(*r ? 1 : 0);
      }
      if (decided) return c.out_ints(0, out, c.val(0).scalar && c.val(1).scalar, kBool);
    }
  }
  c.out(0, tessera::eq(c.in(0), c.in(1)));
}
void Less(NodeCtx& c) { c.out(0, tessera::lt(c.in(0), c.in(1))); }
void LessOrEqual(NodeCtx& c) { c.out(0, tessera::le(c.in(0), c.in(1))); }
void Greater(NodeCtx& c) { c.out(0, tessera::gt(c.in(0), c.in(1))); }
void GreaterOrEqual(NodeCtx& c) { c.out(0, tessera::ge(c.in(0), c.in(1))); }

void Where(NodeCtx& c) {
  if (c.has_ints(0) && c.has_ints(1) && c.has_ints(2)) {
    Sizes k = c.ints(0), a = c.ints(1), b = c.ints(2);
    size_t n = std::max({k.size(), a.size(), b.size()});
    bool ok = !k.empty() && !a.empty() && !b.empty();
    for (const Sizes* s : {&k, &a, &b}) ok = ok && (s->size() == n || s->size() == 1);
    if (ok) {
      Sizes out;
      for (size_t i = 0; ok && i < n; ++i) {
        auto cond = k[k.size() == 1 ? 0 : i].maybe_constant();
        ok = cond.has_value();
        if (ok) out.push_back(*cond ? a[a.size() == 1 ? 0 : i] : b[b.size() == 1 ? 0 : i]);
      }
      if (ok) return c.out_ints(0, out, c.val(1).scalar && c.val(2).scalar && c.val(0).scalar, c.val(1).int_dtype);
    }
  }
  c.out(0, tessera::where(c.in(0), c.in(1), c.in(2)));
}

// Variadic Max/Min/Sum/Mean.
template <Tensor (*Fn)(const Tensor&, const Tensor&)>
void variadic(NodeCtx& c) {
  Tensor acc = c.in(0);
  for (int i = 1; i < c.num_inputs(); ++i) acc = Fn(acc, c.in(i));
  c.out(0, acc);
}
Tensor add2(const Tensor& a, const Tensor& b) { return tessera::add(a, b); }
// Max/Min of two known integer lists whose elements are all constants (a crop's or pad's sizes).
SymSize max_i(const SymSize& a, const SymSize& b) { return std::max(a.constant(), b.constant()); }
SymSize min_i(const SymSize& a, const SymSize& b) { return std::min(a.constant(), b.constant()); }
bool fold_extreme(NodeCtx& c, IntFn fn) {
  if (c.num_inputs() != 2 || !c.has_ints(0) || !c.has_ints(1)) return false;
  for (int i : {0, 1})
    for (const SymSize& v : c.ints(i))
      if (!v.is_constant()) return false;
  return fold_binary(c, fn);
}
void Max(NodeCtx& c) { if (!fold_extreme(c, max_i)) variadic<tessera::maximum>(c); }
void Min(NodeCtx& c) { if (!fold_extreme(c, min_i)) variadic<tessera::minimum>(c); }
void Sum(NodeCtx& c) { variadic<add2>(c); }
void Mean(NodeCtx& c) {
  Tensor acc = c.in(0);
  for (int i = 1; i < c.num_inputs(); ++i) acc = tessera::add(acc, c.in(i));
  c.out(0, tessera::div(acc, host_scalar(double(c.num_inputs()), acc.dtype())));
}

// Unary ops with a contract op of their own.
template <Tensor (*Fn)(const Tensor&)>
void unary(NodeCtx& c) { c.out(0, Fn(c.in(0))); }

Tensor scalar_like(double v, const Tensor& x) { return host_scalar(v, x.dtype()); }

void Neg(NodeCtx& c) {
  if (c.has_ints(0)) {  // a size computation (Note [Known integers])
    Sizes v = c.ints(0);
    for (SymSize& s : v) s = -s;
    return c.out_ints(0, v, c.val(0).scalar, c.val(0).int_dtype);
  }
  c.out(0, tessera::neg(c.in(0)));
}
void Reciprocal(NodeCtx& c) { Tensor x = c.in(0); c.out(0, tessera::div(scalar_like(1, x), x)); }
void Gelu(NodeCtx& c) { c.out(0, tessera::gelu(c.in(0), c.attr_string("approximate", "none"))); }
void LeakyRelu(NodeCtx& c) {
  Tensor x = c.in(0);
  c.out(0, tessera::where(tessera::gt(x, scalar_like(0, x)), x, tessera::mul(x, scalar_like(c.attr_float("alpha", 0.01), x))));
}
Tensor elu(const Tensor& x, double alpha) {
  Tensor neg = tessera::mul(tessera::sub(tessera::exp(x), scalar_like(1, x)), scalar_like(alpha, x));
  return tessera::where(tessera::gt(x, scalar_like(0, x)), x, neg);
}
void Elu(NodeCtx& c) { c.out(0, elu(c.in(0), c.attr_float("alpha", 1.0))); }
void Selu(NodeCtx& c) {
  Tensor x = c.in(0);
  const double alpha = c.attr_float("alpha", 1.67326319217681884765625);
  const double gamma = c.attr_float("gamma", 1.05070102214813232421875);
  c.out(0, tessera::mul(elu(x, alpha), scalar_like(gamma, x)));
}
void HardSigmoid(NodeCtx& c) {
  Tensor x = c.in(0);
  Tensor y = tessera::add(tessera::mul(x, scalar_like(c.attr_float("alpha", 0.2), x)), scalar_like(c.attr_float("beta", 0.5), x));
  c.out(0, tessera::clamp(y, Scalar(0.0), Scalar(1.0)));
}
void HardSwish(NodeCtx& c) {
  Tensor x = c.in(0);
  Tensor y = tessera::add(tessera::mul(x, scalar_like(1.0 / 6.0, x)), scalar_like(0.5, x));
  c.out(0, tessera::mul(x, tessera::clamp(y, Scalar(0.0), Scalar(1.0))));
}
// softplus(x) = relu(x) + log(1 + exp(-|x|)): no overflow for large |x|.
Tensor stable_softplus(const Tensor& x) {
  Tensor t = tessera::log(tessera::add(tessera::exp(tessera::neg(tessera::abs(x))), scalar_like(1, x)));
  return tessera::add(tessera::relu(x), t);
}
void Softplus(NodeCtx& c) { c.out(0, stable_softplus(c.in(0))); }
void Softsign(NodeCtx& c) {
  Tensor x = c.in(0);
  c.out(0, tessera::div(x, tessera::add(tessera::abs(x), scalar_like(1, x))));
}
void Mish(NodeCtx& c) { Tensor x = c.in(0); c.out(0, tessera::mul(x, tessera::tanh(stable_softplus(x)))); }
void IsNaN(NodeCtx& c) { Tensor x = c.in(0); c.out(0, tessera::ne(x, x)); }
void PRelu(NodeCtx& c) {
  Tensor x = c.in(0);
  c.out(0, tessera::where(tessera::gt(x, scalar_like(0, x)), x, tessera::mul(x, c.in(1))));
}

void Identity(NodeCtx& c) { c.out(0, c.val(0)); }
void Dropout(NodeCtx& c) {
  c.ignore_attrs({"seed", "ratio"});
  if (c.has(2) && c.const_ints(2) != std::vector<int64_t>{0}) c.fail("training_mode is true; only inference is imported");
  c.out(0, c.val(0));
  if (c.output_used(1)) {  // the mask of an inference Dropout keeps everything
    Tensor x = c.in(0);
    c.out(1, tessera::logical_or(tessera::eq(x, x), tessera::ne(x, x)));
  }
}

// Input 0 cast to `dt`; a constant is cast on the host, so the result stays a constant (a Pad value
// CastLike(-inf, x) made).
Tensor cast_of(NodeCtx& c, DType dt) {
  if (!c.val(0).constant) return c.in(0).to(dt);
  ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
  return c.in(0).to(dt);
}

void Cast(NodeCtx& c) {
  if (c.attr_int("saturate", 1) != 1) c.fail("saturate=0 (a float8 cast) is not supported");
  if (c.has_attr("round_mode") && c.attr_string("round_mode", "up") != "up") c.fail("round_mode is not supported");
  const int64_t to = c.attr_int("to", 0);
  std::optional<DType> dt = dtype_of_onnx(int32_t(to));
  if (!dt) c.fail("cast to ONNX type " + std::to_string(to) + ", which Tessera has no dtype for");
  if (c.has_ints(0) && !is_floating(*dt) && *dt != kBool) return c.out_ints(0, c.ints(0), c.val(0).scalar, *dt);
  c.out(0, cast_of(c, *dt));
}
void CastLike(NodeCtx& c) {
  if (c.attr_int("saturate", 1) != 1) c.fail("saturate=0 (a float8 cast) is not supported");
  if (c.has_attr("round_mode") && c.attr_string("round_mode", "up") != "up") c.fail("round_mode is not supported");
  c.out(0, cast_of(c, c.in(1).dtype()));
}

void Clip(NodeCtx& c) {
  Tensor x = c.in(0);
  std::optional<Scalar> lo, hi;
  if (c.opset() < 11) {
    lo = Scalar(c.attr_float("min", -INFINITY));
    hi = Scalar(c.attr_float("max", INFINITY));
  } else {
    for (int i : {1, 2}) {
      if (!c.has(i)) continue;
      if (!c.val(i).constant && !c.val(i).ints) {
        x = i == 1 ? tessera::maximum(x, c.in(i)) : tessera::minimum(x, c.in(i));
        continue;
      }
      const double v = c.const_scalar(i);
      Scalar s = is_floating(x.dtype()) ? Scalar(v) : Scalar(int64_t(v));
      (i == 1 ? lo : hi) = s;
    }
  }
  c.out(0, lo || hi ? tessera::clamp(x, lo, hi) : x);
}

void Constant(NodeCtx& c) {
  Tensor t;
  if (const ::onnx::TensorProto* p = c.attr_tensor("value")) {
    t = tensor_from_proto(*p, "");
  } else if (c.has_attr("value_float")) {
    t = host_scalar(c.attr_float("value_float", 0), kFloat32);
  } else if (c.has_attr("value_int")) {
    t = host_tensor({c.attr_int("value_int", 0)}, {}, kInt64);
  } else if (c.has_attr("value_ints")) {
    std::vector<int64_t> v = c.attr_ints("value_ints", {});
    t = host_tensor(v, {int64_t(v.size())}, kInt64);
  } else if (c.has_attr("value_floats")) {
    std::vector<double> v = c.attr_floats("value_floats");
    std::vector<float> f(v.begin(), v.end());
    ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
    t = tessera::tensor(f, {int64_t(f.size())}, tessera::dtype(kFloat32));
  } else {
    c.fail("only value, value_float(s) and value_int(s) are supported (strings and sparse tensors are not)");
  }
  c.out(0, constant_val(t));
}

}  // namespace

void add_elementwise_converters(ConverterTable& t) {
  t["Add"] = Add; t["Sub"] = Sub; t["Mul"] = Mul; t["Div"] = Div; t["Pow"] = Pow;
  t["Equal"] = Equal; t["Less"] = Less; t["LessOrEqual"] = LessOrEqual; t["Greater"] = Greater;
  t["GreaterOrEqual"] = GreaterOrEqual; t["And"] = And; t["Or"] = Or; t["Xor"] = contract_binary<kLogicalXor>;
  t["Not"] = Not; t["Mod"] = Mod; t["BitShift"] = BitShift; t["IsInf"] = IsInf;
  t["Celu"] = Celu; t["ThresholdedRelu"] = ThresholdedRelu; t["Shrink"] = Shrink;
  t["Floor"] = contract_unary<kFloor>; t["Ceil"] = contract_unary<kCeil>; t["Round"] = contract_unary<kRound>;
  t["Sign"] = contract_unary<kSign>; t["Tan"] = contract_unary<kTan>; t["Asin"] = contract_unary<kAsin>;
  t["Acos"] = contract_unary<kAcos>; t["Atan"] = contract_unary<kAtan>; t["Sinh"] = contract_unary<kSinh>;
  t["Cosh"] = contract_unary<kCosh>; t["Asinh"] = contract_unary<kAsinh>; t["Acosh"] = contract_unary<kAcosh>;
  t["Atanh"] = contract_unary<kAtanh>; t["BitwiseNot"] = contract_unary<kBitwiseNot>;
  t["BitwiseAnd"] = contract_binary<kBitwiseAnd>; t["BitwiseOr"] = contract_binary<kBitwiseOr>;
  t["BitwiseXor"] = contract_binary<kBitwiseXor>;
  t["Where"] = Where; t["Max"] = Max; t["Min"] = Min; t["Sum"] = Sum; t["Mean"] = Mean;
  t["Relu"] = unary<tessera::relu>; t["Sigmoid"] = unary<tessera::sigmoid>; t["Tanh"] = unary<tessera::tanh>;
  t["Erf"] = unary<tessera::erf>; t["Sqrt"] = unary<tessera::sqrt>; t["Exp"] = unary<tessera::exp>;
  t["Log"] = unary<tessera::log>; t["Neg"] = Neg; t["Abs"] = unary<tessera::abs>;
  t["Sin"] = unary<tessera::sin>; t["Cos"] = unary<tessera::cos>;
  t["Reciprocal"] = Reciprocal; t["Gelu"] = Gelu; t["LeakyRelu"] = LeakyRelu; t["Elu"] = Elu; t["Selu"] = Selu;
  t["HardSigmoid"] = HardSigmoid; t["HardSwish"] = HardSwish; t["Softplus"] = Softplus; t["Softsign"] = Softsign;
  t["Mish"] = Mish; t["IsNaN"] = IsNaN; t["PRelu"] = PRelu;
  t["Identity"] = Identity; t["Dropout"] = Dropout; t["Cast"] = Cast; t["CastLike"] = CastLike; t["Clip"] = Clip;
  t["Constant"] = Constant;
}

const ConverterTable& converter_table() {
  static const ConverterTable table = [] {
    ConverterTable t;
    add_elementwise_converters(t);
    add_nn_converters(t);
    add_shape_converters(t);
    add_index_converters(t);
    add_attention_converters(t);
    add_resize_converters(t);
    add_loss_converters(t);
    add_rnn_converters(t);
    add_more_nn_converters(t);
    add_more_index_converters(t);
    return t;
  }();
  return table;
}

}  // namespace tessera::onnx::detail
