// The operator catalogue: every op of the core op set with its schema and its shape/dtype rule.
// The shape arithmetic lives in shape_rules.h (Note [Shape rules]); this file adds dtype rules and
// argument checks. Note [Compute dtype] (op_registry.h) says which inputs the dispatcher converts.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "memory_format_internal.h"
#include "op_registry.h"
#include "shape_rules.h"
#include "tessera/ops.h"

namespace tessera {
namespace {

using Sz = shape::Sizes<int64_t>;

// ---- attribute access with checks

const tessera_value_t& attr(const MetaCall& m, int i) {
  TESSERA_CHECK(i < m.num_attrs, m.op_name, ": missing attribute ", i, " (got ", m.num_attrs, ")");
  return m.attrs[i];
}
bool attr_none(const MetaCall& m, int i) { return attr(m, i).kind == TESSERA_VALUE_NONE; }
int64_t attr_int(const MetaCall& m, int i) {
  const auto& v = attr(m, i);
  TESSERA_CHECK(v.kind == TESSERA_VALUE_INT || v.kind == TESSERA_VALUE_BOOL, m.op_name, ": attribute ", i,
                " must be an int");
  return v.kind == TESSERA_VALUE_BOOL ? v.u.b : v.u.i;
}
double attr_double(const MetaCall& m, int i) {
  const auto& v = attr(m, i);
  if (v.kind == TESSERA_VALUE_DOUBLE) return v.u.d;
  if (v.kind == TESSERA_VALUE_INT) return double(v.u.i);
  if (v.kind == TESSERA_VALUE_BOOL) return double(v.u.b);
  detail::throw_error(ErrorCode::InvalidArgument,
                      std::string(m.op_name) + ": attribute " + std::to_string(i) + " must be a number");
}
bool attr_bool(const MetaCall& m, int i) { return attr_int(m, i) != 0; }
DType attr_dtype(const MetaCall& m, int i) {
  const auto& v = attr(m, i);
  TESSERA_CHECK(
      (v.kind == TESSERA_VALUE_DTYPE || v.kind == TESSERA_VALUE_INT) && v.u.i >= 0 && v.u.i < kNumDTypes,
      m.op_name, ": attribute ", i, " must be a dtype");
  return DType(v.u.i);
}
IntArrayRef attr_ints(const MetaCall& m, int i) {
  const auto& v = attr(m, i);
  if (v.kind == TESSERA_VALUE_NONE) return {};
  TESSERA_CHECK(v.kind == TESSERA_VALUE_INT_LIST, m.op_name, ": attribute ", i, " must be an int list");
  return IntArrayRef(v.u.ints, size_t(v.count));
}
// int[2] argument: [a, b], or [a] meaning [a, a].
void attr_pair(const MetaCall& m, int i, const char* name, int64_t out[2],
               const int64_t* if_empty = nullptr) {
  IntArrayRef l = attr_ints(m, i);
  if (l.empty() && if_empty) {
    out[0] = if_empty[0];
    out[1] = if_empty[1];
    return;
  }
  TESSERA_CHECK(l.size() == 1 || l.size() == 2, m.op_name, ": ", name, " must have 1 or 2 values, got ", l);
  out[0] = l[0];
  out[1] = l.size() == 2 ? l[1] : l[0];
}

const TensorImpl& need(const MetaCall& m, int i, const char* name) {
  TESSERA_CHECK(i < m.num_tensors && m.tensors[i], m.op_name, ": tensor argument '", name, "' is missing");
  return *m.tensors[i];
}

void add_rt(ResultTypeState& s, const TensorImpl& t) {
  s.add_tensor(t.dtype(), t.dim() == 0, t.is_wrapped_number());
}
DType result_type(const TensorImpl& a, const TensorImpl& b) {
  if (a.dtype() == b.dtype()) return a.dtype();  // one dtype promotes to itself, whatever the dims
  ResultTypeState s;
  add_rt(s, a);
  add_rt(s, b);
  return s.result();
}
DType float_of(DType t) { return is_floating(t) ? t : default_dtype(); }

// PyTorch's canCast: no conversion to a lower category (float -> int, int -> bool).
bool can_cast(DType from, DType to) { return int(dtype_category(from)) <= int(dtype_category(to)); }

// ---- creation and copies

void meta_empty_strided(MetaCall& m) {
  IntArrayRef sizes = attr_ints(m, 0), strides = attr_ints(m, 1);
  TESSERA_CHECK(sizes.size() == strides.size(), m.op_name, ": got ", sizes.size(), " sizes ", sizes, " and ",
                strides.size(), " strides ", strides, "; expected as many strides as sizes");
  DType dt = attr_none(m, 2) ? default_dtype() : attr_dtype(m, 2);
  auto& o = m.add_output(sizes, dt);
  o.strides = detail::SmallVector<int64_t, 8>(strides);
}

// fill_(Scalar): the value must fit the tensor's dtype (PyTorch's checked_convert).
void meta_fill_(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  if (m.num_attrs > 0 && attr(m, 0).kind != TESSERA_VALUE_NONE)
    check_scalar_fits(scalar_of(attr(m, 0)), self.dtype(), "fill_");
  m.alias_output(0);
}

// alpha of add/sub: PyTorch's alpha_check, then the value must fit the result dtype.
void check_alpha(const MetaCall& m, DType result) {
  if (m.num_attrs == 0) return;
  const tessera_value_t& a = m.attrs[0];
  if (a.kind == TESSERA_VALUE_NONE) return;
  // The default alpha (integer 1) passes every check for a non-bool result.
  if (a.kind == TESSERA_VALUE_INT && a.u.i == 1 && result != kBool) return;
  const Scalar alpha = scalar_of(a);
  TESSERA_CHECK(result == kBool || !alpha.is_bool(), m.op_name,
                ": boolean alpha only supported for boolean results; pass an integer alpha");
  TESSERA_CHECK(is_floating(result) || !alpha.is_floating(), m.op_name,
                ": for integral input tensors, argument alpha must not be a floating point number (got ",
                alpha, ")");
  if (scalar_overflows(alpha, result))  // the message is built only on failure (hot path)
    check_scalar_fits(alpha, result, (std::string(m.op_name) + " alpha").c_str());
}

void meta_random_(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  TESSERA_CHECK(is_floating(self.dtype()), m.op_name, ": expected a floating tensor, got ", self.dtype(),
                "; create it with a floating dtype (e.g. kFloat32)");
  m.alias_output(0);
}

// Copies and casts move values, not quantized representations (Note [Quantized reference kernels]).
void check_not_quantized(const MetaCall& m, const TensorImpl& t) {
  TESSERA_CHECK(!is_quantized(t.dtype()), "'", m.op_name, "' does not take quantized tensors (dtype ", t.dtype(),
                "); call dequantize() first, and quantize_per_tensor() on the result if needed");
}

void meta_copy_(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  const TensorImpl& src = need(m, 1, "src");
  check_not_quantized(m, self);
  check_not_quantized(m, src);
  shape::check_broadcast_to<int64_t>(m.op_name, src.sizes(), self.sizes());
  m.alias_output(0);
}

void meta_to_copy(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  check_not_quantized(m, self);
  DType dt = attr_none(m, 0) ? self.dtype() : attr_dtype(m, 0);
  m.add_output(self.sizes(), dt);
}

void meta_same(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  m.add_output(self.sizes(), self.dtype());
}

void meta_arange(MetaCall& m) {
  double start = attr_double(m, 0), end = attr_double(m, 1), step = attr_double(m, 2);
  DType dt = attr_dtype(m, 3);
  TESSERA_CHECK(step != 0, m.op_name, ": step must be nonzero");
  TESSERA_CHECK(std::isfinite(start) && std::isfinite(end), m.op_name, ": unsupported range ", start, " -> ",
                end);
  TESSERA_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), m.op_name,
                ": upper bound and larger bound inconsistent with step sign (start ", start, ", end ", end,
                ", step ", step, ")");
  double n = std::ceil((end - start) / step);
  TESSERA_CHECK(n >= 0 && n < 9.0e18, m.op_name, ": invalid number of elements ", n);
  int64_t count = int64_t(n);
  m.add_output(IntArrayRef(count), dt);
}

// ---- elementwise binary

enum class Bin { Arith, Sub, Pow, TrueDiv, Compare, Logical };

void check_pow_dtype(const MetaCall& m, DType r) {
  TESSERA_CHECK(r != kBool, m.op_name, ": not implemented for bool (both operands are bool); convert one with .to(kInt64)");
}

template <Bin K>
void meta_binary(MetaCall& m) {
  const TensorImpl& a = need(m, 0, "self");
  const TensorImpl& b = need(m, 1, "other");
  const bool same_sizes = a.sizes() == b.sizes();
  Sz out;
  if (!same_sizes) out = shape::broadcast<int64_t>(m.op_name, a.sizes(), b.sizes());
  DType common = result_type(a, b);
  if constexpr (K == Bin::Sub) {
    TESSERA_CHECK(a.dtype() != kBool && b.dtype() != kBool, m.op_name,
                  ": Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to "
                  "invert a mask, use the `~` or `logical_not()` operator instead.");
  }
  if constexpr (K == Bin::Pow) check_pow_dtype(m, common);
  DType compute = common;
  if constexpr (K == Bin::TrueDiv) compute = float_of(common);
  DType result = (K == Bin::Compare || K == Bin::Logical) ? kBool : compute;
  if constexpr (K == Bin::Arith || K == Bin::Sub) check_alpha(m, result);
  m.compute_dtype = compute;
  m.cast_mask = 0b11;
  m.add_output(same_sizes ? a.sizes() : IntArrayRef(out), result);
}

void meta_pow_scalar(MetaCall& m) {
  const TensorImpl& a = need(m, 0, "self");
  const tessera_value_t& e = attr(m, 0);
  ResultTypeState s;
  add_rt(s, a);
  s.add_tensor(e.kind == TESSERA_VALUE_DOUBLE ? kFloat64 : (e.kind == TESSERA_VALUE_BOOL ? kBool : kInt64),
               true, true);
  DType r = s.result();
  TESSERA_CHECK(!(is_integral(r, true) && e.kind == TESSERA_VALUE_INT && e.u.i < 0), m.op_name,
                ": integers to negative integer powers are not allowed (exponent ", e.u.i,
                ", dtype ", r, "); use a floating tensor or exponent");
  m.compute_dtype = r;
  m.cast_mask = 0b1;
  m.add_output(a.sizes(), r);
}

void meta_where(MetaCall& m) {
  const TensorImpl& c = need(m, 0, "condition");
  const TensorImpl& a = need(m, 1, "self");
  const TensorImpl& b = need(m, 2, "other");
  TESSERA_CHECK(c.dtype() == kBool, m.op_name, ": condition must be a bool tensor, got ", c.dtype(),
                "; build it with a comparison (e.g. gt) or .to(kBool)");
  Sz ab = shape::broadcast<int64_t>(m.op_name, a.sizes(), b.sizes());
  Sz out = shape::broadcast<int64_t>(m.op_name, c.sizes(), ab.ref());
  DType r = result_type(a, b);
  m.compute_dtype = r;
  m.cast_mask = 0b110;
  m.add_output(out, r);
}

void meta_binary_inplace(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  const TensorImpl& other = need(m, 1, "other");
  Sz out = shape::broadcast<int64_t>(m.op_name, self.sizes(), other.sizes());
  TESSERA_CHECK(out.ref() == self.sizes(), m.op_name, ": output with shape ", self.sizes(),
                " doesn't match the broadcast shape ", out.ref(), "; use the out-of-place op");
  DType r = result_type(self, other);
  TESSERA_CHECK(can_cast(r, self.dtype()), m.op_name, ": result type ", r,
                " can't be cast to the desired output type ", self.dtype(), "; use the out-of-place op");
  check_alpha(m, self.dtype());
  m.compute_dtype = self.dtype();
  m.cast_mask = 0b10;
  m.alias_output(0);
}

// ---- unary

void meta_unary_float(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  DType r = float_of(x.dtype());
  m.compute_dtype = r;
  m.cast_mask = 0b1;
  m.add_output(x.sizes(), r);
}

// Ops that PyTorch implements for floating tensors only (gelu, silu, softmax, the norms): an integral or
// bool input is refused instead of being promoted, as PyTorch's kernels refuse it.
void check_floating_input(const MetaCall& m, const TensorImpl& x) {
  TESSERA_CHECK(is_floating(x.dtype()), m.op_name, ": not implemented for ", x.dtype(),
                " tensors (it takes floating tensors only); convert the input with .to(kFloat32)");
}

void meta_unary_float_only(MetaCall& m) {
  check_floating_input(m, need(m, 0, "self"));
  meta_unary_float(m);
}

void meta_unary_nobool(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(x.dtype() != kBool, m.op_name,
                ": not supported for bool tensors; convert with .to(kInt64) or use "
                "logical ops");
  m.add_output(x.sizes(), x.dtype());
}

void meta_gelu(MetaCall& m) {
  const tessera_value_t& a = attr(m, 0);
  std::string approx = a.kind == TESSERA_VALUE_STRING && a.u.s ? a.u.s : "none";
  TESSERA_CHECK(approx == "none" || approx == "tanh", m.op_name,
                ": approximate must be \"none\" or \"tanh\", got \"", approx, "\"");
  meta_unary_float_only(m);
}

// ---- reductions

void meta_sum_prod(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  Sz out = shape::reduce<int64_t>(m.op_name, x.sizes(), attr_ints(m, 0), attr_bool(m, 1));
  DType r = is_floating(x.dtype()) ? x.dtype() : kInt64;
  m.compute_dtype = r;
  m.cast_mask = 0b1;
  m.add_output(out, r);
}

void meta_mean(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(is_floating(x.dtype()), m.op_name, ": expected a floating input, got ", x.dtype(),
                "; convert with .to(kFloat32) first");
  Sz out = shape::reduce<int64_t>(m.op_name, x.sizes(), attr_ints(m, 0), attr_bool(m, 1));
  m.add_output(out, x.dtype());
}

void meta_var(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(is_floating(x.dtype()), m.op_name, ": expected a floating input, got ", x.dtype(),
                "; convert with .to(kFloat32) first");
  Sz out = shape::reduce<int64_t>(m.op_name, x.sizes(), attr_ints(m, 0), attr_bool(m, 2));
  TESSERA_CHECK(attr_int(m, 1) >= 0, m.op_name, ": correction must be non-negative, got ", attr_int(m, 1));
  m.add_output(out, x.dtype());
}

void meta_amax(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  IntArrayRef dims = attr_ints(m, 0);
  if (dims.empty()) {
    TESSERA_CHECK(x.numel() > 0, m.op_name, ": cannot reduce an empty tensor (shape ", x.sizes(),
                  "); the operation has no identity");
  } else {
    for (int64_t d : dims) {
      int64_t w = shape::wrap(m.op_name, d, x.dim());
      TESSERA_CHECK(x.dim() == 0 || x.sizes()[size_t(w)] > 0, m.op_name, ": cannot reduce over dimension ", d,
                    " of size 0 (shape ", x.sizes(), "); the operation has no identity");
    }
  }
  Sz out = shape::reduce<int64_t>(m.op_name, x.sizes(), dims, attr_bool(m, 1));
  m.add_output(out, x.dtype());
}

void meta_argmax(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(x.dtype() != kBool, m.op_name, ": does not support bool input; convert it with .to(kInt64)");
  bool keepdim = attr_bool(m, 1);
  if (attr_none(m, 0)) {
    TESSERA_CHECK(x.numel() > 0, m.op_name, ": expected a non-empty tensor, got shape ", x.sizes());
    Sz out;
    if (keepdim) out.resize(size_t(x.dim()), 1);
    m.add_output(out, kInt64);
    return;
  }
  int64_t d = attr_int(m, 0);
  int64_t w = shape::wrap(m.op_name, d, x.dim());
  TESSERA_CHECK(x.dim() == 0 || x.sizes()[size_t(w)] > 0, m.op_name, ": cannot reduce over dimension ", d,
                " of size 0");
  Sz out = shape::reduce<int64_t>(m.op_name, x.sizes(), IntArrayRef(d), keepdim);
  m.add_output(out, kInt64);
}

// ---- nn

void check_same_dtype(const MetaCall& m, const TensorImpl& a, const TensorImpl& b, const char* an,
                      const char* bn) {
  TESSERA_CHECK(a.dtype() == b.dtype(), m.op_name, ": expected ", an, " and ", bn,
                " to have the same dtype, got ", a.dtype(), " and ", b.dtype(), "; convert one with .to(",
                a.dtype(), ")");
}

void meta_matmul(MetaCall& m) {
  const TensorImpl& a = need(m, 0, "self");
  const TensorImpl& b = need(m, 1, "other");
  check_same_dtype(m, a, b, "self", "other");
  m.add_output(shape::matmul<int64_t>(m.op_name, a.sizes(), b.sizes()), a.dtype());
}

void meta_linear(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  const TensorImpl& w = need(m, 1, "weight");
  check_same_dtype(m, x, w, "input", "weight");
  Sz out = shape::linear<int64_t>(m.op_name, x.sizes(), w.sizes());
  if (m.has(2)) {
    const TensorImpl& bias = *m.tensors[2];
    check_same_dtype(m, x, bias, "input", "bias");
    shape::check_broadcast_to<int64_t>(m.op_name, bias.sizes(), out.ref());
  }
  m.add_output(out, x.dtype());
}

// Note [Packed int8 weights]
// _quantized_linear_prepack returns the weights in the backend's own int8 layout (oneDNN's blocked
// format on the CPU) as an opaque uint8 [out_features, bytes] tensor: out_features stays readable
// by the shape rule of _quantized_linear, everything else is the backend's. The dispatcher sizes
// it before any kernel runs, so the rule reserves an upper bound: a 4 KiB header, the scales, the
// weights padded to 64 in both dims (the largest block oneDNN uses for int8) and 16 bytes per
// padded output channel for the backend's compensation terms. The kernel checks that its layout
// fits and fails with the sizes otherwise.
void meta_quantized_linear_prepack(MetaCall& m) {
  const TensorImpl& w = need(m, 0, "weight");
  const TensorImpl& s = need(m, 1, "weight_scale");
  TESSERA_CHECK(w.dtype() == kInt8 && w.dim() == 2, m.op_name, ": weight must be a 2-D int8 tensor [out_features, ",
                "in_features], got ", w.dtype(), " ", w.sizes(), "; quantize it with quantize_per_channel first");
  const int64_t n = w.sizes()[0], k = w.sizes()[1];
  TESSERA_CHECK(n > 0 && k > 0, m.op_name, ": weight ", w.sizes(), " is empty; expected at least one input and one ",
                "output feature");
  TESSERA_CHECK(s.dtype() == kFloat32 && s.dim() == 1 && s.sizes()[0] == n, m.op_name,
                ": weight_scale must be float32 [", n, "] (one scale per output channel), got ", s.dtype(), " ",
                s.sizes());
  auto pad64 = [](int64_t v) { return (v + 63) / 64 * 64; };
  std::optional<int64_t> body = checked_mul(pad64(k), pad64(n));
  std::optional<int64_t> total = body ? checked_add(*body, 4096 + 64 + 8 * n + 16 * pad64(n)) : std::nullopt;
  TESSERA_CHECK(total.has_value(), m.op_name, ": weight ", w.sizes(), " is too large to pack");
  m.add_output(IntArrayRef({n, (*total + n - 1) / n}), kUInt8);
}

void check_quantize_input(const MetaCall& m, const TensorImpl& x, DType dt) {
  TESSERA_CHECK(x.dtype() == kFloat32, m.op_name, ": quantize only works on float32 tensors, got ", x.dtype(),
                "; convert with .to(kFloat32)");
  TESSERA_CHECK(is_quantized(dt), m.op_name, ": dtype ", dt, " is not a quantized dtype; expected qint8, quint8 or qint32");
}

void meta_quantize_per_tensor(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  const DType dt = attr_dtype(m, 2);
  check_quantize_input(m, x, dt);
  Quantizer::per_tensor(dt, attr_double(m, 0), attr_int(m, 1));  // checks scale and zero point
  m.add_output(x.sizes(), dt);
}

void meta_quantize_per_channel(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  const TensorImpl& scales = need(m, 1, "scales");
  const TensorImpl& zps = need(m, 2, "zero_points");
  const int64_t axis = attr_int(m, 0);
  const DType dt = attr_dtype(m, 1);
  check_quantize_input(m, x, dt);
  TESSERA_CHECK(axis >= 0 && axis < x.dim(), m.op_name, ": axis ", axis, " is out of range for a tensor of ", x.dim(),
                " dims; expected 0..", x.dim() - 1);
  const int64_t channels = x.sizes()[size_t(axis)];
  TESSERA_CHECK(scales.dim() == 1 && scales.sizes()[0] == channels && is_floating(scales.dtype()), m.op_name,
                ": scales must be a 1-D floating tensor of ", channels, " values (the size of dim ", axis, "), got ",
                scales.dtype(), " ", scales.sizes());
  TESSERA_CHECK(zps.dim() == 1 && zps.sizes()[0] == channels && is_integral(zps.dtype()), m.op_name,
                ": zero_points must be a 1-D integer tensor of ", channels, " values (the size of dim ", axis,
                "), got ", zps.dtype(), " ", zps.sizes());
  m.add_output(x.sizes(), dt);
}

void meta_dequantize(MetaCall& m) {
  const TensorImpl& q = need(m, 0, "self");
  m.add_output(q.sizes(), is_quantized(q.dtype()) ? kFloat32 : q.dtype());
}

void meta_int_repr(MetaCall& m) {
  const TensorImpl& q = need(m, 0, "self");
  TESSERA_CHECK(is_quantized(q.dtype()), m.op_name, ": expected a quantized tensor (qint8, quint8, qint32), got ",
                q.dtype());
  m.add_output(q.sizes(), underlying_dtype(q.dtype()));
}

void check_quant_scale(const MetaCall& m, double scale, const char* what) {
  TESSERA_CHECK(std::isfinite(scale) && scale > 0 && scale <= double(std::numeric_limits<float>::max()), m.op_name,
                ": ", what, " must be a finite positive float32 value, got ", scale);
}

// The checks _quantized_linear and _quantized_linear_dynamic share; returns out_features.
int64_t check_quantized_linear_weights(const MetaCall& m, const TensorImpl& pw) {
  TESSERA_CHECK(pw.dtype() == kUInt8 && pw.dim() == 2, m.op_name, ": packed_weight must come from ",
                "_quantized_linear_prepack (uint8, 2-D), got ", pw.dtype(), " ", pw.sizes());
  const int64_t n = pw.sizes()[0];
  if (m.has(2)) {
    const TensorImpl& b = m.t(2);
    TESSERA_CHECK(b.dtype() == kFloat32 && b.dim() == 1 && b.sizes()[0] == n, m.op_name, ": bias must be float32 [",
                  n, "], got ", b.dtype(), " ", b.sizes());
  }
  return n;
}

void add_quantized_linear_output(MetaCall& m, const TensorImpl& x, int64_t n, DType out) {
  Sz sizes(x.sizes());
  sizes[sizes.size() - 1] = n;
  m.add_output(sizes, out);
}

void meta_quantized_linear(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  const TensorImpl& pw = need(m, 1, "packed_weight");
  TESSERA_CHECK((x.dtype() == kUInt8 || x.dtype() == kFloat32) && x.dim() >= 1, m.op_name,
                ": input must be the uint8 representation [..., in_features] of a quint8 tensor, or float32 values ",
                "to quantize with input_scale and input_zero_point, got ", x.dtype(), " ", x.sizes());
  const int64_t n = check_quantized_linear_weights(m, pw);
  check_quant_scale(m, attr_double(m, 0), "input_scale");
  const int64_t in_zp = attr_int(m, 1);
  TESSERA_CHECK(in_zp >= 0 && in_zp <= 255, m.op_name, ": input_zero_point ", in_zp,
                " is out of range for quint8; expected 0..255");
  const DType out = attr_dtype(m, 5);
  TESSERA_CHECK(out == kUInt8 || out == kQUInt8 || out == kFloat32, m.op_name,
                ": out_dtype must be uint8 (requantised), quint8 (requantised, then dequantized to float32) or ",
                "float32, got ", out);
  if (out != kFloat32) {
    check_quant_scale(m, attr_double(m, 2), "output_scale");
    const int64_t out_zp = attr_int(m, 3);
    TESSERA_CHECK(out_zp >= 0 && out_zp <= 255, m.op_name, ": output_zero_point ", out_zp,
                  " is out of range for quint8; expected 0..255");
  }
  add_quantized_linear_output(m, x, n, out == kUInt8 ? kUInt8 : kFloat32);
}

void meta_quantized_linear_dynamic(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  const TensorImpl& pw = need(m, 1, "packed_weight");
  TESSERA_CHECK(x.dtype() == kFloat32 && x.dim() >= 1, m.op_name, ": input must be float32 [..., in_features], got ",
                x.dtype(), " ", x.sizes(), "; convert with .to(kFloat32)");
  add_quantized_linear_output(m, x, check_quantized_linear_weights(m, pw), kFloat32);
}

void check_quint8_params(const MetaCall& m, int scale_attr, const char* scale_name, const char* zp_name) {
  check_quant_scale(m, attr_double(m, scale_attr), scale_name);
  const int64_t zp = attr_int(m, scale_attr + 1);
  TESSERA_CHECK(zp >= 0 && zp <= 255, m.op_name, ": ", zp_name, " ", zp, " is out of range for quint8; expected 0..255");
}

void meta_quantized_conv2d(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  const TensorImpl& w = need(m, 1, "weight");
  const TensorImpl& ws = need(m, 2, "weight_scale");
  TESSERA_CHECK((x.dtype() == kUInt8 || x.dtype() == kFloat32) && x.dim() == 4, m.op_name,
                ": input must be the uint8 representation [N, C, H, W] of a quint8 tensor, or float32 values to ",
                "quantize with input_scale and input_zero_point, got ", x.dtype(), " ", x.sizes());
  TESSERA_CHECK(w.dtype() == kInt8 && w.dim() == 4, m.op_name, ": weight must be int8 [out_channels, ",
                "in_channels/groups, kH, kW], got ", w.dtype(), " ", w.sizes());
  const int64_t oc = w.sizes()[0];
  TESSERA_CHECK(ws.dtype() == kFloat32 && ws.dim() == 1 && ws.sizes()[0] == oc, m.op_name,
                ": weight_scale must be float32 [", oc, "] (one scale per output channel), got ", ws.dtype(), " ",
                ws.sizes());
  int64_t stride[2], padding[2], dilation[2];
  attr_pair(m, 0, "stride", stride);
  attr_pair(m, 1, "padding", padding);
  attr_pair(m, 2, "dilation", dilation);
  Sz out = shape::conv2d<int64_t>(m.op_name, x.sizes(), w.sizes(), stride, padding, dilation, attr_int(m, 3));
  if (m.has(3)) {
    const TensorImpl& b = m.t(3);
    TESSERA_CHECK(b.dtype() == kFloat32 && b.dim() == 1 && b.sizes()[0] == oc, m.op_name, ": bias must be float32 [",
                  oc, "], got ", b.dtype(), " ", b.sizes());
  }
  check_quint8_params(m, 4, "input_scale", "input_zero_point");
  if (m.has(4)) {
    const TensorImpl& o = m.t(4);
    const IntArrayRef os = o.sizes(), want = out.ref();
    TESSERA_CHECK((o.dtype() == kUInt8 || o.dtype() == kFloat32) && std::equal(os.begin(), os.end(), want.begin(), want.end()),
                  m.op_name, ": other must be uint8 or float32 of the output's shape ", want, ", got ", o.dtype(), " ", os);
    check_quint8_params(m, 6, "other_scale", "other_zero_point");
  }
  check_quint8_params(m, 8, "output_scale", "output_zero_point");
  const DType dt = attr_dtype(m, 11);
  TESSERA_CHECK(dt == kUInt8 || dt == kQUInt8, m.op_name,
                ": out_dtype must be uint8 (requantised) or quint8 (requantised, then dequantized to float32), got ", dt);
  m.add_output(out, dt == kUInt8 ? kUInt8 : kFloat32);
}

void meta_softmax(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  shape::wrap(m.op_name, attr_int(m, 0), x.dim());
  if (x.numel() == 0 && !is_floating(x.dtype())) {  // PyTorch returns an empty input before its dtype check
    m.add_output(x.sizes(), x.dtype());
    return;
  }
  meta_unary_float_only(m);
}

void check_normalized(const MetaCall& m, const TensorImpl& x, IntArrayRef ns) {
  TESSERA_CHECK(!ns.empty(), m.op_name, ": normalized_shape must not be empty");
  bool ok = int64_t(ns.size()) <= x.dim();
  for (size_t i = 0; ok && i < ns.size(); ++i) ok = x.sizes()[size_t(x.dim()) - ns.size() + i] == ns[i];
  TESSERA_CHECK(ok, m.op_name, ": given normalized_shape=", ns, ", expected input with shape [*, ",
                shape::sizes_str(ns).substr(1), ", but got input of size ", x.sizes());
}

void meta_layer_norm(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  IntArrayRef ns = attr_ints(m, 0);
  check_floating_input(m, x);
  check_normalized(m, x, ns);
  for (int i = 1; i <= 2; ++i)
    if (m.has(i))
      TESSERA_CHECK(m.t(i).sizes() == ns, m.op_name, ": ", i == 1 ? "weight" : "bias", " must have shape ",
                    ns, ", got ", m.t(i).sizes());
  DType r = float_of(x.dtype());
  m.compute_dtype = r;
  m.cast_mask = 0b111;
  m.add_output(x.sizes(), r);
}

void meta_conv2d(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  const TensorImpl& w = need(m, 1, "weight");
  check_same_dtype(m, x, w, "input", "weight");
  int64_t stride[2], padding[2], dilation[2];
  attr_pair(m, 0, "stride", stride);
  attr_pair(m, 1, "padding", padding);
  attr_pair(m, 2, "dilation", dilation);
  int64_t groups = attr_int(m, 3);
  Sz out = shape::conv2d<int64_t>(m.op_name, x.sizes(), w.sizes(), stride, padding, dilation, groups);
  if (m.has(2)) {
    TESSERA_CHECK(m.t(2).dim() == 1 && m.t(2).sizes()[0] == w.sizes()[0], m.op_name,
                  ": bias must have shape [", w.sizes()[0], "], got ", m.t(2).sizes());
    check_same_dtype(m, x, m.t(2), "input", "bias");
  }
  m.add_output(out, x.dtype());
  // Note [Channels-last activations] (docs/semantics.md): PyTorch's rule, a channels-last input or
  // weight gives a channels-last output, so that consecutive convs keep the layout their kernels
  // read without a reorder.
  if (out.size() == 4 && (detail::suggests_channels_last(x) || detail::suggests_channels_last(w)))
    m.outputs[0].make_channels_last();
}

void meta_max_pool2d(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  int64_t kernel[2], stride[2], padding[2], dilation[2];
  attr_pair(m, 0, "kernel_size", kernel);
  attr_pair(m, 1, "stride", stride, kernel);
  attr_pair(m, 2, "padding", padding);
  attr_pair(m, 3, "dilation", dilation);
  m.add_output(shape::pool2d<int64_t>(m.op_name, x.sizes(), kernel, stride, padding, dilation), x.dtype());
  // Note [Channels-last activations] (docs/semantics.md): PyTorch's pools keep their input's layout
  // (a channels-last x is 4-D, and so is the output).
  if (detail::suggests_channels_last(x)) m.outputs[0].make_channels_last();
}

void meta_avg_pool2d(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(x.dtype() != kBool, m.op_name, ": not supported for bool tensors");
  int64_t kernel[2], stride[2], padding[2], dilation[2] = {1, 1};
  attr_pair(m, 0, "kernel_size", kernel);
  attr_pair(m, 1, "stride", stride, kernel);
  attr_pair(m, 2, "padding", padding);
  m.add_output(shape::pool2d<int64_t>(m.op_name, x.sizes(), kernel, stride, padding, dilation), x.dtype());
  if (detail::suggests_channels_last(x)) m.outputs[0].make_channels_last();  // as max_pool2d
}

void check_index_dtype(const MetaCall& m, const TensorImpl& idx, const char* name) {
  TESSERA_CHECK(idx.dtype() == kInt64 || idx.dtype() == kInt32, m.op_name, ": ", name,
                " must be an int64 or int32 tensor, got ", idx.dtype(), "; convert with .to(kInt64)");
}

void meta_embedding(MetaCall& m) {
  const TensorImpl& w = need(m, 0, "weight");
  const TensorImpl& idx = need(m, 1, "indices");
  TESSERA_CHECK(w.dim() == 2, m.op_name, ": weight must be 2-D (num_embeddings, embedding_dim), got ",
                w.sizes());
  check_index_dtype(m, idx, "indices");
  Sz out(idx.sizes());
  out.push_back(w.sizes()[1]);
  m.add_output(out, w.dtype());
}

void meta_sdpa(MetaCall& m) {
  const TensorImpl& q = need(m, 0, "query");
  const TensorImpl& k = need(m, 1, "key");
  const TensorImpl& v = need(m, 2, "value");
  check_same_dtype(m, q, k, "query", "key");
  check_same_dtype(m, q, v, "query", "value");
  // PyTorch refuses integer and bool attention ("expected scalar type Float but found Long").
  TESSERA_CHECK(is_floating(q.dtype()), m.op_name, ": query, key and value have dtype ", q.dtype(),
                "; expected a floating dtype (float16, bfloat16, float32 or float64); convert them with .to(float32)");
  Sz out = shape::attention<int64_t>(m.op_name, q.sizes(), k.sizes(), v.sizes());
  if (m.has(3)) {
    const TensorImpl& mask = m.t(3);
    Sz scores(q.sizes().begin(), q.sizes().end() - 1);
    scores.push_back(k.sizes()[size_t(k.dim() - 2)]);
    shape::check_broadcast_to<int64_t>(m.op_name, mask.sizes(), scores.ref());
    // PyTorch's rule: a float32 mask is added in float32 to the float32 scores of every floating
    // query dtype, without rounding it to the query's dtype first.
    TESSERA_CHECK(mask.dtype() == kBool || mask.dtype() == kFloat32 || mask.dtype() == q.dtype(), m.op_name,
                  ": attn_mask has dtype ", mask.dtype(), "; expected bool, float32 or the query's dtype ", q.dtype(),
                  " (convert it with .to(", q.dtype(), "))");
    TESSERA_CHECK(!attr_bool(m, 0), m.op_name, ": give either attn_mask or is_causal=true, not both");
  }
  m.compute_dtype = q.dtype();
  m.cast_mask = 0b111;
  m.add_output(out, q.dtype());
}

void list_shapes(const MetaCall& m, shape::Sizes<IntArrayRef>& shapes, DType* common) {
  TESSERA_CHECK(m.list_size > 0, m.op_name, ": expected a non-empty list of tensors");
  ResultTypeState s;
  for (int i = 0; i < m.list_size; ++i) {
    const TensorImpl* t = m.tensors[m.list_begin + i];
    TESSERA_CHECK(t, m.op_name, ": tensor ", i, " of the list is undefined");
    shapes.push_back(t->sizes());
    s.add_tensor(t->dtype(), false, false);
  }
  *common = s.result();
}

void meta_cat(MetaCall& m) {
  shape::Sizes<IntArrayRef> shapes;
  DType common;
  list_shapes(m, shapes, &common);
  Sz out = shape::cat<int64_t>(m.op_name, shapes.data(), shapes.size(), attr_int(m, 0));
  m.compute_dtype = common;
  m.cast_all = true;
  m.add_output(out, common);
}

void meta_stack(MetaCall& m) {
  shape::Sizes<IntArrayRef> shapes;
  DType common;
  list_shapes(m, shapes, &common);
  Sz out = shape::stack<int64_t>(m.op_name, shapes.data(), shapes.size(), attr_int(m, 0));
  m.compute_dtype = common;
  m.cast_all = true;
  m.add_output(out, common);
}

void meta_index_select(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  const TensorImpl& idx = need(m, 1, "index");
  check_index_dtype(m, idx, "index");
  TESSERA_CHECK(idx.dim() <= 1, m.op_name, ": index must be 0-D or 1-D, got shape ", idx.sizes());
  int64_t d = shape::wrap(m.op_name, attr_int(m, 0), x.dim());
  Sz out(x.sizes());
  if (x.dim() > 0) out[size_t(d)] = idx.numel();
  m.add_output(out, x.dtype());
}

void meta_gather(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  const TensorImpl& idx = need(m, 1, "index");
  check_index_dtype(m, idx, "index");
  int64_t d = shape::wrap(m.op_name, attr_int(m, 0), x.dim());
  TESSERA_CHECK(idx.dim() == x.dim() || (x.dim() == 0 && idx.dim() <= 1), m.op_name,
                ": index must have as many dimensions as self (", x.dim(), "), got ", idx.dim());
  for (int64_t i = 0; i < x.dim(); ++i)
    TESSERA_CHECK(i == d || idx.sizes()[size_t(i)] <= x.sizes()[size_t(i)], m.op_name, ": size of index ",
                  idx.sizes(), " must not exceed self ", x.sizes(), " except at dimension ", d);
  m.add_output(idx.sizes(), x.dtype());
}

void meta_rms_norm(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  IntArrayRef ns = attr_ints(m, 0);
  check_floating_input(m, x);
  check_normalized(m, x, ns);
  if (m.has(1))
    TESSERA_CHECK(m.t(1).sizes() == ns, m.op_name, ": weight must have shape ", ns, ", got ", m.t(1).sizes());
  DType r = float_of(x.dtype());
  m.compute_dtype = r;
  m.cast_mask = 0b11;
  m.add_output(x.sizes(), r);
}

// Note [Core op set]: the names and schemas are the contract with every backend plugin. They are
// declared in dispatcher/ops/ops.json (Note [Op contract]); each op's "shape_rule" names one of the
// meta_<rule> functions above.
constexpr MetaFn meta_binary_arith = meta_binary<Bin::Arith>;
constexpr MetaFn meta_binary_sub = meta_binary<Bin::Sub>;
constexpr MetaFn meta_binary_pow = meta_binary<Bin::Pow>;
constexpr MetaFn meta_binary_true_div = meta_binary<Bin::TrueDiv>;
constexpr MetaFn meta_binary_compare = meta_binary<Bin::Compare>;
constexpr MetaFn meta_binary_logical = meta_binary<Bin::Logical>;

const CoreOpDef kCoreOps[] = {
#include "op_catalogue.inc"
};

}  // namespace

const CoreOpDef* core_op_defs(size_t* count) {
  *count = sizeof(kCoreOps) / sizeof(kCoreOps[0]);
  return kCoreOps;
}

// Composites: decompositions that run on any device whose plugin lacks a kernel for the op.
void register_core_composites(Dispatcher& d) {
  d.register_composite(d.op("_to_copy"), [](const Stack& args) -> Stack {
    const Tensor& self = std::get<Tensor>(args[0]);
    DType dt = std::holds_alternative<DType>(args[1]) ? std::get<DType>(args[1]) : self.dtype();
    Tensor out = make_tensor(self.sizes(), dt, self.device());
    out.copy_(self);
    return {out};
  });
  d.register_composite(d.op("clone"), [](const Stack& args) -> Stack {
    const Tensor& self = std::get<Tensor>(args[0]);
    Tensor out = make_tensor(self.sizes(), self.dtype(), self.device());
    out.copy_(self);
    return {out};
  });
  d.register_composite(d.op("contiguous"), [](const Stack& args) -> Stack {
    const Tensor& self = std::get<Tensor>(args[0]);
    if (self.is_contiguous()) return {self};
    Tensor out = make_tensor(self.sizes(), self.dtype(), self.device());
    out.copy_(self);
    return {out};
  });
  d.register_composite(d.op("empty_strided"), [](const Stack& args) -> Stack {
    const auto& sizes = std::get<std::vector<int64_t>>(args[0]);
    const auto& strides = std::get<std::vector<int64_t>>(args[1]);
    DType dt = std::holds_alternative<DType>(args[2]) ? std::get<DType>(args[2]) : default_dtype();
    return {make_tensor_strided(sizes, strides, dt, Device(DeviceType::CPU))};
  });
  register_quantization_composites(d);
  d.register_composite(d.op("linear"), [](const Stack& args) -> Stack {
    const Tensor& x = std::get<Tensor>(args[0]);
    const Tensor& w = std::get<Tensor>(args[1]);
    Tensor out = matmul(x, w.t());
    if (const auto* b = std::get_if<std::optional<Tensor>>(&args[2]); b && *b) out = add(out, **b);
    return {out};
  });
}

}  // namespace tessera
